"""Gluon-style transposed-convolution layers: ``Conv1DTranspose``, ``Conv2DTranspose``,
``Conv3DTranspose``, with MXNet 1.9.1 Gluon's constructor arguments.

>>> import numpy as np
>>> from mxdeconv import gluon, nd
>>> layer = gluon.Conv2DTranspose(8, kernel_size=4, strides=2, padding=1, in_channels=16)
>>> layer.initialize()
>>> layer(nd.ones((1, 16, 5, 5))).shape
(1, 8, 10, 10)
>>> layer.weight.shape        # MXNet's weight: (C_in, channels // groups, *k)
(16, 8, 4, 4)

Initialisation follows MXNet 1.9.1 Gluon (line numbers of the 1.9.1 release,
``mxnet==1.9.1`` on PyPI):

* ``python/mxnet/gluon/block.py:640``:
  ``def initialize(self, init=initializer.Uniform(), ...)``;
* ``python/mxnet/initializer.py:506``: ``Uniform.__init__(self, scale=0.07)``,
  values in ``[-scale, scale]``;
* ``python/mxnet/gluon/parameter.py:463``:
  ``init = default_init if self.init is None else self.init``;
* ``python/mxnet/gluon/nn/conv_layers.py:590-593``: ``Conv2DTranspose`` (and the
  1-D/3-D ones) take ``weight_initializer=None, bias_initializer='zeros'``.

So a default layer has weights uniform in ``[-0.07, 0.07]`` and zero biases.
Random values come from NumPy's global generator (``np.random.seed`` makes them
repeatable); they cannot match MXNet's generator value for value, only in
distribution (``tests/test_gluon.py`` compares with a layer initialised by MXNet).

Parameters save to and load from MXNet's binary ``.params`` files (see
:mod:`mxdeconv.io.ndarray_file`) and ``.npz`` files of NumPy arrays, keyed
``weight`` and ``bias`` (the names MXNet's ``save_parameters`` uses for a
lone layer); :meth:`~_ConvTranspose.load_parameters` also accepts MXNet's
prefixed names such as ``conv0_weight`` and ``arg:conv0_weight``.
"""
from __future__ import annotations

import contextlib
import copy
import io
import math
import numbers
import os
import re
import threading
import zipfile
from collections import Counter
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from mxdeconv.ops import deconvolution
from mxdeconv import nd
from mxdeconv.io import ndarray_file
from mxdeconv.semantics.activations import ACT_TYPES
from mxdeconv.autograd import GRAD_REQS
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.context import Context, context_arg, current_context
from mxdeconv._core.dtypes import as_dtype, is_float_dtype, is_operator_dtype, operator_dtype_names
from mxdeconv.ndarray.ndarray import NDArray, array
from mxdeconv.semantics.attributes import MAX_PARAM, parse_int_text, parse_shape_text

__all__ = ["Constant", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
           "HybridSequential", "Initializer", "Normal", "One", "Parameter", "ParameterDict",
           "Sequential", "Uniform", "Xavier", "Zero"]

# -- argument checking -------------------------------------------------------------
# One helper per kind of argument, used by the layers and their parameters.
# A value of the wrong Python type raises TypeError, a bad value MXNetError, and
# both messages name the argument, what it accepts and what it got.  Strings are
# refused where a number, a tuple or a bool is expected (kernel_size="33" is not
# (3, 3)), except where MXNet's own layer passes the string on to the operator,
# which parses it (_int_attr, _tuple_attr).
def _type_error(name: str, expected: str, value: Any) -> TypeError:
    return TypeError(f"{name} must be {expected}, got {value!r} of type {type(value).__name__}")


def _is_int(value: Any) -> bool:
    """Python and NumPy integers; a bool is not one here."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_arg(name: str, value: Any, minimum: int = 0) -> int:
    """An integer in ``[minimum, MAX_PARAM]`` (Python's or NumPy's)."""
    if not _is_int(value):
        raise _type_error(name, "an int", value)
    value = int(value)
    if not minimum <= value <= MAX_PARAM:
        raise MXNetError(f"{name} must be an int in [{minimum}, {MAX_PARAM}], "
                         f"got {name}={value}")
    return value


def _tuple_arg(name: str, value: Any, ndim: Optional[int] = None,
               minimum: int = 0) -> Tuple[int, ...]:
    """An int (repeated ``ndim`` times, once when ``ndim`` is None) or a tuple or
    list of ints (exactly ``ndim`` of them when it is given), each as :func:`_int_arg`."""
    if _is_int(value):
        return (_int_arg(name, value, minimum),) * (ndim or 1)
    expected = f"an int or a list of {ndim} ints" if ndim else "an int or a tuple of ints"
    if not isinstance(value, (tuple, list)):
        raise _type_error(name, expected, value)
    if ndim is not None and len(value) != ndim:
        raise MXNetError(f"{name} must be {expected}, got {name}={value!r}")
    return tuple(_int_arg(f"{name}[{i}]", v, minimum) for i, v in enumerate(value))


# MXNet's layers hand channels, groups, strides, padding and dilation (and, in 1-D,
# kernel_size and output_padding) to the operator's attributes unconverted, so MXNet
# 1.9.1 accepts them as the operator's text (strides="(2, 2)", groups="2"); these read
# such a string as the operator does (mxdeconv.semantics.attributes), then check the value as a
# Python one.  tests/data/attr_forms.py records MXNet's verdicts.
def _int_attr(name: str, value: Any, minimum: int = 0) -> int:
    """:func:`_int_arg`, or MXNet's text of an int (``"4"``)."""
    if isinstance(value, str):
        value = parse_int_text(name, value)
    return _int_arg(name, value, minimum)


def _tuple_attr(name: str, value: Any, ndim: int, minimum: int = 0,
                literal_length: bool = False) -> Tuple[int, ...]:
    """:func:`_tuple_arg`, or MXNet's text of a shape with ``ndim`` entries
    (``"(2, 2)"``; ``"2"`` is the 1-tuple).  ``literal_length``: MXNet's layer first
    asserts ``len(value) == ndim`` (kernel_size, output_padding), so only a 1-D
    layer can take a string there, of one character."""
    if isinstance(value, str):
        expected = f"an int or a list of {ndim} ints"
        if literal_length and ndim > 1:  # no string of ndim characters is an ndim-tuple
            raise _type_error(name, expected, value)
        if literal_length and len(value) != ndim:
            raise MXNetError(f"{name} must be {expected}, got {name}={value!r}: MXNet takes "
                             f"a string here only of {ndim} character(s)")
        shape = parse_shape_text(name, value)
        if shape is None or len(shape) != ndim:
            meaning = "a shape of unknown rank" if shape is None else f"{shape}"
            raise MXNetError(f"{name} must be {expected}, got {name}={value!r}, "
                             f"which MXNet reads as {meaning}")
        value = shape
    return _tuple_arg(name, value, ndim, minimum)


