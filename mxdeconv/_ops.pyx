# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""The oneDNN path: the only module of mxdeconv that calls oneDNN.

It builds deconvolution primitives (forward, backward data, backward
weights+bias) from one descriptor helper, keeps them in a thread-local LRU
cache keyed by the call's signature, decides which buffers need a reorder into
the layout a primitive prefers, and executes with the GIL released.

Inputs arrive validated (see ``registry.py``/``nd.py``); everything here raises
``MXNetError`` with oneDNN's status name when oneDNN refuses something.
"""
from collections import OrderedDict
import os
import threading

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memset
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from ._dnnl cimport *
from .base import MXNetError
from .ndarray import BFLOAT16, NDArray, aligned_empty

cnp.import_array()

# ----------------------------------------------------------------------------
# Engine, per-thread stream and thread count
# ----------------------------------------------------------------------------
cdef dnnl_engine_t _engine = NULL
_tls = threading.local()
cdef int _requested_threads = 0  # 0: leave OpenMP's default (OMP_NUM_THREADS)


cdef inline int check(dnnl_status_t status, what) except -1:
    if status != dnnl_success:
        raise MXNetError(f"oneDNN {what} failed: {dnnl_status2str(status).decode()}")
    return 0


cdef dnnl_engine_t engine() except NULL:
    global _engine
    if _engine == NULL:
        check(dnnl_engine_create(&_engine, dnnl_cpu, 0), "engine creation")
    return _engine


cdef class LRUCache:
    """A bounded map with least-recently-used eviction and hit/miss counters."""
    cdef object entries
    cdef readonly long hits, misses, evictions

    def __cinit__(self):
        self.entries = OrderedDict()

    cdef object get(self, key):
        value = self.entries.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
            self.entries.move_to_end(key)
        return value

    cdef put(self, key, value):
        self.entries[key] = value
        self.trim()

    cdef trim(self):
        while len(self.entries) > _capacity:
            self.entries.popitem(last=False)
            self.evictions += 1

    def clear(self):
        self.entries.clear()

    def __len__(self):
        return len(self.entries)


def _capacity_from_env():
    value = os.environ.get("MXDECONV_PRIMITIVE_CACHE_CAPACITY", "1024")
    try:
        capacity = int(value)
    except ValueError:
        raise MXNetError(f"MXDECONV_PRIMITIVE_CACHE_CAPACITY must be an integer, got {value!r}")
    if capacity < 0:
        raise MXNetError(f"MXDECONV_PRIMITIVE_CACHE_CAPACITY must be >= 0, got {capacity}")
    return capacity


cdef Py_ssize_t _capacity = _capacity_from_env()


cdef class ThreadState:
    """What each Python thread owns: a oneDNN stream (streams are not
    thread-safe), its primitive cache and the OpenMP thread count applied."""
    cdef dnnl_stream_t stream
    cdef LRUCache cache
    cdef int threads

    def __cinit__(self):
        check(dnnl_stream_create(&self.stream, engine(), dnnl_stream_default_flags),
              "stream creation")
        self.cache = LRUCache()

    def __dealloc__(self):
        if self.stream != NULL:
            dnnl_stream_destroy(self.stream)


cdef ThreadState thread_state():
    try:
        return _tls.state
    except AttributeError:
        _tls.state = ThreadState()
        return _tls.state


cdef int thread_count(ThreadState state) except -1:
    """Apply set_num_threads() to this thread (OpenMP keeps it per thread)."""
    if _requested_threads and state.threads != _requested_threads:
        omp_set_num_threads(_requested_threads)
        state.threads = _requested_threads
    return omp_get_max_threads()


def set_num_threads(int count):
    """Use ``count`` OpenMP threads in every oneDNN call from now on."""
    global _requested_threads
    if count < 1:
        raise MXNetError(f"set_num_threads needs a count >= 1, got {count}")
    _requested_threads = count
    thread_count(thread_state())


def get_num_threads():
    """The number of OpenMP threads oneDNN calls from this thread use."""
    return thread_count(thread_state())


# ----------------------------------------------------------------------------
# Version and ISA
# ----------------------------------------------------------------------------
_ISA_NAMES = {0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0xf: "avx2_vnni",
              0x1f: "avx2_vnni_2", 0x27: "avx512_core", 0x67: "avx512_core_vnni",
              0xe7: "avx512_core_bf16", 0x1ef: "avx512_core_fp16",
              0xfef: "avx512_core_amx", 0x1fef: "avx512_core_amx_fp16"}


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
# Memory descriptors
# ----------------------------------------------------------------------------
_NP_TO_DNNL = {"float32": dnnl_f32, "float16": dnnl_f16, "bfloat16": dnnl_bf16}
_DNNL_TO_NP = {<int>dnnl_f32: "float32", <int>dnnl_f16: "float16",
               <int>dnnl_bf16: "bfloat16"}
_PLAIN_TAGS = {3: dnnl_abc, 4: dnnl_abcd, 5: dnnl_abcde}
_UNGROUPED_WEIGHT_TAGS = {3: dnnl_bac, 4: dnnl_bacd, 5: dnnl_bacde}   # iow, iohw, iodhw
_GROUPED_WEIGHT_TAGS = {4: dnnl_acbd, 5: dnnl_acbde, 6: dnnl_acbdef}  # giow, giohw, giodhw
_SPATIAL_LETTERS = {1: "w", 2: "hw", 3: "dhw"}

ROLE_DATA, ROLE_WEIGHTS, ROLE_BIAS = "data", "weights", "bias"


cdef class MemoryDesc:
    """An owned oneDNN memory descriptor with a readable layout name.

    Attributes: ``layout`` (e.g. ``"nChw16c"``), ``dims``, ``dtype``,
    ``size`` (bytes, padding included) and ``key`` (hashable, for caches).
    """
    cdef dnnl_memory_desc_t md
    cdef readonly object layout, dims, dtype, key, role
    cdef readonly size_t size
    # For a primitive's descriptor: the default layout of the NDArray bound
    # to it, and whether the two are the same (no reorder for plain arrays).
    cdef readonly bint grouped      # weights over (G, OC/G, IC/G, *k)
    cdef readonly MemoryDesc plain
    cdef readonly bint is_plain
    cdef readonly tuple plain_shape

    def __dealloc__(self):
        if self.md != NULL:
            dnnl_memory_desc_destroy(self.md)

    def __eq__(self, other):
        if not isinstance(other, MemoryDesc):
            return NotImplemented
        return bool(dnnl_memory_desc_equal(self.md, (<MemoryDesc>other).md))

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"MemoryDesc({self.layout}, dims={self.dims}, {self.dtype})"


cdef MemoryDesc wrap_md(const_dnnl_memory_desc_t src, role, bint grouped=False):
    """Clone ``src`` (owned by a primitive descriptor) into a MemoryDesc."""
    cdef MemoryDesc desc = MemoryDesc.__new__(MemoryDesc)
    check(dnnl_memory_desc_clone(&desc.md, src), "memory descriptor clone")
    cdef int ndims = 0, nblks = 0, i, dtype = 0, format_kind = 0
    cdef const dnnl_dim_t *dims = NULL
    cdef const dnnl_dim_t *strides = NULL
    cdef const dnnl_dim_t *blks = NULL
    cdef const dnnl_dim_t *idxs = NULL
    dnnl_memory_desc_query(desc.md, dnnl_query_ndims_s32, &ndims)
    dnnl_memory_desc_query(desc.md, dnnl_query_dims, &dims)
    dnnl_memory_desc_query(desc.md, dnnl_query_data_type, &dtype)
    dnnl_memory_desc_query(desc.md, dnnl_query_format_kind, &format_kind)
    desc.dims = tuple(dims[i] for i in range(ndims))
    desc.dtype = _DNNL_TO_NP.get(dtype, dnnl_dt2str(<dnnl_data_type_t>dtype).decode())
    desc.size = dnnl_memory_desc_get_size(desc.md)
    desc.role = role
    desc.grouped = grouped
    if format_kind != dnnl_blocked:  # format_tag::any: chosen by a primitive later
        desc.layout = "any"
        desc.key = ("any", desc.dims, desc.dtype, 0)
        return desc
    dnnl_memory_desc_query(desc.md, dnnl_query_strides, &strides)
    dnnl_memory_desc_query(desc.md, dnnl_query_inner_nblks_s32, &nblks)
    dnnl_memory_desc_query(desc.md, dnnl_query_inner_blks, &blks)
    dnnl_memory_desc_query(desc.md, dnnl_query_inner_idxs, &idxs)
    # Name the layout like oneDNN's tags: outer axes by decreasing stride (a
    # blocked axis upper-case), then the inner blocks, e.g. aBcd16b -> nChw16c.
    if role == ROLE_BIAS:
        letters = "x"
    elif role == ROLE_DATA:
        letters = "nc" + _SPATIAL_LETTERS[ndims - 2]
    elif grouped:
        letters = "goi" + _SPATIAL_LETTERS[ndims - 3]
    else:
        letters = "oi" + _SPATIAL_LETTERS[ndims - 2]
    blocked_axes = {idxs[i] for i in range(nblks)}
    order = sorted(range(ndims), key=lambda axis: -strides[axis])
    name = "".join(letters[a].upper() if a in blocked_axes else letters[a] for a in order)
    name += "".join(f"{blks[i]}{letters[idxs[i]]}" for i in range(nblks))
    desc.layout = name
    desc.key = (name, desc.dims, desc.dtype, desc.size)
    return desc


cdef MemoryDesc new_md(dims, dtype, dnnl_format_tag_t tag, role, bint grouped=False):
    cdef dnnl_dims_t c_dims
    cdef dnnl_memory_desc_t md = NULL
    cdef int i
    for i, d in enumerate(dims):
        c_dims[i] = d
    check(dnnl_memory_desc_create_with_tag(&md, len(dims), c_dims,
                                           _NP_TO_DNNL[dtype], tag),
          "memory descriptor creation")
    try:
        return wrap_md(md, role, grouped)
    finally:
        dnnl_memory_desc_destroy(md)


_plain_mds = {}


cpdef MemoryDesc plain_md(tuple shape, str dtype, str role, int groups=1):
    """The descriptor of an NDArray in the default layout, seen in ``role``.

    Data and bias are plain row-major.  A weight ``(C_in, OC/G, *k)`` is
    described over oneDNN's deconvolution weight dims ``(OC, IC, *k)`` or
    ``(G, OC/G, IC/G, *k)`` with tag ``iohw``/``giohw`` (and 1-D/3-D kin), so the
    user's buffer is used as is.
    """
    key = (shape, dtype, role, groups)
    cdef MemoryDesc desc = _plain_mds.get(key)
    if desc is not None:
        return desc
    if len(_plain_mds) >= max(_capacity, 64):
        # Bounded like the primitive cache; plans keep their own references.
        _plain_mds.clear()
    ndims = len(shape)
    if role == ROLE_WEIGHTS:
        in_channels, out_per_group = shape[0], shape[1]
        if groups == 1:
            desc = new_md((out_per_group, in_channels) + shape[2:], dtype,
                          _UNGROUPED_WEIGHT_TAGS[ndims], role)
        else:
            desc = new_md((groups, out_per_group, in_channels // groups) + shape[2:],
                          dtype, _GROUPED_WEIGHT_TAGS[ndims + 1], role, True)
    elif role == ROLE_BIAS:
        desc = new_md(shape, dtype, dnnl_a, role)
    else:
        desc = new_md(shape, dtype, _PLAIN_TAGS[ndims], role)
    _plain_mds[key] = desc
    return desc


cdef MemoryDesc any_md(dims, dtype, role, bint grouped=False):
    return new_md(dims, dtype, dnnl_format_tag_any, role, grouped)


cdef MemoryDesc bind_plain(MemoryDesc desc, tuple shape, int groups=1):
    """Record on a primitive's ``desc`` the default layout of arrays of ``shape``."""
    desc.plain = plain_md(shape, desc.dtype, desc.role, groups)
    desc.is_plain = desc == desc.plain
    desc.plain_shape = shape
    return desc


