"""Reading saved parameters: MXNet's binary ``.params`` files (through
:mod:`mxdeconv.io.ndarray_file`) and ``.npz`` archives, both untrusted."""
from __future__ import annotations

import math
import zipfile
from collections import Counter
from typing import Any, Tuple

import numpy as np

from mxdeconv.io import ndarray_file
from mxdeconv._core.errors import MXNetError


class _NpzArchive:
    """The arrays of an ``.npz`` file, read from untrusted bytes: the names and
    each ``.npy`` header first, an array's data only when asked for.  Anything
    wrong with the file raises :class:`MXNetError` naming it.

    zipfile and ``numpy.lib.format`` raise many types for a corrupt file
    (BadZipFile, EOFError, ValueError, zlib.error, NotImplementedError,
    RecursionError...), so the few calls that parse the file catch ``Exception``.
    """

    _HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
            names = self._zip.namelist()
        except OSError as err:
            raise MXNetError(f"cannot read filename={path!r}: {err}") from err
        except Exception as err:
            raise MXNetError(f"filename={path!r} must be an .npz archive of NumPy arrays "
                             f"(as np.savez writes), got {self._what_it_is()}") from err
        repeated = sorted(name for name, count in Counter(names).items() if count > 1)
        others = [name for name in names if not name.endswith(".npy")]
        if repeated or others:
            self._zip.close()
            raise MXNetError(f"filename={path!r} must be an .npz archive of NumPy arrays, each "
                             "stored once as '<key>.npy', got an archive with "
                             + (f"repeated members {repeated}" if repeated
                                else f"other members {others[:5]}"))
        self.keys = [name[:-len(".npy")] for name in names]

    def _what_it_is(self) -> str:
        try:
            with open(self.path, "rb") as handle:
                magic = handle.read(6)
        except OSError:
            magic = b""
        if magic == b"\x93NUMPY":
            return ("a .npy file (one array); save the parameters with "
                    "np.savez(path, weight=..., bias=...)")
        return "a file that is not a zip archive"

    def _error(self, key: str, err: Exception) -> MXNetError:
        return MXNetError(f"cannot read array '{key}' of filename={self.path!r}: "
                          f"{type(err).__name__}: {err}")

    def header(self, key: str) -> Tuple[Tuple[int, ...], np.dtype]:
        """The shape and dtype of array ``key``, read without its data."""
        member = key + ".npy"
        try:
            with self._zip.open(member) as handle:
                version = np.lib.format.read_magic(handle)
                if version not in self._HEADER_READERS:
                    raise ValueError(f".npy format version {version} is not supported")
                shape, _, dtype = self._HEADER_READERS[version](handle)
                header_size = handle.tell()
        except Exception as err:
            raise self._error(key, err) from err
        stored = self._zip.getinfo(member).file_size - header_size
        needed = math.prod(shape) * dtype.itemsize
        if needed > stored:  # refused before allocating what the header asks for
            raise MXNetError(f"cannot read array '{key}' of filename={self.path!r}: its "
                             f"header says shape {shape} and dtype {dtype}, {needed} bytes, "
                             f"but the archive holds {stored}")
        return shape, dtype

    def read(self, key: str, shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Array ``key``, whose :meth:`header` said ``shape`` and ``dtype`` (never unpickled)."""
        try:
            with self._zip.open(key + ".npy") as handle:
                values = np.lib.format.read_array(handle, allow_pickle=False)
        except Exception as err:
            raise self._error(key, err) from err
        if values.shape != shape or values.dtype != dtype:
            raise MXNetError(f"cannot read array '{key}' of filename={self.path!r}: it changed "
                             "while it was read")
        return values

    def __enter__(self) -> "_NpzArchive":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._zip.close()


class _ParamsFile:
    """The named arrays of an MXNet NDArray file, behind :class:`_NpzArchive`'s
    interface (the file is parsed and checked whole; values are copied on request)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = ndarray_file.ArrayFile.read(path, "filename")
        if len(self._file) and not self._file.names:
            raise MXNetError(f"filename={path!r} holds a list of {len(self._file)} arrays "
                             "without names (as mx.nd.save of a list writes); parameters "
                             "are loaded from named arrays (a dict, as save_parameters "
                             "writes)")
        self.keys = list(self._file.names)
        self._index = {name: index for index, name in enumerate(self.keys)}

    def header(self, key: str) -> Tuple[Tuple[int, ...], np.dtype]:
        index = self._index[key]
        return self._file.shape(index), self._file.dtype(index)

    def read(self, key: str, shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return self._file.values(self._index[key])

    def __enter__(self) -> "_ParamsFile":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        pass


def _open_saved(path: str) -> Any:
    """The arrays of ``path``: an MXNet NDArray file or an ``.npz`` archive, told
    apart by their first bytes (the name decides only for other contents, so that
    the error speaks of the format the caller meant)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError as err:
        raise MXNetError(f"cannot read filename={path!r}: {err}") from err
    if ndarray_file.is_ndarray_file(head) or (path.lower().endswith(".params")
                                               and not head.startswith(b"PK")):
        return _ParamsFile(path)
    return _NpzArchive(path)


def _unprefixed(key: str) -> str:
    """A saved name without ``save_checkpoint``'s ``arg:``/``aux:`` prefix (MXNet's
    ``ParameterDict.load_dict`` strips it too)."""
    return key[4:] if key.startswith(("arg:", "aux:")) else key
