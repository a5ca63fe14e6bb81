"""Interleaved median timing, shared by every process of the harness.

The unit of work is a *runner*: a callable that executes ``n`` iterations of
one measured operation and returns the ``n`` per-iteration wall times in
seconds.  In-process contenders build one from a step function with
:func:`step_runner`; the MXNet worker process uses the same function and the
main process wraps its answers in a runner; the raw oneDNN hooks return
per-iteration seconds themselves.

:func:`measure_interleaved` then runs all runners of one case round-robin: a
warm-up that also calibrates how many iterations make a block of about
``block_seconds``, then ``rounds`` rounds in which every slot runs one block,
the order rotating each round, so that machine noise (frequency changes,
other processes) lands on all contenders alike.  The figure of merit is the
median over every iteration of every round.

Standard library only: this module also runs under the MXNet venv.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Dict, Hashable, List, Optional, Sequence

Runner = Callable[[int], List[float]]
Step = Callable[[], object]


def step_runner(step: Step,
                context: Optional[Callable[[], ContextManager[object]]] = None) -> Runner:
    """A runner timing ``step()`` with ``perf_counter`` once per iteration.

    ``context`` (for example a training-mode switch) is entered once around the
    whole block, so its cost stays out of the per-iteration times.
    """
    def run(n: int) -> List[float]:
        clock = time.perf_counter
        seconds = []
        with (context() if context is not None else contextlib.nullcontext()):
            for _ in range(n):
                start = clock()
                step()
                seconds.append(clock() - start)
        return seconds
    return run


@dataclass(frozen=True)
class Schedule:
    """How long and how often to measure.

    ``fixed_repeats`` (for ``--smoke``) skips the warm-up and calibration and
    runs exactly that many iterations per round.
    """

    rounds: int = 5
    block_seconds: float = 0.1
    warmup_seconds: float = 0.05
    #: Cap on one slot's total measured time; a slow slot gets fewer rounds, and
    #: one whose single call exceeds it is measured by its last warm-up call.
    max_slot_seconds: float = 6.0
    fixed_repeats: Optional[int] = None


@dataclass
class Measurement:
    """Per-iteration samples of one slot and their summary."""

    samples: List[float] = field(default_factory=list)
    round_medians: List[float] = field(default_factory=list)
    block_size: int = 0
    error: Optional[str] = None
    note: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def summary(self) -> Dict[str, object]:
        if not self.ok:
            return {"error": self.error or "no samples"}
        ordered = sorted(self.samples)
        quartiles = (statistics.quantiles(ordered, n=4) if len(ordered) > 1
                     else [ordered[0]] * 3)
        return {"median_s": self.median, "q1_s": quartiles[0], "q3_s": quartiles[2],
                "min_s": ordered[0], "iterations": len(ordered),
                "rounds": len(self.round_medians), "block_size": self.block_size,
                "round_medians_s": self.round_medians,
                **({"note": self.note} if self.note else {})}


def _warm_up(runner: Runner, seconds: float) -> List[float]:
    """Run doubling batches until ``seconds`` are spent; return the last batch's samples."""
    n, spent = 1, 0.0
    while True:
        samples = runner(n)
        spent += sum(samples)
        if spent >= seconds:
            return samples
        n *= 2


def measure_interleaved(slots: Dict[Hashable, Runner], schedule: Schedule,
                        first_seconds: Optional[Dict[Hashable, float]] = None,
                        on_error: Callable[[BaseException], str] = str
                        ) -> Dict[Hashable, Measurement]:
    """Measure every slot round-robin; see the module docstring.

    ``first_seconds`` holds each slot's first (cold) call time, if known: a slot
    whose first call exceeded ``max_slot_seconds`` is not called again and is
    measured by that call alone (noted in its summary).  A runner that raises
    is dropped from later rounds and its measurement carries
    ``on_error(exception)`` as the error.
    """
    results = {key: Measurement() for key in slots}
    rounds_left: Dict[Hashable, int] = {}
    for key, runner in slots.items():
        first = (first_seconds or {}).get(key)
        if first is not None and first > schedule.max_slot_seconds:
            results[key].samples.append(first)
            results[key].round_medians.append(first)
            results[key].note = "one cold call: too slow to repeat within max_slot_seconds"
            continue
        try:
            if schedule.fixed_repeats is not None:
                block, rounds = schedule.fixed_repeats, schedule.rounds
            else:
                warm = _warm_up(runner, schedule.warmup_seconds)
                per_call = max(statistics.median(warm), 1e-9)
                block = max(1, round(schedule.block_seconds / per_call))
                rounds = min(schedule.rounds,
                             int(schedule.max_slot_seconds / (per_call * block)))
                if rounds == 0:  # one call exceeds the slot's budget: keep the warm one
                    results[key].samples.extend(warm)
                    results[key].round_medians.append(statistics.median(warm))
        except Exception as exc:  # noqa: BLE001 - reported, never hidden
            results[key].error = on_error(exc)
            continue
        results[key].block_size = block
        rounds_left[key] = rounds

    order: Sequence[Hashable] = list(rounds_left)
    for round_index in range(schedule.rounds):
        shift = round_index % max(1, len(order))
        for key in list(order[shift:]) + list(order[:shift]):
            if rounds_left.get(key, 0) <= 0:
                continue
            rounds_left[key] -= 1
            try:
                samples = slots[key](results[key].block_size)
            except Exception as exc:  # noqa: BLE001
                results[key].error = on_error(exc)
                rounds_left[key] = 0
                continue
            results[key].samples.extend(samples)
            results[key].round_medians.append(statistics.median(samples))
    return results
