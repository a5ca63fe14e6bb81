# The fields of an NDArray, for the compiled modules that cimport them
# (_exec.pyx reads and writes them as C struct fields).  Defined in _ndbase.pyx.

cdef class NDArrayBase:
    # (buffer, layout): the bytes and what they hold, swapped as one tuple
    cdef public object _state
    # the NDArray shape (a tuple) and dtype (a NumPy dtype)
    cdef public object _shape, _dtype
    # autograd: the gradient array, its req, the tape node that made this array
    cdef public object _grad, _grad_req, _node
    # training weights: {layout: (version, buffer)} copies in primitives' layouts
    cdef public object _derived
    # bumped by every write through mxdeconv
    cdef public long long _version
    # memory visible outside mxdeconv: its buffer is never swapped
    cdef public bint _exposed
    cdef object __weakref__


cdef object new_ndarray(type cls, object buffer, object layout, object shape, object dtype)
