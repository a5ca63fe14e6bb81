"""Tuning: the candidates timed end to end for the mode, on the caller's
thread count and, for small layers, on one thread, as units of work
(:func:`_tuning_units`) run all at once (eager tuning) or spread over a
layer's calls by a :class:`_Tuner`, each call paying at most TUNE_SHARE more;
the fastest candidate that agrees, after a duel with the first choice, is
chosen.  Also the first correct candidate in oneDNN's order
(:func:`_first_correct`), the fallback when nothing timed agrees."""
from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generator, Iterable, List, Optional, Sequence, Tuple

from .. import cpu_load, plan_db
from .._loader import extension as _ops
from .choice import BackwardPlans, Choice, Measured, _found_at
from .costs import _Costs
from .defects import _warn
from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.attributes import DeconvGeometry

#: The tuning bound per pass: TUNE_FACTOR times the first candidate's time,
#: within [TUNE_FLOOR_S, TUNE_CEILING_S], from the first candidate's
#: measurement on (building later candidates counts, the final checks do not).
TUNE_FACTOR, TUNE_FLOOR_S, TUNE_CEILING_S = 50, 0.03, 2.0
#: How many of the fastest candidates of the first, two-run estimate are timed
#: again, over several runs, before the fastest correct one is chosen: at most
#: REFINE, and only those within REFINE_WITHIN of the fastest estimate (a
#: slower one wins only if its estimate was off by more than a hiccup, and on
#: a big layer each refine run costs a few calls).
REFINE, REFINE_WITHIN = 4, 1.25
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
#: the two differ by less than tuning's noise: candidates the tuner timed
#: faster than the first choice of DCGAN 512 -> 256's backward passes (batch
#: 32) ran up to 5% slower than it between real calls, the two passes
#: together 25% slower.
FIRST_CHOICE_MARGIN = 0.05
#: Before a candidate replaces the first choice, the two are timed again in
#: this many rounds, each round one unit that runs them back to back; each is
#: ranked by the median over the rounds of its time over the leader's in the
#: same round.  Paired so, a slow phase of the machine slows both alike: on a
#: 2-core virtual machine, phases of some seconds ran every kernel 1.4x
#: slower with no steal time counted (a DCGAN 512 -> 256 forward at 8.1 or
#: 11.5 ms a call), and the estimate and refine runs, each in a unit of its
#: own and calls apart, can fall one in a slow phase and the next in a fast
#: one: a tuner swapped its first choice for a kernel that, timed in turns,
#: ran 2% slower.
DUEL_ROUNDS = 3
#: How a tuner's measurements mark the first choice it started from.
FIRST_CHOICE = " (the first choice)"
#: While a layer pass is tuned on its calls, each call costs on average at most
#: this fraction of its own time more (see _Tuner).
TUNE_SHARE = 0.25
#: A tuner's first unit is taken to cost this many calls (building, timing the
#: reorders, warm-up and timed runs) until one has been measured.
UNIT_CALLS = 4
#: A new layer is tuned from its TUNE_AFTER_CALLS-th call on (and from its
#: first where the plan database expects oneDNN's first choice to run
#: PROMPT_RATIO times the best's time or more): tuning costs some hundred
#: calls' worth on a big layer and repays itself only after as many more, so a
#: script that runs a layer fewer times would pay for nothing (tuned from its
#: first call, DCGAN 512 -> 256's first 300 inference calls at batch 32 take
#: a quarter to a half longer than untuned, the tuner not yet settled).
TUNE_AFTER_CALLS, PROMPT_RATIO = 100, 1.5
#: ... and from NEAR_BEST_WAIT times later where the plan database expects
#: the running candidate within HINT_START_RATIO of the best (the hint, or a
#: first choice the hint did not displace): there tuning finds little, and
#: paid from the 100th call it took a quarter of DCGAN 512 -> 256's calls
#: 100 to 300 (batch 32, inference, started on the hint).
NEAR_BEST_WAIT = 3
#: A new layer starts on the plan database's hint (not confident: tuned later,
#: beside oneDNN's first choice) instead of oneDNN's first choice where the
#: hint's nearest layers ran that this many times slower than the hint, or
#: not near their fastest at all.  Unless the process made oneDNN's GEMM
#: kernels at load (onednn.gemm_setup: not with one thread or one CPU), a GEMM
#: plan's hint (GEMM_MARK) starts a layer only where oneDNN's first choice is a
#: GEMM plan too: a process's first GEMM generates those kernels, about 25 ms
#: (DCGAN 512 -> 256's first training step took 1.3x longer started on one),
#: paid either way when the first choice is one (the 1-D layer's backward
#: weights: its first 100 training steps 8-11% faster started on the hint);
#: elsewhere the hint is put off (hint_put_off).  With the kernels made, a GEMM
#: hint starts the layer as any hint does: U-Net 512 -> 256's first 10
#: training steps (batch 4) took 568-577 ms against 618-622 put off, DCGAN
#: 512 -> 256's 381-404 against 397-434.
#: Held out of the shipped database's timing tables (``made.held_out``:
#: first_choice against first_plan), the first plan's time over the
#: fastest's falls from 1.36 to 1.26 (geomean, AVX-512 with AMX), 1.35 to
#: 1.27 (AVX-512), 1.42 to 1.29 (AVX2).
HINT_START_RATIO = 1.1
#: Calls after which a candidate put off (choice.PutOff) replaces the one that
#: stood in for it (checked, in a unit paid from the calls' tuning share): a
#: deconvolution whose descriptor is slow to make (see
#: defects.slow_deconvolution_descriptors; predicted, or kept in the plan
#: cache) after its direct twin, the first ten calls paying no descriptor (on
#: the 1-D benchmark layer the deconvolution fuses the bias, 10-20% faster a
#: call than the twin; its descriptor costs 75 ms); a GEMM plan's hint that
#: does not start a layer (hint_put_off) after oneDNN's first choice.
PUT_OFF_TUNE_AFTER = 10
#: What names a GEMM plan: mxdeconv's im2col and scatter plans, oneDNN's gemm
#: convolution.
GEMM_MARK = "gemm"


