"""What every contender provides, and the measured modes.

A contender (mxdeconv's API, raw oneDNN, MXNet, PyTorch, the NumPy fallback)
turns a :class:`~layers.Case` and its :class:`~layers.Inputs` into a
:class:`Prepared`: one runner per mode it supports (see :mod:`timing`), the
reason for every mode it cannot run, and a way to fetch its forward output for
the numerical cross-check.

Standard library only: the MXNet worker process imports this module too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import (Any, Callable, Collection, ContextManager, Dict, Iterable, Mapping,
                    Optional, Protocol, Tuple, Union)

from timing import Runner, Step, step_runner

#: Measured modes, in table order, with their labels.
MODE_LABELS: Dict[str, str] = {
    "fwd_train": "fwd (train)",
    "fwd_infer": "fwd (infer)",
    "fwd_infer_asnumpy": "fwd (infer)+asnumpy",
    "bwd": "bwd",
    "bwd_data": "bwd data only",
    "bwd_weights": "bwd weights only",
    "fwd_bwd": "fwd+bwd",
}
MODES: Tuple[str, ...] = tuple(MODE_LABELS)
#: Each mode's work in forward passes (every pass has as many multiply-adds):
#: "bwd" is both backward passes, "bwd_data" and "bwd_weights" one of them
#: (the other's gradients not asked for), so each has its own % of peak.
FLOP_FACTOR: Dict[str, int] = {"fwd_train": 1, "fwd_infer": 1, "fwd_infer_asnumpy": 1,
                               "bwd": 2, "bwd_data": 1, "bwd_weights": 1, "fwd_bwd": 3}

ContextFactory = Callable[[], ContextManager[object]]
#: A step, or a step and a context entered once around each timed block.
StepSpec = Union[Step, Tuple[Step, Optional[ContextFactory]]]


def short_error(exc: BaseException) -> str:
    """A one-line message: MXNet's multi-line errors end with the useful line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    message = lines[-1] if lines else type(exc).__name__
    for prefix in ("MXNetError: ", "RuntimeError: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return message if len(message) <= 200 else message[:197] + "..."


@dataclass
class Prepared:
    """One contender set up for one case."""

    runners: Dict[str, Runner] = field(default_factory=dict)
    #: mode -> why it cannot be measured ("error: ...", "n/a", "skipped ...").
    unavailable: Dict[str, str] = field(default_factory=dict)
    #: mode -> seconds of its first (cold) call, made by prepare_runners.
    first_seconds: Dict[str, float] = field(default_factory=dict)
    #: The forward (inference) output as a NumPy array, for the cross-check.
    output: Optional[Callable[[], Any]] = None
    #: Anything worth recording (e.g. array layouts after the run).
    info: Callable[[], Dict[str, Any]] = field(default=dict)
    close: Callable[[], None] = field(default=lambda: None)


def prepare_runners(runners: Mapping[str, Runner], modes: Collection[str],
                    after_error: Callable[[], None] = lambda: None) -> Prepared:
    """Run each runner once; keep those that work, report the others' errors.

    The first call is where lazy errors surface (MXNet raises at
    ``wait_to_read``), so a failing mode is reported as ``error: <message>``
    instead of breaking the measurement.  ``after_error`` runs after each
    failure (MXNet must drain the exceptions its engine still holds, or they
    resurface in the next, unrelated call).  A second, warm call's time is
    kept (the first pays one-time setup: mxdeconv's planning, JIT, page
    faults): a mode too slow to repeat is measured by it alone.  Only
    ``modes`` are touched; the others are left out, as if not offered.
    """
    prepared = Prepared()
    for mode, runner in runners.items():
        if mode not in modes:
            continue
        try:
            runner(1)
            seconds = runner(1)
        except Exception as exc:  # noqa: BLE001 - the message is the result
            prepared.unavailable[mode] = f"error: {short_error(exc)}"
            after_error()
        else:
            prepared.runners[mode] = runner
            prepared.first_seconds[mode] = seconds[0]
    return prepared


def prepare_steps(steps: Mapping[str, StepSpec], modes: Collection[str],
                  after_error: Callable[[], None] = lambda: None) -> Prepared:
    """:func:`prepare_runners` for step functions (each with an optional context)."""
    runners = {}
    for mode, spec in steps.items():
        step, context = spec if isinstance(spec, tuple) else (spec, None)
        runners[mode] = step_runner(step, context)
    return prepare_runners(runners, modes, after_error)


class Contender(Protocol):
    """The interface :mod:`run` drives."""

    #: Column name in the table and key in the JSON.
    name: str

    def status(self) -> Optional[str]:
        """None when usable, else why not (e.g. ``missing (...)``), for every case."""

    def prepare(self, case: Any, inputs: Any, modes: Collection[str]) -> Prepared:
        """Set up ``case`` for those of ``modes`` it offers; may raise, which marks
        all its modes as errors."""

    def versions(self) -> Dict[str, str]:
        """Versions worth recording (library, NumPy, ...)."""

    def close(self) -> None:
        """Release processes or resources at the end of the run."""


def unavailable_for(modes: Iterable[str], reason: str) -> Dict[str, str]:
    return {mode: reason for mode in modes}
