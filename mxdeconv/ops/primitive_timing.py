"""Timing oneDNN's primitives alone, no Python around them (what the benchmark
sets beside the public API), and what the planner chose for a call.

These run the very plans that ``nd.Deconvolution`` uses for a call (chosen and
checked by the planner), in a C loop over buffers already in the primitives'
layouts, so they are the floor the public API can approach.
"""
from __future__ import annotations

from typing import Any, Dict, List

from mxdeconv.onednn import planner
from mxdeconv.onednn._loader import extension as onednn_ops
from mxdeconv._core.dtypes import onednn_name
from .validation import BACKWARD, make_call


def _plan(data: Any, weight: Any, bias: Any, params: dict, training: bool,
          purpose: str) -> Any:
    if onednn_ops is None:
        raise ImportError("the oneDNN extension is not built")
    call = make_call(data, weight, bias, params, training, purpose)
    dtype = onednn_name(call.dtype)
    if dtype is None:
        raise RuntimeError(f"dtype {call.dtype} has no oneDNN plan")
    if purpose == BACKWARD:
        plan = planner.backward_plans(call.geom, dtype)
    else:
        plan = planner.forward_plan(call.geom, dtype, training, False)
    if isinstance(plan, planner.Unavailable):
        raise RuntimeError(plan.reason)
    return plan


def raw_forward_seconds(data: Any, weight: Any, bias: Any, repeats: int,
                        training: bool = False, **params: Any) -> List[float]:
    """Per-iteration seconds of the forward primitive(s) alone."""
    return onednn_ops.bench_raw(_plan(data, weight, bias, params, training, "forward"), repeats)


def raw_backward_seconds(data: Any, weight: Any, bias: Any, repeats: int,
                         **params: Any) -> List[float]:
    """Per-iteration seconds of backward data + backward weights (and bias)."""
    plan = _plan(data, weight, bias, params, True, BACKWARD)
    data_times = onednn_ops.bench_raw(plan.data, repeats)
    weight_times = onednn_ops.bench_raw(plan.weights, repeats)
    return [a + b for a, b in zip(data_times, weight_times)]


def plan_summary(data: Any, weight: Any, bias: Any, training: bool,
                 **params: Any) -> Dict[str, Dict[str, Any]]:
    """What the planner chose for the forward (in ``training`` mode) and the two
    backward passes: kernel, layouts, threads, how, and seconds spent choosing."""
    forward = _plan(data, weight, bias, params, training, "forward")
    backward = _plan(data, weight, bias, params, True, BACKWARD)
    summary = {}
    for name, plan in (("forward", forward), ("backward_data", backward.data),
                       ("backward_weights", backward.weights)):
        choice = plan.choice
        summary[name] = {"impl": plan.impl, "threads": plan.threads, "how": choice.how,
                         "choose_s": choice.seconds, "family": plan.family}
    return summary
