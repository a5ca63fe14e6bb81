"""MXNet's one-input elementwise functions: ``nd.abs``, ``nd.sqrt``,
``nd.sigmoid``, ``nd.clip``, ``nd.smooth_l1``, ...

Each takes MXNet's ``(data, ..., out=None, name=None)`` and gives an array of
``data``'s shape and dtype (integer arrays compute in float64 and truncate, as
MXNet does: ``nd.sqrt`` of int32 ``5`` is ``2``).  Those NumPy has as ufuncs
are the NumPy call, which NumPy hands to NDArray's ``__array_ufunc__``
(:mod:`mxdeconv.ndarray.numpy_protocols`): ``nd.exp(x)`` is ``x.exp()``.  The
others (``rsqrt``, ``round``, ``rint``, ``sigmoid``, ``clip``, ``smooth_l1``)
are computed here.  All are recorded by autograd, with MXNet's gradients
(:mod:`mxdeconv.ndarray.gradients`); the rounding functions and ``sign`` have
zero gradients.

>>> from mxdeconv import nd
>>> x = nd.array([-2.5, 0.25, 4.0])
>>> nd.abs(x).asnumpy(), nd.round(x).asnumpy()
(array([2.5 , 0.25, 4.  ], dtype=float32), array([-3.,  0.,  4.], dtype=float32))
>>> nd.clip(x, -1, 1).asnumpy()
array([-1.  ,  0.25,  1.  ], dtype=float32)
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import real_arg
from mxdeconv.semantics import activations
from .ndarray import NDArray
from .numpy_protocols import check_gradient, scalar as cast_scalar, wrap
from .results import array_arg, check_name, into

__all__ = ["abs", "ceil", "clip", "cos", "exp", "expm1", "fix", "floor", "log", "log10",
           "log1p", "log2", "negative", "reciprocal", "rint", "round", "rsqrt", "sigmoid",
           "sign", "sin", "smooth_l1", "sqrt", "square", "tan", "tanh", "trunc"]

UnaryFunction = Callable[..., NDArray]


def _ufunc_function(function: str, ufunc: np.ufunc, what: str, example: str,
                    result: str) -> UnaryFunction:
    """``nd.<function>``: ``ufunc`` on NDArray data, as the method computes it."""
    def unary(data: NDArray, out: Optional[NDArray] = None,
              name: Optional[str] = None) -> NDArray:
        arr = array_arg(function, data)
        check_name(function, name)
        return into(function, ufunc(arr), out, (arr,))
    return _named(unary, function, what, example, result)


def _named(unary: UnaryFunction, function: str, what: str, example: str,
           result: str) -> UnaryFunction:
    unary.__name__ = unary.__qualname__ = function
    unary.__doc__ = (f"{what} of each element (MXNet's ``nd.{function}``), in ``data``'s "
                     f"dtype; ``out=`` receives the result.\n\n"
                     f">>> from mxdeconv import nd\n"
                     f">>> nd.{function}(nd.array({example})).asnumpy()\n{result}\n")
    return unary


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """Integers compute in float64 (and truncate back, as MXNet), 16-bit floats
    in float32 (rounded once)."""
    if dtype.kind in "iu":
        return np.dtype(np.float64)
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def _apply(function: str, op: str, kernel: Callable[[np.ndarray], np.ndarray], data: Any,
           out: Any, name: Any, attrs: Any = None, widen: bool = True) -> NDArray:
    """``kernel`` on ``data``'s values (widened by :func:`_compute_dtype`
    unless ``widen`` is False), recorded as ``op`` with ``attrs``."""
    arr = array_arg(function, data)
    check_name(function, name)
    check_gradient(function, op, (arr,))
    values = arr._plain()
    if widen:
        values = values.astype(_compute_dtype(values.dtype), copy=False)
    with np.errstate(all="ignore"):  # inf and NaN where the math has them, as MXNet
        result = wrap(kernel(values), arr.dtype)
    return into(function, tape.record_op(op, result, (arr,), attrs), out, (arr,))


def _computed_function(function: str, kernel: Callable[[np.ndarray], np.ndarray], what: str,
                       example: str, result: str) -> UnaryFunction:
    def unary(data: NDArray, out: Optional[NDArray] = None,
              name: Optional[str] = None) -> NDArray:
        return _apply(function, function, kernel, data, out, name)
    return _named(unary, function, what, example, result)


# -- kernels NumPy has no ufunc for ---------------------------------------------------
def round_half_away(x: np.ndarray) -> np.ndarray:
    """MXNet's ``round``: halves away from zero (C's ``round``; NumPy's rounds
    them to even)."""
    whole = np.trunc(x)
    return whole + np.sign(x) * (np.abs(x - whole) >= 0.5)


def round_half_down(x: np.ndarray) -> np.ndarray:
    """MXNet's ``rint``: halves toward -inf (``rint(1.5)`` is 1, ``rint(-0.5)`` is -1)."""
    below = np.floor(x)
    return np.where(x - below <= 0.5, below, below + 1)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return activations.forward(x, "sigmoid")  # Activation's formula, one definition


