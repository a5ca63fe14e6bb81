# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""Raw memory for arrays: 64-byte aligned, refused early when it cannot fit,
large blocks pooled.

The one place that allocates array memory, for the NDArray layer and the
oneDNN layer alike (both use it; it uses neither).  Compiled, because every
result of the hot path is allocated here and finding a buffer's address from
Python costs a microsecond.

Large blocks (>= POOL_MIN_BYTES) come from a pool, as MXNet's storage manager
does: glibc hands blocks over 32 MiB to mmap and back on free, so a fresh
result of a big layer page-faults on every call (measured: a 33.5 MiB
Deconvolution output took 26 ms a call with fresh pages, 15 ms with reused
ones).  A freed block goes back to the pool while the pool's idle bytes stay
within the limit (``MXDECONV_BUFFER_POOL_BYTES``, default 1 GiB; 0 turns the
pool off), and is freed otherwise.
"""
import math
import os
import warnings

import numpy as np
cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free
from posix.stdlib cimport posix_memalign

from .base import MXNetError

cnp.import_array()

cdef extern from "numpy/arrayobject.h":
    ctypedef struct PyArray_Descr:
        pass
    # Steals a reference to ``descr``.
    object PyArray_NewFromDescr(PyTypeObject *subtype, PyArray_Descr *descr, int nd,
                                cnp.npy_intp *dims, cnp.npy_intp *strides, void *data,
                                int flags, PyObject *base)

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


# ----------------------------------------------------------------------------
# The pool of large blocks
# ----------------------------------------------------------------------------
#: Blocks this large and larger are pooled; smaller ones are NumPy's (its
#: allocator and glibc's heap reuse them well).
POOL_MIN_BYTES = 1 << 20
cdef Py_ssize_t _POOL_MIN_BYTES = POOL_MIN_BYTES
#: Pooled blocks start on a page: a whole block maps onto whole pages.
cdef size_t _PAGE = 4096
DEFAULT_POOL_BYTES = 1 << 30


def _pool_limit_from_env():
    text = os.environ.get("MXDECONV_BUFFER_POOL_BYTES")
    if text is None or not text.strip():
        return DEFAULT_POOL_BYTES
    try:
        value = int(text)
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        warnings.warn(f"MXDECONV_BUFFER_POOL_BYTES={text!r} is not a byte count >= 0; "
                      f"using {DEFAULT_POOL_BYTES}", RuntimeWarning, stacklevel=2)
        return DEFAULT_POOL_BYTES


cdef dict _idle = {}           # size class -> addresses of idle blocks of that size
cdef size_t _idle_bytes = 0
cdef size_t _pool_limit = _pool_limit_from_env()
cdef size_t _reused = 0, _fresh = 0


cdef size_t size_class(size_t nbytes):
    """``nbytes`` rounded up so that similar sizes share blocks: to a multiple of
    1/8 of its power of two (at most 12.5 % more), and of a page."""
    cdef size_t step = _PAGE
    while step * 16 <= nbytes:
        step <<= 1
    return (nbytes + step - 1) // step * step


cdef class PooledBlock:
    """Owns one pooled block; the arrays viewing it keep it alive.  Freed, it
    goes back to the pool (or to the system when the pool is full)."""
    cdef void *address
    cdef size_t size

    def __dealloc__(self):
        global _idle_bytes
        if self.address == NULL:
            return
        idle = _idle
        if idle is not None and _idle_bytes + self.size <= _pool_limit:
            idle.setdefault(self.size, []).append(<uintptr_t>self.address)
            _idle_bytes += self.size
        else:
            free(self.address)
        self.address = NULL


cdef cnp.ndarray pooled_bytes(Py_ssize_t nbytes):
    global _idle_bytes, _reused, _fresh
    cdef size_t size = size_class(nbytes)
    cdef void *address = NULL
    cdef PooledBlock block = PooledBlock.__new__(PooledBlock)
    blocks = _idle.get(size)
    if blocks:
        address = <void *><uintptr_t>blocks.pop()
        _idle_bytes -= size
        _reused += 1
    else:
        if posix_memalign(&address, _PAGE, size) != 0:
            raise MemoryError(f"could not allocate a block of {size} bytes")
        _fresh += 1
    block.address, block.size = address, size
    cdef cnp.npy_intp count = nbytes
    cdef cnp.ndarray view = cnp.PyArray_SimpleNewFromData(1, &count, cnp.NPY_UINT8, address)
    cnp.set_array_base(view, block)
    return view


def pool_info():
    """The pool of large blocks: idle blocks and bytes, the limit, and how many
    large allocations were served from it (reused) or from the system (fresh)."""
    return {"idle_blocks": sum(len(v) for v in _idle.values()), "idle_bytes": _idle_bytes,
            "limit_bytes": _pool_limit, "min_block_bytes": POOL_MIN_BYTES,
            "reused": _reused, "fresh": _fresh}


def set_pool_limit(limit):
    """Keep at most ``limit`` idle bytes in the pool (0: pool nothing); returns
    the previous limit.  Idle blocks over the new limit are freed now."""
    global _pool_limit
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"set_buffer_pool_limit: limit must be an int (bytes), got {limit!r} "
                        f"of type {type(limit).__name__}")
    if limit < 0 or limit > (1 << 62):
        raise MXNetError(f"set_buffer_pool_limit: limit must be between 0 and 2**62 bytes, "
                         f"got {limit}")
    previous, _pool_limit = _pool_limit, limit
    _trim()
    return previous


def empty_pool():
    """Give every idle block back to the system (blocks in use are untouched)."""
    global _idle_bytes
    for blocks in _idle.values():
        for address in blocks:
            free(<void *><uintptr_t>address)
    _idle.clear()
    _idle_bytes = 0


cdef void _trim():
    global _idle_bytes
    cdef size_t size
    for size, blocks in list(_idle.items()):
        while blocks and _idle_bytes > _pool_limit:
            free(<void *><uintptr_t>blocks.pop())
            _idle_bytes -= size


cdef cnp.ndarray raw_block(Py_ssize_t nbytes, char **aligned):
    """An array owning at least ``nbytes`` from the 64-byte boundary it sets in
    ``aligned`` (pooled when large)."""
    cdef cnp.ndarray block
    cdef cnp.npy_intp count
    if nbytes >= _POOL_MIN_BYTES and _pool_limit > 0:
        block = pooled_bytes(nbytes)
        aligned[0] = <char *>cnp.PyArray_DATA(block)
        return block
    count = nbytes + _ALIGNMENT
    block = cnp.PyArray_EMPTY(1, &count, cnp.NPY_UINT8, 0)
    aligned[0] = <char *>cnp.PyArray_DATA(block)
    aligned[0] += (_ALIGNMENT - (<size_t>aligned[0]) % _ALIGNMENT) % _ALIGNMENT
    return block


cpdef cnp.ndarray aligned_bytes(Py_ssize_t nbytes):
    """``nbytes`` uninitialised bytes starting on a 64-byte boundary (refused
    with MXNetError, before allocating, when they cannot fit in memory: a
    blocked layout can be many times the plain size, e.g. 1 channel in
    nCw16c)."""
    if nbytes > _PHYSICAL_MEMORY:
        check_fits(f"a buffer of {nbytes} bytes", nbytes)
    cdef char *aligned
    cdef cnp.ndarray block = raw_block(nbytes, &aligned)
    if aligned == <char *>cnp.PyArray_DATA(block) and cnp.PyArray_NBYTES(block) == nbytes:
        return block
    cdef Py_ssize_t offset = aligned - <char *>cnp.PyArray_DATA(block)
    return block[offset:offset + nbytes]


cdef cnp.ndarray aligned_array(tuple shape, cnp.dtype dtype, Py_ssize_t nbytes):
    """An uninitialised C-contiguous ``shape`` array of ``dtype`` (``nbytes`` in
    all) on a 64-byte boundary: one block and one typed view of it, where
    ``aligned_bytes(n).view(dtype).reshape(shape)`` makes three arrays."""
    if nbytes > _PHYSICAL_MEMORY:
        check_fits(f"an array of shape {shape} and dtype {dtype}", nbytes)
    cdef cnp.npy_intp dims[cnp.NPY_MAXDIMS]
    cdef int ndim = len(shape), i
    if ndim > cnp.NPY_MAXDIMS:
        raise MXNetError(f"an array of {ndim} dimensions: NumPy allows {cnp.NPY_MAXDIMS}")
    for i in range(ndim):
        dims[i] = shape[i]
    cdef char *aligned
    cdef cnp.ndarray block = raw_block(nbytes, &aligned)
    Py_INCREF(dtype)  # PyArray_NewFromDescr steals a reference to it
    cdef cnp.ndarray view = PyArray_NewFromDescr(
        <PyTypeObject *>cnp.ndarray, <PyArray_Descr *>dtype, ndim, dims, NULL, aligned,
        cnp.NPY_ARRAY_CARRAY, NULL)
    cnp.set_array_base(view, block)
    return view


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
    return aligned_array(shape, dtype, nbytes)
