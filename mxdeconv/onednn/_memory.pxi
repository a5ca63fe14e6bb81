# Included by _ops.pyx (one module, textual include): memory descriptors
# (MemoryDesc), tensor layouts (Layout) and the buffers that hold them.

# ----------------------------------------------------------------------------
# Memory descriptors and tensor layouts
# ----------------------------------------------------------------------------
# int8: only the source of the plan-time check's reorders (its exact inputs).
_NP_TO_DNNL = {"float32": dnnl_f32, "float16": dnnl_f16, "bfloat16": dnnl_bf16,
               "int8": dnnl_s8}
_DNNL_TO_NP = {<int>dnnl_f32: "float32", <int>dnnl_f16: "float16",
               <int>dnnl_bf16: "bfloat16", <int>dnnl_s8: "int8"}
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
    if len(dims) > DNNL_MAX_NDIMS:  # c_dims holds DNNL_MAX_NDIMS entries
        raise MXNetError(f"{role}: {len(dims)} dimensions {tuple(dims)}, oneDNN takes at "
                         f"most {DNNL_MAX_NDIMS}")
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

    def from_plain(self, values):
        """A new buffer holding default-layout ``values`` in this layout."""
        return from_plain(self, values)

    def take(self, cnp.ndarray buffer, tuple index):
        """``to_plain(buffer)[index]`` (``index``: one integer array per axis of
        ``shape``, broadcast together), read where the elements lie: a sampled
        check's few elements without a reorder of the whole tensor.  Data and
        bias only: their oneDNN axes are their NDArray's (a weight's are not)."""
        if self.role == ROLE_WEIGHTS:
            raise MXNetError(f"Layout.take: a {self.role} layout's axes are not its "
                             f"NDArray's, got {self.name} of shape {self.shape}")
        if len(index) != len(self.shape):
            raise MXNetError(f"Layout.take: index must have one array per axis of "
                             f"{self.shape}, got {len(index)}")
        if not buffer.flags.c_contiguous or buffer.nbytes != self.desc.size:
            raise MXNetError(f"Layout.take: buffer must be the {self.desc.size} contiguous "
                             f"bytes of a {self.name} tensor {self.shape}, got "
                             f"{buffer.nbytes} bytes (contiguous: "
                             f"{bool(buffer.flags.c_contiguous)})")
        flat = buffer.reshape(-1).view(self.np_dtype)
        return flat[self.element_offsets(index)]

    cdef object element_offsets(self, tuple index):
        """Each element's offset in a buffer of this layout, as oneDNN's
        ``memory_desc_wrapper::off_v`` computes it: the inner blocks' positions
        (innermost fastest), then every axis' outer index times its stride."""
        cdef const_dnnl_memory_desc_t md = self.desc.md
        cdef int ndims = 0, nblks = 0, kind = 0, axis, b
        cdef const dnnl_dim_t *strides = NULL
        cdef const dnnl_dim_t *blks = NULL
        cdef const dnnl_dim_t *idxs = NULL
        cdef const dnnl_dim_t *padded_offsets = NULL
        cdef dnnl_dim_t offset0 = 0, block_stride = 1
        md_query(md, dnnl_query_ndims_s32, &ndims)
        md_query(md, dnnl_query_format_kind, &kind)
        if kind != dnnl_blocked or ndims != len(index):
            raise MXNetError(f"Layout.take: {self.name} is not a blocked layout of "
                             f"{len(index)} axes")
        md_query(md, dnnl_query_strides, &strides)
        md_query(md, dnnl_query_inner_nblks_s32, &nblks)
        md_query(md, dnnl_query_inner_blks, &blks)
        md_query(md, dnnl_query_inner_idxs, &idxs)
        md_query(md, dnnl_query_padded_offsets, &padded_offsets)
        md_query(md, dnnl_query_submemory_offset_s64, &offset0)
        positions = [np.asarray(i) for i in index]
        for axis in range(ndims):
            if positions[axis].dtype.kind not in "iu":
                raise TypeError(f"Layout.take: index for axis {axis} must hold integers, "
                                f"got {positions[axis].dtype}")
            positions[axis] = positions[axis].astype(np.int64)
            if positions[axis].size and (positions[axis].min() < 0 or
                                         positions[axis].max() >= self.shape[axis]):
                raise MXNetError(f"Layout.take: index out of range for axis {axis} of "
                                 f"{self.shape}")
            positions[axis] = positions[axis] + padded_offsets[axis]
        offsets = np.int64(offset0)
        for b in range(nblks - 1, -1, -1):
            axis = idxs[b]
            offsets = offsets + (positions[axis] % blks[b]) * block_stride
            positions[axis] = positions[axis] // blks[b]
            block_stride *= blks[b]
        for axis in range(ndims):
            offsets = offsets + positions[axis] * strides[axis]
        return offsets


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


