"""Indexing NDArrays as MXNet 1.9.1 does: ``x[key]`` and ``x[key] = value``.

Reading (``NDArray.__getitem__``):

* basic indexing (ints, slices, ``None``, ``...``) whose result is one
  contiguous block of memory returns a **view** sharing memory with ``x``, as
  MXNet does (``x[1:3]``, ``x[0]``, ``x[1, :2]``); any other basic indexing
  (``x[:, 1:2]``, ``x[::2]``) returns a copy.  A view and ``x`` are both
  *exposed* from then on: they keep their buffers for good (see
  :doc:`layouts`);
* ``x[:]`` and ``x[()]`` return ``x`` itself;
* integers only (``x[0]`` on 1-D, ``x[1, 2]``) give a view of shape ``(1,)``:
  MXNet's NDArray has no 0-d results;
* advanced indexing (lists, integer NumPy arrays, NDArrays, mixed with
  slices) returns a copy, with NumPy's rules.  NDArray indices may hold floats
  (``nd.array([0, 2])`` is float32) as long as they are whole numbers.
  Boolean masks raise: MXNet 1.9.1 refuses an NDArray mask and silently reads
  a NumPy boolean array as 0/1 integer indices.

Writing (``NDArray.__setitem__``) copies ``value`` (a number, an NDArray of any
dtype, a NumPy array or nested lists) cast to ``x``'s dtype and broadcast to
the selection (leading axes of length 1 dropped), into ``x``'s memory, and
bumps ``x``'s version.  Everything is checked first, so a failing assignment
leaves ``x`` unchanged.  Inside ``autograd.record()`` assigning into an array
of the graph, or a value that needs a gradient, raises MXNet's error.

Out-of-range indices raise :class:`NDArrayIndexError`, which is both an
:class:`~mxdeconv.MXNetError` and an :class:`IndexError` (as MXNet raises, and
as Python's sequence protocol expects).

>>> from mxdeconv import nd
>>> x = nd.array([[1, 2, 3], [4, 5, 6]])
>>> x[1].asnumpy(), x[0, 2].asnumpy(), x[:, [0, 2]].asnumpy()
(array([4., 5., 6.], dtype=float32), array([3.], dtype=float32), array([[1., 3.],
       [4., 6.]], dtype=float32))
>>> x[0] = 0
>>> x[:, 1:] = nd.array([7, 8])
>>> x.asnumpy()
array([[0., 7., 8.],
       [4., 7., 8.]], dtype=float32)
"""
from __future__ import annotations

import numbers
from typing import Any, List, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.dtypes import is_float_dtype
from .ndarray import NDArray
from .numpy_protocols import check_gradient, check_writable, is_number, scalar, wrap

__all__ = ["NDArrayIndexError"]


class NDArrayIndexError(MXNetError, IndexError):
    """An index out of range, or too many indices: an :class:`~mxdeconv.MXNetError`
    and an :class:`IndexError` (what MXNet raises, and what Python expects)."""


def _describe(key: Any) -> str:
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _index_array(key: Any, entry: Any) -> np.ndarray:
    """An advanced index (list, NumPy array, NDArray, range) as an intp array."""
    if isinstance(entry, NDArray):
        values = entry._plain()
    elif isinstance(entry, range):
        values = np.arange(entry.start, entry.stop, entry.step)
    else:
        try:
            values = np.asarray(entry)
        except ValueError:
            raise MXNetError(f"index {_describe(entry)} in key {_describe(key)} is not a "
                             "rectangular array") from None
    if values.dtype == np.bool_:
        raise MXNetError(f"boolean mask indexing (key {_describe(key)}) is not supported: MXNet "
                         "1.9.1's NDArray refuses a boolean NDArray and reads a NumPy boolean "
                         "array as 0/1 indices; use the indices np.nonzero(mask)[0] instead")
    if values.dtype.kind in "iu":
        return values.astype(np.intp, copy=False)
    if is_float_dtype(values.dtype):
        whole = np.trunc(values)
        if not np.array_equal(whole, values):
            raise MXNetError(f"index array {_describe(entry)} in key {_describe(key)} holds "
                             "values that are not whole numbers")
        return whole.astype(np.intp)
    raise TypeError(f"index array {_describe(entry)} in key {_describe(key)} must hold integers, "
                    f"got dtype {values.dtype}")


