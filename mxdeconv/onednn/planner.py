"""The planner: the fastest correct oneDNN plan for each pass of a layer.

For a new (pass, geometry, dtype, mode, thread count) it walks the candidates
oneDNN offers (``_ops.*_candidates``: each implementation in each layout family
for the data tensors, oneDNN's or plain weights, the bias fused or added by a
separate primitive, reference kernels last).  No plan reaches a result before
its output agreed with an independent computation on the real geometry
(:mod:`mxdeconv.onednn.kernel_check`); each one that disagrees raises one
:class:`~mxdeconv.KernelDefectWarning`.

* **First call**: the first candidate that agrees runs right away (oneDNN's own
  first choice when it is correct; candidates of a kernel known to be wrong on
  some layers, :func:`_known_suspect`, are tried last).  On a big layer
  (PROVISIONAL_MACS) whose sample sees every defect the kernel check sees
  (:func:`~mxdeconv.onednn.result_check.blind_spot`) the first candidate runs
  *provisionally*: its result is
  returned once :mod:`~mxdeconv.onednn.result_check` agreed with it on sampled
  elements, and the kernel check runs on the layer's next call (_confirm); a
  result that disagrees refuses the plan (:func:`refuse`), and the call is
  planned again, checked, and run again.
* **Later calls** (tuning on, the default): a :class:`_Tuner` times the
  candidates *end to end for the mode* (the primitives plus the reorders the
  call implies: default-layout inputs into the plan's layouts, results back,
  the weight on every training call unless the plan takes it plain), at the
  caller's thread count and, for small layers, on one thread, one unit of
  work at a time, paid for by the calls (each costs on average at most
  TUNE_SHARE more); the fastest candidate that agrees then replaces the first.
  :func:`finish_tuning` tunes every pending pass to the end now, and
  ``MXDECONV_TUNE=eager`` (:func:`set_eager_tuning`) at the first call.
* With tuning off (``MXDECONV_TUNE=0`` or :func:`set_tuning`) the first
  candidate that agrees stays.

Tuning a pass costs at most ``max(TUNE_FLOOR_S, min(TUNE_FACTOR x the first
candidate's time, TUNE_CEILING_S))`` of timing after the first candidate (plus
that one, the candidate running when the bound is reached, and the checks),
once per machine: choices (first and tuned) are kept in memory and on disk
(:mod:`mxdeconv.onednn.plan_store`).  A kept choice holds the check's verdict,
naming what it was checked on; it is used as is only from an entry the store
vouches for (docs/reliability.rst, the trust model) whose verdict names this
library, CPU and candidate, and checked again otherwise.  In deterministic
mode (:func:`set_deterministic`) nothing is tuned or provisional: a pass keeps
its first correct candidate.  When no candidate agrees, or oneDNN has
none, the answer is :class:`Unavailable` and the call runs on the NumPy path.

Plans hold primitives whose execution state is per thread, so they are cached
per thread (``_ops``' LRU cache); the *choice* is remembered per process, so
another thread builds the chosen candidate directly.
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Generator, Iterable, List, NamedTuple, Optional,
                    Sequence, Tuple, Union)

from . import cpu_load, kernel_check, plan_db, plan_store, result_check
from ._loader import ops as _ops
from mxdeconv._core.env import env_word
from mxdeconv._core.errors import KernelDefectWarning, MXNetError
from mxdeconv.semantics.attributes import DeconvGeometry

#: The tuning bound per pass: TUNE_FACTOR times the first candidate's time,
#: within [TUNE_FLOOR_S, TUNE_CEILING_S], from the first candidate's
#: measurement on (building later candidates counts, the final checks do not).
TUNE_FACTOR, TUNE_FLOOR_S, TUNE_CEILING_S = 50, 0.03, 2.0
#: How many of the fastest candidates of the first, two-run estimate are timed
#: again, over several runs, before the fastest correct one is chosen.
REFINE = 4
#: Estimates shorter than this are taken again, the fastest run kept (noise
#: matters more there; a long run is steady, and a second one would double
#: tuning a big layer): up to SHORT_RUNS more runs within SHORT_RUNS_S, since
#: tiny layers' candidates differ by less than one preempted run.
SECOND_RUN_BELOW_S = 0.005
SHORT_RUNS, SHORT_RUNS_S = 15, 0.0005
#: Below this many multiply-adds a pass is also tried on one thread (OpenMP's
#: fork/join costs more than the work); above it, only on the caller's count.
ONE_THREAD_MACS = 32_000_000
#: A candidate on several threads must be this much faster than one on one
#: thread to be preferred (a fraction, and seconds): on a small layer their
#: times differ by less than OpenMP's fork/join varies from run to run (timed
#: back to back, a team looks faster than it is between real calls), and one
#: thread leaves the other cores free.
MORE_THREADS_MARGIN, MORE_THREADS_MARGIN_S = 0.05, 1e-6
#: Another candidate must be this much faster than the pass's first choice
#: (checked, and already running its calls) to replace it.  Closer than that
#: the two differ by less than tuning's noise: in a benchmark run of
#: 2026-12-04 the backward passes the tuner chose over the first choice for
#: DCGAN 512 -> 256 at batch 32 ran up to 5% slower than it beside the peers,
#: and their pair 25% slower.
FIRST_CHOICE_MARGIN = 0.05
#: Before a candidate replaces the first choice, the two are timed again in
#: turns this many times each (with the refine run, the median decides).
DUEL_ROUNDS = 2
#: How a tuner's measurements mark the first choice it started from.
FIRST_CHOICE = " (the first choice)"
#: Part of the on-disk key: bumped whenever the candidates a pass enumerates
#: change (a kept choice names its candidate by position) or the tuner's rules
#: do (a kept choice is what they chose).  Its history: docs/changelog.rst.
PLANNER_VERSION = 7
#: While a layer pass is tuned on its calls, each call costs on average at most
#: this fraction of its own time more (see _Tuner).
TUNE_SHARE = 0.25
#: A tuner's first unit is taken to cost this many calls (building, timing the
#: reorders, warm-up and timed runs) until one has been measured.
UNIT_CALLS = 4
#: The most calls a prepared call serves between two visits to the planner
#: while its layer is tuned (a tiny layer's unit can cost thousands of calls).
MAX_SERVED = 100_000
#: From this many multiply-adds per pass, a new layer's first call runs
#: oneDNN's first candidate *provisionally*: its result is checked on sampled
#: elements (:mod:`mxdeconv.onednn.result_check`, a few percent of the call)
#: instead of the kernel check's extra run of the plan (more than the call
#: itself on a big layer), and the kernel check runs on the layer's next call.
#: Below it the kernel check costs about as little, and runs at once.
PROVISIONAL_MACS = 64_000_000


def _env_tuning() -> Tuple[bool, bool]:
    """(tuning on, eager) from MXDECONV_TUNE: on/off, or "eager" (tune a new
    layer to the end at its first call, as before the tuner ran on calls)."""
    word = env_word("MXDECONV_TUNE", "on", extra=("eager",))
    return word != "off", word == "eager"


def _flag(setter: str, enabled: Any) -> bool:
    if not isinstance(enabled, bool):
        raise TypeError(f"{setter}: enabled must be a bool, got {enabled!r} "
                        f"of type {type(enabled).__name__}")
    return enabled


class ForwardKey(NamedTuple):
    """A forward pass's planner key (equal to, and hashed as, the plain tuple the
    compiled layer's primitive cache is keyed by)."""

    what: str            # "forward"
    geom: DeconvGeometry
    dtype: str
    training: bool
    accumulate: bool     # req=add: a sum post-op
    act_type: Optional[str]
    threads: int
    tuning: bool


class BackwardKey(NamedTuple):
    """A backward pass's planner key."""

    what: str            # "backward_weights" or "backward_data"
    geom: DeconvGeometry
    dtype: str
    threads: int
    tuning: bool


PlanKey = Union[ForwardKey, BackwardKey]


@dataclass(frozen=True)
class Unavailable:
    """No oneDNN plan can run this pass; ``reason`` says why."""

    reason: str


@dataclass
class Measured:
    """One candidate the tuner timed: its end-to-end seconds for the mode."""

    candidate: str
    threads: int
    seconds: float
    verdict: str = "not checked (a faster candidate agreed)"


