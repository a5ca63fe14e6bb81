"""The NumPy implementation: GEMM + col2im forward, im2col + GEMM backward.

Works on plain NumPy arrays in any float dtype (float16 is computed in
float32), for 1-D, 2-D and 3-D deconvolutions with groups, dilation and
asymmetric crops.  The only Python loop runs over kernel offsets, never over
pixels: for one kernel offset, the output pixels touched by all input pixels
form one strided slice of the uncropped output.
"""
from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .attributes import DeconvGeometry


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


def _crop(geom: DeconvGeometry) -> Tuple[slice, ...]:
    return (slice(None), slice(None)) + tuple(
        slice(p, p + o) for p, o in zip(geom.pad_l, geom.spatial_out))


#: Bytes of im2col columns formed at once: the kernel taps are taken in chunks,
#: so a large kernel never needs columns of the whole kernel at once.  One
#: buffer holds every chunk's columns in turn.
COLUMN_BUDGET = 64 << 20


def _tap_columns(geom: DeconvGeometry) -> int:
    """Elements of one kernel tap's im2col columns: every image, output
    channel and input pixel."""
    return geom.data_shape[0] * geom.param.num_filter * math.prod(geom.spatial_in)


def _tap_chunks(geom: DeconvGeometry, itemsize: int, budget: Optional[int] = None
                ) -> List[Tuple[Tuple[int, ...], ...]]:
    """The kernel's taps (index tuples) in chunks whose columns fit ``budget``
    bytes (COLUMN_BUDGET by default)."""
    taps = list(np.ndindex(*geom.param.kernel))
    per_tap = _tap_columns(geom) * itemsize
    size = max(1, (COLUMN_BUDGET if budget is None else budget) // max(per_tap, 1))
    return [tuple(taps[i:i + size]) for i in range(0, len(taps), size)]


def _column_buffer(chunks: Sequence[Sequence[Any]], geom: DeconvGeometry,
                   dtype: np.dtype) -> np.ndarray:
    """Flat room for the largest chunk's columns, reused by every chunk (take
    a chunk's with :func:`_chunk_columns`): fresh memory costs a page fault
    per page, and on some machines far more."""
    return np.empty(_tap_columns(geom) * max(len(c) for c in chunks), dtype=dtype)


def _chunk_columns(room: np.ndarray, geom: DeconvGeometry, taps: Sequence[Any]) -> np.ndarray:
    """The part of ``room`` (:func:`_column_buffer`) that holds ``taps``' columns, flat."""
    return room[:_tap_columns(geom) * len(taps)]


def _grouped_taps(weight: np.ndarray, geom: DeconvGeometry,
                  taps: Sequence[Tuple[int, ...]]) -> np.ndarray:
    """(C_in, OC/G, *k) at ``taps`` -> (G, C_in/G, OC/G * len(taps)), tap-minor."""
    groups = geom.param.num_group
    if len(taps) == math.prod(geom.param.kernel):  # every tap, in memory order: a view
        return weight.reshape(groups, weight.shape[0] // groups, -1)
    picked = np.stack([weight[(slice(None), slice(None)) + tap] for tap in taps], axis=-1)
    return picked.reshape(groups, weight.shape[0] // groups, -1)


def workspace_bytes(geom: DeconvGeometry, dtype: np.dtype) -> int:
    """Most bytes either pass allocates: one chunk of columns, the uncropped
    canvas and the result (for the NumPy path's support check)."""
    itemsize = compute_dtype(dtype).itemsize
    chunk = max(len(c) for c in _tap_chunks(geom, itemsize))
    batch, filters = geom.data_shape[0], geom.param.num_filter
    cols = _tap_columns(geom) * chunk
    canvas = batch * filters * math.prod(_canvas_extent(geom))
    return (cols + canvas + math.prod(geom.out_shape)) * itemsize


def forward(geom: DeconvGeometry, data: np.ndarray, weight: np.ndarray,
            bias: Optional[np.ndarray], column_budget: Optional[int] = None) -> np.ndarray:
    """Deconvolution forward; returns a new array of ``geom.out_shape``
    (``column_budget``: see :func:`_tap_chunks`)."""
    param, dtype = geom.param, compute_dtype(data.dtype)
    batch, channels = geom.data_shape[:2]
    groups = param.num_group
    pixels = math.prod(geom.spatial_in)  # explicit: -1 is ambiguous for batch 0
    data_g = data.astype(dtype, copy=False).reshape(batch, groups, channels // groups, pixels)
    weight = weight.astype(dtype, copy=False)
    canvas = np.zeros((batch, param.num_filter) + _canvas_extent(geom), dtype=dtype)
    windows = _windows(canvas, geom, writeable=True)
    chunks = _tap_chunks(geom, dtype.itemsize, column_budget)
    room = _column_buffer(chunks, geom, dtype)
    for taps in chunks:
        # cols[n, g, (oc, tap), pixel]: each input pixel's contribution through each tap.
        grouped = _chunk_columns(room, geom, taps).reshape(
            batch, groups, param.num_filter // groups * len(taps), pixels)
        np.matmul(_grouped_taps(weight, geom, taps).transpose(0, 2, 1)[None], data_g,
                  out=grouped)
        cols = grouped.reshape((batch, param.num_filter, len(taps)) + geom.spatial_in)
        # col2im: for a fixed tap the target pixels are distinct, so += is exact.
        for position, tap in enumerate(taps):
            windows[(slice(None), slice(None)) + tap] += cols[:, :, position]
    out = canvas[_crop(geom)]
    if bias is not None:
        out = out + bias.astype(dtype, copy=False).reshape((1, -1) + (1,) * param.ndim)
    return np.ascontiguousarray(out, dtype=data.dtype)


def backward(geom: DeconvGeometry, out_grad: np.ndarray, data: np.ndarray,
             weight: np.ndarray, need_data: bool = True, need_weight: bool = True,
             need_bias: bool = True, column_budget: Optional[int] = None
             ) -> Tuple[Optional[np.ndarray], ...]:
    """Gradients ``(data_grad, weight_grad, bias_grad)``; None where not needed
    (``column_budget``: see :func:`_tap_chunks`)."""
    param, dtype = geom.param, compute_dtype(data.dtype)
    batch, channels = geom.data_shape[:2]
    groups = param.num_group
    # Arrays where asked for (weight_grad: allocated, or the one chunk's result), else None.
    data_grad: Any = None
    weight_grad: Any = None
    bias_grad: Optional[np.ndarray] = None
    if need_bias and not param.no_bias:
        bias_grad = out_grad.astype(dtype, copy=False).sum(
            axis=(0,) + tuple(range(2, 2 + param.ndim))).astype(data.dtype)
    if need_data or need_weight:
        # im2col of out_grad on the uncropped canvas (zeros where it was cropped),
        # a chunk of taps at a time.
        canvas = np.zeros((batch, param.num_filter) + _canvas_extent(geom), dtype=dtype)
        canvas[_crop(geom)] = out_grad
        windows = _windows(canvas, geom, writeable=False)
        pixels = math.prod(geom.spatial_in)  # explicit: -1 is ambiguous for batch 0
        weight = weight.astype(dtype, copy=False)
        data_g = data.astype(dtype, copy=False).reshape(batch, groups, channels // groups,
                                                        pixels)
        if need_data:
            data_grad = np.zeros((batch, groups, channels // groups, pixels), dtype=dtype)
        out_per_group = param.num_filter // groups
        chunks = _tap_chunks(geom, dtype.itemsize, column_budget)
        room = _column_buffer(chunks, geom, dtype)
        if need_weight and len(chunks) > 1:
            weight_grad = np.zeros(geom.weight_shape, dtype=dtype)
        for taps in chunks:
            stacked = _chunk_columns(room, geom, taps).reshape(
                (batch, param.num_filter, len(taps)) + geom.spatial_in)
            np.stack([windows[(slice(None), slice(None)) + tap] for tap in taps], axis=2,
                     out=stacked)
            cols = stacked.reshape(batch, groups, out_per_group * len(taps), pixels)
            if need_data:
                data_grad += np.matmul(_grouped_taps(weight, geom, taps)[None], cols)
            if need_weight:
                chunk = np.matmul(data_g, cols.transpose(0, 1, 3, 2)).sum(axis=0)
                chunk = chunk.reshape(channels, out_per_group, len(taps))
                if len(taps) == math.prod(param.kernel):  # every tap: already in order
                    weight_grad = chunk.reshape(geom.weight_shape)
                    continue
                for position, tap in enumerate(taps):
                    weight_grad[(slice(None), slice(None)) + tap] = chunk[:, :, position]
        if need_data:
            data_grad = data_grad.reshape(geom.data_shape).astype(data.dtype, copy=False)
        if need_weight:
            weight_grad = weight_grad.astype(data.dtype, copy=False)
    return data_grad, weight_grad, bias_grad