# ----------------------------------------------------------------------------
# Primitives and their cache
# ----------------------------------------------------------------------------
cdef enum:
    MAX_ARGS = 6


cdef class Primitive:
    """A oneDNN primitive with one memory object per execution argument.

    The memory objects are created once; each execution only swaps the data
    handles, so a cached primitive costs no allocation per call.
    """
    cdef dnnl_primitive_t prim
    cdef dnnl_exec_arg_t args[MAX_ARGS]
    cdef int nargs
    cdef readonly str impl
    cdef readonly dict descs   # execution arg id -> MemoryDesc

    def __dealloc__(self):
        cdef int i
        for i in range(self.nargs):
            if self.args[i].memory != NULL:
                dnnl_memory_destroy(self.args[i].memory)
        if self.prim != NULL:
            dnnl_primitive_destroy(self.prim)

    cdef int run(self, void **handles) except -1:
        cdef dnnl_stream_t stream = thread_state().stream
        cdef dnnl_status_t status
        cdef int i
        with nogil:
            for i in range(self.nargs):
                dnnl_memory_set_data_handle(self.args[i].memory, handles[i])
            status = dnnl_primitive_execute(self.prim, stream, self.nargs, self.args)
            if status == dnnl_success:
                status = dnnl_stream_wait(stream)
        if status != dnnl_success:
            check(status, "execution of " + self.impl)
        return 0