def _use_bias_arg(value: Any) -> bool:
    """:func:`_bool_arg`; a string is refused although MXNet's layer takes one: it
    computes ``not use_bias``, so ``"False"`` would keep the bias there."""
    if isinstance(value, str):
        raise TypeError(f"use_bias must be a bool (True, False, 0 or 1), got {value!r} of "
                        "type str (MXNet would read any non-empty string as True)")
    return _bool_arg("use_bias", value)


def _real_arg(name: str, value: Any, minimum: Optional[float] = None) -> float:
    """A finite real number (Python's or NumPy's; a bool is not one here), at
    least ``minimum`` when it is given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _type_error(name, "a real number", value)
    value = float(value)
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum:g}"
        raise MXNetError(f"{name} must be a finite real number{bound}, got {name}={value!r}")
    return value


def _bool_arg(name: str, value: Any) -> bool:
    """True, False, a NumPy bool, or the ints 0 and 1 (MXNet's "0" and "1")."""
    if isinstance(value, (bool, np.bool_)) or (_is_int(value) and value in (0, 1)):
        return bool(value)
    raise _type_error(name, "a bool (True, False, 0 or 1)", value)


def _choice_arg(name: str, value: Any, choices: Sequence[Optional[str]]) -> Optional[str]:
    """One of ``choices`` (strings, and None where None is one of them)."""
    if not (isinstance(value, str) or (value is None and None in choices)):
        raise _type_error(name, f"one of {tuple(choices)}", value)
    if value not in choices:
        raise MXNetError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def _dtype_arg(name: str, value: Any) -> np.dtype:
    """An operator dtype (:func:`mxdeconv._core.dtypes.is_operator_dtype`), given as
    anything ``np.dtype`` reads but None."""
    expected = f"a dtype, one of {operator_dtype_names()}"
    if value is None:  # np.dtype(None) is float64
        raise _type_error(name, expected, value)
    try:
        dtype = as_dtype(value)
    except (TypeError, ValueError, SyntaxError) as err:  # np.dtype(",") is a SyntaxError
        raise _type_error(name, expected, value) from err
    if not is_operator_dtype(dtype):
        raise _type_error(name, expected, value)
    return dtype


def _path_arg(name: str, value: Any) -> str:
    """A file name: a ``str`` or an ``os.PathLike`` giving one."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str):
        raise _type_error(name, "a path (str or os.PathLike)", value)
    return path


def _values_arg(name: str, value: Any) -> np.ndarray:
    """Real numbers as a NumPy array, from an NDArray, a NumPy array or scalar, a
    nested list (or tuple) of numbers, or a number."""
    if isinstance(value, NDArray):
        values = value.asnumpy()
    elif isinstance(value, (np.ndarray, np.generic, numbers.Number)):
        values = np.asarray(value)
    elif isinstance(value, (list, tuple)):
        try:
            values = np.asarray(value)
        except (TypeError, ValueError, OverflowError) as err:
            raise MXNetError(f"{name} must be a nested list of numbers of one shape, "
                             f"got {value!r:.200}") from err
    else:
        raise _type_error(name, "an NDArray, a NumPy array or a nested list of numbers", value)
    if not _is_real(values.dtype):
        raise TypeError(f"{name} must hold real numbers (an integer or floating-point "
                        f"dtype), got dtype {values.dtype}")
    return values


def _contexts_arg(name: str, value: Any) -> Optional[List[Context]]:
    """Gluon's ``ctx``: a context or a list of them (see :func:`~mxdeconv._core.context.context_arg`:
    CPU contexts only), as a list; None stays None (the caller's default)."""
    if value is None:
        return None
    context_arg(name, value)  # the whole value first: an empty list, a GPU, a bad type
    items = value if isinstance(value, (list, tuple)) else [value]
    return [_context_arg(name, item) for item in items]


def _context_arg(name: str, value: Any) -> Context:
    """One context, as ``Parameter.data(ctx)`` takes (not a list)."""
    if isinstance(value, (list, tuple)):
        raise _type_error(name, "a Context (mxdeconv.cpu()), a string such as 'cpu(0)' or None",
                          value)
    return context_arg(name, value)


def _is_real(dtype: np.dtype) -> bool:
    """Integers and floats (bfloat16 too): what a parameter's values may be cast from."""
    return dtype.kind in "iu" or is_float_dtype(dtype)


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


# -- parameters ------------------------------------------------------------------
class Parameter:
    """A layer's weight or bias: an NDArray, its gradient, and how to initialise it.

    A shape with a 0 is not known yet (``in_channels=0``): initialisation is
    deferred to the first forward, as in MXNet.  Every method checks its
    arguments before it changes anything: after an error the parameter holds
    what it held before.

    >>> from mxdeconv import gluon
    >>> p = gluon.Parameter("w", shape=(2, 3))
    >>> p.initialize(init=gluon.One())
    >>> p.data().shape, p.grad().asnumpy().sum().item()
    ((2, 3), 0.0)
    >>> p.set_data([[1, 2, 3], [4, 5, 6]])      # cast to the parameter's dtype
    >>> p.data().asnumpy().dtype
    dtype('float32')
    """

    def __init__(self, name: str, shape: Any = (), dtype: Any = "float32",
                 init: Any = None, grad_req: str = "write",
                 allow_deferred_init: bool = True) -> None:
        if not isinstance(name, str):
            raise _type_error("name", "a string", name)
        self.name = name
        self.shape = _tuple_arg("shape", shape)
        self.dtype = _dtype_arg("dtype", dtype)
        self.init = _initializer_arg("init", init)
        self.allow_deferred_init = _bool_arg("allow_deferred_init", allow_deferred_init)
        self._grad_req = _choice_arg("grad_req", grad_req, GRAD_REQS)
        self._data: Optional[NDArray] = None
        self._deferred: Optional[Initializer] = None
        # The contexts it was initialized on (None until then): all CPU ones,
        # all naming the one array.
        self._ctx_list: Optional[List[Context]] = None

    def __repr__(self) -> str:
        return f"Parameter {self.name} (shape={self.shape}, dtype={self.dtype})"

    @property
    def grad_req(self) -> str:
        return self._grad_req

    @grad_req.setter
    def grad_req(self, value: str) -> None:
        self._grad_req = _choice_arg("grad_req", value, GRAD_REQS)
        if self._data is not None:
            self._attach(self._data)

    @property
    def shape_known(self) -> bool:
        return all(s > 0 for s in self.shape)

    def __deepcopy__(self, memo: Any) -> "Parameter":
        """A parameter with copies of the values and of the gradient (an NDArray's
        deep copy carries its values only, so the gradient is attached again)."""
        clone = copy.copy(self)
        memo[id(self)] = clone
        clone._ctx_list = None if self._ctx_list is None else list(self._ctx_list)
        if self._data is not None:
            clone._data = clone._attach(self._data.copy())
            if self._data._grad is not None and clone._data._grad is not None:
                clone._data._grad._plain()[...] = self._data._grad._plain()
        return clone

    def _attach(self, data: NDArray) -> NDArray:
        """Give ``data`` a gradient as ``grad_req`` says (none for ``"null"``)."""
        if self._grad_req == "null":
            data._grad, data._grad_req = None, "null"
        else:
            data.attach_grad(self._grad_req)
        return data

    def initialize(self, init: Any = None, ctx: Any = None,
                   default_init: Any = None, force_reinit: bool = False) -> None:
        """Fill the parameter: with ``init`` if given, else its own ``init``,
        else ``default_init`` (default :class:`Uniform`), as MXNet does.
        ``ctx``: a CPU context or a list of them (default ``cpu(0)``), see
        :meth:`list_ctx`; a GPU raises :class:`~mxdeconv.MXNetError`."""
        contexts = _contexts_arg("ctx", ctx)
        self._apply_init(self._plan_init(init, contexts, default_init, force_reinit))

    def _plan_init(self, init: Any, contexts: Optional[List[Context]], default_init: Any,
                   force_reinit: bool) -> Optional[Tuple[str, Any, List[Context]]]:
        """What :meth:`initialize` would do, worked out but not applied (so that a
        layer initialises all its parameters or none): None (nothing to do),
        ``("defer", initializer, contexts)`` or ``("data", NDArray, contexts)``.
        ``contexts`` comes checked by :func:`_contexts_arg`."""
        contexts = [current_context()] if contexts is None else contexts
        _initializer_arg("init", init)
        _initializer_arg("default_init", default_init)
        force_reinit = _bool_arg("force_reinit", force_reinit)
        if self._data is not None and not force_reinit:
            return None
        if init is None:
            init = self.init if self.init is not None else (
                default_init if default_init is not None else Uniform())
        initializer = _create_initializer(init)
        if not self.shape_known:
            if not self.allow_deferred_init:
                raise MXNetError(f"Cannot initialize Parameter '{self.name}' because it has "
                                 f"invalid shape: {self.shape}.")
            return ("defer", initializer, contexts)
        return ("data", self._new_data(initializer(self.name, self.shape, self.dtype)),
                contexts)

    def _apply_init(self, plan: Optional[Tuple[str, Any, List[Context]]]) -> None:
        if plan is None:
            return
        kind, value, contexts = plan
        if kind == "defer":
            self._data, self._deferred = None, value
        else:
            self._install(value)
        self._ctx_list = contexts

    def _deferred_data(self, shape: Tuple[int, ...]) -> NDArray:
        """The values of the deferred initialisation for the completed ``shape``,
        not installed yet (see :meth:`_install`)."""
        if self._deferred is None:
            raise MXNetError(f"Parameter '{self.name}' has not been initialized. You "
                             "should initialize parameters with Block.initialize()")
        shape = self._completed_shape(shape)
        return self._new_data(self._deferred(self.name, shape, self.dtype))

    def _fits(self, shape: Tuple[int, ...]) -> bool:
        """Whether data of ``shape`` fits (a 0, not known yet, fits any size >= 1)."""
        return len(shape) == len(self.shape) and all(
            given >= 1 and known in (0, given) for known, given in zip(self.shape, shape))

    def _shape_text(self) -> str:
        return f"{self.shape}" + ("" if self.shape_known else " (0: not known yet)")

    def _completed_shape(self, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        """``shape``, checked by :meth:`_fits`."""
        if not self._fits(shape):
            raise MXNetError(f"Parameter '{self.name}' has shape {self._shape_text()}, "
                             f"cannot set data of shape {shape}")
        return tuple(shape)

    def _new_data(self, values: Any, dtype: Any = None) -> NDArray:
        """``values`` copied into a new NDArray of ``dtype`` (default: the parameter's)
        with its gradient attached; the parameter itself does not change."""
        return self._attach(array(values, dtype=self.dtype if dtype is None else dtype))

    def _install(self, data: NDArray) -> None:
        """Make ``data`` (from :meth:`_new_data`) the value, its shape and dtype too.
        Nothing here can fail: callers check and convert everything first."""
        self._data, self._deferred = data, None
        self.shape, self.dtype = data.shape, data.dtype
        if self._ctx_list is None:
            self._ctx_list = [current_context()]

    def data(self, ctx: Any = None) -> NDArray:
        """The parameter's NDArray (its ``.grad`` is :meth:`grad`).  ``ctx``, when
        given, must be one of :meth:`list_ctx` (as in MXNet)."""
        wanted = None if ctx is None else _context_arg("ctx", ctx)
        if self._data is None:
            if self._deferred is not None:
                raise MXNetError(
                    f"Parameter '{self.name}' has not been initialized yet because "
                    "initialization was deferred. Actual initialization happens during the "
                    "first forward pass. Please pass one batch of data through the network "
                    "before accessing Parameters.")
            raise MXNetError(f"Parameter '{self.name}' has not been initialized. You should "
                             "initialize parameters with Block.initialize()")
        if wanted is not None and wanted not in self._ctx_list:
            raise MXNetError(f"Parameter '{self.name}' was not initialized on context "
                             f"{wanted}. It was only initialized on {self._ctx_list}.")
        return self._data

    def grad(self, ctx: Any = None) -> NDArray:
        """The gradient backward writes (or adds) into (``ctx`` as for :meth:`data`)."""
        data = self.data(ctx)
        if data._grad is None:
            raise MXNetError(f"Cannot get gradient array for Parameter '{self.name}' "
                             "because grad_req='null'")
        return data._grad

    def _loaded_ctx(self, contexts: Optional[List[Context]], where: str) -> List[Context]:
        """The contexts after loading values onto ``ctx`` (checked by :func:`_contexts_arg`):
        as MXNet, those the parameter was initialized on, which ``ctx`` must match."""
        if self._ctx_list is None or (self._data is None and self._deferred is None):
            return [current_context()] if contexts is None else contexts
        if contexts is not None and set(contexts) != set(self._ctx_list):
            raise MXNetError(f"{where}: ctx={contexts} but it was initialized on "
                             f"{self._ctx_list}")
        return self._ctx_list

    def list_ctx(self) -> List[Context]:
        """The contexts given to :meth:`initialize` (or :meth:`reset_ctx`): CPU ones,
        all naming the same single array (MXNet keeps a copy per context).

        >>> import mxdeconv
        >>> from mxdeconv import gluon
        >>> p = gluon.Parameter("w", shape=(2,))
        >>> p.initialize(ctx=mxdeconv.cpu(0))
        >>> p.list_ctx()
        [cpu(0)]
        """
        if self._data is None and self._deferred is None:
            raise MXNetError(f"Parameter '{self.name}' has not been initialized")
        return list(self._ctx_list)

    def reset_ctx(self, ctx: Any) -> None:
        """Assign the parameter to ``ctx`` (a CPU context or a list of them; None:
        ``cpu(0)``); the values stay as they are."""
        contexts = _contexts_arg("ctx", ctx)
        if self._data is None and self._deferred is None:
            raise MXNetError(f"Cannot reset context for Parameter '{self.name}' because it "
                             "has not been initialized.")
        self._ctx_list = [current_context()] if contexts is None else contexts

    def set_data(self, value: Any) -> None:
        """Replace the values with ``value``: an NDArray, a NumPy array or a nested
        list of numbers (integers or floats, cast to the parameter's dtype as MXNet
        does) of exactly the parameter's shape; a shape still unknown is completed
        from it."""
        values = _values_arg("value", value)
        self._completed_shape(values.shape)
        self._install(self._new_data(values))

    def zero_grad(self) -> None:
        """Set the gradient to zeros."""
        if self._data is not None and self._data._grad is not None:
            grad = self._data._grad
            grad._plain()[...] = 0  # a write through mxdeconv: no view handed out
            grad._bump()

    def cast(self, dtype: Any) -> None:
        """Change the dtype of the values (and gradient): float16, float32, float64 or
        bfloat16 (with ml_dtypes)."""
        dtype = _dtype_arg("dtype", dtype)
        if self._data is None:
            self.dtype = dtype
        else:
            self._install(self._new_data(self._data.asnumpy(), dtype))


class ParameterDict(dict):
    """``{full name: Parameter}``, with MXNet's bulk helpers.

    >>> from mxdeconv import gluon
    >>> layer = gluon.Conv1DTranspose(2, 3, in_channels=2, prefix="up_")
    >>> sorted(layer.collect_params())
    ['up_bias', 'up_weight']
    >>> layer.collect_params().setattr("grad_req", "null")
    >>> layer.bias.grad_req
    'null'
    """

    #: The attributes :meth:`setattr` may set (those whose setter checks the value).
    SETTABLE = ("grad_req",)

    def initialize(self, init: Any = None, ctx: Any = None, verbose: bool = False,
                   force_reinit: bool = False) -> None:
        """Initialise every parameter; ``init`` applies to those created without
        an initializer, ``ctx`` as for :meth:`Parameter.initialize`."""
        _initializer_arg("init", init)
        contexts = _contexts_arg("ctx", ctx)
        _bool_arg("verbose", verbose)
        force_reinit = _bool_arg("force_reinit", force_reinit)
        # Every parameter's values first, then all installed: all or nothing.
        plans = [(param, param._plan_init(None, contexts, init, force_reinit))
                 for param in self.values()]
        for param, plan in plans:
            param._apply_init(plan)

    def reset_ctx(self, ctx: Any) -> None:
        """:meth:`Parameter.reset_ctx` of every parameter (all checked first)."""
        _contexts_arg("ctx", ctx)
        params = list(self.values())
        for param in params:
            if param._data is None and param._deferred is None:
                raise MXNetError(f"Cannot reset context for Parameter '{param.name}' "
                                 "because it has not been initialized.")
        for param in params:
            param.reset_ctx(ctx)

    def list_ctx(self) -> List[Context]:
        """The contexts the parameters were initialized on, each once."""
        contexts: List[Context] = []
        for param in self.values():
            contexts += [c for c in param.list_ctx() if c not in contexts]
        return contexts

    def zero_grad(self) -> None:
        for param in self.values():
            param.zero_grad()

    def setattr(self, name: str, value: Any) -> None:
        """Set attribute ``name`` (only ``"grad_req"`` here, the attribute whose setter
        checks its value) to ``value`` on every parameter; a bad value changes none."""
        _choice_arg("name", name, self.SETTABLE)
        _choice_arg("grad_req", value, GRAD_REQS)  # checked before any parameter changes
        for param in self.values():
            setattr(param, name, value)


# -- layers ------------------------------------------------------------------------
_name_counts: Dict[str, int] = {}
_name_lock = threading.Lock()
#: Per thread, the ``name_scope()`` blocks entered: (prefix, that scope's counts).
_scopes = threading.local()


def _auto_prefix(base: str) -> str:
    """MXNet's automatic prefix: the block's alias and a per-alias count
    (every convolution layer's alias is ``conv``: ``conv0_``, ``conv1_``, ...);
    inside a container's ``name_scope()`` the container's prefix comes first and
    the count is the scope's own (``hybridsequential0_conv0_``)."""
    stack = getattr(_scopes, "stack", None)
    scope_prefix, counts = stack[-1] if stack else ("", _name_counts)
    with _name_lock:
        count = counts.get(base, 0)
        counts[base] = count + 1
    return f"{scope_prefix}{base}{count}_"


class _NpzArchive:
    """The arrays of an ``.npz`` file, read from untrusted bytes: the names and
    each ``.npy`` header first, an array's data only when asked for.  Anything
    wrong with the file raises :class:`MXNetError` naming it.

    zipfile and ``numpy.lib.format`` raise many types for a corrupt file
    (BadZipFile, EOFError, ValueError, zlib.error, NotImplementedError,
    RecursionError...), so the few calls that parse the file catch ``Exception``.
    """

    _HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
            names = self._zip.namelist()
        except OSError as err:
            raise MXNetError(f"cannot read filename={path!r}: {err}") from err
        except Exception as err:
            raise MXNetError(f"filename={path!r} must be an .npz archive of NumPy arrays "
                             f"(as np.savez writes), got {self._what_it_is()}") from err
        repeated = sorted(name for name, count in Counter(names).items() if count > 1)
        others = [name for name in names if not name.endswith(".npy")]
        if repeated or others:
            self._zip.close()
            raise MXNetError(f"filename={path!r} must be an .npz archive of NumPy arrays, each "
                             "stored once as '<key>.npy', got an archive with "
                             + (f"repeated members {repeated}" if repeated
                                else f"other members {others[:5]}"))
        self.keys = [name[:-len(".npy")] for name in names]

    def _what_it_is(self) -> str:
        try:
            with open(self.path, "rb") as handle:
                magic = handle.read(6)
        except OSError:
            magic = b""
        if magic == b"\x93NUMPY":
            return ("a .npy file (one array); save the parameters with "
                    "np.savez(path, weight=..., bias=...)")
        return "a file that is not a zip archive"

    def _error(self, key: str, err: Exception) -> MXNetError:
        return MXNetError(f"cannot read array '{key}' of filename={self.path!r}: "
                          f"{type(err).__name__}: {err}")

    def header(self, key: str) -> Tuple[Tuple[int, ...], np.dtype]:
        """The shape and dtype of array ``key``, read without its data."""
        member = key + ".npy"
        try:
            with self._zip.open(member) as handle:
                version = np.lib.format.read_magic(handle)
                if version not in self._HEADER_READERS:
                    raise ValueError(f".npy format version {version} is not supported")
                shape, _, dtype = self._HEADER_READERS[version](handle)
                header_size = handle.tell()
        except Exception as err:
            raise self._error(key, err) from err
        stored = self._zip.getinfo(member).file_size - header_size
        needed = math.prod(shape) * dtype.itemsize
        if needed > stored:  # refused before allocating what the header asks for
            raise MXNetError(f"cannot read array '{key}' of filename={self.path!r}: its "
                             f"header says shape {shape} and dtype {dtype}, {needed} bytes, "
                             f"but the archive holds {stored}")
        return shape, dtype

    def read(self, key: str, shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Array ``key``, whose :meth:`header` said ``shape`` and ``dtype`` (never unpickled)."""
        try:
            with self._zip.open(key + ".npy") as handle:
                values = np.lib.format.read_array(handle, allow_pickle=False)
        except Exception as err:
            raise self._error(key, err) from err
        if values.shape != shape or values.dtype != dtype:
            raise MXNetError(f"cannot read array '{key}' of filename={self.path!r}: it changed "
                             "while it was read")
        return values

    def __enter__(self) -> "_NpzArchive":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._zip.close()


class _ParamsFile:
    """The named arrays of an MXNet NDArray file, behind :class:`_NpzArchive`'s
    interface (the file is parsed and checked whole; values are copied on request)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = ndarray_file.ArrayFile.read(path, "filename")
        if len(self._file) and not self._file.names:
            raise MXNetError(f"filename={path!r} holds a list of {len(self._file)} arrays "
                             "without names (as mx.nd.save of a list writes); parameters "
                             "are loaded from named arrays (a dict, as save_parameters "
                             "writes)")
        self.keys = list(self._file.names)
        self._index = {name: index for index, name in enumerate(self.keys)}

    def header(self, key: str) -> Tuple[Tuple[int, ...], np.dtype]:
        index = self._index[key]
        return self._file.shape(index), self._file.dtype(index)

    def read(self, key: str, shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._file.values(self._index[key])

    def __enter__(self) -> "_ParamsFile":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        pass


def _open_saved(path: str) -> Any:
    """The arrays of ``path``: an MXNet NDArray file or an ``.npz`` archive, told
    apart by their first bytes (the name decides only for other contents, so that
    the error speaks of the format the caller meant)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError as err:
        raise MXNetError(f"cannot read filename={path!r}: {err}") from err
    if ndarray_file.is_ndarray_file(head) or (path.lower().endswith(".params")
                                               and not head.startswith(b"PK")):
        return _ParamsFile(path)
    return _NpzArchive(path)


def _unprefixed(key: str) -> str:
    """A saved name without ``save_checkpoint``'s ``arg:``/``aux:`` prefix (MXNet's
    ``ParameterDict.load_dict`` strips it too)."""
    return key[4:] if key.startswith(("arg:", "aux:")) else key


class _Block:
    """What MXNet's ``Block`` API shares between a layer and :class:`Sequential`:
    parameters by structural name (``weight``, ``0.weight``), initialisation,
    ``save_parameters`` / ``load_parameters``.  Subclasses define ``prefix`` and
    :meth:`_layers_by_key`."""

    prefix: str

    def _layers_by_key(self) -> Dict[str, Tuple["_ConvTranspose", Parameter]]:
        """``{structural name: (the layer that owns it, parameter)}``, in order."""
        raise NotImplementedError

    def _structural(self) -> Dict[str, Parameter]:
        return {key: param for key, (_, param) in self._layers_by_key().items()}

    @property
    def name(self) -> str:
        return self.prefix[:-1] if self.prefix.endswith("_") else self.prefix

    def collect_params(self, select: Optional[str] = None) -> ParameterDict:
        """The parameters by full name; ``select`` is a regular expression on it."""
        if select is not None and not isinstance(select, str):
            raise _type_error("select", "a regular expression (str) or None", select)
        try:
            pattern = re.compile(select) if select else None
        except re.error as err:
            raise MXNetError(f"select must be a regular expression, got {select!r}: "
                             f"{err}") from err
        return ParameterDict((p.name, p) for p in self._structural().values()
                             if pattern is None or pattern.match(p.name))

    @property
    def params(self) -> ParameterDict:
        return self.collect_params()

    def initialize(self, init: Any = None, ctx: Any = None, verbose: bool = False,
                   force_reinit: bool = False) -> None:
        """Initialise the parameters; ``init`` (default :class:`Uniform`, as MXNet's
        ``Block.initialize``) applies to those created without an initializer;
        ``ctx`` is a CPU context or a list of them (a GPU raises
        :class:`~mxdeconv.MXNetError`), see :meth:`Parameter.list_ctx`."""
        self.collect_params().initialize(Uniform() if init is None else init, ctx,
                                         verbose, force_reinit)

    def hybridize(self, active: bool = True, **kwargs: Any) -> None:
        """Accepted for MXNet compatibility; every call is imperative anyway."""
        _bool_arg("active", active)

    def cast(self, dtype: Any) -> None:
        """Cast every parameter to ``dtype`` (see :meth:`Parameter.cast`)."""
        dtype = _dtype_arg("dtype", dtype)
        for param in self._structural().values():
            param.cast(dtype)

    def save_parameters(self, filename: str, deduplicate: bool = False) -> None:
        """Save the parameters to ``filename``, under exactly that name, by their
        structural names (``weight`` and ``bias`` of a layer; ``0.weight``,
        ``0.bias``, ``1.weight``, ... of a :class:`Sequential`).

        A name ending in ``.npz`` gets a NumPy ``.npz`` archive; any other name
        (``.params``) gets MXNet's binary format, byte for byte what MXNet 1.9.1's
        ``save_parameters`` writes for the same block, so MXNet's
        ``load_parameters`` reads it.  The file is written
        beside ``filename`` and renamed over it: a failed save leaves no
        half-written file."""
        path = _path_arg("filename", filename)
        _bool_arg("deduplicate", deduplicate)
        params = self._structural()
        values = [param.data()._plain() for param in params.values()]
        if path.lower().endswith(".npz"):
            archive = io.BytesIO()
            np.savez(archive, **dict(zip(params, values)))
            ndarray_file.write_atomically(path, [archive.getbuffer()], "filename")
        else:
            ndarray_file.write_arrays(path, values, list(params), argument="filename")

    def load_parameters(self, filename: str, ctx: Any = None, allow_missing: bool = False,
                        ignore_extra: bool = False, cast_dtype: bool = False,
                        dtype_source: str = "current") -> None:
        """Load an MXNet ``.params`` file or a ``.npz`` archive.

        The format is recognised by its first bytes, whatever the name: MXNet's
        NDArray files (``save_parameters``, ``collect_params().save``,
        ``mx.nd.save`` of a dict, ``export``/``save_checkpoint``) or NumPy ``.npz``
        archives (:meth:`save_parameters` to a ``.npz`` name, ``np.savez``).
        Keys are the structural names MXNet's ``save_parameters`` writes
        (``weight``/``bias`` for a lone layer, ``0.weight`` for a
        :class:`Sequential`), or the parameters' full names (``conv0_weight``, as
        ``collect_params().save`` writes them; for a lone layer any name ending
        in ``_weight``/``_bias``), each with or without ``save_checkpoint``'s
        ``arg:``/``aux:`` prefix.  As in MXNet,
        a dtype other than the parameter's is refused unless ``cast_dtype=True``
        (``dtype_source="saved"`` then adopts the file's dtype); an unknown
        ``in_channels`` is taken from the saved weight.  ``ctx`` is a CPU context
        or a list of them (as for :meth:`initialize`); for a parameter initialized
        already it must name the contexts it was initialized on.

        All or nothing: the names, shapes and dtypes of every array are checked
        and the arrays converted before any parameter changes, so after an error
        the layer holds what it held before.  The file is untrusted: it is never
        unpickled, and a file that is neither a valid NDArray file nor an ``.npz``
        archive of numeric arrays (a ``.npy`` file, object arrays, corrupt or
        truncated bytes) raises :class:`MXNetError`.
        """
        path = _path_arg("filename", filename)
        contexts = _contexts_arg("ctx", ctx)
        allow_missing = _bool_arg("allow_missing", allow_missing)
        ignore_extra = _bool_arg("ignore_extra", ignore_extra)
        cast_dtype = _bool_arg("cast_dtype", cast_dtype)
        dtype_source = _choice_arg("dtype_source", dtype_source, ("current", "saved"))
        owners = self._layers_by_key()
        staged = []
        with _open_saved(path) as archive:
            for key, saved_key in self._match_saved(archive.keys, path, allow_missing,
                                                    ignore_extra).items():
                layer, param = owners[key]
                where = (f"Failed loading Parameter '{param.name}' from array "
                         f"'{saved_key}' of '{path}'")
                shape, saved_dtype = archive.header(saved_key)
                dtype = layer._loaded_dtype(param, saved_dtype, where, cast_dtype,
                                            dtype_source)
                layer._check_loaded_shape(param, shape, where)
                loaded_ctx = param._loaded_ctx(contexts, where)
                values = archive.read(saved_key, shape, saved_dtype)
                staged.append((param, param._new_data(values, dtype), loaded_ctx))
        for param, data, loaded_ctx in staged:
            param._install(data)
            param._ctx_list = loaded_ctx

    def _match_saved(self, saved_keys: Sequence[str], path: str, allow_missing: bool,
                     ignore_extra: bool) -> Dict[str, str]:
        """``{parameter key: saved key}``, each saved key with or without an
        ``arg:``/``aux:`` prefix: the structural name (``weight``, ``0.weight``),
        else the parameter's full name (``conv0_weight``, as ``collect_params().save``
        writes it), else, for a lone layer, any ``*_weight``."""
        matched = {}
        for key, param in self._structural().items():
            candidates = ([k for k in saved_keys if _unprefixed(k) == key]
                          or [k for k in saved_keys if _unprefixed(k) == param.name]
                          or ([k for k in saved_keys if _unprefixed(k).endswith("_" + key)]
                              if "." not in key else []))
            if len(candidates) > 1:
                raise MXNetError(f"{path}: several arrays could be '{key}': {candidates}")
            if candidates:
                matched[key] = candidates[0]
            elif not allow_missing:
                raise MXNetError(f"Parameter '{key}' is missing in file '{path}', which "
                                 f"contains {sorted(saved_keys)}. Set allow_missing=True to "
                                 "ignore missing parameters.")
        extra = sorted(set(saved_keys) - set(matched.values()))
        if extra and not ignore_extra:
            raise MXNetError(f"Parameters {extra} in file '{path}' are not in the layer. "
                             "Set ignore_extra=True to ignore them.")
        return matched


class _ConvTranspose(_Block):
    """Shared implementation of the transposed-convolution layers.

    The constructor checks every argument (type, range, tuple length, and what
    MXNet's shape inference rejects when the layer is built) before it creates
    anything.  Methods check theirs before changing anything: after an error
    the parameters hold what they held before.
    """

    _ndim = 2
    _layout = "NCHW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 layout: Optional[str] = None, activation: Optional[str] = None,
                 use_bias: bool = True, weight_initializer: Any = None,
                 bias_initializer: Any = "zeros", in_channels: int = 0,
                 prefix: Optional[str] = None, params: Any = None) -> None:
        ndim = self._ndim
        _choice_arg("layout", layout, (self._layout, None))
        self._activation = _choice_arg("activation", activation, (None,) + ACT_TYPES)
        if params is not None:
            raise MXNetError(f"sharing parameters through params= is not supported: params "
                             f"must be None, got {params!r:.80}")
        if prefix is not None and not isinstance(prefix, str):
            raise _type_error("prefix", "a string or None", prefix)
        self._channels = _int_attr("channels", channels, minimum=1)
        in_channels = _int_arg("in_channels", in_channels)  # 0: from the first batch
        self._kwargs = {
            "kernel": _tuple_attr("kernel_size", kernel_size, ndim, minimum=1,
                                  literal_length=True),
            "stride": _tuple_attr("strides", strides, ndim, minimum=1),
            "dilate": _tuple_attr("dilation", dilation, ndim, minimum=1),
            "pad": _tuple_attr("padding", padding, ndim),
            "adj": _tuple_attr("output_padding", output_padding, ndim, literal_length=True),
            "num_filter": self._channels, "num_group": _int_attr("groups", groups, minimum=1),
            "no_bias": not _use_bias_arg(use_bias), "layout": self._layout}
        self._check_divisible("channels", self._channels)
        if in_channels:
            self._check_divisible("in_channels", in_channels)
        self.outpad = self._kwargs["adj"]
        if any(a >= s for a, s in zip(self.outpad, self._kwargs["stride"])):
            raise MXNetError(f"output_padding must be smaller than strides in every dim, got "
                             f"output_padding={self.outpad} and strides={self._kwargs['stride']}")
        _initializer_arg("weight_initializer", weight_initializer)
        _initializer_arg("bias_initializer", bias_initializer)
        self.prefix = _auto_prefix("conv") if prefix is None else prefix
        self.weight = Parameter(self.prefix + "weight", self._weight_shape(in_channels),
                                init=weight_initializer)
        self.bias = (None if self._kwargs["no_bias"] else
                     Parameter(self.prefix + "bias", (self._channels,), init=bias_initializer))

    def _check_divisible(self, name: str, value: int, context: str = "") -> None:
        groups = self._kwargs["num_group"]
        if value % groups:
            raise MXNetError(f"{context}{name}={value} must be divisible by groups={groups}")

    def _weight_shape(self, in_channels: int) -> Tuple[int, ...]:
        """MXNet's Deconvolution weight: ``(in_channels, channels // groups, *kernel)``."""
        return ((in_channels, self._channels // self._kwargs["num_group"])
                + self._kwargs["kernel"])

    @property
    def _in_channels(self) -> int:
        """0 until the first batch or a loaded weight gives it."""
        return self.weight.shape[0]

    # -- MXNet Block API --------------------------------------------------------
    def _layers_by_key(self) -> Dict[str, Tuple["_ConvTranspose", Parameter]]:
        params = {"weight": (self, self.weight)}
        if self.bias is not None:
            params["bias"] = (self, self.bias)
        return params

    @staticmethod
    def _loaded_dtype(param: Parameter, saved: np.dtype, where: str, cast_dtype: bool,
                      dtype_source: str) -> np.dtype:
        """The dtype the saved array gets, as MXNet's ``cast_dtype``/``dtype_source`` say."""
        if saved.hasobject or not _is_real(saved):
            raise MXNetError(f"{where}: it must hold real numbers (an integer or "
                             f"floating-point dtype), got dtype {saved}")
        saved = saved.newbyteorder("=")  # the same numbers in this machine's byte order
        if saved == param.dtype:
            return param.dtype
        if not cast_dtype:
            raise MXNetError(f"{where}: dtype incompatible expected {param.dtype} vs saved "
                             f"{saved}. Set cast_dtype=True to cast the dtype of saved params.")
        if dtype_source == "current":
            return param.dtype
        if not is_operator_dtype(saved):
            raise MXNetError(f"{where}: dtype_source='saved' would make it {saved}, but a "
                             f"parameter's dtype must be one of {operator_dtype_names()}")
        return saved

    def _check_loaded_shape(self, param: Parameter, shape: Tuple[int, ...], where: str) -> None:
        if not param._fits(shape):
            raise MXNetError(f"{where}: shape incompatible expected {param._shape_text()} "
                             f"vs saved {shape}")
        if param is self.weight:
            self._check_divisible("in_channels", shape[0], f"{where}: ")

    # -- forward ------------------------------------------------------------------
    def __call__(self, x: Any) -> NDArray:
        return self.forward(x)

    def forward(self, x: Any) -> NDArray:
        """Run ``nd.Deconvolution`` with the layer's parameters (and activation).

        ``x`` is an NDArray, or anything of real numbers :meth:`Parameter.set_data`
        takes (copied, as ``nd.array`` does).  A deferred weight is initialised for
        ``x``'s channels, and kept only if the call succeeds: a bad first batch
        leaves it deferred."""
        if not isinstance(x, NDArray):
            _values_arg("data", x)  # a TypeError for strings or objects, not NumPy's
            x = nd.array(x)
        pending = None
        if self.weight._data is None and self.weight._deferred is not None:
            pending = self.weight._deferred_data(self._weight_shape(self._data_channels(x)))
        weight = self.weight.data() if pending is None else pending
        bias = None if self.bias is None else self.bias.data()
        if self._activation is None:
            out = nd.Deconvolution(x, weight, bias, **self._kwargs)
        else:  # one operator: oneDNN fuses the activation into the deconvolution
            out = deconvolution.DeconvolutionActivation(x, weight, bias,
                                                        act_type=self._activation,
                                                        **self._kwargs)
        if pending is not None:
            self.weight._install(pending)
        return out

    def _data_channels(self, x: NDArray) -> int:
        """``x``'s channels, checked as the weight's first dim before it is created."""
        if x.ndim != self._ndim + 2 or x.shape[1] < 1:
            raise MXNetError(f"data must have {self._ndim + 2} dimensions ({self._layout}) and "
                             f"at least one channel, got data shape {x.shape}")
        self._check_divisible("data channels", x.shape[1])
        return x.shape[1]

    def __repr__(self) -> str:
        kw, ndim = self._kwargs, self._ndim
        text = (f"{type(self).__name__}({self._in_channels or None} -> {self._channels}, "
                f"kernel_size={kw['kernel']}, stride={kw['stride']}")
        if kw["pad"] != (0,) * ndim:
            text += f", padding={kw['pad']}"
        if kw["dilate"] != (1,) * ndim:
            text += f", dilation={kw['dilate']}"
        if kw["adj"] != (0,) * ndim:
            text += f", output_padding={kw['adj']}"
        if kw["num_group"] != 1:
            text += f", groups={kw['num_group']}"
        if self.bias is None:
            text += ", bias=False"
        if self._activation:
            text += f", Activation({self._activation})"
        return text + ")"


class Conv1DTranspose(_ConvTranspose):
    """Transposed 1-D convolution over ``(N, C, W)`` (MXNet Gluon's ``Conv1DTranspose``).

    ``out_width = (width-1)*strides - 2*padding + dilation*(kernel_size-1) + 1 + output_padding``

    >>> from mxdeconv import gluon, nd
    >>> layer = gluon.Conv1DTranspose(4, kernel_size=3, strides=2, in_channels=2)
    >>> layer.initialize()
    >>> layer(nd.ones((1, 2, 5))).shape
    (1, 4, 11)
    """

    _ndim, _layout = 1, "NCW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, dilation: Any = 1, groups: int = 1,
                 layout: str = "NCW", activation: Optional[str] = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, output_padding, dilation,
                         groups, layout, activation, use_bias, weight_initializer,
                         bias_initializer, in_channels, **kwargs)


class Conv2DTranspose(_ConvTranspose):
    """Transposed 2-D convolution over ``(N, C, H, W)`` (MXNet Gluon's ``Conv2DTranspose``).

    Per spatial dim: ``out = (in-1)*strides - 2*padding + dilation*(kernel_size-1) + 1
    + output_padding``.  ``in_channels=0`` defers the weight's shape to the
    first forward.

    >>> from mxdeconv import gluon, nd
    >>> layer = gluon.Conv2DTranspose(6, kernel_size=(3, 3), strides=(2, 2),
    ...                               padding=(1, 1), output_padding=(1, 1), groups=2)
    >>> layer.initialize()
    >>> layer(nd.ones((1, 4, 5, 5))).shape, layer.weight.shape
    ((1, 6, 10, 10), (4, 3, 3, 3))
    """

    _ndim, _layout = 2, "NCHW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: Any = (0, 0), output_padding: Any = (0, 0),
                 dilation: Any = (1, 1), groups: int = 1, layout: str = "NCHW",
                 activation: Optional[str] = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, output_padding, dilation,
                         groups, layout, activation, use_bias, weight_initializer,
                         bias_initializer, in_channels, **kwargs)


class Conv3DTranspose(_ConvTranspose):
    """Transposed 3-D convolution over ``(N, C, D, H, W)`` (MXNet Gluon's ``Conv3DTranspose``).

    >>> from mxdeconv import gluon, nd
    >>> layer = gluon.Conv3DTranspose(2, kernel_size=2, strides=2, in_channels=3,
    ...                               use_bias=False)
    >>> layer.initialize()
    >>> layer(nd.ones((1, 3, 2, 2, 2))).shape
    (1, 2, 4, 4, 4)
    """

    _ndim, _layout = 3, "NCDHW"

    def __init__(self, channels: int, kernel_size: Any, strides: Any = (1, 1, 1),
                 padding: Any = (0, 0, 0), output_padding: Any = (0, 0, 0),
                 dilation: Any = (1, 1, 1), groups: int = 1, layout: str = "NCDHW",
                 activation: Optional[str] = None, use_bias: bool = True,
                 weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(channels, kernel_size, strides, padding, output_padding, dilation,
                         groups, layout, activation, use_bias, weight_initializer,
                         bias_initializer, in_channels, **kwargs)


class Sequential(_Block):
    """MXNet Gluon's ``nn.Sequential``: layers run one after another, their
    parameters saved and loaded under MXNet's structural names (``0.weight``,
    ``0.bias``, ``1.weight``, ...), so that MXNet's ``net.save_parameters``
    files of a sequential network load as they are.

    >>> from mxdeconv import gluon, nd
    >>> net = gluon.HybridSequential()
    >>> with net.name_scope():
    ...     net.add(gluon.Conv2DTranspose(4, 4, in_channels=2, activation="relu"),
    ...             gluon.Conv2DTranspose(1, 4, strides=2, padding=1, in_channels=4))
    >>> net.initialize()
    >>> net(nd.ones((1, 2, 1, 1))).shape
    (1, 1, 8, 8)
    >>> [name.split("_", 1)[1] for name in net.collect_params()]
    ['conv0_weight', 'conv0_bias', 'conv1_weight', 'conv1_bias']
    >>> len(net), net[1]
    (2, Conv2DTranspose(4 -> 1, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1)))
    """

    _alias = "sequential"

    def __init__(self, prefix: Optional[str] = None, params: Any = None) -> None:
        if params is not None:
            raise MXNetError(f"sharing parameters through params= is not supported: params "
                             f"must be None, got {params!r:.80}")
        if prefix is not None and not isinstance(prefix, str):
            raise _type_error("prefix", "a string or None", prefix)
        self.prefix = _auto_prefix(self._alias) if prefix is None else prefix
        self._children: List[_Block] = []
        self._scope_counts: Dict[str, int] = {}

    @contextlib.contextmanager
    def name_scope(self) -> Iterator[None]:
        """Layers created inside get this container's prefix (MXNet's ``name_scope``)."""
        stack = getattr(_scopes, "stack", None)
        if stack is None:
            stack = _scopes.stack = []
        stack.append((self.prefix, self._scope_counts))
        try:
            yield
        finally:
            stack.pop()

    def add(self, *blocks: _Block) -> None:
        """Append ``blocks`` (layers or sequential containers), all checked first."""
        for block in blocks:
            if not isinstance(block, _Block):
                raise _type_error("block", "a Gluon layer or Sequential", block)
        self._children.extend(blocks)

    def _layers_by_key(self) -> Dict[str, Tuple["_ConvTranspose", Parameter]]:
        return {f"{index}.{key}": owned
                for index, child in enumerate(self._children)
                for key, owned in child._layers_by_key().items()}

    def __call__(self, x: Any) -> NDArray:
        return self.forward(x)

    def forward(self, x: Any) -> NDArray:
        """Each layer on the previous one's output."""
        for child in self._children:
            x = child(x)  # type: ignore[operator]
        return x

    def __getitem__(self, key: Any) -> Any:
        """A layer by index, or a new container of the same class holding a slice."""
        if isinstance(key, slice):
            net = type(self)(prefix=self.prefix)
            net.add(*self._children[key])
            return net
        if not _is_int(key):
            raise _type_error("key", "an int or a slice", key)
        return self._children[key]

    def __len__(self) -> int:
        return len(self._children)

    def __repr__(self) -> str:
        lines = [f"  ({index}): {child!r}".replace("\n", "\n  ")
                 for index, child in enumerate(self._children)]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"


class HybridSequential(Sequential):
    """MXNet Gluon's ``nn.HybridSequential``: :class:`Sequential` (``hybridize()``
    is accepted; every call is imperative).

    >>> from mxdeconv import gluon
    >>> net = gluon.HybridSequential()
    >>> net.add(gluon.Conv1DTranspose(2, 3, in_channels=1))
    >>> net.hybridize()
    >>> net
    HybridSequential(
      (0): Conv1DTranspose(1 -> 2, kernel_size=(3,), stride=(1,))
    )
    """

    _alias = "hybridsequential"
