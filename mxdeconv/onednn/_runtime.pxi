# Included by _ops.pyx (one module, textual include): per-thread state (a
# oneDNN stream and a primitive cache per thread), the OpenMP thread count,
# and what a forked child must do (run single-threaded).

# ----------------------------------------------------------------------------
# Per-thread state and the OpenMP thread count
# ----------------------------------------------------------------------------
#: Largest thread count accepted: libgomp crashes on absurd counts (10**6).
MAX_THREADS = 1024
_tls = threading.local()
cdef int _requested_threads = 0   # 0: OMP_NUM_THREADS, which GNU OpenMP applies itself
cdef long _thread_epoch = 0       # bumped to make every thread re-apply the count
cdef bint _team_started = False   # an OpenMP team of > 1 threads ran in this process
cdef bint _forked_child = False   # forked after a team ran: more threads would hang
#: Where the thread count in force came from, in words (runtime_info, explain).
cdef object _threads_source = "GNU OpenMP's default"
#: While the default count is in force: the LoadFollower that resizes the team
#: to the CPUs other processes leave free (None: the count stays as it is).
cdef object _follower = None
cdef double _next_look = 0.0   # CLOCK_MONOTONIC seconds
cdef double _look_interval = _cpu_load.LOOK_INTERVAL


cdef class ThreadState:
    """What each Python thread owns: a oneDNN stream (streams are not
    thread-safe), its primitive cache and the OpenMP thread count applied."""

    def __cinit__(self):
        check(dnnl_stream_create(&self.stream, engine(), dnnl_stream_default_flags),
              "stream creation")
        self.cache = LRUCache()
        self.epoch = -1

    def __dealloc__(self):
        global current_thread_state
        if current_thread_state == <PyObject *>self:
            current_thread_state = NULL
        if self.stream != NULL:
            dnnl_stream_destroy(self.stream)


cdef extern from *:
    """
    /* This OS thread's ThreadState, borrowed from the threading.local that
       owns it: one load instead of a threading.local lookup on every call. */
    static __thread PyObject *current_thread_state = NULL;
    """
    PyObject *current_thread_state


cdef ThreadState thread_state():
    global current_thread_state
    if current_thread_state != NULL:
        return <ThreadState>current_thread_state
    state = getattr(_tls, "state", None)
    if state is None:
        state = _tls.state = ThreadState()
    current_thread_state = <PyObject *>state
    return <ThreadState>state


cdef int thread_count(ThreadState state) except -1:
    """Apply set_num_threads() to this thread (OpenMP keeps it per thread)."""
    if state.epoch != _thread_epoch:
        if _requested_threads:
            omp_set_num_threads(_requested_threads)
        state.epoch = _thread_epoch
    return omp_get_max_threads()


cdef int _set_threads(int count):
    global _requested_threads, _thread_epoch
    _requested_threads = count
    _thread_epoch += 1
    return 0


cdef inline double monotonic_seconds() noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now.tv_sec + now.tv_nsec * 1e-9


cdef int follow_load() except -1:
    """At the start of a call, at most every LOOK_INTERVAL: let the load
    follower resize the default team (a clock read otherwise)."""
    global _next_look
    if _follower is None:
        return 0
    cdef double now = monotonic_seconds()
    if now < _next_look:
        return 0
    _next_look = now + _look_interval
    cdef int team = _follower.look(now)
    if team != _requested_threads and _follower is not None:
        _set_threads(team)
    return 0


def load_follower():
    """The LoadFollower resizing the default team, or None."""
    return _follower


def set_num_threads(count):
    """Use ``count`` OpenMP threads (1..MAX_THREADS) in every oneDNN call from now on."""
    count = int_arg("set_num_threads: count", count)
    if count < 1:
        raise MXNetError(f"set_num_threads needs a count >= 1, got {count}")
    if count > MAX_THREADS:
        raise MXNetError(f"set_num_threads needs a count <= {MAX_THREADS} (MAX_THREADS), "
                         f"got {count}")
    if _forked_child and count > 1:
        raise MXNetError(
            f"set_num_threads: count must be 1 in a process forked after oneDNN ran "
            f"with several threads, got {count}: GNU OpenMP cannot start threads after "
            "fork() (use multiprocessing's 'spawn' or 'forkserver' start method)")
    global _threads_source, _follower
    _follower = None
    _set_threads(count)
    _threads_source = f"set_num_threads({count})"
    thread_count(thread_state())


