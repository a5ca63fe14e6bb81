"""Provisional first calls: a big layer's first call runs oneDNN's first
candidate with its result checked on sampled elements, and the kernel check
runs on the layer's next call (planner.PROVISIONAL_MACS).

What is asserted is the rule: no kernel check before the first result, one on
the next call, a result that disagrees is refused and computed again (one
KernelDefectWarning), req='add' targets never receive an unchecked result,
and the cases that are never provisional.  Most tests lower the threshold to
run on a small layer; one runs a layer above the real threshold.
"""
import threading
import warnings

import numpy as np
import pytest

import mxdeconv
from mxdeconv import KernelDefectWarning, autograd, nd
from mxdeconv.onednn import kernel_check, result_check
from mxdeconv.onednn import planner as plans
from mxdeconv.onednn.planner import confirm
from mxdeconv.ops import _exec  # the running of plans, which onednn_impl calls at call time
from mxdeconv.semantics import deconv_numpy
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import expected_k3s2p1, layer_arrays, planner_afresh, run_threads
from reference import reference_backward

PARAMS = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=24, no_bias=False)
TOL = dict(rtol=1e-4, atol=1e-4)
REAL_THRESHOLD = plans.PROVISIONAL_MACS


@pytest.fixture(autouse=True)
def provisional(monkeypatch):
    """Tuning on its calls (the default), every layer big enough, nothing on
    disk, kernel checks counted by pass."""
    was_on = plans.set_provisional(True)
    monkeypatch.setattr(confirm, "PROVISIONAL_MACS", 0)
    checks = {"forward": 0, "backward data": 0, "backward weights": 0}
    for name, what in (("forward_check", "forward"), ("backward_data_check", "backward data"),
                       ("backward_weights_check", "backward weights")):
        real = getattr(kernel_check, name)

        def counted(*args, _real=real, _what=what, **kwargs):
            check = _real(*args, **kwargs)

            def run(plan):
                checks[_what] += 1
                return check(plan)
            return run
        monkeypatch.setattr(kernel_check, name, counted)
    with planner_afresh(tuning=True, eager=False, monkeypatch=monkeypatch):
        yield checks
    plans.set_provisional(was_on)


def _forward_choice(shape, training=False):
    """The forward choice in memory (not through _plan: that would confirm it)."""
    geom = infer_geometry(parse_params(PARAMS), shape)
    key = ("forward", geom, "float32", training, False, None,
           mxdeconv._ops.get_num_threads(), True)
    return plans.current_planner().choices.get(key)


def test_the_first_call_runs_unchecked_plans_and_the_next_one_checks(provisional):
    checks = provisional
    data, weight, bias = layer_arrays(0)
    out = nd.Deconvolution(data, weight, bias, **PARAMS)
    assert mxdeconv.last_impl() == "onednn"
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), **TOL)
    assert checks["forward"] == 0
    choice = _forward_choice(data.shape)
    assert choice.provisional and "provisional" in choice.describe()
    assert plans.pending() == 1
    out = nd.Deconvolution(data, weight, bias, **PARAMS)
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), **TOL)
    assert checks["forward"] == 1
    choice = _forward_choice(data.shape)
    assert not choice.provisional and "agreed" in choice.describe()
    assert choice.tuner is not None  # tuned on the later calls, as any first choice


def test_a_first_result_is_checked_where_it_lies(provisional):
    """The sampled check reads a blocked first result in place: nothing is
    reordered into the default layout before the caller reads it (recorded:
    a training weight stays default, so the check reads it as it is)."""
    data, weight, bias = layer_arrays(0)
    mxdeconv.reset_reorder_counts()
    with autograd.record():
        out = nd.Deconvolution(data, weight, bias, **PARAMS)
    assert _forward_choice(data.shape, training=True).provisional
    assert mxdeconv.reorder_counts().get("to_default", 0) == 0
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), **TOL)


def test_an_inference_weight_is_checked_from_the_bytes_it_had(provisional):
    """An inference call reorders the weight into the plan's layout and keeps
    it there; the check reads the plain bytes the weight had before the call,
    not a reorder back."""
    data, weight, bias = layer_arrays(3)
    weight = nd.array(weight)
    mxdeconv.reset_reorder_counts()
    out = nd.Deconvolution(data, weight, bias, **PARAMS)
    assert _forward_choice(data.shape).provisional
    assert mxdeconv.reorder_counts().get("to_default", 0) == 0
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight.asnumpy(), bias),
                               **TOL)


