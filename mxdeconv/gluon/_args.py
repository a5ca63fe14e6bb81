"""Argument checks shared by the Gluon layers, their parameters and initializers."""
from __future__ import annotations

import numbers
import os
from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np

from mxdeconv._core.args import finite_real_arg, option_arg, type_error
from mxdeconv._core.args import is_int as _is_int
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.context import Context, context_arg
from mxdeconv._core.dtypes import as_dtype, is_float_dtype, is_operator_dtype, operator_dtype_names
from mxdeconv.ndarray.ndarray import NDArray
from mxdeconv.semantics.attributes import MAX_PARAM, parse_int_text, parse_shape_text


# -- argument checking -------------------------------------------------------------
# One helper per kind of argument, used by the layers and their parameters.
# A value of the wrong Python type raises TypeError, a bad value MXNetError, and
# both messages name the argument, what it accepts and what it got.  Strings are
# refused where a number, a tuple or a bool is expected (kernel_size="33" is not
# (3, 3)), except where MXNet's own layer passes the string on to the operator,
# which parses it (_int_attr, _tuple_attr).
# _type_error, _real_arg and _choice_arg live in mxdeconv._core.args (the
# initializers, below gluon, check their arguments with them too).
_type_error = type_error


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


_real_arg = finite_real_arg


def _bool_arg(name: str, value: Any) -> bool:
    """True, False, a NumPy bool, or the ints 0 and 1 (MXNet's "0" and "1")."""
    if isinstance(value, (bool, np.bool_)) or (_is_int(value) and value in (0, 1)):
        return bool(value)
    raise _type_error(name, "a bool (True, False, 0 or 1)", value)


_choice_arg = option_arg


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
    """Gluon's ``ctx``: a context or a list of them (see
    :func:`~mxdeconv._core.context.context_arg`: CPU contexts only), as a list; None stays
    None (the caller's default)."""
    if value is None:
        return None
    context_arg(name, value)  # the whole value first: an empty list, a GPU, a bad type
    items = value if isinstance(value, (list, tuple)) else [value]
    return [_context_arg(name, item) for item in items]


class LoadArgs(NamedTuple):
    """``load_parameters``' and ``ParameterDict.load``'s arguments, checked."""

    path: str
    contexts: Optional[List[Context]]
    allow_missing: bool
    ignore_extra: bool
    cast_dtype: bool
    dtype_source: str


def _load_args(filename: Any, ctx: Any, allow_missing: Any, ignore_extra: Any,
               cast_dtype: Any, dtype_source: Any) -> LoadArgs:
    """The arguments that loading a parameter file takes, each checked by name."""
    return LoadArgs(_path_arg("filename", filename), _contexts_arg("ctx", ctx),
                    _bool_arg("allow_missing", allow_missing),
                    _bool_arg("ignore_extra", ignore_extra),
                    _bool_arg("cast_dtype", cast_dtype),
                    _choice_arg("dtype_source", dtype_source, ("current", "saved")))


def _context_arg(name: str, value: Any) -> Context:
    """One context, as ``Parameter.data(ctx)`` takes (not a list)."""
    if isinstance(value, (list, tuple)):
        raise _type_error(name, "a Context (mxdeconv.cpu()), a string such as 'cpu(0)' or None",
                          value)
    return context_arg(name, value)


def _is_real(dtype: np.dtype) -> bool:
    """Integers and floats (bfloat16 too): what a parameter's values may be cast from."""
    return dtype.kind in "iu" or is_float_dtype(dtype)
