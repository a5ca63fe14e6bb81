"""The planner: the fastest correct plan, chosen once per machine, weights reused
in training while unchanged.

Timings are never asserted (machines are noisy); what is asserted is the rule:
the chosen candidate is the fastest *measured* one that agreed with the check,
and a training weight is reordered once per change of its values.  The plan
cache on disk has its own tests (test_plan_store.py).
"""
import functools
import os

import numpy as np
import pytest

import mxdeconv
from mxdeconv import _ops, autograd, nd
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans
from mxdeconv.onednn.planner import costs, kept, tuner
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import layer_arrays, planner_afresh
from reference import reference_backward, reference_forward

KW = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=32, no_bias=False)
TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def fresh_planner():
    """A fresh planner that tunes a new layer to the end at its first call:
    these tests assert the tuner's rules (test_tuning_on_calls.py covers
    tuning spread over the calls, which ends in the same choice)."""
    with planner_afresh(eager=True):
        yield


#: NDArrays (data, weight, bias) of the KW layer (tests/helpers.py).
_arrays = functools.partial(layer_arrays, batch=2, channels=32, size=6, num_filter=32,
                            as_nd=True)


def _geometry(x):
    return infer_geometry(parse_params(KW), x.shape)


def test_the_tuned_plan_is_the_fastest_measured_that_agreed():
    x, w, b = _arrays()
    plan = plans.forward_plan(_geometry(x), "float32", False, False)
    choice = plan.choice
    assert choice.how == "tuned" and choice.measured
    agreed = [m for m in choice.measured if m.verdict == "chosen: agreed"]
    assert len(agreed) == 1
    # Faster by the planner's ranking (several threads, and any candidate but
    # the first choice the tuner started from, must win by a margin).
    rank = lambda m: plans._ranking((m.seconds, m.threads),  # noqa: E731
                                    m.candidate.endswith(plans.FIRST_CHOICE))
    faster = [m for m in choice.measured if rank(m) < rank(agreed[0])]
    assert all(m.verdict.startswith("rejected") for m in faster)
    assert agreed[0].candidate.startswith(f"Candidate({plan.impl},")
    text = mxdeconv.explain(x, w, b, **KW)
    assert "tuned:" in text and "measured (end to end for this mode)" in text


def test_a_choice_whose_candidate_cannot_be_built_again_is_made_again(monkeypatch):
    """A choice in memory names its candidate by position; where that position
    no longer holds it when a thread needs the plan again (seen once in CI,
    on a backward pass chosen earlier in the run), the pass is planned again
    instead of being reported unavailable with the old choice's verdict."""
    x, w, b = _arrays()
    expected = nd.Deconvolution(x, w, b, **KW).asnumpy()
    og = nd.ones(expected.shape)
    grads = nd.Deconvolution_backward(og, x, w, b, **KW)
    mxdeconv.clear_cache()  # this thread's plans go; the choices stay
    real, moved = kept._rebuild, []

    def rebuild_once_missing(choice, candidates):
        if not moved:
            moved.append(choice)
            return None
        return real(choice, candidates)
    monkeypatch.setattr(kept, "_rebuild", rebuild_once_missing)
    with mxdeconv.use_impl("onednn"):
        np.testing.assert_allclose(nd.Deconvolution(x, w, b, **KW).asnumpy(), expected, **TOL)
        again = nd.Deconvolution_backward(og, x, w, b, **KW)
    assert moved
    for new, old in zip(again, grads):
        np.testing.assert_allclose(new.asnumpy(), old.asnumpy(), **TOL)


def test_tuning_off_takes_oneDNNs_first_correct_candidate():
    x, w, b = _arrays()
    geom = _geometry(x)
    previous = plans.set_tuning(False)
    try:
        plan = plans.forward_plan(geom, "float32", False, False)
    finally:
        plans.set_tuning(previous)
    check = kernel_check.forward_check(geom, "float32", False)
    expected = next(c for c in _ops.forward_candidates(geom, "float32", False, False)
                    if check(c.build()) is None)
    assert plan.impl == expected.impl and plan.choice.how == "first correct candidate"
    assert not plan.choice.measured
    with pytest.raises(TypeError, match="set_tuning: enabled must be a bool"):
        plans.set_tuning("no")


