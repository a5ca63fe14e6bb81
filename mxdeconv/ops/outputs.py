"""Committing results: writing or adding a computed value into a target array.

req=write copies, req=add accumulates; a float16 sum is formed in float32 so
that an overflow can be seen, and warned about (Float16OverflowWarning)
before anything is stored.  ``aliased`` tells when a target shares memory with
an input, so that it is written only after the computation.
"""
from __future__ import annotations

import warnings
from typing import Iterable, Optional, Sequence, overload

import numpy as np

from mxdeconv._core.errors import Float16OverflowWarning
from mxdeconv.ndarray.ndarray import NDArray, write_values


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


