"""MXNet's functions that change an array's shape: ``nd.reshape``,
``nd.transpose``, ``nd.flatten``, ``nd.expand_dims``, ``nd.squeeze``,
``nd.broadcast_to``, ``nd.broadcast_like``.

Each returns a new array (MXNet's operators copy: only the *method*
``x.reshape`` shares memory), with MXNet's arguments and ``out=``; the first
five are the NDArray methods (:mod:`mxdeconv.ndarray.methods`).  All are
recorded by autograd; ``broadcast_*`` sum the gradient back over the axes
they repeated.

>>> from mxdeconv import nd
>>> x = nd.array([[1, 2, 3]])
>>> nd.reshape(x, (3, -1)).shape, nd.transpose(x).shape, nd.expand_dims(x, 0).shape
((3, 1), (3, 1), (1, 1, 3))
>>> nd.broadcast_to(x, (2, 3)).asnumpy()
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import bool_arg, ints_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.shapes import infer_reshape, normalize_axis
from .ndarray import NDArray
from .numpy_protocols import check_gradient, wrap
from .results import array_arg, check_name, into

__all__ = ["Flatten", "broadcast_like", "broadcast_to", "expand_dims", "flatten", "reshape",
           "squeeze", "tile", "transpose"]


def reshape(data: NDArray, shape: Any = None, reverse: bool = False,
            out: Optional[NDArray] = None, name: Optional[str] = None) -> NDArray:
    """A copy of ``data`` in ``shape``, with MXNet's special values (``0``
    copy a dim, ``-1`` infer it, ``-2`` copy the rest, ``-3`` merge two,
    ``-4`` split one; ``reverse=True`` from the right), see
    :func:`mxdeconv.semantics.shapes.infer_reshape`.

    >>> from mxdeconv import nd
    >>> x = nd.zeros((2, 3, 4))
    >>> nd.reshape(x, (0, -1)).shape, nd.reshape(x, shape=(-3, 4)).shape
    ((2, 12), (6, 4))
    """
    arr = array_arg("reshape", data)
    check_name("reshape", name)
    if shape is None:
        raise TypeError("reshape: the new shape must be given (shape=)")
    target = infer_reshape(arr.shape, shape, bool_arg("reshape: reverse", reverse))
    return into("reshape", arr._reshape_copy(target), out, (arr,))


def transpose(data: NDArray, axes: Any = None, out: Optional[NDArray] = None,
              name: Optional[str] = None) -> NDArray:
    """A copy with the axes permuted as ``axes`` lists them (reversed when
    ``axes`` is None or empty).

    >>> from mxdeconv import nd
    >>> x = nd.zeros((2, 3, 4))
    >>> nd.transpose(x).shape, nd.transpose(x, axes=(1, 0, 2)).shape
    ((4, 3, 2), (3, 2, 4))
    """
    arr = array_arg("transpose", data)
    check_name("transpose", name)
    return into("transpose", arr.transpose(axes=axes), out, (arr,))


def flatten(data: NDArray, out: Optional[NDArray] = None,
            name: Optional[str] = None) -> NDArray:
    """A copy as 2-D ``(d0, d1 * ... * dk)`` (MXNet's ``Flatten``: the first
    axis is kept).

    >>> from mxdeconv import nd
    >>> nd.flatten(nd.zeros((2, 3, 4))).shape, nd.Flatten(nd.zeros((3,))).shape
    ((2, 12), (3, 1))
    """
    arr = array_arg("flatten", data)
    check_name("flatten", name)
    return into("flatten", arr.flatten(), out, (arr,))


#: MXNet's other name for :func:`flatten`.
Flatten = flatten


def expand_dims(data: NDArray, axis: int, out: Optional[NDArray] = None,
                name: Optional[str] = None) -> NDArray:
    """A copy with a new axis of length 1 at ``axis`` (``-ndim-1 <= axis <= ndim``).

    >>> from mxdeconv import nd
    >>> nd.expand_dims(nd.zeros((2, 3)), axis=1).shape, nd.expand_dims(nd.zeros((2, 3)), -1).shape
    ((2, 1, 3), (2, 3, 1))
    """
    arr = array_arg("expand_dims", data)
    check_name("expand_dims", name)
    normalize_axis("expand_dims: axis", axis, arr.ndim + 1)
    return into("expand_dims", arr.expand_dims(axis), out, (arr,))


def squeeze(data: NDArray, axis: Any = None, out: Optional[NDArray] = None,
            name: Optional[str] = None) -> NDArray:
    """A copy without the axes of length 1 (all of them, or those in ``axis``,
    which must have length 1); one axis is kept when all would go, as MXNet
    has no 0-d results.

    >>> from mxdeconv import nd
    >>> x = nd.zeros((2, 1, 3, 1))
    >>> nd.squeeze(x).shape, nd.squeeze(x, axis=1).shape, nd.squeeze(nd.zeros((1, 1))).shape
    ((2, 3), (2, 3, 1), (1,))
    """
    arr = array_arg("squeeze", data)
    check_name("squeeze", name)
    return into("squeeze", arr.squeeze(axis), out, (arr,))


def _broadcast(function: str, op: str, inputs: Sequence[NDArray], shape: Tuple[int, ...],
               out: Any) -> NDArray:
    """``inputs[0]`` repeated to ``shape`` (checked against it first)."""
    arr = inputs[0]
    if len(shape) != arr.ndim or any(want < 0 or have not in (want, 1) for have, want in
                                     zip(arr.shape, shape)):
        raise MXNetError(f"{function}: an array of shape {arr.shape} cannot be broadcast to "
                         f"{shape} (same number of dims; each dim equal or 1)")
    check_gradient(function, op, inputs)
    result = wrap(np.broadcast_to(arr._plain(), shape))
    return into(function, tape.record_op(op, result, inputs, None), out, inputs)


def broadcast_to(data: NDArray, shape: Any, out: Optional[NDArray] = None,
                 name: Optional[str] = None) -> NDArray:
    """``data`` repeated along its axes of length 1 to ``shape`` (same number of
    dims; a 0 in ``shape`` keeps that dim).

    >>> from mxdeconv import nd
    >>> nd.broadcast_to(nd.array([[1], [2]]), shape=(0, 3)).asnumpy()
    array([[1., 1., 1.],
           [2., 2., 2.]], dtype=float32)
    """
    arr = array_arg("broadcast_to", data)
    check_name("broadcast_to", name)
    wanted = ints_arg("broadcast_to: shape", shape)
    target = wanted if len(wanted) != arr.ndim else tuple(
        have if want == 0 else want for want, have in zip(wanted, arr.shape))
    return _broadcast("broadcast_to", "broadcast_to", (arr,), target, out)


def broadcast_like(lhs: NDArray, rhs: NDArray, lhs_axes: Any = None, rhs_axes: Any = None,
                   out: Optional[NDArray] = None, name: Optional[str] = None) -> NDArray:
    """``lhs`` repeated to ``rhs``'s shape, or on ``lhs_axes`` only, to the
    extents of ``rhs`` on ``rhs_axes`` (give both or neither).  ``rhs`` gets a
    zero gradient: only its shape is read.

    >>> from mxdeconv import nd
    >>> nd.broadcast_like(nd.array([[1, 2]]), nd.zeros((3, 2))).shape
    (3, 2)
    >>> nd.broadcast_like(nd.array([[1], [2]]), nd.zeros((5, 4)), lhs_axes=(1,),
    ...                   rhs_axes=(1,)).shape
    (2, 4)
    """
    left = array_arg("broadcast_like", lhs, "lhs")
    right = array_arg("broadcast_like", rhs, "rhs")
    check_name("broadcast_like", name)
    if (lhs_axes is None) != (rhs_axes is None):
        raise MXNetError("broadcast_like: give lhs_axes and rhs_axes together, or neither")
    if lhs_axes is None:
        target = right.shape
    else:
        lhs_list = ints_arg("broadcast_like: lhs_axes", lhs_axes)
        rhs_list = ints_arg("broadcast_like: rhs_axes", rhs_axes)
        if len(lhs_list) != len(rhs_list):
            raise MXNetError(f"broadcast_like: lhs_axes={tuple(lhs_list)} and rhs_axes="
                             f"{tuple(rhs_list)} must have the same length")
        shape = list(left.shape)
        for a, b in zip(lhs_list, rhs_list):
            shape[normalize_axis("broadcast_like: lhs_axes", a, left.ndim)] = \
                right.shape[normalize_axis("broadcast_like: rhs_axes", b, right.ndim)]
        target = tuple(shape)
    return _broadcast("broadcast_like", "broadcast_like", (left, right), target, out)


def tile(data: NDArray, reps: Any, out: Optional[NDArray] = None,
         name: Optional[str] = None) -> NDArray:
    """``data`` repeated ``reps[i]`` times along axis ``i`` (MXNet's ``nd.tile``,
    NumPy's rule: a shorter ``reps`` applies to the last axes, a longer one
    adds leading axes).  The gradient sums the copies.

    >>> from mxdeconv import nd
    >>> nd.tile(nd.array([[1, 2]]), (2, 2)).asnumpy()
    array([[1., 2., 1., 2.],
           [1., 2., 1., 2.]], dtype=float32)
    >>> nd.tile(nd.array([1, 2]), (2, 1, 2)).shape
    (2, 1, 4)
    """
    arr = array_arg("tile", data)
    check_name("tile", name)
    reps = ints_arg("tile: reps", reps)
    if not reps or any(r < 1 for r in reps):
        raise MXNetError(f"tile: reps must be a non-empty tuple of positive ints, got "
                         f"reps={reps}")
    check_gradient("tile", "tile", (arr,))
    ndim = max(arr.ndim, len(reps))
    shape = (1,) * (ndim - arr.ndim) + arr.shape
    full_reps = (1,) * (ndim - len(reps)) + reps
    result = wrap(np.tile(arr._plain(), full_reps), arr.dtype)
    return into("tile", tape.record_op("tile", result, (arr,), (shape, full_reps)), out,
                (arr,))
