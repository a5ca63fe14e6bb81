"""What the ``nd`` functions share: their array arguments, MXNet's ``name=``,
and the result, new or written into ``out=``.

MXNet's ``out=``: the result is written into ``out`` (an NDArray of the
result's shape and dtype) and ``out`` is returned; inside
:func:`mxdeconv.autograd.record` ``out`` becomes the recorded result, so that
``backward`` runs through it.  As in MXNet, ``out`` may not be an array of the
recorded graph, nor (while recording) one of the call's own inputs.  Every
check runs before ``out`` is written: a refused call leaves it unchanged.

>>> from mxdeconv import nd
>>> out = nd.zeros((2,))
>>> nd.exp(nd.zeros((2,)), out=out) is out, out.asnumpy()
(True, array([1., 1.], dtype=float32))
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.errors import MXNetError
from .ndarray import NDArray
from .numpy_protocols import _arithmetic_dtype, check_writable

__all__ = ["array_arg", "check_name", "into"]


def array_arg(function: str, value: Any, arg: str = "data") -> NDArray:
    """``value`` if it is an NDArray of a dtype arithmetic takes (not bool), else
    TypeError naming the function and the argument (MXNet: only NDArrays)."""
    if not isinstance(value, NDArray):
        raise TypeError(f"{function}: {arg} must be an NDArray, got {type(value).__name__}")
    _arithmetic_dtype(f"{function}: {arg}", value.dtype)
    return value


def check_name(function: str, name: Any) -> None:
    """MXNet's ``name=``: a node name, which imperative calls ignore."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{function}: name must be a string or None, got {name!r} of type "
                        f"{type(name).__name__}")


def into(function: str, result: NDArray, out: Any,
         inputs: Sequence[Optional[NDArray]]) -> NDArray:
    """``result`` (a new array, recorded or not), or with ``out`` given: its
    values written into ``out``, which becomes the recorded result."""
    if out is None:
        return result
    name = f"{function}(out=)"
    if not isinstance(out, NDArray):
        raise TypeError(f"{name}: out must be an NDArray, got {type(out).__name__}")
    if out.shape != result.shape:
        raise MXNetError(f"{name}: out has shape {out.shape} but the result has shape "
                         f"{result.shape}")
    if out.dtype != result.dtype:
        raise MXNetError(f"{name}: out has dtype {out.dtype} but the result has dtype "
                         f"{result.dtype} (MXNet does not cast into out=)")
    aliased = any(arr is not None and (arr is out or np.may_share_memory(
        arr._state[0], out._state[0])) for arr in inputs)
    tape.check_not_in_place(name, out, aliased, inputs)
    buffer = check_writable(name, out)
    np.copyto(buffer, result._plain())
    out._bump()
    return tape.transfer_output(result, out)
