"""Optimizers with MXNet 1.9.1's update rules (``mx.optimizer``, also reachable as
``mxdeconv.optimizer``): :class:`SGD`, :class:`NAG`, :class:`Adam`, :class:`RMSProp`.

Each update computes what MXNet's CPU kernel computes, in the weight's dtype
(float32 for float16/bfloat16 weights, rounded back), with the hyperparameters
rounded to float32 as MXNet's operator parameters are:

* ``SGD``: ``g = clip(rescale_grad * grad)``; with momentum
  ``mom = momentum * mom - lr * (wd * w + g)``, ``w += mom``; without,
  ``w -= lr * (wd * w + g)`` (MXNet's aggregated ``multi_sgd(_mom)_update``: the
  Trainer hands it up to 4 parameters of a dtype at once, which share one
  ``num_update`` for the learning-rate schedule);
* ``NAG``: ``m = momentum * mom``,
  ``w' = w - m + (1 + momentum) * (m - lr * (g + wd * w))``,
  ``mom = m - lr * (g + wd * w')`` (MXNet's kernel writes the weight before it
  updates the momentum, so the decay term there sees the new weight); without
  momentum ``w = (1 - lr * wd) * w - lr * g``;
* ``Adam``: ``g = clip(rescale_grad * grad + wd * w)``, ``m``, ``v`` moving averages,
  ``w -= lr_t * m / (sqrt(v) + epsilon)`` with the bias correction folded into the
  learning rate, ``lr_t = lr * sqrt(1 - beta2 ** t) / (1 - beta1 ** t)``, ``t``
  the parameter's own update count;
* ``RMSProp``: ``n = (1 - gamma1) * g * g + gamma1 * n``,
  ``w -= lr * g / sqrt(n + epsilon)``; ``centered=True`` (Graves) also keeps
  ``gm = (1 - gamma1) * g + gamma1 * gm`` and
  ``delta = gamma2 * delta - lr * g / sqrt(n - gm * gm + epsilon)``, ``w += delta``;
  ``clip_weights`` clips the result.

``clip_gradient`` clips when it is positive (MXNet ignores 0 and negative
values); ``lr_mult``/``wd_mult`` come from the Trainer's parameters.

>>> from mxdeconv import nd, optimizer
>>> sgd = optimizer.create("sgd", learning_rate=0.1, momentum=0.9)
>>> weight, grad = nd.array([1.0, 2.0]), nd.array([0.5, -1.0])
>>> state = sgd.create_state(0, weight)
>>> sgd.update(0, weight, grad, state)
>>> weight.asnumpy(), state.asnumpy()
(array([0.95, 2.1 ], dtype=float32), array([-0.05,  0.1 ], dtype=float32))
"""
from .base import Optimizer, create, register
from .rules import NAG, SGD, Adam, RMSProp

# The optimizers are this package's names (mx.optimizer.SGD), as such in reprs
# and pickles; importing the rules registers them (create("sgd")).
for _cls in (Optimizer, SGD, NAG, Adam, RMSProp):
    _cls.__module__ = __name__
del _cls

__all__ = ["Adam", "NAG", "Optimizer", "RMSProp", "SGD", "create", "register"]