# -- the functions --------------------------------------------------------------------
abs = _ufunc_function("abs", np.absolute, "The absolute value", "[-1.5, 2.0]",
                      "array([1.5, 2. ], dtype=float32)")
sign = _ufunc_function("sign", np.sign, "-1, 0 or 1, the sign", "[-1.5, 0.0, 2.0]",
                       "array([-1.,  0.,  1.], dtype=float32)")
sqrt = _ufunc_function("sqrt", np.sqrt, "The square root", "[4.0, 9.0]",
                       "array([2., 3.], dtype=float32)")
rsqrt = _computed_function("rsqrt", _rsqrt, "``1 / sqrt(x)``", "[4.0, 0.25]",
                           "array([0.5, 2. ], dtype=float32)")
square = _ufunc_function("square", np.square, "The square", "[2.0, -3.0]",
                         "array([4., 9.], dtype=float32)")
exp = _ufunc_function("exp", np.exp, "``e ** x``", "[0.0, 1.0]",
                      "array([1.      , 2.718282], dtype=float32)")
expm1 = _ufunc_function("expm1", np.expm1, "``exp(x) - 1`` (exact near 0)", "[0.0, 1e-10]",
                        "array([0.e+00, 1.e-10], dtype=float32)")
log = _ufunc_function("log", np.log, "The natural logarithm", "[1.0, 0.0]",
                      "array([  0., -inf], dtype=float32)")
log1p = _ufunc_function("log1p", np.log1p, "``log(1 + x)`` (exact near 0)", "[0.0, 1e-10]",
                        "array([0.e+00, 1.e-10], dtype=float32)")
log2 = _ufunc_function("log2", np.log2, "The base-2 logarithm", "[1.0, 8.0]",
                       "array([0., 3.], dtype=float32)")
log10 = _ufunc_function("log10", np.log10, "The base-10 logarithm", "[1.0, 10.0]",
                        "array([0., 1.], dtype=float32)")
negative = _ufunc_function("negative", np.negative, "``-x``", "[1.0, -2.0]",
                           "array([-1.,  2.], dtype=float32)")
reciprocal = _ufunc_function("reciprocal", np.reciprocal, "``1 / x``", "[2.0, -0.5]",
                             "array([ 0.5, -2. ], dtype=float32)")
floor = _ufunc_function("floor", np.floor, "The largest integer <= x", "[-1.5, 1.5]",
                        "array([-2.,  1.], dtype=float32)")
ceil = _ufunc_function("ceil", np.ceil, "The smallest integer >= x", "[-1.5, 1.5]",
                       "array([-1.,  2.], dtype=float32)")
trunc = _ufunc_function("trunc", np.trunc, "The integer part (toward zero)", "[-1.5, 1.5]",
                        "array([-1.,  1.], dtype=float32)")
