# Included by _ops.pyx (one module, textual include): the one cache policy,
# LRUCache, a bounded map with least-recently-used eviction and counters, and
# the primitive-cache bound (_capacity) it follows.

# ----------------------------------------------------------------------------
# The one cache policy: a bounded LRU map
# ----------------------------------------------------------------------------
#: Largest cache bound accepted (entries hold compiled kernels: far more is a typo).
MAX_CACHE_CAPACITY = 1 << 20
DEFAULT_CACHE_CAPACITY = 1024


cdef Py_ssize_t _capacity = env_int("MXDECONV_PRIMITIVE_CACHE_CAPACITY", DEFAULT_CACHE_CAPACITY,
                                    0, MAX_CACHE_CAPACITY)


cdef class _Entry:
    """A cached value and when it was last used (the cache's clock)."""
    cdef object value
    cdef unsigned long long used


cdef class LRUCache:
    """A bounded map with least-recently-used eviction and hit/miss counters.

    A hit only stamps its entry with the cache's clock (one hash of the key,
    where reordering an OrderedDict would hash it twice); a put beyond the
    capacity evicts the entries with the oldest stamps.  Puts follow planning
    or a full call, so their scan is small beside what they follow.

    ``capacity`` None follows the primitive-cache bound (set_cache_capacity).
    """

    def __cinit__(self, capacity=None):
        self.entries = {}
        self.fixed_capacity = capacity

    cpdef object get(self, key):
        cdef _Entry entry = self.entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self.clock += 1
        entry.used = self.clock
        return entry.value

    cpdef object peek(self, key):
        """The value for ``key`` (None if absent), neither counted nor stamped."""
        cdef _Entry entry = self.entries.get(key)
        return None if entry is None else entry.value

    cpdef put(self, key, value):
        cdef _Entry entry = _Entry.__new__(_Entry)
        entry.value = value
        self.clock += 1
        entry.used = self.clock
        self.entries[key] = entry
        self.trim()

    cdef trim(self):
        cdef _Entry entry
        limit = _capacity if self.fixed_capacity is None else self.fixed_capacity
        excess = len(self.entries) - limit
        if excess <= 0:
            return
        # The ``excess`` oldest stamps go (a snapshot: another thread may
        # change the dict between these lines).
        oldest = heapq.nsmallest(excess, list(self.entries.items()), key=_stamp)
        for key, entry in oldest:
            if self.entries.pop(key, None) is not None:
                self.evictions += 1

    def clear(self):
        self.entries.clear()

    def __len__(self):
        return len(self.entries)


def _stamp(item):
    return (<_Entry>item[1]).used
