"""Elementwise operators for building small graphs around Deconvolution.

``add``, ``multiply`` and ``relu`` run in NumPy on the default layout (a
blocked input is turned into the default layout first, in place), broadcast
like MXNet's ``broadcast_add`` / ``broadcast_mul`` (NumPy rules), accept a
Python number for either operand of ``add`` / ``multiply``, and are recorded
by :mod:`mxdeconv.autograd`.  ``x + y`` and ``x * y`` on NDArrays call them.

>>> from mxdeconv import nd
>>> (nd.array([1.0, -2.0]) * 3 + 1).asnumpy()
array([ 4., -5.], dtype=float32)
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Tuple

import numpy as np

from . import ndarray, tape
from .base import MXNetError
from .buffers import aligned_empty
from .ndarray import NDArray, as_ndarray

__all__ = ["add", "multiply", "relu"]


def _plain(arr: NDArray) -> np.ndarray:
    return arr._plain()


def _operands(lhs: Any, rhs: Any, name: str) -> Tuple[Optional[NDArray], Optional[NDArray],
                                                      np.ndarray, np.ndarray, np.dtype]:
    """(lhs NDArray or None, rhs NDArray or None, lhs values, rhs values, dtype)."""
    arrays = []
    for side, value in (("lhs", lhs), ("rhs", rhs)):
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            arrays.append(None)
        else:
            arrays.append(as_ndarray(value, f"{name}: {side}"))
    if arrays[0] is None and arrays[1] is None:
        raise TypeError(f"{name}: at least one operand must be an NDArray")
    dtypes = {a.dtype for a in arrays if a is not None}
    if len(dtypes) > 1:
        raise MXNetError(f"{name}: operands have different dtypes {sorted(map(str, dtypes))}")
    dtype = dtypes.pop()
    values = [_number(name, side, v, dtype) if a is None else _plain(a)
              for a, v, side in zip(arrays, (lhs, rhs), ("lhs", "rhs"))]
    return arrays[0], arrays[1], values[0], values[1], dtype


def _number(name: str, side: str, value: numbers.Number, dtype: np.dtype) -> np.ndarray:
    """A Python number as a 0-d array of the operation's dtype."""
    try:
        return np.asarray(value, dtype=dtype)
    except (OverflowError, TypeError, ValueError):
        text = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise MXNetError(f"{name}: {side} {text} does not fit in {dtype}") from None


def _binary(ufunc: np.ufunc, name: str, lhs: Any, rhs: Any) -> NDArray:
    left, right, a, b, dtype = _operands(lhs, rhs, name)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise MXNetError(f"{name}: shapes {a.shape} and {b.shape} cannot be broadcast "
                         "together") from None
    buffer = aligned_empty(shape, dtype)
    ufunc(a, b, out=buffer)
    out = NDArray(buffer)
    return tape.record_op(name, out, (left, right), (a if left is None else None,
                                                         b if right is None else None))


def add(lhs: Any, rhs: Any) -> NDArray:
    """``lhs + rhs`` elementwise, with broadcasting; either may be a number.

    >>> from mxdeconv import nd
    >>> nd.add(nd.ones((2, 2)), nd.array([10.0, 20.0])).asnumpy()
    array([[11., 21.],
           [11., 21.]], dtype=float32)
    """
    return _binary(np.add, "add", lhs, rhs)


def multiply(lhs: Any, rhs: Any) -> NDArray:
    """``lhs * rhs`` elementwise, with broadcasting; either may be a number.

    >>> from mxdeconv import nd
    >>> nd.multiply(nd.array([1.0, 2.0]), 0.5).asnumpy()
    array([0.5, 1. ], dtype=float32)
    """
    return _binary(np.multiply, "multiply", lhs, rhs)


def relu(data: Any) -> NDArray:
    """``max(data, 0)`` elementwise (MXNet's ``nd.relu``); the gradient is 0 at 0.

    >>> from mxdeconv import nd
    >>> nd.relu(nd.array([-1.0, 0.0, 2.0])).asnumpy()
    array([0., 0., 2.], dtype=float32)
    """
    arr = as_ndarray(data, "relu: data")
    values = _plain(arr)
    buffer = aligned_empty(values.shape, values.dtype)
    np.maximum(values, 0, out=buffer)
    return tape.record_op("relu", NDArray(buffer), (arr,), None)


# NDArray's ``+`` and ``*`` (ndarray.py sits below this module, so it looks them up).
ndarray.OPERATORS.update(add=add, multiply=multiply)


# -- backward ---------------------------------------------------------------------
def _reduce_to(grad: np.ndarray, shape: Tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast result's gradient back to an operand's ``shape``."""
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(
        extra + i for i, extent in enumerate(shape) if extent == 1 and grad.shape[extra + i] != 1)
    # 16-bit floats are summed in float32, as the Deconvolution bias gradient is:
    # a bfloat16 running sum stops growing at 256 ones.
    wide = np.float32 if grad.dtype.itemsize < 4 else None
    return grad.sum(axis=axes, keepdims=True, dtype=wide).astype(grad.dtype).reshape(shape)


def _deliver(value: np.ndarray, req: str, target: Optional[NDArray],
             dtype: np.dtype) -> Optional[NDArray]:
    """Write or add ``value`` into ``target``, or wrap a fresh copy (never a view
    of out_grad: gradients flowing to several inputs must not alias)."""
    if req == "null":
        return None
    if target is None:
        buffer = aligned_empty(value.shape, dtype)
        np.copyto(buffer, value, casting="unsafe")
        return NDArray(buffer)
    plain = _plain(target)
    if req == "add":
        plain += value
    else:
        np.copyto(plain, value, casting="unsafe")
    target._bump()
    return target


@tape.register_backward("add")
def _add_backward(out_grad, inputs, constants, reqs, targets):
    grad = _plain(out_grad)
    return tuple(None if arr is None else
                 _deliver(_reduce_to(grad, arr.shape), req, target, arr.dtype)
                 for arr, req, target in zip(inputs, reqs, targets))


@tape.register_backward("multiply")
def _multiply_backward(out_grad, inputs, constants, reqs, targets):
    grad = _plain(out_grad)
    # The other operand's values: the recorded NDArray, or the number.
    values = [constants[i] if arr is None else _plain(arr) for i, arr in enumerate(inputs)]
    results = []
    for i, (arr, req, target) in enumerate(zip(inputs, reqs, targets)):
        if arr is None or req == "null":
            results.append(None)
            continue
        results.append(_deliver(_reduce_to(grad * values[1 - i], arr.shape), req, target,
                                arr.dtype))
    return tuple(results)


@tape.register_backward("relu")
def _relu_backward(out_grad, inputs, constants, reqs, targets):
    (arr,), (req,), (target,) = inputs, reqs, targets
    if req == "null":
        return (None,)
    grad = _plain(out_grad) * (_plain(arr) > 0)
    return (_deliver(grad, req, target, arr.dtype),)
