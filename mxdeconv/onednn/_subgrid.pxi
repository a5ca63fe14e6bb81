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

#: The most bytes the sub-grid tensor may take for its plans to be offered:
#: it lives in the per-thread workspace, kept between calls (a quarter of a
#: 2-D result for a factor of 2; the dilated benchmark layer's is 8 MB at
#: batch 32).
SUBGRID_MAX_BYTES = 256 << 20

#: The layout families the loops walk, both tensors in the same one.
_WALKED_FAMILIES = ("blocked16", "blocked8", "channels_last", "plain")


cdef SubGridWalk subgrid_walk(MemoryDesc full, sub) except *:
    """The loops' view of ``full`` (an f32 data tensor in one of
    _WALKED_FAMILIES) and of its sub-grid ``sub`` (a SubGrid) in the same
    layout: 1-D and 2-D padded to 3-D."""
    cdef SubGridWalk w
    cdef ChannelBlocks blocks = channel_blocks(full)
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


cdef inline void move_pixel(float *target, const float *source,
                            Py_ssize_t width) noexcept nogil:
    """One pixel's ``width`` lanes: fixed-size copies for the blocked widths,
    which the compiler turns into a few vector moves (a call to memcpy per
    pixel cost more than the copy)."""
    if width == 16:
        memcpy(target, source, 16 * sizeof(float))
    elif width == 8:
        memcpy(target, source, 8 * sizeof(float))
    elif width == 1:
        target[0] = source[0]
    else:
        memcpy(target, source, width * sizeof(float))


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
    """Row ``unit`` (plane, o0, o1) of the full tensor: its sub-grid pixels
    from sub, ``fill`` (the plane's block of it) at every other pixel."""
    cdef Py_ssize_t n1 = w.out_size[1], n2 = w.out_size[2], width = w.width
    cdef Py_ssize_t rows = w.out_size[0] * n1, plane = unit // rows
    cdef Py_ssize_t t0, t1, t2, pixel = 0, next_on
    cdef float *row = full + unit * n2 * width
    cdef const float *source = NULL
    fill += plane % w.blocks * width
    if on_grid(unit % rows // n1, w, 0, &t0) and on_grid(unit % n1, w, 1, &t1):
        source = sub + ((plane * w.sub_size[0] + t0) * w.sub_size[1] + t1) \
            * w.sub_size[2] * width
        for t2 in range(w.sub_size[2]):
            next_on = w.first[2] + t2 * w.step[2]
            while pixel < next_on:
                move_pixel(row + pixel * width, fill, width)
                pixel += 1
            move_pixel(row + pixel * width, source + t2 * width, width)
            pixel += 1
    while pixel < n2:
        move_pixel(row + pixel * width, fill, width)
        pixel += 1


cdef void scatter_subgrid(const float *sub, float *full, const float *fill,
                          const SubGridWalk *w, int threads) noexcept nogil:
    """full = the sub-grid's pixels where they lie, ``fill`` (a width of values
    per channel block: the bias, padding lanes 0) everywhere else: one write
    of every pixel."""
    cdef Py_ssize_t unit
    for unit in prange(w.planes * w.out_size[0] * w.out_size[1], num_threads=threads,
                       schedule="static"):
        scatter_row(sub, full, fill, w, unit)


cdef enum:
    # The most pixels a row's lanes are summed over in float before the sums
    # go into doubles (a 1-D row can be 8192 pixels long).
    FLOAT_RUN = 64


cdef inline void sum_pixels(const float *row, double *sums, Py_ssize_t pixels,
                            Py_ssize_t width) noexcept nogil:
    """sums[j] = the sum of lane j over ``pixels`` pixels of ``width`` lanes.
    16 float partial sums that the compiler vectorises (one lane: over 16
    consecutive pixels; 8 or 16 lanes: a pixel's), added into the doubles
    every FLOAT_RUN pixels; other widths in double, lane by lane."""
    cdef float partial[16]
    cdef Py_ssize_t p, j, k, run
    if width != 1 and width != 8 and width != 16:
        for j in range(width):
            sums[j] = 0
        for p in range(pixels):
            for j in range(width):
                sums[j] += row[p * width + j]
        return
    for j in range(width):
        sums[j] = 0
    p = 0
    while p < pixels:
        run = pixels - p if pixels - p < FLOAT_RUN else FLOAT_RUN
        for k in range(16):
            partial[k] = 0
        if width == 1:
            j = 0
            while j + 16 <= run:
                for k in range(16):
                    partial[k] += row[p + j + k]
                j += 16
            while j < run:
                partial[j % 16] += row[p + j]
                j += 1
            for k in range(16):
                sums[0] += partial[k]
        elif width == 16:
            for j in range(run):
                for k in range(16):
                    partial[k] += row[(p + j) * 16 + k]
            for k in range(16):
                sums[k] += partial[k]
        else:
            for j in range(run):
                for k in range(8):
                    partial[k] += row[(p + j) * 8 + k]
            for k in range(8):
                sums[k] += partial[k]
        p += run


cdef inline void gather_row(const float *full, float *sub, double *sums,
                            const SubGridWalk *w, Py_ssize_t unit) noexcept nogil:
    """Row ``unit`` (plane, o0, o1) of full: its sub-grid pixels into sub, and
    (``sums`` not NULL) the sums of its lanes into ``sums``."""
    cdef Py_ssize_t n1 = w.out_size[1], n2 = w.out_size[2], width = w.width
    cdef Py_ssize_t rows = w.out_size[0] * n1, plane = unit // rows
    cdef Py_ssize_t t0, t1, t2, stride = w.step[2] * width
    cdef const float *row = full + unit * n2 * width
    if sums != NULL:
        sum_pixels(row, sums, n2, width)
    if not (on_grid(unit % rows // n1, w, 0, &t0) and on_grid(unit % n1, w, 1, &t1)):
        return
    cdef float *target = sub + ((plane * w.sub_size[0] + t0) * w.sub_size[1] + t1) \
        * w.sub_size[2] * width
    row += w.first[2] * width
    for t2 in range(w.sub_size[2]):
        move_pixel(target + t2 * width, row + t2 * stride, width)


cdef inline Py_ssize_t full_rows(const SubGridWalk *w) noexcept nogil:
    return w.planes * w.out_size[0] * w.out_size[1]


cdef void gather_subgrid(const float *full, float *sub, double *sums,
                         const SubGridWalk *w, int threads) noexcept nogil:
    """sub = the sub-grid's pixels of full, in one pass over full that also
    sums each of its rows' lanes into ``sums`` (full_rows x width doubles;
    NULL: no sums): the bias gradient reads all of full anyway."""
    cdef Py_ssize_t unit
    for unit in prange(full_rows(w), num_threads=threads, schedule="static"):
        gather_row(full, sub, NULL if sums == NULL else sums + unit * w.width, w, unit)


cdef void sum_rows(const double *sums, float *diff_bias, const SubGridWalk *w) noexcept nogil:
    """diff_bias[c] = the sum of gather_subgrid's row sums of channel c, in a
    fixed order (channel block b's lane j: every row of the planes of b)."""
    cdef Py_ssize_t rows = w.out_size[0] * w.out_size[1], block, lane, plane, r
    cdef double total
    for block in range(w.blocks):
        for lane in range(w.width):
            if block * w.width + lane >= w.channels:
                break   # a block's padding lanes
            total = 0
            plane = block
            while plane < w.planes:
                for r in range(plane * rows, (plane + 1) * rows):
                    total += sums[r * w.width + lane]
                plane += w.blocks
            diff_bias[block * w.width + lane] = <float>total


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
    diff_dst's sub-grid, gathered into this thread's workspace in the pass
    over diff_dst that also sums diff_bias."""

    cdef int run(self, void *src, void *diff_dst, void *diff_weights,
                 void *diff_bias) except -1:
        cdef const SubGridWalk *w = &self.walk
        cdef bint summing = diff_bias != NULL and self.diff_bias is not None
        cdef Py_ssize_t sums_at = (self.sub_floats + 15) // 16 * 16   # 64-byte aligned
        # The row sums: doubles, two floats of the workspace each.
        cdef float *sub = workspace(sums_at + (2 * full_rows(w) * w.width if summing else 0))
        cdef double *sums = <double *>(sub + sums_at) if summing else NULL
        cdef int threads = loop_team(self.threads)
        with nogil:
            gather_subgrid(<const float *>diff_dst, sub, sums, w, threads)
            if summing:
                sum_rows(sums, <float *>diff_bias, w)
        self.inner.run(src, sub, diff_weights, NULL)
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
    or an activation; "backward_weights") for ``geom``, float32: one for each
    of the first SUBGRID_CANDIDATES candidates of the sub-grid's layer whose
    data tensor on the sub-grid is in a layout the loops walk (all of them for
    ``variant``, a variant of this kind: its direct prefix is SUBGRID's).
    None where ``geom`` has no sub-grid or its tensor would take more than
    SUBGRID_MAX_BYTES.  Their indices are set where they are enumerated."""
    if dtype != "float32" or (variant is not None and not variant[4].startswith(SUBGRID)):
        return
    sub = subgrid_of(geom)
    if sub is None or math.prod(sub.geom.out_shape) * sizeof(float) > SUBGRID_MAX_BYTES:
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
        # mxdeconv's own plans (no oneDNN descriptor) use the workspace the
        # sub-grid tensor takes.
        if inner.pd is None or inner.is_reference:
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
    plan.walk = subgrid_walk(plan.dst.desc, sub)
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
    plan.walk = subgrid_walk(plan.diff_dst.desc, sub)
    plan.sub_floats = inner.diff_dst.desc.size // sizeof(float)
    if g.has_bias:
        plan.diff_bias = make_layout(plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1),
                                     ROLE_BIAS, g.bias_dims)
    return plan
