# Included by _ops.pyx (one module, textual include): plans onto the output
# sub-grid of a layer whose stride and dilation share a factor
# (semantics/subgrid.py): oneDNN's kernels for the sub-grid's layer (stride and
# dilation divided by that factor; stride 1 on the benchmark's dilated layer,
# where oneDNN's kernels are its best tuned), and mxdeconv's loops moving
# pixels between the sub-grid and the full tensor.

# ----------------------------------------------------------------------------
# Moving pixels between the sub-grid and the full tensor
# ----------------------------------------------------------------------------
#: The prefix of the sub-grid plans' names and of their variants' direct
#: prefix: what follows is the sub-grid layer's candidate's.
SUBGRID = "subgrid+"

#: How many of the sub-grid layer's candidates (oneDNN's first ones on it) a
#: pass offers: each lengthens the tuning of the layers that have a sub-grid.
SUBGRID_CANDIDATES = 3

#: The layout families the loops walk, both tensors in the same one.
_WALKED_FAMILIES = ("blocked16", "blocked8", "channels_last", "plain")


cdef SubGridWalk subgrid_walk(MemoryDesc full, ChannelBlocks blocks, sub) except *:
    """The loops' view of ``full`` (an f32 data tensor in one of
    _WALKED_FAMILIES, ``blocks`` its channel_blocks) and of its sub-grid ``sub``
    (a SubGrid) in the same layout: 1-D and 2-D padded to 3-D."""
    cdef SubGridWalk w
    cdef int axis, lead
    dims, sub_dims = full.dims, sub.geom.out_shape
    ndim = len(dims) - 2
    lead = 3 - ndim
    for axis in range(3):
        w.out_size[axis] = w.sub_size[axis] = w.step[axis] = 1
        w.first[axis] = 0
    for axis in range(ndim):
        w.out_size[lead + axis] = dims[2 + axis]
        w.sub_size[lead + axis] = sub_dims[2 + axis]
        w.step[lead + axis] = sub.step[axis]
        w.first[lead + axis] = sub.first[axis]
    # A plane per image and channel block (nhwc: one block of every channel).
    w.blocks, w.width, w.channels = blocks.blocks, blocks.width, blocks.channels
    w.planes = dims[0] * blocks.blocks
    return w


cdef inline void fill_pixels(float *row, const float *fill, Py_ssize_t pixels,
                             Py_ssize_t width) noexcept nogil:
    cdef Py_ssize_t p, j
    if width == 1:
        for p in range(pixels):
            row[p] = fill[0]
        return
    for p in range(pixels):
        for j in range(width):
            row[j] = fill[j]
        row += width


cdef inline bint on_grid(Py_ssize_t pixel, const SubGridWalk *w, int axis,
                         Py_ssize_t *t) noexcept nogil:
    """Whether full ``pixel`` of ``axis`` is on the sub-grid, at sub-grid pixel t."""
    cdef Py_ssize_t offset = pixel - w.first[axis]
    if offset < 0 or offset % w.step[axis]:
        return False
    t[0] = offset // w.step[axis]
    return t[0] < w.sub_size[axis]


