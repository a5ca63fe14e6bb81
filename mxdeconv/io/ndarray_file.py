"""MXNet's binary NDArray file format (``mx.nd.save``/``mx.nd.load``, Gluon ``.params``).

Read and written without MXNet, byte for byte as MXNet 1.9.1 writes it
(``src/ndarray/ndarray.cc``: ``NDArray::Save``/``Load``; dmlc-core's stream
serializers for the vectors and strings).  Every field is little-endian::

    uint64  0x112                 the list magic (kMXAPINDArrayListMagic)
    uint64  0                     reserved (MXNet does not check it)
    uint64  n                     the number of arrays, then n arrays:
      uint32  0xF993FAC9          V2 magic (0xF993FACA, V3: saved under NumPy shape
                                  semantics, the only form that holds 0-d arrays)
      int32   0                   storage type: dense (1 row_sparse, 2 csr: refused here)
      int32   ndim                then ndim int64 extents
      int32   1, int32 0          the device the array lived on (cpu(0))
      int32   type flag           mshadow's: 0 float32, 1 float64, 2 float16, 3 uint8,
                                  4 int32, 5 int8, 6 int64, 7 bool, 12 bfloat16, ...
      bytes                       the values, row-major
    uint64  m                     the number of names: 0 (a list) or n (a dict),
    m x (uint64 length, bytes)    each name in UTF-8

MXNet 1.9.1 also reads two older array forms, and so does this module: V1
(magic 0xF993FAC8: no storage type) and the form before it (no magic: the first
uint32 is ndim, and the extents are uint32).

Files are untrusted: every count and size is checked against the bytes left
before anything is allocated, and anything malformed raises :class:`MXNetError`
naming the file, the byte offset, what was expected and what was found.

>>> import os, tempfile
>>> from mxdeconv import nd
>>> path = os.path.join(tempfile.mkdtemp(), "arrays.params")
>>> arrays = {"arg:w": nd.ones((2, 3)), "aux:n": nd.zeros((4,), dtype="float64")}
>>> nd.save(path, arrays)
>>> {name: (a.shape, str(a.dtype)) for name, a in nd.load(path).items()}
{'arg:w': ((2, 3), 'float32'), 'aux:n': ((4,), 'float64')}
"""
from __future__ import annotations

import math
import os
import struct
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from mxdeconv._core.errors import MXNetError
from mxdeconv._core.files import replace_atomically
from mxdeconv._core.buffers import aligned_empty
from mxdeconv._core import dtypes
from mxdeconv.ndarray.ndarray import NDArray

__all__ = ["ArrayFile", "LIST_MAGIC", "V1_MAGIC", "V2_MAGIC", "V3_MAGIC", "is_ndarray_file",
           "load", "load_frombuffer", "read_arrays", "save", "write_arrays", "write_atomically"]

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA
#: The most dimensions an array may have (NumPy 1.x's limit).
MAX_NDIM = 32
#: Every array takes at least its magic (or ndim), device and type flag.
_MIN_ARRAY_BYTES = 16

#: mshadow's type flags (3rdparty/mshadow/mshadow/base.h) and their dtypes,
#: little-endian as stored.
TYPE_FLAGS: Dict[int, np.dtype] = {
    flag: np.dtype(code) for flag, code in [
        (0, "<f4"), (1, "<f8"), (2, "<f2"), (3, "u1"), (4, "<i4"), (5, "i1"), (6, "<i8"),
        (7, "?"), (8, "<i2"), (9, "<u2"), (10, "<u4"), (11, "<u8")]}
_BFLOAT16_FLAG = 12
_FLAG_OF: Dict[np.dtype, int] = {dtype.newbyteorder("="): flag
                                 for flag, dtype in TYPE_FLAGS.items()}
_STORAGE_TYPES = {1: "row_sparse", 2: "csr"}
#: MXNet's Context::DeviceType values: cpu, gpu, cpu_pinned, cpu_shared.
_DEVICE_TYPES = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}

_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")


