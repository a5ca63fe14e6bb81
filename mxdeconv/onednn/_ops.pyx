# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""The oneDNN path: the only module of mxdeconv that calls oneDNN.

It describes deconvolutions to oneDNN (one descriptor helper), enumerates the
candidate implementations and layouts oneDNN offers for a geometry (the
planner in ``plans.py`` checks each before use), runs the chosen primitives
with the GIL released, and moves arrays between the default layout and the
layouts primitives prefer.

Every oneDNN handle lives in a small owning class (``MemoryDesc``,
``PrimitiveDesc``, ``Attr``, ``Primitive``) whose ``__dealloc__`` frees it,
and every oneDNN status is checked: a refusal raises ``MXNetError`` naming
oneDNN's status.
"""
import heapq
import numbers
import os
import threading
import warnings

import numpy as np
cimport numpy as cnp
from cpython.object cimport PyObject
from cython.parallel cimport prange
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from ._dnnl cimport *
from mxdeconv._core.env import env_int
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.buffers cimport aligned_array, aligned_bytes

cnp.import_array()


# ----------------------------------------------------------------------------
# Status checks, engine
# ----------------------------------------------------------------------------
cdef inline int check(dnnl_status_t status, what) except -1:
    if status != dnnl_success:
        raise MXNetError(f"oneDNN {what} failed: {dnnl_status2str(status).decode()}")
    return 0


cdef dnnl_engine_t _engine = NULL


cdef dnnl_engine_t engine() except NULL:
    global _engine
    if _engine == NULL:
        check(dnnl_engine_create(&_engine, dnnl_cpu, 0), "engine creation")
    return _engine


# ----------------------------------------------------------------------------
# The one cache policy: a bounded LRU map
# ----------------------------------------------------------------------------
#: Largest cache bound accepted (entries hold compiled kernels: far more is a typo).
MAX_CACHE_CAPACITY = 1 << 20
DEFAULT_CACHE_CAPACITY = 1024


cdef Py_ssize_t _capacity = env_int("MXDECONV_PRIMITIVE_CACHE_CAPACITY", DEFAULT_CACHE_CAPACITY,
                                    0, MAX_CACHE_CAPACITY)


cdef class _Entry:
    """A cached value and when it was last used (the cache's clock)."""
    cdef object value
    cdef unsigned long long used


cdef class LRUCache:
    """A bounded map with least-recently-used eviction and hit/miss counters.

    A hit only stamps its entry with the cache's clock (one hash of the key,
    where reordering an OrderedDict would hash it twice); a put beyond the
    capacity evicts the entries with the oldest stamps.  Puts follow planning
    or a full call, so their scan is small beside what they follow.

    ``capacity`` None follows the primitive-cache bound (set_cache_capacity).
    """

    def __cinit__(self, capacity=None):
        self.entries = {}
        self.fixed_capacity = capacity

    cpdef object get(self, key):
        cdef _Entry entry = self.entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self.clock += 1
        entry.used = self.clock
        return entry.value

    cpdef put(self, key, value):
        cdef _Entry entry = _Entry.__new__(_Entry)
        entry.value = value
        self.clock += 1
        entry.used = self.clock
        self.entries[key] = entry
        self.trim()

    cdef trim(self):
        cdef _Entry entry
        limit = _capacity if self.fixed_capacity is None else self.fixed_capacity
        excess = len(self.entries) - limit
        if excess <= 0:
            return
        # The ``excess`` oldest stamps go (a snapshot: another thread may
        # change the dict between these lines).
        oldest = heapq.nsmallest(excess, list(self.entries.items()), key=_stamp)
        for key, entry in oldest:
            if self.entries.pop(key, None) is not None:
                self.evictions += 1

    def clear(self):
        self.entries.clear()

    def __len__(self):
        return len(self.entries)


def _stamp(item):
    return (<_Entry>item[1]).used


# ----------------------------------------------------------------------------
# Per-thread state and the OpenMP thread count
# ----------------------------------------------------------------------------
#: Largest thread count accepted: libgomp crashes on absurd counts (10**6).
MAX_THREADS = 1024
_tls = threading.local()
cdef int _requested_threads = 0   # 0: leave OpenMP's default (OMP_NUM_THREADS)
cdef long _thread_epoch = 0       # bumped to make every thread re-apply the count
cdef bint _team_started = False   # an OpenMP team of > 1 threads ran in this process
cdef bint _forked_child = False   # forked after a team ran: more threads would hang


cdef class ThreadState:
    """What each Python thread owns: a oneDNN stream (streams are not
    thread-safe), its primitive cache and the OpenMP thread count applied."""

    def __cinit__(self):
        check(dnnl_stream_create(&self.stream, engine(), dnnl_stream_default_flags),
              "stream creation")
        self.cache = LRUCache()
        self.epoch = -1

    def __dealloc__(self):
        global current_thread_state
        if current_thread_state == <PyObject *>self:
            current_thread_state = NULL
        if self.stream != NULL:
            dnnl_stream_destroy(self.stream)


cdef extern from *:
    """
    /* This OS thread's ThreadState, borrowed from the threading.local that
       owns it: one load instead of a threading.local lookup on every call. */
    static __thread PyObject *current_thread_state = NULL;
    """
    PyObject *current_thread_state


cdef ThreadState thread_state():
    global current_thread_state
    if current_thread_state != NULL:
        return <ThreadState>current_thread_state
    state = getattr(_tls, "state", None)
    if state is None:
        state = _tls.state = ThreadState()
    current_thread_state = <PyObject *>state
    return <ThreadState>state


cdef int thread_count(ThreadState state) except -1:
    """Apply set_num_threads() to this thread (OpenMP keeps it per thread)."""
    if state.epoch != _thread_epoch:
        if _requested_threads:
            omp_set_num_threads(_requested_threads)
        state.epoch = _thread_epoch
    return omp_get_max_threads()


cdef int _set_threads(int count):
    global _requested_threads, _thread_epoch
    _requested_threads = count
    _thread_epoch += 1
    return 0


def _integer(what, value):
    """``value`` as an int, or TypeError naming ``what`` (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {value!r} of type "
                        f"{type(value).__name__}")
    return int(value)


def set_num_threads(count):
    """Use ``count`` OpenMP threads (1..MAX_THREADS) in every oneDNN call from now on."""
    count = _integer("set_num_threads: count", count)
    if count < 1:
        raise MXNetError(f"set_num_threads needs a count >= 1, got {count}")
    if count > MAX_THREADS:
        raise MXNetError(f"set_num_threads needs a count <= {MAX_THREADS} (MAX_THREADS), "
                         f"got {count}")
    if _forked_child and count > 1:
        raise MXNetError(
            f"set_num_threads: count must be 1 in a process forked after oneDNN ran "
            f"with several threads, got {count}: GNU OpenMP cannot start threads after "
            "fork() (use multiprocessing's 'spawn' or 'forkserver' start method)")
    _set_threads(count)
    thread_count(thread_state())


def get_num_threads():
    """The number of OpenMP threads oneDNN calls from this thread use."""
    return thread_count(thread_state())


cdef int enter_threads(int threads):
    """Make this thread's OpenMP count ``threads`` (1 in a forked child); returns
    the count to give back to leave_threads()."""
    cdef int ambient = omp_get_max_threads()
    if _forked_child:
        threads = 1
    if threads != ambient:
        omp_set_num_threads(threads)
    return ambient


cdef void leave_threads(int ambient):
    if omp_get_max_threads() != ambient:
        omp_set_num_threads(ambient)


cdef class using_threads:
    """``with using_threads(n):`` this thread plans and creates primitives for
    ``n`` OpenMP threads (the planner tries fewer threads on small layers)."""
    cdef int count, saved

    def __cinit__(self, int count):
        self.count = 1 if _forked_child else count

    def __enter__(self):
        self.saved = omp_get_max_threads()
        omp_set_num_threads(self.count)
        return self

    def __exit__(self, *exc):
        omp_set_num_threads(self.saved)
        return False


def _clamp_environment_threads():
    """Survive a huge OMP_NUM_THREADS: run on the CPUs this process may use,
    with a warning.  (Capping at MAX_THREADS was not enough: a thousand
    threads on a small machine or under a container's task limit make libgomp
    abort the process, "Thread creation failed".)"""
    cdef int count = omp_get_max_threads()
    if count > MAX_THREADS:
        affinity = getattr(os, "sched_getaffinity", None)   # Linux; cpu_count elsewhere
        usable = min(len(affinity(0)) if affinity else (os.cpu_count() or 1), MAX_THREADS)
        warnings.warn(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')!r} asks for "
                      f"{count} threads, over mxdeconv's limit of {MAX_THREADS}; oneDNN "
                      f"runs on this process's {usable} CPU(s) instead", RuntimeWarning,
                      stacklevel=2)
        _set_threads(usable)
        omp_set_num_threads(usable)   # this thread's default from now on, too


def _after_fork_in_child():
    """A forked child inherits libgomp's thread team as dead threads: its next
    parallel region would wait for them forever.  One thread never starts a
    team, so the child runs single-threaded (PyTorch does the same)."""
    global _forked_child
    if _team_started:
        _forked_child = True
        _set_threads(1)
        state = getattr(_tls, "state", None)
        if state is not None:  # its primitives were planned for the parent's team
            (<ThreadState>state).cache.clear()


_clamp_environment_threads()
os.register_at_fork(after_in_child=_after_fork_in_child)


# ----------------------------------------------------------------------------
# Version and ISA
# ----------------------------------------------------------------------------
# Named as oneDNN names them (ONEDNN_MAX_CPU_ISA), keyed by the header's enum.
_ISA_NAMES = {dnnl_cpu_isa_sse41: "sse41", dnnl_cpu_isa_avx: "avx", dnnl_cpu_isa_avx2: "avx2",
              dnnl_cpu_isa_avx2_vnni: "avx2_vnni", dnnl_cpu_isa_avx2_vnni_2: "avx2_vnni_2",
              dnnl_cpu_isa_avx512_core: "avx512_core",
              dnnl_cpu_isa_avx512_core_vnni: "avx512_core_vnni",
              dnnl_cpu_isa_avx512_core_bf16: "avx512_core_bf16",
              dnnl_cpu_isa_avx512_core_fp16: "avx512_core_fp16",
              dnnl_cpu_isa_avx512_core_amx: "avx512_core_amx",
              dnnl_cpu_isa_avx512_core_amx_fp16: "avx512_core_amx_fp16"}


def onednn_version():
    """oneDNN's version as ``"major.minor.patch"`` (the library actually loaded)."""
    cdef const dnnl_version_t *v = dnnl_version()
    return f"{v.major}.{v.minor}.{v.patch}"


def cpu_isa():
    """The instruction set oneDNN's CPU kernels dispatch to on this machine."""
    cdef int isa = <int>dnnl_get_effective_cpu_isa()
    return _ISA_NAMES.get(isa, hex(isa))


# ----------------------------------------------------------------------------
# Statistics (reorders, cache) for tests and users
# ----------------------------------------------------------------------------
_reorders = {}


def reorder_counts():
    """How many reorders ran, per tensor: ``data``, ``weights``, ``bias``,
    ``out_grad`` (inputs into a primitive's layout), ``out`` (results into a
    given target's layout) and ``to_default`` (blocked arrays made plain)."""
    return dict(_reorders)


def reset_reorder_counts():
    _reorders.clear()


# ----------------------------------------------------------------------------
# Memory descriptors and tensor layouts
# ----------------------------------------------------------------------------
_NP_TO_DNNL = {"float32": dnnl_f32, "float16": dnnl_f16, "bfloat16": dnnl_bf16}
_DNNL_TO_NP = {<int>dnnl_f32: "float32", <int>dnnl_f16: "float16",
               <int>dnnl_bf16: "bfloat16"}
_PLAIN_TAGS = {1: dnnl_a, 3: dnnl_abc, 4: dnnl_abcd, 5: dnnl_abcde}
_UNGROUPED_WEIGHT_TAGS = {3: dnnl_bac, 4: dnnl_bacd, 5: dnnl_bacde}   # iow, iohw, iodhw
_GROUPED_WEIGHT_TAGS = {4: dnnl_acbd, 5: dnnl_acbde, 6: dnnl_acbdef}  # giow, giohw, giodhw
_SPATIAL_LETTERS = {1: "w", 2: "hw", 3: "dhw"}

ROLE_DATA, ROLE_WEIGHTS, ROLE_BIAS = "data", "weights", "bias"


cdef class MemoryDesc:
    """An owned oneDNN memory descriptor with a readable layout name.

    Attributes: ``layout`` (e.g. ``"nChw16c"``; ``"any"`` before a primitive
    chose), ``dims``, ``dtype``, ``size`` (bytes, padding included) and
    ``key`` (hashable, for caches).
    """

    def __dealloc__(self):
        if self.md != NULL:
            dnnl_memory_desc_destroy(self.md)

    def __eq__(self, other):
        if not isinstance(other, MemoryDesc):
            return NotImplemented
        return bool(dnnl_memory_desc_equal(self.md, (<MemoryDesc>other).md))

    def __hash__(self):
        return self.key_hash  # computed once: descriptors key the reorder cache

    def __repr__(self):
        return f"MemoryDesc({self.layout}, dims={self.dims}, {self.dtype})"


cdef inline int md_query(const_dnnl_memory_desc_t md, dnnl_query_t what,
                         void *result) except -1:
    return check(dnnl_memory_desc_query(md, what, result), "memory descriptor query")


cdef str letters_of(str role, int ndims, bint grouped):
    """Axis letters for layout names: MXNet/oneDNN's where they apply, else a, b, ..."""
    cdef int spatial = ndims - (3 if grouped and role == ROLE_WEIGHTS else 2)
    if role == ROLE_BIAS and ndims == 1:
        return "x"
    if spatial not in _SPATIAL_LETTERS:
        return "abcdefghijkl"[:ndims]
    if role == ROLE_DATA:
        return "nc" + _SPATIAL_LETTERS[spatial]
    return ("goi" if grouped else "oi") + _SPATIAL_LETTERS[spatial]


cdef MemoryDesc wrap_md(const_dnnl_memory_desc_t src, str role, bint grouped=False):
    """Clone ``src`` (owned by someone else) into a MemoryDesc."""
    cdef MemoryDesc desc = MemoryDesc.__new__(MemoryDesc)
    check(dnnl_memory_desc_clone(&desc.md, src), "memory descriptor clone")
    cdef int ndims = 0, nblks = 0, i, dtype = 0, format_kind = 0
    cdef const dnnl_dim_t *dims = NULL
    cdef const dnnl_dim_t *strides = NULL
    cdef const dnnl_dim_t *blks = NULL
    cdef const dnnl_dim_t *idxs = NULL
    md_query(desc.md, dnnl_query_ndims_s32, &ndims)
    md_query(desc.md, dnnl_query_dims, &dims)
    md_query(desc.md, dnnl_query_data_type, &dtype)
    md_query(desc.md, dnnl_query_format_kind, &format_kind)
    desc.dims = tuple(dims[i] for i in range(ndims))
    desc.dtype = _DNNL_TO_NP.get(dtype, dnnl_dt2str(<dnnl_data_type_t>dtype).decode())
    desc.size = dnnl_memory_desc_get_size(desc.md)
    if format_kind != dnnl_blocked:  # format_tag::any: chosen by a primitive later
        desc.layout = "any"
        desc.key = ("any", desc.dims, desc.dtype, 0)
        desc.key_hash = hash(desc.key)
        return desc
    md_query(desc.md, dnnl_query_strides, &strides)
    md_query(desc.md, dnnl_query_inner_nblks_s32, &nblks)
    md_query(desc.md, dnnl_query_inner_blks, &blks)
    md_query(desc.md, dnnl_query_inner_idxs, &idxs)
    # Name the layout like oneDNN's tags: outer axes by decreasing stride (a
    # blocked axis upper-case), then the inner blocks, e.g. aBcd16b -> nChw16c.
    letters = letters_of(role, ndims, grouped)
    blocked_axes = {idxs[i] for i in range(nblks)}
    # Equal strides happen with extents of 1 (any stride fits them): the axis
    # that really has extent goes first, as oneDNN's own tags read.
    order = sorted(range(ndims), key=lambda axis: (-strides[axis], dims[axis] == 1, axis))
    name = "".join(letters[a].upper() if a in blocked_axes else letters[a] for a in order)
    name += "".join(f"{blks[i]}{letters[idxs[i]]}" for i in range(nblks))
    desc.layout = name
    desc.key = (name, desc.dims, desc.dtype, desc.size)
    desc.key_hash = hash(desc.key)
    return desc


cdef MemoryDesc new_md(dims, str dtype, dnnl_format_tag_t tag, str role,
                       bint grouped=False):
    cdef dnnl_dims_t c_dims
    cdef dnnl_memory_desc_t md = NULL
    cdef int i
    for i, d in enumerate(dims):
        c_dims[i] = d
    check(dnnl_memory_desc_create_with_tag(&md, len(dims), c_dims,
                                           _NP_TO_DNNL[dtype], tag),
          f"memory descriptor creation ({role} {tuple(dims)} {dtype})")
    try:
        return wrap_md(md, role, grouped)
    finally:
        dnnl_memory_desc_destroy(md)


cdef tuple onednn_weight_dims(tuple shape, int groups):
    """MXNet's weight ``(C_in, OC/G, *k)`` as oneDNN's ``(OC, IC, *k)`` or
    ``(G, OC/G, IC/G, *k)``."""
    if groups == 1:
        return (shape[1], shape[0]) + shape[2:]
    return (groups, shape[1], shape[0] // groups) + shape[2:]


_plain_mds = LRUCache(4096)


cdef MemoryDesc plain_md(tuple shape, str dtype, str role, int groups):
    """The descriptor of an NDArray in the default layout, seen in ``role``.

    Data and bias are plain row-major.  A weight is described over oneDNN's
    weight dims with tag ``iohw``/``giohw`` (and 1-D/3-D kin), so the user's
    buffer is used as is.
    """
    key = (shape, dtype, role, groups)
    cdef MemoryDesc desc = _plain_mds.get(key)
    if desc is not None:
        return desc
    if role == ROLE_WEIGHTS:
        dims = onednn_weight_dims(shape, groups)
        tags = _UNGROUPED_WEIGHT_TAGS if groups == 1 else _GROUPED_WEIGHT_TAGS
        desc = new_md(dims, dtype, tags[len(dims)], role, groups > 1)
    else:
        desc = new_md(shape, dtype, _PLAIN_TAGS[len(shape)], role)
    _plain_mds.put(key, desc)
    return desc


cdef class Layout:
    """One tensor's bytes in one oneDNN format.

    A blocked buffer is meaningless without knowing which tensor it holds: a
    weight's oneDNN dims are ``(O, I, *k)`` while its NDArray shape is
    ``(I, O, *k)``, so a square weight and an activation can share dims.  A
    Layout therefore records the tensor (``role``, the NDArray ``shape``,
    ``groups``) beside the descriptor, and two layouts are interchangeable only
    when both agree.
    """

    @property
    def name(self):
        return self.desc.layout

    cdef bint same_tensor(self, Layout other):
        return (self.role == other.role and self.shape == other.shape
                and self.groups == other.groups)

    def __eq__(self, other):
        if not isinstance(other, Layout):
            return NotImplemented
        return self.same_tensor(other) and self.desc == (<Layout>other).desc

    def __hash__(self):
        return hash((self.role, self.shape, self.groups, self.desc.key))

    def __repr__(self):
        return f"Layout({self.desc.layout}, {self.role} {self.shape})"

    def to_plain(self, cnp.ndarray buffer, label="to_default"):
        """A new default-layout array holding the values of ``buffer`` (in this layout)."""
        plain = new_plain_array(self)
        run_reorder(self.desc, buffer, self.plain, plain, False, label)
        return plain


cdef Layout make_layout(MemoryDesc desc, str role, tuple shape, int groups=1):
    cdef Layout layout = Layout.__new__(Layout)
    layout.desc, layout.role, layout.shape, layout.groups = desc, role, shape, groups
    layout.plain = plain_md(shape, desc.dtype, role, groups)
    layout.is_plain = desc == layout.plain
    layout.np_dtype = np.dtype(desc.dtype)
    return layout


cdef cnp.ndarray new_buffer(MemoryDesc desc):
    """Uninitialised bytes for ``desc``, 64-byte aligned like oneDNN's own."""
    return aligned_bytes(desc.size)


cdef cnp.ndarray new_plain_array(Layout layout):
    """An uninitialised default-layout array of ``layout``'s tensor (NDArray
    shape and dtype), 64-byte aligned."""
    return aligned_array(layout.shape, <cnp.dtype>layout.np_dtype, layout.plain.size)


cdef object plain_view(cnp.ndarray buffer, Layout layout):
    """The bytes of a default-layout buffer as a typed array of the NDArray shape."""
    return buffer.view(layout.np_dtype).reshape(layout.shape)


# ----------------------------------------------------------------------------
# Owned primitive descriptors, attributes and primitives
# ----------------------------------------------------------------------------
cdef class PrimitiveDesc:
    """An owned oneDNN primitive descriptor; ``next_impl()`` moves to oneDNN's
    next implementation of the same operation."""

    def __dealloc__(self):
        if self.pd != NULL:
            dnnl_primitive_desc_destroy(self.pd)

    cdef str impl(self):
        cdef const char *name = NULL
        check(dnnl_primitive_desc_query(self.pd, dnnl_query_impl_info_str, 0, &name),
              "implementation query")
        return name.decode() if name != NULL else "?"

    cdef MemoryDesc query(self, dnnl_query_t what, int index, str role, bint grouped=False):
        cdef const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(self.pd, what, index)
        if md == NULL:
            raise MXNetError(f"oneDNN {self.impl()} has no memory descriptor for "
                             f"{role} (query {<int>what}, index {index})")
        return wrap_md(md, role, grouped)

    cdef bint next_impl(self) except -1:
        cdef dnnl_status_t status = dnnl_primitive_desc_next_impl(self.pd)
        if status == dnnl_last_impl_reached:
            return False
        check(status, "moving to the next implementation")
        return True

    cdef PrimitiveDesc clone(self):
        cdef PrimitiveDesc copy = PrimitiveDesc.__new__(PrimitiveDesc)
        check(dnnl_primitive_desc_clone(&copy.pd, self.pd), "primitive descriptor clone")
        copy.hint = self.hint
        return copy


#: MXNet's act_type -> (oneDNN eltwise algorithm, alpha, beta) for the
#: activations oneDNN 3.2 computes.  It has no softsign (x / (1 + |x|)).
_ELTWISE = {
    "relu": (dnnl_eltwise_relu, 0.0, 0.0),          # alpha: the slope below 0
    "sigmoid": (dnnl_eltwise_logistic, 0.0, 0.0),
    "tanh": (dnnl_eltwise_tanh, 0.0, 0.0),
    "softrelu": (dnnl_eltwise_soft_relu, 1.0, 0.0),  # v3: log(1 + exp(alpha x)) / alpha
}
#: The act_types oneDNN can apply (fused as a post-op, or as an eltwise primitive).
ELTWISE_ACTIVATIONS = tuple(_ELTWISE)


def _eltwise(act_type):
    """(algorithm, alpha, beta) of ``act_type``, or MXNetError naming what oneDNN has."""
    try:
        return _ELTWISE[act_type]
    except (KeyError, TypeError):
        raise MXNetError(f"oneDNN {onednn_version()} has no eltwise algorithm for "
                         f"act_type={act_type!r}; it computes {ELTWISE_ACTIVATIONS}") from None


cdef class Attr:
    """Owned primitive attributes.  ``activation`` (an act_type) adds an eltwise
    post-op, ``accumulate`` a sum post-op after it: dst = [dst +] act(result)
    (MXNet's req=kAddTo in one pass)."""

    def __cinit__(self, bint accumulate, activation=None):
        cdef dnnl_post_ops_t post_ops = NULL
        cdef int alg
        cdef float alpha, beta
        check(dnnl_primitive_attr_create(&self.attr), "attribute creation")
        if not accumulate and activation is None:
            return
        if activation is not None:
            alg, alpha, beta = _eltwise(activation)
        check(dnnl_post_ops_create(&post_ops), "post-op creation")
        try:
            if activation is not None:
                check(dnnl_post_ops_append_eltwise(post_ops, <dnnl_alg_kind_t>alg, alpha, beta),
                      f"{activation} eltwise post-op")
            if accumulate:
                check(dnnl_post_ops_append_sum(post_ops, 1.0, 0, dnnl_data_type_undef),
                      "sum post-op")
            check(dnnl_primitive_attr_set_post_ops(self.attr, post_ops), "post-op attribute")
        finally:
            dnnl_post_ops_destroy(post_ops)

    def __dealloc__(self):
        if self.attr != NULL:
            dnnl_primitive_attr_destroy(self.attr)


cdef class Primitive:
    """A oneDNN primitive with one memory object per execution argument.

    The memory objects are created once; each execution only swaps the data
    handles, so a cached primitive costs no allocation per call.
    """

    def __dealloc__(self):
        cdef int i
        for i in range(self.nargs):
            if self.args[i].memory != NULL:
                dnnl_memory_destroy(self.args[i].memory)
        if self.prim != NULL:
            dnnl_primitive_destroy(self.prim)

    cdef int run(self, void **handles) except -1:
        global _team_started
        cdef dnnl_stream_t stream = thread_state().stream
        cdef dnnl_status_t status = dnnl_success
        cdef int i
        # Run with the OpenMP team the primitive was planned for (the planner
        # may choose fewer threads than the caller's count for a small layer).
        cdef int ambient = omp_get_max_threads()
        cdef int threads = 1 if _forked_child else self.threads
        if threads > 1:
            _team_started = True
        if threads != ambient:
            omp_set_num_threads(threads)
        with nogil:
            for i in range(self.nargs):
                status = dnnl_memory_set_data_handle(self.args[i].memory, handles[i])
                if status != dnnl_success:
                    break
            if status == dnnl_success:
                status = dnnl_primitive_execute(self.prim, stream, self.nargs, self.args)
            if status == dnnl_success:
                status = dnnl_stream_wait(stream)
        if threads != ambient:
            omp_set_num_threads(ambient)
        if status != dnnl_success:
            check(status, "execution of " + self.impl)
        return 0


cdef Primitive make_primitive(PrimitiveDesc pd, list args):
    """The primitive of ``pd``; ``args`` = [(execution arg id, its MemoryDesc)]."""
    cdef Primitive p = Primitive.__new__(Primitive)
    cdef MemoryDesc desc
    p.impl = pd.impl()
    p.threads = omp_get_max_threads()  # oneDNN plans its OpenMP team at creation
    if len(args) > MAX_ARGS:  # p.args is a C array: never write past it
        raise MXNetError(f"{p.impl}: {len(args)} execution arguments, at most {MAX_ARGS}")
    for arg, desc in args:
        p.args[p.nargs].arg = arg
        check(dnnl_memory_create(&p.args[p.nargs].memory, desc.md, engine(),
                                 DNNL_MEMORY_NONE), "memory creation")
        p.nargs += 1
    check(dnnl_primitive_create(&p.prim, pd.pd), f"primitive creation ({p.impl})")
    return p


cdef LRUCache thread_cache():
    return thread_state().cache


def cache(key):
    """This thread's cached entry for ``key`` (None if absent): the planner's store."""
    return thread_cache().get(key)


def cache_put(key, value):
    thread_cache().put(key, value)


def set_cache_capacity(capacity):
    """Bound every thread's primitive cache to ``capacity`` entries (0 disables it)."""
    global _capacity
    capacity = _integer("set_cache_capacity: capacity", capacity)
    if capacity < 0:
        raise MXNetError(f"cache capacity must be >= 0, got {capacity}")
    if capacity > MAX_CACHE_CAPACITY:
        raise MXNetError(f"cache capacity must be <= {MAX_CACHE_CAPACITY}, got {capacity}")
    _capacity = capacity
    thread_cache().trim()
    # oneDNN keeps its own process-wide cache of primitives (its kernels' code
    # and scratch tables): bound it the same, or it keeps what ours evicts.
    check(dnnl_set_primitive_cache_capacity(<int>min(capacity, 1 << 30)),
          "setting oneDNN's primitive cache capacity")


def cache_info():
    """This thread's primitive cache: size, capacity, hits, misses, evictions."""
    cdef LRUCache lru = thread_cache()
    return {"size": len(lru), "capacity": _capacity, "hits": lru.hits,
            "misses": lru.misses, "evictions": lru.evictions}


def onednn_cache_capacity():
    """The capacity of oneDNN's own process-wide primitive cache."""
    cdef int capacity = 0
    check(dnnl_get_primitive_cache_capacity(&capacity), "reading oneDNN's cache capacity")
    return capacity


def clear_cache():
    """Empty this thread's primitive cache (counters are kept) and oneDNN's own
    process-wide one, so that their memory is returned."""
    cdef int capacity = 0
    thread_cache().clear()
    _plain_mds.clear()
    check(dnnl_get_primitive_cache_capacity(&capacity), "reading oneDNN's cache capacity")
    check(dnnl_set_primitive_cache_capacity(0), "emptying oneDNN's primitive cache")
    check(dnnl_set_primitive_cache_capacity(capacity), "restoring oneDNN's cache capacity")


# ----------------------------------------------------------------------------
# Reorders
# ----------------------------------------------------------------------------
cdef Primitive make_reorder(MemoryDesc src, MemoryDesc dst, bint accumulate):
    """dst = [dst +] src, converting layouts."""
    cdef Attr attr = Attr(accumulate)
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    check(dnnl_reorder_primitive_desc_create(&pd.pd, src.md, engine(), dst.md, engine(),
                                             attr.attr),
          f"reorder {src.layout} -> {dst.layout}")
    return make_primitive(pd, [(DNNL_ARG_FROM, src), (DNNL_ARG_TO, dst)])


cdef Primitive reorder_primitive(MemoryDesc src, MemoryDesc dst, bint accumulate):
    """The cached reorder of this thread (made on first use)."""
    cdef ThreadState state = thread_state()
    # The thread count is part of the key: oneDNN plans a primitive's OpenMP
    # team when it creates it.
    key = (src, dst, accumulate, thread_count(state))
    cdef LRUCache lru = state.cache
    cdef Primitive prim = lru.get(key)
    if prim is None:
        prim = make_reorder(src, dst, accumulate)
        lru.put(key, prim)
    return prim


cdef int run_reorder(MemoryDesc src, cnp.ndarray src_buf, MemoryDesc dst,
                     cnp.ndarray dst_buf, bint accumulate, label) except -1:
    """dst_buf (layout ``dst``) = [dst_buf +] src_buf (layout ``src``), counted
    under ``label`` in reorder_counts().  ``label`` None: a one-off reorder of
    the planner's checks, neither counted nor cached."""
    cdef void *handles[2]
    handles[0] = data_ptr(src_buf)
    handles[1] = data_ptr(dst_buf)
    if label is None:
        make_reorder(src, dst, accumulate).run(handles)
        return 0
    reorder_primitive(src, dst, accumulate).run(handles)
    _reorders[label] = _reorders.get(label, 0) + 1
    return 0


cdef cnp.ndarray reordered(MemoryDesc src, cnp.ndarray src_buf, MemoryDesc dst, label):
    """A new buffer holding ``src_buf`` in layout ``dst``."""
    cdef cnp.ndarray out = new_buffer(dst)
    run_reorder(src, src_buf, dst, out, False, label)
    return out


cdef cnp.ndarray from_plain(Layout wanted, values):
    """Default-layout ``values`` (of ``wanted``'s tensor) in layout ``wanted``."""
    cdef cnp.ndarray plain = np.ascontiguousarray(values, dtype=wanted.np_dtype)
    if wanted.is_plain:
        return plain
    return reordered(wanted.plain, plain, wanted.desc, None)


# ----------------------------------------------------------------------------
# Deconvolution descriptors: the one place that describes a deconvolution
# ----------------------------------------------------------------------------
cdef enum Pass:
    PASS_FORWARD, PASS_BACKWARD_DATA, PASS_BACKWARD_WEIGHTS


_PASS_NAMES = {PASS_FORWARD: "forward", PASS_BACKWARD_DATA: "backward data",
               PASS_BACKWARD_WEIGHTS: "backward weights"}


cdef class Geometry:
    """oneDNN's view of one DeconvGeometry: dims, strides, dilations, paddings."""
    cdef dnnl_dims_t strides, dilates, pad_l, pad_r
    cdef readonly tuple src_dims, weight_dims, bias_dims, dst_dims
    cdef readonly tuple data_shape, weight_shape, out_shape   # the NDArrays' shapes
    cdef readonly int groups
    cdef readonly bint grouped, has_bias
    cdef readonly str dtype

    @staticmethod
    cdef Geometry of(geom, str dtype):
        cdef Geometry g = Geometry.__new__(Geometry)
        cdef int i
        param = geom.param
        for i in range(param.ndim):
            g.strides[i] = param.stride[i]
            g.dilates[i] = param.dilate[i] - 1  # oneDNN counts the gaps
            g.pad_l[i] = geom.pad_l[i]
            g.pad_r[i] = geom.pad_r[i]
        g.groups = param.num_group
        g.grouped = g.groups > 1
        g.data_shape = g.src_dims = geom.data_shape
        g.out_shape = g.dst_dims = geom.out_shape
        g.weight_shape = geom.weight_shape
        g.weight_dims = onednn_weight_dims(geom.weight_shape, g.groups)
        g.has_bias = not param.no_bias
        g.bias_dims = (param.num_filter,)
        g.dtype = dtype
        return g

    cdef MemoryDesc weights_any(self):
        return new_md(self.weight_dims, self.dtype, dnnl_format_tag_any, ROLE_WEIGHTS,
                      self.grouped)

    cdef MemoryDesc bias_any(self):
        return new_md(self.bias_dims, self.dtype, dnnl_format_tag_any, ROLE_BIAS)

    def __repr__(self):
        return (f"src {self.src_dims}, weights {self.weight_dims}, dst {self.dst_dims}, "
                f"{self.dtype}")


cdef PrimitiveDesc deconv_pd(Geometry g, Pass which, dnnl_prop_kind_t prop,
                             MemoryDesc src, MemoryDesc weights, MemoryDesc bias,
                             MemoryDesc dst, PrimitiveDesc hint, Attr attr):
    """A primitive descriptor for one pass, or None when oneDNN has no
    implementation for it.  ``src``/``weights``/``bias``/``dst`` are the
    (diff_)src, (diff_)weights, (diff_)bias (None: no bias) and (diff_)dst
    descriptors of that pass."""
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef const_dnnl_memory_desc_t bias_md = bias.md if bias is not None else NULL
    cdef const_dnnl_primitive_desc_t hint_pd = hint.pd if hint is not None else NULL
    cdef const_dnnl_primitive_attr_t c_attr = attr.attr if attr is not None else NULL
    cdef dnnl_status_t status
    if which == PASS_FORWARD:
        status = dnnl_deconvolution_forward_primitive_desc_create(
            &pd.pd, engine(), prop, dnnl_deconvolution_direct, src.md, weights.md, bias_md,
            dst.md, g.strides, g.dilates, g.pad_l, g.pad_r, c_attr)
    elif which == PASS_BACKWARD_DATA:
        status = dnnl_deconvolution_backward_data_primitive_desc_create(
            &pd.pd, engine(), dnnl_deconvolution_direct, src.md, weights.md, dst.md,
            g.strides, g.dilates, g.pad_l, g.pad_r, hint_pd, c_attr)
    else:
        status = dnnl_deconvolution_backward_weights_primitive_desc_create(
            &pd.pd, engine(), dnnl_deconvolution_direct, src.md, weights.md, bias_md,
            dst.md, g.strides, g.dilates, g.pad_l, g.pad_r, hint_pd, c_attr)
    if status == dnnl_unimplemented:
        return None
    check(status, f"deconvolution descriptor ({_PASS_NAMES[which]}, {g!r})")
    pd.hint = hint
    return pd


cdef PrimitiveDesc forward_hint(Geometry g):
    """The forward pass the backward passes are planned against."""
    cdef MemoryDesc data_any = new_md(g.src_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef MemoryDesc out_any = new_md(g.dst_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef PrimitiveDesc hint = deconv_pd(
        g, PASS_FORWARD, dnnl_forward_training, data_any, g.weights_any(),
        g.bias_any() if g.has_bias else None, out_any, None, None)
    if hint is None:
        raise MXNetError(f"oneDNN has no deconvolution forward for {g!r}")
    return hint


cdef MemoryDesc swap_weight_axes(MemoryDesc weights, bint grouped):
    """``weights`` with its O and I axes swapped, over the same bytes: a
    deconvolution's weights ``([G,] O, I, *k)`` are its convolution's
    ``([G,] I, O, *k)`` (oneDNN's ref_deconvolution permutes them the same way)."""
    cdef int permutation[DNNL_MAX_NDIMS]
    cdef int i, first = 1 if grouped else 0
    cdef dnnl_memory_desc_t md = NULL
    for i in range(len(weights.dims)):
        permutation[i] = i
    permutation[first], permutation[first + 1] = first + 1, first
    check(dnnl_memory_desc_permute_axes(&md, weights.md, permutation),
          f"weight axes permutation ({weights!r})")
    try:
        return wrap_md(md, ROLE_WEIGHTS, grouped)
    finally:
        dnnl_memory_desc_destroy(md)


cdef PrimitiveDesc conv_forward_hint(Geometry g):
    """The forward convolution the backward-data and backward-weights
    convolutions of direct plans are planned against (as forward_hint() is
    for the deconvolution's backward passes), or None when oneDNN has none."""
    cdef PrimitiveDesc hint = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef MemoryDesc data_any = new_md(g.src_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef MemoryDesc out_any = new_md(g.dst_dims, g.dtype, dnnl_format_tag_any, ROLE_DATA)
    cdef MemoryDesc weights_any = swap_weight_axes(g.weights_any(), g.grouped)
    cdef dnnl_status_t status = dnnl_convolution_forward_primitive_desc_create(
        &hint.pd, engine(), dnnl_forward_training, dnnl_convolution_direct, out_any.md,
        weights_any.md, NULL, data_any.md, g.strides, g.dilates, g.pad_l, g.pad_r, NULL)
    if status == dnnl_unimplemented:
        return None
    check(status, f"convolution descriptor (forward hint, {g!r})")
    return hint


cdef PrimitiveDesc direct_conv_pd(Geometry g, Pass which, MemoryDesc src, MemoryDesc weights,
                                  MemoryDesc dst, PrimitiveDesc hint):
    """The convolution that oneDNN 3.2 runs for a deconvolution pass, described
    directly, or None when oneDNN has no implementation for it: the forward is
    a backward-data convolution from ``src`` (the deconvolution's src) to
    ``dst``, the backward data a forward convolution from ``dst`` (the
    deconvolution's diff_dst) to ``src`` (its diff_src), the backward weights
    a backward-weights convolution whose src is ``dst`` (the deconvolution's
    diff_dst) and whose diff_dst is ``src`` (its src), without a bias.
    ``weights`` has the deconvolution's dims; ``hint`` is conv_forward_hint()
    (the two backward convolutions need it).  Run directly, the convolution
    skips the wrapper's nested execution and argument remapping (about 1 us
    per call)."""
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef MemoryDesc conv_weights = swap_weight_axes(weights, g.grouped)
    cdef dnnl_status_t status
    if which == PASS_BACKWARD_DATA:
        status = dnnl_convolution_forward_primitive_desc_create(
            &pd.pd, engine(), dnnl_forward_inference, dnnl_convolution_direct, dst.md,
            conv_weights.md, NULL, src.md, g.strides, g.dilates, g.pad_l, g.pad_r, NULL)
    elif hint is None:
        return None
    elif which == PASS_FORWARD:
        status = dnnl_convolution_backward_data_primitive_desc_create(
            &pd.pd, engine(), dnnl_convolution_direct, dst.md, conv_weights.md, src.md,
            g.strides, g.dilates, g.pad_l, g.pad_r, hint.pd, NULL)
    else:  # the convolution's src is the deconvolution's diff_dst, and vice versa
        status = dnnl_convolution_backward_weights_primitive_desc_create(
            &pd.pd, engine(), dnnl_convolution_direct, dst.md, conv_weights.md, NULL,
            src.md, g.strides, g.dilates, g.pad_l, g.pad_r, hint.pd, NULL)
    if status == dnnl_unimplemented:
        return None
    check(status, f"convolution descriptor (direct {_PASS_NAMES[which]}, {g!r})")
    pd.hint = hint
    return pd


# ----------------------------------------------------------------------------
# The bias added by mxdeconv (direct forward plans)
# ----------------------------------------------------------------------------
# Below this many dst elements the bias loop runs on the calling thread (an
# OpenMP fork/join costs more than the additions).
cdef Py_ssize_t PARALLEL_BIAS_ELEMENTS = 1 << 15


cdef ChannelBlocks channel_blocks(MemoryDesc dst):
    """How ``dst`` (an f32 data tensor) lays out its channels for the bias
    loop, or ``planes == 0`` when it is no layout the loop knows:
    nc<spatial> (a plane per image and channel), n<spatial>c (a plane per
    pixel, all channels in a row) and nC<spatial>8c/16c (a plane per image and
    channel block)."""
    cdef ChannelBlocks blocks
    blocks.planes = 0
    dims = dst.dims
    spatial = _SPATIAL_LETTERS.get(len(dims) - 2)
    if spatial is None or dst.dtype != "float32":
        return blocks
    cdef Py_ssize_t images = dims[0], channels = dims[1], pixels = 1
    for extent in dims[2:]:
        pixels *= extent
    blocks.channels = channels
    name = dst.layout
    if name == "nc" + spatial:
        blocks.planes, blocks.blocks, blocks.rows, blocks.width = (
            images * channels, channels, pixels, 1)
    elif name == "n" + spatial + "c":
        blocks.planes, blocks.blocks, blocks.rows, blocks.width = images * pixels, 1, 1, channels
    else:
        for width in (8, 16):
            if name == f"nC{spatial}{width}c":
                count = (channels + width - 1) // width
                blocks.planes, blocks.blocks, blocks.rows, blocks.width = (
                    images * count, count, pixels, width)
    return blocks


cdef inline void add_bias_plane(float *dst, const float *bias, const ChannelBlocks *blocks,
                                Py_ssize_t plane) noexcept nogil:
    cdef Py_ssize_t first = (plane % blocks.blocks) * blocks.width
    cdef Py_ssize_t count = blocks.channels - first
    cdef Py_ssize_t r, i
    cdef float value
    cdef float *row = dst + plane * blocks.rows * blocks.width
    if blocks.width == 1:
        value = bias[first]
        for r in range(blocks.rows):
            row[r] += value
        return
    if count > blocks.width:
        count = blocks.width   # a block's padding channels stay zero
    for r in range(blocks.rows):
        for i in range(count):
            row[i] += bias[first + i]
        row += blocks.width


cdef inline int loop_team(int planned) noexcept:
    """The OpenMP team of mxdeconv's loops: the primitive's (one thread in a
    forked child, like the primitive)."""
    return 1 if _forked_child else planned


cdef void add_bias(float *dst, const float *bias, const ChannelBlocks *blocks,
                   int threads) noexcept nogil:
    """dst[n, c, ...] += bias[c] in dst's layout, on ``threads`` OpenMP threads."""
    cdef Py_ssize_t plane
    if threads > 1 and blocks.planes * blocks.rows * blocks.width >= PARALLEL_BIAS_ELEMENTS:
        for plane in prange(blocks.planes, num_threads=threads, schedule="static"):
            add_bias_plane(dst, bias, blocks, plane)
    else:
        for plane in range(blocks.planes):
            add_bias_plane(dst, bias, blocks, plane)


cdef inline void sum_bias_block(const float *diff_dst, float *diff_bias,
                                const ChannelBlocks *blocks, Py_ssize_t block) noexcept nogil:
    """diff_bias over the channels of one channel block, in double, 16 at a time."""
    cdef Py_ssize_t first = block * blocks.width
    cdef Py_ssize_t count = blocks.channels - first
    cdef Py_ssize_t chunk, width, plane, r, i
    cdef double sums[16]
    cdef const float *row
    if count > blocks.width:
        count = blocks.width   # a block's padding channels are not summed
    for chunk in range(0, count, 16):
        width = count - chunk if count - chunk < 16 else 16
        for i in range(width):
            sums[i] = 0
        plane = block
        while plane < blocks.planes:   # every plane of this block: one per image
            row = diff_dst + plane * blocks.rows * blocks.width + chunk
            for r in range(blocks.rows):
                for i in range(width):
                    sums[i] += row[i]
                row += blocks.width
            plane += blocks.blocks
        for i in range(width):
            diff_bias[first + chunk + i] = <float>sums[i]


cdef void sum_bias(const float *diff_dst, float *diff_bias, const ChannelBlocks *blocks,
                   int threads) noexcept nogil:
    """diff_bias[c] = the sum of diff_dst[n, c, ...] over images and pixels, in
    diff_dst's layout, on ``threads`` OpenMP threads (a channel block each)."""
    cdef Py_ssize_t block
    if (threads > 1 and blocks.blocks > 1
            and blocks.planes * blocks.rows * blocks.width >= PARALLEL_BIAS_ELEMENTS):
        for block in prange(blocks.blocks, num_threads=threads, schedule="static"):
            sum_bias_block(diff_dst, diff_bias, blocks, block)
    else:
        for block in range(blocks.blocks):
            sum_bias_block(diff_dst, diff_bias, blocks, block)


# ----------------------------------------------------------------------------
# Candidate plans
# ----------------------------------------------------------------------------
#: Layout families tried for the data tensors (src, dst and their gradients):
#: oneDNN's own choice first, then each explicit family.
FAMILIES = ("any", "blocked16", "blocked8", "channels_last", "plain")
_FAMILY_TAGS = {
    "blocked16": {3: dnnl_aBc16b, 4: dnnl_aBcd16b, 5: dnnl_aBcde16b},
    "blocked8": {3: dnnl_aBc8b, 4: dnnl_aBcd8b, 5: dnnl_aBcde8b},
    "channels_last": {3: dnnl_acb, 4: dnnl_acdb, 5: dnnl_acdeb},
    "plain": _PLAIN_TAGS,
}


cdef MemoryDesc family_md(tuple dims, str dtype, str family):
    cdef dnnl_format_tag_t tag = dnnl_format_tag_any
    if family != "any":
        tag = _FAMILY_TAGS[family][len(dims)]
    return new_md(dims, dtype, tag, ROLE_DATA)


cdef class Candidate:
    """One way oneDNN offers to run a pass: a descriptor positioned on one
    implementation, and how it was asked for.  ``build()`` creates its plan
    (compiling the kernel): candidates are cheap, plans are not."""

    @property
    def is_reference(self):
        """oneDNN's reference kernels: correct but orders of magnitude slower."""
        return "ref" in self.impl.rpartition("+")[2]

    def build(self):
        return self.builder(self)

    def __repr__(self):
        weights = ", plain weights" if self.weights == "plain" else ""
        bias = "" if self.bias_fused else ", bias added separately"
        if self.direct and not self.bias_fused:
            bias = ", bias added by mxdeconv"
        act = ""
        if self.act_type is not None:
            if not self.act_fused:
                act = f", {self.act_type} by a separate eltwise primitive"
            elif self.bias_fused:
                act = f", {self.act_type} fused"
            else:
                act = f", {self.act_type} fused into the bias addition"
        return f"Candidate({self.impl}, {self.family} layouts{weights}{bias}{act})"


cdef class ForwardPlan:
    """The forward pass of one geometry: a deconvolution primitive; when the
    bias cannot be fused, a binary primitive that adds it in place; and the
    activation (``act_type``, None: none) fused as an eltwise post-op of the
    last of these (``act_fused``) or run by an eltwise primitive in place."""

    cdef int run(self, void *src, void *weights, void *bias, void *dst,
                 bint activate=True) except -1:
        cdef void *handles[4]
        cdef int n = 0
        handles[n] = src; n += 1
        handles[n] = weights; n += 1
        if self.bias_fused and self.bias is not None:
            handles[n] = bias; n += 1
        handles[n] = dst
        self.prim.run(handles)
        cdef int threads = loop_team(self.threads)
        if self.bias_blocks.planes and bias != NULL:
            with nogil:
                add_bias(<float *>dst, <const float *>bias, &self.bias_blocks, threads)
        if self.bias_prim is not None:
            handles[0] = dst
            handles[1] = bias
            handles[2] = dst
            self.bias_prim.run(handles)
        if activate and self.act_prim is not None:
            handles[0] = dst
            handles[1] = dst
            self.act_prim.run(handles)
        return 0

    def run_plain(self, src, weights, bias, dst_init=None, bint activate=True):
        """Run on default-layout NumPy arrays; returns the default-layout result.
        ``dst_init`` seeds dst (the plan's sum post-op, if any, adds onto it).
        ``activate`` False stops before a separate activation primitive (the
        pre-activation, for the plan-time check; a fused one cannot be skipped)."""
        if not activate and self.act_fused:
            raise MXNetError(f"run_plain: activate must be True for a plan with the "
                             f"{self.act_type} activation fused, got activate=False")
        src_buf = from_plain(self.src, src)
        wei_buf = from_plain(self.weights, weights)
        bias_buf = None if self.bias is None else from_plain(self.bias, bias)
        if dst_init is None:
            dst_buf = new_buffer(self.dst.desc)
        else:
            dst_buf = from_plain(self.dst, dst_init).copy()
        self.run(data_ptr(src_buf), data_ptr(wei_buf),
                 NULL if bias_buf is None else data_ptr(bias_buf), data_ptr(dst_buf),
                 activate)
        return self.dst.to_plain(dst_buf, None)


cdef Primitive bias_add_primitive(Geometry g, Layout dst, activation=None):
    """dst += bias, broadcast over every axis but the channels (in place);
    ``activation`` (an act_type) then applies to the sum as a post-op."""
    bias_dims = (1, g.dst_dims[1]) + (1,) * (len(g.dst_dims) - 2)
    cdef MemoryDesc bias = new_md(bias_dims, g.dtype, _PLAIN_TAGS[len(bias_dims)], ROLE_DATA)
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    cdef Attr attr = Attr(False, activation)
    check(dnnl_binary_primitive_desc_create(&pd.pd, engine(), dnnl_binary_add,
                                            dst.desc.md, bias.md, dst.desc.md, attr.attr),
          f"bias addition on {dst.name}")
    return make_primitive(pd, [(DNNL_ARG_SRC_0, dst.desc), (DNNL_ARG_SRC_1, bias),
                               (DNNL_ARG_DST, dst.desc)])


cdef Primitive eltwise_primitive(str act_type, Layout dst):
    """dst = act(dst) in place: the activation when it is not fused."""
    cdef int alg
    cdef float alpha, beta
    alg, alpha, beta = _eltwise(act_type)
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    check(dnnl_eltwise_forward_primitive_desc_create(
              &pd.pd, engine(), dnnl_forward_inference, <dnnl_alg_kind_t>alg, dst.desc.md,
              dst.desc.md, alpha, beta, NULL),
          f"{act_type} eltwise on {dst.name}")
    return make_primitive(pd, [(DNNL_ARG_SRC, dst.desc), (DNNL_ARG_DST, dst.desc)])


cdef ForwardPlan build_forward(Geometry g, Candidate c):
    cdef ForwardPlan plan = ForwardPlan.__new__(ForwardPlan)
    cdef PrimitiveDesc pd = c.pd
    cdef MemoryDesc conv_weights
    plan.impl, plan.family, plan.bias_fused = c.impl, c.family, c.bias_fused
    plan.act_type, plan.act_fused, plan.direct = c.act_type, c.act_fused, c.direct
    plan.threads = omp_get_max_threads()
    if c.direct:  # a backward-data convolution: dst is its diff_src
        plan.src = make_layout(pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA), ROLE_DATA,
                               g.data_shape)
        conv_weights = pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS, g.grouped)
        plan.weights = make_layout(swap_weight_axes(conv_weights, g.grouped), ROLE_WEIGHTS,
                                   g.weight_shape, g.groups)
        plan.dst = make_layout(pd.query(dnnl_query_diff_src_md, 0, ROLE_DATA), ROLE_DATA,
                               g.out_shape)
        args = [(DNNL_ARG_DIFF_DST, plan.src.desc), (DNNL_ARG_WEIGHTS, conv_weights)]
    else:
        plan.src = make_layout(pd.query(dnnl_query_src_md, 0, ROLE_DATA), ROLE_DATA,
                               g.data_shape)
        plan.weights = make_layout(pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS, g.grouped),
                                   ROLE_WEIGHTS, g.weight_shape, g.groups)
        plan.dst = make_layout(pd.query(dnnl_query_dst_md, 0, ROLE_DATA), ROLE_DATA,
                               g.out_shape)
        args = [(DNNL_ARG_SRC, plan.src.desc), (DNNL_ARG_WEIGHTS, plan.weights.desc)]
    if g.has_bias:
        if c.bias_fused:
            bias_desc = pd.query(dnnl_query_weights_md, 1, ROLE_BIAS)
            args.append((DNNL_ARG_BIAS, bias_desc))
        elif c.direct:
            bias_desc = plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1)
            plan.bias_blocks = channel_blocks(plan.dst.desc)
            if not plan.bias_blocks.planes:
                raise MXNetError(f"{c!r}: mxdeconv's bias loop does not know dst layout "
                                 f"{plan.dst.name}")
        else:
            bias_desc = plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1)
            # The activation follows the bias: fused, it rides on the addition.
            plan.bias_prim = bias_add_primitive(g, plan.dst,
                                                c.act_type if c.act_fused else None)
        plan.bias = make_layout(bias_desc, ROLE_BIAS, g.bias_dims)
    args.append((DNNL_ARG_DIFF_SRC if c.direct else DNNL_ARG_DST, plan.dst.desc))
    plan.prim = make_primitive(pd, args)
    if c.act_type is not None and not c.act_fused:
        plan.act_prim = eltwise_primitive(c.act_type, plan.dst)
    return plan


