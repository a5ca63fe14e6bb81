"""Results, new or written into a caller's target: what the ``nd`` functions
share (their array arguments, MXNet's ``name=``, ``out=``), and how the
operators (``ops``) write or add a computed value into ``out=``/``grads=``
targets for ``req="write"``/``"add"``.

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

The operators' writes: req=write copies, req=add accumulates; a float16 sum
is formed in float32 so that an overflow can be seen, and warned about
(Float16OverflowWarning) before anything is stored.  ``aliased`` tells when a
target shares memory with an input, so that it is written only after the
computation (``into`` refuses it while recording).
"""
from __future__ import annotations

import warnings
from typing import Any, Iterable, Optional, Sequence, overload

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.errors import Float16OverflowWarning, MXNetError
from .ndarray import NDArray, write_values
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
    tape.check_not_in_place(name, out, aliased(out, inputs), inputs)
    buffer = check_writable(name, out)
    np.copyto(buffer, result._plain())
    out._bump()
    return tape.transfer_output(result, out)


# -- the operators' writes (req) ---------------------------------------------------
def aliased(target: Optional[NDArray], others: Iterable[Optional[NDArray]]) -> bool:
    """Whether ``target`` is, or may share memory with, one of ``others``."""
    if target is None:
        return False
    for other in others:
        if other is not None and (other is target or np.may_share_memory(
                other._state[0], target._state[0])):
            return True
    return False


FLOAT16 = np.dtype(np.float16)
FLOAT16_MAX = float(np.finfo(np.float16).max)


def final_values(result: np.ndarray, target: Optional[NDArray], req: str) -> np.ndarray:
    """What ``target`` will hold: ``result``, or for req=add ``target + result``
    (float16 sums are formed in float32 so that an overflow can be seen)."""
    if target is None or req != "add":
        return result
    plain = target._plain()
    if result.dtype == FLOAT16:
        return plain.astype(np.float32) + result
    return result  # added in place by _store


def check_float16_overflow(names: Sequence[str], values: Sequence[Optional[np.ndarray]],
                            inputs: Sequence[Optional[np.ndarray]]) -> None:
    """Warn (:class:`Float16OverflowWarning`) before anything is stored when a
    float16 result has a finite value beyond float16's range: it becomes +-inf.
    Results that are inf because an input holds inf or NaN are propagation, not
    overflow, and do not warn."""
    messages = []
    for name, value in zip(names, values):
        if value is None or value.size == 0:
            continue
        big = int(np.count_nonzero(np.abs(value) > FLOAT16_MAX))
        if big:
            messages.append(f"{name}: {big} of {value.size} values")
    if messages and all(np.isfinite(np.asarray(a)).all() for a in inputs if a is not None):
        warnings.warn(Float16OverflowWarning(
            f"float16 overflow: {'; '.join(messages)} exceed float16's largest finite "
            f"value {FLOAT16_MAX:g} and are stored as +-inf (they were computed in "
            "float32; use float32 inputs to keep them)"), stacklevel=5)


def store(value: np.ndarray, target: Optional[NDArray], req: str) -> NDArray:
    """Write (or add) ``value`` from :func:`final_values` into ``target``, or wrap
    it in a new NDArray of the call's dtype (a float16 sum, formed in float32
    by final_values, is written)."""
    add = req == "add" and target is not None and value.dtype == target.dtype
    return write_values(value, target, add)


@overload
def plain(arr: NDArray) -> np.ndarray: ...
@overload
def plain(arr: None) -> None: ...
@overload
def plain(arr: Optional[NDArray]) -> Optional[np.ndarray]: ...


def plain(arr: Optional[NDArray]) -> Optional[np.ndarray]:
    """The default-layout values of ``arr`` (None stays None)."""
    return None if arr is None else arr._plain()


def store_result(result: NDArray, target: NDArray, req: str) -> NDArray:
    """Write or add an implementation's fresh ``result`` into ``target``."""
    values = result._plain()
    value = final_values(values, target, req)
    if values.dtype == FLOAT16:
        check_float16_overflow(("result",), (value,), (values, plain(target)))
    return store(value, target, req)


