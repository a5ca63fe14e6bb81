# Included by _ops.pyx (one module, textual include): the plans mxdeconv
# offers beside oneDNN's on its single-precision GEMM (dnnl_sgemm): backward
# weights as an im2col gather and one GEMM over many images at once, and the
# forward of a layer whose taps do not overlap (kernel <= stride) as one GEMM
# per image and a scatter.

# ----------------------------------------------------------------------------
# Backward weights as one GEMM
# ----------------------------------------------------------------------------
# diff_weights[ic, oc, k] = sum over images n and input pixels i of
# src[n, ic, i] * diff_dst[n, oc, i * stride + k * dilate - pad]
# (0 where that pixel is cropped): per group, one GEMM of im2col's matrix of
# diff_dst (a row per output channel and tap, a column per image and input
# pixel) by src, its inner dimension running over a whole chunk of images.
# Measured on the benchmark's layers (docs/performance.rst): 1.5-2x faster
# than oneDNN's best backward weights on the dilated and the 1-D layer, where
# those reach 20-40% of the peak, and chosen on the depthwise one; slower on
# the DCGAN and 3-D layers, where the tuner keeps oneDNN's.

#: The most bytes of im2col's matrix one GEMM takes (at least one image's
#: worth): about a core's L2.  Measured at batch 32: 1-2 MB chunks run 5-15%
#: faster than 32 MB ones, which leave the cache between gather and GEMM.
GEMM_COL_BYTES = 2 << 20

#: The most bytes of im2col's matrix one image may need for the plan to be
#: offered: its workspace holds at least one image's (a 3-D layer of 128
#: output channels, k4 and 32x64x64 input pixels would need 4.3 GB).
GEMM_MAX_IMAGE_BYTES = 64 << 20

#: Its name in plans and in the plan cache; the variants that find it again:
#: diff_weights^T per group (output channels and taps x input channels, then
#: reordered to MXNet's layout) or diff_weights in MXNet's layout at once.
#: The GEMM's speed depends on its orientation (measured at batch 32: the
#: transposed one 15% faster on the 1-D layer, the plain one 10% faster on
#: DCGAN 512 -> 256 once the reorder is counted): the tuner weighs both.
GEMM_IMPL = "mxdeconv:im2col+dnnl_sgemm"
GEMM_VARIANT = ("plain", "transposed", True, False, "mxdeconv:im2col+")
GEMM_PLAIN_VARIANT = ("plain", "plain", True, False, "mxdeconv:im2col+")


cdef TapGather tap_gather(Geometry g, geom):
    """``g``'s sizes for the gather, 1-D and 2-D padded to 3-D."""
    cdef TapGather t
    cdef int lead, axis
    param = geom.param
    ndim = len(param.kernel)
    lead = 3 - ndim
    for axis in range(3):
        t.in_size[axis] = t.out_size[axis] = t.kernel[axis] = 1
        t.stride[axis] = t.dilate[axis] = 1
        t.pad[axis] = 0
    for axis in range(ndim):
        t.in_size[lead + axis] = geom.spatial_in[axis]
        t.out_size[lead + axis] = geom.spatial_out[axis]
        t.kernel[lead + axis] = param.kernel[axis]
        t.stride[lead + axis] = param.stride[axis]
        t.dilate[lead + axis] = param.dilate[axis]
        t.pad[lead + axis] = geom.pad_l[axis]
    t.channels_in, t.channels_out = g.data_shape[1], g.out_shape[1]
    t.groups = g.groups
    t.in_per_group = t.channels_in // t.groups
    t.out_per_group = t.channels_out // t.groups
    t.taps = t.kernel[0] * t.kernel[1] * t.kernel[2]
    t.in_pixels = t.in_size[0] * t.in_size[1] * t.in_size[2]
    t.out_pixels = t.out_size[0] * t.out_size[1] * t.out_size[2]
    return t


cdef inline Py_ssize_t image_bytes(const TapGather *t) noexcept nogil:
    """The bytes of one image's im2col matrix."""
    return t.in_pixels * t.channels_out * t.taps * sizeof(float)


cdef void gather_src(const float *src, float *a, const TapGather *t, Py_ssize_t first,
                     Py_ssize_t images, int threads) noexcept nogil:
    """a[c, (n - first) * in_pixels + i] = src[n, c, i] for the chunk's images:
    each channel's pixels of every image in one row."""
    cdef Py_ssize_t rows = images * t.in_pixels, c, n
    for c in prange(t.channels_in, num_threads=threads, schedule="static"):
        for n in range(images):
            memcpy(a + c * rows + n * t.in_pixels,
                   src + ((first + n) * t.channels_in + c) * t.in_pixels,
                   t.in_pixels * sizeof(float))