def test_finish_tuning_checks_provisional_passes(provisional):
    checks = provisional
    data, weight, bias = layer_arrays(1)
    nd.Deconvolution(data, weight, bias, **PARAMS)
    assert plans.pending() == 1 and checks["forward"] == 0
    assert plans.finish_tuning() >= 1
    assert checks["forward"] >= 1 and plans.pending() == 0
    assert not _forward_choice(data.shape).provisional


def _corrupt_first_results(monkeypatch, name):
    """Results of provisional plans get one more bias on output channel 5 (as
    oneDNN 3.2's brgconv_strided adds a fused bias) or, in backward, data_grad
    of input channel 3 doubled."""
    real = getattr(_exec, name)
    corrupted = []

    def wrong(*args):
        result = real(*args)
        if name == "deconv_forward":
            plan = args[0]
            if plan.choice.provisional:
                values = result._plain()
                values[:, 5] += args[3].asnumpy()[5]
                corrupted.append(plan.impl)
        else:
            plan = args[0]
            if plan.choice.provisional:
                result[0]._plain()[:, 3] *= 2
                corrupted.append(plan.impl)
        return result
    monkeypatch.setattr(_exec, name, wrong)
    return corrupted


def test_a_wrong_first_result_is_refused_and_computed_again(monkeypatch, provisional):
    corrupted = _corrupt_first_results(monkeypatch, "deconv_forward")
    data, weight, bias = layer_arrays(2)
    with pytest.warns(KernelDefectWarning, match=r"sampled on the call's own inputs"):
        out = nd.Deconvolution(data, weight, bias, **PARAMS)
    assert corrupted
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), **TOL)
    choice = _forward_choice(data.shape)
    assert not choice.provisional and provisional["forward"] >= 1
    # Its layer is chosen with the kernel check from then on, without that candidate.
    assert (choice.index, choice.threads) not in plans.current_planner().refused[choice.key]
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDefectWarning)
        again = nd.Deconvolution(data, weight, bias, **PARAMS)
    np.testing.assert_allclose(again.asnumpy(), out.asnumpy(), rtol=0, atol=0)


def _backward_reference(data, weight, bias, out_grad):
    return reference_backward(out_grad.astype(np.float64), data.astype(np.float64),
                              weight.astype(np.float64), (3, 3), (2, 2), (1, 1), (1, 1),
                              (1, 1), 1)


def test_a_wrong_first_gradient_is_refused_and_an_added_one_never_lands(monkeypatch,
                                                                      provisional):
    corrupted = _corrupt_first_results(monkeypatch, "deconv_backward")
    data, weight, bias = layer_arrays(3)
    out_grad = np.random.default_rng(4).standard_normal((3, 24, 9, 9)).astype(np.float32)
    grads = [nd.zeros(data.shape), nd.array(np.full(weight.shape, 0.5, np.float32)),
             nd.zeros(bias.shape)]
    with pytest.warns(KernelDefectWarning, match=r"backward data \(sampled"):
        nd.Deconvolution_backward(out_grad, data, weight, bias, req=["write", "add", "write"],
                                  grads=grads, **PARAMS)
    assert corrupted
    want = _backward_reference(data, weight, bias, out_grad)
    np.testing.assert_allclose(grads[0].asnumpy(), want[0], **TOL)
    np.testing.assert_allclose(grads[1].asnumpy(), 0.5 + want[1], **TOL)
    np.testing.assert_allclose(grads[2].asnumpy(), want[2], **TOL)


def test_a_training_step_is_right_while_plans_are_provisional(provisional):
    data, weight, bias = layer_arrays(5, as_nd=True)
    for array in (data, weight, bias):
        array.attach_grad()
    with autograd.record():
        out = nd.Deconvolution(data, weight, bias, **PARAMS)
    out.backward(nd.ones_like(out))
    want = _backward_reference(data.asnumpy(), weight.asnumpy(), bias.asnumpy(),
                               np.ones(out.shape, np.float32))
    for array, expected in zip((data, weight, bias), want):
        np.testing.assert_allclose(array.grad.asnumpy(), expected, **TOL)
    assert provisional == {"forward": 0, "backward data": 0, "backward weights": 0}


