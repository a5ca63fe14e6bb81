# Included by _ops.pyx (one module, textual include): the bias loops mxdeconv
# runs itself (adding the bias, summing its gradient) for direct plans, with
# an OpenMP prange on large tensors.

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