# -- the plan-time check's buffers --------------------------------------------------
#: Bytes of 0xFF (a NaN in every float dtype) on either side of each tensor of
#: a check run.  oneDNN 3.2's jit_bf16 backward weights read past their
#: tensors on some degenerate layers (taps that meet only padding): with
#: whatever memory lay there, such a kernel agreed with the check one run and
#: not the next.
GUARD_BYTES = 4096


cdef cnp.ndarray guarded_buffer(Py_ssize_t size, bint poison):
    """``size`` bytes between two guard zones of GUARD_BYTES of 0xFF (all of
    them 0xFF when ``poison``: an output element a kernel leaves unwritten is
    then a NaN, not the right value by chance).  A kernel that reads past its
    tensors reads NaNs, whatever memory surrounds them."""
    cdef cnp.ndarray block = aligned_bytes(size + 2 * GUARD_BYTES)
    if poison:
        block.fill(0xFF)
    else:
        block[:GUARD_BYTES] = 0xFF
        block[GUARD_BYTES + size:] = 0xFF
    return block[GUARD_BYTES:GUARD_BYTES + size]


cdef cnp.ndarray guarded_from_plain(Layout wanted, values):
    """``from_plain`` into a guarded buffer.  The check's exact inputs come as
    int8 (small integers): converted as they are copied or reordered, never
    first widened into a float32 copy of their own (a big layer's weight:
    2 MB read instead of 8 MB written and read again)."""
    cdef cnp.ndarray out = guarded_buffer(wanted.desc.size, False)
    if wanted.is_plain:
        out.view(wanted.np_dtype).reshape(np.shape(values))[...] = values
        return out
    if isinstance(values, np.ndarray) and values.dtype == np.int8 and \
            wanted.np_dtype == np.float32:
        integers = np.ascontiguousarray(values)
        try:
            source = plain_md(wanted.shape, "int8", wanted.role, wanted.groups)
            run_reorder(source, integers, wanted.desc, out, False, None)
            return out
        except MXNetError:
            pass  # no int8 reorder into this layout: widen first, as for any input
    run_reorder(wanted.plain, np.ascontiguousarray(values, dtype=wanted.np_dtype),
                wanted.desc, out, False, None)
    return out


cdef bint _all_ff(const unsigned char *bytes, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(count):
        if bytes[i] != 0xFF:
            return False
    return True


cdef int check_guards(str what, tuple buffers) except -1:
    """Raise MXNetError if a kernel wrote into the guard zones around
    ``buffers`` (guarded_buffer's; None ignored): the GUARD_BYTES before each
    one's first byte and after its last, of the same allocation."""
    cdef const unsigned char *start
    cdef Py_ssize_t guard = GUARD_BYTES, size
    for buffer in buffers:
        if buffer is None:
            continue
        start = <const unsigned char *>data_ptr(<cnp.ndarray>buffer)
        size = buffer.nbytes
        if not (_all_ff(start - guard, guard) and _all_ff(start + size, guard)):
            raise MXNetError(f"{what}: the kernel wrote outside its tensors")
    return 0


cdef cnp.ndarray new_plain_array(Layout layout):
    """An uninitialised default-layout array of ``layout``'s tensor (NDArray
    shape and dtype), 64-byte aligned."""
    return aligned_array(layout.shape, <cnp.dtype>layout.np_dtype, layout.plain.size)


cdef object plain_view(cnp.ndarray buffer, Layout layout):
    """The bytes of a default-layout buffer as a typed array of the NDArray shape."""
    return buffer.view(layout.np_dtype).reshape(layout.shape)
