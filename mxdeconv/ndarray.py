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
        """Turn a blocked buffer into plain row-major memory, in place; returns self."""
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
        view = self.reorder_to_default()._buffer
        if dtype is not None and np.dtype(dtype) != view.dtype:
            return view.astype(dtype)
        return view.copy() if copy else view

    def asscalar(self) -> Any:
        if self.size != 1:
            raise MXNetError(f"The current array is not a scalar: shape {self._shape}")
        return self.asnumpy().reshape(()).item()

    def wait_to_read(self) -> None:
        """MXNet compatibility: every operation here is synchronous."""

    def wait_to_write(self) -> None:
        """MXNet compatibility: every operation here is synchronous."""

    def copy(self) -> "NDArray":
        """A deep copy in the default layout."""
        return array(self.asnumpy())

    def astype(self, dtype: Any) -> "NDArray":
        return array(self.asnumpy(), dtype=dtype)

    def __repr__(self) -> str:
        dims = "x".join(str(d) for d in self._shape)
        return f"\n{np.asarray(self)!s}\n<NDArray {dims} @cpu(0)>"

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d NDArray")
        return self._shape[0]


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
        source = np.from_dlpack(source)
    values = np.asarray(source)
    if dtype is None:
        dtype = values.dtype if is_float_dtype(values.dtype) else np.float32
    dtype = _check_dtype(np.dtype(dtype))
    buffer = aligned_empty(values.shape, dtype)
    np.copyto(buffer, values, casting="unsafe")
    return NDArray(buffer)


def empty(shape: Any, dtype: Any = np.float32) -> NDArray:
    """An uninitialised NDArray in the default layout."""
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
    """An NDArray of ones."""
    out = empty(shape, dtype)
    out._buffer.fill(1)
    return out


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
