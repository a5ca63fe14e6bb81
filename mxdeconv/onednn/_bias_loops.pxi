# Included by _ops.pyx (one module, textual include): the bias loops mxdeconv
# runs itself (adding the bias, summing its gradient) for direct plans, with
# an OpenMP prange on large tensors.

# ----------------------------------------------------------------------------
# The bias added by mxdeconv (direct forward plans)
# ----------------------------------------------------------------------------
# Below this many dst elements the bias loop runs on the calling thread (an
# OpenMP fork/join costs more than the additions).
cdef Py_ssize_t PARALLEL_BIAS_ELEMENTS = 1 << 15


cdef bint strides_match(const dnnl_dim_t *strides, tuple dims, list expected):
    """Whether ``strides`` are ``expected`` on every axis of extent > 1 (an axis
    of extent 1 is never stepped along: any stride fits it)."""
    cdef int axis
    for axis in range(len(dims)):
        if dims[axis] > 1 and strides[axis] != expected[axis]:
            return False
    return True


cdef list row_major(tuple extents, Py_ssize_t unit):
    """The strides of ``extents`` laid out row-major, the last one ``unit`` apart."""
    strides = []
    for extent in reversed(extents):
        strides.insert(0, unit)
        unit *= extent
    return strides


cdef ChannelBlocks channel_blocks(MemoryDesc dst):
    """How ``dst`` (an f32 data tensor, dims (N, C, *spatial)) lays out its
    channels for the bias loop, read from its strides and inner blocks, or
    ``planes == 0`` when it is no layout the loop knows: nc<spatial> (a plane
    per image and channel), n<spatial>c (a plane per pixel, all channels in a
    row) and nC<spatial>8c/16c (a plane per image and block of 8 or 16
    channels, the last block padded)."""
    cdef ChannelBlocks blocks
    blocks.planes = 0
    cdef int ndims = len(dst.dims), format_kind = 0, nblks = 0, axis
    cdef dnnl_dim_t offset = 0
    cdef const dnnl_dim_t *strides = NULL
    cdef const dnnl_dim_t *padded = NULL
    cdef const dnnl_dim_t *padded_offsets = NULL
    cdef const dnnl_dim_t *blks = NULL
    cdef const dnnl_dim_t *idxs = NULL
    if ndims < 3 or dst.dtype != "float32":
        return blocks
    md_query(dst.md, dnnl_query_format_kind, &format_kind)
    if format_kind != dnnl_blocked:
        return blocks
    md_query(dst.md, dnnl_query_strides, &strides)
    md_query(dst.md, dnnl_query_padded_dims, &padded)
    md_query(dst.md, dnnl_query_padded_offsets, &padded_offsets)
    md_query(dst.md, dnnl_query_submemory_offset_s64, &offset)
    md_query(dst.md, dnnl_query_inner_nblks_s32, &nblks)
    md_query(dst.md, dnnl_query_inner_blks, &blks)
    md_query(dst.md, dnnl_query_inner_idxs, &idxs)
    dims = dst.dims
    if offset != 0:
        return blocks
    for axis in range(ndims):  # only the channels may be padded, at their end
        if padded_offsets[axis] != 0 or (axis != 1 and padded[axis] != dims[axis]):
            return blocks
    cdef Py_ssize_t images = dims[0], channels = dims[1], pixels = 1, width, count
    spatial = dims[2:]
    for extent in spatial:
        pixels *= extent
    blocks.channels = channels
    if nblks == 0 and padded[1] == channels:
        if strides_match(strides, dims, [channels * pixels, pixels] + row_major(spatial, 1)):
            blocks.planes, blocks.blocks, blocks.rows, blocks.width = (
                images * channels, channels, pixels, 1)
        elif strides_match(strides, dims,
                           [pixels * channels, 1] + row_major(spatial, channels)):
            blocks.planes, blocks.blocks, blocks.rows, blocks.width = (
                images * pixels, 1, 1, channels)
    elif nblks == 1 and idxs[0] == 1 and blks[0] in (8, 16):
        width = blks[0]
        count = (channels + width - 1) // width
        if padded[1] == count * width and strides_match(
                strides, dims, [count * pixels * width, pixels * width] +
                row_major(spatial, width)):
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


cdef inline double sum_planes(const float *diff_dst, const ChannelBlocks *blocks,
                              Py_ssize_t block) noexcept nogil:
    """The sum of one channel's planes (width 1), in double, over 16 partial
    sums: one chain of dependent additions runs at one per 4 cycles or so."""
    cdef double sums[16]
    cdef Py_ssize_t plane = block, r, i, rows = blocks.rows
    cdef const float *row
    for i in range(16):
        sums[i] = 0
    while plane < blocks.planes:   # every plane of this channel: one per image
        row = diff_dst + plane * rows
        r = 0
        while r + 16 <= rows:
            for i in range(16):
                sums[i] += row[r + i]
            r += 16
        while r < rows:
            sums[r % 16] += row[r]
            r += 1
        plane += blocks.blocks
    for i in range(1, 16):
        sums[0] += sums[i]
    return sums[0]


cdef inline void sum_bias_block(const float *diff_dst, float *diff_bias,
                                const ChannelBlocks *blocks, Py_ssize_t block) noexcept nogil:
    """diff_bias over the channels of one channel block, in double, 16 at a time."""
    cdef Py_ssize_t first = block * blocks.width
    cdef Py_ssize_t count = blocks.channels - first
    cdef Py_ssize_t chunk, width, plane, r, i
    cdef double sums[16]
    cdef const float *row
    if blocks.width == 1:   # one channel's planes (plain layouts)
        diff_bias[first] = <float>sum_planes(diff_dst, blocks, block)
        return
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
