"""MXNet 1.9.1 Gluon's parameter-free layers (``gluon.nn``): :class:`Activation`,
:class:`LeakyReLU`, :class:`ELU`, :class:`SELU`, :class:`GELU`, :class:`Swish`,
:class:`PReLU` (one learned slope), :class:`Dropout`, :class:`Identity`,
:class:`Flatten`, :class:`Lambda` and :class:`HybridLambda`.

Each computes with the :mod:`mxdeconv.nd` operator MXNet's layer calls, so
gradients flow through :mod:`mxdeconv.autograd` as in MXNet.

>>> from mxdeconv import nd
>>> from mxdeconv.gluon import nn
>>> net = nn.HybridSequential()
>>> net.add(nn.Activation("relu"), nn.LeakyReLU(0.2), nn.Dropout(0.5), nn.Identity())
>>> net(nd.array([-1.0, 2.0])).asnumpy()        # outside training Dropout passes x
array([0., 2.], dtype=float32)
>>> net
HybridSequential(
  (0): Activation(relu)
  (1): LeakyReLU(0.2)
  (2): Dropout(p = 0.5, axes=())
  (3): Identity()
)
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from mxdeconv import nd as _nd
from mxdeconv.autograd import tape
from mxdeconv._core.args import ints_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv.initializer import Constant
from mxdeconv.ndarray.ndarray import NDArray, array
from mxdeconv.semantics.activations import ACT_TYPES

from ._args import _choice_arg, _int_arg, _real_arg, _type_error
from .block import Block, HybridBlock

__all__ = ["Activation", "Dropout", "ELU", "Flatten", "GELU", "HybridLambda", "Identity",
           "Lambda", "LeakyReLU", "PReLU", "SELU", "Swish"]


def _data(owner: str, x: Any) -> NDArray:
    """``x`` as an NDArray (a NumPy array or nested list copied, as ``nd.array``)."""
    if isinstance(x, NDArray):
        return x
    if isinstance(x, (np.ndarray, list, tuple)):
        return array(x)
    raise _type_error(f"{owner}: x", "an NDArray", x)


class Activation(HybridBlock):
    """``nd.Activation(x, act_type=activation)``: ``"relu"``, ``"sigmoid"``,
    ``"tanh"``, ``"softrelu"`` or ``"softsign"``.  Its automatic prefix is the
    act_type (``relu0_``), as in MXNet.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.Activation("tanh")(nd.array([0.0])).asnumpy()
    array([0.], dtype=float32)
    """

    def __init__(self, activation: str, **kwargs: Any) -> None:
        self._act_type = _choice_arg("activation", activation, ACT_TYPES)
        super().__init__(**kwargs)

    def _alias(self) -> str:
        return self._act_type

    def hybrid_forward(self, F: Any, x: Any) -> NDArray:
        return F.Activation(_data("Activation", x), act_type=self._act_type, name="fwd")

    def __repr__(self) -> str:
        return f"Activation({self._act_type})"


class LeakyReLU(HybridBlock):
    """``x`` above 0, ``alpha * x`` below (``nd.LeakyReLU(x, act_type="leaky",
    slope=alpha)``); ``alpha >= 0``.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.LeakyReLU(0.2)(nd.array([-1.0, 1.0])).asnumpy()
    array([-0.2,  1. ], dtype=float32)
    """

    def __init__(self, alpha: float, **kwargs: Any) -> None:
        alpha = _real_arg("alpha", alpha)
        if alpha < 0:
            raise MXNetError(f"Slope coefficient for LeakyReLU must be no less than 0, got "
                             f"alpha={alpha!r}")
        self._alpha = alpha
        super().__init__(**kwargs)

    def hybrid_forward(self, F: Any, x: Any) -> NDArray:
        return F.LeakyReLU(_data("LeakyReLU", x), act_type="leaky", slope=self._alpha,
                           name="fwd")

    def __repr__(self) -> str:
        return f"LeakyReLU({self._alpha!r})"


class _LeakyFamily(HybridBlock):
    """A layer that is ``nd.LeakyReLU`` with a fixed act_type (and slope)."""

    _act_type = ""

    def __init__(self, slope: float = 0.0, **kwargs: Any) -> None:
        self._slope = slope
        super().__init__(**kwargs)

    def hybrid_forward(self, F: Any, x: Any) -> NDArray:
        return F.LeakyReLU(_data(type(self).__name__, x), act_type=self._act_type,
                           slope=self._slope, name="fwd")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ELU(_LeakyFamily):
    """``x`` above 0, ``alpha * (exp(x) - 1)`` below.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.ELU()(nd.array([0.0, 1.0])).asnumpy()
    array([0., 1.], dtype=float32)
    """

    _act_type = "elu"

    def __init__(self, alpha: float = 1.0, **kwargs: Any) -> None:
        super().__init__(_real_arg("alpha", alpha), **kwargs)


class SELU(_LeakyFamily):
    """The scaled ELU of Klambauer et al. (``nd.LeakyReLU(act_type="selu")``)."""

    _act_type = "selu"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(0.0, **kwargs)


class GELU(_LeakyFamily):
    """``x * Phi(x)`` (``nd.LeakyReLU(act_type="gelu")``, with erf)."""

    _act_type = "gelu"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(0.0, **kwargs)


class Swish(HybridBlock):
    """``x * sigmoid(beta * x)``.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.Swish()(nd.array([0.0])).asnumpy()
    array([0.], dtype=float32)
    """

    def __init__(self, beta: float = 1.0, **kwargs: Any) -> None:
        self._beta = _real_arg("beta", beta)
        super().__init__(**kwargs)

    def hybrid_forward(self, F: Any, x: Any) -> NDArray:
        x = _data("Swish", x)
        return x * F.sigmoid(self._beta * x, name="fwd")


class PReLU(HybridBlock):
    """``x`` above 0, ``alpha * x`` below, ``alpha`` learned: a parameter of
    ``in_channels`` slopes (default one), initialised by ``alpha_initializer``
    (MXNet's default ``Constant(0.25)``).

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> layer = nn.PReLU()
    >>> layer.initialize()
    >>> layer(nd.array([-4.0, 1.0])).asnumpy()
    array([-1.,  1.], dtype=float32)
    """

    def __init__(self, alpha_initializer: Any = None, in_channels: int = 1,
                 **kwargs: Any) -> None:
        in_channels = _int_arg("in_channels", in_channels, minimum=1)
        super().__init__(**kwargs)
        with self.name_scope():
            self.alpha = self.params.get(
                "alpha", shape=(in_channels,),
                init=Constant(0.25) if alpha_initializer is None else alpha_initializer)

    def hybrid_forward(self, F: Any, x: Any, alpha: NDArray) -> NDArray:
        return F.LeakyReLU(_data("PReLU", x), alpha, act_type="prelu", name="fwd")


class Dropout(HybridBlock):
    """MXNet's ``nn.Dropout(rate, axes=())``: in training (inside
    ``autograd.record()``) each element is zeroed with probability ``rate`` and
    the others scaled by ``1 / (1 - rate)`` (one draw shared along ``axes``);
    outside training the input passes unchanged.  The mask comes from NumPy's
    global generator (other numbers than MXNet's, the same distribution); the
    gradient is the same mask, through the recorded multiplication.

    >>> import numpy as np
    >>> from mxdeconv import autograd, nd
    >>> from mxdeconv.gluon import nn
    >>> np.random.seed(0)
    >>> with autograd.record():
    ...     y = nn.Dropout(0.5)(nd.ones((1000,)))
    >>> sorted(set(y.asnumpy().tolist()))
    [0.0, 2.0]
    """

    def __init__(self, rate: float, axes: Any = (), **kwargs: Any) -> None:
        rate = _real_arg("rate", rate)
        if not 0 <= rate <= 1:
            raise MXNetError(f"Dropout rate must be in [0, 1], got rate={rate!r}")
        self._rate = rate
        self._axes = ints_arg("axes", axes)
        super().__init__(**kwargs)

    def hybrid_forward(self, F: Any, x: Any) -> NDArray:
        x = _data("Dropout", x)
        if self._rate == 0 or not tape.is_training():
            return x
        shape = list(x.shape)
        for axis in self._axes:
            if not -x.ndim <= axis < x.ndim:
                raise MXNetError(f"Dropout: axes={self._axes} out of range for input of "
                                 f"shape {x.shape}")
            shape[axis] = 1
        keep = 1.0 - self._rate
        if keep == 0:
            mask = np.zeros(shape)
        else:
            mask = (np.random.uniform(size=shape) < keep) / keep
        return x * array(mask, dtype=x.dtype)

    def __repr__(self) -> str:
        return f"Dropout(p = {self._rate}, axes={self._axes})"


class Identity(HybridBlock):
    """Returns its input, for skip connections.  MXNet 1.9.1 has it in
    ``gluon.contrib.nn`` (also :mod:`mxdeconv.gluon.contrib.nn`); it is in
    ``nn`` here too, as in MXNet 2.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.Identity()(nd.ones((2,))).asnumpy()
    array([1., 1.], dtype=float32)
    """

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return x


class Flatten(HybridBlock):
    """``x`` as ``(batch, -1)`` (MXNet's ``nn.Flatten``).

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.Flatten()(nd.ones((2, 3, 4))).shape
    (2, 12)
    """

    def hybrid_forward(self, F: Any, x: Any) -> NDArray:
        return F.Flatten(_data("Flatten", x))

    def __repr__(self) -> str:
        return "Flatten"


def _function(owner: str, function: Any, where: Any) -> Tuple[str, Callable[..., Any]]:
    """``function`` as (a name for repr, the callable): a name of an ``nd``
    function (``"tanh"``) or a callable."""
    if isinstance(function, str):
        found = getattr(where, function, None)
        if not callable(found):
            raise MXNetError(f"{owner}: function={function!r} is not a function of "
                             "mxdeconv.nd")
        return function, found
    if not callable(function):
        raise _type_error(f"{owner}: function", "a function or the name of an nd function",
                          function)
    return getattr(function, "__name__", repr(function)), function


class Lambda(Block):
    """Wraps a function: ``Lambda("tanh")`` (a name of an ``nd`` function) or
    ``Lambda(lambda x: x * 2)``; extra arguments of the call are passed on.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.Lambda(lambda x: x * 2)(nd.ones((1,))).asnumpy()
    array([2.], dtype=float32)
    """

    def __init__(self, function: Union[str, Callable[..., Any]],
                 prefix: Optional[str] = None) -> None:
        self._func_name, self._func = _function("Lambda", function, _nd)
        super().__init__(prefix=prefix)

    def forward(self, *args: Any) -> Any:
        return self._func(*args)

    def __repr__(self) -> str:
        return f"Lambda({self._func_name})"


class HybridLambda(HybridBlock):
    """Wraps ``function(F, x, *args)``, or a name of an ``nd`` function
    (``HybridLambda("tanh")``), ``F`` being :mod:`mxdeconv.nd`.

    >>> from mxdeconv import nd
    >>> from mxdeconv.gluon import nn
    >>> nn.HybridLambda(lambda F, x: F.relu(x))(nd.array([-1.0, 1.0])).asnumpy()
    array([0., 1.], dtype=float32)
    """

    def __init__(self, function: Union[str, Callable[..., Any]],
                 prefix: Optional[str] = None) -> None:
        if isinstance(function, str):
            name, func = _function("HybridLambda", function, _nd)
            self._func_name, self._func = name, (lambda F, *args: getattr(F, name)(*args))
        else:
            self._func_name, self._func = _function("HybridLambda", function, None)
        super().__init__(prefix=prefix)

    def hybrid_forward(self, F: Any, x: Any, *args: Any) -> Any:
        return self._func(F, x, *args)

    def __repr__(self) -> str:
        return f"HybridLambda({self._func_name})"