cdef Primitive make_primitive(dnnl_primitive_desc_t pd, list arg_specs):
    """Create the primitive of ``pd``; ``arg_specs`` = [(arg id, query, role, grouped)].

    Takes ownership of ``pd`` (destroyed here once the primitive exists).
    """
    cdef Primitive p = Primitive.__new__(Primitive)
    cdef const char *impl = NULL
    cdef const_dnnl_memory_desc_t md
    try:
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl)
        p.impl = impl.decode() if impl != NULL else "?"
        p.descs = {}
        for arg, query, role, grouped in arg_specs:
            md = dnnl_primitive_desc_query_md(pd, <dnnl_query_t>query,
                                              1 if arg == DNNL_ARG_BIAS or arg == DNNL_ARG_DIFF_BIAS else 0)
            if md == NULL:
                raise MXNetError(f"oneDNN {p.impl} has no memory descriptor for argument {arg}")
            p.descs[arg] = wrap_md(md, role, grouped)
            p.args[p.nargs].arg = arg
            check(dnnl_memory_create(&p.args[p.nargs].memory, md, engine(), DNNL_MEMORY_NONE),
                  "memory creation")
            p.nargs += 1
        check(dnnl_primitive_create(&p.prim, pd), "primitive creation")
    finally:
        dnnl_primitive_desc_destroy(pd)
    return p


cdef LRUCache thread_cache():
    return thread_state().cache


