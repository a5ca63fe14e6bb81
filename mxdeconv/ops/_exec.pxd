"""What ``ops._fastpath`` cimports from ``ops._exec``: the prepared calls it
finds in this thread's cache and runs (``execute``), and how long they serve."""
from mxdeconv.onednn._ops cimport BackwardDataPlan, BackwardWeightsPlan, ForwardPlan


cdef class Serving:
    cdef public long calls_left
    cdef public object generation
    cdef public object paid_by


cdef class PreparedForward:
    cdef ForwardPlan plan
    cdef bint training, accumulate
    cdef object req, act_type, record
    cdef readonly Serving serving

    cdef object execute(self, data, weight, bias, out, dict params)


cdef class PreparedBackward:
    cdef BackwardDataPlan data_plan
    cdef BackwardWeightsPlan weights_plan
    cdef tuple accumulate, needed
    cdef readonly Serving serving

    cdef object execute(self, out_grad, data, weight, tuple grads)
