"""The planner: which oneDNN plan runs a geometry, checked before its first use.

For a new (pass, geometry, dtype, mode, thread count) it walks the candidates
oneDNN offers (``_ops.*_candidates``: its implementations in each layout
family, the bias fused or added by a separate primitive, reference kernels
last) and takes the first whose result on the real geometry agrees with an
independent computation (:mod:`mxdeconv.kernel_check`).  Each rejected
candidate raises one :class:`~mxdeconv.KernelDefectWarning` naming the kernel
and the geometry.  When no candidate agrees, or oneDNN has none, the answer
is an :class:`Unavailable` whose reason the registry reports, and the call
runs on the NumPy path.

Plans hold primitives whose execution state is per thread, so they are
cached per thread (``_ops``' LRU cache); the *choice* is remembered per
process, so another thread builds the chosen candidate directly, without
checking again.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, List, Optional, Tuple, Union

from . import kernel_check
from ._loader import ops as _ops
from .base import KernelDefectWarning, MXNetError
from .params import DeconvGeometry

@dataclass(frozen=True)
class Unavailable:
    """No oneDNN plan can run this pass; ``reason`` says why."""

    reason: str


@dataclass
class Choice:
    """What the planner decided for one key, kept for the process."""

    index: Optional[int]               # the chosen candidate's position, None: none
    impl: str = ""
    rejected: List[Tuple[str, str]] = field(default_factory=list)  # (candidate, why)
    seconds: float = 0.0               # time spent choosing (candidates built, checks)
    reason: str = ""                   # why nothing was chosen

    def verdict(self) -> str:
        """One line for explain(): what the check found."""
        if self.index is None:
            return f"no oneDNN plan: {self.reason}"
        text = (f"checked on this geometry against the NumPy path (exact small-integer "
                f"inputs): {self.impl} agreed ({self.seconds * 1e3:.1f} ms to choose)")
        for candidate, why in self.rejected:
            text += f"; rejected {candidate}: {why}"
        return text


#: key -> Choice, for the process (bounded like every cache here: an LRU map).
_choices = _ops.LRUCache(1 << 14) if _ops is not None else None
_warned: set = set()


def _choose(what: str, geom: DeconvGeometry, candidates: Callable[[], Iterable[Any]],
            check: Callable[[Any], Optional[str]]) -> Tuple[Choice, Any]:
    """The first candidate whose plan passes ``check``, and that plan."""
    start = time.perf_counter()
    rejected: List[Tuple[str, str]] = []
    try:
        for candidate in candidates():
            try:
                plan = candidate.build()
            except MXNetError as error:
                rejected.append((repr(candidate), str(error)))
                continue
            reason = check(plan)
            if reason is None:
                return Choice(candidate.index, candidate.impl, rejected,
                              time.perf_counter() - start), plan
            rejected.append((repr(candidate), reason))
            _warn(candidate, geom, reason)
    except MXNetError as error:  # oneDNN refused the pass outright
        return Choice(None, rejected=rejected, reason=str(error),
                      seconds=time.perf_counter() - start), None
    why = "; ".join(f"{c}: {r}" for c, r in rejected) or (
        f"oneDNN {_ops.onednn_version()} has no {what} implementation for this geometry "
        f"and dtype on this CPU (ISA {_ops.cpu_isa()})")
    return Choice(None, rejected=rejected, reason=why,
                  seconds=time.perf_counter() - start), None


def _warn(candidate: Any, geom: DeconvGeometry, reason: str) -> None:
    key = (candidate.impl, candidate.family, candidate.bias_fused, geom)
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(KernelDefectWarning(
        f"oneDNN kernel {candidate.impl} ({candidate.family} layouts"
        f"{'' if candidate.bias_fused else ', bias added separately'}) gave a wrong result "
        f"on data {geom.data_shape} -> {geom.out_shape}, kernel={geom.param.kernel}, "
        f"stride={geom.param.stride}, dilate={geom.param.dilate}, pad_l={geom.pad_l}, "
        f"pad_r={geom.pad_r}, num_group={geom.param.num_group}, "
        f"bias={geom.bias_shape is not None}: {reason}; another plan is used instead"),
        stacklevel=2)


def _plan(key: tuple, geom: DeconvGeometry, candidates: Callable[[], Iterable[Any]],
          make_check: Callable[[], kernel_check.Check]) -> Union[Any, Unavailable]:
    plan = _ops.cache(key)
    if plan is not None:
        return plan
    choice = _choices.get(key)
    if choice is None:
        choice, plan = _choose(key[0].replace("_", " "), geom, candidates, make_check())
        _choices.put(key, choice)
    elif choice.index is not None:  # chosen by another thread (or before an eviction)
        plan = next(c for c in candidates() if c.index == choice.index).build()
    if plan is None:
        unavailable = Unavailable(choice.verdict())
        _ops.cache_put(key, unavailable)
        return unavailable
    plan.verdict = choice
    _ops.cache_put(key, plan)
    return plan


def forward_plan(geom: DeconvGeometry, dtype: str, training: bool,
                 accumulate: bool) -> Union[Any, Unavailable]:
    """The checked forward plan (``accumulate``: req=add as a sum post-op)."""
    key = ("forward", geom, dtype, training, accumulate, _ops.get_num_threads())
    return _plan(key, geom,
                 lambda: _ops.forward_candidates(geom, dtype, training, accumulate),
                 lambda: kernel_check.forward_check(geom, dtype, accumulate))


@dataclass(frozen=True)
class BackwardPlans:
    """The two backward passes of one geometry."""

    data: Any
    weights: Any


def backward_plans(geom: DeconvGeometry, dtype: str) -> Union[BackwardPlans, Unavailable]:
    """The checked backward-data and backward-weights plans.  Backward data is
    chosen second, preferring the out_grad layout backward weights reads."""
    threads = _ops.get_num_threads()
    weights = _plan(("backward_weights", geom, dtype, threads), geom,
                    lambda: _ops.backward_weights_candidates(geom, dtype),
                    lambda: kernel_check.backward_weights_check(geom, dtype))
    if isinstance(weights, Unavailable):
        return weights
    data = _plan(("backward_data", geom, dtype, threads), geom,
                 lambda: _ops.backward_data_candidates(geom, dtype, weights.diff_dst),
                 lambda: kernel_check.backward_data_check(geom, dtype))
    if isinstance(data, Unavailable):
        return data
    return BackwardPlans(data, weights)


def clear_choices() -> None:
    """Forget every choice (the next plan of each key is chosen and checked again)."""
    _choices.clear()
    _warned.clear()