def set_cache_capacity(Py_ssize_t capacity):
    """Bound every thread's primitive cache to ``capacity`` entries (0 disables it)."""
    global _capacity
    if capacity < 0:
        raise MXNetError(f"cache capacity must be >= 0, got {capacity}")
    _capacity = capacity
    thread_cache().trim()


def cache_info():
    """This thread's primitive cache: size, capacity, hits, misses, evictions."""
    cdef LRUCache cache = thread_cache()
    return {"size": len(cache), "capacity": _capacity, "hits": cache.hits,
            "misses": cache.misses, "evictions": cache.evictions}


def clear_cache():
    """Empty this thread's primitive cache (counters are kept)."""
    thread_cache().clear()
    _plain_mds.clear()


# ----------------------------------------------------------------------------
# Reorders
# ----------------------------------------------------------------------------
cdef Primitive reorder_primitive(MemoryDesc src, MemoryDesc dst, bint accumulate):
    key = ("reorder", src.key, dst.key, accumulate)
    cdef LRUCache cache = thread_cache()
    cdef Primitive prim = cache.get(key)
    if prim is not None:
        return prim
    cdef dnnl_primitive_attr_t attr = NULL
    cdef dnnl_post_ops_t post_ops = NULL
    cdef dnnl_primitive_desc_t pd = NULL
    try:
        if accumulate:  # dst += reorder(src): MXNet's req=kAddTo in one pass
            check(dnnl_primitive_attr_create(&attr), "attribute creation")
            check(dnnl_post_ops_create(&post_ops), "post-op creation")
            check(dnnl_post_ops_append_sum(post_ops, 1.0, 0, dnnl_data_type_undef),
                  "sum post-op")
            check(dnnl_primitive_attr_set_post_ops(attr, post_ops), "post-op attribute")
        check(dnnl_reorder_primitive_desc_create(&pd, src.md, engine(), dst.md, engine(), attr),
              f"reorder {src.layout} -> {dst.layout}")
    finally:
        if post_ops != NULL:
            dnnl_post_ops_destroy(post_ops)
        if attr != NULL:
            dnnl_primitive_attr_destroy(attr)
    prim = make_primitive(pd, [(DNNL_ARG_FROM, dnnl_query_src_md, src.role, src.grouped),
                               (DNNL_ARG_TO, dnnl_query_dst_md, dst.role, dst.grouped)])
    cache.put(key, prim)
    return prim


cdef inline void *data_ptr(cnp.ndarray buffer):
    return cnp.PyArray_DATA(buffer)


cdef int run_reorder(MemoryDesc src, cnp.ndarray src_buf, MemoryDesc dst,
                     cnp.ndarray dst_buf, bint accumulate, str role) except -1:
    cdef void *handles[2]
    handles[0] = data_ptr(src_buf)
    handles[1] = data_ptr(dst_buf)
    reorder_primitive(src, dst, accumulate).run(handles)
    _reorders[role] = _reorders.get(role, 0) + 1
    return 0


def reorder_to_plain(MemoryDesc src, cnp.ndarray src_buf, cnp.ndarray plain):
    """Reorder a blocked buffer into the default layout ``plain`` (same shape)."""
    cdef MemoryDesc target = src.plain
    if target is None:
        shape = tuple((<object>plain).shape)
        groups = src.dims[0] if src.grouped else 1
        target = plain_md(shape, src.dtype, src.role, groups)
    run_reorder(src, src_buf, target, plain, False, "to_default")


# ----------------------------------------------------------------------------
# Deconvolution descriptors: the one place that describes a deconvolution
# ----------------------------------------------------------------------------
cdef enum Pass:
    PASS_FORWARD, PASS_BACKWARD_DATA, PASS_BACKWARD_WEIGHTS


