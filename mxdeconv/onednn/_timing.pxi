# Included by _ops.pyx (one module, textual include): the benchmark hook,
# timing primitives, bias loops and reorders alone in a C loop.

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


def release_timing_buffers(Py_ssize_t keep_bytes=0):
    """Free the buffers timing kept (the planner calls this after each choice),
    all of them, or only while they hold more than ``keep_bytes``: a tuner
    spread over a layer's calls keeps its buffers between its units (written
    once, not once per unit), up to a bound."""
    cdef Py_ssize_t held = sum(len(buffer) for buffer in _timing_buffers.values())
    if held > keep_bytes:
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


cdef list time_forward_run(ForwardPlan plan, int repeats):
    """Per-run seconds of a forward plan's run() on written buffers (as
    time_primitive): for plans with loops of mxdeconv's own around primitives."""
    cdef cnp.ndarray src = touched_bytes(plan.src.desc.size + 64, 0)
    cdef cnp.ndarray weights = touched_bytes(plan.weights.desc.size + 64, 1)
    cdef cnp.ndarray dst = touched_bytes(plan.dst.desc.size + 64, 2)
    cdef cnp.ndarray bias_buf = None
    cdef void *bias = NULL
    cdef double start
    cdef int i
    if plan.bias is not None:
        bias_buf = touched_bytes(plan.bias.desc.size + 64, 3)
        bias = data_ptr(bias_buf)
    times = []
    for i in range(repeats + 1):  # the first: warm-up (the workspace's first touch)
        start = now()
        plan.run(data_ptr(src), data_ptr(weights), bias, data_ptr(dst))
        if i:
            times.append(now() - start)
    return times


cdef list time_backward_weights_run(BackwardWeightsPlan plan, int repeats):
    """Per-run seconds of a backward-weights plan's run() on written buffers
    (as time_forward_run)."""
    cdef cnp.ndarray src = touched_bytes(plan.src.desc.size + 64, 0)
    cdef cnp.ndarray diff_dst = touched_bytes(plan.diff_dst.desc.size + 64, 1)
    cdef cnp.ndarray diff_weights = touched_bytes(plan.diff_weights.desc.size + 64, 2)
    cdef cnp.ndarray diff_bias = None
    cdef void *bias = NULL
    cdef double start
    cdef int i
    if plan.diff_bias is not None:
        diff_bias = touched_bytes(plan.diff_bias.desc.size + 64, 3)
        bias = data_ptr(diff_bias)
    times = []
    for i in range(repeats + 1):  # the first: warm-up (the workspace's first touch)
        start = now()
        plan.run(data_ptr(src), data_ptr(diff_dst), data_ptr(diff_weights), bias)
        if i:
            times.append(now() - start)
    return times


cdef list time_backward_data_run(BackwardDataPlan plan, int repeats):
    """Per-run seconds of a backward-data plan's run() on written buffers
    (as time_forward_run)."""
    cdef cnp.ndarray diff_dst = touched_bytes(plan.diff_dst.desc.size + 64, 0)
    cdef cnp.ndarray weights = touched_bytes(plan.weights.desc.size + 64, 1)
    cdef cnp.ndarray diff_src = touched_bytes(plan.diff_src.desc.size + 64, 2)
    cdef double start
    cdef int i
    times = []
    for i in range(repeats + 1):  # the first: warm-up (the workspace's first touch)
        start = now()
        plan.run(data_ptr(diff_dst), data_ptr(weights), data_ptr(diff_src))
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
    if isinstance(plan, (SubgridForwardPlan, GemmForwardPlan)):
        return time_forward_run(plan, repeats)
    if isinstance(plan, (GemmBackwardWeightsPlan, SubgridBackwardWeightsPlan)):
        return time_backward_weights_run(plan, repeats)
    if isinstance(plan, GemmBackwardDataPlan):
        return time_backward_data_run(plan, repeats)
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