def _gemm_first_call(prediction: plan_db.Prediction, impl: str, gemm_made: bool) -> bool:
    """Whether starting on ``prediction``'s GEMM plan instead of ``impl``
    would make a new layer's first call generate oneDNN's GEMM kernels
    (``gemm_made``: the process made them at load)."""
    return not gemm_made and GEMM_MARK in prediction.choice.impl and GEMM_MARK not in impl


def hint_displaces(prediction: plan_db.Prediction, variant: Tuple[Any, ...], impl: str,
                   gemm_made: bool = False) -> bool:
    """Whether a hint (``prediction``, not confident) should run from a new
    layer's first call instead of oneDNN's first candidate (``variant``,
    ``impl``): where the hint's nearest layers ran that HINT_START_RATIO
    times the hint's time or slower, or not near their fastest at all; a
    GEMM plan's hint, unless the process made oneDNN's GEMM kernels at load
    (``gemm_made``), only where oneDNN's first candidate is a GEMM plan too
    (its first call makes them either way; see HINT_START_RATIO)."""
    if _gemm_first_call(prediction, impl, gemm_made):
        return False
    expected = prediction.ratio(variant, impl)
    return expected is None or expected >= HINT_START_RATIO


def hint_put_off(prediction: plan_db.Prediction, variant: Tuple[Any, ...], impl: str,
                 gemm_made: bool = False) -> bool:
    """Whether a GEMM plan's hint (``prediction``, not confident) that does not
    start a layer for its first call's cost (hint_displaces) should replace
    oneDNN's first candidate (``variant``, ``impl``) after PUT_OFF_TUNE_AFTER
    calls: where it would have displaced it but for that cost (U-Net
    512 -> 256's backward weights, batch 4: 3 ms a training step faster than
    oneDNN's first choice, which the tuner replaced only after 150-300 steps)."""
    if not _gemm_first_call(prediction, impl, gemm_made):
        return False
    expected = prediction.ratio(variant, impl)
    return expected is None or expected >= HINT_START_RATIO