cdef class Geometry:
    """oneDNN's view of one DeconvGeometry: dims, strides, dilations, paddings."""
    cdef dnnl_dims_t strides, dilates, pad_l, pad_r
    cdef readonly tuple src_dims, weight_dims, bias_dims, dst_dims
    cdef readonly tuple data_shape, weight_shape   # the NDArrays' (MXNet) shapes
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
        groups = param.num_group
        in_channels = geom.data_shape[1]
        out_per_group = param.num_filter // groups
        g.groups = groups
        g.grouped = groups > 1
        g.data_shape = geom.data_shape
        g.weight_shape = geom.weight_shape
        g.src_dims = geom.data_shape
        g.dst_dims = geom.out_shape
        if g.grouped:
            g.weight_dims = (groups, out_per_group, in_channels // groups) + param.kernel
        else:
            g.weight_dims = (out_per_group, in_channels) + param.kernel
        g.has_bias = not param.no_bias
        g.bias_dims = (param.num_filter,)
        g.dtype = dtype
        return g


cdef dnnl_primitive_desc_t deconv_pd(Geometry g, Pass which, dnnl_prop_kind_t prop,
                                     MemoryDesc src, MemoryDesc weights, MemoryDesc dst,
                                     const_dnnl_primitive_desc_t hint,
                                     const_dnnl_primitive_attr_t attr) except NULL:
    """A primitive descriptor for one pass; ``src``/``weights``/``dst`` are the
    (diff_)src, (diff_)weights and (diff_)dst descriptors of that pass."""
    cdef dnnl_primitive_desc_t pd = NULL
    cdef MemoryDesc bias = any_md(g.bias_dims, g.dtype, ROLE_BIAS) if g.has_bias else None
    cdef const_dnnl_memory_desc_t bias_md = bias.md if bias is not None else NULL
    cdef dnnl_status_t status
    if which == PASS_FORWARD:
        status = dnnl_deconvolution_forward_primitive_desc_create(
            &pd, engine(), prop, dnnl_deconvolution_direct, src.md, weights.md, bias_md,
            dst.md, g.strides, g.dilates, g.pad_l, g.pad_r, attr)
    elif which == PASS_BACKWARD_DATA:
        status = dnnl_deconvolution_backward_data_primitive_desc_create(
            &pd, engine(), dnnl_deconvolution_direct, src.md, weights.md, dst.md,
            g.strides, g.dilates, g.pad_l, g.pad_r, hint, attr)
    else:
        status = dnnl_deconvolution_backward_weights_primitive_desc_create(
            &pd, engine(), dnnl_deconvolution_direct, src.md, weights.md, bias_md,
            dst.md, g.strides, g.dilates, g.pad_l, g.pad_r, hint, attr)
    check(status, f"deconvolution descriptor ({_PASS_NAMES[which]}, src {g.src_dims}, "
                  f"weights {g.weight_dims}, dst {g.dst_dims})")
    return pd


_PASS_NAMES = {PASS_FORWARD: "forward", PASS_BACKWARD_DATA: "backward data",
               PASS_BACKWARD_WEIGHTS: "backward weights"}


cdef class ForwardPlan:
    cdef readonly Primitive prim
    cdef readonly MemoryDesc src, weights, bias, dst

    def __init__(self, Geometry g, bint training, bint accumulate):
        cdef dnnl_primitive_attr_t attr = NULL
        cdef dnnl_post_ops_t post_ops = NULL
        cdef dnnl_primitive_desc_t pd
        try:
            if accumulate:  # req=add: dst = dst + deconv(src), fused
                check(dnnl_primitive_attr_create(&attr), "attribute creation")
                check(dnnl_post_ops_create(&post_ops), "post-op creation")
                check(dnnl_post_ops_append_sum(post_ops, 1.0, 0, dnnl_data_type_undef),
                      "sum post-op")
                check(dnnl_primitive_attr_set_post_ops(attr, post_ops), "post-op attribute")
            pd = deconv_pd(g, PASS_FORWARD,
                           dnnl_forward_training if training else dnnl_forward_inference,
                           any_md(g.src_dims, g.dtype, ROLE_DATA),
                           any_md(g.weight_dims, g.dtype, ROLE_WEIGHTS, g.grouped),
                           any_md(g.dst_dims, g.dtype, ROLE_DATA), NULL, attr)
        finally:
            if post_ops != NULL:
                dnnl_post_ops_destroy(post_ops)
            if attr != NULL:
                dnnl_primitive_attr_destroy(attr)
        specs = [(DNNL_ARG_SRC, dnnl_query_src_md, ROLE_DATA, False),
                 (DNNL_ARG_WEIGHTS, dnnl_query_weights_md, ROLE_WEIGHTS, g.grouped)]
        if g.has_bias:
            specs.append((DNNL_ARG_BIAS, dnnl_query_weights_md, ROLE_BIAS, False))
        specs.append((DNNL_ARG_DST, dnnl_query_dst_md, ROLE_DATA, False))
        self.prim = make_primitive(pd, specs)
        self.src = bind_plain(self.prim.descs[DNNL_ARG_SRC], g.data_shape)
        self.weights = bind_plain(self.prim.descs[DNNL_ARG_WEIGHTS], g.weight_shape,
                                  g.groups)
        self.bias = self.prim.descs.get(DNNL_ARG_BIAS)
        if self.bias is not None:
            bind_plain(self.bias, g.bias_dims)
        self.dst = bind_plain(self.prim.descs[DNNL_ARG_DST], g.dst_dims)


cdef bytes impl_name(const_dnnl_primitive_desc_t pd):
    """The kernel oneDNN chose for ``pd`` (e.g. ``b"brg_conv:avx512_core"``)."""
    cdef const char *impl = NULL
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl)
    return b"" if impl == NULL else <bytes>impl