def _enumerate(make_pd, builder, list variants, act_type=None, skip=None):
    """Candidates of one pass: for each variant (data layout family, weights
    layout family, bias fused?, activation fused?, direct convolution?),
    oneDNN's implementations in its order; duplicates once, and those
    ``skip(candidate)`` declines, left out; reference kernels last."""
    seen = set()
    deferred = []
    cdef Candidate c
    cdef PrimitiveDesc pd
    cdef int index = 0
    for family, weights, fused, act_fused, direct in variants:
        pd = make_pd(family, weights, fused, act_fused, direct)
        while pd is not None:
            c = Candidate.__new__(Candidate)
            c.pd, c.family, c.weights, c.bias_fused = pd.clone(), family, weights, fused
            c.act_type, c.act_fused, c.direct = act_type, act_fused, bool(direct)
            c.impl, c.builder = direct + pd.impl(), builder
            key = (c.impl, fused, act_fused, _pd_layout_keys(c.pd))
            if key not in seen and not (skip is not None and skip(c)):
                seen.add(key)
                if c.is_reference:
                    deferred.append(c)
                else:
                    c.index = index
                    index += 1
                    yield c
            if not pd.next_impl():
                pd = None
    for c in deferred:
        c.index = index
        index += 1
        yield c


def _variants(has_bias, act_flags=(False,), direct=None):
    """(data family, weights family, bias fused, activation fused, direct) in
    the order oneDNN's own choice is reached first: every data family with
    oneDNN's weights layout, then with plain weights (no weight reorder in
    training), bias fused first, then the activation fused first
    (``act_flags``).  When ``direct`` is a direct convolution's name prefix
    (DIRECT_FORWARD, ...; "" in oneDNN's own variants), each layout pair's
    direct convolution (bias and activation separate) follows oneDNN's own
    deconvolution of that pair: the tuner, bounded in time, reaches them early."""
    fused_flags = [True, False] if has_bias else [True]
    variants = []
    for fused in fused_flags:
        for act_fused in act_flags:
            for weights in ("any", "plain"):
                for family in FAMILIES:
                    variants.append((family, weights, fused, act_fused, ""))
                    if direct is not None and fused == fused_flags[0] and \
                            act_fused == act_flags[0]:
                        variants.append((family, weights, not has_bias, False, direct))
    return variants


