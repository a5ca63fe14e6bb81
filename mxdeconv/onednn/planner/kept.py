"""The choices kept: a chosen candidate's plan built again
(:func:`_rebuild`), and the plan cache's entries (:mod:`..plan_store`): their
on-disk key, their verdict, reading one back (every field checked, the
verdict trusted only as docs/reliability.rst says) and writing one."""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Dict, FrozenSet, Iterable, Optional, Tuple

from .. import kernel_check, plan_store
from .._loader import extension as _ops
from . import tuner
from .choice import Choice, Measured, _found_as, _found_at
from .keys import PlanKey
from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.attributes import DeconvGeometry

#: Part of the on-disk key: bumped whenever the candidates a pass enumerates
#: change (a kept choice names its candidate by position) or the tuner's rules
#: do (a kept choice is what they chose).  Its history: docs/changelog.rst.
PLANNER_VERSION = 11


def _rebuild(choice: Choice, candidates: Callable[..., Iterable[Any]]) -> Any:
    """The chosen candidate's plan, built again; None when the candidate is not
    where the choice says.  Enumerating its variant only is cheaper (a new
    process with a filled cache: each oneDNN descriptor before it costs up to
    a millisecond); the full enumeration is the fallback."""
    return _rebuilt(choice, candidates)[1]


def _rebuilt(choice: Choice, candidates: Callable[..., Iterable[Any]]) -> Tuple[Any, Any]:
    """The chosen candidate and its plan (_rebuild); (None, None) when the
    candidate is not where the choice says."""
    with _ops.using_threads(choice.threads):
        if choice.found_at is not None:
            for candidate in candidates(choice.found_at[0]):
                if _found_as(candidate, choice):
                    return candidate, candidate.build()
        if choice.from_database:  # its index is its variant's, not the enumeration's
            return None, None
        for candidate in candidates():
            if candidate.index == choice.index:
                if candidate.impl != choice.impl:
                    return None, None
                return candidate, candidate.build()
    return None, None


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
    earlier versions have none, and the candidate is found by its index).  Only
    the shape is checked here: a variant that is not one of the pass's is
    simply not enumerated."""
    if not (isinstance(variant, list) and len(variant) == 5 and _kept_text(variant[0])
            and _kept_text(variant[1]) and type(variant[2]) is bool
            and type(variant[3]) is bool and _kept_text(variant[4])
            and _kept_text(layouts)):
        return None
    return tuple(variant), layouts


def _kept_choice(entry: Dict[str, Any], geom: DeconvGeometry,
                 tuning: bool = True) -> Optional[Choice]:
    """The choice an entry of the plan cache holds, or None unless every field is
    what the planner writes: a candidate position, a thread count the tuner
    would try for this layer (any other count can crash or stall OpenMP), the
    candidate's name, whether it was tuned (else the first correct
    candidate), bounded measurements.  _rebuild checks the candidate."""
    # Untrusted values (JSON from the file), each checked below.
    index: Any = entry.get("index")
    threads: Any = entry.get("threads")
    impl: Any = entry.get("impl")
    tuned = entry.get("tuned")
    from_database = entry.get("from_database", False)
    measured = entry.get("measured", [])
    # Only a tuned choice or the database's is found by its variant: a first
    # choice's index is what its tuner takes as checked already, so it must
    # be where it says; the database's is its variant's (found by it only).
    found_at = _kept_found_at(entry.get("variant"), entry.get("layouts")) \
        if tuned is True or from_database is True else None
    if from_database is True and found_at is None:
        return None
    if not (type(index) is int and index >= 0 and type(from_database) is bool
            and _kept_count(threads, 1, _ops.MAX_THREADS)
            and threads in tuner._thread_options(geom, tuning)
            and _kept_text(impl) and type(tuned) is bool
            and isinstance(measured, list) and len(measured) <= MAX_KEPT_MEASURED
            and all(_kept_measurement(m) for m in measured)):
        return None
    how = "kept from an earlier tuning on this machine" if tuned else \
        "first correct candidate, kept from an earlier run on this machine"
    return Choice(index, threads, impl, how, measured=[Measured(*m) for m in measured],
                  found_at=found_at, from_database=from_database)


def _rivals(choice: Choice, within: float) -> FrozenSet[str]:
    """The candidates a kept tuned choice's tuning ran within ``within`` of its
    own time, by name (the chosen one aside)."""
    chosen = [m.seconds for m in choice.measured if m.verdict.startswith("chosen")]
    if not chosen:
        return frozenset()
    bound = chosen[0] * within
    return frozenset(m.candidate.removesuffix(tuner.FIRST_CHOICE) for m in choice.measured
                     if not m.verdict.startswith("chosen") and m.seconds <= bound)


def _verdict(choice: Choice) -> Dict[str, Any]:
    """What a kept choice's verdict names: what the kernel check ran on (the
    library build, the ISA oneDNN dispatches to, the check's and the
    planner's rules, the implementation and thread count that agreed)."""
    return {"onednn": _ops.onednn_version(), "isa": _ops.cpu_isa(),
            "check": kernel_check.CHECK_VERSION, "planner": PLANNER_VERSION,
            "impl": choice.impl, "threads": choice.threads}