cdef class BackwardPlan:
    """Backward data and backward weights(+bias), sharing one diff_dst layout
    where that costs neither pass its kernel."""
    cdef readonly Primitive data_prim, weights_prim
    cdef readonly MemoryDesc diff_dst, weights, diff_src, src, diff_weights, diff_bias
    cdef readonly bint shares_diff_dst  # one out_grad reorder serves both passes

    def __init__(self, Geometry g):
        cdef dnnl_primitive_desc_t hint = deconv_pd(
            g, PASS_FORWARD, dnnl_forward_training,
            any_md(g.src_dims, g.dtype, ROLE_DATA),
            any_md(g.weight_dims, g.dtype, ROLE_WEIGHTS, g.grouped),
            any_md(g.dst_dims, g.dtype, ROLE_DATA), NULL, NULL)
        cdef dnnl_primitive_desc_t pd_data = NULL, pd_weights = NULL, pd_shared = NULL
        weights_specs = [
            (DNNL_ARG_SRC, dnnl_query_src_md, ROLE_DATA, False),
            (DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, ROLE_DATA, False),
            (DNNL_ARG_DIFF_WEIGHTS, dnnl_query_diff_weights_md, ROLE_WEIGHTS, g.grouped)]
        if g.has_bias:
            weights_specs.append((DNNL_ARG_DIFF_BIAS, dnnl_query_diff_weights_md,
                                  ROLE_BIAS, False))
        try:
            # Each pass picks its layouts freely: a layout forced on one pass can
            # cost it its fast kernel (backward weights with a blocked diff_dst is
            # left with the reference kernel).
            pd_weights = deconv_pd(g, PASS_BACKWARD_WEIGHTS, dnnl_backward_weights,
                                   any_md(g.src_dims, g.dtype, ROLE_DATA),
                                   any_md(g.weight_dims, g.dtype, ROLE_WEIGHTS, g.grouped),
                                   any_md(g.dst_dims, g.dtype, ROLE_DATA), hint, NULL)
            self.weights_prim = make_primitive(pd_weights, weights_specs)
            weights_diff_dst = self.weights_prim.descs[DNNL_ARG_DIFF_DST]
            pd_data = deconv_pd(g, PASS_BACKWARD_DATA, dnnl_backward_data,
                                any_md(g.src_dims, g.dtype, ROLE_DATA),
                                any_md(g.weight_dims, g.dtype, ROLE_WEIGHTS, g.grouped),
                                any_md(g.dst_dims, g.dtype, ROLE_DATA), hint, NULL)
            # Then backward data reads out_grad in backward weights' layout, so
            # one reorder serves both, if the same kernel accepts that layout.
            try:
                pd_shared = deconv_pd(g, PASS_BACKWARD_DATA, dnnl_backward_data,
                                      any_md(g.src_dims, g.dtype, ROLE_DATA),
                                      any_md(g.weight_dims, g.dtype, ROLE_WEIGHTS, g.grouped),
                                      weights_diff_dst, hint, NULL)
            except MXNetError:
                pd_shared = NULL
            if pd_shared != NULL and impl_name(pd_shared) == impl_name(pd_data):
                dnnl_primitive_desc_destroy(pd_data)
                pd_data, pd_shared = pd_shared, NULL
            self.data_prim = make_primitive(pd_data, [
                (DNNL_ARG_DIFF_DST, dnnl_query_diff_dst_md, ROLE_DATA, False),
                (DNNL_ARG_WEIGHTS, dnnl_query_weights_md, ROLE_WEIGHTS, g.grouped),
                (DNNL_ARG_DIFF_SRC, dnnl_query_diff_src_md, ROLE_DATA, False)])
            pd_data = NULL  # owned (and destroyed) by make_primitive
            self.diff_dst = self.data_prim.descs[DNNL_ARG_DIFF_DST]
        finally:
            if pd_shared != NULL:
                dnnl_primitive_desc_destroy(pd_shared)
            dnnl_primitive_desc_destroy(hint)
        bind_plain(self.diff_dst, g.dst_dims)
        bind_plain(self.weights_prim.descs[DNNL_ARG_DIFF_DST], g.dst_dims)
        self.weights = bind_plain(self.data_prim.descs[DNNL_ARG_WEIGHTS], g.weight_shape,
                                  g.groups)
        self.diff_src = bind_plain(self.data_prim.descs[DNNL_ARG_DIFF_SRC], g.data_shape)
        self.src = bind_plain(self.weights_prim.descs[DNNL_ARG_SRC], g.data_shape)
        self.diff_weights = bind_plain(self.weights_prim.descs[DNNL_ARG_DIFF_WEIGHTS],
                                       g.weight_shape, g.groups)
        self.diff_bias = self.weights_prim.descs.get(DNNL_ARG_DIFF_BIAS)
        self.shares_diff_dst = self.weights_prim.descs[DNNL_ARG_DIFF_DST] == self.diff_dst
        if self.diff_bias is not None:
            bind_plain(self.diff_bias, g.bias_dims)



cdef object cached_plan(kind, geom, str dtype, tuple flags):
    cdef ThreadState state = thread_state()
    # The thread count is part of the key: oneDNN's OpenMP kernels are planned
    # for the number of threads present when they are created.
    key = (kind, geom, dtype, flags, thread_count(state))
    cdef LRUCache cache = state.cache
    plan = cache.get(key)
    if plan is None:
        g = Geometry.of(geom, dtype)
        plan = ForwardPlan(g, *flags) if kind == "forward" else BackwardPlan(g)
        cache.put(key, plan)
    return plan