cdef MemoryDesc weights_md(Geometry g, str weights):
    if weights == "plain":
        return plain_md(g.weight_shape, g.dtype, ROLE_WEIGHTS, g.groups)
    return g.weights_any()


cdef tuple _pd_layout_keys(PrimitiveDesc pd):
    keys = []
    cdef const_dnnl_memory_desc_t md
    cdef MemoryDesc desc
    for what in (dnnl_query_src_md, dnnl_query_diff_src_md, dnnl_query_weights_md,
                 dnnl_query_diff_weights_md, dnnl_query_dst_md, dnnl_query_diff_dst_md):
        md = dnnl_primitive_desc_query_md(pd.pd, <dnnl_query_t>what, 0)
        if md != NULL:
            desc = wrap_md(md, ROLE_DATA)
            keys.append(desc.key)
    return tuple(keys)


def forward_candidates(geom, str dtype, bint training, bint accumulate, act_type=None,
                       bint fuse_activation=True):
    """The forward plans oneDNN offers for ``geom``, in order of preference:
    the bias fused into the primitive first, then added by a separate
    primitive; within each, the activation ``act_type`` (one of
    ELTWISE_ACTIVATIONS, or None) fused as a post-op first (unless
    ``fuse_activation`` is False), then run by a separate eltwise primitive;
    within each, oneDNN's own layout choice first."""
    cdef Geometry g = Geometry.of(geom, dtype)
    cdef Attr attr = Attr(accumulate)
    cdef Attr act_attr = attr
    cdef dnnl_prop_kind_t prop = dnnl_forward_training if training else dnnl_forward_inference
    act_flags = [False]
    if act_type is not None:
        if accumulate:
            raise MXNetError(f"forward_candidates: an activation (act_type={act_type!r}) "
                             "cannot follow req=add's sum (accumulate=True)")
        act_attr = Attr(False, act_type)
        act_flags = [True, False] if fuse_activation else [False]

    # A direct convolution takes neither the sum post-op nor a bias; mxdeconv's
    # bias loop adds float32 only.
    direct = DIRECT_FORWARD if dtype == "float32" and not accumulate else None
    cdef PrimitiveDesc conv_hint = conv_forward_hint(g) if direct else None

    def make_pd(family, weights, fused, act_fused, direct):
        if direct:
            return direct_conv_pd(g, PASS_FORWARD, family_md(g.src_dims, dtype, family),
                                  weights_md(g, weights), family_md(g.dst_dims, dtype, family),
                                  conv_hint)
        # The post-op goes on the deconvolution only when the bias is in it
        # too; with a separate bias it rides on the bias addition instead.
        return deconv_pd(g, PASS_FORWARD, prop, family_md(g.src_dims, dtype, family),
                         weights_md(g, weights), g.bias_any() if fused and g.has_bias else None,
                         family_md(g.dst_dims, dtype, family), None,
                         act_attr if act_fused and fused else attr)

    return _enumerate(make_pd, lambda c: build_forward(g, c),
                      _variants(g.has_bias, act_flags, direct), act_type, _forward_skip)