def test_public_tuning_switch_and_cache_path():
    previous = mxdeconv.set_tuning(False)
    try:
        assert mxdeconv.tuning_enabled() is False and plans.tuning() is False
    finally:
        assert mxdeconv.set_tuning(previous) is False
    assert mxdeconv.tuning_enabled() is previous
    with pytest.raises(TypeError, match="enabled must be a bool, got 0"):
        mxdeconv.set_tuning(0)
    # conftest points MXDECONV_CACHE_DIR at a folder of this test session
    assert mxdeconv.plan_cache_path() == os.path.join(os.environ["MXDECONV_CACHE_DIR"],
                                                      "plans-v2.json")


@pytest.mark.parametrize("training", [False, True])
def test_every_plan_the_planner_returns_is_correct(training):
    x, w, b = _arrays(1)
    with autograd.train_mode() if training else autograd.predict_mode():
        y = nd.Deconvolution(x, w, b, **KW)
    expected = reference_forward(x.asnumpy(), w.asnumpy(), b.asnumpy(), kernel=(3, 3),
                                 stride=(2, 2), dilate=(1, 1), pad_l=(1, 1), pad_r=(1, 1),
                                 num_group=1)
    np.testing.assert_allclose(y.asnumpy(), expected, **TOL)


def test_small_layers_may_run_on_one_thread_without_changing_the_callers_count():
    before = mxdeconv.get_num_threads()
    x = nd.ones((1, 8, 4, 4))
    w = nd.ones((8, 8, 3, 3))
    y = nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
    assert mxdeconv.get_num_threads() == before
    assert float(y.asnumpy().max()) == 72.0
    plan = plans.forward_plan(infer_geometry(parse_params(dict(kernel=(3, 3), num_filter=8)),
                                             (1, 8, 4, 4)), "float32", False, False)
    assert plan.threads in (1, before)
    assert any(m.threads == 1 for m in plan.choice.measured) or before == 1


@pytest.mark.parametrize("counts", [(2, 1), (1, 2)])
def test_backward_passes_planned_for_different_thread_counts_each_run_on_their_own(
        monkeypatch, counts):
    """The planner picks each pass's thread count apart; a pass must never run
    on more threads than its primitive was created for."""
    previous = mxdeconv.get_num_threads()
    mxdeconv.set_num_threads(2)
    options = iter([[counts[0]], [counts[1]]])  # backward weights is planned first
    monkeypatch.setattr(tuner, "_thread_options", lambda geom, tuning=True: next(options))
    # tune afresh
    monkeypatch.setattr(plans.current_planner(), "store", plans.plan_store.PlanStore(None))
    try:
        x, w, b = _arrays(seed=3)
        og = nd.array(np.random.default_rng(4).standard_normal((2, 32, 11, 11))
                      .astype(np.float32))
        with autograd.train_mode():
            dx, dw, db = nd.Deconvolution_backward(og, x, w, b, **KW)
        found = plans.backward_plans(_geometry(x), "float32")
        assert (found.weights.threads, found.data.threads) == counts
        assert mxdeconv.get_num_threads() == 2
        ref = reference_backward(og.asnumpy(), x.asnumpy(), w.asnumpy(), kernel=(3, 3),
                                 stride=(2, 2), dilate=(1, 1), pad_l=(1, 1), pad_r=(1, 1),
                                 num_group=1, with_bias=True)
        for got, expected in zip((dx, dw, db), ref):
            np.testing.assert_allclose(got.asnumpy(), expected, **TOL)
    finally:
        mxdeconv.set_num_threads(previous)