def forward_plan(geom, str dtype, bint training, bint accumulate=False):
    """The cached forward plan of ``geom`` (created on the first call)."""
    return cached_plan("forward", geom, dtype, (training, accumulate))


def backward_plan(geom, str dtype):
    """The cached backward plan of ``geom`` (created on the first call)."""
    return cached_plan("backward", geom, dtype, ())


# ----------------------------------------------------------------------------
# Moving NDArrays into the layouts primitives want
# ----------------------------------------------------------------------------
cdef MemoryDesc current_md(arr, MemoryDesc wanted):
    """The descriptor of ``arr``'s buffer as it is now (``wanted.plain`` if plain).

    A blocked array whose logical dims differ from ``wanted`` (a weight seen
    with another group count) is first turned back into the default layout.
    """
    cdef MemoryDesc desc = arr._desc
    if desc is not None:
        if desc.dims == wanted.dims:
            return desc
        arr.reorder_to_default()
    return wanted.plain


cdef size_t ALIGNMENT = 64


cdef cnp.ndarray new_buffer(MemoryDesc desc):
    """Uninitialised bytes for ``desc``, 64-byte aligned like oneDNN's own."""
    cdef cnp.npy_intp count = desc.size + ALIGNMENT
    cdef cnp.ndarray raw = cnp.PyArray_EMPTY(1, &count, cnp.NPY_UINT8, 0)
    cdef size_t offset = (ALIGNMENT - (<size_t>cnp.PyArray_DATA(raw)) % ALIGNMENT) % ALIGNMENT
    return raw[offset:offset + desc.size]


cdef cnp.ndarray in_layout(arr, MemoryDesc wanted, str label):
    """``arr``'s buffer in layout ``wanted``: its own, or a reordered temporary
    (counted under ``label`` in reorder_counts())."""
    if arr._desc is None and wanted.is_plain:
        return arr._buffer
    cdef MemoryDesc have = current_md(arr, wanted)
    if have is wanted or have == wanted:
        return arr._buffer
    cdef cnp.ndarray temp = new_buffer(wanted)
    run_reorder(have, arr._buffer, wanted, temp, False, label)
    return temp


cdef object plain_view(cnp.ndarray buffer, MemoryDesc desc):
    """The bytes of a default-layout ``desc`` as a typed array of the NDArray shape."""
    return buffer.view(desc.dtype).reshape(desc.plain_shape)


cdef cnp.ndarray weight_buffer(weight, MemoryDesc wanted, bint training):
    """Inference keeps the weight in the primitive's layout after the first
    reorder (MXNet's MKLDNNDataReorderAsync); training leaves the NDArray in the
    default layout so optimizer code sees plain memory (Reorder2DefaultAsync)."""
    if training:
        if weight._desc is not None:
            weight.reorder_to_default()
        return in_layout(weight, wanted, "weights")
    buffer = in_layout(weight, wanted, "weights")
    if buffer is not weight._buffer:
        if wanted.is_plain:
            weight._adopt(plain_view(buffer, wanted), None)
        else:
            weight._adopt(buffer, wanted)
    return buffer


cdef class Output:
    """Where a primitive writes one result, and how it reaches its target.

    With no target array the primitive writes a fresh buffer in its preferred
    layout (or, for ``plain`` results such as weight gradients, a default-layout
    array).  With a target in the primitive's layout it writes in place (for
    req=add only when the primitive itself accumulates).  Otherwise it writes a
    temporary that a reorder then writes or adds into the target.
    """
    cdef object target
    cdef cnp.ndarray buffer
    cdef MemoryDesc desc, target_desc
    cdef bint accumulate, finish


cdef Output make_output(MemoryDesc desc, target, bint accumulate, bint fused_accumulate,
                        bint plain):
    cdef Output o = Output.__new__(Output)
    o.desc, o.target, o.accumulate, o.finish = desc, target, accumulate, False
    if target is None:
        if not plain or desc.is_plain:
            o.buffer = new_buffer(desc)
            return o
        o.target = NDArray(aligned_empty(desc.plain_shape, desc.dtype))
    o.target_desc = current_md(o.target, desc)
    if (o.target_desc is desc or o.target_desc == desc) and (fused_accumulate or not accumulate):
        o.buffer = o.target._buffer
        return o
    o.buffer = new_buffer(desc)
    o.finish = True
    if accumulate and fused_accumulate:  # the primitive adds onto dst: seed it
        run_reorder(o.target_desc, o.target._buffer, desc, o.buffer, False, "out")
        o.accumulate = False
    return o


cdef object finish_output(Output o):
    """The result NDArray, after the reorder into its target if one is due."""
    if o.finish:
        run_reorder(o.desc, o.buffer, o.target_desc, o.target._buffer, o.accumulate, "out")
    if o.target is not None:
        return o.target
    if o.desc.is_plain:
        return NDArray(plain_view(o.buffer, o.desc))
    return NDArray(o.buffer, o.desc, o.desc.plain_shape)


_DTYPE_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}
if BFLOAT16 is not None:
    _DTYPE_NAMES[BFLOAT16] = "bfloat16"