@dataclass
class Choice:
    """What the planner decided for one key, kept for the process."""

    index: Optional[int]               # the chosen candidate's position, None: none
    threads: int = 1
    impl: str = ""
    how: str = "first correct candidate"   # or "tuned", "kept from an earlier run"
    rejected: List[Tuple[str, str]] = field(default_factory=list)  # (candidate, why)
    measured: List[Measured] = field(default_factory=list)
    seconds: float = 0.0               # time spent choosing
    reason: str = ""                   # why nothing was chosen
    transient: bool = False            # nothing chosen for now (memory), not for good
    tuner: Optional["_Tuner"] = field(default=None, repr=False)  # tuning on later calls
    #: The candidate's variant and its layouts' text (Candidate.variant and
    #: .layouts): _rebuild enumerates that variant only.  None: unknown.
    found_at: Optional[Tuple[Tuple[Any, ...], str]] = None
    #: Not yet through the kernel check: each result is checked on sampled
    #: elements until the key's next visit to the planner runs it (_confirm).
    provisional: bool = False
    key: Optional["PlanKey"] = field(default=None, repr=False)  # the planner key
    #: Predicted confidently by the shipped plan database: never tuned.
    confident: bool = False

    def verdict(self) -> str:
        """What explain() prints: the choice, the check, the alternatives."""
        if self.index is None:
            return f"no oneDNN plan: {self.reason}"
        if self.provisional:
            text = (f"{self.how}: {self.impl} on {self.threads} thread(s), provisional: "
                    f"its results are checked on sampled elements until the kernel check "
                    f"(exact small-integer inputs) runs on this layer's next call")
        else:
            text = (f"{self.how}: {self.impl} on {self.threads} thread(s), checked on this "
                    f"geometry against the NumPy path (exact small-integer inputs) and "
                    f"agreed ({self.seconds * 1e3:.1f} ms to choose)")
        if self.tuner is not None:
            text += (f"; tuning on this layer's calls: {self.tuner.steps} step(s), "
                     f"{self.tuner.seconds * 1e3:.1f} ms so far")
        for candidate, why in self.rejected:
            text += f"; rejected {candidate}: {why}"
        if self.measured:
            text += "\n  measured (end to end for this mode):"
            for m in sorted(self.measured, key=lambda m: m.seconds):
                text += (f"\n    {m.seconds * 1e6:10.1f} us  {m.candidate} on {m.threads} "
                         f"thread(s): {m.verdict}")
        return text


def _found_at(candidate: Any) -> Optional[Tuple[Tuple[Any, ...], str]]:
    """Where ``candidate`` is found again (None for one without a variant:
    the tests' planted candidates)."""
    variant = getattr(candidate, "variant", None)
    return None if variant is None else (variant, str(candidate.layouts))


# -- what a plan costs, end to end ------------------------------------------------
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