# -- training weights ----------------------------------------------------------------
def _step(x, w, b, params):
    with autograd.record():
        y = nd.Deconvolution(x, w, b, **params)
    y.backward(nd.ones(y.shape))
    return y


@pytest.fixture
def first_choices():
    """oneDNN's first choices, which take the weight blocked (the tuner may
    prefer plain weights in training, with no reorder at all)."""
    previous = plans.set_tuning(False)
    mxdeconv.clear_cache()
    yield
    plans.set_tuning(previous)
    mxdeconv.clear_cache()


def _blocked_weight_params():
    """A layer whose training plans take the weight in a blocked layout."""
    for channels in (32, 64, 128):
        params = dict(kernel=(3, 3), stride=(1, 1), num_filter=channels, no_bias=False)
        geom = infer_geometry(parse_params(params), (2, channels, 8, 8))
        forward = plans.forward_plan(geom, "float32", True, False)
        if not forward.weights.is_plain:
            return channels, params
    pytest.skip("the planner takes plain weights for every layer tried on this CPU")


def test_a_training_weight_is_reordered_once_per_change(first_choices):
    channels, params = _blocked_weight_params()
    rng = np.random.default_rng(3)
    x = nd.array(rng.standard_normal((2, channels, 8, 8)).astype(np.float32))
    w = nd.array((0.05 * rng.standard_normal((channels, channels, 3, 3))).astype(np.float32))
    b = nd.array(rng.standard_normal(channels).astype(np.float32))
    w.attach_grad()
    _step(x, w, b, params)
    mxdeconv.reset_reorder_counts()
    for _ in range(3):
        _step(x, w, b, params)
    assert mxdeconv.reorder_counts().get("weights", 0) == 0   # kept from the first step
    assert w.layout == "default"                              # optimizer code sees plain memory
    # An update through mxdeconv bumps the version: the next step reorders once.
    update = nd.array((0.05 * rng.standard_normal(w.shape)).astype(np.float32))
    w_values = w.asnumpy()
    nd.Deconvolution_backward(nd.ones((2, channels, 10, 10)), x, update, b,
                              grads=[None, w, None], req=["null", "write", "null"], **params)
    assert not np.array_equal(w.asnumpy(), w_values)
    mxdeconv.reset_reorder_counts()
    y = _step(x, w, b, params)
    assert mxdeconv.reorder_counts().get("weights", 0) == 1
    expected = reference_forward(x.asnumpy(), w.asnumpy(), b.asnumpy(), kernel=(3, 3),
                                 stride=(1, 1), dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0),
                                 num_group=1)
    np.testing.assert_allclose(y.asnumpy(), expected, **TOL)
    ref_dw = reference_backward(np.ones(y.shape), x.asnumpy(), w.asnumpy(), kernel=(3, 3),
                                stride=(1, 1), dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0),
                                num_group=1)[1]
    np.testing.assert_allclose(w.grad.asnumpy(), ref_dw, rtol=1e-4, atol=1e-3)


def test_an_exposed_training_weight_is_never_trusted(first_choices):
    channels, params = _blocked_weight_params()
    rng = np.random.default_rng(4)
    x = nd.array(rng.standard_normal((2, channels, 8, 8)).astype(np.float32))
    w = nd.array((0.05 * rng.standard_normal((channels, channels, 3, 3))).astype(np.float32))
    b = nd.array(rng.standard_normal(channels).astype(np.float32))
    view = np.asarray(w)  # outside code may write it any time
    with autograd.train_mode():
        nd.Deconvolution(x, w, b, **params)
        view *= 2
        y = nd.Deconvolution(x, w, b, **params)
    expected = reference_forward(x.asnumpy(), view, b.asnumpy(), kernel=(3, 3), stride=(1, 1),
                                 dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0), num_group=1)
    np.testing.assert_allclose(y.asnumpy(), expected, **TOL)