#: oneDNN's convolution-based deconvolution (``ref_deconvolution``: a backward-
#: data convolution) names its implementations "conv:any+<convolution>".
CONVOLUTION_BASED = "conv:any+"
#: mxdeconv's names for the direct convolutions (see direct_conv_pd): the
#: forward runs "conv:bwd_data+<convolution>", the backward data
#: "conv:fwd+<convolution>", the backward weights "conv:bwd_weights+<convolution>".
DIRECT_FORWARD, DIRECT_BACKWARD_DATA = "conv:bwd_data+", "conv:fwd+"
DIRECT_BACKWARD_WEIGHTS = "conv:bwd_weights+"


def _forward_skip(Candidate c):
    return _slow_post_op(c) or _bias_loop_cannot_add(c)


def _bias_loop_cannot_add(Candidate c):
    """Whether ``c`` is a direct convolution with a bias whose dst (its
    diff_src) is in a layout mxdeconv's bias loop does not know."""
    return c.direct and not c.bias_fused and not loop_knows(c, dnnl_query_diff_src_md)


cdef bint loop_knows(Candidate c, dnnl_query_t what) except -1:
    """Whether mxdeconv's bias loops walk the layout ``c`` chose for ``what``."""
    return channel_blocks(c.pd.query(what, 0, ROLE_DATA)).planes > 0


