# The oneDNN layer's C-level interface, for the modules that cimport it
# (_exec.pyx runs prepared calls on NDArrays with these, at C speed).
# Everything is defined in _ops.pyx.
cimport numpy as cnp
from ._dnnl cimport *


cdef class LRUCache:
    cdef object entries
    cdef object fixed_capacity
    cdef readonly long hits, misses, evictions
    cdef unsigned long long clock
    cpdef object get(self, key)
    cpdef object peek(self, key)
    cpdef put(self, key, value)
    cdef trim(self)


cdef class ThreadState:
    cdef dnnl_stream_t stream
    cdef LRUCache cache
    cdef long epoch
    cdef object workspace   # scratch of the GEMM plans run on this thread (or None)


cdef class MemoryDesc:
    cdef dnnl_memory_desc_t md
    cdef readonly object layout, dims, dtype, key
    cdef readonly size_t size
    cdef Py_hash_t key_hash


cdef class Layout:
    cdef readonly MemoryDesc desc, plain
    cdef readonly str role
    cdef readonly tuple shape
    cdef readonly int groups
    cdef readonly bint is_plain
    cdef readonly object np_dtype
    cdef bint same_tensor(self, Layout other)
    cdef object element_offsets(self, tuple index)


cdef class PrimitiveDesc:
    cdef dnnl_primitive_desc_t pd
    # The forward descriptor a backward one was created against: oneDNN's
    # implementation iterator keeps a pointer to it (next_impl() reads it).
    cdef PrimitiveDesc hint
    cdef str impl(self)
    cdef MemoryDesc query(self, dnnl_query_t what, int index, str role, bint grouped=*)
    cdef bint next_impl(self) except -1
    cdef PrimitiveDesc clone(self)


cdef class Attr:
    cdef dnnl_primitive_attr_t attr


cdef enum:
    MAX_ARGS = 6


cdef class Primitive:
    cdef dnnl_primitive_t prim
    cdef dnnl_exec_arg_t args[MAX_ARGS]
    cdef int nargs
    cdef readonly int threads
    cdef readonly str impl
    cdef int run(self, void **handles) except -1


cdef class Candidate:
    cdef readonly PrimitiveDesc pd
    cdef readonly str family, weights, impl
    cdef readonly object act_type
    cdef readonly bint bias_fused, act_fused
    cdef readonly bint direct   # a convolution run directly (see direct_conv_pd)
    cdef readonly int index
    # Its variant of _variants (data family, weights family, bias fused,
    # activation fused, direct prefix) and its layouts (each tensor's key):
    # with the implementation's name they find it again among that variant's
    # candidates alone (planner._rebuild).
    cdef readonly tuple variant, layouts
    cdef object builder


# A data tensor's channels as the bias loop walks them: ``planes`` runs of
# ``rows`` rows of ``width`` channels each, plane p holding the channels
# [(p % blocks) * width, + width) (those below ``channels``).
cdef struct ChannelBlocks:
    Py_ssize_t planes, blocks, rows, width, channels


cdef class ForwardPlan:
    cdef readonly Primitive prim, bias_prim, act_prim
    cdef readonly Layout src, weights, bias, dst
    cdef readonly str impl, family
    cdef readonly object act_type
    cdef readonly bint bias_fused, act_fused, direct
    cdef ChannelBlocks bias_blocks   # planes > 0: mxdeconv adds the bias
    cdef readonly int threads
    cdef public object choice
    cdef int run(self, void *src, void *weights, void *bias, void *dst,
                 bint activate=*) except -1


cdef class BackwardDataPlan:
    cdef readonly Primitive prim
    cdef readonly Layout diff_dst, weights, diff_src
    cdef readonly str impl, family
    cdef readonly bint direct
    cdef readonly int threads
    cdef public object choice
    cdef int run(self, void *diff_dst, void *weights, void *diff_src) except -1


