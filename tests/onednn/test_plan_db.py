"""The shipped plan database and its predictor (mxdeconv/onednn/plan_db.py):
a confident prediction is the first call's plan and is never tuned, a hint
is the first call's plan and its layer is tuned among the shortlist only, a
prediction is never a verdict (its plan is checked like any other), and a
database that does not fit (another CPU, a candidate not offered, junk)
leaves the planner as it is without one.  The databases here are the tests'
own; the shipped one is only read."""
import contextlib
import dataclasses
import json

import numpy as np
import pytest

import mxdeconv
from mxdeconv import KernelDefectWarning, nd
from mxdeconv.onednn import plan_db
from mxdeconv.onednn import planner as plans
from mxdeconv.onednn.planner import confirm, kept, tuner
from mxdeconv.onednn.planner.choice import _found_at
from mxdeconv.onednn._loader import extension as _ops
from mxdeconv.semantics import deconv_numpy
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import planner_afresh
from planted import WrongCandidate, WrongPlan

PARAMS = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=8, no_bias=False)
SHAPE = (2, 8, 5, 5)
GEOM = infer_geometry(parse_params(PARAMS), SHAPE)
#: A layer far from SHAPE (its record is a hint for it, never confident).
FAR_SHAPE = (32, 512, 40, 40)


def _named(candidate, one_thread=False):
    return {"variant": list(candidate.variant), "impl": candidate.impl,
            "one_thread": one_thread}


def _record(candidate, shape=SHAPE, what="forward", training=False, threads=None,
            one_thread=False, isa=None, near=(), **params):
    """A record choosing ``candidate``; ``near``: (candidate, time over the
    fastest's) of others that ran close to it."""
    return {"isa": isa or _ops.cpu_isa(), "threads": threads or _ops.get_num_threads(),
            "pass": what, "dtype": "float32", "training": training,
            "layer": {"data": list(shape), "params": dict(PARAMS, **params)},
            "choice": _named(candidate, one_thread),
            "near": [[_named(candidate, one_thread), 1.0]]
            + [[_named(other), ratio] for other, ratio in near]}


def _database(tmp_path, records, made=None):
    path = tmp_path / "plan_db.json"
    path.write_text(plan_db.file_text(records, made or {}, []))
    return path


@pytest.fixture
def with_database(monkeypatch):
    """Plan afresh, tuning on calls, with the database the test writes."""
    with planner_afresh(tuning=True, eager=False, monkeypatch=monkeypatch):
        def use(path):
            plans.set_plan_database(str(path))
        yield use
    plans.set_plan_database(None)


def _not_first(what="forward"):
    """A real candidate that is not oneDNN's first choice (None if there is none)."""
    listed = [c for c in _ops.forward_candidates(GEOM, "float32", False, False)
              if not c.is_reference]
    return listed[1] if len(listed) > 1 else None


def _named_as(candidate):
    """A predicate: whether a candidate has ``candidate``'s kernel and variant."""
    signature = (candidate.impl, tuple(candidate.variant))
    return lambda c: (c.impl, tuple(c.variant)) == signature


def _plant_wrong(monkeypatch, named):
    """The forward candidates that ``named`` picks compute a wrong bias
    (planted.WrongCandidate), under their own name, index and layouts."""
    real = _ops.forward_candidates

    class Disguised(WrongCandidate):
        def __init__(self, c):
            super().__init__(c)
            self.index, self.impl, self.variant, self.layouts = c.index, c.impl, c.variant, \
                c.layouts

    monkeypatch.setattr(_ops, "forward_candidates", lambda *a, **k: iter(
        [Disguised(c) if named(c) else c for c in real(*a, **k)]))