def num_threads_source():
    """Where the thread count in force came from: ``set_num_threads``,
    ``OMP_NUM_THREADS``, the affinity mask or the cgroup CPU quota (the
    default, and whether it follows the load), or a fork."""
    if _follower is not None:
        return (f"{_threads_source}; following the load: {_requested_threads} of "
                f"{_follower.most} now")
    return _threads_source


def get_num_threads():
    """The number of OpenMP threads oneDNN calls from this thread use."""
    return thread_count(thread_state())


cdef int enter_threads(int threads):
    """Make this thread's OpenMP count ``threads`` (1 in a forked child); returns
    the count to give back to leave_threads()."""
    cdef int ambient = omp_get_max_threads()
    if _forked_child:
        threads = 1
    if threads != ambient:
        omp_set_num_threads(threads)
    return ambient


cdef void leave_threads(int ambient):
    if omp_get_max_threads() != ambient:
        omp_set_num_threads(ambient)


cdef class using_threads:
    """``with using_threads(n):`` this thread plans and creates primitives for
    ``n`` OpenMP threads (the planner tries fewer threads on small layers)."""
    cdef int count, saved

    def __cinit__(self, int count):
        self.count = 1 if _forked_child else count

    def __enter__(self):
        self.saved = omp_get_max_threads()
        omp_set_num_threads(self.count)
        return self

    def __exit__(self, *exc):
        omp_set_num_threads(self.saved)
        return False


def _omp_num_threads_word(int count):
    """OMP_NUM_THREADS when GNU OpenMP took it (a positive integer, or a comma
    list starting with one, that is the count it starts with), else None:
    libgomp ignores junk and overflowing values, with a message on stderr."""
    value = os.environ.get("OMP_NUM_THREADS")
    first = (value or "").split(",")[0].strip()
    taken = first.isdigit() and 0 < int(first) and (int(first) == count
                                                    or count > MAX_THREADS)
    return value if taken else None


def _default_threads(usable=None):
    """Choose the thread count at import.  ``OMP_NUM_THREADS`` wins when set.
    Otherwise the CPUs this process can really run on (``_core.cpus``: the
    affinity mask and the cgroup CPU quota, whichever is smaller): GNU OpenMP
    follows the mask but not a container's quota, and a team larger than the
    quota waits at every barrier for a throttled thread.  A huge
    OMP_NUM_THREADS is a mistake survived with a warning (capping at
    MAX_THREADS was not enough: a thousand threads on a small machine or under
    a container's task limit make libgomp abort the process, "Thread creation
    failed")."""
    global _threads_source
    cdef int count = omp_get_max_threads()
    word = _omp_num_threads_word(count)
    if word is not None and count <= MAX_THREADS:
        _threads_source = f"OMP_NUM_THREADS={word}"
        return
    if usable is None:
        usable = usable_cpus()
    chosen = min(usable.count, MAX_THREADS)
    if count > MAX_THREADS:
        warnings.warn(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')!r} asks for "
                      f"{count} threads, over mxdeconv's limit of {MAX_THREADS}; oneDNN "
                      f"runs on this process's {chosen} CPU(s) instead", RuntimeWarning,
                      stacklevel=2)
        _threads_source = (f"{usable.source}, OMP_NUM_THREADS="
                           f"{os.environ.get('OMP_NUM_THREADS')} being over {MAX_THREADS}")
    else:
        _threads_source = usable.source
    _set_threads(chosen)
    omp_set_num_threads(chosen)   # this thread's default from now on, too
    _start_following(chosen, usable.mask)


def _start_following(int most, mask):
    """Follow the load with a default team of ``most`` > 1 threads on the CPUs
    of ``mask`` (None: all), unless MXDECONV_FOLLOW_LOAD=off or the kernel's
    counts cannot be read."""
    global _follower
    _follower = None
    if most < 2 or env_word("MXDECONV_FOLLOW_LOAD", "on") != "on":
        return
    follower = _cpu_load.LoadFollower(most, _cpu_load.CpuTimes(mask))
    if follower.readable():
        _follower = follower


def _after_fork_in_child():
    """A forked child inherits libgomp's thread team as dead threads: its next
    parallel region would wait for them forever.  One thread never starts a
    team, so the child runs single-threaded (PyTorch does the same)."""
    global _forked_child, _threads_source, _follower
    if _team_started:
        _forked_child = True
        _follower = None
        _set_threads(1)
        _threads_source = "a process forked after oneDNN ran with several threads: 1"
        state = getattr(_tls, "state", None)
        if state is not None:  # its primitives were planned for the parent's team
            (<ThreadState>state).cache.clear()


_default_threads()
os.register_at_fork(after_in_child=_after_fork_in_child)