def _bfloat16() -> Optional[np.dtype]:
    """The dtype a bfloat16 entry loads as (None: ml_dtypes is not installed)."""
    return dtypes.bfloat16()


def _flag(dtype: np.dtype) -> Optional[int]:
    """mshadow's type flag for ``dtype`` (any byte order), None if it has none."""
    if dtypes.is_bfloat16(dtype):
        return _BFLOAT16_FLAG
    return _FLAG_OF.get(dtype.newbyteorder("=")) if dtype.kind in "biuf" else None


class _Entry(NamedTuple):
    """One array of a parsed file: where its values are, not yet copied."""
    shape: Tuple[int, ...]
    dtype: np.dtype          # the dtype the array gets (native byte order)
    offset: int              # where its values start in the data


# -- reading -------------------------------------------------------------------------------
class _Reader:
    """Fields read in order from untrusted bytes, never past their end."""

    def __init__(self, data: memoryview, source: str) -> None:
        self.data, self.source = data, source
        self.offset = 0
        self.field = 0  # where the last field read starts

    def error(self, expected: str, got: str, offset: Optional[int] = None) -> MXNetError:
        where = self.field if offset is None else offset
        return MXNetError(f"cannot load {self.source}: at byte {where}, expected {expected}, "
                          f"got {got}")

    @property
    def left(self) -> int:
        return len(self.data) - self.offset

    def take(self, size: int, expected: str) -> memoryview:
        if size > self.left:
            raise self.error(f"{expected} ({size} bytes)",
                             f"the end of the data ({self.left} bytes left): it is truncated",
                             self.offset)
        self.field = self.offset
        self.offset += size
        return self.data[self.field:self.offset]

    def number(self, form: struct.Struct, expected: str) -> int:
        return form.unpack(self.take(form.size, expected))[0]


def _shape(reader: _Reader, what: str, magic: int) -> Tuple[int, ...]:
    """An array's extents: ``ndim`` then its extents, in the form ``magic`` says."""
    if magic in (V1_MAGIC, V2_MAGIC, V3_MAGIC):
        ndim = reader.number(_I32, f"{what}'s ndim")
        start = reader.field
        if magic == V3_MAGIC:
            low, note = 0, " (-1 is an array of unknown shape, which cannot be loaded)"
        else:
            low, note = 1, (" (0 is MXNet's empty 'none' array, which cannot be loaded; 0-d "
                            "arrays are saved in the V3 form)")
    else:  # the oldest form: the "magic" read was ndim
        ndim, start, low, note = magic, reader.field, 1, " (0 is MXNet's 'none' array)"
    if not low <= ndim <= MAX_NDIM:
        raise reader.error(f"{what}'s ndim in [{low}, {MAX_NDIM}]{note}", str(ndim), start)
    extent = "<i8" if magic in (V1_MAGIC, V2_MAGIC, V3_MAGIC) else "<u4"
    itemsize = np.dtype(extent).itemsize
    raw = reader.take(ndim * itemsize, f"{what}'s {ndim} extents")
    shape = tuple(int(e) for e in np.frombuffer(raw, dtype=extent))
    if any(e < 0 for e in shape):
        raise reader.error(f"{what}'s extents >= 0", f"shape {shape}")
    return shape