cdef inline void reaching_pixels(Py_ssize_t offset, Py_ssize_t stride, Py_ssize_t count,
                                 Py_ssize_t size, Py_ssize_t *lo, Py_ssize_t *hi) noexcept nogil:
    """The input pixels i in [lo, hi) whose output pixel i * stride + offset lies in [0, size)."""
    cdef Py_ssize_t low = 0, high = count
    if offset < 0:
        low = (stride - 1 - offset) // stride
    if (count - 1) * stride + offset >= size:
        high = (size - 1 - offset) // stride + 1 if size - 1 - offset >= 0 else 0
    if low > count:
        low = count
    if high < low:
        high = low
    lo[0], hi[0] = low, high


cdef inline void gather_line(const float *source, float *out, Py_ssize_t count,
                             Py_ssize_t stride, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    """out[i] = source[i * stride] for i in [lo, hi), 0 elsewhere in [0, count)."""
    cdef Py_ssize_t i
    for i in range(lo):
        out[i] = 0
    if stride == 1:
        memcpy(out + lo, source + lo, (hi - lo) * sizeof(float))
    else:
        for i in range(lo, hi):
            out[i] = source[i * stride]
    for i in range(hi, count):
        out[i] = 0


cdef void gather_plane(const float *plane, float *out, const TapGather *t,
                       Py_ssize_t rows) noexcept nogil:
    """One image's segments of every im2col row of one output channel: tap k's
    segment (at ``out + k * rows``) holds, for each input pixel, the pixel of
    ``plane`` (the image's output channel) that tap reaches from it, 0 where
    cropped.  Each axis's reach is worked out once per kernel index, not per
    tap; the sizes sit in locals (with -fno-strict-aliasing every store would
    reload them from ``t``)."""
    cdef Py_ssize_t k0n = t.kernel[0], k1n = t.kernel[1], k2n = t.kernel[2]
    cdef Py_ssize_t n0 = t.in_size[0], n1 = t.in_size[1], n2 = t.in_size[2]
    cdef Py_ssize_t size0 = t.out_size[0], size1 = t.out_size[1], size2 = t.out_size[2]
    cdef Py_ssize_t s0 = t.stride[0], s1 = t.stride[1], s2 = t.stride[2]
    cdef Py_ssize_t d0 = t.dilate[0], d1 = t.dilate[1], d2 = t.dilate[2]
    cdef Py_ssize_t p0 = t.pad[0], p1 = t.pad[1], p2 = t.pad[2]
    cdef Py_ssize_t row = n1 * n2
    cdef Py_ssize_t k0, k1, k2, off0, off1, off2, lo0, hi0, lo1, hi1, lo2, hi2, i0, i1
    cdef float *segment
    cdef float *line
    # Tap k of input pixel i reaches output pixel i * stride + offset.
    for k0 in range(k0n):
        off0 = k0 * d0 - p0
        reaching_pixels(off0, s0, n0, size0, &lo0, &hi0)
        for k1 in range(k1n):
            off1 = k1 * d1 - p1
            reaching_pixels(off1, s1, n1, size1, &lo1, &hi1)
            for k2 in range(k2n):
                off2 = k2 * d2 - p2
                reaching_pixels(off2, s2, n2, size2, &lo2, &hi2)
                segment = out + ((k0 * k1n + k1) * k2n + k2) * rows
                memset(segment, 0, lo0 * row * sizeof(float))
                memset(segment + hi0 * row, 0, (n0 - hi0) * row * sizeof(float))
                for i0 in range(lo0, hi0):
                    line = segment + i0 * row
                    memset(line, 0, lo1 * n2 * sizeof(float))
                    memset(line + hi1 * n2, 0, (n1 - hi1) * n2 * sizeof(float))
                    for i1 in range(lo1, hi1):
                        gather_line(plane + ((i0 * s0 + off0) * size1 + i1 * s1 + off1)
                                    * size2 + off2, line + i1 * n2, n2, s2, lo2, hi2)


cdef void gather_taps(const float *diff_dst, float *col, const TapGather *t, Py_ssize_t first,
                      Py_ssize_t images, int threads) noexcept nogil:
    """im2col of the chunk's diff_dst: col[oc, k, (n - first, i)] = diff_dst[n,
    oc, the pixel tap k of input pixel i reaches], a row per (output channel,
    tap); group g's rows are those of its output channels.  One (output
    channel, image) plane at a time, every tap of it while it is in cache."""
    cdef Py_ssize_t rows = images * t.in_pixels, unit, oc, n
    for unit in prange(t.channels_out * images, num_threads=threads, schedule="static"):
        oc = unit // images
        n = unit % images
        gather_plane(diff_dst + ((first + n) * t.channels_out + oc) * t.out_pixels,
                     col + oc * t.taps * rows + n * t.in_pixels, t, rows)


cdef float *workspace(Py_ssize_t count) except NULL:
    """``count`` floats of this thread's workspace, grown as needed: the GEMM
    plans of every layer this thread runs share it (plans are per thread)."""
    cdef ThreadState state = thread_state()
    cdef cnp.ndarray buffer = state.workspace
    if buffer is None or buffer.nbytes < count * <Py_ssize_t>sizeof(float):
        buffer = state.workspace = None   # the old one freed first: no peak of both
        buffer = state.workspace = aligned_bytes(count * sizeof(float))
    return <float *>data_ptr(buffer)


def workspace_bytes():
    """The size of this thread's GEMM workspace (0: none; clear_cache() frees it)."""
    buffer = thread_state().workspace
    return 0 if buffer is None else buffer.nbytes


cdef float *backward_workspace(const TapGather *t, Py_ssize_t chunk,
                               float **rows_buffer) except NULL:
    """This thread's workspace for a backward GEMM plan's chunk: im2col's
    matrix, then (64-byte aligned) a matrix of input-channel rows, which
    holds src's rows for the backward weights and the GEMM's result for the
    backward data (one after the other, so a pair of the two plans shares
    it)."""
    cdef Py_ssize_t most = chunk * t.in_pixels
    cdef Py_ssize_t left = (t.channels_out * t.taps * most + 15) // 16 * 16
    cdef float *col = workspace(left + t.channels_in * most)
    rows_buffer[0] = col + left
    return col


cdef dnnl_status_t weights_chunk(const TapGather *t, bint weights_plain, const float *col,
                                 const float *src, float *a, float *diff_weights,
                                 Py_ssize_t first, Py_ssize_t count,
                                 int threads) noexcept nogil:
    """Adds the chunk's images to diff_weights (the first chunk writes it) from
    their im2col matrix ``col``: src's rows gathered into ``a``, then per
    group diff_weights^T (its output channels and taps x its input channels)
    = im2col rows x src rows^T, or diff_weights (MXNet's layout) = src rows x
    im2col rows^T."""
    cdef Py_ssize_t height = t.out_per_group * t.taps   # im2col rows per group
    cdef Py_ssize_t rows = count * t.in_pixels, g
    cdef float beta = 0.0 if first == 0 else 1.0   # later chunks add onto the first's
    cdef dnnl_status_t status = dnnl_success
    gather_src(src, a, t, first, count, threads)
    g = 0
    while g < t.groups and status == dnnl_success:
        if weights_plain:
            status = dnnl_sgemm(b'N', b'T', t.in_per_group, height, rows, 1.0,
                                a + g * t.in_per_group * rows, rows,
                                col + g * height * rows, rows, beta,
                                diff_weights + g * t.in_per_group * height, height)
        else:
            status = dnnl_sgemm(b'N', b'T', height, t.in_per_group, rows, 1.0,
                                col + g * height * rows, rows,
                                a + g * t.in_per_group * rows, rows, beta,
                                diff_weights + g * height * t.in_per_group, t.in_per_group)
        g += 1
    return status


cdef class GemmBackwardWeightsPlan(BackwardWeightsPlan):
    """diff_weights (and diff_bias) = backward weights(src, diff_dst) as
    im2col + GEMM, chunk images at a time: src and diff_dst in the default
    layouts, diff_weights in MXNet's (``weights_plain``) or transposed."""

    cdef int run(self, void *src, void *diff_dst, void *diff_weights,
                 void *diff_bias) except -1:
        cdef const TapGather *t = &self.taps
        cdef float *a
        cdef float *col = backward_workspace(t, self.chunk, &a)
        cdef int threads = loop_team(self.threads)
        cdef Py_ssize_t first = 0, count
        cdef dnnl_status_t status = dnnl_success
        while first < self.images:
            count = min(self.chunk, self.images - first)
            with nogil:
                gather_taps(<const float *>diff_dst, col, t, first, count, threads)
                status = weights_chunk(t, self.weights_plain, col, <const float *>src, a,
                                       <float *>diff_weights, first, count, threads)
            check(status, f"GEMM of the backward weights ({self.impl})")
            first += count
        if self.bias_blocks.planes and diff_bias != NULL:
            with nogil:
                sum_bias(<const float *>diff_dst, <float *>diff_bias, &self.bias_blocks, threads)
        return 0


# ----------------------------------------------------------------------------
# Backward data as one GEMM on the same im2col matrix
# ----------------------------------------------------------------------------
# diff_src[n, ic, i] = sum over output channels oc and taps k of
# weight[ic, oc, k] * diff_dst[n, oc, i * stride + k * dilate - pad]: per group,
# MXNet's weight (its input channels x (output channel, tap)) times the chunk's
# im2col matrix of diff_dst, gathered as for the backward weights, its columns
# running over a whole chunk of images; then each image's rows copied out.
# No reorder of any tensor.  Measured on DCGAN 512 -> 256 at batch 32 (2-core
# AVX-512 with AMX): 10% faster than oneDNN's best backward data, 20% with
# the reorders those need.  Where the backward weights run the GEMM plan too,
# the two share each chunk's im2col matrix (run_gemm_backward).


cdef void scatter_src(const float *out, float *diff_src, const TapGather *t, Py_ssize_t first,
                      Py_ssize_t images, int threads) noexcept nogil:
    """diff_src[n, c, i] = out[c, (n - first) * in_pixels + i] for the chunk's
    images: gather_src's inverse."""
    cdef Py_ssize_t rows = images * t.in_pixels, c, n
    for c in prange(t.channels_in, num_threads=threads, schedule="static"):
        for n in range(images):
            memcpy(diff_src + ((first + n) * t.channels_in + c) * t.in_pixels,
                   out + c * rows + n * t.in_pixels, t.in_pixels * sizeof(float))


cdef dnnl_status_t data_chunk(const TapGather *t, const float *col, const float *weights,
                              float *diff_src, float *out, Py_ssize_t first, Py_ssize_t count,
                              int threads) noexcept nogil:
    """The chunk's images' diff_src from their im2col matrix ``col``: per group
    MXNet's weight times im2col's rows, into ``out`` (input channels x the
    chunk's pixels), then copied out; a one-image chunk's result is its
    diff_src already."""
    cdef Py_ssize_t height = t.out_per_group * t.taps   # im2col rows per group
    cdef Py_ssize_t rows = count * t.in_pixels, g
    cdef dnnl_status_t status = dnnl_success
    if count == 1:
        out = diff_src + first * t.channels_in * t.in_pixels
    g = 0
    while g < t.groups and status == dnnl_success:
        status = dnnl_sgemm(b'N', b'N', t.in_per_group, rows, height, 1.0,
                            weights + g * t.in_per_group * height, height,
                            col + g * height * rows, rows, 0.0,
                            out + g * t.in_per_group * rows, rows)
        g += 1
    if status == dnnl_success and count > 1:
        scatter_src(out, diff_src, t, first, count, threads)
    return status


cdef class GemmBackwardDataPlan(BackwardDataPlan):
    """diff_src = backward data(diff_dst, weights) as im2col + GEMM, chunk
    images at a time, every tensor in its default layout."""

    cdef int run(self, void *diff_dst, void *weights, void *diff_src) except -1:
        cdef const TapGather *t = &self.taps
        cdef float *out
        cdef float *col = backward_workspace(t, self.chunk, &out)
        cdef int threads = loop_team(self.threads)
        cdef Py_ssize_t first = 0, count
        cdef dnnl_status_t status = dnnl_success
        while first < self.images:
            count = min(self.chunk, self.images - first)
            with nogil:
                gather_taps(<const float *>diff_dst, col, t, first, count, threads)
                status = data_chunk(t, col, <const float *>weights, <float *>diff_src, out,
                                    first, count, threads)
            check(status, f"GEMM of the backward data ({self.impl})")
            first += count
        return 0


cdef bint gemm_pair(BackwardDataPlan data, BackwardWeightsPlan weights):
    """Whether both backward passes are GEMM plans of one layer on one team,
    in chunks of the same images: then they can share each chunk's im2col
    matrix (run_gemm_backward)."""
    if not (isinstance(data, GemmBackwardDataPlan)
            and isinstance(weights, GemmBackwardWeightsPlan)):
        return False
    cdef GemmBackwardDataPlan d = data
    cdef GemmBackwardWeightsPlan w = weights
    return (d.threads == w.threads and d.images == w.images and d.chunk == w.chunk
            and memcmp(&d.taps, &w.taps, sizeof(TapGather)) == 0)


def shares_im2col(BackwardDataPlan data not None, BackwardWeightsPlan weights not None):
    """Whether a call's backward runs ``data`` and ``weights`` as one, each
    chunk's im2col matrix gathered once for both (see gemm_pair)."""
    return gemm_pair(data, weights)


cdef int run_gemm_backward(GemmBackwardDataPlan data, GemmBackwardWeightsPlan weights,
                           void *diff_dst, void *weight, void *diff_src, void *src,
                           void *diff_weights, void *diff_bias) except -1:
    """Both backward passes of a gemm_pair: each chunk's im2col matrix of
    diff_dst gathered once, for the backward data's GEMM and then the
    backward weights'; the same results as the two plans' runs."""
    cdef const TapGather *t = &data.taps
    cdef float *rows_buffer
    cdef float *col = backward_workspace(t, data.chunk, &rows_buffer)
    cdef int threads = loop_team(data.threads)
    cdef Py_ssize_t first = 0, count
    cdef dnnl_status_t status = dnnl_success
    while first < data.images:
        count = min(data.chunk, data.images - first)
        with nogil:
            gather_taps(<const float *>diff_dst, col, t, first, count, threads)
            status = data_chunk(t, col, <const float *>weight, <float *>diff_src, rows_buffer,
                                first, count, threads)
        check(status, f"GEMM of the backward data ({data.impl})")
        with nogil:
            status = weights_chunk(t, weights.weights_plain, col, <const float *>src,
                                   rows_buffer, <float *>diff_weights, first, count, threads)
        check(status, f"GEMM of the backward weights ({weights.impl})")
        first += count
    if weights.bias_blocks.planes and diff_bias != NULL:
        with nogil:
            sum_bias(<const float *>diff_dst, <float *>diff_bias, &weights.bias_blocks, threads)
    return 0


def gemm_backward_data_candidate(geom, str dtype):
    """The im2col + GEMM plan as a candidate of the backward-data pass, or
    None where it is not offered: float32 only (dnnl_sgemm) and one image's
    im2col matrix within GEMM_MAX_IMAGE_BYTES.  Its index is set where it is
    enumerated."""
    if dtype != "float32":
        return None
    cdef Geometry g = Geometry.of(geom, dtype)
    cdef TapGather t = tap_gather(g, geom)
    if image_bytes(&t) > GEMM_MAX_IMAGE_BYTES:
        return None
    cdef Candidate c = Candidate.__new__(Candidate)
    c.pd, c.family, c.weights, c.impl = None, "plain", "plain", GEMM_IMPL
    c.bias_fused, c.act_type, c.act_fused, c.direct = True, None, False, False
    c.variant = GEMM_PLAIN_VARIANT
    c.layouts = gemm_layout_keys(g, True)   # every tensor plain
    c.builder = lambda c: build_gemm_backward_data(g, geom, c)
    return c


cdef GemmBackwardDataPlan build_gemm_backward_data(Geometry g, geom, Candidate c):
    cdef GemmBackwardDataPlan plan = GemmBackwardDataPlan.__new__(GemmBackwardDataPlan)
    plan.impl, plan.family, plan.threads = c.impl, c.family, omp_get_max_threads()
    plan.direct = False
    plan.taps = tap_gather(g, geom)
    plan.images = g.data_shape[0]
    plan.chunk = max(1, min(plan.images, GEMM_COL_BYTES // max(image_bytes(&plan.taps), 1)))
    plan.diff_dst = make_layout(plain_md(g.out_shape, g.dtype, ROLE_DATA, 1), ROLE_DATA,
                                g.out_shape)
    plan.weights = make_layout(plain_md(g.weight_shape, g.dtype, ROLE_WEIGHTS, g.groups),
                               ROLE_WEIGHTS, g.weight_shape, g.groups)
    plan.diff_src = make_layout(plain_md(g.data_shape, g.dtype, ROLE_DATA, 1), ROLE_DATA,
                                g.data_shape)
    return plan


#: oneDNN's weight layouts with the input channels innermost, ([G,] O, spatial, I):
#: the GEMM's diff_weights^T, by the number of oneDNN weight dims, ungrouped and grouped.
_TRANSPOSED_WEIGHT_TAGS = {(3, False): dnnl_acb, (4, False): dnnl_acdb, (5, False): dnnl_acdeb,
                           (4, True): dnnl_abdc, (5, True): dnnl_abdec, (6, True): dnnl_abdefc}


cdef MemoryDesc transposed_weights_md(Geometry g):
    """The GEMM plan's diff_weights: per group, (output channel, tap) rows of
    input channels (the exec layer reorders it to MXNet's layout when asked)."""
    return new_md(g.weight_dims, g.dtype,
                  _TRANSPOSED_WEIGHT_TAGS[(len(g.weight_dims), g.grouped)], ROLE_WEIGHTS,
                  g.grouped)


cdef MemoryDesc gemm_weights_md(Geometry g, bint plain):
    return plain_md(g.weight_shape, g.dtype, ROLE_WEIGHTS, g.groups) if plain else \
        transposed_weights_md(g)


cdef tuple gemm_layout_keys(Geometry g, bint plain):
    """A GEMM plan's layout keys: data and the layer's output plain, the weight
    in MXNet's layout (``plain``) or transposed."""
    cdef MemoryDesc src = plain_md(g.data_shape, g.dtype, ROLE_DATA, 1)
    cdef MemoryDesc dst = plain_md(g.out_shape, g.dtype, ROLE_DATA, 1)
    return (src.key, gemm_weights_md(g, plain).key, dst.key)


def gemm_backward_weights_candidate(geom, str dtype, bint plain=False):
    """The im2col + GEMM plan as a candidate of the backward-weights pass
    (``plain``: diff_weights in MXNet's layout, else transposed), or None
    where it is not offered: float32 only (dnnl_sgemm), one image's im2col
    matrix within GEMM_MAX_IMAGE_BYTES, and ``plain`` only where the two
    layouts differ.  Its index is set where it is enumerated."""
    if dtype != "float32":
        return None
    cdef Geometry g = Geometry.of(geom, dtype)
    cdef TapGather t = tap_gather(g, geom)
    if image_bytes(&t) > GEMM_MAX_IMAGE_BYTES:
        return None
    if plain and gemm_weights_md(g, False) == gemm_weights_md(g, True):
        return None   # one input channel per group: the transposed candidate is this one
    cdef Candidate c = Candidate.__new__(Candidate)
    c.pd, c.family, c.impl = None, "plain", GEMM_IMPL
    c.weights = "plain" if plain else "transposed"
    # Its run computes the bias gradient too, as a fused one would.
    c.bias_fused, c.act_type, c.act_fused, c.direct = True, None, False, False
    c.variant = GEMM_PLAIN_VARIANT if plain else GEMM_VARIANT
    c.layouts = gemm_layout_keys(g, plain)
    c.builder = lambda c: build_gemm_backward_weights(g, geom, c, plain)
    return c


cdef GemmBackwardWeightsPlan build_gemm_backward_weights(Geometry g, geom, Candidate c,
                                                         bint plain):
    cdef GemmBackwardWeightsPlan plan = GemmBackwardWeightsPlan.__new__(
        GemmBackwardWeightsPlan)
    plan.impl, plan.family, plan.threads = c.impl, c.family, omp_get_max_threads()
    plan.direct = False
    plan.taps = tap_gather(g, geom)
    plan.images = g.data_shape[0]
    plan.chunk = max(1, min(plan.images, GEMM_COL_BYTES // max(image_bytes(&plan.taps), 1)))
    plan.src = make_layout(plain_md(g.data_shape, g.dtype, ROLE_DATA, 1), ROLE_DATA,
                           g.data_shape)
    plan.diff_dst = make_layout(plain_md(g.out_shape, g.dtype, ROLE_DATA, 1), ROLE_DATA,
                                g.out_shape)
    plan.weights_plain = plain
    plan.diff_weights = make_layout(gemm_weights_md(g, plain), ROLE_WEIGHTS, g.weight_shape,
                                    g.groups)
    if g.has_bias:
        plan.diff_bias = make_layout(plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1),
                                     ROLE_BIAS, g.bias_dims)
        plan.bias_blocks = channel_blocks(plan.diff_dst.desc)
    return plan


# ----------------------------------------------------------------------------
# The forward of a layer whose taps do not overlap, as one GEMM per image
# ----------------------------------------------------------------------------
# Where kernel <= stride on every axis (no dilation), each output pixel gets at
# most one tap: dst[n, oc, i * stride + k - pad] = bias[oc] + sum over input
# channels ic of src[n, ic, i] * weight[ic, oc, k].  Per image and group that
# is col = weight^T x src (MXNet's weight is already the (input channel) x
# (output channel, tap) matrix, src the (input channel) x (pixel) one) and a
# scatter of col's rows into dst, the bias added, every output pixel written
# once: no reorder of any tensor.  U-Net's and FCN's k2 s2 upsampling is such a
# layer; oneDNN runs it as a GEMM convolution whose col2im accumulates into a
# zeroed dst.

#: Its name in plans and in the plan cache; the variant that finds it again.
GEMM_FORWARD_IMPL = "mxdeconv:scatter+dnnl_sgemm"
GEMM_FORWARD_VARIANT = ("plain", "plain", True, False, "mxdeconv:scatter+")


cdef inline void scatter_taps_row(const float *col, float *dst, const TapGather *t,
                                  Py_ssize_t unit, float bias) noexcept nogil:
    """Row ``unit`` (output channel, o0, o1) of one image's dst from col (a row
    per output channel and tap, a column per input pixel), ``bias`` added;
    the pixels no tap reaches hold the bias alone."""
    cdef Py_ssize_t n1 = t.out_size[1], n2 = t.out_size[2], rows = t.out_size[0] * n1
    cdef Py_ssize_t oc = unit // rows, o0 = unit % rows // n1, o1 = unit % n1
    cdef Py_ssize_t q0 = o0 + t.pad[0], q1 = o1 + t.pad[1], k2, lo, hi, i2, p
    cdef Py_ssize_t s2 = t.stride[2], offset
    cdef float *row = dst + unit * n2
    cdef const float *source
    # Pixel o of an axis is tap (o + pad) % stride of input pixel (o + pad) // stride.
    cdef bint reached = (0 <= q0 < t.in_size[0] * t.stride[0] and q0 % t.stride[0] < t.kernel[0]
                         and 0 <= q1 < t.in_size[1] * t.stride[1]
                         and q1 % t.stride[1] < t.kernel[1])
    if not reached or t.kernel[2] < s2 or t.in_size[2] * s2 - t.pad[2] < n2:
        for p in range(n2):   # some pixels of the row get no tap
            row[p] = bias
    if not reached:
        return
    source = col + ((oc * t.kernel[0] + q0 % t.stride[0]) * t.kernel[1] + q1 % t.stride[1]) \
        * t.kernel[2] * t.in_pixels + (q0 // t.stride[0] * t.in_size[1]
                                       + q1 // t.stride[1]) * t.in_size[2]
    for k2 in range(t.kernel[2]):
        offset = k2 - t.pad[2]
        reaching_pixels(offset, s2, t.in_size[2], n2, &lo, &hi)
        for i2 in range(lo, hi):
            row[i2 * s2 + offset] = source[i2] + bias
        source += t.in_pixels


cdef class GemmForwardPlan(ForwardPlan):
    """dst = the forward of a layer whose taps do not overlap, one image at a
    time: per group one GEMM into this thread's workspace, then scatter_taps_row
    over every row of the image's dst, all in the default layouts."""

    cdef int run(self, void *src, void *weights, void *bias, void *dst,
                 bint activate=True) except -1:
        cdef const TapGather *t = &self.taps
        cdef Py_ssize_t height = t.out_per_group * t.taps   # col's rows per group
        cdef Py_ssize_t image_rows = t.channels_out * t.out_size[0] * t.out_size[1]
        cdef float *col = workspace(t.channels_out * t.taps * t.in_pixels)
        cdef const float *biases = <const float *>bias if self.bias is not None else NULL
        cdef int threads = loop_team(self.threads)
        cdef Py_ssize_t n, g, unit
        cdef const float *image
        cdef float *out
        cdef dnnl_status_t status = dnnl_success
        for n in range(self.images):
            image = <const float *>src + n * t.channels_in * t.in_pixels
            out = <float *>dst + n * t.channels_out * t.out_pixels
            with nogil:
                g = 0
                while g < t.groups and status == dnnl_success:
                    status = dnnl_sgemm(b'T', b'N', height, t.in_pixels, t.in_per_group, 1.0,
                                        <const float *>weights + g * t.in_per_group * height,
                                        height, image + g * t.in_per_group * t.in_pixels,
                                        t.in_pixels, 0.0, col + g * height * t.in_pixels,
                                        t.in_pixels)
                    g += 1
                if status == dnnl_success:
                    for unit in prange(image_rows, num_threads=threads, schedule="static"):
                        scatter_taps_row(col, out, t, unit,
                                         0 if biases == NULL else
                                         biases[unit // (t.out_size[0] * t.out_size[1])])
            check(status, f"GEMM of the forward ({self.impl})")
        return 0


def gemm_forward_candidate(geom, str dtype, bint accumulate=False, act_type=None):
    """The GEMM + scatter forward plan as a candidate, or None where it is not
    offered: float32 without req=add's sum or an activation, taps that do not
    overlap (kernel <= stride, no dilation) and one image's col within
    GEMM_MAX_IMAGE_BYTES.  Its index is set where it is enumerated."""
    param = geom.param
    if (dtype != "float32" or accumulate or act_type is not None
            or any(d != 1 for d in param.dilate)
            or any(k > s for k, s in zip(param.kernel, param.stride))):
        return None
    cdef Geometry g = Geometry.of(geom, dtype)
    cdef TapGather t = tap_gather(g, geom)
    if image_bytes(&t) > GEMM_MAX_IMAGE_BYTES:
        return None
    cdef Candidate c = Candidate.__new__(Candidate)
    c.pd, c.family, c.weights, c.impl = None, "plain", "plain", GEMM_FORWARD_IMPL
    c.bias_fused, c.act_type, c.act_fused, c.direct = True, None, False, False
    c.variant = GEMM_FORWARD_VARIANT
    c.layouts = gemm_layout_keys(g, True)   # every tensor plain
    c.builder = lambda c: build_gemm_forward(g, geom, c)
    return c


cdef GemmForwardPlan build_gemm_forward(Geometry g, geom, Candidate c):
    cdef GemmForwardPlan plan = GemmForwardPlan.__new__(GemmForwardPlan)
    plan.impl, plan.family, plan.threads = c.impl, c.family, omp_get_max_threads()
    plan.bias_fused, plan.act_type, plan.act_fused, plan.direct = True, None, False, False
    plan.taps = tap_gather(g, geom)
    plan.images = g.data_shape[0]
    plan.src = make_layout(plain_md(g.data_shape, g.dtype, ROLE_DATA, 1), ROLE_DATA,
                           g.data_shape)
    plan.weights = make_layout(plain_md(g.weight_shape, g.dtype, ROLE_WEIGHTS, g.groups),
                               ROLE_WEIGHTS, g.weight_shape, g.groups)
    plan.dst = make_layout(plain_md(g.out_shape, g.dtype, ROLE_DATA, 1), ROLE_DATA,
                           g.out_shape)
    if g.has_bias:
        plan.bias = make_layout(plain_md(g.bias_dims, g.dtype, ROLE_BIAS, 1), ROLE_BIAS,
                                g.bias_dims)
    return plan


# ----------------------------------------------------------------------------
# The GEMM's one-time set-up
# ----------------------------------------------------------------------------
#: The set-up GEMM's size: small (its time is the kernels' generation), and
#: single-precision, as every GEMM plan's.
_SET_UP_SIZE = 64


def set_gemm_up():
    """Run one small single-precision GEMM on the calling thread, on one
    OpenMP thread: a process's first ``dnnl_sgemm`` generates oneDNN's GEMM
    kernels (once, under ``std::call_once``; about 25 ms on AVX-512), and a
    GEMM called meanwhile waits for them (see ``onednn.gemm_setup``)."""
    cdef Py_ssize_t n = _SET_UP_SIZE
    cdef cnp.ndarray buffers = np.zeros(3 * n * n, dtype=np.float32)
    cdef float *a = <float *>cnp.PyArray_DATA(buffers)
    cdef dnnl_status_t status
    cdef int saved = omp_get_max_threads()
    omp_set_num_threads(1)
    try:
        with nogil:
            status = dnnl_sgemm(b'N', b'N', n, n, n, 1.0, a, n, a + n * n, n, 0.0,
                                a + 2 * n * n, n)
    finally:
        omp_set_num_threads(saved)
    check(status, "the GEMM's set-up")
