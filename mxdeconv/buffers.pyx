# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""Raw memory for arrays: 64-byte aligned, refused early when it cannot fit.

The one place that allocates array memory, for the NDArray layer and the
oneDNN layer alike (both use it; it uses neither).  Compiled, because every
result of the hot path is allocated here and finding a buffer's address from
Python costs a microsecond.
"""
import math
import os

import numpy as np
cimport numpy as cnp

from .base import MXNetError

cnp.import_array()

#: One cache line, one AVX-512 register: what oneDNN's kernels like.
ALIGNMENT = 64
cdef size_t _ALIGNMENT = ALIGNMENT


def _physical_memory_bytes():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no early check
        return 1 << 62


PHYSICAL_MEMORY = _physical_memory_bytes()
cdef Py_ssize_t _PHYSICAL_MEMORY = min(PHYSICAL_MEMORY, (1 << 62))


def check_fits(what, nbytes):
    """Refuse, before allocating, ``nbytes`` that this machine's memory cannot hold."""
    if nbytes > PHYSICAL_MEMORY:
        raise MXNetError(f"{what} would need {nbytes} bytes, more than this machine's "
                         f"{PHYSICAL_MEMORY} bytes of memory")


cpdef cnp.ndarray aligned_bytes(Py_ssize_t nbytes):
    """``nbytes`` uninitialised bytes starting on a 64-byte boundary (refused
    with MXNetError, before allocating, when they cannot fit in memory: a
    blocked layout can be many times the plain size, e.g. 1 channel in
    nCw16c)."""
    if nbytes > _PHYSICAL_MEMORY:
        check_fits(f"a buffer of {nbytes} bytes", nbytes)
    cdef cnp.npy_intp count = nbytes + _ALIGNMENT
    cdef cnp.ndarray raw = cnp.PyArray_EMPTY(1, &count, cnp.NPY_UINT8, 0)
    cdef size_t offset = (_ALIGNMENT - (<size_t>cnp.PyArray_DATA(raw)) % _ALIGNMENT) % _ALIGNMENT
    return raw[offset:offset + nbytes]


cpdef cnp.ndarray aligned_empty(shape, dtype):
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    Raises :class:`MXNetError` before allocating when the array could not fit
    in this machine's physical memory, instead of a late ``MemoryError`` or an
    OOM kill.
    """
    dtype = np.dtype(dtype)
    shape = tuple([int(extent) for extent in shape])
    nbytes = math.prod(shape) * dtype.itemsize
    check_fits(f"an array of shape {shape} and dtype {dtype}", nbytes)
    return aligned_bytes(nbytes).view(dtype).reshape(shape)
