"""Timing hooks for the benchmark: oneDNN's primitives alone, no Python around them.

These run the very primitives that ``nd.Deconvolution`` caches for a call, in
a C loop over buffers already in the primitives' layouts, so they are the
floor the public API can approach.
"""
from __future__ import annotations

from typing import Any, List

from .deconvolution import _ops, make_call


def _geometry(data: Any, weight: Any, bias: Any, params: dict):
    if _ops is None:
        raise ImportError("the oneDNN extension is not built")
    return make_call(data, weight, bias, params, training=None).geom


def raw_forward_seconds(data: Any, weight: Any, bias: Any, repeats: int,
                        training: bool = False, **params: Any) -> List[float]:
    """Per-iteration seconds of the forward primitive alone."""
    return _ops.bench_raw(_geometry(data, weight, bias, params), "forward", training,
                          repeats)


def raw_backward_seconds(data: Any, weight: Any, bias: Any, repeats: int,
                         **params: Any) -> List[float]:
    """Per-iteration seconds of backward data + backward weights (and bias)."""
    geom = _geometry(data, weight, bias, params)
    data_times = _ops.bench_raw(geom, "backward_data", True, repeats)
    weight_times = _ops.bench_raw(geom, "backward_weights", True, repeats)
    return [a + b for a, b in zip(data_times, weight_times)]
