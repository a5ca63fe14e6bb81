# cython: language_level=3, embedsignature=True
"""The fields of an NDArray, in a compiled base class.

:class:`mxdeconv.ndarray.ndarray.NDArray` adds every behaviour; this class only holds
its state (declared, with what each field means, in ``_ndbase.pxd``).  The
compiled hot path (``_exec``) then reads and writes the fields as C struct
members, where a slotted Python class costs an attribute lookup each (about
30 ns, a dozen times per call), and makes result arrays without running
``NDArray.__init__``.
"""
cimport cython


@cython.auto_pickle(False)  # NDArray pickles its values (NDArray.__reduce__)
cdef class NDArrayBase:
    """An NDArray's state; see :class:`mxdeconv.ndarray.ndarray.NDArray`."""

    def __cinit__(self, *args, **kwargs):
        # The defaults of every new array, however it is made.
        self._grad_req = "null"


cdef object new_ndarray(type cls, object buffer, object layout, object shape, object dtype):
    """A new ``cls`` (NDArray) owning ``buffer`` in ``layout`` (None: the
    default layout), without ``__init__``: the caller vouches for the rest."""
    cdef NDArrayBase arr = cls.__new__(cls)
    arr._state = (buffer, layout)
    arr._shape = shape
    arr._dtype = dtype
    return arr