def _slice_bound(key: Any, value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value if value is None else int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    raise TypeError(f"slice bounds in key {_describe(key)} must be ints or None, got "
                    f"{value!r} of type {type(value).__name__}")


def normalize(key: Any, shape: Tuple[int, ...]) -> Tuple[Tuple[Any, ...], bool]:
    """``key`` checked against ``shape`` and converted for NumPy: (the NumPy key,
    whether it is advanced).  Raises before anything is read or written."""
    entries = key if isinstance(key, tuple) else (key,)
    converted: List[Any] = []
    advanced = False
    for entry in entries:
        if entry is None or entry is Ellipsis:
            converted.append(entry)
        elif isinstance(entry, slice):
            step = _slice_bound(key, entry.step)
            if step == 0:
                raise MXNetError(f"slice step cannot be zero (key {_describe(key)})")
            converted.append(slice(_slice_bound(key, entry.start), _slice_bound(key, entry.stop),
                                   step))
        elif isinstance(entry, numbers.Integral):  # bool too: MXNet reads True as 1
            converted.append(int(entry))
        elif isinstance(entry, (list, tuple, range, np.ndarray, NDArray)):
            converted.append(_index_array(key, entry))
            advanced = True
        else:
            raise TypeError(f"NDArray indices must be ints, slices, None, ..., or integer "
                            f"arrays, got {entry!r} of type {type(entry).__name__} in key "
                            f"{_describe(key)}")
    if sum(entry is Ellipsis for entry in converted) > 1:
        raise NDArrayIndexError(f"an index can only have a single ellipsis (...), got key "
                                f"{_describe(key)}")
    consumed = sum(entry is not None and entry is not Ellipsis for entry in converted)
    if consumed > len(shape):
        raise NDArrayIndexError(f"too many indices ({consumed}) for array with {len(shape)} "
                                f"dimensions (key {_describe(key)})")
    # The axis each entry indexes, for the bounds checks.
    axis = 0
    for entry in converted:
        if entry is None:
            continue
        if entry is Ellipsis:
            axis += len(shape) - consumed
            continue
        extent = shape[axis]
        if isinstance(entry, int) and not -extent <= entry < extent:
            raise NDArrayIndexError(f"index {entry} is out of bounds for axis {axis} with size "
                                    f"{extent}")
        if isinstance(entry, np.ndarray) and entry.size:
            low, high = int(entry.min()), int(entry.max())
            if low < -extent or high >= extent:
                bad = low if low < -extent else high
                raise NDArrayIndexError(f"index {bad} is out of bounds for axis {axis} with "
                                        f"size {extent}")
        axis += 1
    return tuple(converted), advanced


def getitem(arr: NDArray, key: Any) -> NDArray:
    """``arr[key]`` with MXNet's rules (see the module docstring)."""
    if (isinstance(key, tuple) and not key) or (isinstance(key, slice) and key == slice(None)):
        return arr  # MXNet returns the array itself
    np_key, advanced = normalize(key, arr.shape)
    if advanced:
        check_gradient("take", "take", (arr,))
        values = arr._plain()[np_key]
        out = wrap(values)
        return tape.record_op("take", out, (arr,), (np_key, arr.shape, values.shape))
    check_gradient("slice", "slice", (arr,))
    view = arr._plain()[np_key]
    indexed_shape = view.shape
    if view.flags.c_contiguous:
        # One block of memory: a view, as MXNet's; both arrays are exposed so
        # that neither swaps its buffer for a blocked one under the other.
        # Integers only (no axis left): a trailing None keeps a (1,) view,
        # where NumPy would give a scalar.
        view = arr._expose()[np_key + (None,) if view.ndim == 0 else np_key]
        out = NDArray(view)
        out._exposed = True
    else:
        out = wrap(view.reshape(view.shape or (1,)))
    return tape.record_op("slice", out, (arr,), (np_key, arr.shape, indexed_shape))


def _value(name: str, value: Any, dtype: np.dtype) -> np.ndarray:
    """The assigned value as NumPy values of ``dtype`` (MXNet casts)."""
    if isinstance(value, NDArray):
        values = value._plain()
    elif is_number(value):
        return scalar(f"{name}: value", value, dtype)
    elif isinstance(value, (np.ndarray, list, tuple)):
        try:
            values = np.asarray(value)
        except ValueError:
            raise MXNetError(f"{name}: value is not a rectangular array") from None
        if not (values.dtype.kind in "biuf" or is_float_dtype(values.dtype)):
            raise TypeError(f"{name}: value must hold real numbers, got dtype {values.dtype}")
    else:
        raise TypeError(f"{name}: value must be a number, an NDArray or an array of numbers, "
                        f"got {type(value).__name__}")
    if values.dtype != dtype:
        with np.errstate(all="ignore"):
            values = values.astype(dtype)
    return values


def setitem(arr: NDArray, key: Any, value: Any) -> None:
    """``arr[key] = value`` with MXNet's rules (see the module docstring)."""
    name = f"NDArray[{_describe(key)}] = value"
    tape.check_assignable(name, arr)
    if arr.ndim == 0 and isinstance(key, slice) and key == slice(None):
        key = ()  # MXNet lets `:` address a 0-d array
    np_key, _ = normalize(key, arr.shape)
    values = _value(name, value, arr.dtype)
    selected = np.broadcast_to(np.empty((), np.bool_), arr.shape)[np_key].shape
    fitted = values
    while fitted.ndim > len(selected) and fitted.shape[0] == 1:
        fitted = fitted[0]  # MXNet drops leading axes of length 1
    try:
        np.broadcast_to(fitted, selected)
    except ValueError:
        raise MXNetError(f"{name}: cannot assign a value of shape {values.shape} to a selection "
                         f"of shape {selected}") from None
    buffer = check_writable(name, arr, (value,))
    buffer[np_key] = fitted  # NumPy copies first where value and target overlap
    arr._bump()


# -- NDArray's indexing methods --------------------------------------------------------
def _getitem_method(self: NDArray, key: Any) -> Any:
    return getitem(self, key)


def _setitem_method(self: NDArray, key: Any, value: Any) -> None:
    setitem(self, key, value)


def install() -> None:
    """Set ``x[key]`` and ``x[key] = value`` on NDArray.  The package's
    ``__init__`` calls this: :mod:`mxdeconv.ndarray.ndarray` defines NDArray
    without importing this module, which builds on it."""
    for name, method in (("__getitem__", _getitem_method), ("__setitem__", _setitem_method)):
        method.__name__, method.__qualname__ = name, f"NDArray.{name}"
        setattr(NDArray, name, method)
