"""Elementwise operators for building small graphs around Deconvolution.

``add`` and ``multiply`` are ``x + y`` and ``x * y`` (NumPy computes them on
NDArrays through :mod:`mxdeconv.ndarray.numpy_protocols`, with MXNet's broadcasting and
dtype rules; either operand may be a number or a NumPy array).  ``relu`` runs in
NumPy on the default layout (a blocked input is turned into the default layout
first, in place).  All three are recorded by :mod:`mxdeconv.autograd`.

>>> from mxdeconv import nd
>>> (nd.array([1.0, -2.0]) * 3 + 1).asnumpy()
array([ 4., -5.], dtype=float32)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import numpy_protocols
from mxdeconv.autograd import tape
from mxdeconv._core.buffers import aligned_empty
from .gradients import deliver as _deliver
from .ndarray import NDArray, as_ndarray

__all__ = ["add", "multiply", "relu"]


def _plain(arr: NDArray) -> np.ndarray:
    return arr._plain()


def _binary(ufunc: np.ufunc, name: str, lhs: Any, rhs: Any) -> NDArray:
    if not isinstance(lhs, NDArray) and not isinstance(rhs, NDArray):
        if not isinstance(lhs, np.ndarray) and not isinstance(rhs, np.ndarray):
            raise TypeError(f"{name}: at least one operand must be an NDArray")
        # Two NumPy arrays: copied into NDArrays, so that the result is one too.
        lhs = as_ndarray(lhs, f"{name}: lhs") if isinstance(lhs, np.ndarray) else lhs
        rhs = as_ndarray(rhs, f"{name}: rhs") if isinstance(rhs, np.ndarray) else rhs
    return numpy_protocols.array_ufunc(ufunc, "__call__", (lhs, rhs), {})


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


# -- backward ---------------------------------------------------------------------
@tape.register_backward("relu")
def _relu_backward(out_grad, inputs, constants, reqs, targets):
    (arr,), (req,), (target,) = inputs, reqs, targets
    if req == "null":
        return (None,)
    grad = _plain(out_grad) * (_plain(arr) > 0)
    return (_deliver(grad, req, target, arr.dtype),)
