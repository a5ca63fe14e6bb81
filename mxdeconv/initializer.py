"""MXNet's initializers (``mx.init``, also ``mx.initializer``): :class:`Initializer`,
:class:`Uniform`, :class:`Normal`, :class:`Constant`, :class:`Zero`, :class:`One`,
:class:`Xavier`, :class:`MSRAPrelu`, :class:`Mixed`, and the names they go by
(``"zeros"``, ``"xavier"``...), with MXNet 1.9.1's arguments and formulas.

``mxdeconv.init`` is this module (as ``mx.init`` is ``mx.initializer``), and
:mod:`mxdeconv.gluon` re-exports the classes (``gluon.Normal``).  Random values
come from NumPy's global generator (``np.random.seed`` makes them repeatable);
they cannot equal MXNet's value for value, only in distribution.

>>> import numpy as np
>>> from mxdeconv import gluon, init, nd
>>> layer = gluon.nn.Conv2DTranspose(2, 4, in_channels=2)
>>> layer.initialize(init.Normal(0.02))
>>> kernel = np.ones((2, 2, 4, 4), dtype=np.float32)
>>> layer.initialize(init.Constant(nd.array(kernel)), force_reinit=True)
>>> float(layer.weight.data().asnumpy().sum()), float(layer.bias.data().asnumpy().sum())
(64.0, 0.0)
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Any, List, Sequence, Tuple, Union

import numpy as np

from mxdeconv._core.args import finite_real_arg as _real_arg
from mxdeconv._core.args import option_arg as _choice_arg
from mxdeconv._core.args import type_error as _type_error
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.ndarray import NDArray

__all__ = ["Constant", "Initializer", "MSRAPrelu", "Mixed", "Normal", "One", "Uniform",
           "Xavier", "Zero", "create"]


# -- initializers ----------------------------------------------------------------
class Initializer:
    """Base initializer, MXNet-style: parameters named ``*weight`` get
    :meth:`_init_weight`, ``*bias`` get zeros.

    >>> from mxdeconv import init
    >>> init.Constant(2.0)("dense0_weight", (2,), "float32").tolist()
    [2.0, 2.0]
    """

    def __call__(self, name: str, shape: Tuple[int, ...], dtype: Any) -> np.ndarray:
        """The values of parameter ``name``: MXNet's table by the name's end
        (``weight``: :meth:`_init_weight`; ``bias``, ``beta``, ``running_mean``:
        zeros; ``gamma``, ``running_var``: ones).  Gluon's layers give each
        parameter that is not a weight its own initializer (``'zeros'``,
        ``'ones'``), so the table matters only for parameters made without one."""
        if name.endswith(("bias", "beta", "running_mean", "moving_mean")):
            values = np.zeros(shape)
        elif name.endswith(("gamma", "running_var", "moving_var")):
            values = np.ones(shape)
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
    >>> from mxdeconv import init
    >>> w = init.Uniform()("conv0_weight", (1000,), "float32")
    >>> bool(np.abs(w).max() <= 0.07)
    True
    """

    def __init__(self, scale: float = 0.07) -> None:
        self.scale = _real_arg("Uniform scale", scale, minimum=0.0)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        return np.random.uniform(-self.scale, self.scale, size=shape)


class Normal(Initializer):
    """Normal with mean 0 and standard deviation ``sigma`` (MXNet default 0.01).

    >>> from mxdeconv import init
    >>> init.Normal(0.02)("conv0_weight", (3,), "float32").shape
    (3,)
    """

    def __init__(self, sigma: float = 0.01) -> None:
        self.sigma = _real_arg("Normal sigma", sigma, minimum=0.0)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        return np.random.normal(0.0, self.sigma, size=shape)


class Constant(Initializer):
    """Every entry ``value`` (biases too, unlike the other initializers):
    a number, or an array (NumPy array, NDArray or nested list) broadcast to
    the parameter's shape, as MXNet's ``arr[:] = value``: the usual way to
    give an upsampling layer a bilinear kernel.

    >>> import numpy as np
    >>> from mxdeconv import init, nd
    >>> init.Constant(0.5)("conv0_bias", (2,), "float32").tolist()
    [0.5, 0.5]
    >>> init.Constant(nd.array([1, 2]))("conv0_weight", (2, 2), "float32").tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """

    def __init__(self, value: Any) -> None:
        self.value: Union[float, np.ndarray] = _constant_value(value)

    def __call__(self, name: str, shape: Tuple[int, ...], dtype: Any) -> np.ndarray:
        return self._init_weight(name, shape).astype(dtype)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        if isinstance(self.value, float):
            return np.full(shape, self.value)
        try:
            return np.array(np.broadcast_to(self.value, shape))
        except ValueError as err:
            raise MXNetError(f"Constant value of shape {self.value.shape} cannot initialize "
                             f"parameter '{name}' of shape {tuple(shape)}: it must have that "
                             "shape or broadcast to it") from err

    def __repr__(self) -> str:
        value = self.value if isinstance(self.value, float) else f"array{self.value.shape}"
        return f"Constant(value={value})"


