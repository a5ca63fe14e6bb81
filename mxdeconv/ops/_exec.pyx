# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""Running oneDNN plans on NDArrays, and prepared calls.

This is the glue between the NDArray layer and the oneDNN layer (``_ops``,
which speaks buffers and descriptors only): it moves arrays into the layouts a
plan wants (``input_buffer``), keeps inference weights in them
(``weight_buffer``), writes results into targets (``Output``) and runs the
plans with the GIL released.

It also holds the prepared calls: everything that depends only on a call's
*signature* (its parameters, the shapes and dtypes of its arrays, the mode,
``req``, the thread count, the dispatch switches and the tuner's switch) is
validated and planned once by the full path (``ops.full_path``), which keeps
the result here (``keep``) as a prepared call in this thread's cache; the
compiled entries (``ops._fastpath``) find it there and run it.  This module
imports nothing of the package above it: the full path imports it, and the
entries cimport its declarations (``_exec.pxd``).
"""
cimport numpy as cnp

from mxdeconv.onednn._ops cimport (
    BackwardDataPlan, BackwardWeightsPlan, ForwardPlan, Layout, MemoryDesc, data_ptr,
    enter_threads, gemm_pair, leave_threads, new_buffer, new_plain_array, plain_view, reordered,
    run_gemm_backward, run_reorder, thread_state)
from mxdeconv._core.errors import MXNetError
from . import registry
from mxdeconv.autograd import tape
from mxdeconv._core._ndbase cimport NDArrayBase, new_ndarray
from mxdeconv.ndarray.ndarray import NDArray

cnp.import_array()


# ----------------------------------------------------------------------------
# NDArrays in and out of the layouts plans want
# ----------------------------------------------------------------------------
cdef cnp.ndarray input_buffer(NDArrayBase arr, Layout wanted, label):
    """``arr``'s values in layout ``wanted``: its own buffer, or a reordered
    temporary (counted under ``label`` in reorder_counts())."""
    buffer, have = arr._state
    if have is None:
        if wanted.is_plain:
            return buffer
        return reordered(wanted.plain, buffer, wanted.desc, label)
    if have is wanted or have == wanted:
        return buffer
    if (<Layout>have).same_tensor(wanted):
        return reordered((<Layout>have).desc, buffer, wanted.desc, label)
    # The bytes hold another tensor's layout (the array was a weight, now it is
    # data, say): its values go through the default layout first.
    buffer = arr._plain()
    if wanted.is_plain:
        return buffer
    return reordered(wanted.plain, buffer, wanted.desc, label)


cdef cnp.ndarray weight_buffer(NDArrayBase weight, Layout wanted, bint training):
    """Inference keeps the weight in the primitive's layout after the first
    reorder (MXNet's MKLDNNDataReorderAsync), unless its memory is exposed.
    Training leaves the NDArray in the default layout so optimizer code sees
    plain memory (Reorder2DefaultAsync), and keeps the reordered copy beside it
    for the forward and backward-data passes while the weight's version (every
    write through mxdeconv bumps it) is unchanged; exposed memory is never
    trusted to be unchanged."""
    if training:
        if weight._state[1] is not None:
            weight._plain()
        if wanted.is_plain:
            return weight._state[0]
        derived = weight._derived
        if derived is not None and not weight._exposed:
            kept = derived.get(wanted)
            if kept is not None and kept[0] == weight._version:
                return kept[1]
        buffer = input_buffer(weight, wanted, "weights")
        if not weight._exposed:
            if derived is None or len(derived) >= 2:
                derived = weight._derived = {}
            derived[wanted] = (weight._version, buffer)
        return buffer
    buffer = input_buffer(weight, wanted, "weights")
    state = weight._state
    if buffer is not state[0]:
        if wanted.is_plain:
            weight._adopt(state, plain_view(buffer, wanted), None)
        else:
            weight._adopt(state, buffer, wanted)
    return buffer


cdef class Output:
    """Where a primitive writes one result, and how it reaches its target.

    With no target array the primitive writes a fresh buffer in its preferred
    layout (or, for ``plain`` results such as weight gradients, a default-layout
    array).  With a target in the primitive's layout it writes in place (for
    req=add only when the primitive itself accumulates).  Otherwise it writes a
    temporary that a reorder then writes or adds into the target.
    """
    cdef NDArrayBase target
    cdef cnp.ndarray buffer, target_buffer
    cdef Layout layout
    cdef MemoryDesc target_desc
    cdef bint accumulate, finish


cdef Output make_output(Layout layout, NDArrayBase target, bint accumulate,
                        bint fused_accumulate, bint plain):
    cdef Output o = Output.__new__(Output)
    o.layout, o.accumulate, o.finish = layout, accumulate, False
    if target is None:
        if layout.is_plain:
            o.buffer = new_plain_array(layout)
            return o
        if not plain:
            o.buffer = new_buffer(layout.desc)
            return o
        target = new_result(new_plain_array(layout), None, layout)
    o.target = target
    buffer, have = target._state
    if have is not None and not (<Layout>have).same_tensor(layout):
        buffer, have = target._plain(), None   # another tensor's layout: values first
    o.target_buffer = buffer
    o.target_desc = layout.plain if have is None else (<Layout>have).desc
    in_place = layout.is_plain if have is None else (have is layout or have == layout)
    if in_place and (fused_accumulate or not accumulate):
        o.buffer = buffer
        return o
    o.buffer = new_buffer(layout.desc)
    o.finish = True
    if accumulate and fused_accumulate:  # the primitive adds onto dst: seed it
        run_reorder(o.target_desc, o.target_buffer, layout.desc, o.buffer, False, "out")
        o.accumulate = False
    return o


cdef object finish_output(Output o):
    """The result NDArray, after the reorder into its target if one is due."""
    if o.finish:
        run_reorder(o.layout.desc, o.buffer, o.target_desc, o.target_buffer, o.accumulate,
                    "out")
    if o.target is not None:
        o.target._version += 1   # NDArray._bump(): a write through mxdeconv
        return o.target
    if o.layout.is_plain:
        return new_result(o.buffer, None, o.layout)   # made by new_plain_array()
    return new_result(o.buffer, o.layout, o.layout)


cdef inline object new_result(cnp.ndarray buffer, Layout held, Layout tensor):
    """A result NDArray owning ``buffer`` in layout ``held`` (None: the default
    layout) of ``tensor``'s shape and dtype."""
    return new_ndarray(NDArray, buffer, held, tensor.shape, tensor.np_dtype)


