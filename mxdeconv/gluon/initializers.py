"""Gluon initializers (MXNet's ``mx.init``): :class:`Initializer`, :class:`Uniform`,
:class:`Normal`, :class:`Constant`, :class:`Zero`, :class:`One`, :class:`Xavier`,
and the names they go by (``"zeros"``, ``"xavier"``...)."""
from __future__ import annotations

import math
from typing import Any, Tuple

import numpy as np

from mxdeconv._core.errors import MXNetError

from ._args import _choice_arg, _real_arg, _type_error


# -- initializers ----------------------------------------------------------------
class Initializer:
    """Base initializer, MXNet-style: parameters named ``*weight`` get
    :meth:`_init_weight`, ``*bias`` get zeros.

    >>> from mxdeconv import gluon
    >>> gluon.Constant(2.0)("dense0_weight", (2,), "float32").tolist()
    [2.0, 2.0]
    """

    def __call__(self, name: str, shape: Tuple[int, ...], dtype: Any) -> np.ndarray:
        if name.endswith("bias"):
            values = np.zeros(shape)
        else:
            values = self._init_weight(name, shape)
        return np.asarray(values, dtype=dtype)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement _init_weight")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Uniform(Initializer):
    """Uniform in ``[-scale, scale]``; MXNet's default ``scale=0.07``.

    >>> import numpy as np
    >>> from mxdeconv import gluon
    >>> w = gluon.Uniform()("conv0_weight", (1000,), "float32")
    >>> bool(np.abs(w).max() <= 0.07)
    True
    """

    def __init__(self, scale: float = 0.07) -> None:
        self.scale = _real_arg("Uniform scale", scale, minimum=0.0)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        return np.random.uniform(-self.scale, self.scale, size=shape)


class Normal(Initializer):
    """Normal with mean 0 and standard deviation ``sigma`` (MXNet default 0.01).

    >>> from mxdeconv import gluon
    >>> gluon.Normal(0.02)("conv0_weight", (3,), "float32").shape
    (3,)
    """

    def __init__(self, sigma: float = 0.01) -> None:
        self.sigma = _real_arg("Normal sigma", sigma, minimum=0.0)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        return np.random.normal(0.0, self.sigma, size=shape)


class Constant(Initializer):
    """Every weight entry ``value`` (biases too, unlike the other initializers).

    >>> from mxdeconv import gluon
    >>> gluon.Constant(0.5)("conv0_bias", (2,), "float32").tolist()
    [0.5, 0.5]
    """

    def __init__(self, value: float) -> None:
        self.value = _real_arg("Constant value", value)

    def __call__(self, name: str, shape: Tuple[int, ...], dtype: Any) -> np.ndarray:
        return np.full(shape, self.value, dtype=dtype)


class Zero(Constant):
    """Zeros (``"zeros"``).

    >>> from mxdeconv import gluon
    >>> gluon.Zero()("conv0_weight", (2,), "float32").tolist()
    [0.0, 0.0]
    """

    def __init__(self) -> None:
        super().__init__(0.0)


class One(Constant):
    """Ones (``"ones"``).

    >>> from mxdeconv import gluon
    >>> gluon.One()("conv0_weight", (2,), "float32").tolist()
    [1.0, 1.0]
    """

    def __init__(self) -> None:
        super().__init__(1.0)


class Xavier(Initializer):
    """MXNet's ``Xavier(rnd_type, factor_type, magnitude)``.

    ``fan_in = shape[1] * prod(shape[2:])``, ``fan_out = shape[0] * prod(shape[2:])``
    (MXNet's convention, whatever the layer); the scale is
    ``sqrt(magnitude / factor)`` with factor the average of the fans
    (``"avg"``), ``fan_in`` or ``fan_out``.

    >>> import numpy as np
    >>> from mxdeconv import gluon
    >>> w = gluon.Xavier()("conv0_weight", (4, 4, 3, 3), "float32")
    >>> bool(np.abs(w).max() <= np.sqrt(3 / 36))
    True
    """

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg",
                 magnitude: float = 3) -> None:
        self.rnd_type = _choice_arg("Xavier rnd_type", rnd_type, ("uniform", "gaussian"))
        self.factor_type = _choice_arg("Xavier factor_type", factor_type, ("avg", "in", "out"))
        self.magnitude = _real_arg("Xavier magnitude", magnitude, minimum=0.0)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        if len(shape) < 2:
            raise MXNetError(f"Xavier needs at least 2 dims, got shape {shape} for {name}")
        receptive = math.prod(shape[2:])
        fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        scale = math.sqrt(self.magnitude / factor)
        if self.rnd_type == "uniform":
            return np.random.uniform(-scale, scale, size=shape)
        return np.random.normal(0.0, scale, size=shape)


_NAMED = {"zeros": Zero, "zero": Zero, "ones": One, "one": One, "uniform": Uniform,
          "normal": Normal, "xavier": Xavier}


def _create_initializer(init: Any, name: str = "init") -> Initializer:
    """An :class:`Initializer` given as itself or by name (``"zeros"``, ``"xavier"``...)."""
    if isinstance(init, Initializer):
        return init
    expected = f"an Initializer or one of {sorted(_NAMED)}"
    if not isinstance(init, str):
        raise _type_error(name, expected, init)
    if init.lower() not in _NAMED:
        raise MXNetError(f"unknown initializer: {name} must be {expected}, got {init!r}")
    return _NAMED[init.lower()]()


def _initializer_arg(name: str, init: Any) -> Any:
    """None or what :func:`_create_initializer` accepts, checked now, kept as given."""
    if init is not None:
        _create_initializer(init, name)
    return init