def _constant_value(value: Any) -> Union[float, np.ndarray]:
    """Constant's ``value``: a finite number as a float, an array of finite real
    numbers as a float64 NumPy copy (so that later writes to the caller's array
    do not change it)."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return _real_arg("Constant value", value)
    expected = "a real number, a NumPy array, an NDArray or a nested list of numbers"
    if isinstance(value, NDArray):
        values = value.asnumpy()
    elif isinstance(value, (np.ndarray, list, tuple)):
        try:
            values = np.array(value)
        except (TypeError, ValueError) as err:
            raise _type_error("Constant value", expected, value) from err
    else:
        raise _type_error("Constant value", expected, value)
    if values.dtype.kind not in "iuf" and values.dtype.name != "bfloat16":
        raise _type_error("Constant value", expected, value)
    values = values.astype(np.float64)
    if not np.isfinite(values).all():
        bad = values.size - int(np.isfinite(values).sum())
        raise MXNetError(f"Constant value must hold finite numbers, got {bad} non-finite "
                         f"of {values.size}")
    return values


class Zero(Constant):
    """Zeros (``"zeros"``).

    >>> from mxdeconv import init
    >>> init.Zero()("conv0_weight", (2,), "float32").tolist()
    [0.0, 0.0]
    """

    def __init__(self) -> None:
        super().__init__(0.0)


class One(Constant):
    """Ones (``"ones"``).

    >>> from mxdeconv import init
    >>> init.One()("conv0_weight", (2,), "float32").tolist()
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
    >>> from mxdeconv import init
    >>> w = init.Xavier()("conv0_weight", (4, 4, 3, 3), "float32")
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


class MSRAPrelu(Xavier):
    """MXNet's ``MSRAPrelu(factor_type="avg", slope=0.25)``: He et al.'s
    initialisation for PReLU networks, a gaussian :class:`Xavier` with
    ``magnitude = 2 / (1 + slope ** 2)``.

    >>> from mxdeconv import init
    >>> init.MSRAPrelu(slope=0.0).magnitude
    2.0
    """

    def __init__(self, factor_type: str = "avg", slope: float = 0.25) -> None:
        slope = _real_arg("MSRAPrelu slope", slope)
        super().__init__("gaussian", factor_type, 2.0 / (1 + slope ** 2))
        self.slope = slope


class Mixed(Initializer):
    """MXNet's ``Mixed(patterns, initializers)``: each parameter gets the
    initializer of the first regular expression that matches its name
    (``re.match``, from the start); a name no pattern matches raises
    :class:`~mxdeconv.MXNetError` (end with ``".*"`` for a default).  MXNet's
    Gluon cannot use it (it asks ``Mixed`` for ``_init_weight``, which it lacks);
    here it works in Gluon too.

    >>> from mxdeconv import init
    >>> mixed = init.Mixed([".*bias$", ".*"], [init.Constant(1), init.Zero()])
    >>> (mixed("conv0_bias", (2,), "float32").tolist(),
    ...  mixed("conv0_weight", (1,), "float32").tolist())
    ([1.0, 1.0], [0.0])
    """

    def __init__(self, patterns: Sequence[str], initializers: Sequence[Any]) -> None:
        if not isinstance(patterns, (list, tuple)) or not all(
                isinstance(p, str) for p in patterns):
            raise _type_error("Mixed patterns", "a list of regular expressions (str)", patterns)
        if not isinstance(initializers, (list, tuple)):
            raise _type_error("Mixed initializers", "a list of initializers", initializers)
        if len(patterns) != len(initializers):
            raise MXNetError(f"Mixed patterns and initializers must be as many, got "
                             f"{len(patterns)} patterns and {len(initializers)} initializers")
        compiled = []
        for pattern in patterns:
            try:
                compiled.append(re.compile(pattern))
            except re.error as err:
                raise MXNetError(f"Mixed patterns: {pattern!r} is not a regular expression: "
                                 f"{err}") from err
        self.map: List[Tuple[Any, Initializer]] = [
            (prog, create(init, f"Mixed initializers[{i}]"))
            for i, (prog, init) in enumerate(zip(compiled, initializers))]

    def _chosen(self, name: str) -> Initializer:
        for prog, init in self.map:
            if prog.match(name):
                return init
        raise MXNetError(f"Parameter name {name} did not match any pattern. Consider add a "
                         "\".*\" pattern at the and with default Initializer.")

    def __call__(self, name: str, shape: Tuple[int, ...], dtype: Any) -> np.ndarray:
        return self._chosen(name)(name, shape, dtype)

    def _init_weight(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        return self._chosen(name)._init_weight(name, shape)

    def __repr__(self) -> str:
        return f"Mixed({[(prog.pattern, init) for prog, init in self.map]!r})"


#: MXNet's registered names (lower case) of the initializers that need no argument.
_NAMED = {"zeros": Zero, "zero": Zero, "ones": One, "one": One, "uniform": Uniform,
          "normal": Normal, "xavier": Xavier, "msraprelu": MSRAPrelu}


def create(init: Any, name: str = "init") -> Initializer:
    """An :class:`Initializer` given as itself or by name (``"zeros"``, ``"xavier"``...),
    as MXNet's ``mx.init.create``.

    >>> from mxdeconv import init
    >>> init.create("xavier")
    Xavier(rnd_type='uniform', factor_type='avg', magnitude=3.0)
    """
    if isinstance(init, Initializer):
        return init
    expected = f"an Initializer or one of {sorted(_NAMED)}"
    if not isinstance(init, str):
        raise _type_error(name, expected, init)
    if init.lower() not in _NAMED:
        raise MXNetError(f"unknown initializer: {name} must be {expected}, got {init!r}")
    return _NAMED[init.lower()]()


_create_initializer = create


def _initializer_arg(name: str, init: Any) -> Any:
    """None or what :func:`create` accepts, checked now, kept as given."""
    if init is not None:
        create(init, name)
    return init