def _slow_post_op(Candidate c):
    """Whether ``c`` has oneDNN apply its eltwise post-op in a scalar reference
    loop: a convolution-based deconvolution computes into a scratch buffer and
    runs its post-ops element by element (ref_deconvolution.cpp,
    compute_ref_attrs, v3.2); measured 2 to 5 times slower than the same
    kernel followed by an eltwise primitive, so it is not a candidate."""
    return c.act_fused and c.bias_fused and c.impl.startswith(CONVOLUTION_BASED)


cdef class BackwardDataPlan:
    """diff_src = backward data(diff_dst, weights)."""

    cdef int run(self, void *diff_dst, void *weights, void *diff_src) except -1:
        cdef void *handles[3]
        handles[0], handles[1], handles[2] = diff_dst, weights, diff_src
        return self.prim.run(handles)

    def run_plain(self, diff_dst, weights):
        dd = from_plain(self.diff_dst, diff_dst)
        wei = from_plain(self.weights, weights)
        out = new_buffer(self.diff_src.desc)
        self.run(data_ptr(dd), data_ptr(wei), data_ptr(out))
        return self.diff_src.to_plain(out, None)


cdef class BackwardWeightsPlan:
    """diff_weights (and diff_bias) = backward weights(src, diff_dst)."""

    cdef int run(self, void *src, void *diff_dst, void *diff_weights,
                 void *diff_bias) except -1:
        cdef void *handles[4]
        handles[0], handles[1], handles[2], handles[3] = src, diff_dst, diff_weights, diff_bias
        self.prim.run(handles)
        cdef int threads = loop_team(self.threads)
        if self.bias_blocks.planes and diff_bias != NULL:
            with nogil:
                sum_bias(<const float *>diff_dst, <float *>diff_bias, &self.bias_blocks, threads)
        return 0


    def run_plain(self, src, diff_dst):
        """Returns ``(diff_weights, diff_bias or None)`` in the default layout."""
        src_buf = from_plain(self.src, src)
        dd = from_plain(self.diff_dst, diff_dst)
        dw = new_buffer(self.diff_weights.desc)
        db = None if self.diff_bias is None else new_buffer(self.diff_bias.desc)
        self.run(data_ptr(src_buf), data_ptr(dd), data_ptr(dw),
                 NULL if db is None else data_ptr(db))
        return (self.diff_weights.to_plain(dw, None),
                None if db is None else self.diff_bias.to_plain(db, None))


