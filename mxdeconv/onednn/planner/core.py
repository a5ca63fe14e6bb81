"""The planner object (:class:`Planner`): its state (the choices made, the plan
cache, the plan database, the passes still tuned or provisional, the
settings) and how it plans a pass: a kept choice, else the database's
confident prediction, else the first correct candidate (provisional on a
big layer), then tuned on the layer's later calls or at once (eager)."""
from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import threading
import time
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple, Union

from .. import _loader, cpu_load, kernel_check, plan_db, plan_store
from .._loader import extension as _ops
from . import costs as pass_costs
from . import kept
from . import tuner as tuner_rules
from .choice import BackwardPlans, Choice, PutOff, Unavailable, _found_as, _found_at, _same
from .confirm import _Provisional
from .costs import _backward_weights_cost, _Costs, _forward_cost
from .defects import (_known_defective, _known_suspect, _warn, deconvolution_family,
                      slow_deconvolution_descriptors)
from .keys import BackwardKey, ForwardKey, PlanKey
from .tuner import (_first_correct, _loaded, _to_the_end, _Tuner, _tuning_units,
                    _watched)
from mxdeconv._core.env import env_int, env_word
from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.attributes import DeconvGeometry


def _env_tuning() -> Tuple[bool, bool]:
    """(tuning on, eager) from MXDECONV_TUNE: on/off, or "eager" (tune a new
    layer to the end at its first call instead of on its later calls)."""
    word = env_word("MXDECONV_TUNE", "on", extra=("eager",))
    return word != "off", word == "eager"


def _flag(setter: str, enabled: Any) -> bool:
    if not isinstance(enabled, bool):
        raise TypeError(f"{setter}: enabled must be a bool, got {enabled!r} "
                        f"of type {type(enabled).__name__}")
    return enabled


def _with_later_forms(shortlist: FrozenSet[Tuple[Tuple[Any, ...], str]],
                      prediction: Optional[plan_db.Prediction] = None, what: str = ""
                      ) -> FrozenSet[Tuple[Tuple[Any, ...], str]]:
    """``shortlist`` (variant, impl) pairs, with mxdeconv's plans that its
    database may predate: beside the GEMM backward weights, its form that
    writes MXNet's layout at once (the tuner should weigh it wherever the
    other one ran well: the two differ only in the GEMM's orientation and a
    reorder); on a backward-data pass (``what``) whose records never name
    it (``prediction.named``), the GEMM backward data."""
    gemm_plain = (tuple(_ops.GEMM_PLAIN_VARIANT), _ops.GEMM_IMPL)
    if (tuple(_ops.GEMM_VARIANT), _ops.GEMM_IMPL) in shortlist:
        shortlist = shortlist | {gemm_plain}
    if what == "backward_data" and prediction is not None and \
            gemm_plain not in prediction.named:
        shortlist = shortlist | {gemm_plain}
    return shortlist


class _Listing:
    """``candidates`` whose default enumeration's first candidate can be looked
    at before the planner walks it, without enumerating it twice (making a
    candidate's descriptor can cost tens of milliseconds: brgemm kernels are
    set up then)."""

    def __init__(self, candidates: Callable[..., Iterable[Any]]) -> None:
        self._candidates = candidates
        self._started: Optional[Tuple[Any, Iterable[Any]]] = None

    def first(self) -> Any:
        """oneDNN's first candidate (None: none)."""
        if self._started is None:
            rest = iter(self._candidates())
            self._started = (next(rest, None), rest)
        return self._started[0]

    def made_first(self) -> Any:
        """oneDNN's first candidate if :meth:`first` has made it, else None."""
        return None if self._started is None else self._started[0]

    def __call__(self, variant: Optional[tuple] = None) -> Iterable[Any]:
        if variant is None and self._started is not None:
            first, rest = self._started
            self._started = None
            return itertools.chain(() if first is None else (first,), rest)
        return self._candidates(variant)


def gemm_kernels_made() -> bool:
    """Whether this process made oneDNN's GEMM kernels at load (or is making
    them: onednn.gemm_setup), so that a GEMM plan's first call does not."""
    setup = _loader.GEMM_SETUP
    return setup is not None and setup.started


