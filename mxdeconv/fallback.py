"""The NumPy implementation: GEMM + col2im forward, im2col + GEMM backward.

Works on plain NumPy arrays in any float dtype (float16 is computed in
float32), for 1-D, 2-D and 3-D deconvolutions with groups, dilation and
asymmetric crops.  The only Python loop runs over kernel offsets, never over
pixels: for one kernel offset, the output pixels touched by all input pixels
form one strided slice of the uncropped output.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .params import DeconvGeometry


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """16-bit floats (float16, bfloat16) are accumulated in float32."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def _canvas_extent(geom: DeconvGeometry) -> Tuple[int, ...]:
    """Spatial size of the uncropped output, grown where ``pad_r < 0`` extends it."""
    param = geom.param
    full = tuple(param.stride[a] * (geom.spatial_in[a] - 1) + param.dilated_kernel(a)
                 for a in range(param.ndim))
    return tuple(max(f, p + o) for f, p, o in zip(full, geom.pad_l, geom.spatial_out))


def _windows(canvas: np.ndarray, geom: DeconvGeometry, writeable: bool) -> np.ndarray:
    """View ``canvas`` (N, C, *extent) as (N, C, *kernel, *input spatial).

    Element ``[n, c, *k, *i]`` is the canvas pixel ``i * stride + k * dilate``:
    where input pixel ``i`` lands through kernel tap ``k``.
    """
    param = geom.param
    batch_stride, channel_stride, *pixel_strides = canvas.strides
    tap_strides = tuple(s * d for s, d in zip(pixel_strides, param.dilate))
    step_strides = tuple(s * st for s, st in zip(pixel_strides, param.stride))
    return as_strided(canvas, shape=canvas.shape[:2] + param.kernel + geom.spatial_in,
                      strides=(batch_stride, channel_stride) + tap_strides + step_strides,
                      writeable=writeable)


def _crop(geom: DeconvGeometry):
    return (slice(None), slice(None)) + tuple(
        slice(p, p + o) for p, o in zip(geom.pad_l, geom.spatial_out))


def _grouped_weight(weight: np.ndarray, geom: DeconvGeometry) -> np.ndarray:
    """(C_in, OC/G, *k) -> (G, C_in/G, OC/G * K)."""
    groups = geom.param.num_group
    return weight.reshape(groups, weight.shape[0] // groups, -1)


def forward(geom: DeconvGeometry, data: np.ndarray, weight: np.ndarray,
            bias: Optional[np.ndarray]) -> np.ndarray:
    """Deconvolution forward; returns a new array of ``geom.out_shape``."""
    param, dtype = geom.param, compute_dtype(data.dtype)
    batch, channels = geom.data_shape[:2]
    groups = param.num_group
    pixels = int(np.prod(geom.spatial_in))  # explicit: -1 is ambiguous for batch 0
    data_g = data.astype(dtype, copy=False).reshape(batch, groups, channels // groups, pixels)
    weight_g = _grouped_weight(weight.astype(dtype, copy=False), geom)
    # cols[n, g, (oc, k), pixel]: each input pixel's contribution through each tap.
    cols = np.matmul(weight_g.transpose(0, 2, 1)[None], data_g)
    cols = cols.reshape((batch, param.num_filter) + param.kernel + geom.spatial_in)

    canvas = np.zeros((batch, param.num_filter) + _canvas_extent(geom), dtype=dtype)
    windows = _windows(canvas, geom, writeable=True)
    # col2im: for a fixed tap the target pixels are distinct, so += is exact.
    for tap in np.ndindex(*param.kernel):
        index = (slice(None), slice(None)) + tap
        windows[index] += cols[index]
    out = canvas[_crop(geom)]
    if bias is not None:
        out = out + bias.astype(dtype, copy=False).reshape((1, -1) + (1,) * param.ndim)
    return np.ascontiguousarray(out, dtype=data.dtype)


def backward(geom: DeconvGeometry, out_grad: np.ndarray, data: np.ndarray,
             weight: np.ndarray, need_data: bool = True, need_weight: bool = True,
             need_bias: bool = True) -> Tuple[Optional[np.ndarray], ...]:
    """Gradients ``(data_grad, weight_grad, bias_grad)``; None where not needed."""
    param, dtype = geom.param, compute_dtype(data.dtype)
    batch, channels = geom.data_shape[:2]
    groups = param.num_group
    data_grad = weight_grad = bias_grad = None
    if need_bias and not param.no_bias:
        bias_grad = out_grad.astype(dtype, copy=False).sum(
            axis=(0,) + tuple(range(2, 2 + param.ndim))).astype(data.dtype)
    if need_data or need_weight:
        # im2col of out_grad on the uncropped canvas (zeros where it was cropped).
        canvas = np.zeros((batch, param.num_filter) + _canvas_extent(geom), dtype=dtype)
        canvas[_crop(geom)] = out_grad
        pixels = int(np.prod(geom.spatial_in))  # explicit: -1 is ambiguous for batch 0
        taps = param.num_filter // groups * int(np.prod(param.kernel))
        cols = _windows(canvas, geom, writeable=False).reshape(batch, groups, taps, pixels)
        weight_g = _grouped_weight(weight.astype(dtype, copy=False), geom)
        if need_data:
            data_grad = np.matmul(weight_g[None], cols).reshape(geom.data_shape)
            data_grad = data_grad.astype(data.dtype, copy=False)
        if need_weight:
            data_g = data.astype(dtype, copy=False).reshape(
                batch, groups, channels // groups, pixels)
            weight_grad = np.matmul(data_g, cols.transpose(0, 1, 3, 2)).sum(axis=0)
            weight_grad = weight_grad.reshape(geom.weight_shape).astype(data.dtype)
    return data_grad, weight_grad, bias_grad
