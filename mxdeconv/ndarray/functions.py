"""MXNet's module-level NDArray functions: ``nd.concat``, ``nd.stack``,
``nd.zeros_like``, ``nd.ones_like``, ``nd.full``, ``nd.arange``, ``nd.cast``,
``nd.waitall``.

They take MXNet's arguments (``concat``'s ``dim=1`` default, ``arange``'s
``repeat``, ``ctx=``) and call the NumPy function, which NumPy hands to
NDArray's ``__array_function__`` (:mod:`mxdeconv.ndarray.numpy_protocols`), so that
joins are recorded by autograd.

>>> from mxdeconv import nd
>>> nd.concat(nd.ones((2, 1)), nd.zeros((2, 2))).asnumpy()
array([[1., 0., 0.],
       [1., 0., 0.]], dtype=float32)
"""
from __future__ import annotations

import math
# typing.cast below: NumPy's functions hand NDArrays to NDArray.__array_function__,
# which returns an NDArray (NumPy's stubs say ndarray); `cast` is nd.cast here.
import typing
from typing import Any, Optional

import numpy as np

from mxdeconv._core.args import int_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.context import context_arg
from .ndarray import NDArray, _check_dtype, _shape_arg, empty
from .numpy_protocols import _sequence, check_writable, is_number, scalar
from .results import check_name, into

__all__ = ["Cast", "arange", "cast", "concat", "full", "one_hot", "ones_like", "stack",
           "waitall", "zeros_like"]


def _count(name: str, data: tuple, num_args: Any) -> None:
    """MXNet's variadic arrays: NDArrays as separate arguments.  Checked here,
    before NumPy sees them: a list among them would not reach NDArray's
    protocols (NumPy would join it into a NumPy array), where MXNet refuses it."""
    if not data:
        raise MXNetError(f"{name}: needs at least one array (num_args >= 1)")
    _sequence(name, data)
    if num_args is not None and num_args != len(data):
        raise MXNetError(f"{name}: num_args={num_args!r} but {len(data)} arrays were given")


def concat(*data: NDArray, dim: int = 1, num_args: Optional[int] = None) -> NDArray:
    """The arrays joined along ``dim`` (MXNet's default: 1, the channels).

    >>> from mxdeconv import nd
    >>> nd.concat(nd.ones((1, 2)), nd.zeros((2, 2)), dim=0).shape
    (3, 2)
    """
    _count("concat", data, num_args)
    return typing.cast(NDArray, np.concatenate(data, axis=dim))


def stack(*data: NDArray, axis: int = 0, num_args: Optional[int] = None) -> NDArray:
    """The arrays (of one shape) joined along a new axis ``axis``.

    >>> from mxdeconv import nd
    >>> nd.stack(nd.ones((2,)), nd.zeros((2,)), axis=1).asnumpy()
    array([[1., 0.],
           [1., 0.]], dtype=float32)
    """
    _count("stack", data, num_args)
    return typing.cast(NDArray, np.stack(data, axis=axis))


def _ndarray(name: str, data: Any) -> NDArray:
    if not isinstance(data, NDArray):
        raise TypeError(f"{name}: data must be an NDArray, got {type(data).__name__}")
    return data


def zeros_like(data: NDArray) -> NDArray:
    """Zeros of ``data``'s shape and dtype.

    >>> from mxdeconv import nd
    >>> nd.zeros_like(nd.ones((2,), dtype="int32")).asnumpy()
    array([0, 0], dtype=int32)
    """
    return typing.cast(NDArray, np.zeros_like(_ndarray("zeros_like", data)))


def ones_like(data: NDArray) -> NDArray:
    """Ones of ``data``'s shape and dtype.

    >>> from mxdeconv import nd
    >>> nd.ones_like(nd.zeros((2,), dtype="float16")).asnumpy()
    array([1., 1.], dtype=float16)
    """
    return typing.cast(NDArray, np.ones_like(_ndarray("ones_like", data)))


def cast(data: NDArray, dtype: Any, out: Optional[NDArray] = None,
         name: Optional[str] = None) -> NDArray:
    """A copy of ``data`` in ``dtype`` (MXNet's ``nd.cast``, ``x.astype(dtype)``):
    floats truncate toward zero into integers; recorded, the gradient is cast back.

    >>> from mxdeconv import nd
    >>> nd.cast(nd.array([1.7, -1.7]), dtype="int32").asnumpy()
    array([ 1, -1], dtype=int32)
    """
    arr = _ndarray("cast", data)
    check_name("cast", name)
    return into("cast", arr.astype(dtype), out, (arr,))


#: MXNet's other name for :func:`cast`.
Cast = cast