def backward_weights_candidates(geom, str dtype):
    """Backward-weights plans for ``geom`` (diff_bias included when there is a bias)."""
    cdef Geometry g = Geometry.of(geom, dtype)
    cdef PrimitiveDesc hint = forward_hint(g)
    # mxdeconv's bias-gradient loop sums float32 only.
    direct = DIRECT_BACKWARD_WEIGHTS if dtype == "float32" else None
    cdef PrimitiveDesc conv_hint = conv_forward_hint(g) if direct else None

    def make_pd(family, weights, fused, act_fused, direct):
        if direct:
            return direct_conv_pd(g, PASS_BACKWARD_WEIGHTS,
                                  family_md(g.src_dims, dtype, family), weights_md(g, weights),
                                  family_md(g.dst_dims, dtype, family), conv_hint)
        return deconv_pd(g, PASS_BACKWARD_WEIGHTS, dnnl_backward_weights,
                         family_md(g.src_dims, dtype, family), weights_md(g, weights),
                         g.bias_any() if g.has_bias else None,
                         family_md(g.dst_dims, dtype, family), hint, None)

    return _enumerate(make_pd, lambda c: build_backward_weights(g, c),
                      _variants(False, direct=direct),
                      skip=_bias_sum_cannot_read if g.has_bias else None)


