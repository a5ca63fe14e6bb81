"""MXNet's ``nd.softmax`` and ``nd.log_softmax``, recorded by autograd.

``softmax(x)`` along ``axis`` is ``exp(x / t) / sum(exp(x / t))`` for the
``temperature`` t (1 when None), computed as MXNet does from ``x - max(x)``
(no overflow); ``log_softmax`` is its logarithm, ``x - max - log(sum(exp(x -
max)))``, exact where ``log(softmax)`` would give ``-inf``.  16-bit floats
compute in float32; ``dtype=`` chooses the result's dtype.  The gradients are
MXNet's: ``y * (g - sum(g * y)) / t`` and ``(g - exp(y) * sum(g)) / t``.

>>> from mxdeconv import nd
>>> x = nd.array([[1, 2, 3], [1, 1, 1]])
>>> nd.softmax(x).asnumpy()
array([[0.09003057, 0.24472846, 0.66524094],
       [0.33333334, 0.33333334, 0.33333334]], dtype=float32)
>>> nd.log_softmax(nd.array([1000, 0])).asnumpy()
array([    0., -1000.], dtype=float32)
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import bool_arg, real_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.dtypes import is_float_dtype
from mxdeconv.semantics.shapes import normalize_axis
from .gradients import deliver
from .ndarray import NDArray, _check_dtype
from .numpy_protocols import check_gradient, wrap
from .results import array_arg, check_name, into

__all__ = ["log_softmax", "softmax"]

#: The dtypes MXNet's softmax gives (``dtype=``).
RESULT_DTYPES = ("float16", "float32", "float64")


def softmax(data: NDArray, length: Optional[NDArray] = None, axis: int = -1,
            temperature: Optional[float] = None, dtype: Any = None, use_length: bool = False,
            out: Optional[NDArray] = None, name: Optional[str] = None) -> NDArray:
    """The softmax of ``data`` along ``axis`` (MXNet's ``nd.softmax``; note
    that its second positional argument is ``length``).  With
    ``use_length=True``, ``length`` (integers, ``data``'s shape without
    ``axis``) limits each softmax to the first ``length`` entries; the others
    are 0.

    >>> from mxdeconv import nd
    >>> nd.softmax(nd.array([[0, 0], [0, 0]]), axis=0).asnumpy()
    array([[0.5, 0.5],
           [0.5, 0.5]], dtype=float32)
    >>> x = nd.array([[1, 1, 1], [1, 1, 1]])
    >>> nd.softmax(x, nd.array([1, 2], dtype="int32"), use_length=True).asnumpy()
    array([[1. , 0. , 0. ],
           [0.5, 0.5, 0. ]], dtype=float32)
    """
    arr, position, scale, result_dtype = _arguments("softmax", data, axis, temperature, dtype,
                                                    name)
    inputs: Tuple[Optional[NDArray], ...] = (arr,)
    mask = None
    if bool_arg("softmax: use_length", use_length):
        if length is None:
            raise MXNetError("softmax: use_length=True needs length (an NDArray of integers)")
        lengths = array_arg("softmax", length, "length")
        mask = _length_mask(arr.shape, position, lengths)
        inputs = (arr, lengths)
    elif length is not None:
        raise MXNetError("softmax: length is given but use_length=False; pass "
                         "use_length=True to use it")
    return _softmax("softmax", arr, inputs, (position, scale, False, mask), result_dtype, out)


def log_softmax(data: NDArray, axis: int = -1, temperature: Optional[float] = None,
                dtype: Any = None, use_length: bool = False, out: Optional[NDArray] = None,
                name: Optional[str] = None) -> NDArray:
    """The logarithm of the softmax of ``data`` along ``axis`` (MXNet's
    ``nd.log_softmax``), computed without forming the softmax.

    >>> from mxdeconv import nd
    >>> nd.log_softmax(nd.array([0, 0])).asnumpy()
    array([-0.6931472, -0.6931472], dtype=float32)
    """
    arr, position, scale, result_dtype = _arguments("log_softmax", data, axis, temperature,
                                                    dtype, name)
    if bool_arg("log_softmax: use_length", use_length):
        raise MXNetError("log_softmax: use_length=True is not supported (MXNet 1.9.1's "
                         "log_softmax takes no length)")
    return _softmax("log_softmax", arr, (arr,), (position, scale, True, None), result_dtype,
                    out)


def _arguments(function: str, data: Any, axis: Any, temperature: Any, dtype: Any,
               name: Any) -> Tuple[NDArray, int, float, np.dtype]:
    arr = array_arg(function, data)
    check_name(function, name)
    if not is_float_dtype(arr.dtype):
        raise TypeError(f"{function}: data has dtype {arr.dtype}; {function} takes floating-point "
                        "arrays (as MXNet)")
    position = normalize_axis(f"{function}: axis", axis, arr.ndim)
    scale = 1.0 if temperature is None else real_arg(f"{function}: temperature", temperature)
    if dtype is None:
        result_dtype = arr.dtype
    else:
        result_dtype = _check_dtype(dtype, f"{function}: dtype")
        if result_dtype.name not in RESULT_DTYPES:
            raise MXNetError(f"{function}: dtype={result_dtype.name!r}; valid values are None, "
                             f"{', '.join(repr(d) for d in RESULT_DTYPES)}")
    return arr, position, scale, result_dtype


def _length_mask(shape: Tuple[int, ...], position: int, lengths: NDArray) -> np.ndarray:
    """True where an entry is within its row's length (a boolean array of ``shape``)."""
    rows = shape[:position] + shape[position + 1:]
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"softmax: length has dtype {lengths.dtype}; it must be integers "
                        "(as MXNet)")
    if lengths.shape != rows:
        raise MXNetError(f"softmax: length has shape {lengths.shape}, expected {rows} (data's "
                         f"shape {shape} without axis {position})")
    values = np.expand_dims(lengths._plain(), position)
    if ((values < 1) | (values > shape[position])).any():
        raise MXNetError(f"softmax: length values must be in 1..{shape[position]} (the axis' "
                         "extent); MXNet reads past the row for longer ones")
    index = np.arange(shape[position]).reshape((-1,) + (1,) * (len(shape) - position - 1))
    return index < values


