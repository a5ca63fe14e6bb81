# Included by _ops.pyx (one module, textual include): the per-thread primitive
# cache as Python sees it (the planner's store, its bound, info and clearing),
# and the bound of oneDNN's own process-wide cache that follows it.

cdef LRUCache thread_cache():
    return thread_state().cache


def cache(key):
    """This thread's cached entry for ``key`` (None if absent): the planner's store."""
    return thread_cache().get(key)


def cache_peek(key):
    """This thread's cached entry for ``key`` (None if absent), neither counted
    as a hit or miss nor made recent: for looking at another key's plan."""
    return thread_cache().peek(key)


def cache_put(key, value):
    thread_cache().put(key, value)


def set_cache_capacity(capacity):
    """Bound every thread's primitive cache to ``capacity`` entries (0 disables it)."""
    global _capacity
    capacity = int_arg("set_cache_capacity: capacity", capacity)
    if capacity < 0:
        raise MXNetError(f"cache capacity must be >= 0, got {capacity}")
    if capacity > MAX_CACHE_CAPACITY:
        raise MXNetError(f"cache capacity must be <= {MAX_CACHE_CAPACITY}, got {capacity}")
    _capacity = capacity
    thread_cache().trim()
    # oneDNN keeps its own process-wide cache of primitives (its kernels' code
    # and scratch tables): bound it the same, or it keeps what ours evicts.
    check(dnnl_set_primitive_cache_capacity(<int>min(capacity, 1 << 30)),
          "setting oneDNN's primitive cache capacity")


def cache_info():
    """This thread's primitive cache: size, capacity, hits, misses, evictions."""
    cdef LRUCache lru = thread_cache()
    return {"size": len(lru), "capacity": _capacity, "hits": lru.hits,
            "misses": lru.misses, "evictions": lru.evictions}


def onednn_cache_capacity():
    """The capacity of oneDNN's own process-wide primitive cache."""
    cdef int capacity = 0
    check(dnnl_get_primitive_cache_capacity(&capacity), "reading oneDNN's cache capacity")
    return capacity


def clear_cache():
    """Empty this thread's primitive cache (counters are kept), its GEMM
    workspace and oneDNN's own process-wide cache, so that their memory is
    returned."""
    cdef int capacity = 0
    thread_cache().clear()
    thread_state().workspace = None
    _plain_mds.clear()
    check(dnnl_get_primitive_cache_capacity(&capacity), "reading oneDNN's cache capacity")
    check(dnnl_set_primitive_cache_capacity(0), "emptying oneDNN's primitive cache")
    check(dnnl_set_primitive_cache_capacity(capacity), "restoring oneDNN's cache capacity")