def _bias_sum_cannot_read(Candidate c):
    """Whether ``c`` is a direct convolution whose diff_dst (its src) is in a
    layout mxdeconv's bias-gradient loop does not know."""
    return c.direct and not loop_knows(c, dnnl_query_src_md)


cdef BackwardWeightsPlan build_backward_weights(Geometry g, Candidate c):
    cdef BackwardWeightsPlan plan = BackwardWeightsPlan.__new__(BackwardWeightsPlan)
    cdef MemoryDesc weights
    plan.impl, plan.family, plan.threads = c.impl, c.family, omp_get_max_threads()
    plan.direct = c.direct
    if c.direct:  # the convolution's src is diff_dst, its diff_dst is src
        plan.src = make_layout(c.pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA), ROLE_DATA,
                               g.data_shape)
        plan.diff_dst = make_layout(c.pd.query(dnnl_query_src_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.out_shape)
        weights = c.pd.query(dnnl_query_diff_weights_md, 0, ROLE_WEIGHTS, g.grouped)
        plan.diff_weights = make_layout(swap_weight_axes(weights, g.grouped), ROLE_WEIGHTS,
                                        g.weight_shape, g.groups)
        plan.prim = make_primitive(c.pd, [(DNNL_ARG_DIFF_DST, plan.src.desc),
                                          (DNNL_ARG_SRC, plan.diff_dst.desc),
                                          (DNNL_ARG_DIFF_WEIGHTS, weights)])
        if g.has_bias:
            plan.diff_bias = make_layout(plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1),
                                         ROLE_BIAS, g.bias_dims)
            plan.bias_blocks = channel_blocks(plan.diff_dst.desc)
            if not plan.bias_blocks.planes:
                raise MXNetError(f"{c!r}: mxdeconv's bias-gradient loop does not know "
                                 f"diff_dst layout {plan.diff_dst.name}")
        return plan
    plan.src = make_layout(c.pd.query(dnnl_query_src_md, 0, ROLE_DATA), ROLE_DATA,
                           g.data_shape)
    plan.diff_dst = make_layout(c.pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA),
                                ROLE_DATA, g.out_shape)
    plan.diff_weights = make_layout(
        c.pd.query(dnnl_query_diff_weights_md, 0, ROLE_WEIGHTS, g.grouped),
        ROLE_WEIGHTS, g.weight_shape, g.groups)
    args = [(DNNL_ARG_SRC, plan.src.desc), (DNNL_ARG_DIFF_DST, plan.diff_dst.desc),
            (DNNL_ARG_DIFF_WEIGHTS, plan.diff_weights.desc)]
    if g.has_bias:
        plan.diff_bias = make_layout(c.pd.query(dnnl_query_diff_weights_md, 1, ROLE_BIAS),
                                     ROLE_BIAS, g.bias_dims)
        args.append((DNNL_ARG_DIFF_BIAS, plan.diff_bias.desc))
    plan.prim = make_primitive(c.pd, args)
    return plan


