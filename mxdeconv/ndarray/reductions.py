"""MXNet's functions that reduce an axis: ``nd.sum``, ``nd.mean``, ``nd.max``,
``nd.min``, ``nd.prod``, ``nd.norm``, ``nd.argmax``, ``nd.argmin``, ``nd.pick``.

The reductions take MXNet's ``(data, axis=None, keepdims=False,
exclude=False, out=None, name=None)`` (``keepdims`` and ``exclude`` may be 0
or 1, as in MXNet) and are the methods' NumPy calls (``nd.sum(x, axis=1)`` is
``x.sum(axis=1)``, see :mod:`mxdeconv.ndarray.numpy_protocols`): reducing
every axis gives shape ``(1,)``, integer arrays stay integers.  ``argmax`` and
``argmin`` give the index as a number in ``data``'s dtype (MXNet's), with a
zero gradient; ``pick`` takes one element per position along an axis, the
building block of cross-entropy losses.  All are recorded by autograd.

>>> from mxdeconv import nd
>>> x = nd.array([[1, 5, 2], [7, 0, 3]])
>>> nd.sum(x, axis=1).asnumpy(), nd.mean(x).asnumpy()
(array([ 8., 10.], dtype=float32), array([3.], dtype=float32))
>>> nd.argmax(x, axis=1).asnumpy(), nd.pick(x, nd.array([1, 0])).asnumpy()
(array([1., 0.], dtype=float32), array([5., 7.], dtype=float32))
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import bool_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.shapes import normalize_axis, reduce_axes
from .gradients import deliver
from .ndarray import NDArray, _check_dtype
from .numpy_protocols import check_gradient, wrap
from .results import array_arg, check_name, into

__all__ = ["argmax", "argmin", "max", "mean", "min", "norm", "pick", "prod", "sum"]

Reduction = Callable[..., NDArray]


def _reduction(function: str, numpy_function: Callable[..., NDArray], result: str) -> Reduction:
    def reduce(data: NDArray, axis: Any = None, keepdims: bool = False, exclude: bool = False,
               out: Optional[NDArray] = None, name: Optional[str] = None) -> NDArray:
        arr = array_arg(function, data)
        check_name(function, name)
        axes = reduce_axes(arr.shape, axis, bool_arg(f"{function}: exclude", exclude),
                           name=f"{function}: axis")
        keep = bool_arg(f"{function}: keepdims", keepdims)
        return into(function, numpy_function(arr, axis=axes, keepdims=keep), out, (arr,))
    reduce.__name__ = reduce.__qualname__ = function
    reduce.__doc__ = (
        f"The {function} over ``axis`` (MXNet's ``nd.{function}``; ``axis`` None or ``()``: "
        f"every axis; ``exclude=True``: the axes not listed), shape ``(1,)`` when every axis "
        f"is reduced, ``keepdims=True`` keeps them as 1s.\n\n"
        f">>> from mxdeconv import nd\n"
        f">>> x = nd.array([[1, 5, 2], [7, 0, 3]])\n"
        f">>> nd.{function}(x, axis=1).asnumpy(), nd.{function}(x, axis=1, exclude=True).shape\n"
        f"{result}\n"
        f">>> nd.{function}(x).shape, nd.{function}(x, 0, keepdims=True).shape\n"
        f"((1,), (1, 3))\n")
    return reduce


sum = _reduction("sum", np.sum, "(array([ 8., 10.], dtype=float32), (3,))")
mean = _reduction("mean", np.mean, "(array([2.6666667, 3.3333333], dtype=float32), (3,))")
max = _reduction("max", np.max, "(array([5., 7.], dtype=float32), (3,))")
min = _reduction("min", np.min, "(array([1., 0.], dtype=float32), (3,))")
prod = _reduction("prod", np.prod, "(array([10.,  0.], dtype=float32), (3,))")


def norm(data: NDArray, ord: int = 2, axis: Any = None, out_dtype: Any = None,
         keepdims: bool = False, out: Optional[NDArray] = None,
         name: Optional[str] = None) -> NDArray:
    """The L2 (``ord=2``) or L1 (``ord=1``) norm over ``axis`` (None: every
    element, as one vector), MXNet's ``nd.norm``; ``out_dtype`` casts the
    result (recorded: the gradient is cast back).

    >>> from mxdeconv import nd
    >>> x = nd.array([[3, 4], [6, -8]])
    >>> nd.norm(x, axis=1).asnumpy(), nd.norm(x, ord=1).asnumpy()
    (array([ 5., 10.], dtype=float32), array([21.], dtype=float32))
    >>> nd.norm(x, out_dtype="float64").dtype
    dtype('float64')
    """
    arr = array_arg("norm", data)
    check_name("norm", name)
    axes = reduce_axes(arr.shape, axis, name="norm: axis")
    result = np.linalg.norm(arr, ord=ord, axis=axes,
                            keepdims=bool_arg("norm: keepdims", keepdims))
    if out_dtype is not None:
        result = result.astype(_check_dtype(out_dtype, "norm: out_dtype"), copy=False)
    return into("norm", result, out, (arr,))


def _arg_extreme(function: str, which: Callable[..., np.ndarray]) -> Reduction:
    def arg_extreme(data: NDArray, axis: Optional[int] = None, keepdims: bool = False,
                    out: Optional[NDArray] = None, name: Optional[str] = None) -> NDArray:
        arr = array_arg(function, data)
        check_name(function, name)
        keep = bool_arg(f"{function}: keepdims", keepdims)
        values = arr._plain()
        if axis is None:  # MXNet: the index into the flattened array
            position = None
            shape = (1,) * values.ndim if keep and values.ndim else (1,)
        else:
            position = normalize_axis(f"{function}: axis", axis, values.ndim)
            shape = None
        if (values.size if position is None else values.shape[position]) == 0:
            raise MXNetError(f"{function}: cannot reduce an empty axis of shape {values.shape}")
        index = np.asarray(which(values, axis=position, keepdims=keep and position is not None))
        # MXNet has no 0-d results: a 1-D array's index has shape (1,).
        result = wrap(np.reshape(index, shape or index.shape or (1,)), arr.dtype)
        return into(function, tape.record_op(function, result, (arr,), None), out, (arr,))
    arg_extreme.__name__ = arg_extreme.__qualname__ = function
    arg_extreme.__doc__ = (
        f"The index of the {'largest' if function == 'argmax' else 'smallest'} element along "
        f"``axis`` (None: of the flattened array), the first one where several tie, as a "
        f"number in ``data``'s dtype (MXNet's ``nd.{function}``); the gradient is zero.\n\n"
        f">>> from mxdeconv import nd\n"
        f">>> x = nd.array([[1, 5, 5], [7, 0, 3]])\n"
        f">>> nd.{function}(x, axis=1).asnumpy(), nd.{function}(x).asnumpy()\n"
        + ("(array([1., 0.], dtype=float32), array([3.], dtype=float32))\n"
           if function == "argmax" else
           "(array([0., 1.], dtype=float32), array([4.], dtype=float32))\n"))
    return arg_extreme


argmax = _arg_extreme("argmax", np.argmax)
argmin = _arg_extreme("argmin", np.argmin)


# -- NDArray's methods that are these functions ----------------------------------------
def _argmax_method(self: NDArray, axis: Any = None, keepdims: bool = False) -> Any:
    """The index of the largest element along ``axis`` (MXNet's ``x.argmax``:
    :func:`mxdeconv.nd.argmax`, indices as floats in the array's dtype).

    >>> from mxdeconv import nd
    >>> nd.array([[1, 5], [4, 3]]).argmax(axis=1).asnumpy()
    array([1., 0.], dtype=float32)
    """
    return argmax(self, axis=axis, keepdims=keepdims)


def _argmin_method(self: NDArray, axis: Any = None, keepdims: bool = False) -> Any:
    """The index of the smallest element along ``axis`` (:func:`mxdeconv.nd.argmin`).

    >>> from mxdeconv import nd
    >>> nd.array([[1, 5], [3, 4]]).argmin(axis=0).asnumpy()
    array([0., 1.], dtype=float32)
    """
    return argmin(self, axis=axis, keepdims=keepdims)


def install() -> None:
    """Set ``argmax`` and ``argmin`` on NDArray.  The package's ``__init__``
    calls this: :mod:`mxdeconv.ndarray.ndarray` and its methods never import
    this module, which builds on them."""
    for name, method in (("argmax", _argmax_method), ("argmin", _argmin_method)):
        method.__name__, method.__qualname__ = name, f"NDArray.{name}"
        setattr(NDArray, name, method)

PICK_MODES = ("clip", "wrap")


def pick(data: NDArray, index: NDArray, axis: Optional[int] = -1, keepdims: bool = False,
         mode: str = "clip", out: Optional[NDArray] = None,
         name: Optional[str] = None) -> NDArray:
    """The element at ``index`` along ``axis`` for every other position
    (MXNet's ``nd.pick``).  ``index`` has ``data``'s shape without ``axis``
    (or with it as 1); its values are truncated to integers, and out-of-range
    ones clipped (``mode="clip"``) or wrapped (``"wrap"``).  The gradient
    flows to the picked elements; ``index`` gets zeros.

    >>> from mxdeconv import nd
    >>> x = nd.array([[1, 2, 3], [4, 5, 6]])
    >>> nd.pick(x, nd.array([2, 0])).asnumpy()
    array([3., 4.], dtype=float32)
    >>> nd.pick(x, nd.array([1, 0, 1]), axis=0, keepdims=True).asnumpy()
    array([[4., 2., 6.]], dtype=float32)
    """
    arr = array_arg("pick", data)
    indices = array_arg("pick", index, "index")
    check_name("pick", name)
    if axis is None:
        raise MXNetError("pick: axis=None is not supported (as in MXNet 1.9.1): give an axis")
    position = normalize_axis("pick: axis", axis, arr.ndim)
    keep = bool_arg("pick: keepdims", keepdims)
    if not isinstance(mode, str):
        raise TypeError(f"pick: mode must be one of {PICK_MODES}, got {mode!r}")
    if mode not in PICK_MODES:
        raise MXNetError(f"pick: Invalid Input: {mode!r}, valid values are: {{'clip', 'wrap'}}")
    kept = arr.shape[:position] + (1,) + arr.shape[position + 1:]
    dropped = arr.shape[:position] + arr.shape[position + 1:]
    if indices.shape not in (kept, dropped):
        raise MXNetError(f"pick: index has shape {indices.shape}, expected {dropped} (data's "
                         f"shape {arr.shape} without axis {position}) or {kept}")
    extent = arr.shape[position]
    if extent == 0:
        raise MXNetError(f"pick: cannot pick along an empty axis of shape {arr.shape}")
    check_gradient("pick", "pick", (arr, indices))
    with np.errstate(all="ignore"):  # NaN indices become some integer, then clipped
        whole = np.trunc(indices._plain().astype(np.float64)).astype(np.int64).reshape(kept)
    whole = np.clip(whole, 0, extent - 1) if mode == "clip" else np.mod(whole, extent)
    values = np.take_along_axis(arr._plain(), whole, axis=position)
    result = wrap(values if keep else values.reshape(dropped or (1,)))  # (1,), never 0-d
    recorded = tape.record_op("pick", result, (arr, indices), (position, whole))
    return into("pick", recorded, out, (arr, indices))


@tape.register_backward("pick")
def _pick_backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
    (arr, indices), (data_req, index_req), (data_target, index_target) = inputs, reqs, targets
    position, whole = attrs
    grads: List[Optional[NDArray]] = [None, None]
    if data_req != "null":
        grad = np.zeros(arr.shape, out_grad.dtype)
        np.put_along_axis(grad, whole, out_grad._plain().reshape(whole.shape), axis=position)
        grads[0] = deliver(grad, data_req, data_target, arr.dtype)
    if index_req != "null":
        grads[1] = deliver(np.zeros(indices.shape, indices.dtype), index_req, index_target,
                           indices.dtype)
    return tuple(grads)
