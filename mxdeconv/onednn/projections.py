"""Freivalds' check of the kernel check's exact results: random integer
combinations of a result's channels, compared with the same combinations of
the reference.

The kernel check (:mod:`mxdeconv.onednn.kernel_check`) runs a plan on small
integer inputs, where a right float32 result is exact.  Its projections on a
few random integer vectors of each channel group are then exact in float64
too, and equal the reference of a layer whose weight (or data) channels were
combined the same way: a layer of PROJECTIONS channels per group instead of a
group's channels, so its reference costs a channel count less than the
layer's.  A wrong result passes only if every random vector is orthogonal to
its error, with probability at most 2**-(PROJECTION_BITS + 1) per vector.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from mxdeconv._core.buffers import aligned_empty

#: Below this bound on a sum's magnitude, float32 represents every partial sum.
FLOAT32_EXACT_LIMIT = 2 ** 24
#: Random integer vectors an exact float32 result's channels are projected on.
PROJECTIONS = 2
#: Their entries are uniform in [-2**bits, 2**bits]: a projection misses a
#: given wrong channel vector with probability at most 1 / (2**(bits+1) + 1),
#: all PROJECTIONS of them at most that to the power PROJECTIONS.
PROJECTION_BITS = 20
#: Below this many bits the projections' sums would leave float64's exact
#: integers too soon: the result is compared in full.
MIN_PROJECTION_BITS = 12
#: float64 represents every integer up to 2**53; a projected sum stays below this.
_FLOAT64_EXACT_LIMIT = 2.0 ** 52
#: Bytes of a result widened to float64 at once for its projections.
_PROJECT_BYTES = 1 << 20


class Projection:
    """Random integer combinations of each channel group's channels (Freivalds'
    check of a product): ``vectors[g, p]`` weighs group g's channels in
    projection p.

    A result whose every value is an integer within the check's bound is
    projected exactly in float64, and so is the reference of a layer whose
    weight (or data) channels were combined the same way: one channel per
    projection and group instead of a group's channels.  A right result's
    projections equal the reference's exactly; a wrong one's differ unless the
    random vectors are orthogonal to every wrong channel vector (see
    :data:`PROJECTION_BITS`).  Made with :meth:`fitting`."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors  # (G, PROJECTIONS, C/G) float64 integers

    @classmethod
    def fitting(cls, seed: int, groups: int, channels: int, bound: float
                ) -> Optional["Projection"]:
        """Projections of ``channels`` in ``groups`` whose sums of values bounded
        by ``bound`` stay exact in float64; None where too few bits are left."""
        per_group = channels // groups
        room = math.floor(math.log2(_FLOAT64_EXACT_LIMIT / (max(bound, 1.0) * max(per_group, 1))))
        bits = min(PROJECTION_BITS, room)
        if bits < MIN_PROJECTION_BITS:
            return None
        rng = np.random.Generator(np.random.PCG64(seed))
        return cls(rng.integers(-2 ** bits, 2 ** bits, size=(groups, PROJECTIONS, per_group),
                                endpoint=True).astype(np.float64))

    def project(self, values: np.ndarray) -> np.ndarray:
        """``values`` (C, ...) -> (G, PROJECTIONS, the rest flat), float64: each
        group's channels combined, a chunk of columns at a time widened to
        float64 in one reused buffer."""
        groups, _, per_group = self.vectors.shape
        flat = values.reshape(groups, per_group, -1)
        width = flat.shape[2]
        projected = np.empty((groups, PROJECTIONS, width))
        step = max(1, _PROJECT_BYTES // (8 * groups * per_group))
        room = aligned_empty((groups, per_group, min(step, width)), np.float64)
        for start in range(0, width, step):
            part = flat[:, :, start:start + step]
            wide = room[:, :, :part.shape[2]]
            np.copyto(wide, part)
            np.matmul(self.vectors, wide, out=projected[:, :, start:start + step])
        return projected

    def project_columns(self, weight: np.ndarray) -> np.ndarray:
        """A weight (C_in, OC/G, *k) with its output channels combined: (C_in,
        PROJECTIONS, *k), float64 (the weight of a layer of PROJECTIONS output
        channels per group)."""
        groups, _, per_group = self.vectors.shape
        blocks = weight.reshape(groups, weight.shape[0] // groups, per_group, -1)
        rows, taps = blocks.shape[1], blocks.shape[3]
        combined = np.empty((groups, rows, PROJECTIONS, taps))
        # A chunk of input channels at a time, widened in one reused buffer
        # (a big layer's whole weight in float64 is tens of fresh megabytes).
        step = max(1, _PROJECT_BYTES // (8 * groups * per_group * taps))
        room = aligned_empty((groups, min(step, rows), per_group, taps), np.float64)
        for start in range(0, rows, step):
            part = blocks[:, start:start + step]
            wide = room[:, :part.shape[1]]
            np.copyto(wide, part)
            np.matmul(self.vectors[:, None], wide, out=combined[:, start:start + step])
        return combined.reshape((weight.shape[0], PROJECTIONS) + weight.shape[2:])

    @staticmethod
    def applies_to(result: Any, dtype: Any, bound: float, shape: Sequence[int]) -> bool:
        """Whether ``result`` may be compared through projections: float32 with
        every partial sum exact (bfloat16 results are rounded, and above 2**24
        so are float32's partial sums), of ``shape``, every value an integer
        within ``bound`` (:func:`exact_integers`)."""
        return (str(dtype) == "float32" and bound < FLOAT32_EXACT_LIMIT
                and isinstance(result, np.ndarray) and result.dtype == np.float32
                and result.shape == tuple(shape) and exact_integers(result, bound))


def exact_integers(values: np.ndarray, bound: float) -> bool:
    """Whether every value is an integer of magnitude at most ``bound``: what a
    right kernel gives on the check's inputs (NaN and infinities are not).
    Then, and only then, the projections of ``values`` are exact."""
    flat = values.reshape(-1)
    step = max(1, _PROJECT_BYTES // max(1, flat.itemsize))
    room = aligned_empty((min(step, flat.size),), flat.dtype)
    for start in range(0, flat.size, step):
        part = flat[start:start + step]
        rounded = room[:part.size]
        np.rint(part, out=rounded)
        if not np.array_equal(rounded, part):
            return False
        np.abs(part, out=rounded)
        if not rounded.max(initial=0.0) <= bound:
            return False
    return True
