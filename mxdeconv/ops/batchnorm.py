"""MXNet's ``BatchNorm`` operator on NDArrays (``nd.BatchNorm``), recorded by
autograd, with MXNet 1.9.1's semantics (``src/operator/nn/batch_norm.cc`` and
its oneDNN twin, checked against MXNet itself by
``scripts/fixtures/make_mxnet_batchnorm_fixtures.py``):

* **training** (``autograd.is_training()``, i.e. inside ``autograd.record()``,
  and ``use_global_stats=False``): each channel (``axis``) is normalised with
  the batch's mean and *biased* variance, ``(x - mean) / sqrt(var + eps)``,
  then scaled by ``gamma`` and shifted by ``beta``;
* **inference** (or ``use_global_stats=True``): with ``moving_mean`` and
  ``moving_var`` instead;
* the moving statistics are updated **by the backward pass**, as MXNet's CPU
  kernels do it: ``moving = moving * momentum + batch * (1 - momentum)``, with
  the biased batch variance.  A training forward that no backward follows
  leaves them as they were (as in MXNet);
* ``fix_gamma=True`` (the operator's default; Gluon passes ``not scale``)
  computes with ``gamma = 1`` and gives gamma a zero gradient.

Per-channel statistics and sums accumulate in float64; the elementwise passes
run in the data's precision (float32 for 16-bit floats), on the default
layout; the moving statistics are updated in their own dtype, as MXNet's float
kernels do.

>>> from mxdeconv import nd
>>> x = nd.array([[1.0, 2.0], [3.0, 6.0]])
>>> gamma, beta = nd.ones((2,)), nd.zeros((2,))
>>> mean, var = nd.array([2.0, 4.0]), nd.array([1.0, 4.0])
>>> nd.BatchNorm(x, gamma, beta, mean, var, eps=0.0).asnumpy()   # inference: moving stats
array([[-1., -1.],
       [ 1.,  1.]], dtype=float32)
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import bool_arg, int_arg, real_arg
from mxdeconv._core.buffers import aligned_empty
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.gradients import deliver
from mxdeconv.ndarray.ndarray import NDArray, as_ndarray
from mxdeconv.ndarray.numpy_protocols import wrap
from mxdeconv.ndarray.results import check_name, into

__all__ = ["BatchNorm"]


def _channel_view(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """Per-channel ``values`` shaped to broadcast against the data."""
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def _compute_values(arr: NDArray) -> np.ndarray:
    """The data's values in the precision the arithmetic runs in: float64 stays
    float64, every other float (float32, float16, bfloat16) computes in float32;
    statistics accumulate in float64 either way."""
    values = arr._plain()
    return values.astype(np.float64 if values.dtype == np.float64 else np.float32,
                         copy=False)


def _checked(data: Any, gamma: Any, beta: Any, moving_mean: Any, moving_var: Any,
             axis: Any) -> Tuple[NDArray, Tuple[NDArray, ...], int]:
    arr = as_ndarray(data, "BatchNorm: data")
    if arr.dtype.kind != "f" and arr.dtype.name != "bfloat16":
        raise TypeError(f"BatchNorm: data must hold floating-point numbers, got dtype "
                        f"{arr.dtype}")
    if arr.ndim < 1:
        raise MXNetError(f"BatchNorm: data must have at least one dimension, got shape "
                         f"{arr.shape}")
    axis = int_arg("BatchNorm: axis", axis)
    if not -arr.ndim <= axis < arr.ndim:
        raise MXNetError(f"BatchNorm: axis={axis} is out of range for data of shape "
                         f"{arr.shape}")
    axis %= arr.ndim
    channels = arr.shape[axis]
    stats = []
    for name, value in (("gamma", gamma), ("beta", beta), ("moving_mean", moving_mean),
                        ("moving_var", moving_var)):
        if not isinstance(value, NDArray):
            raise TypeError(f"BatchNorm: {name} must be an NDArray, got "
                            f"{type(value).__name__}")
        if value.shape != (channels,):
            raise MXNetError(f"BatchNorm: {name} must have shape ({channels},) (data's "
                             f"axis {axis}), got {name} of shape {value.shape}")
        stats.append(value)
    return arr, tuple(stats), axis


def BatchNorm(data: Any, gamma: NDArray, beta: NDArray, moving_mean: NDArray,
              moving_var: NDArray, eps: float = 1e-3, momentum: float = 0.9,
              fix_gamma: bool = True, use_global_stats: bool = False,
              output_mean_var: bool = False, axis: int = 1, cudnn_off: bool = False,
              min_calib_range: Optional[float] = None,
              max_calib_range: Optional[float] = None, out: Optional[NDArray] = None,
              name: Optional[str] = None) -> NDArray:
    """Batch normalisation (MXNet's ``nd.BatchNorm``), see the module docstring.

    Args:
        data: an NDArray (or NumPy array, copied) of floats.
        gamma, beta, moving_mean, moving_var: NDArrays of shape ``(C,)``, ``C``
            being ``data.shape[axis]``; the moving statistics are updated in
            place by the backward of a training call.
        eps: added to the variance (MXNet's default 1e-3; Gluon's layer 1e-5).
        momentum: the moving statistics' decay.
        fix_gamma: compute with ``gamma = 1`` (its gradient is zero).
        use_global_stats: normalise with the moving statistics in training too.
        output_mean_var: must be False (MXNet's extra outputs are not given).
        axis: the channel axis.
        cudnn_off, min_calib_range, max_calib_range: accepted and ignored (GPU
            and quantisation settings).
        out: an NDArray of ``data``'s shape and dtype to write the result into.
        name: accepted and ignored.

    >>> from mxdeconv import autograd, nd
    >>> x = nd.array([[0.0, 10.0], [2.0, 30.0]])
    >>> gamma, beta = nd.array([1.0, 2.0]), nd.array([0.0, 1.0])
    >>> mean, var = nd.zeros((2,)), nd.ones((2,))
    >>> with autograd.record():                       # training: batch statistics
    ...     y = nd.BatchNorm(x, gamma, beta, mean, var, fix_gamma=False)
    >>> y.asnumpy().round(3)
    array([[-1., -1.],
           [ 1.,  3.]], dtype=float32)
    """
    check_name("BatchNorm", name)
    eps = real_arg("BatchNorm: eps", eps)
    momentum = real_arg("BatchNorm: momentum", momentum)
    fix_gamma = bool_arg("BatchNorm: fix_gamma", fix_gamma)
    use_global_stats = bool_arg("BatchNorm: use_global_stats", use_global_stats)
    if bool_arg("BatchNorm: output_mean_var", output_mean_var):
        raise MXNetError("BatchNorm: output_mean_var=True (the batch statistics as extra "
                         "outputs) is not supported; it must be False")
    bool_arg("BatchNorm: cudnn_off", cudnn_off)
    if eps < 0:  # 0 is allowed, as in MXNet (a constant channel then divides by 0)
        raise MXNetError(f"BatchNorm: eps must be >= 0, got eps={eps!r}")
    arr, (gamma, beta, moving_mean, moving_var), axis = _checked(
        data, gamma, beta, moving_mean, moving_var, axis)
    x = _compute_values(arr)
    ndim, reduce_axes = x.ndim, tuple(i for i in range(x.ndim) if i != axis)
    batch_stats = tape.is_training() and not use_global_stats
    if batch_stats:
        # float64 accumulation (NumPy casts chunk by chunk: no float64 copy of x)
        mean = (x.sum(axis=reduce_axes, dtype=np.float64) / max(x.size // x.shape[axis], 1)
                if x.size else np.zeros(x.shape[axis]))
        centred = x - _channel_view(mean.astype(x.dtype), axis, ndim)
        var = (np.square(centred, out=centred).sum(axis=reduce_axes, dtype=np.float64)
               / max(x.size // x.shape[axis], 1) if x.size else np.zeros(x.shape[axis]))
    else:
        mean = moving_mean._plain().astype(np.float64)
        var = moving_var._plain().astype(np.float64)
    invstd = 1.0 / np.sqrt(var + eps)
    scale = np.ones_like(invstd) if fix_gamma else gamma._plain().astype(np.float64)
    # y = (x - mean) * (gamma * invstd) + beta in the data's precision; centred
    # first, as MXNet, since x * a - mean * a would lose the digits of x - mean.
    a = scale * invstd
    # Written straight into the result's (aligned) buffer when no cast follows.
    y = aligned_empty(x.shape, x.dtype) if x.dtype == arr.dtype else None
    y = np.subtract(x, _channel_view(mean.astype(x.dtype), axis, ndim), out=y)
    y *= _channel_view(a.astype(x.dtype), axis, ndim)
    y += _channel_view(beta._plain().astype(x.dtype), axis, ndim)
    result_values = NDArray(y) if x.dtype == arr.dtype else wrap(y, arr.dtype)
    attrs: Dict[str, Any] = {
        "axis": axis, "fix_gamma": fix_gamma, "batch_stats": batch_stats, "mean": mean,
        "invstd": invstd, "momentum": momentum, "moving_mean": moving_mean,
        "moving_var": moving_var, "var": var}
    inputs = (arr, gamma, beta)
    result = tape.record_op("BatchNorm", result_values, inputs, attrs)
    return into("BatchNorm", result, out, inputs)


def _update_moving(target: NDArray, batch: np.ndarray, momentum: float) -> None:
    """``target = target * momentum + batch * (1 - momentum)`` in target's dtype
    (MXNet's float arithmetic), written in place (no view is handed out)."""
    values = target._plain()
    dtype = values.dtype
    values[...] = (values * dtype.type(momentum)
                   + batch.astype(dtype) * dtype.type(1 - momentum))
    target._bump()


@tape.register_backward("BatchNorm")
def _batchnorm_backward(out_grad: Any, inputs: Any, attrs: Dict[str, Any], reqs: Any,
                        targets: Any) -> tuple:
    arr, gamma, beta = inputs
    axis, invstd, mean = attrs["axis"], attrs["invstd"], attrs["mean"]
    x = _compute_values(arr)
    dy = out_grad._plain().astype(x.dtype, copy=False)
    ndim = x.ndim
    reduce_axes = tuple(i for i in range(ndim) if i != axis)
    centred = x - _channel_view(mean.astype(x.dtype), axis, ndim)
    dbeta = dy.sum(axis=reduce_axes, dtype=np.float64)
    dgamma = (dy * centred).sum(axis=reduce_axes, dtype=np.float64) * invstd
    scale = np.ones_like(invstd) if attrs["fix_gamma"] else gamma._plain().astype(np.float64)
    if attrs["batch_stats"]:
        count = max(x.size // max(x.shape[axis], 1), 1)
        # dx = scale * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), in
        # MXNet's order (dy - mean(dy) first: no digits lost to a large mean).
        c1 = scale * invstd
        c2 = -c1 * invstd * dgamma / count
        dx = np.subtract(dy, _channel_view((dbeta / count).astype(x.dtype), axis, ndim))
        dx *= _channel_view(c1.astype(x.dtype), axis, ndim)
        centred *= _channel_view(c2.astype(x.dtype), axis, ndim)
        dx += centred
        # MXNet's CPU kernels update the moving statistics here, in backward.
        _update_moving(attrs["moving_mean"], mean, attrs["momentum"])
        _update_moving(attrs["moving_var"], attrs["var"], attrs["momentum"])
    else:
        dx = np.multiply(dy, _channel_view((scale * invstd).astype(x.dtype), axis, ndim))
    if attrs["fix_gamma"]:
        dgamma = np.zeros_like(dgamma)
    grads = (dx, dgamma, dbeta)
    return tuple(deliver(g, req, target, src.dtype)
                 for g, req, target, src in zip(grads, reqs, targets, inputs))
