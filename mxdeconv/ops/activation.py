"""MXNet's ``Activation`` operator on NDArrays (``nd.Activation``), recorded by autograd.

The arithmetic is :mod:`mxdeconv.semantics.activations`'s, in NumPy on the default layout
(a blocked input is turned into the default layout first, in place).  The
gradient is MXNet's: from the output for relu, sigmoid, tanh and softrelu,
from the input for softsign; the output is recomputed from the recorded
input, which gives exactly the forward's values.

>>> from mxdeconv import nd
>>> nd.Activation(nd.array([-1.0, 0.0, 1.0]), act_type="softsign").asnumpy()
array([-0.5,  0. ,  0.5], dtype=float32)
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from mxdeconv.semantics import activations
from mxdeconv.autograd import tape
from mxdeconv._core.buffers import aligned_empty
from mxdeconv.ndarray.gradients import deliver
from mxdeconv.ndarray.ndarray import NDArray, as_ndarray
from .validation import check_target

__all__ = ["Activation"]


def Activation(data: Any, act_type: str, out: Optional[NDArray] = None,
               name: Optional[str] = None) -> NDArray:
    """Applies an activation function elementwise (MXNet's ``nd.Activation``).

    Args:
        data: an NDArray or a NumPy array (copied) of floats.
        act_type: ``"relu"``, ``"sigmoid"``, ``"softrelu"`` (``log(1 + exp(x))``),
            ``"softsign"`` (``x / (1 + |x|)``) or ``"tanh"``.
        out: an NDArray of ``data``'s shape and dtype to write the result into
            (it may be ``data`` itself, outside :func:`mxdeconv.autograd.record`).
        name: accepted for MXNet compatibility; ignored.

    16-bit floats are computed in float32.  Recorded by autograd.

    >>> from mxdeconv import nd
    >>> nd.Activation(nd.array([-1.0, 0.0, 2.0]), act_type="relu").asnumpy()
    array([0., 0., 2.], dtype=float32)
    >>> nd.Activation(nd.array([0.0, 30.0]), act_type="softrelu").asnumpy()
    array([ 0.6931472, 30.       ], dtype=float32)
    """
    act_type = activations.check_act_type("act_type", act_type)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string or None, got {name!r} of type "
                        f"{type(name).__name__}")
    arr = as_ndarray(data, "Activation: data")
    values = arr._plain()
    if out is None:
        result = NDArray(activations.forward(values, act_type,
                                            aligned_empty(values.shape, values.dtype)))
    else:
        check_target("out", out, arr.shape, arr.dtype)
        tape.check_assignable("out", out)
        tape.check_not_in_place("out", out, out is arr or np.may_share_memory(
            out._state[0], arr._state[0]), (arr,))
        activations.forward(values, act_type, out._plain())
        out._bump()
        result = out
    return tape.record_op("Activation", result, (arr,), act_type)


@tape.register_backward("Activation")
def _activation_backward(out_grad: Any, inputs: Any, act_type: str, reqs: Any,
                         targets: Any) -> tuple:
    (arr,), (req,), (target,) = inputs, reqs, targets
    if req == "null":
        return (None,)
    x = arr._plain()
    values = activations.forward(x, act_type) if act_type in activations.GRADIENT_FROM_OUTPUT \
        else x
    grad = activations.gradient(out_grad._plain(), values, act_type, arr.dtype)
    return (deliver(grad, req, target, grad.dtype),)
