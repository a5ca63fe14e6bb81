# Included by _ops.pyx (one module, textual include): reorders between
# layouts (cached primitives, counted runs, plain <-> blocked).

# ----------------------------------------------------------------------------
# Reorders
# ----------------------------------------------------------------------------
cdef Primitive make_reorder(MemoryDesc src, MemoryDesc dst, bint accumulate):
    """dst = [dst +] src, converting layouts."""
    cdef Attr attr = Attr(accumulate)
    cdef PrimitiveDesc pd = PrimitiveDesc.__new__(PrimitiveDesc)
    check(dnnl_reorder_primitive_desc_create(&pd.pd, src.md, engine(), dst.md, engine(),
                                             attr.attr),
          f"reorder {src.layout} -> {dst.layout}")
    return make_primitive(pd, [(DNNL_ARG_FROM, src), (DNNL_ARG_TO, dst)])


cdef Primitive reorder_primitive(MemoryDesc src, MemoryDesc dst, bint accumulate):
    """The cached reorder of this thread (made on first use)."""
    cdef ThreadState state = thread_state()
    # The thread count is part of the key: oneDNN plans a primitive's OpenMP
    # team when it creates it.
    key = (src, dst, accumulate, thread_count(state))
    cdef LRUCache lru = state.cache
    cdef Primitive prim = lru.get(key)
    if prim is None:
        prim = make_reorder(src, dst, accumulate)
        lru.put(key, prim)
    return prim


cdef int run_reorder(MemoryDesc src, cnp.ndarray src_buf, MemoryDesc dst,
                     cnp.ndarray dst_buf, bint accumulate, label) except -1:
    """dst_buf (layout ``dst``) = [dst_buf +] src_buf (layout ``src``), counted
    under ``label`` in reorder_counts().  ``label`` None: a one-off reorder of
    the planner's checks, neither counted nor cached."""
    cdef void *handles[2]
    handles[0] = data_ptr(src_buf)
    handles[1] = data_ptr(dst_buf)
    if label is None:
        make_reorder(src, dst, accumulate).run(handles)
        return 0
    reorder_primitive(src, dst, accumulate).run(handles)
    _reorders[label] = _reorders.get(label, 0) + 1
    return 0


cdef cnp.ndarray reordered(MemoryDesc src, cnp.ndarray src_buf, MemoryDesc dst, label):
    """A new buffer holding ``src_buf`` in layout ``dst``."""
    cdef cnp.ndarray out = new_buffer(dst)
    run_reorder(src, src_buf, dst, out, False, label)
    return out


cdef cnp.ndarray from_plain(Layout wanted, values):
    """Default-layout ``values`` (of ``wanted``'s tensor) in layout ``wanted``."""
    cdef cnp.ndarray plain = np.ascontiguousarray(values, dtype=wanted.np_dtype)
    if wanted.is_plain:
        return plain
    return reordered(wanted.plain, plain, wanted.desc, None)
