"""A small MXNet-style NDArray whose buffer may hold a oneDNN blocked layout.

An :class:`NDArray` owns one buffer.  In the *default* layout the buffer is a
C-contiguous NumPy array of the logical shape.  After a oneDNN primitive it
may instead hold a *blocked* layout (``nChw16c`` and friends): the buffer is
then raw bytes described by a oneDNN memory descriptor, and the array turns
back to the default layout only when someone needs plain memory (``asnumpy()``,
``__array__``, the NumPy fallback, :meth:`NDArray.reorder_to_default`).  This is
MXNet's ``Reorder2DefaultAsync`` made synchronous.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from .base import MXNetError

DEFAULT_LAYOUT = "default"
_ALIGNMENT = 64  # one cache line / one AVX-512 register: what oneDNN's kernels like
try:  # bfloat16 comes from ml_dtypes (NumPy has none); optional
    import ml_dtypes
    BFLOAT16: Optional[np.dtype] = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BFLOAT16 = None
_SUPPORTED_DTYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64)) + (
    (BFLOAT16,) if BFLOAT16 is not None else ())


def is_float_dtype(dtype: np.dtype) -> bool:
    """NumPy's floats, and ml_dtypes' bfloat16 (whose NumPy kind is 'V')."""
    return dtype.kind == "f" or (BFLOAT16 is not None and dtype == BFLOAT16)


def _physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no early check
        return 1 << 62


_PHYSICAL_MEMORY = _physical_memory_bytes()


def aligned_empty(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    Raises :class:`MXNetError` before allocating when the array could not fit
    in this machine's physical memory, instead of a late ``MemoryError`` or an
    OOM kill.
    """
    dtype = np.dtype(dtype)
    count = 1
    for extent in shape:
        count *= int(extent)
    nbytes = count * dtype.itemsize
    if nbytes > _PHYSICAL_MEMORY:
        raise MXNetError(
            f"cannot allocate an array of shape {tuple(shape)} and dtype {dtype}: "
            f"{nbytes} bytes exceed this machine's {_PHYSICAL_MEMORY} bytes of memory")
    raw = np.empty(nbytes + _ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGNMENT
    return raw[offset:offset + nbytes].view(dtype).reshape(tuple(shape))


class NDArray:
    """An n-dimensional array on the CPU, in MXNet's style.

    >>> from mxdeconv import nd
    >>> x = nd.array([[1, 2], [3, 4]])
    >>> x.shape, x.dtype, x.layout
    ((2, 2), dtype('float32'), 'default')
    """

    __slots__ = ("_buffer", "_desc", "_shape", "_dtype", "_grad", "_grad_req",
                 "_node", "__weakref__")

    def __init__(self, buffer: np.ndarray, desc: Any = None,
                 shape: Optional[Tuple[int, ...]] = None) -> None:
        # Internal constructor: `buffer` is owned by the new array from now on.
        self._buffer = buffer
        self._desc = desc  # None: default layout; else an _ops.MemoryDesc
        self._shape = tuple(buffer.shape) if shape is None else tuple(shape)
        self._dtype = buffer.dtype if desc is None else np.dtype(desc.dtype)
        self._grad = None
        self._grad_req = "null"
        self._node = None

    # -- basic properties -------------------------------------------------
    @property
    def shape(self) -> Tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def context(self) -> str:
        return "cpu(0)"

    @property
    def layout(self) -> str:
        """``"default"`` for plain row-major memory, else the oneDNN format name.

        Blocked names use MXNet/oneDNN's letters, e.g. ``"nChw16c"`` for
        activations or ``"gOIhw16i16o"``-style names for weights.
        """
        return DEFAULT_LAYOUT if self._desc is None else self._desc.layout

    @property
    def is_default_layout(self) -> bool:
        return self._desc is None

    # -- layout changes -----------------------------------------------------
    def reorder_to_default(self) -> "NDArray":
        """Turn a blocked buffer into plain row-major memory, in place; returns self.

        >>> from mxdeconv import nd
        >>> nd.ones((1, 16, 2, 2)).reorder_to_default().layout
        'default'
        """
        if self._desc is not None:
            from . import _ops
            plain = aligned_empty(self._shape, self._dtype)
            _ops.reorder_to_plain(self._desc, self._buffer, plain)
            self._buffer, self._desc = plain, None
        return self

    def _adopt(self, buffer: np.ndarray, desc: Any) -> None:
        """Replace the buffer with one holding the same values in layout ``desc``."""
        self._buffer, self._desc = buffer, desc

    # -- reading ------------------------------------------------------------
    def asnumpy(self) -> np.ndarray:
        """A NumPy copy of the values (the array turns to the default layout first).

        >>> from mxdeconv import nd
        >>> nd.ones((2,)).asnumpy()
        array([1., 1.], dtype=float32)
        """
        return self.reorder_to_default()._buffer.copy()

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """``np.asarray(arr)``: a view of the default-layout buffer (a blocked array
        is turned into the default layout first, in place); a copy only when
        ``copy=True`` or another ``dtype`` is asked for (``copy=False`` then raises).

        >>> import numpy as np
        >>> from mxdeconv import nd
        >>> x = nd.zeros((2,))
        >>> view = np.asarray(x)
        >>> view[0] = 5
        >>> x.asnumpy()
        array([5., 0.], dtype=float32)
        """
        view = self.reorder_to_default()._buffer
        if dtype is not None and np.dtype(dtype) != view.dtype:
            if copy is False:
                raise ValueError(f"cannot view a {view.dtype} NDArray as {np.dtype(dtype)} "
                                 "without a copy")
            return view.astype(dtype)
        return view.copy() if copy else view

    def asscalar(self) -> Any:
        """The value of a one-element array as a Python number.

        >>> from mxdeconv import nd
        >>> nd.array([2.5]).asscalar()
        2.5
        """
        if self.size != 1:
            raise MXNetError(f"The current array is not a scalar: shape {self._shape}")
        return self.asnumpy().reshape(()).item()

    def wait_to_read(self) -> None:
        """MXNet compatibility: every operation here is synchronous.

        >>> from mxdeconv import nd
        >>> nd.ones((2,)).wait_to_read()
        """

    def wait_to_write(self) -> None:
        """MXNet compatibility: every operation here is synchronous.

        >>> from mxdeconv import nd
        >>> nd.ones((2,)).wait_to_write()
        """

    def copy(self) -> "NDArray":
        """A deep copy in the default layout.

        >>> from mxdeconv import nd
        >>> x = nd.ones((2,))
        >>> y = x.copy()
        >>> y is x, y.asnumpy()
        (False, array([1., 1.], dtype=float32))
        """
        return array(self.asnumpy())

    def astype(self, dtype: Any) -> "NDArray":
        """A copy converted to ``dtype``.

        >>> from mxdeconv import nd
        >>> nd.ones((2,)).astype("float64").dtype
        dtype('float64')
        """
        return array(self.asnumpy(), dtype=dtype)

    def __repr__(self) -> str:
        dims = "x".join(str(d) for d in self._shape)
        return f"\n{np.asarray(self)!s}\n<NDArray {dims} @cpu(0)>"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._shape[0]

    # -- autograd (see mxdeconv.autograd) -----------------------------------
    def attach_grad(self, grad_req: str = "write", stype: Any = None) -> None:
        """Make this array a variable: backward puts its gradient in :attr:`grad`.

        ``grad_req`` is ``"write"`` (each backward overwrites), ``"add"``
        (backward calls accumulate) or ``"null"`` (no gradient).  The gradient
        starts as zeros, in this array's shape and dtype.

        >>> from mxdeconv import autograd, nd
        >>> x = nd.array([1.0, 2.0])
        >>> x.attach_grad()
        >>> with autograd.record():
        ...     y = x * x
        >>> y.backward()
        >>> x.grad.asnumpy()
        array([2., 4.], dtype=float32)
        """
        if stype not in (None, "default"):
            raise MXNetError(f"stype {stype!r} is not supported: only dense arrays")
        from .autograd import mark_variables
        mark_variables(self, zeros(self._shape, self._dtype), grad_req)

    @property
    def grad(self) -> Optional["NDArray"]:
        """The gradient attached by :meth:`attach_grad` (None if there is none)."""
        return self._grad

    @property
    def grad_req(self) -> str:
        """``"write"``, ``"add"`` or ``"null"`` (set by :meth:`attach_grad`)."""
        return self._grad_req

    def backward(self, out_grad: Optional["NDArray"] = None, retain_graph: bool = False,
                 train_mode: bool = True) -> None:
        """Backpropagate from this array, the result of recorded operators.

        ``out_grad`` is the gradient of the loss with respect to this array
        (None: ones).  See :func:`mxdeconv.autograd.backward`.

        >>> from mxdeconv import autograd, nd
        >>> x = nd.array([3.0])
        >>> x.attach_grad()
        >>> with autograd.record():
        ...     y = x * 2
        >>> y.backward(nd.array([10.0]))
        >>> x.grad.asnumpy()
        array([20.], dtype=float32)
        """
        from .autograd import backward
        backward([self], [out_grad], retain_graph=retain_graph, train_mode=train_mode)

    def detach(self) -> "NDArray":
        """A new array sharing this buffer, outside any recorded graph.

        >>> from mxdeconv import nd
        >>> x = nd.ones((2,))
        >>> x.detach().shape
        (2,)
        """
        return NDArray(self._buffer, self._desc, self._shape)

    # -- elementwise arithmetic (mxdeconv.elementwise) -----------------------
    def __add__(self, other: Any) -> "NDArray":
        from .elementwise import add
        return add(self, other)

    def __radd__(self, other: Any) -> "NDArray":
        from .elementwise import add
        return add(other, self)

    def __mul__(self, other: Any) -> "NDArray":
        from .elementwise import multiply
        return multiply(self, other)

    def __rmul__(self, other: Any) -> "NDArray":
        from .elementwise import multiply
        return multiply(other, self)

    # -- DLPack ---------------------------------------------------------------
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """Export the default-layout buffer as a DLPack capsule, without a copy.

        A blocked array is turned into the default layout first (in place), so
        ``np.from_dlpack(arr)`` or ``torch.from_dlpack(arr)`` always sees plain
        row-major memory, shared with this array (until an operator gives the
        array a new buffer, as an inference weight's first use does).
        Keyword arguments (``max_version``, ``dl_device``, ``copy``) are
        passed on to NumPy's exporter.

        >>> import numpy as np
        >>> from mxdeconv import nd
        >>> x = nd.ones((2, 2))
        >>> np.shares_memory(np.from_dlpack(x), np.asarray(x))
        True
        """
        buffer = self.reorder_to_default()._buffer
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if stream is not None:
            kwargs["stream"] = stream
        return buffer.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(1, 0)``: DLPack's ``kDLCPU``, device 0."""
        return (1, 0)


def _check_dtype(dtype: np.dtype) -> np.dtype:
    if dtype not in _SUPPORTED_DTYPES:
        raise TypeError(f"unsupported dtype {dtype}: mxdeconv arrays are "
                        f"{', '.join(str(d) for d in _SUPPORTED_DTYPES)}")
    return dtype


def array(source: Any, dtype: Any = None) -> NDArray:
    """Copy ``source`` (array-like, NumPy array or NDArray) into a new NDArray.

    The default dtype is ``float32`` for Python lists and NDArray's own dtype
    or the NumPy array's floating dtype otherwise.  The data is always copied:
    the result never aliases ``source``.

    >>> from mxdeconv import nd
    >>> nd.array([1.5, 2.5], dtype="float64").dtype
    dtype('float64')
    """
    if isinstance(source, NDArray):
        source = source.asnumpy()
    elif hasattr(source, "__dlpack__") and not isinstance(source, np.ndarray):
        if callable(getattr(source, "detach", None)):  # a torch tensor that requires grad
            source = source.detach()
        source = np.from_dlpack(source)
    python_values = not (isinstance(source, np.ndarray) or hasattr(source, "__array__"))
    values = np.asarray(source)
    if dtype is None:  # Python lists and numbers: float32, as in MXNet
        dtype = values.dtype if is_float_dtype(values.dtype) and not python_values \
            else np.float32
    dtype = _check_dtype(np.dtype(dtype))
    buffer = aligned_empty(values.shape, dtype)
    np.copyto(buffer, values, casting="unsafe")
    return NDArray(buffer)


def empty(shape: Any, dtype: Any = np.float32) -> NDArray:
    """An uninitialised NDArray in the default layout.

    >>> from mxdeconv import nd
    >>> nd.empty((2, 3)).shape
    (2, 3)
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return NDArray(aligned_empty(shape, _check_dtype(np.dtype(dtype))))


def zeros(shape: Any, dtype: Any = np.float32) -> NDArray:
    """An NDArray of zeros.

    >>> from mxdeconv import nd
    >>> nd.zeros((2, 3)).shape
    (2, 3)
    """
    out = empty(shape, dtype)
    out._buffer.fill(0)
    return out


def ones(shape: Any, dtype: Any = np.float32) -> NDArray:
    """An NDArray of ones.

    >>> from mxdeconv import nd
    >>> nd.ones((2,), dtype="float64").asnumpy()
    array([1., 1.])
    """
    out = empty(shape, dtype)
    out._buffer.fill(1)
    return out


class _Capsule:
    """Wrap a bare DLPack capsule (MXNet's ``to_dlpack_for_read`` style) for
    ``np.from_dlpack``, which takes objects with ``__dlpack__``."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule  # versioned or not: the importer reads its name

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)


def from_dlpack(source: Any) -> NDArray:
    """An NDArray sharing the memory of a DLPack tensor, without a copy.

    ``source`` is an object with ``__dlpack__`` (a PyTorch tensor, a NumPy
    array, another NDArray) or a DLPack capsule.  It must be a C-contiguous
    CPU tensor of float16, float32 or float64; anything else raises rather
    than copying silently (use :func:`array` to copy).  Writes through either
    side are seen by the other.  A tensor imported through a legacy
    (unversioned) capsule, such as :func:`to_dlpack_for_read` returns, is
    read-only: DLPack 0.x cannot say whether writing is allowed, so NumPy
    refuses it; the NDArray can still be an operator's input.

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> values = np.zeros((2, 3), dtype=np.float32)
    >>> x = nd.from_dlpack(values)
    >>> values[0, 0] = 7
    >>> float(x.asnumpy()[0, 0])
    7.0
    """
    if type(source).__name__ == "PyCapsule":
        source = _Capsule(source)
    try:
        view = np.from_dlpack(source)
    except (BufferError, RuntimeError) as error:
        raise MXNetError(f"from_dlpack: cannot import {type(source).__name__}: {error}") \
            from error
    _check_dtype(view.dtype)
    if not view.flags.c_contiguous:
        raise MXNetError(f"from_dlpack: the tensor of shape {view.shape} is not C-contiguous "
                         f"(strides {view.strides}); make it contiguous or use nd.array()")
    return NDArray(view)


def to_dlpack_for_read(data: NDArray) -> Any:
    """A DLPack capsule of ``data``'s default-layout buffer (MXNet's name).

    It is a legacy (DLPack 0.x) capsule, which importers treat as read-only.

    >>> from mxdeconv import nd
    >>> nd.from_dlpack(nd.to_dlpack_for_read(nd.ones((2,)))).asnumpy()
    array([1., 1.], dtype=float32)
    """
    return data.__dlpack__()


def to_dlpack_for_write(data: NDArray) -> Any:
    """A writable DLPack capsule of ``data``'s default-layout buffer (MXNet's name).

    A versioned (DLPack 1.0) capsule where NumPy can make one (NumPy >= 2.1),
    so that importers may write through it; else the legacy capsule.

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> x = nd.zeros((2,))
    >>> view = nd.from_dlpack(nd.to_dlpack_for_write(x))
    >>> np.asarray(view)[1] = 3
    >>> x.asnumpy()
    array([0., 3.], dtype=float32)
    """
    try:
        return data.__dlpack__(max_version=(1, 0))
    except TypeError:  # NumPy < 2.1 exports legacy capsules only
        return data.__dlpack__()


def as_ndarray(value: Any, name: str) -> NDArray:
    """Accept an NDArray as is; copy a NumPy array (never alias the caller's memory)."""
    if isinstance(value, NDArray):
        return value
    if isinstance(value, np.ndarray):
        if not is_float_dtype(value.dtype):
            raise TypeError(f"{name} must be a floating-point array, got dtype {value.dtype}")
        return array(value)
    raise TypeError(f"{name} must be an NDArray or a NumPy array, "
                    f"got {type(value).__name__}")
