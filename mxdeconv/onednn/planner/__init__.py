"""The planner: the fastest correct oneDNN plan for each pass of a layer.

For a new (pass, geometry, dtype, mode, thread count) it walks the candidates
oneDNN offers (``_ops.*_candidates``: each implementation in each layout family
for the data tensors, oneDNN's or plain weights, the bias fused or added by a
separate primitive, reference kernels last).  No plan reaches a result before
its output agreed with an independent computation on the real geometry
(:mod:`mxdeconv.onednn.kernel_check`); each one that disagrees raises one
:class:`~mxdeconv.KernelDefectWarning`.

* **First call**: the first candidate that agrees runs right away: the shipped
  plan database's (:mod:`~mxdeconv.onednn.plan_db`) where it predicts the
  layer confidently, or where its hint expects oneDNN's first choice to run
  HINT_START_RATIO times slower (not a GEMM plan's hint); else oneDNN's own
  first choice when it is correct (candidates of a kernel known to be wrong
  on some layers, :func:`.defects._known_suspect`, are tried last).  On a big layer
  (PROVISIONAL_MACS) whose sample sees every defect the kernel check sees
  (:func:`~mxdeconv.onednn.result_check.blind_spot`) the first candidate runs
  *provisionally*: its result is
  returned once :mod:`~mxdeconv.onednn.result_check` agreed with it on sampled
  elements, and the kernel check runs on the layer's next call (:mod:`.confirm`); a
  result that disagrees refuses the plan (:func:`refuse`), and the call is
  planned again, checked, and run again.
* **Later calls** (tuning on, the default): a :class:`.tuner._Tuner` times the
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

The package's modules, each importing only those after it: ``core`` (the
:class:`Planner`: its state and planning a pass), ``confirm`` (provisional
first calls), ``kept`` (a choice built again, the plan cache's entries),
``tuner``, ``costs``, ``defects`` (known oneDNN defects, the defect
warning), ``choice`` (:class:`Choice`, :class:`Measured`,
:class:`Unavailable`, :class:`BackwardPlans`) and ``keys``.  This module
holds the API, acting on one default :class:`Planner`
(:func:`use_planner`), and the attributes the compiled calls read.
"""
from __future__ import annotations

from typing import Any, Optional, Union

# The modules tests and tools reach through the planner (plans.plan_store, ...).
from .. import cpu_load, kernel_check, plan_db, plan_store, result_check  # noqa: F401
from .choice import (BackwardPlans, Choice, Measured, Unavailable, _found_at,  # noqa: F401
                     _same, provisional, settled)
from .confirm import PROVISIONAL_MACS  # noqa: F401
from .core import Planner
from .costs import (_backward_data_cost, _backward_weights_cost, _Costs,  # noqa: F401
                    _forward_cost)
from .defects import _known_defective, _known_suspect, _taps_without_data  # noqa: F401
from .keys import BackwardKey, ForwardKey, PlanKey  # noqa: F401
from .kept import (MAX_KEPT_MEASURED, MAX_KEPT_TEXT, PLANNER_VERSION,  # noqa: F401
                   _kept_choice, _rebuild, _store_key, _verdict)
from .tuner import (DUEL_ROUNDS, FIRST_CHOICE, FIRST_CHOICE_MARGIN, GEMM_MARK,  # noqa: F401
                    HINT_START_RATIO,
                    MAX_SERVED, MORE_THREADS_MARGIN, MORE_THREADS_MARGIN_S,
                    ONE_THREAD_MACS, REFINE, TUNE_CEILING_S, TUNE_FACTOR, TUNE_FLOOR_S,
                    TUNE_SHARE, UNIT_CALLS, _ranking, _thread_options, _to_the_end,
                    _Tuner, _tuning_units, ran, serve, unserved)
from mxdeconv.semantics.attributes import DeconvGeometry

#: The public API (the private names imported above are for the tests and
#: tools that time or check the planner's parts; patch them where they are
#: defined, in the package's modules).
__all__ = ["BackwardKey", "BackwardPlans", "Choice", "ForwardKey", "Measured", "PlanKey",
           "Planner", "Unavailable", "PLANNER_VERSION", "PROVISIONAL_MACS",
           "backward_plans", "clear_choices", "current_planner", "deterministic",
           "finish_tuning", "forward_plan", "pending", "provisional", "provisional_enabled",
           "ran", "refuse", "serve", "set_deterministic", "set_eager_tuning",
           "set_plan_database", "set_provisional", "set_tuning", "settled", "settlements",
           "store_path", "tuning", "tuning_on", "unserved", "use_planner"]

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
_default.mirror = _publish
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
    previous.mirror = None
    _default = planner
    planner.mirror = _publish
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
