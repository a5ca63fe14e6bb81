"""Calls of provisional plans: each result is checked before it is returned.

A big layer's first call runs oneDNN's first candidate before the kernel
check has seen it (:data:`mxdeconv.onednn.planner.confirm.PROVISIONAL_MACS`): its
result is checked here on sampled elements
(:mod:`mxdeconv.onednn.result_check`).  A result that disagrees refuses the
plan (one :class:`~mxdeconv.KernelDefectWarning`): the call is prepared again,
now with the kernel check, and run again into the same arrays.  So results
are only ever *written* by a provisional plan, never added: a req='add'
target gets a fresh result, added once it passed (the caller's ``late``).
"""
from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional, Sequence, Tuple, overload

import numpy as np

from mxdeconv.onednn import planner, result_check
from mxdeconv.ndarray.ndarray import NDArray
from .validation import Call


@overload
def _values(array: NDArray) -> np.ndarray: ...
@overload
def _values(array: Optional[NDArray]) -> Optional[np.ndarray]: ...


def _values(array: Optional[NDArray]) -> Optional[np.ndarray]:
    """An array's values in the default layout, leaving its own layout alone."""
    return None if array is None else _plain(*array._state)


def _plain(buffer: np.ndarray, layout: Any) -> np.ndarray:
    """The default-layout values of an array's state ``(buffer, layout)``."""
    return buffer if layout is None else layout.to_plain(buffer)


def _sampled(array: NDArray) -> result_check.Result:
    """An array's values for a check that reads a few of them: a blocked
    result is read in place (:meth:`Layout.take`), not reordered whole."""
    buffer, layout = array._state
    return buffer if layout is None else functools.partial(layout.take, buffer)


def _run_timed(plan: Any, run: Callable[[], Any]) -> Any:
    begun = time.perf_counter()
    result = run()
    planner.ran(plan, time.perf_counter() - begun)
    return result


def forward(impl: Any, call: Call, out: Optional[NDArray], req: str,
            select: Callable[[Call], Any]) -> NDArray:
    """``impl.forward(call, out, req)`` (req 'write' or 'inplace'), its result
    checked when the plan is provisional; ``select`` prepares ``call`` again."""
    # The inputs as they were held before the call: an inference weight is
    # reordered into the plan's layout by it, and the plain bytes it had then
    # spare the check a reorder back (DCGAN 512 -> 256's: 8 MB of fresh memory).
    data, weight = call.data._state, call.weight._state
    bias = None if call.bias is None else call.bias._state
    result = _run_timed(call.plan, lambda: impl.forward(call, out, req))
    if not planner.provisional(call.plan):
        return result
    reason = result_check.forward_result(
        call.geom, _plain(*data), _plain(*weight), None if bias is None else _plain(*bias),
        _sampled(result))
    if reason is None:
        return result
    planner.refuse(call.plan, call.geom, reason)
    return select(call).forward(call, result, "write")


def provisional_backward(call: Call) -> bool:
    """Whether a backward call on the oneDNN path runs a provisional pass."""
    plans = call.plan
    return planner.provisional(plans.data) or planner.provisional(plans.weights)


def backward(impl: Any, call: Call, out_grad: NDArray, grads: Sequence[Optional[NDArray]],
             reqs: Sequence[str], select: Callable[[Call], Any]) -> Tuple:
    """``impl.backward(...)`` (no req 'add': see the module's note), each
    provisional pass's results checked; ``select`` prepares ``call`` again."""
    results = _run_timed(call.plan, lambda: impl.backward(call, out_grad, grads, reqs))
    plans = call.plan
    data_grad, weight_grad, bias_grad = (None if r == "null" else g
                                         for g, r in zip(results, reqs))
    reasons = []
    if planner.provisional(plans.data) and data_grad is not None:
        reason = result_check.backward_data_result(
            call.geom, _values(out_grad), _values(call.weight), _sampled(data_grad))
        if reason is not None:
            reasons.append((plans.data, reason))
    if planner.provisional(plans.weights) and (weight_grad is not None
                                               or bias_grad is not None):
        reason = result_check.backward_weights_result(
            call.geom, _values(call.data), _values(out_grad), _values(weight_grad),
            _values(bias_grad))
        if reason is not None:
            reasons.append((plans.weights, reason))
    if not reasons:
        return results
    for plan, reason in reasons:
        planner.refuse(plan, call.geom, reason)
    again = [None if r == "null" else g for g, r in zip(results, reqs)]
    return select(call).backward(call, out_grad, again,
                                 ["null" if r == "null" else "write" for r in reqs])