fix = _ufunc_function("fix", np.trunc, "The nearest integer toward zero", "[-1.5, 1.5]",
                      "array([-1.,  1.], dtype=float32)")
round = _computed_function("round", round_half_away, "The nearest integer, halves away "
                           "from zero", "[-2.5, 0.5, 1.4]",
                           "array([-3.,  1.,  1.], dtype=float32)")
rint = _computed_function("rint", round_half_down, "The nearest integer, halves toward "
                          "-inf (MXNet's ``rint``, not NumPy's)", "[-2.5, 0.5, 1.5]",
                          "array([-3.,  0.,  1.], dtype=float32)")
sigmoid = _computed_function("sigmoid", _sigmoid, "``1 / (1 + exp(-x))``", "[0.0, 2.0]",
                             "array([0.5     , 0.880797], dtype=float32)")
sin = _ufunc_function("sin", np.sin, "The sine (radians)", "[0.0, 1.5707964]",
                      "array([0., 1.], dtype=float32)")
cos = _ufunc_function("cos", np.cos, "The cosine (radians)", "[0.0, 3.1415927]",
                      "array([ 1., -1.], dtype=float32)")
tan = _ufunc_function("tan", np.tan, "The tangent (radians)", "[0.0, 0.7853982]",
                      "array([0., 1.], dtype=float32)")
tanh = _ufunc_function("tanh", np.tanh, "The hyperbolic tangent", "[0.0, 1.0]",
                       "array([0.       , 0.7615942], dtype=float32)")


def clip(data: NDArray, a_min: float, a_max: float, out: Optional[NDArray] = None,
         name: Optional[str] = None) -> NDArray:
    """``data`` limited to ``[a_min, a_max]``, MXNet's ``nd.clip``: above
    ``a_max`` gives ``a_max``, else below ``a_min`` gives ``a_min`` (so
    ``a_min > a_max`` gives ``a_max`` above it and ``a_min`` below).  The
    bounds are cast to ``data``'s dtype first (``-3.5`` is ``-3`` for int32).
    The gradient passes where ``a_min <= x <= a_max``.

    >>> from mxdeconv import nd
    >>> nd.clip(nd.array([-2.0, 0.5, 3.0]), 0, 1).asnumpy()
    array([0. , 0.5, 1. ], dtype=float32)
    """
    arr = array_arg("clip", data)
    low = cast_scalar("clip: a_min", real_arg("clip: a_min", a_min), arr.dtype)
    high = cast_scalar("clip: a_max", real_arg("clip: a_max", a_max), arr.dtype)

    def kernel(x: np.ndarray) -> np.ndarray:
        return np.where(x > high, high, np.where(x < low, low, x))
    return _apply("clip", "clip", kernel, arr, out, name, (low, high), widen=False)


def smooth_l1(data: NDArray, scalar: float = 1.0, out: Optional[NDArray] = None,
              name: Optional[str] = None) -> NDArray:
    """MXNet's ``nd.smooth_l1`` with ``sigma = scalar``: ``0.5 * (sigma * x) ** 2``
    where ``|x| <= 1 / sigma ** 2``, else ``|x| - 0.5 / sigma ** 2``.

    >>> from mxdeconv import nd
    >>> nd.smooth_l1(nd.array([-2.0, 0.5, 1.0])).asnumpy()
    array([1.5  , 0.125, 0.5  ], dtype=float32)
    """
    sigma2 = real_arg("smooth_l1: scalar", scalar) ** 2
    # Python floats keep float32 data in float32 (a NumPy float64 would widen it).
    inverse = 1 / sigma2 if sigma2 else math.inf

    def kernel(x: np.ndarray) -> np.ndarray:
        return np.where(np.abs(x) <= inverse, 0.5 * sigma2 * x * x, np.abs(x) - 0.5 * inverse)
    return _apply("smooth_l1", "smooth_l1", kernel, data, out, name, sigma2)
