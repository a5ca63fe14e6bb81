"""A transposed convolution's output phases: which kernel taps reach which
output pixels, as boxes.

Tap t of input pixel p lands on output pixel ``stride * p + dilate * t -
pad_l`` on each axis.  The output pixels of one *phase* (each axis'
coordinate modulo the stride) form a grid, every stride-th pixel; each tap
reaching a phase lands on its grid shifted by a whole number of grid steps.
So a tap's outputs are a box of its phase's grid and its inputs a box of the
input: a tap's part of any pass is a product over a phase's grid, slices
instead of im2col's gathered columns.  The checks compute their references
so (:mod:`mxdeconv.onednn.result_check`, :mod:`mxdeconv.onednn.kernel_check`).
"""
from __future__ import annotations

import itertools
from typing import Dict, List, NamedTuple, Tuple

from .attributes import DeconvGeometry


class Tap(NamedTuple):
    """One kernel tap of a phase."""

    flat: int                   # its index, in the weight's order
    pixels: Tuple[slice, ...]   # the input pixels it carries to an output pixel
    grid: Tuple[slice, ...]     # those output pixels, on its phase's grid


def phases(geom: DeconvGeometry) -> Dict[Tuple[int, ...], List[Tap]]:
    """The kernel taps by the output phase they reach, each phase's taps in
    the weight's order; a phase no tap reaches is absent (its pixels hold
    the bias alone).

    >>> from mxdeconv.semantics.attributes import infer_geometry, parse_params
    >>> geom = infer_geometry(parse_params(dict(kernel=(4,), stride=(2,), pad=(1,),
    ...                                         num_filter=1)), (1, 1, 3))
    >>> for phase, taps in sorted(phases(geom).items()):
    ...     print(phase, [(t.flat, t.pixels[0], t.grid[0]) for t in taps])
    (0,) [(1, slice(0, 3, None), slice(0, 3, None)), (3, slice(0, 2, None), slice(1, 3, None))]
    (1,) [(0, slice(1, 3, None), slice(0, 2, None)), (2, slice(0, 3, None), slice(0, 3, None))]
    """
    param = geom.param
    per_axis = []
    for axis in range(param.ndim):
        stride, size_in = param.stride[axis], geom.spatial_in[axis]
        taps = []
        for tap in range(param.kernel[axis]):
            offset = tap * param.dilate[axis] - geom.pad_l[axis]
            phase = offset % stride
            shift = (offset - phase) // stride
            grid = len(range(phase, geom.spatial_out[axis], stride))
            low = max(0, -shift)
            high = max(low, min(size_in, grid - shift))
            taps.append((phase, slice(low, high), slice(low + shift, high + shift)))
        per_axis.append(taps)
    found: Dict[Tuple[int, ...], List[Tap]] = {}
    for flat, axes in enumerate(itertools.product(*per_axis)):
        found.setdefault(tuple(a[0] for a in axes), []).append(
            Tap(flat, tuple(a[1] for a in axes), tuple(a[2] for a in axes)))
    return found


def phase_grid(geom: DeconvGeometry, phase: Tuple[int, ...]) -> Tuple[int, ...]:
    """The shape of ``phase``'s grid of output pixels."""
    return tuple(len(range(p, n, s))
                 for p, n, s in zip(phase, geom.spatial_out, geom.param.stride))


def on_grid(geom: DeconvGeometry, phase: Tuple[int, ...]) -> Tuple[slice, ...]:
    """The slices of the output's spatial axes that are ``phase``'s grid."""
    return tuple(slice(p, None, s) for p, s in zip(phase, geom.param.stride))
