"""Tuning on a layer's calls: the first call runs a checked plan at once, the
tuner times the candidates a unit at a time on the later calls (each checked
before its first use), and settles on the fastest that agreed.

What is asserted is the rule, never a time: the first call does no tuning, a
short run pays for none, every result is right while tuning goes on, a wrong
candidate never reaches a result, a failing tuner leaves the first choice,
and finish_tuning() settles every pending pass.
"""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import mxdeconv
from mxdeconv import KernelDefectWarning, _ops, autograd, nd
from mxdeconv.onednn import planner as plans
from mxdeconv.onednn.planner import tuner
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import expected_k3s2p1, layer_arrays, planner_afresh, run_threads
from planted import WrongCandidate, WrongPlan
from reference import reference_backward

PARAMS = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=24, no_bias=False)
TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def on_calls(monkeypatch):
    """The default mode (tuning on, spread over the calls), a planner that
    remembers nothing, and no plan cache on disk (so nothing kept is taken)."""
    with planner_afresh(tuning=True, eager=False, monkeypatch=monkeypatch):
        yield


@pytest.fixture
def a_unit_per_call(monkeypatch):
    """Every call pays for a unit at once (the share is unbounded)."""
    monkeypatch.setattr(tuner, "TUNE_SHARE", 1e12)


def _forward_choice(data):
    geom = infer_geometry(parse_params(PARAMS), data.shape)
    return plans.forward_plan(geom, "float32", False, False).choice


def _until_settled(call, limit=2000):
    """Calls ``call`` until no pass is pending; how many calls that took."""
    for calls in range(1, limit + 1):
        call()
        if plans.pending() == 0:
            return calls
    raise AssertionError(f"still tuning after {limit} calls")


def test_the_first_call_runs_a_checked_plan_and_tunes_nothing():
    data, weight, bias = layer_arrays()
    out = nd.Deconvolution(data, weight, bias, **PARAMS)
    assert mxdeconv.last_impl() == "onednn"
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), **TOL)
    choice = _forward_choice(data)
    assert choice.how == "first correct candidate; tuned on this layer's later calls"
    assert choice.tuner is not None and choice.tuner.steps == 0 and not choice.measured
    assert plans.pending() == 1
    assert "tuning on this layer's calls: 0 step(s)" in mxdeconv.explain(
        data, weight, bias, **PARAMS)


def test_a_short_run_pays_for_no_tuning():
    """Units are paid for before they run: a few calls earn less than one."""
    data, weight, bias = layer_arrays()
    for _ in range(3):
        nd.Deconvolution(data, weight, bias, **PARAMS)
    assert _forward_choice(data).tuner.steps == 0


def test_a_layer_is_tuned_only_after_its_first_calls(a_unit_per_call):
    """With tune_after_calls = N (MXDECONV_TUNE_AFTER, 100 by default), the
    first N calls earn nothing, however generous the share: no unit runs."""
    plans.current_planner().tune_after_calls = 6
    data, weight, bias = layer_arrays()
    for _ in range(6):
        nd.Deconvolution(data, weight, bias, **PARAMS)
    choice = _forward_choice(data)
    assert choice.tune_after_calls == 6 and choice.tuner.steps == 0
    for _ in range(3):
        nd.Deconvolution(data, weight, bias, **PARAMS)
    assert choice.tuner is None or choice.tuner.steps > 0 or plans.pending() == 0


def test_tuning_on_the_calls_settles_on_a_tuned_checked_plan(a_unit_per_call):
    data, weight, bias = layer_arrays()
    expected = expected_k3s2p1(data, weight, bias)

    def call():
        out = nd.Deconvolution(data, weight, bias, **PARAMS)
        assert mxdeconv.last_impl() == "onednn"
        np.testing.assert_allclose(out.asnumpy(), expected, **TOL)
    calls = _until_settled(call)
    choice = _forward_choice(data)
    assert choice.how == "tuned" and choice.tuner is None and choice.measured
    assert [m.verdict for m in choice.measured].count("chosen: agreed") == 1
    # One unit a call: a bounded number of calls (estimates on up to two
    # thread counts, the refined few, the checks).
    candidates = len(list(_ops.forward_candidates(
        infer_geometry(parse_params(PARAMS), data.shape), "float32", False, False)))
    assert calls <= 2 * candidates + plans.REFINE + len(choice.measured) + 2
    call()  # the settled plan, now on the prepared path
    assert plans.settled(plans.forward_plan(infer_geometry(parse_params(PARAMS), data.shape),
                                            "float32", False, False))


