# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""Raw memory for arrays: 64-byte aligned, refused early when it cannot fit,
large and small blocks pooled.

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
pool off), and is freed otherwise.  Small blocks (<= SMALL_MAX_BYTES) are
pooled too, a few per size: a small layer's results and temporaries repeat
their sizes on every call.
"""
import math
import os

import numpy as np
cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free
from posix.mman cimport MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, PROT_READ, PROT_WRITE
from posix.mman cimport madvise, mmap, munmap
from posix.stdlib cimport posix_memalign

from .env import env_int
from .errors import MXNetError

cnp.import_array()

cdef extern from *:
    """
    #include <sys/mman.h>
    #ifdef MADV_NOHUGEPAGE
    #define MXDECONV_SMALL_PAGES MADV_NOHUGEPAGE
    #else
    #define MXDECONV_SMALL_PAGES -1
    #endif
    """
    int MXDECONV_SMALL_PAGES

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
# The pool of blocks
# ----------------------------------------------------------------------------
#: Blocks this large and larger are pooled (sizes rounded to 1/8 of their
#: power of two, on pages), as many as the limit allows.
POOL_MIN_BYTES = 1 << 20
cdef Py_ssize_t _POOL_MIN_BYTES = POOL_MIN_BYTES
#: Blocks this small and smaller are pooled too (sizes rounded to 64 bytes),
#: SMALL_IDLE_PER_SIZE of each size at most: a small layer's results and
#: temporaries are the same sizes on every call, and glibc serves a request
#: over 1 KiB only after consolidating its fast bins (measured: about a tenth
#: of a tiny layer's forward call).  Sizes in between are NumPy's.
SMALL_MAX_BYTES = 1 << 16
SMALL_IDLE_PER_SIZE = 8
# C copies for __dealloc__, which also runs while the interpreter shuts down,
# after module globals have been set to None (a Python global there raised a
# TypeError per live block: "Error in sys.excepthook" at exit).
cdef Py_ssize_t _SMALL_IDLE_PER_SIZE = SMALL_IDLE_PER_SIZE
cdef Py_ssize_t _SMALL_MAX_BYTES = SMALL_MAX_BYTES
#: Large pooled blocks are mappings of their own, on small pages
#: (MADV_NOHUGEPAGE): never on transparent huge pages, not even by chance.
#: From glibc they could land in heap memory that NumPy had advised onto huge
#: pages (its arrays of 4 MiB and more), depending on what the process
#: allocated before.  On huge pages a kept DCGAN 512->256 weight (8 MiB,
#: IOhw16i16o) made its forward 30-40% slower (7.4-8.3 ms a call against
#: 5.7-5.9: the kernel's power-of-two strides through the weight meet in the
#: same cache sets where small pages scatter them), and on a VM whose memory
#: the host backs lazily a huge page's first touch cost 30-120 ms in half of
#: a new process's first DCGAN 512->256 calls.
cdef size_t _PAGE = 4096
DEFAULT_POOL_BYTES = 1 << 30


cdef dict _idle = {}           # size class -> addresses of idle blocks of that size
cdef size_t _idle_bytes = 0
cdef size_t _pool_limit = env_int("MXDECONV_BUFFER_POOL_BYTES", DEFAULT_POOL_BYTES, 0, 1 << 62,
                                  "a byte count")
cdef size_t _reused = 0, _fresh = 0   # large blocks only


cdef inline bint pooled_size(Py_ssize_t nbytes):
    return _pool_limit > 0 and (nbytes >= _POOL_MIN_BYTES or nbytes <= _SMALL_MAX_BYTES)


cdef size_t size_class(size_t nbytes):
    """``nbytes`` rounded up so that similar sizes share blocks: small ones to
    a multiple of 64 bytes; large ones to a multiple of 1/8 of their power of
    two (at most 12.5 % more), and of a page."""
    if nbytes <= <size_t>_SMALL_MAX_BYTES:
        return max(_ALIGNMENT, (nbytes + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT)
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
            blocks = idle.get(self.size)
            if blocks is None:
                blocks = idle[self.size] = []
            if self.size > <size_t>_SMALL_MAX_BYTES or len(blocks) < _SMALL_IDLE_PER_SIZE:
                blocks.append(<uintptr_t>self.address)
                _idle_bytes += self.size
                self.address = NULL
                return
        release(self.address, self.size)
        self.address = NULL


cdef void release(void *address, size_t size) noexcept:
    """Give a block back to the system: a large one is a mapping of its own."""
    if size > <size_t>_SMALL_MAX_BYTES:
        munmap(address, size)
    else:
        free(address)


cdef void *new_large_block(size_t size):
    """A fresh mapping of ``size`` bytes (a multiple of the page) on small
    pages, or NULL.  A kernel without transparent huge pages refuses the
    advice: its pages are small anyway."""
    cdef void *address = mmap(NULL, size, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if address == MAP_FAILED:
        return NULL
    if MXDECONV_SMALL_PAGES >= 0:
        madvise(address, size, MXDECONV_SMALL_PAGES)
    return address


cdef PooledBlock pooled_block(Py_ssize_t nbytes):
    """A block of at least ``nbytes`` (64-byte aligned; large ones page-aligned),
    idle in the pool or new."""
    global _idle_bytes, _reused, _fresh
    cdef size_t size = size_class(nbytes)
    cdef bint large = size > <size_t>_SMALL_MAX_BYTES
    cdef void *address = NULL
    cdef PooledBlock block = PooledBlock.__new__(PooledBlock)
    blocks = _idle.get(size)
    if not blocks and large:
        # The next class up (at most 12.5 % more): the plan-time check's
        # buffers carry guard zones, one page or two over the size the call
        # that follows asks for; memory already touched is cheaper than new.
        bigger = size_class(size + 1)
        if _idle.get(bigger):
            size, blocks = bigger, _idle[bigger]
    if blocks:
        address = <void *><uintptr_t>blocks.pop()
        _idle_bytes -= size
        _reused += large
    elif large:
        address = new_large_block(size)
        if address == NULL:
            raise MemoryError(f"could not allocate a block of {size} bytes")
        _fresh += 1
    else:
        if posix_memalign(&address, _ALIGNMENT, size) != 0:
            raise MemoryError(f"could not allocate a block of {size} bytes")
    block.address, block.size = address, size
    return block


def pool_info():
    """The pool: idle blocks and bytes (small and large; ``idle_small_blocks``
    of them at most ``small_max_bytes`` each), the limit, and how many large
    allocations were served from it (reused) or from the system (fresh)."""
    small = [len(v) for size, v in _idle.items() if size <= <size_t>_SMALL_MAX_BYTES]
    return {"idle_blocks": sum(len(v) for v in _idle.values()), "idle_bytes": _idle_bytes,
            "idle_small_blocks": sum(small), "limit_bytes": _pool_limit,
            "min_block_bytes": POOL_MIN_BYTES, "small_max_bytes": SMALL_MAX_BYTES,
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
    for size, blocks in _idle.items():
        for address in blocks:
            release(<void *><uintptr_t>address, size)
    _idle.clear()
    _idle_bytes = 0


cdef void _trim():
    global _idle_bytes
    cdef size_t size
    for size, blocks in list(_idle.items()):
        while blocks and _idle_bytes > _pool_limit:
            release(<void *><uintptr_t>blocks.pop(), size)
            _idle_bytes -= size


cdef object raw_block(Py_ssize_t nbytes, char **aligned):
    """An object owning at least ``nbytes`` from the 64-byte boundary it sets in
    ``aligned``: a pooled block, or a NumPy array for the sizes in between."""
    cdef PooledBlock pooled
    cdef cnp.ndarray array
    cdef cnp.npy_intp count
    if pooled_size(nbytes):
        pooled = pooled_block(nbytes)
        aligned[0] = <char *>pooled.address
        return pooled
    count = nbytes + _ALIGNMENT
    array = cnp.PyArray_EMPTY(1, &count, cnp.NPY_UINT8, 0)
    aligned[0] = <char *>cnp.PyArray_DATA(array)
    aligned[0] += (_ALIGNMENT - (<size_t>aligned[0]) % _ALIGNMENT) % _ALIGNMENT
    return array


cpdef cnp.ndarray aligned_bytes(Py_ssize_t nbytes):
    """``nbytes`` uninitialised bytes starting on a 64-byte boundary (refused
    with MXNetError, before allocating, when they cannot fit in memory: a
    blocked layout can be many times the plain size, e.g. 1 channel in
    nCw16c)."""
    if nbytes > _PHYSICAL_MEMORY:
        check_fits(f"a buffer of {nbytes} bytes", nbytes)
    cdef char *aligned
    cdef cnp.npy_intp count = nbytes
    cdef cnp.ndarray view
    block = raw_block(nbytes, &aligned)
    if type(block) is PooledBlock:
        view = cnp.PyArray_SimpleNewFromData(1, &count, cnp.NPY_UINT8, aligned)
        cnp.set_array_base(view, block)
        return view
    cdef Py_ssize_t offset = aligned - <char *>cnp.PyArray_DATA(<cnp.ndarray>block)
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
    block = raw_block(nbytes, &aligned)
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