#: One process start in REVALIDATE_EVERY (a draw per layer pass) re-validates a
#: tuned choice it takes from the plan cache: on the layer's later calls (after
#: TUNE_AFTER_CALLS, paid as tuning is) it is timed again beside the candidates
#: its tuning ran within REVALIDATE_WITHIN of it, and the winner is kept.  A
#: choice tuned in a noisy moment does not last forever, and a short script,
#: or a process that takes a choice once in a while, pays nothing.
REVALIDATE_EVERY, REVALIDATE_WITHIN = 20, 1.3
#: Between a tuner's units the timing buffers (each argument of the candidates
#: timed, every page written) are kept up to this many bytes: writing them
#: again for every unit costs a unit a few milliseconds (now and then a
#: hundred on a VM that backs memory lazily).
KEPT_TIMING_BYTES = 64 << 20
#: The most calls a prepared call serves between two visits to the planner
#: while its layer is tuned (a tiny layer's unit can cost thousands of calls).
MAX_SERVED = 100_000


def _thread_options(geom: DeconvGeometry, tuning: bool = True) -> List[int]:
    """Thread counts to try: a small layer on one thread first (OpenMP's
    fork/join can cost more than its work), then on the caller's count (only
    that one when the planner does not tune, ``tuning`` False)."""
    threads = _ops.get_num_threads()
    param = geom.param
    macs = (geom.data_shape[0] * geom.in_channels * math.prod(geom.spatial_in)
            * param.num_filter // param.num_group * math.prod(param.kernel))
    if threads == 1 or not tuning:
        return [threads]
    return [1, threads] if macs < ONE_THREAD_MACS else [threads]


def _first_correct(geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
                   check: Callable[[Any], Optional[str]], threads: int,
                   skip: Iterable[int] = (),
                   suspect: Optional[Callable[[Any], bool]] = None,
                   warn: Optional[Callable[[Any, DeconvGeometry, str], None]] = None
                   ) -> Tuple[Optional[Any], Optional[Any], List[Tuple[str, str]]]:
    """The first candidate (not in ``skip``; those ``suspect`` names last)
    whose plan agrees, its plan, the rejections (each disagreement reported
    to ``warn``, by default a set of warnings of this call's own)."""
    if warn is None:
        warn = functools.partial(_warn, set())
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
                  cost: Callable[[Any], float],
                  agreed: Iterable[Tuple[Optional[int], int]] = (),
                  warn: Optional[Callable[[Any, DeconvGeometry, str], None]] = None,
                  tuning: Callable[[], bool] = lambda: True,
                  agreed_at: Iterable[Tuple[Any, str, int]] = ()) -> Units:
    """The tuner, as units of work with a yield after each (one candidate built
    and estimated, one estimate refined, one plan checked), so that it can run
    all at once or spread over a layer's calls; returns the choice and its plan.

    Every candidate is estimated within the bound (the faster of two runs
    each), the fastest few are timed again precisely, then checked fastest
    first; ``agreed`` lists (candidate index, threads) already checked, and
    ``agreed_at`` (where found, implementation, threads) those named by their
    variant and layouts (a plan database's choice, whose index is its
    variant's: see :func:`checked_as`).  The
    bound counts only the units' own time, not what runs between them.

    No plan outlives the unit that built it: oneDNN's library-managed
    scratchpad is per thread (a primitive created on one thread reads the
    scratchpad of the thread that runs it, and one destroyed on another
    thread releases that thread's), and the units of a tuner spread over the
    calls run on whichever threads call the layer.  A unit that needs a plan
    builds it again (oneDNN's primitive cache makes that cheap).  Each
    disagreement is reported to ``warn`` (by default a set of warnings of this call's own)."""
    if warn is None:
        warn = functools.partial(_warn, set())
    timed: List[_Timed] = []
    rejected: List[Tuple[str, str]] = []
    options = _thread_options(geom, tuning())
    agreed, agreed_at = set(agreed), set(agreed_at)

    def was_checked(candidate: Any, threads: int) -> bool:
        return (candidate.index, threads) in agreed or \
            (_found_at(candidate), candidate.impl, threads) in agreed_at

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
        return was_checked(entry.candidate, entry.threads)

    def rank(entry: _Timed) -> float:
        return _ranking((entry.seconds, entry.threads), incumbent(entry))

    costs.precise = True
    timed.sort(key=lambda entry: entry.seconds)
    # The fastest few, and the first choice wherever it came: it is the one
    # to beat (FIRST_CHOICE_MARGIN), so its time must be as precise.
    fastest = timed[0].seconds if timed else math.inf
    refined = [e for e in timed[:REFINE] if e.seconds <= fastest * REFINE_WITHIN]
    for entry in refined + [e for e in timed if incumbent(e) and e not in refined]:
        with _ops.using_threads(entry.threads):
            entry.seconds = cost(entry.candidate.build())
        yield
    timed.sort(key=rank)
    # The leader must win again against the first choice and against a
    # runner-up within FIRST_CHOICE_MARGIN of it, timed in turns (DUEL_ROUNDS):
    # one hiccup in a refine run, or a slow phase of the machine, decides a
    # swap or a near-tie otherwise.
    duel = timed[:1] + [e for e in timed[1:] if incumbent(e)]
    if len(timed) > 1 and timed[1] not in duel and \
            rank(timed[1]) <= rank(timed[0]) * (1 + FIRST_CHOICE_MARGIN):
        duel.append(timed[1])
    if len(duel) > 1:
        rounds: List[List[float]] = []   # per round, each duelist's time
        for round_ in range(DUEL_ROUNDS):
            row = [0.0] * len(duel)
            order = range(len(duel)) if round_ % 2 == 0 else reversed(range(len(duel)))
            for position in order:  # neither always first
                entry = duel[position]
                with _ops.using_threads(entry.threads):
                    row[position] = cost(entry.candidate.build())
            rounds.append(row)
            yield
        leader = statistics.median(row[0] for row in rounds)
        for position, entry in enumerate(duel):
            entry.seconds = leader * statistics.median(row[position] / row[0] for row in rounds)
        timed.sort(key=rank)
    measured = [Measured(repr(e.candidate) + (FIRST_CHOICE if incumbent(e) else ""),
                         e.threads, e.seconds) for e in timed]
    for position, entry in enumerate(timed):
        candidate, threads = entry.candidate, entry.threads
        plan = None
        with _ops.using_threads(threads):
            try:
                plan = candidate.build()
                reason = None if was_checked(candidate, threads) else check(plan)
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


