# The aligned allocator's C-level interface (defined in buffers.pyx).
cimport numpy as cnp

cpdef cnp.ndarray aligned_bytes(Py_ssize_t nbytes)
cpdef cnp.ndarray aligned_empty(shape, dtype)
cdef cnp.ndarray aligned_array(tuple shape, cnp.dtype dtype, Py_ssize_t nbytes)
