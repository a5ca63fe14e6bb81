# Included by _ops.pyx (one module, textual include): the owning classes of
# oneDNN's primitive descriptors, attributes (eltwise post-ops) and primitives.

# ----------------------------------------------------------------------------
# Owned primitive descriptors, attributes and primitives
# ----------------------------------------------------------------------------
cdef class PrimitiveDesc:
    """An owned oneDNN primitive descriptor; ``next_impl()`` moves to oneDNN's
    next implementation of the same operation."""

    def __dealloc__(self):
        if self.pd != NULL:
            dnnl_primitive_desc_destroy(self.pd)

    cdef str impl(self):
        cdef const char *name = NULL
        check(dnnl_primitive_desc_query(self.pd, dnnl_query_impl_info_str, 0, &name),
              "implementation query")
        return name.decode() if name != NULL else "?"

    cdef MemoryDesc query(self, dnnl_query_t what, int index, str role, bint grouped=False):
        cdef const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(self.pd, what, index)
        if md == NULL:
            raise MXNetError(f"oneDNN {self.impl()} has no memory descriptor for "
                             f"{role} (query {<int>what}, index {index})")
        return wrap_md(md, role, grouped)

    cdef bint next_impl(self) except -1:
        cdef dnnl_status_t status = dnnl_primitive_desc_next_impl(self.pd)
        if status == dnnl_last_impl_reached:
            return False
        check(status, "moving to the next implementation")
        return True

    cdef PrimitiveDesc clone(self):
        cdef PrimitiveDesc copy = PrimitiveDesc.__new__(PrimitiveDesc)
        check(dnnl_primitive_desc_clone(&copy.pd, self.pd), "primitive descriptor clone")
        copy.hint = self.hint
        return copy


#: MXNet's act_type -> (oneDNN eltwise algorithm, alpha, beta) for the
#: activations oneDNN 3.2 computes.  It has no softsign (x / (1 + |x|)).
_ELTWISE = {
    "relu": (dnnl_eltwise_relu, 0.0, 0.0),          # alpha: the slope below 0
    "sigmoid": (dnnl_eltwise_logistic, 0.0, 0.0),
    "tanh": (dnnl_eltwise_tanh, 0.0, 0.0),
    "softrelu": (dnnl_eltwise_soft_relu, 1.0, 0.0),  # v3: log(1 + exp(alpha x)) / alpha
}
#: The act_types oneDNN can apply (fused as a post-op, or as an eltwise primitive).
ELTWISE_ACTIVATIONS = tuple(_ELTWISE)


def _eltwise(act_type):
    """(algorithm, alpha, beta) of ``act_type``, or MXNetError naming what oneDNN has."""
    try:
        return _ELTWISE[act_type]
    except (KeyError, TypeError):
        raise MXNetError(f"oneDNN {onednn_version()} has no eltwise algorithm for "
                         f"act_type={act_type!r}; it computes {ELTWISE_ACTIVATIONS}") from None


cdef class Attr:
    """Owned primitive attributes.  ``activation`` (an act_type) adds an eltwise
    post-op, ``accumulate`` a sum post-op after it: dst = [dst +] act(result)
    (MXNet's req=kAddTo in one pass)."""

    def __cinit__(self, bint accumulate, activation=None):
        cdef dnnl_post_ops_t post_ops = NULL
        cdef int alg
        cdef float alpha, beta
        check(dnnl_primitive_attr_create(&self.attr), "attribute creation")
        if not accumulate and activation is None:
            return
        if activation is not None:
            alg, alpha, beta = _eltwise(activation)
        check(dnnl_post_ops_create(&post_ops), "post-op creation")
        try:
            if activation is not None:
                check(dnnl_post_ops_append_eltwise(post_ops, <dnnl_alg_kind_t>alg, alpha, beta),
                      f"{activation} eltwise post-op")
            if accumulate:
                check(dnnl_post_ops_append_sum(post_ops, 1.0, 0, dnnl_data_type_undef),
                      "sum post-op")
            check(dnnl_primitive_attr_set_post_ops(self.attr, post_ops), "post-op attribute")
        finally:
            dnnl_post_ops_destroy(post_ops)

    def __dealloc__(self):
        if self.attr != NULL:
            dnnl_primitive_attr_destroy(self.attr)


cdef class Primitive:
    """A oneDNN primitive with one memory object per execution argument.

    The memory objects are created once; each execution only swaps the data
    handles, so a cached primitive costs no allocation per call.
    """

    def __dealloc__(self):
        cdef int i
        for i in range(self.nargs):
            if self.args[i].memory != NULL:
                dnnl_memory_destroy(self.args[i].memory)
        if self.prim != NULL:
            dnnl_primitive_destroy(self.prim)

    cdef int run(self, void **handles) except -1:
        global _team_started
        cdef dnnl_stream_t stream = thread_state().stream
        cdef dnnl_status_t status = dnnl_success
        cdef int i
        # Run with the OpenMP team the primitive was planned for (the planner
        # may choose fewer threads than the caller's count for a small layer).
        cdef int ambient = omp_get_max_threads()
        cdef int threads = 1 if _forked_child else self.threads
        if threads > 1:
            _team_started = True
        if threads != ambient:
            omp_set_num_threads(threads)
        with nogil:
            for i in range(self.nargs):
                status = dnnl_memory_set_data_handle(self.args[i].memory, handles[i])
                if status != dnnl_success:
                    break
            if status == dnnl_success:
                status = dnnl_primitive_execute(self.prim, stream, self.nargs, self.args)
            if status == dnnl_success:
                status = dnnl_stream_wait(stream)
        if threads != ambient:
            omp_set_num_threads(ambient)
        if status != dnnl_success:
            check(status, "execution of " + self.impl)
        return 0


cdef Primitive make_primitive(PrimitiveDesc pd, list args):
    """The primitive of ``pd``; ``args`` = [(execution arg id, its MemoryDesc)]."""
    cdef Primitive p = Primitive.__new__(Primitive)
    cdef MemoryDesc desc
    p.impl = pd.impl()
    p.threads = omp_get_max_threads()  # oneDNN plans its OpenMP team at creation
    if len(args) > MAX_ARGS:  # p.args is a C array: never write past it
        raise MXNetError(f"{p.impl}: {len(args)} execution arguments, at most {MAX_ARGS}")
    for arg, desc in args:
        p.args[p.nargs].arg = arg
        check(dnnl_memory_create(&p.args[p.nargs].memory, desc.md, engine(),
                                 DNNL_MEMORY_NONE), "memory creation")
        p.nargs += 1
    check(dnnl_primitive_create(&p.prim, pd.pd), f"primitive creation ({p.impl})")
    return p