def _forward(data_seed=0):
    rng = np.random.default_rng(data_seed)
    data = rng.standard_normal(SHAPE).astype(np.float32)
    weight = rng.standard_normal(GEOM.weight_shape).astype(np.float32)
    bias = rng.standard_normal(GEOM.bias_shape).astype(np.float32)
    out = nd.Deconvolution(data, weight, bias, **PARAMS).asnumpy()
    want = deconv_numpy.forward(GEOM, data.astype(np.float64), weight.astype(np.float64),
                                bias.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def _choice():
    return plans.forward_plan(GEOM, "float32", False, False).choice


def test_the_layer_itself_is_predicted_confidently_and_never_tuned(tmp_path, with_database):
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    with_database(_database(tmp_path, [_record(candidate)]))
    _forward()
    choice = _choice()
    assert (choice.impl, choice.found_at[0]) == (candidate.impl, candidate.variant)
    assert choice.how.startswith("predicted by the shipped plan database") and \
        choice.how.endswith(": this layer")
    assert choice.confident and choice.tuner is None and plans.pending() == 0
    entry = plans.current_planner().store.get(plans._store_key(choice.key, GEOM))
    assert entry["tuned"] is True and entry["impl"] == candidate.impl  # kept: never tuned


def test_a_confident_prediction_re_validated_stays_the_databases_candidate(tmp_path,
                                                                             with_database):
    """A new process that re-validates a confident prediction kept in the plan
    cache times the database's candidate itself (found by its variant), not
    the candidate at its index in the full enumeration (its index is its
    variant's): the tuning ends on the same candidate."""
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    with_database(_database(tmp_path, [_record(candidate)]))
    _forward()
    assert _choice().confident
    with _new_process():
        plans.current_planner().revalidate_every = 1  # this start re-validates
        _forward(1)
        assert "re-validated" in _choice().how, _choice().how
        plans.finish_tuning()
        _forward(2)
        settled = _choice()
        assert settled.tuner is None
        assert (settled.impl, settled.found_at) == (candidate.impl, _found_at(candidate))


def test_a_prediction_is_checked_like_any_plan(tmp_path, with_database, monkeypatch):
    """The database names a candidate whose plan is wrong here: refused with one
    warning, and the layer planned as without a database."""
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    _plant_wrong(monkeypatch, _named_as(candidate))
    with_database(_database(tmp_path, [_record(candidate)]))
    with pytest.warns(KernelDefectWarning):
        _forward()
    choice = _choice()
    assert not choice.confident and "predicted" not in choice.how
    assert choice.tuner is not None  # tuned on its calls, as without a database


def test_a_provisional_prediction_is_confirmed_and_kept_untuned(tmp_path, with_database,
                                                                monkeypatch):
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    monkeypatch.setattr(confirm, "PROVISIONAL_MACS", 0)
    was = plans.set_provisional(True)
    try:
        with_database(_database(tmp_path, [_record(candidate)]))
        _forward()
        assert plans.current_planner().choices.get(_choice_key()).provisional
        _forward(1)  # its next call: the kernel check
        choice = _choice()
        assert not choice.provisional and choice.confident and choice.tuner is None
        assert plans.pending() == 0
    finally:
        plans.set_provisional(was)


def _choice_key():
    return ("forward", GEOM, "float32", False, False, None, _ops.get_num_threads(), True)


@pytest.mark.parametrize("how", ["far", "unknown impl", "another cpu", "junk"])
def test_no_confident_prediction_leaves_the_planner_as_without_a_database(
        tmp_path, with_database, how):
    candidate = _not_first() or next(iter(_ops.forward_candidates(GEOM, "float32", False,
                                                                  False)))
    if how == "far":  # one record, of a layer far away: a hint, not confident
        records = [_record(candidate, shape=FAR_SHAPE, num_filter=256)]
    elif how == "unknown impl":
        records = [dict(_record(candidate), choice=dict(_record(candidate)["choice"],
                                                        impl="no such kernel"))]
    elif how == "another cpu":
        records = [_record(candidate, isa="some_future_isa")]
    else:
        records = [{"isa": 3}, {"layer": "x"}, 7, _record(candidate, what="sideways")]
    with_database(_database(tmp_path, records))
    _forward()
    choice = _choice()
    assert not choice.confident and "predicted" not in choice.how and choice.tuner is not None


def _grouped(names, *lines, choices=()):
    """A file of this format whose groups are ``names`` and whose lines after
    the header are ``lines``, all as given."""
    return "\n".join([json.dumps({"format": plan_db.FORMAT, "groups": names,
                                   "choices": list(choices)}), *lines])


def _index(point, choice=0, near=((0, 1.0),)):
    """A group's index line of one record."""
    return json.dumps({"points": [point], "choice": [choice], "near": [list(near)]})


_FORWARD = plan_db.group_name((_ops.cpu_isa(), "forward", "float32", False, 2))


@pytest.mark.parametrize("content", [
    lambda point, named: "{not json", lambda point, named: '{"format": 99}',
    lambda point, named: "[]", lambda point, named: "",
    lambda point, named: _grouped("not a list", choices=named),
    lambda point, named: _grouped({_FORWARD: _index(point)}, choices=named),
    lambda point, named: _grouped([_FORWARD], "{not json", choices=named),
    lambda point, named: _grouped([_FORWARD], '{"a": 1}', choices=named),
    lambda point, named: _grouped([_FORWARD], "[7, {}]", choices=named),
    lambda point, named: _grouped([_FORWARD], choices=named),
    lambda point, named: _grouped(["not|a|group"], _index(point), choices=named),
    # The layer's own record, but a choice that names no candidate of the
    # file, or a point that is not one, or columns that do not match:
    lambda point, named: _grouped([_FORWARD], _index(point, choice=3), choices=named),
    lambda point, named: _grouped([_FORWARD], _index(point[:-1]), choices=named),
    lambda point, named: _grouped([_FORWARD], _index(point[:-1] + ["x"]), choices=named),
    lambda point, named: _grouped([_FORWARD], _index(point[:-1] + [float("nan")]),
                                  choices=named),
    lambda point, named: _grouped([_FORWARD], json.dumps({"points": [point], "choice": [0]}),
                                  choices=named),
    lambda point, named: _grouped([_FORWARD], json.dumps(
        {"points": [point, point], "choice": [0], "near": [[]]}), choices=named)])
def test_a_database_file_that_is_not_one_is_ignored(tmp_path, with_database, content):
    """Junk in any part of the file: no prediction, the layer planned as
    without a database.  Each junk file names the layer's own record and
    oneDNN's first candidate: well formed, it is a confident prediction (the
    test below), so each is refused for its junk alone."""
    first = next(iter(_ops.forward_candidates(GEOM, "float32", False, False)))
    point = list(plan_db.features(GEOM, _ops.get_num_threads()))
    path = tmp_path / "plan_db.json"
    path.write_text(content(point, [_named(first)]))
    with_database(path)
    _forward()
    assert not _choice().confident


def test_a_well_formed_index_of_the_layer_predicts_it(tmp_path, with_database):
    """The junk files above, well formed: the layer's own record is a confident
    prediction, and the layer's first call runs it."""
    first = next(iter(_ops.forward_candidates(GEOM, "float32", False, False)))
    point = list(plan_db.features(GEOM, _ops.get_num_threads()))
    path = tmp_path / "plan_db.json"
    path.write_text(_grouped([_FORWARD], _index(point), choices=[_named(first)]))
    database = plan_db.PlanDatabase(path)
    prediction = database.predict(plan_db.LayerKey("forward", "float32", False, 2), GEOM,
                                  _ops.get_num_threads(), _ops.cpu_isa())
    assert prediction is not None and prediction.confident
    assert prediction.choice.impl == first.impl
    with_database(path)
    _forward()
    assert _choice().confident


def test_a_nearest_record_that_is_not_well_formed_is_passed_over(tmp_path):
    """Records are parsed as a prediction reaches them: the layer's own
    record, naming no candidate of the file, is passed over for the next
    nearest, which is weighed as if the other were not there."""
    first = next(iter(_ops.forward_candidates(GEOM, "float32", False, False)))
    point = list(plan_db.features(GEOM, _ops.get_num_threads()))
    farther = point[:]
    farther[0] += 1.0  # twice the batch
    path = tmp_path / "plan_db.json"
    path.write_text(_grouped([_FORWARD], json.dumps(
        {"points": [point, farther], "choice": [3, 0], "near": [[[3, 1.0]], [[0, 1.0]]]}),
        choices=[_named(first)]))
    prediction = plan_db.PlanDatabase(path).predict(
        plan_db.LayerKey("forward", "float32", False, 2), GEOM, _ops.get_num_threads(),
        _ops.cpu_isa())
    assert prediction is not None and not prediction.confident
    assert prediction.choice.impl == first.impl
    assert "1 nearest layers (distance 1.00 to 1.00)" in prediction.source
    assert prediction.named == {(tuple(prediction.choice.variant), first.impl)}


def test_neighbours_that_agree_predict_confidently(tmp_path):
    """Three near layers (other batches) that chose alike: confident; one that
    chose otherwise among them: a hint."""
    first = next(iter(_ops.forward_candidates(GEOM, "float32", False, False)))
    other = _not_first() or first
    records = [_record(first, shape=(batch,) + SHAPE[1:]) for batch in (1, 3, 4)]
    database = plan_db.PlanDatabase(_database(tmp_path, records))
    key = plan_db.LayerKey("forward", "float32", False, 2)
    prediction = database.predict(key, GEOM, _ops.get_num_threads(), _ops.cpu_isa())
    assert prediction.confident and prediction.choice.impl == first.impl
    assert "3 nearest layers" in prediction.source and "within 5%" in prediction.source
    if other is not first:
        records[1] = _record(other, shape=(4,) + SHAPE[1:])
        database = plan_db.PlanDatabase(_database(tmp_path, records))
        assert not database.predict(key, GEOM, _ops.get_num_threads(),
                                    _ops.cpu_isa()).confident


def test_the_prediction_weighs_neighbours_by_distance_and_time(tmp_path):
    """The nearest layer ran A 2% slower than B, a farther one ran A fastest and
    never kept B: A is the better bet overall (B unkept counts 3x)."""
    listed = [c for c in _ops.forward_candidates(GEOM, "float32", False, False)
              if not c.is_reference]
    if len(listed) < 2:
        pytest.skip("this CPU offers one candidate for the layer")
    a, b = listed[:2]
    near = _record(b, shape=(4,) + SHAPE[1:], near=[(a, 1.02)])
    farther = _record(a, shape=(16,) + SHAPE[1:])
    database = plan_db.PlanDatabase(_database(tmp_path, [near, farther]))
    prediction = database.predict(plan_db.LayerKey("forward", "float32", False, 2), GEOM,
                                  _ops.get_num_threads(), _ops.cpu_isa())
    assert prediction.choice.impl == a.impl and not prediction.confident
    assert {c.impl for c in prediction.shortlist} == {a.impl, b.impl}


def _first_listed():
    return next(c for c in _ops.forward_candidates(GEOM, "float32", False, False))


def _hinted(tmp_path, with_database, candidate, near=()):
    """Plan the layer (one forward) with a database of one record far from it
    that chose ``candidate`` (a hint, never confident); its choice."""
    with_database(_database(tmp_path, [_record(candidate, shape=FAR_SHAPE,
                                               num_filter=256, near=near)]))
    _forward()
    return _choice()


def _hinted_near_first(tmp_path, with_database):
    """Plan the layer (tuned from its 4th call) with a far record whose hint
    ran oneDNN's first choice within HINT_START_RATIO of it: (the hint, the
    first candidate, the choice)."""
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    first = _first_listed()
    close = 1 + (plans.tuner.HINT_START_RATIO - 1) / 2
    plans.current_planner().tune_after_calls = 4
    return candidate, first, _hinted(tmp_path, with_database, candidate,
                                     near=[(first, close)])


@contextlib.contextmanager
def _new_process():
    """A new process on this one's plan cache: a fresh planner on the same
    store (written out first), no plan cached."""
    planner = plans.current_planner()
    planner.store.flush()
    previous = plans.use_planner(planner.afresh())
    mxdeconv.clear_cache()
    try:
        yield
    finally:
        plans.use_planner(previous)
        mxdeconv.clear_cache()


def test_a_hint_near_the_first_choice_leaves_the_first_plan(tmp_path, with_database):
    """A far record that ran oneDNN's first choice within HINT_START_RATIO of
    the hint: the first plan is oneDNN's first correct candidate, and the
    tuner times only it and the shortlist (the record's candidates), from
    NEAR_BEST_WAIT times later than a layer the database says nothing of."""
    candidate, first, choice = _hinted_near_first(tmp_path, with_database)
    assert choice.how.startswith("first correct candidate"), choice.how
    assert choice.tune_after_calls == 4 * plans.tuner.NEAR_BEST_WAIT
    assert not choice.confident and choice.tuner is not None
    assert choice.shortlist == {(tuple(candidate.variant), candidate.impl),
                                (tuple(first.variant), first.impl)}
    assert "among the 2 candidates" in choice.how


def test_a_kept_first_choice_is_rated_by_the_database_as_a_new_one_is(tmp_path,
                                                                     with_database):
    """A new process takes the first choice an earlier one kept (found by its
    index) and rates it by its variant and layouts as it rated oneDNN's first
    candidate: near the hint, it waits NEAR_BEST_WAIT times longer to be
    tuned (it was rated as unknown and tuned from its first call, which made
    a filled cache's first 300 U-Net training steps slower than an empty
    one's)."""
    _, _, choice = _hinted_near_first(tmp_path, with_database)
    assert choice.how.startswith("first correct candidate"), choice.how
    with _new_process():
        _forward()
        again = _choice()
        assert "kept from an earlier run" in again.how, again.how
        assert again.found_at == choice.found_at
        assert again.tune_after_calls == 4 * plans.tuner.NEAR_BEST_WAIT


def test_a_hint_naming_a_suspect_first_candidate_runs_it_made_once(
        tmp_path, with_database, monkeypatch):
    """oneDNN's first candidate is a known suspect (as brgemm deconvolutions
    with a fused bias are), and the hint names it: the first plan is the hint,
    checked like any other, made from the candidate the listing made (not
    enumerated again), where it used to be the next candidate that is no
    suspect, which the database did not rate (on a 1-D layer 1.9x slower)."""
    if _not_first() is None:
        pytest.skip("this CPU offers one candidate for the layer")
    first = _first_listed()
    monkeypatch.setattr(plans.core, "_known_suspect", lambda geom: _named_as(first))
    asked = []
    enumerate_ = _ops.forward_candidates

    def counted(*args, **kwargs):
        asked.append(kwargs.get("variant"))
        return enumerate_(*args, **kwargs)
    monkeypatch.setattr(plans.core._ops, "forward_candidates", counted)
    choice = _hinted(tmp_path, with_database, first)
    assert choice.how.startswith("hinted by"), choice.how
    assert (choice.impl, choice.found_at[0]) == (first.impl, tuple(first.variant))
    assert choice.from_database and not choice.confident
    assert asked[:1] == [None] and tuple(first.variant) not in [
        None if v is None else tuple(v) for v in asked[1:]], asked


def test_a_hinted_suspect_that_is_wrong_here_is_refused_before_its_first_result(
        tmp_path, with_database, monkeypatch):
    """The hinted suspect first candidate computes a wrong bias on this layer:
    the check refuses it with one warning before any result, and the layer
    runs the first correct candidate, as without a database."""
    if _not_first() is None:
        pytest.skip("this CPU offers one candidate for the layer")
    first = _first_listed()
    monkeypatch.setattr(plans.core, "_known_suspect", lambda geom: _named_as(first))
    _plant_wrong(monkeypatch, _named_as(first))
    was = plans.set_provisional(False)
    try:
        with pytest.warns(KernelDefectWarning):
            choice = _hinted(tmp_path, with_database, first)  # _forward checks the result
    finally:
        plans.set_provisional(was)
    assert choice.how.startswith("first correct candidate"), choice.how
    assert (choice.impl, choice.found_at[0]) != (first.impl, tuple(first.variant))


def test_a_hint_far_ahead_of_the_first_choice_starts_the_layer(tmp_path, with_database):
    """A far record that did not run oneDNN's first choice near its best (a
    hint that expects a gain of HINT_START_RATIO or more): the hint's
    candidate runs from the first call, checked like any other, and the
    tuner times it beside oneDNN's first choice, so a wrong hint is tuned
    away."""
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    first = _first_listed()
    choice = _hinted(tmp_path, with_database, candidate)
    assert choice.how.startswith("hinted by"), choice.how
    assert choice.impl == candidate.impl and choice.from_database
    assert not choice.confident and choice.tuner is not None
    assert choice.shortlist == {(tuple(candidate.variant), candidate.impl),
                                (tuple(first.variant), first.impl)}
    plans.finish_tuning()
    _forward(1)
    settled = _choice()
    assert settled.tuner is None and settled.measured
    assert {m.candidate.split(" (")[0] for m in settled.measured} <= {repr(candidate),
                                                                     repr(first)}, \
        settled.measured


def test_a_hinted_choice_is_kept_and_found_again_by_its_variant(tmp_path, with_database):
    """A hint's candidate is kept as the database's choice: a later process
    finds it by its variant and layouts, never by its index (its variant's,
    not the enumeration's, where another candidate may stand)."""
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    choice = _hinted(tmp_path, with_database, candidate)
    assert choice.from_database and choice.how.startswith("hinted by"), choice.how
    entry = plans.current_planner().store.get(kept._store_key(choice.key, GEOM))
    assert entry["from_database"] is True and entry["tuned"] is False
    assert entry["variant"] == list(candidate.variant)

    def candidates(variant=None):
        return _ops.forward_candidates(GEOM, "float32", False, False,
                                       **({} if variant is None else {"variant": variant}))
    again = kept._kept_choice(entry, GEOM)
    assert again.from_database and again.found_at == choice.found_at
    assert kept._rebuild(again, candidates) is not None
    # Found by nothing else: without its variant the entry is not taken, and
    # where its variant holds no such candidate, no index stands in for it.
    assert kept._kept_choice({k: v for k, v in entry.items() if k != "variant"}, GEOM) is None
    assert kept._kept_choice(dict(entry, from_database="yes"), GEOM) is None
    moved = dataclasses.replace(again, found_at=(again.found_at[0], "elsewhere"))
    assert kept._rebuild(moved, candidates) is None


def test_eager_tuning_from_a_kept_hint_checks_the_candidate_at_its_index(tmp_path,
                                                                         with_database,
                                                                         monkeypatch):
    """A hint kept by an earlier process keeps its variant's index, not the
    full enumeration's: a new process that tunes it at once (eager) must not
    take the candidate standing at that index in the enumeration as checked.
    That candidate here (oneDNN's first) computes a wrong bias and is timed
    fastest: the check refuses it with a warning, and the results are right.
    (The kept hint's index was passed as the checked one's, so the wrong
    candidate won unchecked, and was kept as tuned.)"""
    candidate = _not_first()
    if candidate is None:
        pytest.skip("this CPU offers one candidate for the layer")
    first = _first_listed()
    in_variant = _ops.forward_candidates(GEOM, "float32", False, False,
                                         variant=tuple(candidate.variant))
    if not any(c.impl == candidate.impl and c.index == first.index for c in in_variant):
        pytest.skip("the hint's index in its variant is not oneDNN's first candidate's")
    choice = _hinted(tmp_path, with_database, candidate)
    assert choice.from_database and not choice.confident, choice.how
    _plant_wrong(monkeypatch, _named_as(first))
    timed = plans.core._forward_cost
    monkeypatch.setattr(plans.core, "_forward_cost", lambda costs, plan, *args: 1e-6
                        if isinstance(plan, WrongPlan) else timed(costs, plan, *args))
    with _new_process():
        plans.current_planner().set_eager_tuning(True)
        with pytest.warns(KernelDefectWarning):
            _forward(1)  # compares the result with the NumPy path
        _forward(2)
        tuned = _choice()
        assert "kept from an earlier run" not in tuned.how and tuned.tuner is None, tuned.how
        assert any(m.verdict.startswith("rejected") for m in tuned.measured), tuned.measured


def _gemm_candidate():
    """A GEMM candidate for the layer that is not oneDNN's first (None: none)."""
    return next((c for c in _ops.forward_candidates(GEOM, "float32", False, False)
                 if plans.GEMM_MARK in c.impl and c.index != _first_listed().index
                 and not c.is_reference), None)


@pytest.fixture
def gemm_kernels(monkeypatch):
    """Sets whether the process made oneDNN's GEMM kernels at load."""
    def made(yes):
        monkeypatch.setattr(plans.core, "gemm_kernels_made", lambda: yes)
    return made


def test_a_gemm_plans_hint_starts_the_layer_where_the_gemm_kernels_were_made(
        tmp_path, with_database, gemm_kernels):
    """With oneDNN's GEMM kernels made at load (onednn.gemm_setup), a GEMM
    plan's first call costs no more than another's: its hint starts the
    layer as any hint does."""
    gemm = _gemm_candidate()
    if gemm is None or plans.GEMM_MARK in _first_listed().impl:
        pytest.skip("no GEMM candidate after a first choice that is none on this CPU")
    gemm_kernels(True)
    choice = _hinted(tmp_path, with_database, gemm)
    assert choice.how.startswith("hinted by"), choice.how
    assert choice.put_off is None and (choice.impl, choice.found_at[0]) == (
        gemm.impl, tuple(gemm.variant))


def test_a_gemm_plans_hint_leaves_a_first_choice_that_is_no_gemm_plan(tmp_path,
                                                                      with_database,
                                                                      gemm_kernels):
    """A hint to a GEMM plan (its first call in a process that did not make
    oneDNN's GEMM kernels at load makes them) leaves oneDNN's first choice
    running where that is no GEMM plan; the tuner still times the hint."""
    gemm_kernels(False)
    if plans.GEMM_MARK in _first_listed().impl:
        pytest.skip("oneDNN's first choice for the layer is a GEMM plan on this CPU")
    gemm = next((c for c in _ops.forward_candidates(GEOM, "float32", False, False)
                 if plans.GEMM_MARK in c.impl and c.index != _first_listed().index
                 and not c.is_reference), None)
    if gemm is None:
        pytest.skip("this CPU offers no GEMM candidate for the layer")
    choice = _hinted(tmp_path, with_database, gemm)
    assert choice.how.startswith("first correct candidate"), choice.how
    assert (tuple(gemm.variant), gemm.impl) in choice.shortlist


def test_a_gemm_plans_hint_replaces_the_first_choice_after_a_few_calls(tmp_path,
                                                                      with_database,
                                                                      gemm_kernels):
    """The GEMM plan's hint that did not start the layer is put off: after
    PUT_OFF_TUNE_AFTER calls one unit builds and checks it, and it replaces
    oneDNN's first choice, which stays on the shortlist the tuner times later
    (a wrong hint is tuned away); the result is right throughout."""
    gemm_kernels(False)
    first = _first_listed()
    if plans.GEMM_MARK in first.impl:
        pytest.skip("oneDNN's first choice for the layer is a GEMM plan on this CPU")
    gemm = next((c for c in _ops.forward_candidates(GEOM, "float32", False, False)
                 if plans.GEMM_MARK in c.impl and c.index != first.index
                 and not c.is_reference), None)
    if gemm is None:
        pytest.skip("this CPU offers no GEMM candidate for the layer")
    choice = _hinted(tmp_path, with_database, gemm)
    assert choice.put_off is not None and not choice.put_off.final, choice.how
    assert choice.put_off[:2] == (tuple(gemm.variant), gemm.impl)
    assert "first GEMM generates" in choice.how and choice.impl == first.impl
    assert choice.tune_after_calls == tuner.PUT_OFF_TUNE_AFTER
    assert choice.tuner.step(force=True)  # the put-off unit, paid at once
    replaced = _choice()
    assert (replaced.impl, replaced.found_at[0]) == (gemm.impl, tuple(gemm.variant))
    assert replaced.put_off is None and replaced.from_database and "put off" in replaced.how
    assert replaced.tune_after_calls == \
        plans.current_planner().tune_after_calls * tuner.NEAR_BEST_WAIT
    assert (tuple(first.variant), first.impl) in replaced.shortlist
    _forward(data_seed=1)
    assert plans.finish_tuning() >= 1 and plans.pending() == 0
    _forward(data_seed=2)


def test_a_gemm_plans_hint_displaces_only_a_gemm_first_choice():
    """Where oneDNN's first choice is a GEMM plan too, the GEMM's set-up is
    paid either way: the hint runs if it is expected faster, as any hint."""
    from mxdeconv.onednn.planner import tuner
    im2col = plan_db.Choice(("plain", "transposed", True, False, "mxdeconv:im2col+"),
                            "mxdeconv:im2col+dnnl_sgemm", False)
    gemm_first = (("any", "any", True, False, ""), "conv:any+x64:gemm:jit")
    jit_first = (("any", "any", True, False, ""), "conv:any+jit:avx512_core")
    unrated = plan_db.Prediction(im2col, False, "test")
    assert not tuner.hint_displaces(unrated, *jit_first)
    assert tuner.hint_put_off(unrated, *jit_first)
    assert tuner.hint_displaces(unrated, *jit_first, gemm_made=True)
    assert not tuner.hint_put_off(unrated, *jit_first, gemm_made=True)
    assert tuner.hint_displaces(unrated, *gemm_first)
    assert not tuner.hint_put_off(unrated, *gemm_first)
    near = plan_db.Prediction(im2col, False, "test", ratios={
        plan_db.Choice(gemm_first[0], gemm_first[1], False): 1.05})
    assert not tuner.hint_displaces(near, *gemm_first)   # within HINT_START_RATIO


@pytest.mark.parametrize("isa, families, expected", [
    ("avx512_core_amx", ["avx2", "avx512_core"], "avx512_core"),
    ("avx512_core_bf16", ["avx2", "avx512_core_amx"], "avx2"),
    ("avx512_core_bf16", ["avx512_core_amx"], "avx512_core_amx"),
    ("avx2", ["avx512_core", "avx512_core_amx"], "avx512_core"),
    ("sse41", ["sse41", "avx2"], "sse41"),
    ("unknown_isa", ["avx2"], None)])
def test_a_cpu_uses_the_closest_recorded_family(isa, families, expected):
    assert plan_db._family(isa, families) == expected


def test_the_shipped_database_says_how_it_was_made():
    database = plan_db.PlanDatabase()
    families = database.families()
    if not plan_db.SHIPPED.exists():
        pytest.skip("no database shipped with this checkout")
    assert families
    made = database.made
    for field in ("date", "machine", "onednn", "command", "held_out", "families"):
        assert field in made, field
    assert set(made["held_out"]) == set(families)


def test_a_records_features_are_its_geometrys():
    """The database keeps each record's point, made from its layer's parameters
    directly; for every shipped record it is the point of the layer's geometry."""
    if not plan_db.SHIPPED.exists():
        pytest.skip("no database shipped with this checkout")
    header, *lines = plan_db.SHIPPED.read_text().splitlines()
    groups = len(json.loads(header)["groups"])
    assert len(lines) == 2 * groups
    checked = 0
    for index, layers in zip(lines[:groups], lines[groups:]):
        points, layers = json.loads(index)["points"], json.loads(layers)
        assert len(points) == len(layers)
        for point, record in zip(points, layers):
            want = plan_db.features(plan_db.geometry_of_layer(record["layer"]),
                                    record["threads"])
            assert tuple(point) == want == plan_db._layer_features(record["layer"],
                                                                   record["threads"])
            checked += 1
    assert checked == json.loads(header)["made"]["records"]


def test_plan_db_off_by_environment():
    """MXDECONV_PLAN_DB=0 (this suite's conftest): no database is read."""
    assert plans.current_planner().database._path is None
    assert mxdeconv.onednn.planner.current_planner().database.families() == []


#: A layer whose input is wide enough that its deconvolution descriptors are
#: slow to make (defects.SLOW_DESCRIPTOR_WIDTH): its passes list direct
#: convolutions first.
WIDE_SHAPE = (1, 8, 2, 130)
WIDE_GEOM = infer_geometry(parse_params(PARAMS), WIDE_SHAPE)


def _wide_candidates(direct_first, variant=None):
    return [c for c in _ops.forward_candidates(
        WIDE_GEOM, "float32", False, False, direct_first=direct_first,
        **({} if variant is None else {"variant": variant})) if not c.is_reference]


def test_a_wide_layer_lists_each_direct_convolution_before_its_deconvolution():
    """The same candidates, each layout pair's direct twin moved before the
    deconvolution of that pair (no kernel assumed: on a CPU where oneDNN
    offers no direct convolution there is nothing to move)."""
    from mxdeconv.onednn.planner.defects import deconvolution_family, \
        slow_deconvolution_descriptors
    assert slow_deconvolution_descriptors(WIDE_GEOM) and not slow_deconvolution_descriptors(GEOM)
    usual, wide = _wide_candidates(False), _wide_candidates(True)
    assert sorted(map(repr, usual)) == sorted(map(repr, wide))
    if any(c.direct for c in wide):
        assert wide[0].direct and not deconvolution_family(wide[0].variant)
        firsts = {}
        for position, c in enumerate(wide):
            firsts.setdefault((c.family, c.weights, c.direct), position)
        for (family, weights, direct), position in firsts.items():
            if not direct and (family, weights, True) in firsts:
                assert firsts[(family, weights, True)] < position


def test_a_wide_layers_deconvolution_prediction_is_put_off_then_replaces_its_twin(
        tmp_path, with_database, monkeypatch):
    """On a wide layer a prediction of oneDNN's deconvolution does not start
    the layer: the first plan is a direct convolution (its descriptor a
    twentieth of the deconvolution's), and after PUT_OFF_TUNE_AFTER calls the
    prediction, checked and built from its variant alone, replaces it and is
    tuned among the shortlist as a hint is; the result is right throughout."""
    deconvolutions = [c for c in _wide_candidates(True) if not c.direct
                      and c.variant[4] == ""]
    if not deconvolutions or not any(c.direct for c in _wide_candidates(True)):
        pytest.skip("oneDNN offers no deconvolution and direct convolution pair here")
    predicted = deconvolutions[0]
    with_database(_database(tmp_path, [_record(predicted, shape=WIDE_SHAPE)]))
    rng = np.random.default_rng(5)
    data = rng.standard_normal(WIDE_SHAPE).astype(np.float32)
    weight = rng.standard_normal(WIDE_GEOM.weight_shape).astype(np.float32)
    bias = rng.standard_normal(WIDE_GEOM.bias_shape).astype(np.float32)
    want = deconv_numpy.forward(WIDE_GEOM, data.astype(np.float64), weight.astype(np.float64),
                                bias.astype(np.float64))

    def forward():
        np.testing.assert_allclose(nd.Deconvolution(data, weight, bias, **PARAMS).asnumpy(),
                                   want, rtol=1e-4, atol=1e-4)
        return plans.forward_plan(WIDE_GEOM, "float32", False, False).choice
    choice = forward()
    assert choice.found_at[0][4] != "" and choice.put_off[:2] == (tuple(predicted.variant),
                                                                 predicted.impl)
    assert not choice.confident and choice.tuner is not None and "standing in" in choice.how
    real, asked = _ops.forward_candidates, []

    def spy(*args, **kwargs):
        asked.append(kwargs.get("variant"))
        return real(*args, **kwargs)
    monkeypatch.setattr(_ops, "forward_candidates", spy)
    for _ in range(50 * tuner.PUT_OFF_TUNE_AFTER):  # its unit paid from the calls' share
        replaced = forward()
        if replaced.put_off is None:
            break
    assert asked and all(variant == tuple(predicted.variant) for variant in asked), asked
    assert (replaced.impl, replaced.found_at[0]) == (predicted.impl, tuple(predicted.variant))
    assert replaced.from_database and replaced.how.startswith("predicted by the plan database")
    assert replaced.tuner is not None and replaced.shortlist == choice.shortlist
    assert replaced.tune_after_calls == \
        plans.current_planner().tune_after_calls * tuner.NEAR_BEST_WAIT
    monkeypatch.setattr(_ops, "forward_candidates", real)
    assert plans.finish_tuning() == 1 and plans.pending() == 0
    tuned = forward()
    assert tuned.tuner is None

    # A new process on the filled cache: a kept deconvolution is put off too,
    # and once it runs it is final (it was tuned).
    with _new_process():
        again = forward()
        if tuned.found_at[0][4] == "":
            assert again.found_at[0][4] != "" and again.put_off is not None
            assert again.put_off.final and again.put_off.impl == tuned.impl
            plans.finish_tuning()
            final = forward()
            assert (final.impl, final.tuner, final.put_off) == (tuned.impl, None, None)
            assert final.how.startswith("kept from an earlier tuning"), final.how
        else:  # the tuner kept a direct convolution: nothing to put off
            assert again.impl == tuned.impl and again.put_off is None