class _Timed:
    """A candidate (and its own plan) whose cost is a given time."""

    is_reference = False

    def __init__(self, index, seconds):
        self.index, self.seconds, self.impl = index, seconds, f"timed{index}"

    def build(self):
        return self

    def __repr__(self):
        return f"Candidate(timed{self.index})"


@pytest.mark.parametrize("others, chosen", [((0.98e-3, 0.99e-3), 0), ((0.98e-3, 0.9e-3), 2)],
                         ids=["within_the_margin", "clearly_faster"])
def test_a_tuner_keeps_its_first_choice_unless_another_is_clearly_faster(monkeypatch, others,
                                                                        chosen):
    """The first choice (index 0, checked) is refined like the fastest and
    replaced only by a candidate more than FIRST_CHOICE_MARGIN faster."""
    monkeypatch.setattr(tuner, "_thread_options", lambda geom, tuning=True: [1])
    candidates = [_Timed(0, 1e-3)] + [_Timed(i + 1, s) for i, s in enumerate(others)]
    x, *_ = _arrays()
    choice, plan = plans._to_the_end(plans._tuning_units(
        _geometry(x), lambda variant=None: iter(candidates), lambda plan: None,
        plans._Costs(), lambda plan: plan.seconds, agreed=[(0, 1)]))
    assert choice.index == chosen and plan is candidates[chosen]
    marked = [m.candidate for m in choice.measured if m.candidate.endswith(plans.FIRST_CHOICE)]
    assert marked == ["Candidate(timed0)" + plans.FIRST_CHOICE]


class _Hiccup(_Timed):
    """A candidate timed slow once (a hiccup during its refine run), at its
    real time otherwise."""

    def __init__(self, index, seconds, slow_run):
        super().__init__(index, seconds)
        self.runs, self.slow_run = 0, slow_run

    @property
    def cost(self):
        self.runs += 1
        return self.seconds * (3 if self.runs == self.slow_run else 1)


def test_a_hiccup_in_the_first_choices_refine_run_does_not_replace_it(monkeypatch):
    """The first choice (index 0, really the fastest) is timed slow in its
    refine run; the challenger, which looks faster then, must win again in a
    duel of turns, and does not."""
    monkeypatch.setattr(tuner, "_thread_options", lambda geom, tuning=True: [1])
    first, challenger = _Hiccup(0, 1e-3, slow_run=2), _Hiccup(1, 1.03e-3, slow_run=0)
    x, *_ = _arrays()
    choice, plan = plans._to_the_end(plans._tuning_units(
        _geometry(x), lambda variant=None: iter([first, challenger]), lambda plan: None,
        plans._Costs(), lambda plan: plan.cost, agreed=[(0, 1)]))
    assert choice.index == 0 and plan is first
    assert first.runs == 2 + plans.DUEL_ROUNDS and challenger.runs == 2 + plans.DUEL_ROUNDS


class _Lucky(_Timed):
    """A candidate timed 4% fast once (its refine run), at its real time otherwise."""

    def __init__(self, index, seconds, lucky_run):
        super().__init__(index, seconds)
        self.runs, self.lucky_run = 0, lucky_run

    @property
    def cost(self):
        self.runs += 1
        return self.seconds * (0.96 if self.runs == self.lucky_run else 1)


def test_a_near_tie_between_the_two_fastest_is_decided_in_turns(monkeypatch):
    """Two challengers beat the first choice; the slower of them (1.02 ms) is
    timed fast in its refine run and leads the faster one (1.00 ms) by less
    than the margin: the two are timed again in turns, and the really faster
    one is chosen.  The first choice (2 ms), beaten clearly in every run,
    is timed in the same rounds: a clear win is confirmed in turns too."""
    monkeypatch.setattr(tuner, "_thread_options", lambda geom, tuning=True: [1])
    first = _Lucky(0, 2e-3, lucky_run=0)
    faster, lucky = _Lucky(1, 1.00e-3, lucky_run=0), _Lucky(2, 1.02e-3, lucky_run=2)
    x, *_ = _arrays()
    choice, plan = plans._to_the_end(plans._tuning_units(
        _geometry(x), lambda variant=None: iter([first, faster, lucky]), lambda plan: None,
        plans._Costs(), lambda plan: plan.cost, agreed=[(0, 1)]))
    assert choice.index == 1 and plan is faster
    assert faster.runs == lucky.runs == first.runs == 2 + plans.DUEL_ROUNDS