def full(shape: Any, val: Any, ctx: Any = None, dtype: Any = np.float32,
         out: Optional[NDArray] = None) -> NDArray:
    """An array of ``shape`` filled with ``val`` (cast to ``dtype`` as MXNet casts:
    ``full((2,), 2.5, dtype="int32")`` holds 2s); with ``out``, fill that array.

    >>> from mxdeconv import nd
    >>> nd.full((2, 2), 3).asnumpy()
    array([[3., 3.],
           [3., 3.]], dtype=float32)
    """
    if not is_number(val):
        raise TypeError(f"full: val must be a number, got {type(val).__name__}")
    if out is None:
        out = empty(shape, ctx, np.float32 if dtype is None else dtype)
        value = scalar("full: val", val, out.dtype)
        out._state[0].fill(value)
        return out
    if not isinstance(out, NDArray):
        raise TypeError(f"full: out must be an NDArray, got {type(out).__name__}")
    if ctx is not None:
        context_arg("full: ctx", ctx)
    value = scalar("full: val", val, out.dtype)
    buffer = check_writable("full(out=)", out)
    buffer.fill(value)
    out._bump()
    return out


def arange(start: Any, stop: Any = None, step: Any = 1.0, repeat: int = 1,
           infer_range: Any = None, ctx: Any = None, dtype: Any = np.float32) -> NDArray:
    """Evenly spaced values in ``[start, stop)`` (``arange(n)``: from 0), each
    repeated ``repeat`` times, in ``dtype`` (float32 by default, as in MXNet).
    ``infer_range`` (symbolic MXNet only) is accepted and ignored.

    >>> from mxdeconv import nd
    >>> nd.arange(3).asnumpy(), nd.arange(1, 2, 0.5, repeat=2).asnumpy()
    (array([0., 1., 2.], dtype=float32), array([1. , 1. , 1.5, 1.5], dtype=float32))
    """
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        if value is not None and (not is_number(value) or isinstance(value, (bool, np.bool_))):
            raise TypeError(f"arange: {name} must be a number, got {value!r}")
    if stop is None:
        start, stop = 0, start
    repeat = int_arg("arange: repeat", repeat)
    if step == 0:
        raise MXNetError("arange: Range does not support step=0, received 0")
    if repeat < 1:
        raise MXNetError(f"arange: repeat must be >= 1, got {repeat}")
    if not all(math.isfinite(float(v)) for v in (start, stop, step)):
        raise MXNetError(f"arange: start, stop and step must be finite, got {start}, {stop}, "
                         f"{step}")
    dtype = _check_dtype(np.float32 if dtype is None else dtype)
    length = max(0, math.ceil((float(stop) - float(start)) / float(step)))
    values = np.repeat(float(start) + float(step) * np.arange(length, dtype=np.float64),
                       int(repeat))
    out = empty(_shape_arg(values.size), ctx, dtype)
    with np.errstate(all="ignore"):
        np.copyto(out._state[0], values, casting="unsafe")
    return out


def waitall() -> None:
    """MXNet compatibility: every operation here is synchronous, so there is
    nothing to wait for.

    >>> from mxdeconv import nd
    >>> nd.waitall()
    """


def one_hot(indices: NDArray, depth: int, on_value: float = 1.0, off_value: float = 0.0,
            dtype: Any = np.float32, out: Optional[NDArray] = None,
            name: Optional[str] = None) -> NDArray:
    """MXNet's ``nd.one_hot``: shape ``indices.shape + (depth,)``, ``on_value``
    at each index (truncated toward zero to an integer) and ``off_value``
    elsewhere; an index outside ``[0, depth)`` gives a row of ``off_value``.
    Not differentiable (a constant, as MXNet gives no gradient to indices).

    >>> from mxdeconv import nd
    >>> nd.one_hot(nd.array([1, 0, 5]), 3).asnumpy()
    array([[0., 1., 0.],
           [1., 0., 0.],
           [0., 0., 0.]], dtype=float32)
    """
    arr = _ndarray("one_hot", indices)
    check_name("one_hot", name)
    depth = int_arg("one_hot: depth", depth)
    if depth < 0:
        raise MXNetError(f"one_hot: depth must be >= 0, got depth={depth}")
    for label, value in (("on_value", on_value), ("off_value", off_value)):
        if not is_number(value) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"one_hot: {label} must be a number, got {value!r}")
    result = empty(arr.shape + (depth,), None, _check_dtype(np.float32 if dtype is None
                                                             else dtype))
    target = result._state[0]
    target.fill(scalar("one_hot: off_value", off_value, result.dtype))
    with np.errstate(invalid="ignore"):
        index = np.trunc(arr._plain().astype(np.float64))
    valid = (index >= 0) & (index < depth)
    positions = np.nonzero(valid)
    target[positions + (index[positions].astype(np.int64),)] = scalar(
        "one_hot: on_value", on_value, result.dtype)
    return into("one_hot", result, out, ())