def _untrusted_because(store: plan_store.PlanStore, key: str, entry: Dict[str, Any],
                       choice: Choice) -> Optional[str]:
    """Why an entry's verdict cannot be taken as it is (None: it can): see
    docs/reliability.rst, "The plan cache's trust model"."""
    if not store.vouched(key):
        return "the cache file is not private to this user"
    if entry.get(plan_store.VERDICT) != _verdict(choice):
        return "its verdict was not reached on this library, CPU and candidate"
    return None


def _from_disk(store: plan_store.PlanStore, key: PlanKey, geom: DeconvGeometry,
               candidates: Callable[..., Iterable[Any]],
               check: Callable[[Any], Optional[str]], tuning: bool = True,
               defer: Optional[Callable[[Choice], bool]] = None
               ) -> Tuple[Optional[Choice], Any, bool]:
    """The choice kept in ``store``, its plan, and whether it was tuned, after
    checking the entry; (None, None, False) when there is none or it does not
    hold.  Its verdict is taken as it is only from an entry the store vouches
    for whose verdict names this library, CPU and candidate; any other
    entry's plan is checked again, and kept again as this process's verdict
    when it agrees.  A choice ``defer`` names comes without its plan (not
    built, not checked: see tuner._put_off_units, which checks it)."""
    store_key = _store_key(key, geom)
    entry = store.get(store_key)
    if entry is None:
        return None, None, False
    choice = _kept_choice(entry, geom, tuning)
    if choice is None:
        return None, None, False
    if defer is not None and defer(choice):
        return choice, None, entry["tuned"]
    try:
        candidate, plan = _rebuilt(choice, candidates)
    except MXNetError:
        return None, None, False
    if plan is None:
        return None, None, False  # stale: choose again
    if choice.found_at is None:
        # A first choice, found by its index: now also by its variant and
        # layouts, as the plan database rates it (else a layer the database
        # expects near its best would be tuned from its first call).
        choice.found_at = _found_at(candidate)
    why = _untrusted_because(store, store_key, entry, choice)
    if why is not None:
        if check(plan) is not None:
            return None, None, False  # no longer agreeing: choose again
        choice.how += f" (checked again: {why})"
        store.put(store_key, dict(entry, **{plan_store.VERDICT: _verdict(choice)}),
                  defer=True)
    return choice, plan, entry["tuned"]


def _keep(store: plan_store.PlanStore, key: PlanKey, geom: DeconvGeometry, choice: Choice,
          tuned: bool) -> None:
    """Keep a checked choice in ``store``, for this machine's later processes: a
    tuned one, or a first correct one (a later process skips its check, and
    tunes it on its calls)."""
    store.put(_store_key(key, geom), {
        "index": choice.index, "threads": choice.threads, "impl": choice.impl,
        "tuned": tuned,
        "measured": [[m.candidate, m.threads, m.seconds, m.verdict]
                     for m in choice.measured],
        **({} if choice.found_at is None else
           {"variant": list(choice.found_at[0]), "layouts": choice.found_at[1]}),
        **({"from_database": True} if choice.from_database else {}),
        plan_store.VERDICT: _verdict(choice)},
        defer=not tuned)  # first choices: one write for all, at the next or at exit