class _Counted(_Timed):
    """A candidate that counts its runs, each at its real time."""

    def __init__(self, index, seconds):
        super().__init__(index, seconds)
        self.runs = 0

    @property
    def cost(self):
        self.runs += 1
        return self.seconds


def test_only_plausible_winners_are_refined_and_a_clear_win_is_confirmed(monkeypatch):
    """Of six candidates, those whose estimate is over REFINE_WITHIN the
    fastest's are not timed again (the first choice always is); the fastest
    beats every run of the first choice, and replaces it once the two, timed
    in turns, agree."""
    monkeypatch.setattr(tuner, "_thread_options", lambda geom, tuning=True: [1])
    first = _Counted(0, 1.6e-3)
    others = [_Counted(i, s) for i, s in enumerate((1.0e-3, 1.1e-3, 1.3e-3, 1.5e-3, 2e-3),
                                                   start=1)]
    x, *_ = _arrays()
    choice, plan = plans._to_the_end(plans._tuning_units(
        _geometry(x), lambda variant=None: iter([first] + others), lambda plan: None,
        plans._Costs(), lambda plan: plan.cost, agreed=[(0, 1)]))
    assert choice.index == 1 and plan is others[0]
    duelled = 2 + plans.DUEL_ROUNDS
    assert [c.runs for c in [first] + others] == [duelled, duelled, 2, 1, 1, 1]


class _Phases(_Timed):
    """A candidate on a machine whose speed changes in phases: its runs are
    slow while the shared phase flag says so, whoever runs them."""

    def __init__(self, index, seconds, phases):
        super().__init__(index, seconds)
        self.phases = phases

    @property
    def cost(self):
        return self.seconds * (1.4 if self.phases[0] else 1.0)


def test_a_slow_phase_of_the_machine_does_not_swap_the_first_choice(monkeypatch):
    """The first choice (1.00 ms) is estimated and refined in slow phases, a
    challenger that is really 2% slower in fast ones: by those runs the
    challenger wins by 27%.  Timed back to back in each round of the duel
    (one unit), the two meet the same phase, and the first choice stays."""
    monkeypatch.setattr(tuner, "_thread_options", lambda geom, tuning=True: [1])
    phases = [False]
    first, challenger = _Phases(0, 1.00e-3, phases), _Phases(1, 1.02e-3, phases)
    x, *_ = _arrays()
    units = plans._tuning_units(
        _geometry(x), lambda variant=None: iter([first, challenger]), lambda plan: None,
        plans._Costs(), lambda plan: plan.cost, agreed=[(0, 1)])
    # Units: estimate first, estimate challenger, refine challenger (the
    # faster estimate first), refine first, then the duel's rounds; the
    # machine is slow during the first choice's own units, and in every
    # other round of the duel.
    slow_units = {0, 3, 5}
    unit = 0
    while True:
        phases[0] = unit in slow_units
        try:
            next(units)
        except StopIteration as stop:
            choice, plan = stop.value
            break
        unit += 1
    assert choice.index == 0 and plan is first
    assert choice.measured[0].candidate == "Candidate(timed0)" + plans.FIRST_CHOICE


# -- the two backward passes planned together ------------------------------------------
class _Layouts:
    """A fake plan: its layouts are names, its reorders cost what _FakeCosts says."""

    def __init__(self, diff_dst, weights):
        self.diff_dst, self.weights, self.diff_src = diff_dst, weights, "plain"


