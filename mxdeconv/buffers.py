"""Raw memory for arrays: 64-byte aligned, refused early when it cannot fit.

The one place that allocates array memory, for the NDArray layer and the
oneDNN extension alike (both import it; it imports neither).
"""
from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from .base import MXNetError

#: One cache line, one AVX-512 register: what oneDNN's kernels like.
ALIGNMENT = 64


def _physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no early check
        return 1 << 62


PHYSICAL_MEMORY = _physical_memory_bytes()


def check_fits(what: str, nbytes: int) -> None:
    """Refuse, before allocating, ``nbytes`` that this machine's memory cannot hold."""
    if nbytes > PHYSICAL_MEMORY:
        raise MXNetError(f"{what} would need {nbytes} bytes, more than this machine's "
                         f"{PHYSICAL_MEMORY} bytes of memory")


def aligned_bytes(nbytes: int) -> np.ndarray:
    """``nbytes`` uninitialised bytes starting on a 64-byte boundary."""
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    return raw[offset:offset + nbytes]


def aligned_empty(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    Raises :class:`MXNetError` before allocating when the array could not fit
    in this machine's physical memory, instead of a late ``MemoryError`` or an
    OOM kill.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(extent) for extent in shape)
    check_fits(f"an array of shape {shape} and dtype {dtype}",
               math.prod(shape) * dtype.itemsize)
    return aligned_bytes(math.prod(shape) * dtype.itemsize).view(dtype).reshape(shape)