# -- choosing ----------------------------------------------------------------------
def _thread_options(geom: DeconvGeometry) -> List[int]:
    """Thread counts to try: a small layer on one thread first (OpenMP's
    fork/join can cost more than its work), then on the caller's count."""
    threads = _ops.get_num_threads()
    param = geom.param
    macs = (geom.data_shape[0] * geom.in_channels * math.prod(geom.spatial_in)
            * param.num_filter // param.num_group * math.prod(param.kernel))
    if threads == 1 or not tuning_on:
        return [threads]
    return [1, threads] if macs < ONE_THREAD_MACS else [threads]


def _known_suspect(geom: DeconvGeometry) -> Callable[[Any], bool]:
    """Candidates of a kernel known to be wrong on some geometries of this
    kind: oneDNN 3.2's brgemm deconvolution (``brg_conv:<isa>+brgconv_strided``)
    with the forward bias fused (docs/kernel_check.rst; the same kernel behind
    the convolution wrapper, ``conv:any+...``, is right).  A first plan tries
    them last, which saves running a defective one on the layers it breaks;
    the tuner still times and checks them, and on the layers where they are
    right they can win."""
    def suspect(candidate: Any) -> bool:
        # A sub-grid plan's kernel is its sub-grid layer's, with the bias fused.
        impl = candidate.impl.removeprefix(_ops.SUBGRID)
        return (geom.bias_shape is not None and candidate.bias_fused
                and impl.startswith("brg_conv:") and "brgconv_strided" in impl)
    return suspect


def _taps_without_data(geom: DeconvGeometry, axis: int) -> bool:
    """Whether a kernel tap along ``axis`` meets no data pixel (only the crop):
    tap k reaches output pixels i * stride + k * dilate - pad_l, i < in."""
    param = geom.param
    stride, dilate, pad = param.stride[axis], param.dilate[axis], geom.pad_l[axis]
    size_in, size_out = geom.spatial_in[axis], geom.spatial_out[axis]
    for tap in range(param.kernel[axis]):
        first = max(0, -(-(pad - tap * dilate) // stride))  # the first i reaching pixel >= 0
        if not (first < size_in and first * stride + tap * dilate - pad < size_out):
            return True
    return False


def _known_defective(geom: DeconvGeometry, dtype: str) -> Callable[[Any], bool]:
    """Candidates of a kernel known to give wrong results on this geometry
    *some* of the time, so that the check cannot rule them out: oneDNN 3.2's
    bfloat16 backward weights (``...jit_bf16:...``) on a strided axis where a
    kernel tap meets only the crop (a layer of 1x1 images, k3 s2 p1) write
    garbage into that tap's gradient, from memory they never initialise:
    measured wrong in 93% of checks, right in 7% (docs/kernel_check.rst).
    They are no candidates there."""
    bad_axes = dtype == "bfloat16" and any(
        geom.param.stride[a] > 1 and _taps_without_data(geom, a)
        for a in range(len(geom.spatial_in)))

    def defective(candidate: Any) -> bool:
        return bad_axes and "jit_bf16" in candidate.impl
    return defective


def _first_correct(geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                   check: Callable[[Any], Optional[str]], threads: int,
                   skip: Iterable[int] = (),
                   suspect: Optional[Callable[[Any], bool]] = None,
                   warn: Optional[Callable[[Any, DeconvGeometry, str], None]] = None
                   ) -> Tuple[Optional[Any], Optional[Any], List[Tuple[str, str]]]:
    """The first candidate (not in ``skip``; those ``suspect`` names last)
    whose plan agrees, its plan, the rejections (each disagreement reported
    to ``warn``, by default the default planner's)."""
    if warn is None:
        warn = _default._warn
    rejected: List[Tuple[str, str]] = []
    skip = set(skip)
    deferred: List[Any] = []

    def ordered() -> Iterable[Any]:
        for candidate in candidates():
            if suspect is not None and suspect(candidate):
                deferred.append(candidate)
            else:
                yield candidate
        yield from deferred

    with _ops.using_threads(threads):
        for candidate in ordered():
            if candidate.index in skip:
                continue
            try:
                plan = candidate.build()
            except MXNetError as error:
                rejected.append((repr(candidate), str(error)))
                continue
            reason = check(plan)
            if reason is None:
                return candidate, plan, rejected
            rejected.append((repr(candidate), reason))
            warn(candidate, geom, reason)
    return None, None, rejected


Units = Generator[None, None, Tuple[Choice, Any]]


@dataclass
class _Timed:
    """A candidate the tuner timed (its plan is built again when needed)."""

    seconds: float
    threads: int
    candidate: Any


def _tuning_units(geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                  check: Callable[[Any], Optional[str]], costs: "_Costs",
                  cost: Callable[[Any], float], agreed: Iterable[Tuple[int, int]] = (),
                  warn: Optional[Callable[[Any, DeconvGeometry, str], None]] = None
                  ) -> Units:
    """The tuner, as units of work with a yield after each (one candidate built
    and estimated, one estimate refined, one plan checked), so that it can run
    all at once or spread over a layer's calls; returns the choice and its plan.

    Every candidate is estimated within the bound (the faster of two runs
    each), the fastest few are timed again precisely, then checked fastest
    first; ``agreed`` lists (candidate index, threads) already checked.  The
    bound counts only the units' own time, not what runs between them.

    No plan outlives the unit that built it: oneDNN's library-managed
    scratchpad is per thread (a primitive created on one thread reads the
    scratchpad of the thread that runs it, and one destroyed on another
    thread releases that thread's), and the units of a tuner spread over the
    calls run on whichever threads call the layer.  A unit that needs a plan
    builds it again (oneDNN's primitive cache makes that cheap).  Each
    disagreement is reported to ``warn`` (by default the default planner's)."""
    if warn is None:
        warn = _default._warn
    timed: List[_Timed] = []
    rejected: List[Tuple[str, str]] = []
    options = _thread_options(geom)
    agreed = set(agreed)
    costs.precise = False
    share = None  # each thread count gets an equal part of the bound
    for threads in options:
        with _ops.using_threads(threads):
            remaining = iter(candidates())
        spent = 0.0
        while share is None or spent <= share:
            begun = time.perf_counter()
            with _ops.using_threads(threads):
                candidate = next(remaining, None)
                if candidate is None:
                    break
                if candidate.is_reference:
                    continue
                try:
                    seconds = cost(candidate.build())
                except MXNetError as error:
                    rejected.append((repr(candidate), str(error)))
                    seconds = math.inf
            if share is None and not math.isinf(seconds):
                bound = max(TUNE_FLOOR_S, min(TUNE_FACTOR * seconds, TUNE_CEILING_S))
                share = bound / len(options)
                # The bound starts once the first candidate is measured:
                # building it (JIT, first touch) can take longer than the
                # whole bound on a mid-size layer, which then compared nothing.
            else:
                spent += time.perf_counter() - begun
            if not math.isinf(seconds):  # inf: not a contender (see the cost functions)
                timed.append(_Timed(seconds, threads, candidate))
            yield
    def incumbent(entry: _Timed) -> bool:
        return (entry.candidate.index, entry.threads) in agreed

    def rank(entry: _Timed) -> float:
        return _ranking((entry.seconds, entry.threads), incumbent(entry))

    costs.precise = True
    timed.sort(key=lambda entry: entry.seconds)
    # The fastest few, and the first choice wherever it came: it is the one
    # to beat (FIRST_CHOICE_MARGIN), so its time must be as precise.
    for entry in timed[:REFINE] + [e for e in timed[REFINE:] if incumbent(e)]:
        with _ops.using_threads(entry.threads):
            entry.seconds = cost(entry.candidate.build())
        yield
    timed.sort(key=rank)
    # The leader must win again against the first choice and against a
    # runner-up within FIRST_CHOICE_MARGIN of it, all timed in turns: one
    # hiccup in a refine run decides a swap or a near-tie otherwise.
    duel = timed[:1] + [e for e in timed[1:] if incumbent(e)]
    if len(timed) > 1 and timed[1] not in duel and \
            rank(timed[1]) <= rank(timed[0]) * (1 + FIRST_CHOICE_MARGIN):
        duel.append(timed[1])
    if len(duel) > 1:
        runs = [[entry.seconds] for entry in duel]
        for _ in range(DUEL_ROUNDS):
            for entry, times in zip(duel, runs):
                with _ops.using_threads(entry.threads):
                    times.append(cost(entry.candidate.build()))
                yield
        for entry, times in zip(duel, runs):
            entry.seconds = statistics.median(times)
        timed.sort(key=rank)
    measured = [Measured(repr(e.candidate) + (FIRST_CHOICE if incumbent(e) else ""),
                         e.threads, e.seconds) for e in timed]
    for position, entry in enumerate(timed):
        candidate, threads = entry.candidate, entry.threads
        plan = None
        with _ops.using_threads(threads):
            try:
                plan = candidate.build()
                reason = None if (candidate.index, threads) in agreed else check(plan)
            except MXNetError as error:
                reason = str(error)
        if reason is None:
            measured[position].verdict = "chosen: agreed"
            return Choice(candidate.index, threads, candidate.impl, "tuned", rejected,
                          measured, found_at=_found_at(candidate)), plan
        del plan  # not past this unit (see above)
        measured[position].verdict = f"rejected: {reason}"
        rejected.append((repr(candidate), reason))
        warn(candidate, geom, reason)
        yield
    # Nothing timed agreed: correctness first, whatever the time.
    threads = _ops.get_num_threads()
    tried = [e.candidate.index for e in timed if e.threads == threads]
    candidate, plan, more = _first_correct(geom, candidates, check, threads, tried,
                                           warn=warn)
    rejected += more
    if candidate is None:
        return Choice(None, rejected=rejected, measured=measured), None
    return Choice(candidate.index, threads, candidate.impl, "first correct candidate",
                  rejected, measured, found_at=_found_at(candidate)), plan


def _watched(units: Units, load: cpu_load.ForeignLoad) -> Units:
    """``units``, with the CPU time other processes took while each ran added
    to ``load`` (not between units: what runs then does not touch a timing)."""
    while True:
        load.begin()
        try:
            next(units)
        except StopIteration as stop:
            return stop.value
        finally:
            load.end()
        yield


def _loaded(choice: Choice, load: cpu_load.ForeignLoad) -> bool:
    """Whether ``choice`` was tuned while other processes took more than
    LOADED_SHARE of the CPUs: then it is kept for this process only, and the
    next one tunes again (its timings are worth little, see cpu_load)."""
    if not load.loaded():
        return False
    choice.how += (f" (while other processes took {load.share():.0%} of the CPUs: kept for "
                   "this process, tuned again in the next)")
    return True


def _to_the_end(units: Units) -> Tuple[Choice, Any]:
    while True:
        try:
            next(units)
        except StopIteration as stop:
            return stop.value


def _ranking(entry: Sequence[Any], incumbent: bool = False) -> float:
    """A timed candidate's rank: its seconds, plus the margins on several
    threads and for not being the first choice (``incumbent``) of a tuner
    that started from one."""
    seconds, threads = entry[0], entry[1]
    if threads > 1:
        seconds = seconds * (1 + MORE_THREADS_MARGIN) + MORE_THREADS_MARGIN_S
    return seconds if incumbent else seconds * (1 + FIRST_CHOICE_MARGIN)


class _Tuner:
    """Tunes one planner key a unit at a time on the key's later calls.

    Each call earns TUNE_SHARE of a call's time (:func:`serve`, :func:`ran`),
    and a unit runs once the time earned covers what the last unit cost (at
    first, UNIT_CALLS calls): units are paid for before they run, so while a
    layer is tuned its calls cost on average at most TUNE_SHARE more, and a
    short script pays nothing.
    One thread at a time steps a tuner (a call that finds it busy runs on).
    ``settle`` receives the tuned choice, its plan and a note once the units
    end (None, None and why, when they failed).
    """

    def __init__(self, units: Units,
                 settle: Callable[[Optional[Choice], Any, str], None]) -> None:
        self._units = units
        self._settle = settle
        self._lock = threading.Lock()
        self._credit = 0.0
        self._call_seconds = math.inf  # the least a timed call took
        self._unit_seconds = math.inf  # what the last unit cost: none is due untimed
        self.steps, self.seconds = 0, 0.0
        self.done = False

    def earn(self, call_seconds: float, calls: int = 1) -> None:
        """``calls`` calls of this key earn their share: each is taken to cost
        the least any timed call cost (``call_seconds``, a call timed on the
        full path, may be slow, just after a unit: a call's time overstated
        would let the tuner overspend, understated only slows it)."""
        self._call_seconds = min(self._call_seconds, call_seconds)
        if math.isinf(self._unit_seconds):
            self._unit_seconds = UNIT_CALLS * self._call_seconds
        self._credit += TUNE_SHARE * self._call_seconds * calls

    def calls_until_due(self) -> int:
        """How many calls (at the last one's time) still pay for the next unit."""
        owed = self._unit_seconds - self._credit
        if self.done or owed <= 0 or math.isinf(owed):
            return 0
        return min(MAX_SERVED, math.ceil(owed / (TUNE_SHARE * max(self._call_seconds, 1e-9))))

    def step(self, force: bool = False) -> bool:
        """One unit if the share allows it (``force``: now, waiting for another
        thread's unit); whether tuning has ended.  A failure ends it on the
        first choice: tuning is a bonus, and the call must not fail for it."""
        if not self._lock.acquire(blocking=force):
            return self.done
        try:
            if self.done:
                return True
            if not force and self._credit < self._unit_seconds:
                return False
            begun = time.perf_counter()
            result: Optional[Tuple[Optional[Choice], Any, str]] = None
            try:
                next(self._units)
            except StopIteration as stop:
                result = (*stop.value, "")
            except Exception as error:  # noqa: BLE001
                result = (None, None, f"tuning stopped: {type(error).__name__}: {error}")
            finally:
                _ops.release_timing_buffers()
                elapsed = time.perf_counter() - begun
                self.steps += 1
                self.seconds += elapsed
                self._credit -= elapsed
                self._unit_seconds = elapsed
            if result is not None:
                self.done = True
                self._units.close()
                self._settle(*result)
            return self.done
        finally:
            self._lock.release()

    def finish(self) -> None:
        while not self.step(force=True):
            pass


def _rebuild(choice: Choice, candidates: Callable[..., Iterable[Any]]) -> Any:
    """The chosen candidate's plan, built again; None when the candidate is not
    where the choice says.  Enumerating its variant only is cheaper (a new
    process with a filled cache: each oneDNN descriptor before it costs up to
    a millisecond); the full enumeration is the fallback."""
    with _ops.using_threads(choice.threads):
        if choice.found_at is not None:
            for candidate in candidates(choice.found_at[0]):
                if candidate.impl == choice.impl and _found_at(candidate) == choice.found_at:
                    return candidate.build()
        for candidate in candidates():
            if candidate.index == choice.index:
                if candidate.impl != choice.impl:
                    return None
                return candidate.build()
    return None


def _store_key(key: PlanKey, geom: DeconvGeometry) -> str:
    """The on-disk key: library versions, ISA, then the planner key (pass,
    dtype, mode flags, threads) with the geometry spelled out."""
    param = geom.param
    return json.dumps([_ops.onednn_version(), _ops.cpu_isa(), PLANNER_VERSION,
                       kernel_check.CHECK_VERSION, key.what,
                       [k for k in key[2:] if isinstance(k, (bool, int, str))],
                       list(geom.data_shape), list(param.kernel), list(param.stride),
                       list(param.dilate), list(geom.pad_l), list(geom.pad_r),
                       param.num_filter, param.num_group, geom.bias_shape is not None],
                      separators=(",", ":"))


#: Bounds on what an entry of the plan cache may hold (the file is untrusted):
#: a real one measures some tens of candidates, each named in under 200 characters.
MAX_KEPT_MEASURED, MAX_KEPT_TEXT = 1024, 4096


def _kept_text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_KEPT_TEXT


def _kept_count(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high  # not a bool, a float or a str


def _kept_measurement(value: Any) -> bool:
    """One [candidate, threads, seconds, verdict] of an entry, as the tuner writes it."""
    return (isinstance(value, list) and len(value) == 4 and _kept_text(value[0])
            and _kept_count(value[1], 1, _ops.MAX_THREADS)
            and type(value[2]) is float and math.isfinite(value[2]) and value[2] >= 0
            and _kept_text(value[3]))


def _kept_found_at(variant: Any, layouts: Any) -> Optional[Tuple[Tuple[Any, ...], str]]:
    """An entry's variant and layouts, if well formed (else None: entries of
    earlier versions have none, and the candidate is found by its index).  Only the shape is checked
    here: a variant that is not one of the pass's is simply not enumerated."""
    if not (isinstance(variant, list) and len(variant) == 5 and _kept_text(variant[0])
            and _kept_text(variant[1]) and type(variant[2]) is bool
            and type(variant[3]) is bool and _kept_text(variant[4])
            and _kept_text(layouts)):
        return None
    return tuple(variant), layouts


def _kept_choice(entry: Dict[str, Any], geom: DeconvGeometry) -> Optional[Choice]:
    """The choice an entry of the plan cache holds, or None unless every field is
    what the planner writes: a candidate position, a thread count the tuner
    would try for this layer (any other count can crash or stall OpenMP), the
    candidate's name, whether it was tuned (else the first correct
    candidate), bounded measurements.  _rebuild checks the candidate."""
    index, threads, impl = entry.get("index"), entry.get("threads"), entry.get("impl")
    tuned = entry.get("tuned")
    measured = entry.get("measured", [])
    # Only a tuned choice is found by its variant: a first choice's index is
    # what its tuner takes as checked already, so it must be where it says.
    found_at = _kept_found_at(entry.get("variant"), entry.get("layouts")) if tuned is True \
        else None
    if not (type(index) is int and index >= 0
            and _kept_count(threads, 1, _ops.MAX_THREADS) and threads in _thread_options(geom)
            and _kept_text(impl) and type(tuned) is bool
            and isinstance(measured, list) and len(measured) <= MAX_KEPT_MEASURED
            and all(_kept_measurement(m) for m in measured)):
        return None
    how = "kept from an earlier tuning on this machine" if tuned else \
        "first correct candidate, kept from an earlier run on this machine"
    return Choice(index, threads, impl, how, measured=[Measured(*m) for m in measured],
                  found_at=found_at)


def _verdict(choice: Choice) -> Dict[str, Any]:
    """What a kept choice's verdict names: what the kernel check ran on (the
    library build, the ISA oneDNN dispatches to, the check's and the
    planner's rules, the implementation and thread count that agreed)."""
    return {"onednn": _ops.onednn_version(), "isa": _ops.cpu_isa(),
            "check": kernel_check.CHECK_VERSION, "planner": PLANNER_VERSION,
            "impl": choice.impl, "threads": choice.threads}


def _same(one: Choice, other: Choice) -> bool:
    return (one.index, one.threads, one.impl) == (other.index, other.threads, other.impl)

def settled(plan: Any) -> bool:
    """Whether ``plan`` (a forward plan or BackwardPlans) is final: not a first
    choice whose layer is still tuned on its calls (a prepared call of such a
    plan serves only until the next unit is due: :func:`serve`), nor a
    provisional one."""
    if isinstance(plan, BackwardPlans):
        return settled(plan.data) and settled(plan.weights)
    return plan.verdict.tuner is None and not plan.verdict.provisional


def provisional(plan: Any) -> bool:
    """Whether a pass's plan (not BackwardPlans) is provisional: each of its
    results must pass :mod:`~mxdeconv.onednn.result_check` (then
    :func:`refuse` it if one does not)."""
    return plan.verdict.provisional


def _tuners(plan: Any, seconds: float) -> List[Tuple[_Tuner, float]]:
    """The tuners of ``plan``'s passes still tuned on their calls (a forward
    plan or BackwardPlans), each with its part of a call's ``seconds`` (a
    backward call's time is split between its two passes)."""
    passes = (plan.weights, plan.data) if isinstance(plan, BackwardPlans) else (plan,)
    return [(p.verdict.tuner, seconds / len(passes)) for p in passes
            if p.verdict.tuner is not None]


def ran(plan: Any, seconds: float) -> None:
    """A call ran ``plan`` in ``seconds``: each pass still tuned earns its share."""
    for tuner, share in _tuners(plan, seconds):
        tuner.earn(share)


def serve(plan: Any, seconds: float) -> int:
    """A call ran ``plan`` on the full path in ``seconds``, and leaves a
    prepared call: how many calls that may serve before one comes back for
    the next unit of tuning (-1: a settled plan, no limit).  Those calls are
    paid for now, as if each took as long as this one."""
    tuners = _tuners(plan, seconds)
    if not tuners:
        return -1
    for tuner, share in tuners:
        tuner.earn(share)
    calls = min(tuner.calls_until_due() for tuner, _ in tuners)
    for tuner, share in tuners:
        tuner.earn(share, calls)
    return calls

def _only(variant: Optional[tuple]) -> Dict[str, Any]:
    """The candidates functions' keyword for one variant (none for all)."""
    return {} if variant is None else {"variant": variant}

@dataclass(frozen=True)
class BackwardPlans:
    """The two backward passes of one geometry."""

    data: Any
    weights: Any


# -- the planner object -------------------------------------------------------------
class Planner:
    """The planner's state: the choices made, the plan cache on disk, the
    shipped database, the passes still tuned or still provisional, the
    settings.  The module's functions act on one default instance
    (:func:`use_planner` installs another, as the tests do for a planner
    afresh); its key settings are mirrored in the module attributes the
    compiled hot path reads once per call (``tuning_on``, ``settlements``).

    ``store``: the plan cache (default: the user's cache file, located on first
    use); ``database``: the plan database (default: the shipped one unless
    ``MXDECONV_PLAN_DB=0``); the settings default to the environment's
    (``MXDECONV_TUNE``, ``MXDECONV_DETERMINISTIC``, ``MXDECONV_PROVISIONAL``).
    """

    def __init__(self, store: Optional[plan_store.PlanStore] = None,
                 database: Optional[plan_db.PlanDatabase] = None, *,
                 tuning: Optional[bool] = None, eager: Optional[bool] = None,
                 deterministic: Optional[bool] = None,
                 provisional: Optional[bool] = None) -> None:
        env_tuning, env_eager = _env_tuning()
        #: Whether tuning is asked for (set_tuning, MXDECONV_TUNE) and whether a
        #: new layer is tuned to the end at its first call (set_eager_tuning).
        self.tuning_wanted = env_tuning if tuning is None else tuning
        self.eager = env_eager if eager is None else eager
        #: Deterministic mode (set_deterministic, MXDECONV_DETERMINISTIC): no
        #: tuning, no provisional first call, so a layer's plan never changes.
        self.deterministic_on = (env_word("MXDECONV_DETERMINISTIC", "off") == "on"
                                 if deterministic is None else deterministic)
        self.provisional_on = (env_word("MXDECONV_PROVISIONAL", "on") == "on"
                               if provisional is None else provisional)
        #: The choices made, by planner key (None: chosen again on the next visit).
        self.choices = _ops.LRUCache(1 << 14) if _ops is not None else None
        #: The plan cache on disk.
        self.store = plan_store.PlanStore(plan_store.default_path) if store is None \
            else store
        #: The shipped plan database (read on first use); MXDECONV_PLAN_DB=0: none.
        self.database = plan_db.PlanDatabase(
            plan_db.SHIPPED if env_word("MXDECONV_PLAN_DB", "on") == "on" else None) \
            if database is None else database
        #: The kernel defects warned about (each once).
        self.warned: set = set()
        #: Keys tuned on their later calls, until they settle (see finish_tuning).
        self.tuners: Dict[PlanKey, _Tuner] = {}
        self.tuners_lock = threading.Lock()
        #: Bumped whenever a tuned choice settles: prepared calls of plans still
        #: being tuned (_exec.Serving) go back to the planner then, and take the
        #: new choice (the module's ``settlements`` follows the default planner's).
        self.settlements = 0
        #: Provisional choices' confirmations, for finish_tuning (by key).
        self.unconfirmed: Dict[PlanKey, Callable[[], Any]] = {}
        #: Keys whose provisional choice was refused, with the (candidate index,
        #: threads) refused: they are chosen with the kernel check from then on.
        self.refused: Dict[PlanKey, set] = {}
        self.refused_lock = threading.RLock()
        #: One lock per key whose provisional choice is being confirmed: callers
        #: of that key wait for its check, no other layer does.
        self.confirming: Dict[PlanKey, threading.Lock] = {}

    @property
    def tuning_on(self) -> bool:
        """Whether new plans are tuned: asked for and not deterministic."""
        return self.tuning_wanted and not self.deterministic_on

    def afresh(self, store: Optional[plan_store.PlanStore] = None) -> "Planner":
        """A new planner with this one's settings and database, nothing chosen
        yet, and ``store`` (None: this one's)."""
        return Planner(self.store if store is None else store, self.database,
                       tuning=self.tuning_wanted, eager=self.eager,
                       deterministic=self.deterministic_on, provisional=self.provisional_on)

    def _published(self) -> None:
        """Mirror this planner's settings and settlements into the module
        attributes the compiled hot path reads, if it is the default one."""
        if self is _default:
            _publish(self)

    # -- settings ----------------------------------------------------------------
    def set_tuning(self, enabled: bool) -> bool:
        previous, self.tuning_wanted = self.tuning_wanted, _flag("set_tuning", enabled)
        self._published()
        return previous

    def set_deterministic(self, enabled: bool) -> bool:
        previous, self.deterministic_on = (self.deterministic_on,
                                           _flag("set_deterministic", enabled))
        self._published()
        return previous

    def set_provisional(self, enabled: bool) -> bool:
        previous, self.provisional_on = self.provisional_on, _flag("set_provisional", enabled)
        return previous

    def set_eager_tuning(self, enabled: bool) -> bool:
        previous, self.eager = self.eager, _flag("set_eager_tuning", enabled)
        return previous

    def set_plan_database(self, path: Optional[str]) -> None:
        self.database = plan_db.PlanDatabase(None if path is None else plan_db.Path(path))

    # -- kernel defects ------------------------------------------------------------
    def _warn(self, candidate: Any, geom: DeconvGeometry, reason: str) -> None:
        if isinstance(reason, kernel_check.Unverifiable):
            return  # not a verdict on the kernel: the check cannot see its errors here
        self._warn_once((candidate.impl, candidate.family, candidate.bias_fused,
                         getattr(candidate, "act_type", None),
                         getattr(candidate, "act_fused", False), geom),
                        repr(candidate), geom, reason)

    def _warn_once(self, key: tuple, name: str, geom: DeconvGeometry, reason: str) -> None:
        if key in self.warned:
            return
        self.warned.add(key)
        warnings.warn(KernelDefectWarning(
            f"oneDNN kernel {name} gave a wrong result on data {geom.data_shape} -> "
            f"{geom.out_shape}, kernel={geom.param.kernel}, stride={geom.param.stride}, "
            f"dilate={geom.param.dilate}, pad_l={geom.pad_l}, pad_r={geom.pad_r}, "
            f"num_group={geom.param.num_group}, bias={geom.bias_shape is not None}: "
            f"{reason}; another plan is used instead"), stacklevel=3)

    # -- the plan cache's entries --------------------------------------------------

    def _untrusted_because(self, key: str, entry: Dict[str, Any], choice: Choice) -> Optional[str]:
        """Why an entry's verdict cannot be taken as it is (None: it can): see
        docs/reliability.rst, "The plan cache's trust model"."""
        if not self.store.vouched(key):
            return "the cache file is not private to this user"
        if entry.get(plan_store.VERDICT) != _verdict(choice):
            return "its verdict was not reached on this library, CPU and candidate"
        return None

    def _from_disk(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                   check: Callable[[Any], Optional[str]]) -> Tuple[Optional[Choice], Any, bool]:
        """The choice kept on disk, its plan, and whether it was tuned, after
        checking the entry; (None, None, False) when there is none or it does not
        hold.  Its verdict is taken as it is only from an entry the store vouches
        for whose verdict names this library, CPU and candidate; any other
        entry's plan is checked again, and kept again as this process's verdict
        when it agrees."""
        store_key = _store_key(key, geom)
        entry = self.store.get(store_key)
        choice = None if entry is None else _kept_choice(entry, geom)
        if choice is None:
            return None, None, False
        try:
            plan = _rebuild(choice, candidates)
        except MXNetError:
            return None, None, False
        if plan is None:
            return None, None, False  # stale: choose again
        why = self._untrusted_because(store_key, entry, choice)
        if why is not None:
            if check(plan) is not None:
                return None, None, False  # no longer agreeing: choose again
            choice.how += f" (checked again: {why})"
            self.store.put(store_key, dict(entry, **{plan_store.VERDICT: _verdict(choice)}),
                       defer=True)
        return choice, plan, entry["tuned"]

    def _keep(self, key: PlanKey, geom: DeconvGeometry, choice: Choice, tuned: bool) -> None:
        """Keep a checked choice on disk, for this machine's later processes: a
        tuned one, or a first correct one (a later process skips its check, and
        tunes it on its calls)."""
        self.store.put(_store_key(key, geom), {
            "index": choice.index, "threads": choice.threads, "impl": choice.impl,
            "tuned": tuned,
            "measured": [[m.candidate, m.threads, m.seconds, m.verdict]
                         for m in choice.measured],
            **({} if choice.found_at is None else
               {"variant": list(choice.found_at[0]), "layouts": choice.found_at[1]}),
            plan_store.VERDICT: _verdict(choice)},
            defer=not tuned)  # first choices: one write for all, at the next or at exit

    def _start_tuning(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                      check: Callable[[Any], Optional[str]], cost: Callable[[Any], float],
                      costs: "_Costs", first: Choice) -> _Tuner:
        """A tuner for ``key``'s later calls; its result replaces ``first``."""
        def settle(choice: Optional[Choice], plan: Any, why: str) -> None:
            with self.tuners_lock:
                if self.tuners.get(key) is tuner:
                    del self.tuners[key]
            if choice is None or plan is None:  # failed, or nothing agreed after all
                choice = dataclasses.replace(
                    first, tuner=None,
                    how=f"first correct candidate ({why or 'the tuner found none that agreed'})")
            else:
                self._keep(key, geom, choice, not _loaded(choice, load))
                choice.seconds = first.seconds + tuner.seconds
            self.choices.put(key, choice)
            with self.tuners_lock:
                self.settlements += 1  # after the put: a call sent back now finds the choice
                self._published()

        load = cpu_load.ForeignLoad()
        tuner = _Tuner(_watched(_tuning_units(geom, candidates, check, costs, cost,
                                              agreed=[(first.index, first.threads)],
                                              warn=self._warn), load),
                       settle)
        with self.tuners_lock:
            self.tuners[key] = tuner
        return tuner

    def _predicted_choice(self, key: PlanKey, geom: DeconvGeometry,
                          candidates: Callable[..., Iterable[Any]],
                          check: Callable[[Any], Optional[str]], provisional: bool
                          ) -> Tuple[Optional[Choice], Any]:
        """The shipped database's confident choice for ``key`` and its plan, checked
        (``provisional``: built only, its results checked, see PROVISIONAL_MACS);
        (None, None) when it has none, the candidate is not offered here, or it
        disagrees (then the key is chosen as without a database).  Only its
        variant is enumerated: a new process's first call costs no other
        descriptor."""
        forward = isinstance(key, ForwardKey)
        if forward and (key.accumulate or key.act_type is not None):
            return None, None
        prediction = self.database.predict(
            plan_db.LayerKey(key.what, key.dtype, forward and key.training, len(geom.spatial_in)),
            geom,
            _ops.get_num_threads(), _ops.cpu_isa())
        if prediction is None or not prediction.confident:
            return None, None
        with self.refused_lock:
            if key in self.refused:
                return None, None
        threads = 1 if prediction.choice.one_thread else _ops.get_num_threads()
        if threads not in _thread_options(geom):
            return None, None
        with _ops.using_threads(threads):
            candidate = next((c for c in candidates(prediction.choice.variant)
                              if c.impl == prediction.choice.impl), None)
            if candidate is None:
                return None, None
            try:
                plan = candidate.build()
            except MXNetError:
                return None, None
            reason = None if provisional else check(plan)
        if reason is not None:
            self._warn(candidate, geom, reason)
            return None, None
        return Choice(candidate.index, threads, candidate.impl, f"predicted by {prediction.source}",
                      found_at=_found_at(candidate), provisional=provisional,
                      confident=True), plan

    def _first_choice(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                      check: Callable[[Any], Optional[str]], provisional: bool = False
                      ) -> Tuple[Choice, Any]:
        """The first correct candidate on the caller's threads and its plan (kept
        on disk with tuning on: a later process skips the check).  ``provisional``:
        the first candidate that builds, unchecked (see PROVISIONAL_MACS)."""
        threads = _ops.get_num_threads()
        suspect = _known_suspect(geom) if key.what == "forward" else None
        with self.refused_lock:
            skip = {index for index, on in self.refused.get(key, ()) if on == threads}
        if provisional and not skip:
            candidate, plan, rejected = _first_correct(geom, candidates, lambda plan: None,
                                                       threads, suspect=suspect, warn=self._warn)
        else:
            candidate, plan, rejected = _first_correct(geom, candidates, check, threads, skip,
                                                       suspect=suspect, warn=self._warn)
            provisional = False
        choice = Choice(None if candidate is None else candidate.index, threads,
                        "" if candidate is None else candidate.impl, rejected=rejected,
                        found_at=None if candidate is None else _found_at(candidate),
                        provisional=provisional and plan is not None)
        if self.tuning_on and plan is not None and not choice.provisional:
            self._keep(key, geom, choice, False)
        return choice, plan

    def _tuned_now(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                   check: Callable[[Any], Optional[str]], costs: "_Costs",
                   cost: Callable[[Any], float], agreed: Iterable[Tuple[int, int]] = ()
                   ) -> Tuple[Choice, Any]:
        """Eager tuning: all the tuner's units at once, the choice kept on disk
        (as tuned unless other processes loaded the CPUs meanwhile)."""
        load = cpu_load.ForeignLoad()
        choice, plan = _to_the_end(_watched(_tuning_units(geom, candidates, check, costs, cost,
                                                          agreed, warn=self._warn), load))
        if plan is not None:
            self._keep(key, geom, choice, not _loaded(choice, load))
        return choice, plan

    def _choose(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                make_check: Callable[[], kernel_check.Check], costs: "_Costs",
                cost: Callable[[Any], float], provisional: bool = False) -> Tuple[Choice, Any]:
        """A new key's plan: the kept choice, else the first correct candidate
        (``provisional``: the first that builds, see PROVISIONAL_MACS); unless
        tuned, with a tuner for the key's later calls (eager tuning,
        MXDECONV_TUNE=eager, tunes to the end here instead)."""
        start = time.perf_counter()
        check = make_check()
        what = key.what.replace("_", " ")
        try:
            choice, plan, tuned = self._from_disk(key, geom, candidates, check) if self.tuning_on else \
                (None, None, False)
            if choice is None and self.tuning_on and not self.eager:
                choice, plan = self._predicted_choice(key, geom, candidates, check, provisional)
            if choice is None:  # eager tuning too starts from it: the same choice either way
                choice, plan = self._first_choice(key, geom, candidates, check,
                                             provisional and not self.eager)
            if self.deterministic_on and plan is not None:
                choice.how += ("; deterministic mode: checked before its first call, never "
                               "tuned, kept for the process")
            if choice.provisional:
                pass  # checked, kept and tuned from its next call on (_confirm)
            elif choice.confident:
                self._keep(key, geom, choice, True)  # kept as a tuned choice: never tuned
            elif self.tuning_on and plan is not None and not tuned:
                agreed = [(choice.index, choice.threads)]
                if self.eager:  # tune from the first choice now
                    tuned_choice, tuned_plan = self._tuned_now(key, geom, candidates, check, costs,
                                                          cost, agreed)
                    if tuned_plan is not None:
                        choice, plan = tuned_choice, tuned_plan
                else:
                    choice.how += "; tuned on this layer's later calls"
                    choice.tuner = self._start_tuning(key, geom, candidates, check, cost, costs,
                                                 choice)
        except kernel_check.CheckUnavailable as error:  # no verdict: try again next call
            choice, plan = Choice(None, reason=str(error), transient=True), None
        except MXNetError as error:  # oneDNN refused the pass outright
            choice, plan = Choice(None, reason=str(error)), None
        finally:
            _ops.release_timing_buffers()
        choice.seconds = time.perf_counter() - start
        choice.key = key
        if plan is None and not choice.reason:
            choice.reason = "; ".join(f"{c}: {r}" for c, r in choice.rejected) or (
                f"oneDNN {_ops.onednn_version()} has no {what} implementation for this geometry "
                f"and dtype on this CPU (ISA {_ops.cpu_isa()})")
        return choice, plan

    def _plan(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
              make_check: Callable[[], kernel_check.Check], costs: "_Costs",
              cost: Callable[[Any], float], provisional: bool = False) -> Union[Any, Unavailable]:
        plan = _ops.cache(key)
        if plan is not None and (type(plan) is Unavailable or (
                plan.verdict.tuner is None and not plan.verdict.provisional)):
            return plan
        choice = self.choices.get(key)
        if choice is not None and choice.provisional:  # its next call: the kernel check
            choice = self._confirm(key, geom, candidates, make_check, costs, cost, choice,
                              plan if plan is not None and plan.verdict is choice else None)
        if choice is not None:
            if choice.tuner is not None:  # being tuned on its calls: one unit, perhaps
                choice.tuner.step()
                choice = self.choices.get(key) or choice  # settled by that unit, perhaps
            if plan is not None and not _same(plan.verdict, choice):
                plan = None  # this thread's plan is not the choice any more
            if plan is None and choice.index is not None:  # chosen by another thread, or before
                plan = _rebuild(choice, candidates)
                if plan is None:  # its candidate is not where it was: choose again
                    choice = None
        if choice is None:
            choice, plan = self._choose(key, geom, candidates, make_check, costs, cost, provisional)
            if choice.transient:
                return Unavailable(choice.verdict())
            self.choices.put(key, choice)
            if choice.provisional:
                with self.refused_lock:
                    self.unconfirmed[key] = lambda: self._confirm(key, geom, candidates, make_check,
                                                         costs, cost, choice, None)
        if plan is None:
            unavailable = Unavailable(choice.verdict())
            _ops.cache_put(key, unavailable)
            return unavailable
        plan.verdict = choice
        _ops.cache_put(key, plan)
        return plan

    def _confirm(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                 make_check: Callable[[], kernel_check.Check], costs: "_Costs",
                 cost: Callable[[Any], float], choice: Choice, plan: Any) -> Optional[Choice]:
        """Run the kernel check on a provisional choice (``plan``: its plan on this
        thread, or None): the choice, now checked, kept and tuned as a first
        correct candidate is; or None when the check refused it (choose again).
        Only callers of the same key wait for the check: no lock that other
        layers need is held while it runs."""
        with self.refused_lock:
            if not choice.provisional or self.choices.get(key) is not choice:
                return self.choices.get(key)  # another thread confirmed or refused it meanwhile
            gate = self.confirming.setdefault(key, threading.Lock())
        with gate:
            with self.refused_lock:
                if not choice.provisional or self.choices.get(key) is not choice:
                    return self.choices.get(key)  # confirmed or refused while this one waited
                self.unconfirmed.pop(key, None)
            begun = time.perf_counter()
            check = make_check()
            try:
                with _ops.using_threads(choice.threads):
                    if plan is None:
                        plan = _rebuild(choice, candidates)
                    reason = ("its candidate is no longer where it was" if plan is None
                              else check(plan))
            except kernel_check.CheckUnavailable:
                with self.refused_lock:
                    self.unconfirmed[key] = lambda: self._confirm(key, geom, candidates, make_check, costs,
                                                         cost, choice, None)
                return choice  # no verdict for now: still provisional, its results checked
            except MXNetError as error:
                reason = str(error)
            finally:
                _ops.release_timing_buffers()
            if reason is not None:
                self._refuse(choice, geom, reason)
                return None
            choice = dataclasses.replace(choice, provisional=False,
                                         seconds=choice.seconds + time.perf_counter() - begun)
            if choice.confident:
                self._keep(key, geom, choice, True)  # predicted: never tuned
            elif self.tuning_on:
                self._keep(key, geom, choice, False)
                if self.eager:
                    tuned, tuned_plan = self._tuned_now(key, geom, candidates, check, costs,
                                                   cost, [(choice.index, choice.threads)])
                    if tuned_plan is not None:
                        choice = dataclasses.replace(tuned, key=key)
                else:
                    choice.how += "; tuned on this layer's later calls"
                    choice.tuner = self._start_tuning(key, geom, candidates, check, cost, costs,
                                                 choice)
            self.choices.put(key, choice)
            return choice

    def _refuse(self, choice: Choice, geom: DeconvGeometry, reason: str) -> None:
        with self.refused_lock:
            self._warn_once((choice.impl, "provisional", choice.threads, choice.key), choice.impl,
                       geom, reason)
            # A predicted choice's index is its variant's, not the enumeration's:
            # none is skipped then, but the key is chosen with the kernel check.
            self.refused.setdefault(choice.key, set()).add(
                (-1 if choice.confident else choice.index, choice.threads))
            if self.choices.get(choice.key) is choice:
                self.choices.put(choice.key, None)  # the next visit chooses again, checked

    def refuse(self, plan: Any, geom: DeconvGeometry, reason: str) -> None:
        """A provisional plan's result disagreed (``reason``): warn once, and choose
        the key's plan again with the kernel check, without this candidate (the
        caller prepares the call again and runs it again)."""
        self._refuse(plan.verdict, geom, reason)

    def pending(self) -> int:
        """How many layer passes are still being tuned on their calls (or are
        provisional, their kernel check still to run)."""
        with self.refused_lock:
            unconfirmed = len(self.unconfirmed)
        with self.tuners_lock:
            return len(self.tuners) + unconfirmed

    def finish_tuning(self) -> int:
        """Check every provisional layer pass and tune every layer pass still being
        tuned on its calls to the end, now (for a server: run each layer once,
        then call this before serving); their next calls use the tuned plans.
        Returns how many were finished."""
        with self.refused_lock:
            confirmations = list(self.unconfirmed.items())
            self.unconfirmed.clear()
        for _, confirm in confirmations:
            confirm()
        with self.tuners_lock:
            tuners = list(self.tuners.items())
        for _, tuner in tuners:
            tuner.finish()
        return len({key for key, _ in confirmations} | {key for key, _ in tuners})

    def _may_be_provisional(self, geom: DeconvGeometry, dtype: str, what: str) -> bool:
        """Whether a new key's first call of pass ``what`` may run provisionally
        (PROVISIONAL_MACS): float32 (result_check's bound is float32's), a big
        layer, a sample that sees every defect the kernel check sees on it
        (:func:`~mxdeconv.onednn.result_check.blind_spot`), and the feature on
        (set_provisional, not deterministic mode)."""
        return (self.provisional_on and not self.deterministic_on and dtype == "float32"
                and result_check.pass_macs(geom) >= PROVISIONAL_MACS
                and result_check.blind_spot(geom, what) is None)

    def forward_plan(self, geom: DeconvGeometry, dtype: str, training: bool, accumulate: bool,
                     act_type: Optional[str] = None) -> Union[Any, Unavailable]:
        """The forward plan (``accumulate``: req=add as a sum post-op; ``act_type``:
        an activation after the bias, one of ``_ops.ELTWISE_ACTIVATIONS``, fused as
        an eltwise post-op where the check can verify it, else by a separate
        eltwise primitive).  An activation is part of the key, in memory and on
        disk (where None adds nothing, so the keys of plans without one stay)."""
        key = ForwardKey("forward", geom, dtype, training, accumulate, act_type,
                         _ops.get_num_threads(), self.tuning_on)
        fuse = act_type is not None and kernel_check.can_check_fused(act_type, dtype)
        costs = _Costs()
        # Without an activation, the arguments of earlier versions, for wrappers of these.
        extra = () if act_type is None else (act_type, fuse)

        def candidates(variant: Optional[tuple] = None) -> Iterable[Any]:
            return _ops.forward_candidates(geom, dtype, training, accumulate, *extra,
                                           **_only(variant))
        if act_type is None:
            make_check = lambda: kernel_check.forward_check(geom, dtype, accumulate)  # noqa: E731
        else:
            make_check = lambda: kernel_check.forward_check(  # noqa: E731
                geom, dtype, accumulate, act_type)
        return self._plan(key, geom, candidates, make_check, costs,
                     lambda plan: _forward_cost(costs, plan, training, accumulate),
                     self._may_be_provisional(geom, dtype, "forward") and act_type is None
                     and not accumulate)

    def _training_forward_weights(self, geom: DeconvGeometry, dtype: str, threads: int) -> Any:
        """The weight layout of this thread's training forward plan for ``geom``
        (without req=add or an activation; None: none planned yet)."""
        plan = _ops.cache_peek(ForwardKey("forward", geom, dtype, True, False, None, threads,
                                          self.tuning_on))
        return None if plan is None or isinstance(plan, Unavailable) else plan.weights

    def backward_plans(self, geom: DeconvGeometry, dtype: str) -> Union[BackwardPlans, Unavailable]:
        """The backward-weights and backward-data plans, the two planned together:
        backward data counts no out_grad reorder when it reads out_grad in
        backward weights' layout, and no weight reorder when it takes the weight
        in the layout of the step's training forward (planned before it)."""
        threads = _ops.get_num_threads()
        weights_costs, data_costs = _Costs(), _Costs()  # each tuner steps its own
        defective = _known_defective(geom, dtype)
        weights = self._plan(BackwardKey("backward_weights", geom, dtype, threads, self.tuning_on), geom,
                        lambda variant=None: (c for c in _ops.backward_weights_candidates(
                            geom, dtype, **_only(variant)) if not defective(c)),
                        lambda: kernel_check.backward_weights_check(geom, dtype), weights_costs,
                        lambda plan: _backward_weights_cost(weights_costs, plan),
                        self._may_be_provisional(geom, dtype, "backward_weights"))
        if isinstance(weights, Unavailable):
            return weights
        data = self._plan(BackwardKey("backward_data", geom, dtype, threads, self.tuning_on), geom,
                     lambda variant=None: _ops.backward_data_candidates(
                         geom, dtype, **_only(variant)),
                     lambda: kernel_check.backward_data_check(geom, dtype), data_costs,
                     # Looked up when timing (not on every call): the forward is
                     # planned before the backward in a training step.
                     lambda plan: _backward_data_cost(
                         data_costs, plan, weights.diff_dst,
                         self._training_forward_weights(geom, dtype, threads)),
                     self._may_be_provisional(geom, dtype, "backward_data"))
        if isinstance(data, Unavailable):
            return data
        return BackwardPlans(data, weights)

    def store_path(self) -> Optional[str]:
        """The plan cache file this process reads and writes, located on the first
        call that needs it (None: memory only, by choice or because no cache
        directory could be found)."""
        path = self.store.path
        return None if path is None else str(path)

    def clear_choices(self) -> None:
        """Forget every choice in memory (the next plan of each key is chosen, and
        read from or written to the plan cache on disk, again)."""
        self.choices.clear()
        self.warned.clear()
        self.store.clear()
        with self.refused_lock:
            self.refused.clear()
            self.unconfirmed.clear()
            self.confirming.clear()
        with self.tuners_lock:
            self.tuners.clear()


# -- the default planner, and the module's API on it ------------------------------
#: Whether new plans are tuned (the default planner's ``tuning_on``).  A module
#: attribute, not a call, because the compiled hot path reads it once per call
#: (it is part of every plan key); the default planner keeps it current.
tuning_on = False
#: The default planner's settlements, plus one each time another planner is
#: installed: prepared calls of plans still being tuned (_exec.Serving) go back
#: to the planner whenever it changes.  A module attribute for the compiled hot
#: path, which compares it with a prepared call's generation on every call.
settlements = 0
_generation = 0  # added to the default planner's settlements (see use_planner)


def _publish(planner: Planner) -> None:
    global tuning_on, settlements
    tuning_on = planner.tuning_on
    settlements = _generation + planner.settlements


_default = Planner()
_publish(_default)


def current_planner() -> Planner:
    """The planner the module's functions act on."""
    return _default


def use_planner(planner: Planner) -> Planner:
    """Make ``planner`` the one the module's functions (and the compiled calls)
    act on; returns the one it replaces.  Prepared calls of plans still being
    tuned go back to the planner on their next call."""
    global _default, _generation
    if not isinstance(planner, Planner):
        raise TypeError(f"use_planner: expected a Planner, got {type(planner).__name__}")
    previous = _default
    _generation = settlements + 1 - planner.settlements  # a value no prepared call holds
    _default = planner
    _publish(planner)
    return previous


def set_tuning(enabled: bool) -> bool:
    """Time candidates and keep the fastest correct one (True, the default), or
    take the first correct one in oneDNN's order (False); returns the old value.
    Calls from then on use the plans of the new setting (both are kept).  In
    deterministic mode nothing is tuned, whatever this says."""
    return _default.set_tuning(enabled)


def set_deterministic(enabled: bool) -> bool:
    """Deterministic mode (True; also ``MXDECONV_DETERMINISTIC=1`` at import):
    each pass of a layer runs the first candidate, in oneDNN's order, that
    passes the kernel check before its first call, and keeps it for the
    process; nothing is tuned and no first call runs provisionally.  The same
    inputs then give bitwise the same results on every call, thread and
    process of this machine at the same thread count.  Returns the old value."""
    return _default.set_deterministic(enabled)


def deterministic() -> bool:
    """Whether deterministic mode is on (see :func:`set_deterministic`)."""
    return _default.deterministic_on


def set_provisional(enabled: bool) -> bool:
    """Let a big layer's first call run oneDNN's first candidate with its result
    checked on sampled elements, the kernel check following on the next call
    (True, the default); or run the kernel check before the first call (False;
    also ``MXDECONV_PROVISIONAL=0``).  Returns the old value."""
    return _default.set_provisional(enabled)


def provisional_enabled() -> bool:
    """Whether big layers' first calls run provisionally (see set_provisional)."""
    return _default.provisional_on


def tuning() -> bool:
    """Whether new plans are tuned (see :func:`set_tuning`)."""
    return tuning_on


def set_eager_tuning(enabled: bool) -> bool:
    """Tune a new layer pass to the end at its first call (True; also
    ``MXDECONV_TUNE=eager``), or on its later calls (False, the default);
    returns the old value.  Either way the result is the same choice."""
    return _default.set_eager_tuning(enabled)


def set_plan_database(path: Optional[str]) -> None:
    """Predict new layers' plans from the database file at ``path`` (the shipped
    one is ``plan_db.SHIPPED``), or from none (None: oneDNN's first choice,
    then tuning, as with ``MXDECONV_PLAN_DB=0``).  Choices made already stay."""
    _default.set_plan_database(path)


def forward_plan(geom: DeconvGeometry, dtype: str, training: bool, accumulate: bool,
                 act_type: Optional[str] = None) -> Union[Any, Unavailable]:
    """The forward plan (``accumulate``: req=add as a sum post-op; ``act_type``:
    an activation after the bias, one of ``_ops.ELTWISE_ACTIVATIONS``, fused as
    an eltwise post-op where the check can verify it, else by a separate
    eltwise primitive).  An activation is part of the key, in memory and on
    disk (where None adds nothing, so the keys of plans without one stay)."""
    return _default.forward_plan(geom, dtype, training, accumulate, act_type)


def backward_plans(geom: DeconvGeometry, dtype: str) -> Union[BackwardPlans, Unavailable]:
    """The backward-weights and backward-data plans, the two planned together:
    backward data counts no out_grad reorder when it reads out_grad in
    backward weights' layout, and no weight reorder when it takes the weight
    in the layout of the step's training forward (planned before it)."""
    return _default.backward_plans(geom, dtype)


def _training_forward_weights(geom: DeconvGeometry, dtype: str, threads: int) -> Any:
    """The weight layout of this thread's training forward plan for ``geom``
    (without req=add or an activation; None: none planned yet)."""
    return _default._training_forward_weights(geom, dtype, threads)


def refuse(plan: Any, geom: DeconvGeometry, reason: str) -> None:
    """A provisional plan's result disagreed (``reason``): warn once, and choose
    the key's plan again with the kernel check, without this candidate (the
    caller prepares the call again and runs it again)."""
    _default.refuse(plan, geom, reason)


def pending() -> int:
    """How many layer passes are still being tuned on their calls (or are
    provisional, their kernel check still to run)."""
    return _default.pending()


def finish_tuning() -> int:
    """Check every provisional layer pass and tune every layer pass still being
    tuned on its calls to the end, now (for a server: run each layer once,
    then call this before serving); their next calls use the tuned plans.
    Returns how many were finished."""
    return _default.finish_tuning()


def store_path() -> Optional[str]:
    """The plan cache file this process reads and writes, located on the first
    call that needs it (None: memory only, by choice or because no cache
    directory could be found)."""
    return _default.store_path()


def clear_choices() -> None:
    """Forget every choice in memory (the next plan of each key is chosen, and
    read from or written to the plan cache on disk, again)."""
    _default.clear_choices()