def _entry(reader: _Reader, index: int) -> _Entry:
    what = f"array {index}"
    magic = reader.number(_U32, f"{what}'s magic number")
    start = reader.field
    if magic in (V2_MAGIC, V3_MAGIC):
        storage = reader.number(_I32, f"{what}'s storage type")
        if storage in _STORAGE_TYPES:
            raise MXNetError(f"cannot load {reader.source}: {what} (at byte {start}) has "
                             f"{_STORAGE_TYPES[storage]} storage: sparse arrays are not "
                             "supported, only dense ones (convert it in MXNet with "
                             "tostype('default') before saving)")
        if storage != 0:
            raise reader.error(f"{what}'s storage type 0 (dense)", str(storage))
    shape = _shape(reader, what, magic)
    extents_at = reader.field
    device = reader.number(_I32, f"{what}'s device type")
    if device not in _DEVICE_TYPES:
        raise reader.error(f"{what}'s device type, one of {_DEVICE_TYPES}", str(device))
    device_id = reader.number(_I32, f"{what}'s device id")
    if device_id < 0:
        raise reader.error(f"{what}'s device id >= 0", str(device_id))
    flag = reader.number(_I32, f"{what}'s type flag")
    if flag == _BFLOAT16_FLAG:
        dtype = _bfloat16()
        if dtype is None:
            raise MXNetError(f"cannot load {reader.source}: {what} is bfloat16, which needs "
                             "the ml_dtypes package (pip install ml_dtypes)")
    elif flag in TYPE_FLAGS:
        dtype = TYPE_FLAGS[flag].newbyteorder("=")
    else:
        known = sorted(TYPE_FLAGS) + [_BFLOAT16_FLAG]
        raise reader.error(f"{what}'s type flag, one of {known} (mshadow's)", str(flag))
    # NumPy (and MXNet's int64 sizes) cannot hold a shape whose bytes overflow
    # int64, even when an extent is 0 and the array holds no bytes.
    if math.prod(e for e in shape if e) * dtype.itemsize >= 2**63:
        raise reader.error(f"{what}'s extents, with fewer than 2**63 bytes of {dtype}",
                           f"shape {shape}", extents_at)
    size = math.prod(shape)
    nbytes = size * dtype.itemsize
    reader.take(nbytes, f"{what}'s values, shape {shape} of {dtype}")
    return _Entry(shape, dtype, reader.field)


def _parse(data: memoryview, source: str) -> Tuple[List[_Entry], List[str]]:
    """Every array's shape, dtype and place, and the names (empty for a list)."""
    reader = _Reader(data, source)
    magic = reader.number(_U64, "the NDArray file magic")
    if magic != LIST_MAGIC:
        raise reader.error(f"MXNet's NDArray file magic {LIST_MAGIC:#x} (a file written by "
                           "mx.nd.save or save_parameters)", f"{magic:#x}")
    reader.number(_U64, "the reserved field")
    count = reader.number(_U64, "the number of arrays")
    most = reader.left // _MIN_ARRAY_BYTES
    if count > most:
        raise reader.error(f"at most {most} arrays in the {reader.left} bytes left", str(count))
    entries = [_entry(reader, index) for index in range(count)]
    name_count = reader.number(_U64, "the number of names")
    if name_count not in (0, count):
        raise reader.error(f"0 names (a list) or {count} (a dict, one per array)",
                           str(name_count))
    names: List[str] = []
    seen = set()
    for index in range(name_count):
        length = reader.number(_U64, f"name {index}'s length")
        raw = reader.take(length, f"name {index}")
        try:
            name = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise reader.error(f"name {index} in UTF-8", repr(bytes(raw[:40]))) from None
        if name in seen:
            raise reader.error(f"name {index} unlike the names before it",
                               f"{name!r} a second time")
        seen.add(name)
        names.append(name)
    if reader.left:
        raise reader.error("the end of the data", f"{reader.left} more bytes", reader.offset)
    return entries, names


def _values(data: memoryview, entry: _Entry) -> np.ndarray:
    """An entry's values, copied into a new aligned array of the native byte order."""
    out = aligned_empty(entry.shape, entry.dtype)
    if dtypes.is_bfloat16(entry.dtype):  # stored as little-endian 16-bit words
        target, stored = out.view(np.uint16), np.dtype("<u2")
    else:
        target, stored = out, entry.dtype.newbyteorder("<")
    source = np.frombuffer(data, dtype=stored, count=math.prod(entry.shape),
                           offset=entry.offset).reshape(entry.shape)
    if entry.dtype == np.bool_:  # any non-zero byte is True: keep NumPy's bools 0 or 1
        np.not_equal(source.view(np.uint8), 0, out=target)
    else:
        np.copyto(target, source)
    return out