def test_never_provisional_below_the_threshold_off_or_with_add(monkeypatch, provisional):
    checks = provisional
    data, weight, bias = layer_arrays(6)
    geom = infer_geometry(parse_params(PARAMS), data.shape)
    monkeypatch.setattr(confirm, "PROVISIONAL_MACS", result_check.pass_macs(geom) + 1)
    nd.Deconvolution(data, weight, bias, **PARAMS)
    assert checks["forward"] == 1  # below the threshold: checked at once
    monkeypatch.setattr(confirm, "PROVISIONAL_MACS", 0)
    plans.set_provisional(False)
    nd.Deconvolution(data[:2], weight, bias, **PARAMS)
    assert checks["forward"] == 2  # switched off
    plans.set_provisional(True)
    out = nd.zeros((1, 24, 9, 9))
    nd.Deconvolution(data[:1], weight, bias, out=out, req="add", **PARAMS)
    assert checks["forward"] == 3  # req='add' is the primitive's sum post-op: checked


def test_the_real_threshold_on_a_big_layer(monkeypatch, provisional):
    """DCGAN's 256 -> 128 layer at batch 8 (268M multiply-adds a pass) is over
    PROVISIONAL_MACS: its first call is provisional, and right."""
    monkeypatch.setattr(confirm, "PROVISIONAL_MACS", REAL_THRESHOLD)
    params = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=128, no_bias=False)
    rng = np.random.default_rng(7)
    data = rng.standard_normal((8, 256, 8, 8)).astype(np.float32)
    weight = (0.05 * rng.standard_normal((256, 128, 4, 4))).astype(np.float32)
    bias = rng.standard_normal(128).astype(np.float32)
    geom = infer_geometry(parse_params(params), data.shape)
    assert result_check.pass_macs(geom) >= confirm.PROVISIONAL_MACS
    out = nd.Deconvolution(data, weight, bias, **params)
    assert provisional["forward"] == 0
    assert result_check.forward_result(geom, data, weight, bias, out.asnumpy()) is None
    reference = deconv_numpy.forward(geom, data.astype(np.float64), weight.astype(np.float64),
                                     bias.astype(np.float64))
    np.testing.assert_allclose(out.asnumpy(), reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, params", [
    ((2, 512, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256)),
    ((1, 21, 4, 4), dict(kernel=(64, 64), stride=(32, 32), pad=(16, 16), num_filter=21)),
    ((16, 1024, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=512))],
    ids=["dcgan-b2", "fcn32s", "1024to512"])
def test_the_sampled_check_sees_the_fused_bias_defect_wherever_the_kernel_check_does(
        shape, params):
    """oneDNN 3.2's brgconv_strided adds a fused bias several times on these
    layers (AVX-512 and AVX2 kernels, see docs/kernel_check.rst).  On user-like
    data (a bias of std 0.1) the result check refuses every fused-bias
    candidate the kernel check refuses, whichever this CPU offers."""
    params = dict(params, no_bias=False)
    geom = infer_geometry(parse_params(params), shape)
    rng = np.random.default_rng(11)
    data = rng.standard_normal(shape).astype(np.float32)
    weight = (0.02 * rng.standard_normal(geom.weight_shape)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(geom.bias_shape)).astype(np.float32)
    exact = kernel_check.forward_check(geom, "float32", False)
    seen = []
    for candidate in mxdeconv._ops.forward_candidates(geom, "float32", False, False):
        if not candidate.bias_fused or candidate.is_reference:
            continue
        plan = candidate.build()
        wrong = exact(plan) is not None
        sampled = result_check.forward_result(geom, data, weight, bias,
                                              plan.run_plain(data, weight, bias))
        seen.append((repr(candidate), wrong, sampled))
        assert sampled is None or wrong, seen  # no false alarm on a right kernel
        assert sampled is not None or not wrong, seen
    assert seen, "oneDNN offered no fused-bias candidate"


def test_threads_meeting_a_new_layer_together_all_get_right_results(provisional):
    """Four threads make a new layer's first calls at once, then more: every
    result is right, nothing raises, and the layer ends confirmed."""
    data, weight, bias = layer_arrays(8)
    expected = expected_k3s2p1(data, weight, bias)
    barrier = threading.Barrier(4)

    def worker(_):
        barrier.wait()
        return [nd.Deconvolution(data, weight, bias, **PARAMS).asnumpy() for _ in range(3)]
    results = [r for rs in run_threads(worker, 4) for r in rs]
    assert len(results) == 12
    for result in results:
        np.testing.assert_allclose(result, expected, **TOL)
    assert provisional["forward"] >= 1
    assert not _forward_choice(data.shape).provisional


