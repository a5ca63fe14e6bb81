"""What a plan costs, end to end for its mode: the primitives' time and the
reorders the call implies (default-layout inputs into the plan's layouts,
results back, the weight on every training call unless the plan takes it
plain), timed once each per tuning."""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List

from .._loader import extension as _ops

#: Estimates shorter than this are taken again, the fastest run kept (noise
#: matters more there; a long run is steady, and a second one would double
#: tuning a big layer): up to SHORT_RUNS more runs within SHORT_RUNS_S, since
#: tiny layers' candidates differ by less than one preempted run.
SECOND_RUN_BELOW_S = 0.005
SHORT_RUNS, SHORT_RUNS_S = 15, 0.0005


class _Costs:
    """Times primitives and the reorders a mode implies, once each per tuning."""

    def __init__(self) -> None:
        self._reorders: Dict[tuple, float] = {}

    #: False: one run after a warm-up (the cheap estimate); True: the median of
    #: enough runs to steady small layers, few for big ones.
    precise = False

    @staticmethod
    def _median(times: List[float]) -> float:
        return statistics.median(times)

    def run(self, plan: Any) -> float:
        """One run after a warm-up, the faster of two for short ones (the cheap
        estimate: one short run alone let a single hiccup drop the best
        candidate before the precise round), or the median of several."""
        once = _ops.bench_raw(plan, 1)[0]
        if once < SECOND_RUN_BELOW_S:
            # The fastest of a few more runs: two microsecond-scale candidates
            # differ by less than one hiccup, and only REFINE of them get a
            # second look.
            runs = max(1, min(SHORT_RUNS, int(SHORT_RUNS_S / max(once, 1e-7))))
            once = min(once, min(_ops.bench_raw(plan, runs)))
        if not self.precise:
            return once
        repeats = max(3, min(25, int(0.01 / max(once, 1e-7))))
        return self._median(_ops.bench_raw(plan, repeats))

    def reorder(self, src: Any, dst: Any) -> float:
        key = (src.key, dst.key, _ops.get_num_threads())
        if key not in self._reorders:
            self._reorders[key] = self._median(_ops.time_reorder(src, dst, 9))
        return self._reorders[key]

    def into(self, layout: Any) -> float:
        """A default-layout array into ``layout``."""
        return 0.0 if layout.is_plain else self.reorder(layout.plain, layout.desc)

    def out_of(self, layout: Any) -> float:
        """A result in ``layout`` back to the default layout."""
        return 0.0 if layout.is_plain else self.reorder(layout.desc, layout.plain)


def _forward_cost(costs: _Costs, plan: Any, training: bool, accumulate: bool) -> float:
    if plan.bias is not None and not plan.bias_fused and plan.dst.desc.dtype == "bfloat16":
        # A separate bias rounds a bfloat16 result twice: such a plan is only
        # for when no fused one is correct (the fallback after the timed ones).
        return math.inf
    seconds = costs.run(plan) + costs.into(plan.src) + costs.out_of(plan.dst)
    if accumulate:
        seconds += costs.into(plan.dst)  # the target seeds dst
    if training:
        seconds += costs.into(plan.weights)  # once per step: the weight changes
    return seconds


def _backward_weights_cost(costs: _Costs, plan: Any) -> float:
    return (costs.run(plan) + costs.into(plan.src) + costs.into(plan.diff_dst)
            + costs.out_of(plan.diff_weights))


def _backward_data_cost(costs: _Costs, plan: Any, shared: Any,
                        forward_weights: Any = None) -> float:
    """Backward data's time with its reorders, less those another pass of the
    step pays: out_grad in backward weights' layout (``shared``: one reorder
    serves both), the weight in the training forward's layout
    (``forward_weights``: the call keeps the forward's reordered copy while the
    weight is unchanged)."""
    diff_dst = 0.0 if shared is not None and plan.diff_dst == shared else \
        costs.into(plan.diff_dst)
    weights = 0.0 if forward_weights is not None and plan.weights == forward_weights else \
        costs.into(plan.weights)
    return costs.run(plan) + diff_dst + weights + costs.out_of(plan.diff_src)