class _FakeCosts:
    def run(self, plan):
        return 1.0

    def into(self, layout):
        return {"blocked": 0.25, "other": 0.5, "plain": 0.0}[layout]

    def out_of(self, layout):
        return 0.0


@pytest.mark.parametrize("diff_dst, shared, weights, forward, expected", [
    ("blocked", None, "blocked", None, 1.5),        # both reorders paid
    ("blocked", "blocked", "blocked", None, 1.25),  # out_grad's reorder serves both passes
    ("blocked", "other", "blocked", "blocked", 1.25),  # the forward's weight copy serves
    ("blocked", "blocked", "blocked", "blocked", 1.0),
    ("blocked", "blocked", "blocked", "other", 1.25),  # another layout: reordered again
])
def test_backward_data_counts_no_reorder_another_pass_of_the_step_pays(
        diff_dst, shared, weights, forward, expected):
    cost = plans._backward_data_cost(_FakeCosts(), _Layouts(diff_dst, weights), shared, forward)
    assert cost == expected


def test_backward_plans_see_the_training_forwards_weight_layout(monkeypatch):
    """Backward data is planned knowing the weight layout of this thread's
    training forward of the layer (the call keeps that reordered copy), and
    looking does not touch the primitive cache's counters."""
    params = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64, no_bias=False)
    geom = infer_geometry(parse_params(params), (2, 64, 8, 8))
    seen = []
    real = costs._backward_data_cost

    def spy(costs, plan, shared, forward_weights=None):
        seen.append(forward_weights)
        return real(costs, plan, shared, forward_weights)

    monkeypatch.setattr(costs, "_backward_data_cost", spy)
    threads = _ops.get_num_threads()
    with planner_afresh(tuning=True, eager=True, monkeypatch=monkeypatch):
        assert plans._training_forward_weights(geom, "float32", threads) is None
        forward = plans.forward_plan(geom, "float32", True, False)
        before = _ops.cache_info()
        assert plans._training_forward_weights(geom, "float32", threads) == forward.weights
        assert _ops.cache_info() == before
        plans.backward_plans(geom, "float32")
    assert seen and all(w == forward.weights for w in seen)


def test_the_installed_planner_is_the_one_the_module_and_the_compiled_calls_read():
    """use_planner installs a Planner: the module's functions act on it, and the
    attributes the compiled calls read (tuning_on, settlements) follow it."""
    fresh = plans.current_planner().afresh(store=plans.plan_store.PlanStore(None))
    fresh.set_tuning(not fresh.tuning_wanted)
    before = plans.settlements
    previous = plans.use_planner(fresh)
    try:
        assert plans.current_planner() is fresh
        assert plans.tuning_on == fresh.tuning_on == plans.tuning()
        assert plans.settlements != before  # prepared calls go back to the planner
        plans.set_tuning(not fresh.tuning_wanted)
        assert plans.tuning_on == fresh.tuning_on
    finally:
        assert plans.use_planner(previous) is fresh
    assert plans.current_planner() is previous and plans.tuning_on == previous.tuning_on
    with pytest.raises(TypeError):
        plans.use_planner(object())


def test_a_layers_passes_share_one_set_of_forward_hints():
    """A training step's forward and both backward passes enumerate against
    one ForwardHints (its descriptors made once: on some layers each costs
    more than the call); another layer gets its own."""
    x, w, b = _arrays()
    geom = _geometry(x)
    planner = plans.current_planner()
    assert planner.hints.peek((geom, "float32")) is None
    plans.forward_plan(geom, "float32", True, False)
    hints = planner.hints.peek((geom, "float32"))
    assert isinstance(hints, _ops.ForwardHints)
    plans.backward_plans(geom, "float32")
    assert planner.hints.peek((geom, "float32")) is hints
    other = infer_geometry(parse_params(KW), (1,) + x.shape[1:])
    plans.forward_plan(other, "float32", False, False)
    assert planner.hints.peek((other, "float32")) not in (None, hints)