def _deconvolution_found(choice: Choice) -> bool:
    """Whether a kept choice names a candidate of oneDNN's deconvolution."""
    return choice.found_at is not None and deconvolution_family(choice.found_at[0])


def _narrowed(candidates: Callable[..., Iterable[Any]], keeps: Callable[[Any], bool],
              first: Choice) -> Callable[..., Iterable[Any]]:
    """``candidates`` narrowed to those ``keeps`` names and ``first``'s (the
    one to beat: found by its index, or a database's choice by where it is
    found, its index being its variant's)."""
    def is_first(candidate: Any) -> bool:
        return _found_as(candidate, first) if first.from_database else \
            candidate.index == first.index

    def narrowed(variant: Optional[tuple] = None) -> Iterable[Any]:
        return (c for c in candidates(variant) if is_first(c) or keeps(c))
    return narrowed


def _only(variant: Optional[tuple]) -> Dict[str, Any]:
    """The candidates functions' keyword for one variant (none for all)."""
    return {} if variant is None else {"variant": variant}


class Planner(_Provisional):
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
                 provisional: Optional[bool] = None,
                 tune_after_calls: Optional[int] = None,
                 revalidate_every: Optional[int] = None) -> None:
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
        #: Calls of a new layer before it is tuned (MXDECONV_TUNE_AFTER; sooner
        #: where the database expects oneDNN's first choice to be slow).
        self.tune_after_calls = env_int("MXDECONV_TUNE_AFTER", tuner_rules.TUNE_AFTER_CALLS,
                                        0, 1 << 30, "a number of calls") \
            if tune_after_calls is None else tune_after_calls
        #: One process start in this many re-validates each tuned choice it takes
        #: from the plan cache (MXDECONV_REVALIDATE_EVERY; 0: never), drawn per
        #: layer pass (tuner.REVALIDATE_EVERY).
        self.revalidate_every = env_int(
            "MXDECONV_REVALIDATE_EVERY", tuner_rules.REVALIDATE_EVERY, 0, 1 << 30,
            "a number of process starts") if revalidate_every is None else revalidate_every
        self._draws = random.Random()
        #: The choices made, by planner key (None: chosen again on the next visit).
        #: (None only without the extension, where nothing plans.)
        self.choices: Any = _ops.LRUCache(1 << 14) if _ops is not None else None
        #: Each recent layer's forward descriptors (_ops.ForwardHints), by
        #: (geometry, dtype): its forward and backward enumerations share them.
        self.hints: Any = _ops.LRUCache(64) if _ops is not None else None
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
        #: Reports each disagreeing candidate, once per kernel and geometry.
        self._warn = functools.partial(_warn, self.warned)
        #: Called with this planner whenever tuning_on or settlements change,
        #: while it is the default planner (the package mirrors them).
        self.mirror: Optional[Callable[["Planner"], None]] = None

    @property
    def tuning_on(self) -> bool:
        """Whether new plans are tuned: asked for and not deterministic."""
        return self.tuning_wanted and not self.deterministic_on

    def afresh(self, store: Optional[plan_store.PlanStore] = None) -> "Planner":
        """A new planner with this one's settings and database, nothing chosen
        yet, and ``store`` (None: this one's)."""
        return Planner(self.store if store is None else store, self.database,
                       tuning=self.tuning_wanted, eager=self.eager,
                       deterministic=self.deterministic_on, provisional=self.provisional_on,
                       tune_after_calls=self.tune_after_calls,
                       revalidate_every=self.revalidate_every)

    def _published(self) -> None:
        """Mirror this planner's settings and settlements into the module
        attributes the compiled hot path reads, if it is the default one
        (``mirror``: set by :func:`~mxdeconv.onednn.planner.use_planner`)."""
        if self.mirror is not None:
            self.mirror(self)

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

    # -- planning a pass -----------------------------------------------------------
    def _start_tuning(self, key: PlanKey, geom: DeconvGeometry,
                      candidates: Callable[..., Iterable[Any]],
                      check: Callable[[Any], Optional[str]], cost: Callable[[Any], float],
                      costs: "_Costs", first: Choice) -> _Tuner:
        """A tuner for ``key``'s later calls; its result replaces ``first``."""
        def settle(choice: Optional[Choice], plan: Any, why: str) -> None:
            if choice is None or plan is None:  # failed, or nothing agreed after all
                choice = dataclasses.replace(
                    first, tuner=None,
                    how=f"first correct candidate ({why or 'the tuner found none that agreed'})")
            else:
                kept._keep(self.store, key, geom, choice, not _loaded(choice, load))
                choice.seconds = first.seconds + tuner.seconds
            self._ended(key, tuner, choice)

        def handed_on(choice: Optional[Choice], plan: Any, why: str) -> None:
            """The put-off candidate's unit ended: it runs from now on (else
            the first choice, where it was not offered or disagreed), final if
            it was a tuned choice kept in the plan cache, else tuned among the
            shortlist on later calls, as a hint near its best is."""
            assert first.put_off is not None
            final = first.put_off.final and choice is not None and plan is not None
            if choice is None or plan is None:
                choice = dataclasses.replace(first, tuner=None, put_off=None)
            else:
                kept._keep(self.store, key, geom, choice, final)
            choice.seconds = first.seconds + tuner.seconds
            if not final:
                choice.tune_after_calls = self.tune_after_calls * tuner_rules.NEAR_BEST_WAIT
                choice.how += "; tuned on this layer's later calls"
                choice.tuner = self._start_tuning(key, geom, candidates, check, cost, costs,
                                                  choice)
            self._ended(key, tuner, choice)

        load = cpu_load.ForeignLoad(team=key.threads)
        if first.put_off is not None:
            tuner = _Tuner(tuner_rules._put_off_units(geom, first, candidates, check,
                                                      warn=self._warn),
                           handed_on, first.tune_after_calls)
        else:
            # A database's candidate is named by its variant and layouts.
            agreed = tuner_rules.checked_as(first)
            if first.rivals is not None:
                rivals = first.rivals  # the kept choice re-validated beside these
                candidates = _narrowed(candidates, lambda c: repr(c) in rivals, first)
            if first.shortlist is not None:
                shortlist = first.shortlist
                candidates = _narrowed(
                    candidates,
                    lambda c: (tuple(getattr(c, "variant", ())), c.impl) in shortlist, first)
                first.how += (f" among the {len(first.shortlist)} candidates its nearest "
                              f"layers in the database ran within "
                              f"{plan_db.SHORTLIST_RATIO - 1:.0%} of their fastest")
            tuner = _Tuner(_watched(_tuning_units(geom, candidates, check, costs, cost,
                                                  warn=self._warn,
                                                  tuning=lambda: self.tuning_on, **agreed),
                                    load),
                           settle, first.tune_after_calls)
        with self.tuners_lock:
            self.tuners[key] = tuner
        return tuner

    def _ended(self, key: PlanKey, tuner: _Tuner, choice: Choice) -> None:
        """``tuner`` ended: ``choice`` is ``key``'s from now on (a new tuner of
        ``choice``'s, registered meanwhile, stays)."""
        with self.tuners_lock:
            if self.tuners.get(key) is tuner:
                del self.tuners[key]
        self.choices.put(key, choice)
        with self.tuners_lock:
            self.settlements += 1  # after the put: a call sent back now finds the choice
            self._published()

    def _prediction(self, key: PlanKey, geom: DeconvGeometry) -> Optional[plan_db.Prediction]:
        """The shipped database's prediction for ``key`` (None: none, or a pass
        the database does not speak for: req=add, a fused activation)."""
        if isinstance(key, ForwardKey) and (key.accumulate or key.act_type is not None):
            return None
        training = isinstance(key, ForwardKey) and key.training
        return self.database.predict(
            plan_db.LayerKey(key.what, key.dtype, training, len(geom.spatial_in)),
            geom, _ops.get_num_threads(), _ops.cpu_isa())

    def _predicted_choice(self, key: PlanKey, geom: DeconvGeometry, candidates: _Listing,
                          check: Callable[[Any], Optional[str]], provisional: bool,
                          prediction: plan_db.Prediction) -> Tuple[Optional[Choice], Any]:
        """The predicted candidate for ``key`` and its plan, checked
        (``provisional``: built only, its results checked, see PROVISIONAL_MACS);
        (None, None) when it is not offered here or disagrees (then the key is
        chosen as without a prediction).  Only its variant is enumerated: a new
        process's first call costs no other descriptor."""
        with self.refused_lock:
            if key in self.refused:
                return None, None
        choice = prediction.choice
        threads = 1 if choice.one_thread else _ops.get_num_threads()
        if threads not in tuner_rules._thread_options(geom, self.tuning_on):
            return None, None

        def predicted(candidate: Any) -> bool:
            return candidate is not None and candidate.impl == choice.impl and \
                tuple(candidate.variant) == tuple(choice.variant)
        # oneDNN's first candidate, where the listing made it already (on the
        # caller's threads) and it is the prediction, is not made twice: a
        # descriptor can cost tens of milliseconds.
        made = candidates.made_first() if threads == _ops.get_num_threads() else None
        with _ops.using_threads(threads):
            candidate = made if predicted(made) else \
                next((c for c in candidates(choice.variant) if predicted(c)), None)
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
        how = "predicted" if prediction.confident else "hinted"
        chosen = Choice(candidate.index, threads, candidate.impl,
                        f"{how} by {prediction.source}", found_at=_found_at(candidate),
                        provisional=provisional, confident=prediction.confident,
                        from_database=True)
        if not (provisional or prediction.confident):  # checked: kept as a first choice
            kept._keep(self.store, key, geom, chosen, False)
        return chosen, plan

    @staticmethod
    def _displaced_first(prediction: plan_db.Prediction, listing: _Listing,
                         suspect: Optional[Callable[[Any], bool]] = None
                         ) -> Optional[Tuple[Tuple[Any, ...], str]]:
        """oneDNN's first candidate (as a shortlist names it) where a hint should
        run from the first call instead: where the hint's nearest layers ran it
        HINT_START_RATIO times the hint's time or slower, or not near it at
        all; None where the first choice stays (closer than that it is often
        cheaper to start, and the tuner times the hint among its shortlist).
        A GEMM plan's hint displaces only a first candidate that is a GEMM
        plan too: a GEMM's first call sets the GEMM up and writes a column
        workspace, which costs more than the hint saves over a new layer's
        first ten calls unless the first choice pays it as well
        (tuner.hint_displaces).
        Where the first candidate is a known ``suspect``, the first plan would
        not be it but a later candidate the database did not rate (on a 1-D
        layer: 1.9x the hint's time, reached through two more 40-80 ms
        descriptors): the hint runs instead, whatever the ratio."""
        first = listing.first()
        found = None if first is None else _found_at(first)
        if found is None:
            return None
        if not (suspect is not None and suspect(first)) and \
                not tuner_rules.hint_displaces(prediction, found[0], first.impl,
                                               gemm_kernels_made()):
            return None
        return tuple(found[0]), first.impl

    @staticmethod
    def _put_off_hint(prediction: plan_db.Prediction,
                      found: Optional[Tuple[Tuple[Any, ...], str]], impl: str
                      ) -> Tuple[Optional[PutOff], Optional[Tuple[Tuple[Any, ...], str]]]:
        """A GEMM plan's hint that does not start the layer but should replace
        its first candidate (``impl``, ``found`` at its variant and layouts)
        after a few calls (tuner.hint_put_off), and that candidate as a
        shortlist names it (tuned beside the hint later: a wrong hint is
        tuned away); (None, None) otherwise."""
        if found is None or prediction.choice.one_thread or \
                not tuner_rules.hint_put_off(prediction, found[0], impl, gemm_kernels_made()):
            return None, None
        return (PutOff(tuple(prediction.choice.variant), prediction.choice.impl,
                       f"hinted by {prediction.source}", False,
                       why="a process's first GEMM generates oneDNN's GEMM kernels, "
                           "about 25 ms, and this one did not make them at load"),
                (tuple(found[0]), impl))

    def _first_choice(self, key: PlanKey, geom: DeconvGeometry,
                      candidates: Callable[..., Iterable[Any]],
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
            kept._keep(self.store, key, geom, choice, False)
        return choice, plan

    def _tuned_now(self, key: PlanKey, geom: DeconvGeometry,
                   candidates: Callable[..., Iterable[Any]],
                   check: Callable[[Any], Optional[str]], costs: "_Costs",
                   cost: Callable[[Any], float], first: Choice) -> Tuple[Choice, Any]:
        """Eager tuning from ``first`` (checked): all the tuner's units at once,
        the choice kept on disk (as tuned unless other processes loaded the
        CPUs meanwhile)."""
        load = cpu_load.ForeignLoad(team=key.threads)
        choice, plan = _to_the_end(_watched(_tuning_units(
            geom, candidates, check, costs, cost, warn=self._warn,
            tuning=lambda: self.tuning_on, **tuner_rules.checked_as(first)), load))
        if plan is not None:
            kept._keep(self.store, key, geom, choice, not _loaded(choice, load))
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
        # Where deconvolution descriptors are slow to make, none starts the
        # layer: the first plan is its direct twin (enumerated first there),
        # and a kept or predicted deconvolution replaces it after a few calls.
        slow = slow_deconvolution_descriptors(geom)
        put_off: Optional[PutOff] = None
        try:
            choice, plan, tuned = kept._from_disk(
                self.store, key, geom, candidates, check, self.tuning_on,
                defer=_deconvolution_found if slow and not self.eager else None) \
                if self.tuning_on else (None, None, False)
            if choice is not None and plan is None:  # deferred
                assert choice.found_at is not None
                put_off = PutOff(tuple(choice.found_at[0]), choice.impl, choice.how, tuned)
                choice, tuned = None, False
            prediction = self._prediction(key, geom) \
                if self.tuning_on and not self.eager and not tuned and \
                not (put_off is not None and put_off.final) else None
            if tuned and choice is not None and self._revalidating():
                choice.rivals = kept._rivals(choice, tuner_rules.REVALIDATE_WITHIN)
                choice.how += (f"; re-validated on this layer's later calls beside the "
                               f"{len(choice.rivals)} candidate(s) its tuning ran within "
                               f"{tuner_rules.REVALIDATE_WITHIN - 1:.0%} of it (one process "
                               f"start in {self.revalidate_every})")
                tuned = False
            displaced = None
            listing = _Listing(candidates)
            if put_off is None and prediction is not None and slow and \
                    deconvolution_family(prediction.choice.variant):
                put_off = PutOff(tuple(prediction.choice.variant), prediction.choice.impl,
                                 "predicted by the plan database", False)
            if choice is None and prediction is not None and put_off is None:
                if not prediction.confident:
                    displaced = self._displaced_first(
                        prediction, listing,
                        _known_suspect(geom) if key.what == "forward" else None)
                    first = listing.first()
                    if displaced is None and first is not None:
                        put_off, displaced = self._put_off_hint(prediction, _found_at(first),
                                                                first.impl)
                if prediction.confident or (displaced is not None and put_off is None):
                    choice, plan = self._predicted_choice(key, geom, listing, check,
                                                          provisional, prediction)
            elif choice is not None and prediction is not None and put_off is None and \
                    not prediction.confident and not choice.from_database:
                # A first choice kept by an earlier process is put off for a
                # GEMM plan's hint as oneDNN's first candidate is.
                put_off, displaced = self._put_off_hint(prediction, choice.found_at,
                                                        choice.impl)
            if choice is None:  # eager tuning too starts from it: the same choice either way
                choice, plan = self._first_choice(key, geom, listing, check,
                                             provisional and not self.eager)
            choice.tune_after_calls = self.tune_after_calls
            if prediction is not None and not choice.confident:
                # To be tuned: among the candidates the nearest layers ran well,
                # at once where they ran the first choice much slower than the best.
                # oneDNN's first choice too where a hint displaced it: a wrong
                # hint is tuned away.
                choice.shortlist = _with_later_forms(frozenset(
                    (tuple(c.variant), c.impl) for c in prediction.shortlist),
                    prediction, key.what) | (
                    {displaced} if displaced is not None and (
                        choice.from_database or put_off is not None) else set())
                expected = None if choice.found_at is None else prediction.ratio(
                    choice.found_at[0], choice.impl)
                if put_off is not None:
                    pass  # replaced soon, then tuned as a hint near its best (below)
                elif expected is None or expected >= tuner_rules.PROMPT_RATIO:
                    choice.tune_after_calls = 0
                elif expected < tuner_rules.HINT_START_RATIO:
                    # Near the best already: tuning would cost more than it
                    # gains in a short run; only a long one pays for it.
                    choice.tune_after_calls *= tuner_rules.NEAR_BEST_WAIT
            if put_off is not None and plan is not None and not choice.confident:
                # Replaced after a few calls (its descriptor paid once, from the
                # calls' tuning share).
                choice.put_off = put_off
                choice.tune_after_calls = tuner_rules.PUT_OFF_TUNE_AFTER
                choice.how += (f"; standing in, for the first calls, for {put_off.impl} "
                               f"({put_off.how}), put off: {put_off.why}")
            if self.deterministic_on and plan is not None:
                choice.how += ("; deterministic mode: checked before its first call, never "
                               "tuned, kept for the process")
            if choice.provisional:
                pass  # checked, kept and tuned from its next call on (_confirm)
            elif choice.confident:
                # kept as a tuned choice: never tuned
                kept._keep(self.store, key, geom, choice, True)
            elif self.tuning_on and plan is not None and not tuned:
                if self.eager:  # tune from the first choice now
                    tuned_choice, tuned_plan = self._tuned_now(key, geom, candidates, check, costs,
                                                               cost, choice)
                    if tuned_plan is not None:
                        choice, plan = tuned_choice, tuned_plan
                else:
                    if choice.rivals is None and choice.put_off is None:
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

    def _revalidating(self) -> bool:
        """Whether this process re-validates a kept tuned choice (a draw, see
        tuner.REVALIDATE_EVERY); never when tuning to the end at once."""
        return (self.revalidate_every > 0 and not self.eager
                and self._draws.randrange(self.revalidate_every) == 0)

    def _plan(self, key: PlanKey, geom: DeconvGeometry, candidates: Callable[..., Iterable[Any]],
              make_check: Callable[[], kernel_check.Check], costs: "_Costs",
              cost: Callable[[Any], float], provisional: bool = False) -> Union[Any, Unavailable]:
        plan = _ops.cache(key)
        if plan is not None and (type(plan) is Unavailable or (
                plan.choice.tuner is None and not plan.choice.provisional)):
            return plan
        choice = self.choices.get(key)
        if choice is not None and choice.provisional:  # its next call: the kernel check
            choice = self._confirm(key, geom, candidates, make_check, costs, cost, choice,
                              plan if plan is not None and plan.choice is choice else None)
        if choice is not None:
            if choice.tuner is not None:  # being tuned on its calls: one unit, perhaps
                choice.tuner.step()
                choice = self.choices.get(key) or choice  # settled by that unit, perhaps
            if plan is not None and not _same(plan.choice, choice):
                plan = None  # this thread's plan is not the choice any more
            if plan is None and choice.index is not None:  # chosen by another thread, or before
                plan = kept._rebuild(choice, candidates)
                if plan is None:  # its candidate is not where it was: choose again
                    choice = None
        if choice is None:
            choice, plan = self._choose(key, geom, candidates, make_check, costs, cost,
                                        provisional)
            if choice.transient:
                return Unavailable(choice.describe())
            self.choices.put(key, choice)
            if choice.provisional:
                with self.refused_lock:
                    self.unconfirmed[key] = lambda: self._confirm(
                        key, geom, candidates, make_check, costs, cost, choice, None)
        if plan is None:
            unavailable = Unavailable(choice.describe())
            _ops.cache_put(key, unavailable)
            return unavailable
        plan.choice = choice
        _ops.cache_put(key, plan)
        return plan

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
        finished = {key for key, _ in confirmations}
        done: List[_Tuner] = []
        while True:  # a put-off prediction's tuner hands its key on to another
            with self.tuners_lock:
                tuners = [(key, tuner) for key, tuner in self.tuners.items()
                          if not any(tuner is other for other in done)]
            if not tuners:
                return len(finished)
            for key, tuner in tuners:
                tuner.finish()
                done.append(tuner)
                finished.add(key)

    def _hints(self, geom: DeconvGeometry, dtype: str) -> Any:
        """The layer's forward descriptors (_ops.ForwardHints), shared by all its
        passes' enumerations: on some layers each costs more than the call."""
        hints = self.hints.get((geom, dtype))
        if hints is None:
            hints = _ops.ForwardHints(geom, dtype)
            self.hints.put((geom, dtype), hints)
        return hints

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

        hints = self._hints(geom, dtype)
        direct_first = slow_deconvolution_descriptors(geom)

        def candidates(variant: Optional[tuple] = None) -> Iterable[Any]:
            return _ops.forward_candidates(geom, dtype, training, accumulate, *extra,
                                           **_only(variant), hints=hints,
                                           direct_first=direct_first)
        if act_type is None:
            make_check = lambda: kernel_check.forward_check(geom, dtype, accumulate)  # noqa: E731
        else:
            make_check = lambda: kernel_check.forward_check(  # noqa: E731
                geom, dtype, accumulate, act_type)
        return self._plan(key, geom, candidates, make_check, costs,
                          lambda plan: _forward_cost(costs, plan, training, accumulate),
                          self._may_be_provisional(geom, dtype, "forward")
                          and act_type is None and not accumulate)

    def _training_forward_weights(self, geom: DeconvGeometry, dtype: str, threads: int) -> Any:
        """The weight layout of this thread's training forward plan for ``geom``
        (without req=add or an activation; None: none planned yet)."""
        plan = _ops.cache_peek(ForwardKey("forward", geom, dtype, True, False, None, threads,
                                          self.tuning_on))
        return None if plan is None or isinstance(plan, Unavailable) else plan.weights

    def backward_plans(self, geom: DeconvGeometry,
                       dtype: str) -> Union[BackwardPlans, Unavailable]:
        """The backward-weights and backward-data plans, the two planned together:
        backward data counts no out_grad reorder when it reads out_grad in
        backward weights' layout, and no weight reorder when it takes the weight
        in the layout of the step's training forward (planned before it)."""
        threads = _ops.get_num_threads()
        weights_costs, data_costs = _Costs(), _Costs()  # each tuner steps its own
        defective = _known_defective(geom, dtype)
        hints = self._hints(geom, dtype)
        direct_first = slow_deconvolution_descriptors(geom)
        weights = self._plan(
            BackwardKey("backward_weights", geom, dtype, threads, self.tuning_on), geom,
            lambda variant=None: (c for c in _ops.backward_weights_candidates(
                geom, dtype, **_only(variant), hints=hints, direct_first=direct_first)
                if not defective(c)),
            lambda: kernel_check.backward_weights_check(geom, dtype), weights_costs,
            lambda plan: _backward_weights_cost(weights_costs, plan),
            self._may_be_provisional(geom, dtype, "backward_weights"))
        if isinstance(weights, Unavailable):
            return weights
        data = self._plan(
            BackwardKey("backward_data", geom, dtype, threads, self.tuning_on), geom,
            lambda variant=None: _ops.backward_data_candidates(
                geom, dtype, **_only(variant), hints=hints, direct_first=direct_first),
            lambda: kernel_check.backward_data_check(geom, dtype), data_costs,
            # Looked up when timing (not on every call): the forward is
            # planned before the backward in a training step.
            lambda plan: pass_costs._backward_data_cost(
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