def _put_off_units(geom: DeconvGeometry, first: Choice,
                   candidates: Callable[..., Iterable[Any]],
                   check: Callable[[Any], Optional[str]],
                   warn: Optional[Callable[[Any, DeconvGeometry, str], None]] = None) -> Units:
    """The candidate put off (``first.put_off``, see PUT_OFF_TUNE_AFTER), in
    one unit: built (its variant alone enumerated: the full enumeration would
    make every slow descriptor on the way) and
    checked, it replaces the first choice that stood in for it; where it is
    not offered or disagrees, the first choice stays.  Either way the result
    carries the first choice's shortlist, for the tuner that may follow (see
    Planner._start_tuning)."""
    if warn is None:
        warn = functools.partial(_warn, set())
    assert first.put_off is not None
    variant, impl = first.put_off.variant, first.put_off.impl
    with _ops.using_threads(first.threads):
        for candidate in candidates(variant):
            if candidate.impl != impl:
                continue
            try:
                plan = candidate.build()
                reason = check(plan)
            except MXNetError as error:
                reason = str(error)
            if reason is None:
                return Choice(candidate.index, first.threads, candidate.impl,
                              f"{first.put_off.how}, put off ({first.put_off.why}) "
                              f"while {first.impl} ran the first calls",
                              found_at=_found_at(candidate), from_database=True,
                              shortlist=first.shortlist), plan
            warn(candidate, geom, reason)
            break
    yield  # (a generator; the first choice stays)
    return dataclasses.replace(first, tuner=None, put_off=None), None


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