def test_backward_and_training_passes_tune_on_their_calls_and_stay_right(a_unit_per_call):
    data, weight, bias = layer_arrays(1)
    og = np.random.default_rng(2).standard_normal((3, 24, 9, 9)).astype(np.float32)
    want = reference_backward(og, data, weight, kernel=(3, 3), stride=(2, 2), dilate=(1, 1),
                              pad_l=(1, 1), pad_r=(1, 1), num_group=1, with_bias=True)
    x, w, b = nd.array(data), nd.array(weight), nd.array(bias)
    for array in (x, w, b):
        array.attach_grad()

    def step():
        with autograd.record():
            y = nd.Deconvolution(x, w, b, **PARAMS)
        y.backward(nd.array(og))
        for got, expected in zip((x.grad, w.grad, b.grad), want):
            np.testing.assert_allclose(got.asnumpy(), expected, **TOL)
    _until_settled(step)


def test_a_wrong_candidate_that_times_fastest_is_checked_before_any_use(monkeypatch,
                                                                         a_unit_per_call):
    """The first call takes the first real candidate; the planted one comes
    second, times fastest, and is checked (and refused) before it runs a call."""
    real = _ops.forward_candidates

    def candidates(*args, **kwargs):
        found = list(real(*args, **kwargs))
        return iter(found[:1] + [WrongCandidate(found[0])] + found[1:])
    monkeypatch.setattr(_ops, "forward_candidates", candidates)
    real_run = plans._Costs.run
    monkeypatch.setattr(plans._Costs, "run", lambda self, plan: 1e-9 if isinstance(
        plan, WrongPlan) else real_run(self, plan))
    data, weight, bias = layer_arrays(3)
    expected = expected_k3s2p1(data, weight, bias)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KernelDefectWarning)

        def call():
            out = nd.Deconvolution(data, weight, bias, **PARAMS)
            np.testing.assert_allclose(out.asnumpy(), expected, **TOL)
        nd.Deconvolution(data, weight, bias, **PARAMS)
        assert not [w for w in caught if issubclass(w.category, KernelDefectWarning)]
        _until_settled(call)
    defects = [w for w in caught if issubclass(w.category, KernelDefectWarning)]
    assert len(defects) == 1 and "planted:wrong_bias" in str(defects[0].message)
    choice = _forward_choice(data)
    assert choice.impl != "planted:wrong_bias"
    assert any(m.candidate == "Candidate(planted:wrong_bias)"
               and m.verdict.startswith("rejected") for m in choice.measured)


def test_a_failing_tuner_leaves_the_first_choice_and_the_call_succeeds(monkeypatch,
                                                                       a_unit_per_call):
    def broken(self, plan):
        raise RuntimeError("timer broke")
    monkeypatch.setattr(plans._Costs, "run", broken)
    data, weight, bias = layer_arrays(4)
    nd.Deconvolution(data, weight, bias, **PARAMS)
    first = _forward_choice(data)
    out = nd.Deconvolution(data, weight, bias, **PARAMS)  # runs the failing unit
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), **TOL)
    assert plans.pending() == 0
    choice = _forward_choice(data)
    assert choice.tuner is None and (choice.index, choice.impl) == (first.index, first.impl)
    assert "tuning stopped: RuntimeError: timer broke" in choice.how


def test_finish_tuning_settles_every_pending_pass():
    data, weight, bias = layer_arrays(5)
    x, w, b = nd.array(data), nd.array(weight), nd.array(bias)
    for array in (x, w, b):
        array.attach_grad()
    with autograd.record():
        y = nd.Deconvolution(x, w, b, **PARAMS)
    y.backward(nd.ones(y.shape))
    assert plans.pending() == 3   # forward (training), backward weights, backward data
    assert mxdeconv.finish_tuning() == 3
    assert plans.pending() == 0 and mxdeconv.finish_tuning() == 0
    with autograd.record():
        y = nd.Deconvolution(x, w, b, **PARAMS)
    np.testing.assert_allclose(y.asnumpy(), expected_k3s2p1(data, weight, bias), **TOL)
    geom = infer_geometry(parse_params(PARAMS), data.shape)
    assert plans.backward_plans(geom, "float32").weights.choice.how == "tuned"


def test_threads_calling_a_layer_while_it_is_tuned_all_get_right_results(a_unit_per_call):
    data, weight, bias = layer_arrays(6)
    expected = expected_k3s2p1(data, weight, bias)

    def worker(_):
        for _ in range(60):
            out = nd.Deconvolution(data, weight, bias, **PARAMS)
            np.testing.assert_allclose(out.asnumpy(), expected, **TOL)
    run_threads(worker, 3)


