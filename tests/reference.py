"""An independent, deliberately naive reference for MXNet's Deconvolution.

Written from the operator's definition, not from ``mxdeconv.semantics.deconv_numpy`` (which
it does not import): every input pixel ``data[n, c, *i]`` is scattered through
every kernel tap ``k`` into the output pixel ``i*stride + k*dilate - pad_l``,
skipping pixels that fall outside the output.  Everything is computed in
float64 with explicit loops over pixels and taps (only the batch and
output-channel axes are vectorised), so it is slow and only meant for tiny
shapes.  The backward functions are the exact adjoints of the same loops.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence, Tuple

import numpy as np

Shape = Tuple[int, ...]


def mxnet_pads(kernel: Sequence[int], stride: Sequence[int], dilate: Sequence[int],
               pad: Sequence[int], adj: Sequence[int], target_shape: Sequence[int],
               in_spatial: Sequence[int]) -> Tuple[Shape, Shape]:
    """MXNet's effective crop ``(pad_l, pad_r)`` per spatial dim.

    ``pad_l`` is removed at the start of the uncropped output and ``pad_r``
    at its end; ``pad_r`` is negative when ``adj > pad`` (the output grows).
    When any ``target_shape`` entry is non-zero, pad and adj are inferred from
    it (MXNet's ``InferPad``) and the given ``pad``/``adj`` are ignored.
    """
    ndim = len(kernel)
    if target_shape and any(target_shape):
        pads, adjs = [], []
        for a in range(ndim):
            total = stride[a] * (in_spatial[a] - 1) + dilate[a] * (kernel[a] - 1) + 1 \
                - target_shape[a]
            adjs.append(total % 2)
            pads.append((total + 1) // 2)
    else:
        pads = list(pad) if pad else [0] * ndim
        adjs = list(adj) if adj else [0] * ndim
    return tuple(pads), tuple(p - a for p, a in zip(pads, adjs))


def output_spatial(in_spatial: Sequence[int], kernel: Sequence[int],
                   stride: Sequence[int], dilate: Sequence[int],
                   pad_l: Sequence[int], pad_r: Sequence[int]) -> Shape:
    """``stride*(in-1) + dilate*(k-1) + 1 - pad_l - pad_r`` per dim."""
    return tuple(s * (i - 1) + d * (k - 1) + 1 - pl - pr
                 for i, k, s, d, pl, pr in zip(in_spatial, kernel, stride, dilate,
                                               pad_l, pad_r))


def _pairs(in_spatial: Shape, kernel: Shape, stride: Shape, dilate: Shape,
           pad_l: Shape, out_spatial: Shape):
    """Yield ``(i, k, o)``: input pixel i reaches output pixel o through tap k."""
    for i in itertools.product(*(range(n) for n in in_spatial)):
        for k in itertools.product(*(range(n) for n in kernel)):
            o = tuple(ii * s + kk * d - p
                      for ii, kk, s, d, p in zip(i, k, stride, dilate, pad_l))
            if all(0 <= oo < n for oo, n in zip(o, out_spatial)):
                yield i, k, o


def _geometry(data_shape, weight_shape, kernel, stride, dilate, pad_l, pad_r, num_group):
    kernel, stride, dilate = tuple(kernel), tuple(stride), tuple(dilate)
    pad_l, pad_r = tuple(pad_l), tuple(pad_r)
    batch, channels = data_shape[:2]
    in_spatial = tuple(data_shape[2:])
    assert channels % num_group == 0, (channels, num_group)
    assert weight_shape[0] == channels and tuple(weight_shape[2:]) == kernel, weight_shape
    oc_per_group = weight_shape[1]
    out_spatial = output_spatial(in_spatial, kernel, stride, dilate, pad_l, pad_r)
    assert all(o > 0 for o in out_spatial), out_spatial
    out_shape = (batch, oc_per_group * num_group) + out_spatial
    return dict(in_spatial=in_spatial, kernel=kernel, stride=stride, dilate=dilate,
                pad_l=pad_l, out_spatial=out_spatial), out_shape, channels // num_group, \
        oc_per_group


def reference_forward(data: np.ndarray, weight: np.ndarray, bias: Optional[np.ndarray],
                      kernel, stride, dilate, pad_l, pad_r, num_group: int) -> np.ndarray:
    """Deconvolution forward in float64 by direct scatter.

    data ``(N, C_in, *in)``, weight ``(C_in, OC/G, *kernel)``, bias ``(OC,)`` or None.
    """
    data = np.asarray(data, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    geo, out_shape, c_per_group, oc_per_group = _geometry(
        data.shape, weight.shape, kernel, stride, dilate, pad_l, pad_r, num_group)
    out = np.zeros(out_shape, dtype=np.float64)
    for c in range(data.shape[1]):
        g = c // c_per_group
        channels_out = slice(g * oc_per_group, (g + 1) * oc_per_group)
        for i, k, o in _pairs(**geo):
            # out[n, g*OCg + oc, *o] += data[n, c, *i] * weight[c, oc, *k]  for all n, oc
            out[(slice(None), channels_out) + o] += \
                data[(slice(None), c) + i][:, None] * weight[(c, slice(None)) + k][None, :]
    if bias is not None:
        out += np.asarray(bias, dtype=np.float64).reshape((1, -1) + (1,) * len(geo["kernel"]))
    return out


def reference_backward(out_grad: np.ndarray, data: np.ndarray, weight: np.ndarray,
                       kernel, stride, dilate, pad_l, pad_r, num_group: int,
                       with_bias: bool = True) -> Tuple[np.ndarray, np.ndarray,
                                                        Optional[np.ndarray]]:
    """Gradients ``(data_grad, weight_grad, bias_grad)`` of reference_forward, in float64.

    The adjoint of the same scatter: data_grad gathers ``out_grad`` back through
    every tap, weight_grad accumulates ``data * out_grad`` over the batch and
    every (input pixel, tap) pair, bias_grad sums ``out_grad`` over batch and
    space (None unless ``with_bias``).
    """
    out_grad = np.asarray(out_grad, dtype=np.float64)
    data = np.asarray(data, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    geo, out_shape, c_per_group, oc_per_group = _geometry(
        data.shape, weight.shape, kernel, stride, dilate, pad_l, pad_r, num_group)
    assert out_grad.shape == out_shape, (out_grad.shape, out_shape)
    data_grad = np.zeros(data.shape, dtype=np.float64)
    weight_grad = np.zeros(weight.shape, dtype=np.float64)
    for c in range(data.shape[1]):
        g = c // c_per_group
        channels_out = slice(g * oc_per_group, (g + 1) * oc_per_group)
        for i, k, o in _pairs(**geo):
            og = out_grad[(slice(None), channels_out) + o]          # (N, OCg)
            w = weight[(c, slice(None)) + k]                         # (OCg,)
            x = data[(slice(None), c) + i]                           # (N,)
            data_grad[(slice(None), c) + i] += og @ w
            weight_grad[(c, slice(None)) + k] += x @ og
    bias_grad = None
    if with_bias:
        bias_grad = out_grad.sum(axis=(0,) + tuple(range(2, out_grad.ndim)))
    return data_grad, weight_grad, bias_grad