def checked_as(choice: Choice) -> Dict[str, List[Any]]:
    """How :func:`_tuning_units` names ``choice`` as already checked: by its
    index, or, for a plan database's choice (its index is its variant's, and
    another candidate stands at that index in the full enumeration), by where
    it is found and its implementation."""
    if not choice.from_database:
        return {"agreed": [(choice.index, choice.threads)], "agreed_at": []}
    if choice.found_at is None:
        return {"agreed": [], "agreed_at": []}
    return {"agreed": [], "agreed_at": [(choice.found_at, choice.impl, choice.threads)]}


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
                 settle: Callable[[Optional[Choice], Any, str], None],
                 wait_calls: int = 0) -> None:
        self._units = units
        self._waiting = wait_calls  # calls that earn nothing before the first unit
        self._settle = settle
        self._lock = threading.Lock()
        self._credit = 0.0
        self._paid_ahead = (0, 0, 0.0)  # the last earn's (waited, earning calls, seconds)
        self._call_seconds = math.inf  # the least a timed call took
        self._unit_seconds = math.inf  # what the last unit cost: none is due untimed
        self.steps, self.seconds = 0, 0.0
        self.done = False

    def refund(self, calls: int) -> None:
        """``calls`` of the calls last paid ahead (:func:`serve`) were not
        served: take back what they earned (the last ones paid first earn
        credit, the first ones count off the wait)."""
        waited, earned, call_seconds = self._paid_ahead
        back = min(calls, earned)
        self._credit -= TUNE_SHARE * call_seconds * back
        self._waiting += min(calls - back, waited)
        self._paid_ahead = (0, 0, 0.0)

    def earn(self, call_seconds: float, calls: int = 1) -> None:
        """``calls`` calls of this key earn their share: each is taken to cost
        the least any timed call cost (``call_seconds``, a call timed on the
        full path, may be slow, just after a unit: a call's time overstated
        would let the tuner overspend, understated only slows it)."""
        self._call_seconds = min(self._call_seconds, call_seconds)
        waited = min(calls, self._waiting)
        self._waiting -= waited
        calls -= waited
        if math.isinf(self._unit_seconds):
            self._unit_seconds = UNIT_CALLS * self._call_seconds
        self._credit += TUNE_SHARE * self._call_seconds * calls
        self._paid_ahead = (waited, calls, self._call_seconds)

    def calls_until_due(self) -> int:
        """How many calls (at the last one's time) still pay for the next unit."""
        owed = self._unit_seconds - self._credit
        if self.done or math.isinf(owed):
            return 0
        earning = max(0, math.ceil(owed / (TUNE_SHARE * max(self._call_seconds, 1e-9))))
        return min(MAX_SERVED, self._waiting + earning)

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
                # Kept for the next unit (the tuner's settle or a new choice
                # releases them), unless they are big.
                _ops.release_timing_buffers(KEPT_TIMING_BYTES)
                elapsed = time.perf_counter() - begun
                self.steps += 1
                self.seconds += elapsed
                self._credit -= elapsed
                self._unit_seconds = elapsed
            if result is not None:
                self.done = True
                self._units.close()
                _ops.release_timing_buffers()
                self._settle(*result)
            return self.done
        finally:
            self._lock.release()

    def finish(self) -> None:
        while not self.step(force=True):
            pass


def _tuners(plan: Any, seconds: float) -> List[Tuple[_Tuner, float]]:
    """The tuners of ``plan``'s passes still tuned on their calls (a forward
    plan or BackwardPlans), each with its part of a call's ``seconds`` (a
    backward call's time is split between its two passes)."""
    passes = (plan.weights, plan.data) if isinstance(plan, BackwardPlans) else (plan,)
    return [(p.choice.tuner, seconds / len(passes)) for p in passes
            if p.choice.tuner is not None]


def ran(plan: Any, seconds: float) -> None:
    """A call ran ``plan`` in ``seconds``: each pass still tuned earns its share."""
    for tuner, share in _tuners(plan, seconds):
        tuner.earn(share)


def unserved(plan: Any, calls: int) -> None:
    """A prepared call of ``plan`` went back to the planner with ``calls`` of
    the calls :func:`serve` paid ahead not served (a layer settled): each
    pass still tuned takes them back, so no unit runs before its calls did."""
    if plan is None or calls <= 0:
        return
    for tuner, _ in _tuners(plan, 0.0):
        tuner.refund(calls)


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