# -- defects a sample could miss never reach a first call ------------------------------
#: Layers up to 4,096 output phases (k64 s64), each with a bias: name ->
#: (data shape, parameters).
BLIND_LAYERS = {
    "dcgan_b4": ((4, 512, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                      num_filter=256)),
    "fcn32s": ((1, 21, 4, 4), dict(kernel=(64, 64), stride=(32, 32), pad=(16, 16),
                                   num_filter=21)),
    "k64s64": ((1, 8, 3, 3), dict(kernel=(64, 64), stride=(64, 64), num_filter=8)),
    "stride_gt_kernel": ((2, 64, 5, 5), dict(kernel=(2, 2), stride=(3, 3), adj=(2, 1),
                                             num_filter=64)),
    "1d_k16s8": ((2, 128, 64), dict(kernel=(16,), stride=(8,), pad=(4,), num_filter=64)),
}


def _one_tap(geom, weight, tap):
    """``weight`` with every tap but ``tap`` zeroed."""
    only = np.zeros_like(weight)
    index = (slice(None), slice(None)) + tap
    only[index] = weight[index]
    return only


def _planted_forward(geom, data, weight, bias, out, defect):
    """``out`` (float32, written in place) with ``defect`` planted."""
    if defect == "dropped tap":  # the middle tap's contribution missing
        tap = tuple(k // 2 for k in geom.param.kernel)
        out -= deconv_numpy.forward(geom, data, _one_tap(geom, weight, tap), None)
    elif defect == "wrong border":
        out[..., -1] = out[..., -1] * np.float32(1.5) + np.float32(1)
    elif defect == "wrong bias":  # brgconv_strided's: the bias once more, one channel
        out[:, 5] += bias[5]
    elif defect == "garbage in untouched pixels":  # pixels no tap reaches, or the last one
        reached = deconv_numpy.forward(geom, np.ones_like(data), np.ones_like(weight), None)
        untouched = reached == 0
        if not untouched.any():
            untouched[..., -1] = True
        out[untouched] = np.float32(7.0)


def _planted_data_grad(geom, out_grad, weight, data_grad, defect):
    if defect == "dropped tap":
        tap = tuple(k // 2 for k in geom.param.kernel)
        data_grad -= deconv_numpy.backward(geom, out_grad, np.zeros(geom.data_shape, np.float32),
                                           _one_tap(geom, weight, tap))[0]
    elif defect == "wrong border":
        data_grad[..., -1] = data_grad[..., -1] * np.float32(1.5) + np.float32(1)


def _plant(monkeypatch, defect):
    """Provisional plans' results come back with ``defect`` (a defect the
    kernel check, with exact inputs, sees); returns the impls it was planted in."""
    planted = []
    real_forward, real_backward = _exec.deconv_forward, \
        _exec.deconv_backward

    def forward(plan, data, weight, bias, out, *rest):
        result = real_forward(plan, data, weight, bias, out, *rest)
        if plan.choice.provisional:
            _planted_forward(plan.choice.key[1], data.asnumpy(), weight.asnumpy(),
                             bias.asnumpy(), result._plain(), defect)
            planted.append(plan.impl)
        return result

    def backward(data_plan, weights_plan, out_grad, data, weight, *rest):
        result = real_backward(data_plan, weights_plan, out_grad, data, weight, *rest)
        if data_plan.choice.provisional and result[0] is not None:
            _planted_data_grad(data_plan.choice.key[1], out_grad.asnumpy(), weight.asnumpy(),
                               result[0]._plain(), defect)
            planted.append(data_plan.impl)
        return result
    monkeypatch.setattr(_exec, "deconv_forward", forward)
    monkeypatch.setattr(_exec, "deconv_backward", backward)
    return planted


def _blind_arrays(name):
    shape, params = BLIND_LAYERS[name]
    rng = np.random.default_rng(len(name))
    geom = infer_geometry(parse_params(dict(params, no_bias=False)), shape)
    fan_in = shape[1] * int(np.prod(params["kernel"]))
    data = rng.standard_normal(shape).astype(np.float32)
    weight = (rng.standard_normal(geom.weight_shape) / np.sqrt(fan_in)).astype(np.float32)
    bias = rng.standard_normal(geom.bias_shape).astype(np.float32)
    out_grad = rng.standard_normal(geom.out_shape).astype(np.float32)
    return geom, dict(params, no_bias=False), data, weight, bias, out_grad


@pytest.mark.parametrize("defect", ["dropped tap", "wrong border", "wrong bias",
                                    "garbage in untouched pixels"])
@pytest.mark.parametrize("name", list(BLIND_LAYERS))
def test_no_first_call_returns_a_planted_forward_defect(monkeypatch, provisional, name,
                                                        defect):
    """Where the sample sees every defect the result is refused and computed
    again; where it could miss one (result_check.blind_spot) the first call is
    never provisional: the kernel check runs first."""
    planted = _plant(monkeypatch, defect)
    geom, params, data, weight, bias, _ = _blind_arrays(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelDefectWarning)
        out = nd.Deconvolution(data, weight, bias, **params).asnumpy()
    want = deconv_numpy.forward(geom, data.astype(np.float64), weight.astype(np.float64),
                                bias.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert bool(planted) == (result_check.blind_spot(geom, "forward") is None)


@pytest.mark.parametrize("defect", ["dropped tap", "wrong border"])
@pytest.mark.parametrize("name", list(BLIND_LAYERS))
def test_no_first_call_returns_a_planted_data_gradient_defect(monkeypatch, provisional, name,
                                                              defect):
    planted = _plant(monkeypatch, defect)
    geom, params, data, weight, bias, out_grad = _blind_arrays(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelDefectWarning)
        data_grad = nd.Deconvolution_backward(out_grad, data, weight, bias, req="write",
                                              **params)[0].asnumpy()
    want = deconv_numpy.backward(geom, out_grad.astype(np.float64), data.astype(np.float64),
                                 weight.astype(np.float64))[0]
    np.testing.assert_allclose(data_grad, want, rtol=1e-4, atol=1e-4)
    assert bool(planted) == (result_check.blind_spot(geom, "backward_data") is None)


def test_no_lock_other_layers_need_is_held_while_a_check_runs(monkeypatch, provisional):
    """One layer's kernel check (its provisional choice confirmed on its second
    call) blocks; meanwhile another thread plans a new layer to the end."""
    blocked, release = threading.Event(), threading.Event()
    real = kernel_check.forward_check

    def slow(geom, *args, **kwargs):
        check = real(geom, *args, **kwargs)

        def run(plan):
            if geom.data_shape[0] == 3:  # layer_arrays' batch: the blocked layer
                blocked.set()
                release.wait(60)
            return check(plan)
        return run
    monkeypatch.setattr(kernel_check, "forward_check", slow)
    data, weight, bias = layer_arrays(11)
    nd.Deconvolution(data, weight, bias, **PARAMS)  # provisional: no check yet
    confirming = threading.Thread(target=nd.Deconvolution, args=(data, weight, bias),
                                  kwargs=PARAMS)
    confirming.start()
    try:
        assert blocked.wait(60)
        other, *_ = layer_arrays(12, batch=2)
        done = []
        planner = threading.Thread(target=lambda: done.append(
            nd.Deconvolution(other, weight, bias, **PARAMS).asnumpy()))
        planner.start()
        planner.join(30)
        assert done, "planning another layer waited for this layer's check"
    finally:
        release.set()
        confirming.join(60)


def _model_layers():
    import importlib.util
    from helpers import DATA
    spec = importlib.util.spec_from_file_location("model_layers", DATA / "model_layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", [layer["name"] for layer in _model_layers().LAYERS])
def test_every_model_layers_first_calls_agree_with_the_reference(provisional, name):
    """Every layer of tests/data/model_layers.py, each of its first calls
    provisional wherever the sample sees every defect (the threshold at 0):
    the first forward and the first backward return what the float64 NumPy
    path computes (under every kernel family: test_kernel_families reruns it)."""
    ml = _model_layers()
    layer = next(entry for entry in ml.LAYERS if entry["name"] == name)
    kwargs, arrays = ml.mxnet_kwargs(layer), ml.make_inputs(layer)
    data, weight, bias, out_grad = (arrays[k] for k in ("data", "weight", "bias", "out_grad"))
    geom = infer_geometry(parse_params(dict(kwargs)), data.shape)
    as64 = [a.astype(np.float64) for a in (data, weight, bias, out_grad)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelDefectWarning)  # a refused plan is fine
        out = nd.Deconvolution(data, weight, bias, **kwargs).asnumpy()
        grads = [g.asnumpy() for g in nd.Deconvolution_backward(out_grad, data, weight, bias,
                                                                  **kwargs)]
    np.testing.assert_allclose(out, deconv_numpy.forward(geom, *as64[:3]), rtol=1e-4,
                               atol=1e-4)
    want = deconv_numpy.backward(geom, as64[3], as64[0], as64[1])
    for got, expected in zip(grads, want):
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)
