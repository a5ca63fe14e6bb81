"""The sub-grid a strided, dilated transposed convolution writes.

Tap k of input pixel i lands on output pixel ``i * stride + k * dilate -
pad_l``.  Where ``g = gcd(stride, dilate) > 1`` on an axis, every tap lands
on the pixels ``o = first + g * t`` (``first = -pad_l mod g``): the others hold
the bias alone.  The layer is then a transposed convolution with stride
``stride / g`` and dilation ``dilate / g`` onto that sub-grid, with the same
data, weight and bias, and ``g`` times fewer output pixels to compute per
axis; the pixels off the sub-grid are filled with the bias, and the gradient
of the weight reads ``out_grad`` on the sub-grid alone (that of the bias reads
it all).  mxdeconv offers such plans to the planner (``onednn/_subgrid.pxi``):
on the benchmark's dilated layer (k3 s2 d2) oneDNN's stride-1 kernels run the
sub-grid's forward and weight gradient 1.5-1.8 times faster than its own
strided, dilated ones.
"""
import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from .attributes import DeconvGeometry, Shape


@dataclass(frozen=True)
class SubGrid:
    """A layer's output sub-grid: pixel ``first[a] + step[a] * t`` of axis
    ``a`` for ``t < geom.spatial_out[a]``, and the transposed convolution
    ``geom`` onto it (same data, weight and bias)."""

    geom: DeconvGeometry
    step: Shape
    first: Shape


def subgrid_of(geom: DeconvGeometry) -> Optional[SubGrid]:
    """The sub-grid all of ``geom``'s taps land on, or None where they reach
    every output pixel (``gcd(stride, dilate) == 1`` on every axis).

    >>> from mxdeconv.semantics.attributes import DeconvolutionParam, infer_geometry
    >>> p = DeconvolutionParam.from_kwargs(kernel=(3, 3), stride=(2, 2), dilate=(2, 2),
    ...                                    pad=(2, 2), adj=(1, 1), num_filter=8)
    >>> sub = subgrid_of(infer_geometry(p, (1, 8, 32, 32)))
    >>> sub.step, sub.first, sub.geom.out_shape, sub.geom.param.stride, sub.geom.pad_l
    ((2, 2), (0, 0), (1, 8, 32, 32), (1, 1), (1, 1))
    """
    param = geom.param
    step = tuple(math.gcd(s, d) for s, d in zip(param.stride, param.dilate))
    if all(g == 1 for g in step):
        return None
    first = tuple(-pad % g for pad, g in zip(geom.pad_l, step))
    if any(f >= size for f, size in zip(first, geom.spatial_out)):
        return None  # no output pixel on the sub-grid: the result is the bias alone
    sub_out = tuple((size - f + g - 1) // g for size, f, g in zip(geom.spatial_out, first, step))
    stride = tuple(s // g for s, g in zip(param.stride, step))
    dilate = tuple(d // g for d, g in zip(param.dilate, step))
    pad_l = tuple((pad + f) // g for pad, f, g in zip(geom.pad_l, first, step))
    # oneDNN's padding_r: what the full footprint overshoots the sub-grid by
    # (negative: the sub-grid extends past the last tap, as adj does).
    pad_r = tuple((n - 1) * s + (k - 1) * d + 1 - pl - o for n, s, k, d, pl, o in
                  zip(geom.spatial_in, stride, param.kernel, dilate, pad_l, sub_out))
    sub_param = dataclasses.replace(param, stride=stride, dilate=dilate, pad=pad_l,
                                    adj=(0,) * len(step),
                                    target_shape=())
    sub_geom = dataclasses.replace(geom, param=sub_param,
                                   out_shape=geom.out_shape[:2] + sub_out,
                                   pad_l=pad_l, pad_r=pad_r, adj=(0,) * len(step))
    return SubGrid(geom=sub_geom, step=step, first=first)