cdef object run_forward(ForwardPlan plan, data, weight, bias, out, bint accumulate,
                        bint training):
    # The whole call (its reorders too) runs with the plan's OpenMP team: the
    # planner may choose one thread for a small layer.
    cdef int ambient = enter_threads(plan.threads)
    try:
        # Every buffer stays in a local until run(): a temporary must outlive
        # the execution that reads it.
        src = input_buffer(data, plan.src, "data")
        wei = weight_buffer(weight, plan.weights, training)
        bias_buf = None if plan.bias is None else input_buffer(bias, plan.bias, "bias")
        dst = make_output(plan.dst, out, accumulate, True, False)
        plan.run(data_ptr(src), data_ptr(wei),
                 NULL if bias_buf is None else data_ptr(bias_buf),
                 data_ptr((<Output>dst).buffer))
        return finish_output(dst)
    finally:
        leave_threads(ambient)


def deconv_forward(ForwardPlan plan not None, data, weight, bias, out, bint accumulate,
                   bint training):
    """Run the forward pass; returns ``out`` or a new NDArray (maybe blocked)."""
    return run_forward(plan, data, weight, bias, out, accumulate, training)


cdef inline bint shares_diff_dst(BackwardDataPlan data_plan, BackwardWeightsPlan weights_plan):
    """Whether both passes read out_grad in one layout (one reorder serves both)."""
    return (data_plan.diff_dst is weights_plan.diff_dst
            or data_plan.diff_dst == weights_plan.diff_dst)


cdef int three(str name, tuple value) except -1:
    """Refuse a per-gradient tuple that is not three long: they are indexed
    without bounds checks (this module's directives)."""
    if value is None or len(value) != 3:
        raise MXNetError(f"{name} must hold one entry per gradient (data, weight, bias), "
                         f"got {value!r}")
    return 0


cdef tuple run_backward(BackwardDataPlan data_plan, BackwardWeightsPlan weights_plan,
                        out_grad, data, weight, tuple grads, tuple accumulate, tuple needed):
    """Each pass runs on the thread count its plan was built for: the planner
    chooses them apart (a primitive must not run on more threads than it was
    created for), so the two may differ."""
    cdef Output diff_src, diff_weights, diff_bias
    cdef int ambient = -1, previous
    three("grads", grads)
    three("accumulate", accumulate)
    three("needed", needed)
    results = [None, None, None]
    diff_dst = None
    # Two GEMM plans of a layer share each chunk's im2col matrix: one run.
    cdef bint paired = needed[0] and (needed[1] or needed[2]) and \
        gemm_pair(data_plan, weights_plan)
    try:
        if needed[0]:
            ambient = enter_threads(data_plan.threads)
            diff_dst = input_buffer(out_grad, data_plan.diff_dst, "out_grad")
            diff_src = make_output(data_plan.diff_src, grads[0], accumulate[0], False, False)
            weight_buf = weight_buffer(weight, data_plan.weights, True)
            if not paired:
                data_plan.run(data_ptr(diff_dst), data_ptr(weight_buf),
                              data_ptr(diff_src.buffer))
                results[0] = finish_output(diff_src)
        if needed[1] or needed[2]:
            previous = enter_threads(weights_plan.threads)
            if ambient < 0:
                ambient = previous
            diff_weights = make_output(weights_plan.diff_weights,
                                       grads[1] if needed[1] else None, accumulate[1], False,
                                       needed[1])
            src_buf = input_buffer(data, weights_plan.src, "data")
            if diff_dst is None or not shares_diff_dst(data_plan, weights_plan):
                diff_dst = input_buffer(out_grad, weights_plan.diff_dst, "out_grad")
            bias_target = None
            if weights_plan.diff_bias is not None:
                diff_bias = make_output(weights_plan.diff_bias,
                                        grads[2] if needed[2] else None, accumulate[2], False,
                                        True)
                bias_target = diff_bias.buffer
            if paired:
                run_gemm_backward(data_plan, weights_plan, data_ptr(diff_dst),
                                  data_ptr(weight_buf), data_ptr(diff_src.buffer),
                                  data_ptr(src_buf), data_ptr(diff_weights.buffer),
                                  NULL if bias_target is None else data_ptr(bias_target))
                results[0] = finish_output(diff_src)
            else:
                weights_plan.run(data_ptr(src_buf), data_ptr(diff_dst),
                                 data_ptr(diff_weights.buffer),
                                 NULL if bias_target is None else data_ptr(bias_target))
            if needed[1]:
                results[1] = finish_output(diff_weights)
            if needed[2] and weights_plan.diff_bias is not None:
                results[2] = finish_output(diff_bias)
    finally:
        if ambient >= 0:
            leave_threads(ambient)
    return tuple(results)