def test_a_new_process_takes_the_kept_first_choice_without_a_check(tmp_path):
    """A first choice is kept on disk (a short script never finishes tuning):
    the next process skips its check, then a tuned one replaces it."""
    code = textwrap.dedent("""
        import sys
        import mxdeconv
        from mxdeconv import nd
        from mxdeconv.onednn import kernel_check
        from mxdeconv.onednn import planner as plans
        checks = []
        real = kernel_check.forward_check

        def counting(*args):
            check = real(*args)
            return lambda plan: (checks.append(plan), check(plan))[1]
        kernel_check.forward_check = counting
        x, w = nd.ones((2, 8, 5, 5)), nd.ones((8, 4, 3, 3))
        nd.Deconvolution(x, w, kernel=(3, 3), num_filter=4).asnumpy()
        if sys.argv[1] == "finish":
            mxdeconv.finish_tuning()
        print(len(checks))
        """)
    env = dict(os.environ, MXDECONV_CACHE_DIR=str(tmp_path), MXDECONV_TUNE="1")

    def run(*args):
        done = subprocess.run([sys.executable, "-c", code, *args], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return int(done.stdout.split()[-1])

    def kept():
        entries = json.loads((tmp_path / "plans-v2.json").read_text())["entries"]
        return [entry["tuned"] for entry in entries.values()]
    assert run("stay") >= 1 and kept() == [False]
    run("finish")   # the kept first choice is not checked; the tuner checks its winner
    assert kept() == [True]
    assert run("stay") == 0 and kept() == [True]


@pytest.fixture
def full_paths(monkeypatch):
    """Counts the forward calls that took the full (validating, planning) path."""
    from mxdeconv.ops import full_path
    counts = {"forward": 0}
    real = full_path.full_forward

    def forward(*args):
        counts["forward"] += 1
        return real(*args)
    monkeypatch.setattr(full_path, "full_forward", forward)
    yield counts


def test_calls_between_units_take_the_prepared_path(full_paths):
    """While a layer is tuned, a prepared call serves the calls that pay for
    the next unit and only then sends one back to the planner: the full path
    (tens of microseconds, more than a tiny layer's call) is taken about once
    per unit, not on every call."""
    x, w = nd.ones((1, 8, 4, 4)), nd.ones((8, 8, 3, 3))
    nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
    tuner = _forward_choice_of(x, dict(kernel=(3, 3), num_filter=8))  # kept: it may settle
    for _ in range(3000):
        nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
    # The first call, one per unit, and one more when the choice settles.
    assert full_paths["forward"] <= tuner.steps + 3 < 3000


def _forward_choice_of(x, params):
    geom = infer_geometry(parse_params(params), x.shape)
    return plans.current_planner().choices.get(("forward", geom, "float32", False, False, None,
                               mxdeconv.get_num_threads(), True)).tuner


def test_finish_tuning_sends_prepared_calls_back_for_the_tuned_plan(full_paths):
    x, w = nd.ones((1, 8, 4, 4)), nd.ones((8, 8, 3, 3))
    for _ in range(3):
        nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
    assert plans.pending() == 1
    mxdeconv.finish_tuning()
    before = full_paths["forward"]
    for _ in range(5):
        y = nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
    assert full_paths["forward"] == before + 1   # once, for the tuned plan; then prepared
    assert float(y.asnumpy().max()) == 72.0


def test_calls_paid_ahead_and_not_served_are_refunded():
    """serve() pays a prepared call's calls ahead; a refund of the last ones
    takes back their credit first, then their part of the wait."""
    ran = tuner._Tuner(iter(()), lambda *_: None, wait_calls=5)
    ran.earn(0.01)                    # the call itself: one call of the wait
    ran.earn(0.01, 10)                # paid ahead: the 4 left of the wait, 6 earning
    assert ran._waiting == 0
    credit = ran._credit
    ran.refund(3)                     # the last 3 earned: credit back
    assert ran._credit == pytest.approx(credit - 3 * tuner.TUNE_SHARE * 0.01)
    assert ran._waiting == 0
    again = tuner._Tuner(iter(()), lambda *_: None, wait_calls=5)
    again.earn(0.01)
    again.earn(0.01, 10)
    again.refund(9)                   # the 6 earned, then 3 of the 4 waited
    assert again._waiting == 3 and again._credit == pytest.approx(0.0)


def test_a_settlement_elsewhere_runs_no_unit_the_calls_did_not_pay_for(full_paths):
    """A layer settling sends every prepared call back to the planner; those
    still tuned get back the calls paid ahead and not served, so a layer
    waiting for its tuning does not start it early."""
    x, w = nd.ones((1, 8, 4, 4)), nd.ones((8, 8, 3, 3))
    planner = plans.current_planner()
    previous = planner.tune_after_calls
    planner.tune_after_calls = 50
    try:
        for _ in range(3):
            nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
        waiting = _forward_choice_of(x, dict(kernel=(3, 3), num_filter=8))
        assert waiting is not None and waiting.steps == 0
        with planner.tuners_lock:   # as another layer's settling does
            planner.settlements += 1
            planner._published()
        nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
        assert waiting.steps == 0  # (paid ahead again since: by this call, anew)
    finally:
        planner.tune_after_calls = previous
