"""MXNet's ``nd.dot``: the matrix product of N-D arrays, recorded by autograd.

MXNet's rule for N-D operands: ``lhs`` is a matrix of its leading dims by
its last dim (with ``transpose_a``: its first dim by the rest, transposed),
``rhs`` one of its first dim by the rest (with ``transpose_b``: its leading
dims by its last, transposed); the result has the remaining dims of ``lhs``
then of ``rhs``, ``(1,)`` for two vectors.  float32 and float64 only, as on
MXNet's CPU.

>>> from mxdeconv import nd
>>> a, b = nd.ones((2, 3, 4)), nd.ones((4, 5))
>>> nd.dot(a, b).shape, nd.dot(nd.ones((4, 2)), b, transpose_a=True).shape
((2, 3, 5), (2, 5))
"""
from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import bool_arg
from mxdeconv._core.errors import MXNetError
from .gradients import deliver
from .numpy_protocols import check_gradient, wrap
from .ndarray import NDArray
from .results import array_arg, check_name, into

__all__ = ["dot"]

Shape = Tuple[int, ...]


def _operand(shape: Shape, leading: bool) -> Tuple[Shape, Shape]:
    """``shape`` split into (kept dims, contracted dims): the last dim is
    contracted when ``leading`` is False, the first when True."""
    if len(shape) <= 1:
        return (), shape
    return (shape[1:], shape[:1]) if leading else (shape[:-1], shape[-1:])


def dot(lhs: NDArray, rhs: NDArray, transpose_a: bool = False, transpose_b: bool = False,
        forward_stype: Any = None, out: Optional[NDArray] = None,
        name: Optional[str] = None) -> NDArray:
    """The dot product of ``lhs`` and ``rhs`` (MXNet's ``nd.dot``): sums over
    the last axis of ``lhs`` (its first with ``transpose_a``) and the first
    axis of ``rhs`` (its last with ``transpose_b``).  ``forward_stype`` (sparse
    storage) is accepted as None only.

    >>> from mxdeconv import nd
    >>> a = nd.array([[1, 2], [3, 4]])
    >>> nd.dot(a, a).asnumpy()
    array([[ 7., 10.],
           [15., 22.]], dtype=float32)
    >>> nd.dot(a, a, transpose_a=True).asnumpy()
    array([[10., 14.],
           [14., 20.]], dtype=float32)
    >>> nd.dot(nd.array([1, 2]), nd.array([3, 4])).asnumpy()
    array([11.], dtype=float32)
    """
    left = array_arg("dot", lhs, "lhs")
    right = array_arg("dot", rhs, "rhs")
    check_name("dot", name)
    ta, tb = bool_arg("dot: transpose_a", transpose_a), bool_arg("dot: transpose_b", transpose_b)
    if forward_stype is not None:
        raise MXNetError(f"dot: forward_stype={forward_stype!r}: mxdeconv has dense arrays "
                         "only (forward_stype=None)")
    for side, arr in (("lhs", left), ("rhs", right)):
        if arr.dtype not in (np.float32, np.float64):
            raise TypeError(f"dot: {side} has dtype {arr.dtype}; dot takes float32 or float64 "
                            "(as MXNet on the CPU)")
    if left.dtype != right.dtype:
        raise MXNetError(f"dot: operands have different dtypes {left.dtype} and {right.dtype} "
                         "(MXNet does not promote dtypes: convert one with astype)")
    if left.ndim == 0 or right.ndim == 0:
        raise MXNetError(f"dot: operands must have at least one dim, got shapes {left.shape} "
                         f"and {right.shape}")
    if left.ndim == right.ndim == 1 and (ta or tb):
        raise MXNetError("dot: Cannot transpose vectors (transpose_a and transpose_b need "
                         "arrays of 2 or more dims)")
    left_kept, left_summed = _operand(left.shape, ta)
    right_kept, right_summed = _operand(right.shape, not tb)
    if math.prod(left_summed) != math.prod(right_summed):
        raise MXNetError(f"dot: shape error: {left.shape} x {right.shape} (transpose_a={ta}, "
                         f"transpose_b={tb}): the summed dims {left_summed} and "
                         f"{right_summed} differ")
    check_gradient("dot", "dot", (left, right))
    a, b = _matrices(left._plain(), right._plain(), ta, tb)
    result = wrap((a @ b).reshape(left_kept + right_kept or (1,)))
    recorded = tape.record_op("dot", result, (left, right), (ta, tb))
    return into("dot", recorded, out, (left, right))


def _matrices(a: np.ndarray, b: np.ndarray, ta: bool, tb: bool) -> Tuple[np.ndarray, np.ndarray]:
    """The operands as the two matrices whose product ``dot`` is."""
    a2 = a.reshape(a.shape[0], -1).T if ta else a.reshape(-1, a.shape[-1])
    b2 = b.reshape(-1, b.shape[-1]).T if tb else b.reshape(b.shape[0], -1)
    return a2, b2


@tape.register_backward("dot")
def _dot_backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
    (left, right), (ta, tb) = inputs, attrs
    a, b = _matrices(left._plain(), right._plain(), ta, tb)
    g = out_grad._plain().reshape(a.shape[0], b.shape[1])
    grads: List[Optional[NDArray]] = []
    for i, (arr, req, target) in enumerate(zip(inputs, reqs, targets)):
        if req == "null":
            grads.append(None)
            continue
        if i == 0:
            value = (g @ b.T).T if ta else g @ b.T  # d(a2), a2 = op(lhs) as 2-D
        else:
            value = (a.T @ g).T if tb else a.T @ g
        grads.append(deliver(value.reshape(arr.shape), req, target, arr.dtype))
    return tuple(grads)