def deconv_backward(BackwardDataPlan data_plan not None,
                    BackwardWeightsPlan weights_plan not None, out_grad,
                    data, weight, tuple grads, tuple accumulate, tuple needed):
    """Run the backward passes; returns ``(data_grad, weight_grad, bias_grad)``.

    ``grads`` holds target arrays (or None), ``accumulate`` and ``needed``
    one flag per gradient.  Backward primitives take no sum post-op, so req=add
    goes through a temporary that a reorder with a sum post-op adds in.
    """
    return run_backward(data_plan, weights_plan, out_grad, data, weight, grads, accumulate,
                        needed)


# ----------------------------------------------------------------------------
# Prepared calls (declared in _exec.pxd: ops._fastpath finds and runs them)
# ----------------------------------------------------------------------------
# This thread's modes and dispatch switches (threading.local objects, read
# once per call, without a Python function call).
cdef object _modes = tape.modes
cdef object _dispatch = registry.dispatch
cdef object ONEDNN = registry.ONEDNN


cdef class Serving:
    """How long a prepared call whose plan is still tuned on its calls may
    serve: ``calls_left`` more calls (-1: a settled plan, no limit), and only
    while ``planner.settlements`` is still ``generation`` (a layer settled, or
    finish_tuning() ran: the full path then takes the new choice).  When it
    runs out, the next call takes the full path, where the planner runs the
    unit of tuning those calls paid for (``planner.serve``; ``paid_by``: the
    plan they were paid to, refunded the calls not served when a settlement
    sends the call back early: ``planner.unserved``)."""

    def __cinit__(self):
        self.calls_left = -1


cdef class PreparedForward:
    """A validated, planned forward signature on the oneDNN path.  With an
    ``act_type`` (the plan applies it) ``record(result, inputs, params,
    act_type)`` records the call on the tape."""

    def __init__(self, ForwardPlan plan not None, bint training, bint accumulate, req,
                 act_type=None, record=None):
        self.plan, self.training, self.accumulate, self.req = plan, training, accumulate, req
        self.act_type, self.record = act_type, record
        self.serving = Serving()

    def run(self, data, weight, bias, out, params):
        return self.execute(data, weight, bias, out, params)

    cdef object execute(self, data, weight, bias, out, dict params):
        result = run_forward(self.plan, data, weight, bias, out, self.accumulate,
                             self.training)
        _dispatch.last = ONEDNN
        if _modes.recording:
            if self.act_type is None:
                tape.record_op("Deconvolution", result, (data, weight, bias), params)
            else:
                self.record(result, (data, weight, bias), params, self.act_type)
        return result


def keep(key, prepared):
    """Keep ``prepared`` as this thread's prepared call for ``key``."""
    thread_state().cache.put(key, prepared)


cdef class PreparedBackward:
    """A validated, planned backward signature on the oneDNN path."""

    def __init__(self, BackwardDataPlan data_plan not None,
                 BackwardWeightsPlan weights_plan not None, tuple reqs):
        three("reqs", reqs)
        self.data_plan, self.weights_plan = data_plan, weights_plan
        self.accumulate = tuple(r == "add" for r in reqs)
        self.needed = tuple(r != "null" for r in reqs)
        self.serving = Serving()

    def run(self, out_grad, data, weight, tuple grads):
        return self.execute(out_grad, data, weight, grads)

    cdef object execute(self, out_grad, data, weight, tuple grads):
        # A gradient whose req is "null" is not needed: run_backward leaves it None.
        results = run_backward(self.data_plan, self.weights_plan, out_grad, data, weight,
                               grads, self.accumulate, self.needed)
        _dispatch.last = ONEDNN
        return results