cdef inline void scatter_row(const float *sub, float *full, const float *fill,
                             const SubGridWalk *w, Py_ssize_t unit) noexcept nogil:
    """Row ``unit`` (plane, o0, o1) of the full tensor: filled, then its
    sub-grid pixels copied over it while it is in cache."""
    cdef Py_ssize_t n1 = w.out_size[1], n2 = w.out_size[2], width = w.width
    cdef Py_ssize_t rows = w.out_size[0] * n1, plane = unit // rows
    cdef Py_ssize_t t0, t1, t2, stride = w.step[2] * width
    cdef float *row = full + unit * n2 * width
    fill_pixels(row, fill + plane % w.blocks * width, n2, width)
    if not (on_grid(unit % rows // n1, w, 0, &t0) and on_grid(unit % n1, w, 1, &t1)):
        return
    cdef const float *source = sub + ((plane * w.sub_size[0] + t0) * w.sub_size[1] + t1) \
        * w.sub_size[2] * width
    row += w.first[2] * width
    if width == 1:
        for t2 in range(w.sub_size[2]):
            row[t2 * stride] = source[t2]
    else:
        for t2 in range(w.sub_size[2]):
            memcpy(row + t2 * stride, source + t2 * width, width * sizeof(float))


cdef void scatter_subgrid(const float *sub, float *full, const float *fill,
                          const SubGridWalk *w, int threads) noexcept nogil:
    """full = the sub-grid's pixels where they lie, ``fill`` (a width of values
    per channel block: the bias, padding lanes 0) everywhere else."""
    cdef Py_ssize_t unit
    for unit in prange(w.planes * w.out_size[0] * w.out_size[1], num_threads=threads,
                       schedule="static"):
        scatter_row(sub, full, fill, w, unit)


cdef inline void gather_row(const float *full, float *sub, const SubGridWalk *w,
                            Py_ssize_t unit) noexcept nogil:
    """Row ``unit`` (plane, t0, t1) of the sub-grid, from full."""
    cdef Py_ssize_t c1 = w.sub_size[1], c2 = w.sub_size[2], width = w.width
    cdef Py_ssize_t rows = w.sub_size[0] * c1, plane = unit // rows
    cdef Py_ssize_t t2, stride = w.step[2] * width
    cdef float *row = sub + unit * c2 * width
    cdef const float *source = full + (
        ((plane * w.out_size[0] + w.first[0] + unit % rows // c1 * w.step[0]) * w.out_size[1]
         + w.first[1] + unit % c1 * w.step[1]) * w.out_size[2] + w.first[2]) * width
    if width == 1:
        for t2 in range(c2):
            row[t2] = source[t2 * stride]
    else:
        for t2 in range(c2):
            memcpy(row + t2 * width, source + t2 * stride, width * sizeof(float))


cdef void gather_subgrid(const float *full, float *sub, const SubGridWalk *w,
                         int threads) noexcept nogil:
    """sub = the sub-grid's pixels of full."""
    cdef Py_ssize_t unit
    for unit in prange(w.planes * w.sub_size[0] * w.sub_size[1], num_threads=threads,
                       schedule="static"):
        gather_row(full, sub, w, unit)


# ----------------------------------------------------------------------------
# The plans
# ----------------------------------------------------------------------------
cdef class SubgridForwardPlan(ForwardPlan):
    """dst = the sub-grid layer's forward (``inner``, the bias with it) on the
    sub-grid, the bias elsewhere: the inner plan writes into this thread's
    workspace, scatter_subgrid moves it into dst."""

    cdef int run(self, void *src, void *weights, void *bias, void *dst,
                 bint activate=True) except -1:
        cdef const SubGridWalk *w = &self.walk
        cdef Py_ssize_t lanes = w.blocks * w.width
        cdef Py_ssize_t fill_at = (self.sub_floats + 15) // 16 * 16   # 64-byte aligned
        cdef float *sub = workspace(fill_at + lanes)
        cdef float *fill = sub + fill_at
        memset(fill, 0, lanes * sizeof(float))
        if bias != NULL and self.bias is not None:
            memcpy(fill, bias, w.channels * sizeof(float))   # the blocks' padding stays 0
        self.inner.run(src, weights, bias, sub, activate)
        cdef int threads = loop_team(self.threads)
        with nogil:
            scatter_subgrid(sub, <float *>dst, fill, w, threads)
        return 0


cdef class SubgridBackwardWeightsPlan(BackwardWeightsPlan):
    """diff_weights = the sub-grid layer's backward weights (``inner``) on
    diff_dst's sub-grid (gathered into this thread's workspace); diff_bias
    summed over all of diff_dst."""

    cdef int run(self, void *src, void *diff_dst, void *diff_weights,
                 void *diff_bias) except -1:
        cdef float *sub = workspace(self.sub_floats)
        cdef int threads = loop_team(self.threads)
        with nogil:
            gather_subgrid(<const float *>diff_dst, sub, &self.walk, threads)
        self.inner.run(src, sub, diff_weights, NULL)
        if self.bias_blocks.planes and diff_bias != NULL:
            with nogil:
                sum_bias(<const float *>diff_dst, <float *>diff_bias, &self.bias_blocks,
                         threads)
        return 0


# ----------------------------------------------------------------------------
# Candidates
# ----------------------------------------------------------------------------
cdef str walked_family(MemoryDesc desc, tuple dims, str dtype):
    """The family of _WALKED_FAMILIES ``desc`` (of ``dims``) is in, or None."""
    for family in _WALKED_FAMILIES:
        if family_md(dims, dtype, family).key == desc.key:
            return family
    return None


def subgrid_candidates(str which, geom, str dtype, bint training=False, variant=None):
    """The sub-grid plans of pass ``which`` ("forward": without the sum post-op
    or an activation; "backward_weights") for ``geom``, float32: one per of the
    first SUBGRID_CANDIDATES candidates of the sub-grid's layer whose data
    tensor on the sub-grid is in a layout the loops walk (all of them for
    ``variant``, a variant of this kind: its direct prefix is SUBGRID's).
    None where ``geom`` has no sub-grid.  Their indices are set where they
    are enumerated."""
    if dtype != "float32" or (variant is not None and not variant[4].startswith(SUBGRID)):
        return
    sub = subgrid_of(geom)
    if sub is None:
        return
    inner_variant = None if variant is None else \
        tuple(variant[:4]) + (variant[4][len(SUBGRID):],)
    cdef Candidate inner, c
    cdef MemoryDesc sub_data
    cdef Geometry g = Geometry.of(geom, dtype)
    if which == "forward":
        inner_geom = sub.geom
        inners = forward_candidates(inner_geom, dtype, training, False, variant=inner_variant)
        # Forward's dst: a direct plan's diff_src.
        queries = (dnnl_query_dst_md, dnnl_query_diff_src_md)
    else:
        # The bias gradient reads all of diff_dst: the sub-grid layer has none.
        inner_geom = dataclasses.replace(sub.geom, bias_shape=None, param=dataclasses.replace(
            sub.geom.param, no_bias=True))
        inners = backward_weights_candidates(inner_geom, dtype, variant=inner_variant)
        queries = (dnnl_query_diff_dst_md, dnnl_query_src_md)  # direct: its src
    offered = 0
    for inner in inners:
        if inner.is_reference or inner.impl == GEMM_IMPL:   # GEMM: the workspace is taken
            continue
        sub_data = inner.pd.query(queries[inner.direct], 0, ROLE_DATA)
        family = walked_family(sub_data, inner_geom.out_shape, dtype)
        if family is None:
            continue
        c = Candidate.__new__(Candidate)
        c.pd, c.family, c.weights, c.impl = inner.pd, inner.family, inner.weights, \
            SUBGRID + inner.impl
        c.bias_fused = True   # its run adds the bias (sums its gradient), as a fused one
        c.act_type, c.act_fused, c.direct = None, False, False
        c.variant = tuple(inner.variant[:4]) + (SUBGRID + inner.variant[4],)
        c.layouts = inner.layouts
        c.builder = _subgrid_builder(which, g, sub, inner, family)
        yield c
        offered += 1
        if variant is None and offered == SUBGRID_CANDIDATES:
            return


def _subgrid_builder(str which, Geometry g, sub, Candidate inner, str family):
    if which == "forward":
        return lambda c: build_subgrid_forward(g, sub, inner, family, c)
    return lambda c: build_subgrid_backward_weights(g, sub, inner, family, c)


cdef Layout full_layout(Geometry g, str family):
    """The full data tensor (dst or diff_dst) in the sub-grid's layout family."""
    return make_layout(family_md(g.out_shape, g.dtype, family), ROLE_DATA, g.out_shape)


cdef SubgridForwardPlan build_subgrid_forward(Geometry g, sub, Candidate inner_c, str family,
                                              Candidate c):
    cdef ForwardPlan inner = inner_c.build()
    cdef SubgridForwardPlan plan = SubgridForwardPlan.__new__(SubgridForwardPlan)
    plan.impl, plan.family, plan.threads = c.impl, c.family, inner.threads
    plan.bias_fused, plan.act_type, plan.act_fused, plan.direct = True, None, False, False
    plan.inner = inner
    plan.src, plan.weights, plan.bias = inner.src, inner.weights, inner.bias
    plan.dst = full_layout(g, family)
    plan.walk = subgrid_walk(plan.dst.desc, channel_blocks(plan.dst.desc), sub)
    plan.sub_floats = inner.dst.desc.size // sizeof(float)
    return plan


cdef SubgridBackwardWeightsPlan build_subgrid_backward_weights(
        Geometry g, sub, Candidate inner_c, str family, Candidate c):
    cdef BackwardWeightsPlan inner = inner_c.build()
    cdef SubgridBackwardWeightsPlan plan = SubgridBackwardWeightsPlan.__new__(
        SubgridBackwardWeightsPlan)
    plan.impl, plan.family, plan.threads = c.impl, c.family, inner.threads
    plan.direct = False
    plan.inner = inner
    plan.src, plan.diff_weights = inner.src, inner.diff_weights
    plan.diff_dst = full_layout(g, family)
    plan.walk = subgrid_walk(plan.diff_dst.desc, channel_blocks(plan.diff_dst.desc), sub)
    plan.sub_floats = inner.diff_dst.desc.size // sizeof(float)
    if g.has_bias:
        plan.diff_bias = make_layout(plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1),
                                     ROLE_BIAS, g.bias_dims)
        plan.bias_blocks = channel_blocks(plan.diff_dst.desc)
    return plan