def deconv_forward(geom, data, weight, bias, out, bint accumulate, bint training):
    """Run the forward pass; returns ``out`` or a new NDArray (maybe blocked)."""
    cdef ForwardPlan plan = forward_plan(geom, _DTYPE_NAMES[data._dtype], training,
                                         accumulate)
    cdef void *handles[4]
    cdef int n = 0
    # Every buffer stays in a local until run(): a temporary must outlive the
    # execution that reads it.
    src = in_layout(data, plan.src, "data")
    wei = weight_buffer(weight, plan.weights, training)
    cdef Output dst = make_output(plan.dst, out, accumulate, True, False)
    handles[n] = data_ptr(src); n += 1
    handles[n] = data_ptr(wei); n += 1
    if plan.bias is not None:
        bias_buf = in_layout(bias, plan.bias, "bias")
        handles[n] = data_ptr(bias_buf); n += 1
    handles[n] = data_ptr(dst.buffer)
    plan.prim.run(handles)
    return finish_output(dst)


def deconv_backward(geom, out_grad, data, weight, tuple grads, tuple accumulate,
                    tuple needed):
    """Run the backward passes; returns ``(data_grad, weight_grad, bias_grad)``.

    ``grads`` holds target arrays (or None), ``accumulate`` and ``needed``
    one flag per gradient.  Backward primitives take no sum post-op, so req=add
    goes through a temporary that a reorder with a sum post-op adds in.
    """
    cdef BackwardPlan plan = backward_plan(geom, _DTYPE_NAMES[data._dtype])
    cdef void *handles[4]
    cdef Output diff_src, diff_weights, diff_bias
    results = [None, None, None]
    diff_dst = in_layout(out_grad, plan.diff_dst, "out_grad")
    if needed[0]:
        if weight._desc is not None:
            weight.reorder_to_default()
        diff_src = make_output(plan.diff_src, grads[0], accumulate[0], False, False)
        weight_buf = in_layout(weight, plan.weights, "weights")
        handles[0] = data_ptr(diff_dst)
        handles[1] = data_ptr(weight_buf)
        handles[2] = data_ptr(diff_src.buffer)
        plan.data_prim.run(handles)
        results[0] = finish_output(diff_src)
    if needed[1] or needed[2]:
        diff_weights = make_output(plan.diff_weights, grads[1] if needed[1] else None,
                                   accumulate[1], False, needed[1])
        src_buf = in_layout(data, plan.src, "data")
        if not plan.shares_diff_dst:
            diff_dst = in_layout(out_grad, plan.weights_prim.descs[DNNL_ARG_DIFF_DST],
                                 "out_grad")
        handles[0] = data_ptr(src_buf)
        handles[1] = data_ptr(diff_dst)
        handles[2] = data_ptr(diff_weights.buffer)
        if plan.diff_bias is not None:
            diff_bias = make_output(plan.diff_bias, grads[2] if needed[2] else None,
                                    accumulate[2], False, True)
            handles[3] = data_ptr(diff_bias.buffer)
        plan.weights_prim.run(handles)
        if needed[1]:
            results[1] = finish_output(diff_weights)
        if needed[2] and plan.diff_bias is not None:
            results[2] = finish_output(diff_bias)
    return tuple(results)


# ----------------------------------------------------------------------------
# Benchmark hook: the primitives alone, in a C loop
# ----------------------------------------------------------------------------
cdef double now() nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef list time_primitive(Primitive prim, int repeats):
    """Per-execution seconds of ``prim`` on zeroed buffers in its own layouts."""
    cdef void *handles[MAX_ARGS]
    cdef int i
    cdef double start
    buffers = []
    for i in range(prim.nargs):
        buffers.append(np.zeros(prim.descs[prim.args[i].arg].size + 64, np.uint8))
        handles[i] = data_ptr(buffers[i])
    prim.run(handles)  # warm-up: first touch of pages and kernel caches
    times = []
    for i in range(repeats):
        start = now()
        prim.run(handles)
        times.append(now() - start)
    return times


def bench_raw(geom, str kind, bint training=True, int repeats=10):
    """Per-iteration seconds of the cached primitives with no Python work around
    them: the lower bound for the API (``kind``: forward, backward_data,
    backward_weights)."""
    if kind == "forward":
        return time_primitive(forward_plan(geom, "float32", training).prim, repeats)
    cdef BackwardPlan plan = backward_plan(geom, "float32")
    if kind == "backward_data":
        return time_primitive(plan.data_prim, repeats)
    if kind == "backward_weights":
        return time_primitive(plan.weights_prim, repeats)
    raise MXNetError(f"unknown benchmark kind {kind!r}")


def plan_info(geom, str dtype="float32", bint training=True):
    """Implementation names and layouts oneDNN chose for ``geom`` (for explain())."""
    cdef ForwardPlan fwd = forward_plan(geom, dtype, training)
    return {"forward_impl": fwd.prim.impl, "src": fwd.src.layout,
            "weights": fwd.weights.layout, "dst": fwd.dst.layout}