def backward_data_candidates(geom, str dtype):
    """Backward-data plans for ``geom``."""
    cdef Geometry g = Geometry.of(geom, dtype)
    cdef PrimitiveDesc hint = forward_hint(g)

    def make_pd(family, weights, fused, act_fused, direct):
        if direct:
            return direct_conv_pd(g, PASS_BACKWARD_DATA, family_md(g.src_dims, dtype, family),
                                  weights_md(g, weights), family_md(g.dst_dims, dtype, family),
                                  None)
        return deconv_pd(g, PASS_BACKWARD_DATA, dnnl_backward_data,
                         family_md(g.src_dims, dtype, family), weights_md(g, weights), None,
                         family_md(g.dst_dims, dtype, family), hint, None)

    return _enumerate(make_pd, lambda c: build_backward_data(g, c),
                      _variants(False, direct=DIRECT_BACKWARD_DATA))


cdef BackwardDataPlan build_backward_data(Geometry g, Candidate c):
    cdef BackwardDataPlan plan = BackwardDataPlan.__new__(BackwardDataPlan)
    cdef MemoryDesc weights
    plan.impl, plan.family, plan.threads = c.impl, c.family, omp_get_max_threads()
    plan.direct = c.direct
    if c.direct:  # a forward convolution from diff_dst to diff_src
        plan.diff_dst = make_layout(c.pd.query(dnnl_query_src_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.out_shape)
        weights = c.pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS, g.grouped)
        plan.weights = make_layout(swap_weight_axes(weights, g.grouped), ROLE_WEIGHTS,
                                   g.weight_shape, g.groups)
        plan.diff_src = make_layout(c.pd.query(dnnl_query_dst_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.data_shape)
        args = [(DNNL_ARG_SRC, plan.diff_dst.desc), (DNNL_ARG_WEIGHTS, weights),
                (DNNL_ARG_DST, plan.diff_src.desc)]
    else:
        plan.diff_dst = make_layout(c.pd.query(dnnl_query_diff_dst_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.out_shape)
        plan.weights = make_layout(c.pd.query(dnnl_query_weights_md, 0, ROLE_WEIGHTS,
                                              g.grouped),
                                   ROLE_WEIGHTS, g.weight_shape, g.groups)
        plan.diff_src = make_layout(c.pd.query(dnnl_query_diff_src_md, 0, ROLE_DATA),
                                    ROLE_DATA, g.data_shape)
        args = [(DNNL_ARG_DIFF_DST, plan.diff_dst.desc), (DNNL_ARG_WEIGHTS, plan.weights.desc),
                (DNNL_ARG_DIFF_SRC, plan.diff_src.desc)]
    plan.prim = make_primitive(c.pd, args)
    return plan


# ----------------------------------------------------------------------------
# Benchmark hook: the primitives alone, in a C loop
# ----------------------------------------------------------------------------
cdef double now() nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef dict _timing_buffers = {}


cdef cnp.ndarray touched_bytes(Py_ssize_t nbytes, int slot):
    """Bytes for timing, every page written: np.zeros maps untouched pages onto
    the kernel's one zero page, which reads from cache, so a big input would
    time several times faster than real data (0x3c bytes are small normal
    floats in float32 and bfloat16).  Kept per (size, argument slot) until
    release_timing_buffers(), so a tuning writes each size once, not once per
    candidate; distinct slots never alias."""
    key = (nbytes, slot)
    buffer = _timing_buffers.get(key)
    if buffer is None:
        buffer = np.empty(nbytes, np.uint8)
        buffer.fill(0x3c)
        _timing_buffers[key] = buffer
    return buffer


def release_timing_buffers():
    """Free the buffers timing kept (the planner calls this after each choice)."""
    _timing_buffers.clear()


cdef list time_primitive(Primitive prim, list descs, int repeats):
    """Per-execution seconds of ``prim`` on written buffers in its own layouts."""
    cdef void *handles[MAX_ARGS]
    cdef int i
    cdef double start
    if len(descs) != prim.nargs:  # handles is a C array of MAX_ARGS >= prim.nargs
        raise MXNetError(f"time_primitive: {len(descs)} buffers for {prim.impl}, which takes "
                         f"{prim.nargs}")
    buffers = [touched_bytes((<MemoryDesc>d).size + 64, i) for i, d in enumerate(descs)]
    for i in range(len(buffers)):
        handles[i] = data_ptr(buffers[i])
    prim.run(handles)  # warm-up: first touch of pages and kernel caches
    times = []
    for i in range(repeats):
        start = now()
        prim.run(handles)
        times.append(now() - start)
    return times


cdef list time_channel_loop(bint summing, const ChannelBlocks *blocks, int planned,
                            MemoryDesc tensor, MemoryDesc bias, int repeats):
    """Per-run seconds of a direct plan's bias loop (``summing`` False: dst +=
    bias) or bias-gradient loop (True: diff_bias = the sums of diff_dst), on
    ``planned``'s team."""
    # The buffers stay referenced here: another thread's planner may release
    # the timing buffers while this one runs without the GIL.
    cdef cnp.ndarray tensor_buf = touched_bytes(tensor.size + 64, 1)
    cdef cnp.ndarray bias_buf = touched_bytes(bias.size + 64, 3)
    cdef float *values = <float *>data_ptr(tensor_buf)
    cdef float *per_channel = <float *>data_ptr(bias_buf)
    cdef int threads = loop_team(planned)
    cdef double start
    cdef int i
    times = []
    for i in range(repeats + 1):  # the first: warm-up, as for primitives
        start = now()
        with nogil:
            if summing:
                sum_bias(values, per_channel, blocks, threads)
            else:
                add_bias(values, per_channel, blocks, threads)
        if i:
            times.append(now() - start)
    return times


def time_reorder(MemoryDesc src, MemoryDesc dst, int repeats=5):
    """Per-call seconds of the reorder ``src`` -> ``dst`` as a call pays it:
    the same steps as ``reordered()`` (a cache lookup, a fresh target buffer,
    the execution), on a primitive and a cache of its own so that timing
    candidates leaves this thread's cache as it was.  On small tensors the
    lookup and the allocation cost as much as the copy, and the planner must
    see that."""
    cdef LRUCache own = LRUCache(1)
    cdef void *handles[2]
    cdef cnp.ndarray source = touched_bytes(src.size + 64, 0)
    cdef cnp.ndarray target
    cdef Primitive prim
    cdef double start
    cdef int i
    # The key a call builds; omp_get_max_threads() where a call has thread_count(),
    # which would also apply a pending set_num_threads() inside the planner's
    # using_threads() block.
    own.put((src, dst, False, omp_get_max_threads()), make_reorder(src, dst, False))
    handles[0] = data_ptr(source)
    times = []
    for i in range(repeats + 1):  # the first: warm-up (first touch, kernel caches)
        start = now()
        prim = own.get((src, dst, False, omp_get_max_threads()))
        target = new_buffer(dst)
        handles[1] = data_ptr(target)
        prim.run(handles)
        if i:
            times.append(now() - start)
    return times


def bench_raw(plan, int repeats=10):
    """Per-iteration seconds of a plan's primitives with no Python work around
    them: the lower bound for the API."""
    cdef ForwardPlan fwd
    cdef BackwardDataPlan bwd_data
    cdef BackwardWeightsPlan bwd_weights
    if isinstance(plan, ForwardPlan):
        fwd = plan
        descs = [fwd.src.desc, fwd.weights.desc]
        if fwd.bias is not None and fwd.bias_fused:
            descs.append(fwd.bias.desc)
        times = time_primitive(fwd.prim, descs + [fwd.dst.desc], repeats)
        if fwd.bias_blocks.planes:
            loop = time_channel_loop(False, &fwd.bias_blocks, fwd.threads, fwd.dst.desc,
                                     fwd.bias.desc, repeats)
            times = [a + b for a, b in zip(times, loop)]
        if fwd.bias_prim is not None:
            bias_times = time_primitive(fwd.bias_prim, [fwd.dst.desc, fwd.bias.desc,
                                                        fwd.dst.desc], repeats)
            times = [a + b for a, b in zip(times, bias_times)]
        if fwd.act_prim is not None:
            act_times = time_primitive(fwd.act_prim, [fwd.dst.desc, fwd.dst.desc], repeats)
            times = [a + b for a, b in zip(times, act_times)]
        return times
    if isinstance(plan, BackwardDataPlan):
        bwd_data = plan
        return time_primitive(bwd_data.prim, [bwd_data.diff_dst.desc, bwd_data.weights.desc,
                                              bwd_data.diff_src.desc], repeats)
    bwd_weights = plan
    descs = [bwd_weights.src.desc, bwd_weights.diff_dst.desc, bwd_weights.diff_weights.desc]
    if bwd_weights.diff_bias is not None and not bwd_weights.direct:
        descs.append(bwd_weights.diff_bias.desc)
    times = time_primitive(bwd_weights.prim, descs, repeats)
    if bwd_weights.bias_blocks.planes:
        loop = time_channel_loop(True, &bwd_weights.bias_blocks, bwd_weights.threads,
                                 bwd_weights.diff_dst.desc, bwd_weights.diff_bias.desc, repeats)
        times = [a + b for a, b in zip(times, loop)]
    return times