cdef class BackwardWeightsPlan:
    cdef readonly Primitive prim
    cdef readonly Layout src, diff_dst, diff_weights, diff_bias
    cdef readonly str impl, family
    cdef readonly bint direct
    cdef ChannelBlocks bias_blocks   # planes > 0: mxdeconv sums the bias gradient
    cdef readonly int threads
    cdef public object choice
    cdef int run(self, void *src, void *diff_dst, void *diff_weights,
                 void *diff_bias) except -1


# A layer's sizes as the im2col gather walks them: 1-D and 2-D layers as 3-D
# ones with leading axes of extent 1.
cdef struct TapGather:
    Py_ssize_t channels_in, channels_out, groups, in_per_group, out_per_group, taps
    Py_ssize_t in_pixels, out_pixels
    Py_ssize_t in_size[3]
    Py_ssize_t out_size[3]
    Py_ssize_t kernel[3]
    Py_ssize_t stride[3]
    Py_ssize_t dilate[3]
    Py_ssize_t pad[3]


cdef class GemmBackwardWeightsPlan(BackwardWeightsPlan):
    cdef TapGather taps
    cdef readonly Py_ssize_t images, chunk   # images per GEMM (the last may have fewer)
    cdef bint weights_plain   # diff_weights in MXNet's layout, else transposed


cdef class GemmBackwardDataPlan(BackwardDataPlan):
    cdef TapGather taps
    cdef readonly Py_ssize_t images, chunk   # images per GEMM (the last may have fewer)


cdef class GemmForwardPlan(ForwardPlan):
    cdef TapGather taps
    cdef readonly Py_ssize_t images


cdef bint gemm_pair(BackwardDataPlan data, BackwardWeightsPlan weights)
cdef int run_gemm_backward(GemmBackwardDataPlan data, GemmBackwardWeightsPlan weights,
                           void *diff_dst, void *weight, void *diff_src, void *src,
                           void *diff_weights, void *diff_bias) except -1
cdef ThreadState thread_state()
cdef int enter_threads(int threads)
cdef void leave_threads(int ambient)
cdef int thread_count(ThreadState state) except -1
cdef int follow_load() except -1
cdef cnp.ndarray new_buffer(MemoryDesc desc)
cdef cnp.ndarray new_plain_array(Layout layout)
cdef object plain_view(cnp.ndarray buffer, Layout layout)
cdef int run_reorder(MemoryDesc src, cnp.ndarray src_buf, MemoryDesc dst,
                     cnp.ndarray dst_buf, bint accumulate, label) except -1
cdef cnp.ndarray reordered(MemoryDesc src, cnp.ndarray src_buf, MemoryDesc dst, label)


cdef inline void *data_ptr(cnp.ndarray buffer):
    return cnp.PyArray_DATA(buffer)


# A data tensor and its output sub-grid (semantics/subgrid.py) as the sub-grid
# loops walk them, in one layout: ``planes`` (image, channel block) planes of
# pixels ``width`` channels wide (``blocks`` blocks a plane); 1-D and 2-D
# layers as 3-D ones with leading axes of extent 1.  Sub-grid pixel t of an
# axis is full pixel first + step * t.
cdef struct SubGridWalk:
    Py_ssize_t planes, blocks, width, channels
    Py_ssize_t out_size[3]
    Py_ssize_t sub_size[3]
    Py_ssize_t step[3]
    Py_ssize_t first[3]


cdef class SubgridForwardPlan(ForwardPlan):
    cdef readonly ForwardPlan inner
    cdef SubGridWalk walk
    cdef Py_ssize_t sub_floats   # the inner plan's dst, in floats


cdef class SubgridBackwardWeightsPlan(BackwardWeightsPlan):
    cdef readonly BackwardWeightsPlan inner
    cdef SubGridWalk walk
    cdef Py_ssize_t sub_floats   # the inner plan's diff_dst, in floats