def _bytes_view(buf: Any, name: str) -> memoryview:
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(f"{name} must be bytes-like (bytes, bytearray, memoryview), got "
                        f"{type(buf).__name__}") from None
    if not view.c_contiguous:  # a strided view (memoryview(b)[::2]): read its bytes
        view = memoryview(view.tobytes())
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _path_arg(name: str, value: Any) -> str:
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {value!r} of type "
                        f"{type(value).__name__}")
    return path


def _read_file(path: str, name: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise MXNetError(f"cannot read {name}={path!r}: {err}") from err


class ArrayFile:
    """A parsed NDArray file: names, shapes and dtypes first, values on request.

    >>> import os, tempfile
    >>> import numpy as np
    >>> from mxdeconv.io import ndarray_file as serialization
    >>> path = os.path.join(tempfile.mkdtemp(), "w.params")
    >>> serialization.write_arrays(path, [np.ones((2, 2), np.float32)], ["weight"])
    >>> saved = serialization.ArrayFile.read(path)
    >>> saved.names, saved.shape(0), saved.dtype(0)
    (['weight'], (2, 2), dtype('float32'))
    """

    def __init__(self, data: Any, source: str) -> None:
        self._data = _bytes_view(data, "buf")
        self._entries, self.names = _parse(self._data, source)

    @classmethod
    def read(cls, path: str, name: str = "fname") -> "ArrayFile":
        """Parse the file at ``path`` (``name`` is the argument that gave it)."""
        return cls(_read_file(path, name), f"file {path!r}")

    def __len__(self) -> int:
        return len(self._entries)

    def shape(self, index: int) -> Tuple[int, ...]:
        return self._entries[index].shape

    def dtype(self, index: int) -> np.dtype:
        return self._entries[index].dtype

    def values(self, index: int) -> np.ndarray:
        """Array ``index``'s values, copied (64-byte aligned, native byte order)."""
        return _values(self._data, self._entries[index])


def read_arrays(path: str) -> Tuple[List[np.ndarray], List[str]]:
    """The arrays and names (empty for a list) of the NDArray file at ``path``.

    >>> import os, tempfile
    >>> import numpy as np
    >>> from mxdeconv.io import ndarray_file as serialization
    >>> path = os.path.join(tempfile.mkdtemp(), "list.params")
    >>> serialization.write_arrays(path, [np.arange(3, dtype=np.int32)])
    >>> serialization.read_arrays(path)
    ([array([0, 1, 2], dtype=int32)], [])
    """
    saved = ArrayFile.read(_path_arg("path", path), "path")
    return [saved.values(i) for i in range(len(saved))], saved.names


def is_ndarray_file(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes, 8 or more) starts an NDArray file.

    >>> from mxdeconv.io import ndarray_file as serialization
    >>> serialization.is_ndarray_file(b"\\x12\\x01" + bytes(6))
    True
    >>> serialization.is_ndarray_file(b"PK\\x03\\x04" + bytes(4))
    False
    """
    return len(head) >= _U64.size and _U64.unpack(head[:_U64.size])[0] == LIST_MAGIC


# -- writing -------------------------------------------------------------------------------
def _encode(arrays: Sequence[np.ndarray], names: Sequence[str], np_shape: bool) -> List[Any]:
    """The file as chunks (bytes and byte views of the arrays), in order."""
    chunks: List[Any] = [struct.pack("<QQQ", LIST_MAGIC, 0, len(arrays))]
    magic = V3_MAGIC if np_shape else V2_MAGIC
    for values in arrays:
        shape = values.shape
        chunks.append(struct.pack(f"<Iii{len(shape)}qiii", magic, 0, len(shape), *shape,
                                  1, 0, _flag(values.dtype)))
        if dtypes.is_bfloat16(values.dtype):
            stored = values.view(np.uint16).astype("<u2", copy=False)
        else:
            stored = values.astype(values.dtype.newbyteorder("<"), copy=False)
        chunks.append(np.ascontiguousarray(stored).reshape(-1).view(np.uint8))
    chunks.append(_U64.pack(len(names)))
    for name in names:
        encoded = name.encode("utf-8")
        chunks += [_U64.pack(len(encoded)), encoded]
    return chunks


def _check_arrays(arrays: Sequence[np.ndarray], names: Optional[Sequence[str]],
                  np_shape: Optional[bool], where: str) -> Tuple[List[str], bool]:
    """The names (empty for a list) and the form (V3 or not), checked."""
    for index, values in enumerate(arrays):
        if _flag(values.dtype) is None:
            held = [str(d) for d in _FLAG_OF] + (
                [dtypes.BFLOAT16_NAME] if dtypes.bfloat16_available() else [])
            raise MXNetError(f"{where}[{index}] has dtype {values.dtype}, which MXNet's NDArray "
                             f"files cannot hold (they hold {', '.join(held)})")
        if values.ndim > MAX_NDIM:
            raise MXNetError(f"{where}[{index}] has {values.ndim} dimensions, more than "
                             f"{MAX_NDIM}")
    zero_d = [i for i, values in enumerate(arrays) if values.ndim == 0]
    if np_shape is None:
        np_shape = bool(zero_d)
    elif np_shape is False and zero_d:
        raise MXNetError(f"{where}[{zero_d[0]}] is 0-d, which only the V3 form (NumPy shape "
                         "semantics) holds: pass np_shape=True or None")
    names = [] if names is None else list(names)
    if names:
        if len(names) != len(arrays):
            raise MXNetError(f"{len(names)} names for {len(arrays)} arrays")
        for name in names:
            if "\0" in name:
                raise MXNetError(f"{where}: a name must not contain NUL characters (MXNet "
                                 f"cuts it there), got {name!r}")
        if len(set(names)) != len(names):
            raise MXNetError(f"{where}: names must be unique, got {names}")
    return names, np_shape


def write_atomically(path: str, chunks: Sequence[Any], name: str) -> None:
    """Write ``chunks`` (bytes-like) to ``path`` atomically (a reader never sees a
    half-written file, and a failure leaves ``path`` as it was); an OSError
    becomes :class:`MXNetError` naming the argument ``name``."""
    try:
        replace_atomically(path, chunks)
    except OSError as err:
        raise MXNetError(f"cannot write {name}={path!r}: {err}") from err


def write_arrays(path: str, arrays: Sequence[np.ndarray], names: Optional[Sequence[str]] = None,
                 np_shape: Optional[bool] = None, argument: str = "fname") -> None:
    """Write NumPy ``arrays`` (with ``names``: a dict file; without: a list file) to
    ``path`` as MXNet's ``nd.save`` would, atomically.

    ``np_shape``: write the V3 form (as MXNet under NumPy shape semantics,
    ``mx.npx.set_np()``); None (default) writes V2, as MXNet's default, unless
    an array is 0-d, which only V3 holds.

    >>> import os, tempfile
    >>> import numpy as np
    >>> from mxdeconv.io import ndarray_file as serialization
    >>> path = os.path.join(tempfile.mkdtemp(), "w.params")
    >>> serialization.write_arrays(path, [np.zeros(2, np.float32)], ["w"])
    >>> open(path, "rb").read()[:8].hex()
    '1201000000000000'
    """
    path = _path_arg(argument, path)
    names, np_shape = _check_arrays(arrays, names, np_shape, "arrays")
    write_atomically(path, _encode(arrays, names, np_shape), argument)


# -- NDArray API (mxdeconv.nd re-exports these) -------------------------------------------
Saved = Union[List[NDArray], Dict[str, NDArray]]


def _collect(data: Any) -> Tuple[List[np.ndarray], Optional[List[str]]]:
    """``data`` (an NDArray, a list of them or a dict str -> NDArray) as plain arrays
    and names, checked before anything is written."""
    expected = "an NDArray, a list of NDArrays or a dict str -> NDArray"
    if isinstance(data, NDArray):
        return [data._plain()], None
    if isinstance(data, (list, tuple)):
        for index, value in enumerate(data):
            if not isinstance(value, NDArray):
                raise TypeError(f"data must be {expected}, got data[{index}] of type "
                                f"{type(value).__name__}")
        return [value._plain() for value in data], None
    if isinstance(data, Mapping):
        for key, value in data.items():
            if not isinstance(key, str):
                raise TypeError(f"data must be {expected}, got key {key!r} of type "
                                f"{type(key).__name__}")
            if not isinstance(value, NDArray):
                raise TypeError(f"data must be {expected}, got data[{key!r}] of type "
                                f"{type(value).__name__}")
        return [value._plain() for value in data.values()], list(data.keys())
    raise TypeError(f"data must be {expected}, got {type(data).__name__}")


def save(fname: Union[str, "os.PathLike[str]"], data: Any,
         np_shape: Optional[bool] = None) -> None:
    """Save an NDArray, a list of NDArrays or a dict str -> NDArray to ``fname`` in
    MXNet's binary format, byte for byte as MXNet 1.9.1's ``mx.nd.save``.

    Arrays are written in the default layout (blocked ones are reordered first).
    The file is written beside ``fname`` and renamed over it, so a failed save
    leaves no half-written file.  ``np_shape=True`` writes MXNet's V3 form (what
    MXNet writes under NumPy shape semantics, ``mx.npx.set_np()``; MXNet then
    loads it only under those semantics); the default writes V2, MXNet's usual
    form, unless an array is 0-d, which only V3 holds.

    >>> import os, tempfile
    >>> from mxdeconv import nd
    >>> path = os.path.join(tempfile.mkdtemp(), "pair.params")
    >>> nd.save(path, [nd.ones((2,)), nd.zeros((1, 3))])
    >>> [a.shape for a in nd.load(path)]
    [(2,), (1, 3)]
    """
    path = _path_arg("fname", fname)
    arrays, names = _collect(data)
    names, np_shape = _check_arrays(arrays, names, np_shape, "data")
    write_atomically(path, _encode(arrays, names, np_shape), "fname")


def _as_ndarrays(saved: ArrayFile) -> Saved:
    arrays = [NDArray(saved.values(i)) for i in range(len(saved))]
    return dict(zip(saved.names, arrays)) if saved.names else arrays


def load(fname: Union[str, "os.PathLike[str]"]) -> Saved:
    """Load the arrays of an MXNet NDArray file (``mx.nd.save``, Gluon
    ``save_parameters``, ``mx.model.save_checkpoint``): a list of NDArrays, or a
    dict str -> NDArray when the file has names, as MXNet's ``mx.nd.load``.

    Arrays keep the file's dtype; integer and bool arrays can be read and saved
    again, while operators compute floating-point arrays only.

    >>> import os, tempfile
    >>> from mxdeconv import nd
    >>> path = os.path.join(tempfile.mkdtemp(), "one.params")
    >>> nd.save(path, nd.ones((2, 2)))
    >>> nd.load(path)[0].asnumpy()
    array([[1., 1.],
           [1., 1.]], dtype=float32)
    """
    path = _path_arg("fname", fname)
    return _as_ndarrays(ArrayFile.read(path))


def load_frombuffer(buf: Union[bytes, bytearray, memoryview]) -> Saved:
    """:func:`load` from the bytes of a file (MXNet's ``mx.nd.load_frombuffer``).

    >>> import os, tempfile
    >>> from mxdeconv import nd
    >>> path = os.path.join(tempfile.mkdtemp(), "x.params")
    >>> nd.save(path, {"x": nd.array([1.0, 2.0])})
    >>> nd.load_frombuffer(open(path, "rb").read())["x"].asnumpy()
    array([1., 2.], dtype=float32)
    """
    if isinstance(buf, str):  # MXNet 1.9.1 takes str too, but only through Python 2's bytes
        raise TypeError("buf must be bytes-like (bytes, bytearray, memoryview), got str")
    return _as_ndarrays(ArrayFile(buf, "the buffer"))