def _compute(x: np.ndarray, attrs: Tuple[int, float, bool, Optional[np.ndarray]]) -> np.ndarray:
    """softmax or log_softmax of ``x`` (widened to at least float32)."""
    position, scale, log, mask = attrs
    x = x.astype(np.float32 if x.dtype.itemsize < 4 else x.dtype, copy=False)
    with np.errstate(all="ignore"):  # temperature 0 gives NaN, as in MXNet
        if scale != 1.0:
            x = x / np.asarray(scale, x.dtype)
        if mask is not None:
            x = np.where(mask, x, -np.inf)
        shifted = x - np.max(x, axis=position, keepdims=True)
        exps = np.exp(shifted)
        total = np.sum(exps, axis=position, keepdims=True)
        return shifted - np.log(total) if log else exps / total


def _softmax(function: str, arr: NDArray, inputs: Tuple[Optional[NDArray], ...],
             attrs: Tuple[int, float, bool, Optional[np.ndarray]], result_dtype: np.dtype,
             out: Any) -> NDArray:
    check_gradient(function, function, inputs)
    result = wrap(_compute(arr._plain(), attrs), result_dtype)
    return into(function, tape.record_op(function, result, inputs, attrs), out, inputs)


@tape.register_backward("softmax")
@tape.register_backward("log_softmax")
def _softmax_backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
    position, scale, log, _mask = attrs
    arr = inputs[0]
    grads: List[Optional[NDArray]] = [None] * len(inputs)
    if reqs[0] != "null":
        y = _compute(arr._plain(), attrs)  # recomputed from the input: the forward's values
        g = out_grad._plain().astype(y.dtype, copy=False)
        with np.errstate(all="ignore"):
            if log:
                value = g - np.exp(y) * np.sum(g, axis=position, keepdims=True)
            else:
                value = y * (g - np.sum(g * y, axis=position, keepdims=True))
            value = value / np.asarray(scale, value.dtype)
        grads[0] = deliver(value, reqs[0], targets[0], arr.dtype)
    if len(inputs) > 1 and reqs[1] != "null":  # length: an integer input, zero gradient
        grads[1] = deliver(np.zeros(inputs[1].shape, inputs[1].dtype), reqs[1], targets[1],
                           inputs[1].dtype)
    return tuple(grads)
