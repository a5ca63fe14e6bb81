"""MXNet 1.9.1's shape arithmetic: ``reshape``'s special values and reduction axes.

Pure functions of shapes (no arrays), checked the way MXNet checks them, so
that NDArray's methods can turn MXNet's arguments into the plain shapes and
axes NumPy takes.

>>> from mxdeconv.semantics.shapes import infer_reshape, reduce_axes
>>> infer_reshape((2, 3, 4), (0, -1))
(2, 12)
>>> reduce_axes((2, 3, 4), 1, exclude=True)
(0, 2)
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence, Tuple

from mxdeconv._core.args import int_arg, ints_arg
from mxdeconv._core.errors import MXNetError

__all__ = ["infer_reshape", "normalize_axis", "reduce_axes"]


def infer_reshape(shape: Sequence[int], codes: Any, reverse: bool = False) -> Tuple[int, ...]:
    """The shape MXNet's ``reshape(codes, reverse=reverse)`` gives an array of ``shape``.

    Special values: ``0`` copies the input dim, ``-1`` infers one dim from the
    size, ``-2`` copies all remaining input dims, ``-3`` merges two
    consecutive input dims, ``-4`` splits one input dim into the next two
    values (one of them may be -1).  ``reverse=True`` applies them from right
    to left.  The size must not change.

    >>> from mxdeconv.semantics.shapes import infer_reshape
    >>> infer_reshape((2, 3, 4), (-3, -2))
    (6, 4)
    >>> infer_reshape((2, 3, 4), (2, -4, -1, 3, -2))
    (2, 1, 3, 4)
    >>> infer_reshape((10, 5, 4), (-1, 0), reverse=True)
    (50, 4)
    """
    codes = ints_arg("shape", codes)
    source = tuple(shape)
    if reverse:
        source, codes = source[::-1], codes[::-1]
    out = []
    unknown = None  # position in `out` of the dim that -1 infers
    src = 0
    i = 0
    while i < len(codes):
        code = codes[i]
        if code > 0:
            out.append(code)
            src += 1
        elif code == 0:
            if src >= len(source):
                raise MXNetError(f"reshape: shape={_show(codes, reverse)} copies input dim {src} "
                                 f"with 0, but the input {tuple(shape)} has {len(source)} dims")
            out.append(source[src])
            src += 1
        elif code == -1:
            if unknown is not None:
                raise MXNetError(f"reshape: shape={_show(codes, reverse)} has more than one -1")
            unknown = len(out)
            out.append(1)
            src += 1
        elif code == -2:
            out.extend(source[src:])
            src = len(source)
        elif code == -3:
            if src + 1 >= len(source):
                raise MXNetError(f"reshape: shape={_show(codes, reverse)} merges input dims "
                                 f"{src} and {src + 1} with -3, but the input {tuple(shape)} has "
                                 f"{len(source)} dims")
            out.append(source[src] * source[src + 1])
            src += 2
        elif code == -4:
            if i + 2 >= len(codes):
                raise MXNetError(f"reshape: shape={_show(codes, reverse)}: -4 must be followed "
                                 "by the two dims to split into")
            if src >= len(source):
                raise MXNetError(f"reshape: shape={_show(codes, reverse)} splits input dim {src} "
                                 f"with -4, but the input {tuple(shape)} has {len(source)} dims")
            whole, first, second = source[src], codes[i + 1], codes[i + 2]
            if first < -1 or second < -1 or (first == -1 and second == -1):
                raise MXNetError(f"reshape: shape={_show(codes, reverse)}: the two dims after -4 "
                                 f"must be >= 0, one of them may be -1, got {first} and {second}")
            if first == -1:
                first = _split_rest(whole, second, codes, reverse)
            elif second == -1:
                second = _split_rest(whole, first, codes, reverse)
            if first * second != whole:
                raise MXNetError(f"reshape: shape={_show(codes, reverse)}: split dims {first} x "
                                 f"{second} do not make input dim {src} of size {whole}")
            out.extend((first, second))
            src += 1
            i += 2
        else:
            raise MXNetError(f"reshape: shape={_show(codes, reverse)}: entries must be >= -4, "
                             f"got {code}")
        i += 1
    size = math.prod(source)
    if unknown is not None:
        known = math.prod(out[:unknown] + out[unknown + 1:])
        if known == 0 or size % known:
            raise MXNetError(f"reshape: cannot infer the -1 in shape={_show(codes, reverse)} for "
                             f"an input of shape {tuple(shape)} (size {size})")
        out[unknown] = size // known
    if math.prod(out) != size:
        raise MXNetError(f"reshape: cannot reshape an array of shape {tuple(shape)} (size {size}) "
                         f"into shape={_show(codes, reverse)}, which has size {math.prod(out)}")
    return tuple(out[::-1] if reverse else out)


def _show(codes: Tuple[int, ...], reverse: bool) -> Tuple[int, ...]:
    return codes[::-1] if reverse else codes


def _split_rest(whole: int, other: int, codes: Tuple[int, ...], reverse: bool) -> int:
    if other == 0 or whole % other:
        raise MXNetError(f"reshape: shape={_show(codes, reverse)}: split dim {other} does not "
                         f"divide the input dim of size {whole}")
    return whole // other


def normalize_axis(name: str, axis: Any, ndim: int) -> int:
    """One axis in ``[-ndim, ndim)`` as a non-negative int.

    >>> from mxdeconv.semantics.shapes import normalize_axis
    >>> normalize_axis("axis", -1, 3)
    2
    """
    axis = int_arg(name, axis)
    if not -ndim <= axis < ndim:
        raise MXNetError(f"{name}={axis} is out of range for an array of {ndim} dims "
                         f"(valid: {-ndim} to {ndim - 1})")
    return int(axis) % ndim


def reduce_axes(shape: Sequence[int], axis: Any, exclude: bool = False,
                name: str = "axis") -> Optional[Tuple[int, ...]]:
    """The axes an MXNet reduction (``sum``, ``mean``, ...) reduces: None for all.

    ``axis`` None or ``()`` means every axis (MXNet's default), with
    ``exclude=True`` too (as MXNet 1.9.1 does); otherwise ``exclude=True``
    reduces every axis *not* listed.  Duplicates and axes out of range raise.

    >>> from mxdeconv.semantics.shapes import reduce_axes
    >>> reduce_axes((2, 3), None) is None
    True
    >>> reduce_axes((2, 3), (0, 1), exclude=True)
    ()
    """
    if not isinstance(exclude, (bool, numbers.Integral)) or isinstance(exclude, float):
        raise TypeError(f"exclude must be a bool, got {exclude!r}")
    ndim = len(shape)
    if axis is None or (isinstance(axis, (tuple, list)) and len(axis) == 0):
        return None
    axes = ints_arg(name, axis)
    normalized = tuple(normalize_axis(name, a, ndim) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise MXNetError(f"{name}={axis!r} has duplicate axes")
    if exclude:
        return tuple(a for a in range(ndim) if a not in normalized)
    return tuple(sorted(normalized))
