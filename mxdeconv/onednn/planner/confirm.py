"""Provisional first calls: a big layer's first call runs oneDNN's first
candidate with its result checked on sampled elements
(:mod:`..result_check`); the kernel check follows on the layer's next call
(:meth:`_Provisional._confirm`), and a result that disagrees refuses the plan
(:meth:`_Provisional.refuse`): the key is chosen again, checked."""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Optional, Tuple

from .. import kernel_check, result_check
from .._loader import extension as _ops
from . import kept
from .choice import Choice
from .costs import _Costs
from .defects import _warn_once
from .keys import PlanKey
from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.attributes import DeconvGeometry

#: From this many multiply-adds per pass, a new layer's first call runs
#: oneDNN's first candidate *provisionally*: its result is checked on sampled
#: elements (:mod:`mxdeconv.onednn.result_check`, a few percent of the call)
#: instead of the kernel check's extra run of the plan (more than the call
#: itself on a big layer), and the kernel check runs on the layer's next call.
#: Below it the kernel check costs about as little, and runs at once.
PROVISIONAL_MACS = 64_000_000


class _Provisional:
    """The Planner's provisional first calls: confirming them (the kernel check
    on the next call) and refusing them (a result that disagreed).  A mixin:
    the state is the Planner's (choices, unconfirmed, refused, confirming,
    refused_lock, warned, the settings)."""

    if TYPE_CHECKING:  # the Planner's, declared for the type checker only
        provisional_on: bool
        deterministic_on: bool
        eager: bool
        choices: Any  # an _ops.LRUCache (None without the extension)
        store: Any  # a plan_store.PlanStore
        warned: set
        unconfirmed: Dict[PlanKey, Callable[[], Any]]
        refused: Dict[PlanKey, set]
        refused_lock: threading.RLock
        confirming: Dict[PlanKey, threading.Lock]
        _tuned_now: Callable[..., Tuple[Choice, Any]]
        _start_tuning: Callable[..., Any]

        @property
        def tuning_on(self) -> bool: ...

    def _may_be_provisional(self, geom: DeconvGeometry, dtype: str, what: str) -> bool:
        """Whether a new key's first call of pass ``what`` may run provisionally
        (PROVISIONAL_MACS): float32 (result_check's bound is float32's), a big
        layer, a sample that sees every defect the kernel check sees on it
        (:func:`~mxdeconv.onednn.result_check.blind_spot`), and the feature on
        (set_provisional, not deterministic mode)."""
        return (self.provisional_on and not self.deterministic_on and dtype == "float32"
                and result_check.pass_macs(geom) >= PROVISIONAL_MACS
                and result_check.blind_spot(geom, what) is None)

    def _confirm(self, key: PlanKey, geom: DeconvGeometry,
                 candidates: Callable[..., Iterable[Any]],
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
                        plan = kept._rebuild(choice, candidates)
                    reason = ("its candidate is no longer where it was" if plan is None
                              else check(plan))
            except kernel_check.CheckUnavailable:
                with self.refused_lock:
                    self.unconfirmed[key] = lambda: self._confirm(
                        key, geom, candidates, make_check, costs, cost, choice, None)
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
                kept._keep(self.store, key, geom, choice, True)  # predicted: never tuned
            elif self.tuning_on:
                kept._keep(self.store, key, geom, choice, False)
                if self.eager:
                    tuned, tuned_plan = self._tuned_now(key, geom, candidates, check, costs,
                                                        cost, choice)
                    if tuned_plan is not None:
                        choice = dataclasses.replace(tuned, key=key)
                else:
                    choice.how += "; tuned on this layer's later calls"
                    choice.tuner = self._start_tuning(key, geom, candidates, check, cost,
                                                      costs, choice)
            self.choices.put(key, choice)
            return choice

    def _refuse(self, choice: Choice, geom: DeconvGeometry, reason: str) -> None:
        with self.refused_lock:
            _warn_once(self.warned, (choice.impl, "provisional", choice.threads, choice.key),
                       choice.impl, geom, reason)
            # A database's choice's index is its variant's, not the enumeration's:
            # none is skipped then, but the key is chosen with the kernel check.
            assert choice.key is not None  # a provisional choice knows its key
            self.refused.setdefault(choice.key, set()).add(
                (-1 if choice.from_database else choice.index, choice.threads))
            if self.choices.get(choice.key) is choice:
                self.choices.put(choice.key, None)  # the next visit chooses again, checked

    def refuse(self, plan: Any, geom: DeconvGeometry, reason: str) -> None:
        """A provisional plan's result disagreed (``reason``): warn once, and choose
        the key's plan again with the kernel check, without this candidate (the
        caller prepares the call again and runs it again)."""
        self._refuse(plan.choice, geom, reason)
