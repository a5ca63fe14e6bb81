"""The plan-time kernel check: a oneDNN plan that disagrees never reaches a result.

The realistic-layer suite shows the real defect is caught (oneDNN 3.2's
brgconv_strided bias); these tests pin the mechanism down independently of
which kernels this CPU has, by planting wrong candidates in front of oneDNN's.
"""
import threading
import warnings

import numpy as np
import pytest

import mxdeconv
from mxdeconv import KernelDefectWarning, _ops, nd
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import expected_k3s2p1, layer_arrays, planner_afresh
from planted import WrongCandidate, WrongPlan
from reference import reference_forward

PARAMS = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=24, no_bias=False)


@pytest.fixture(autouse=True, params=[True, False], ids=["tuned", "first-correct"])
def planner(request, monkeypatch):
    """Every test with the tuner on, tuning to the end at the first call
    (planted plans time as the fastest, so they are checked first), and off
    (oneDNN's order, planted plans first; also a first call's plan with the
    tuner on)."""
    real_run = plans._Costs.run
    monkeypatch.setattr(plans._Costs, "run", lambda self, plan: 1e-9 if isinstance(
        plan, WrongPlan) else real_run(self, plan))
    with planner_afresh(tuning=request.param, eager=True):
        yield request.param


def _plant(monkeypatch, how_many=1, all_wrong=False):
    real = _ops.forward_candidates

    def candidates(*args, **kwargs):
        found = list(real(*args, **kwargs))
        planted = [WrongCandidate(found[0]) for _ in range(how_many)]
        return iter(planted if all_wrong else planted + found)
    monkeypatch.setattr(_ops, "forward_candidates", candidates)


def test_a_disagreeing_plan_is_replaced_with_one_warning(monkeypatch):
    _plant(monkeypatch)
    data, weight, bias = layer_arrays(np.random.default_rng(0))
    with pytest.warns(KernelDefectWarning, match=r"planted:wrong_bias\) gave a wrong result"):
        out = nd.Deconvolution(data, weight, bias, **PARAMS)
    assert mxdeconv.last_impl() == "onednn"
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), rtol=1e-4,
                               atol=1e-4)
    text = mxdeconv.explain(data, weight, bias, **PARAMS)
    assert "rejected Candidate(planted:wrong_bias)" in text and "values wrong" in text
    with warnings.catch_warnings():  # once per kernel and geometry
        warnings.simplefilter("error", KernelDefectWarning)
        nd.Deconvolution(data, weight, bias, **PARAMS)


def test_no_agreeing_plan_sends_the_call_to_numpy(monkeypatch):
    _plant(monkeypatch, all_wrong=True)
    data, weight, bias = layer_arrays(np.random.default_rng(1))
    with pytest.warns(KernelDefectWarning):
        out = nd.Deconvolution(data, weight, bias, **PARAMS)
    assert mxdeconv.last_impl() == "numpy"
    np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias), rtol=1e-4,
                               atol=1e-4)
    text = mxdeconv.explain(data, weight, bias, **PARAMS)
    assert "numpy would run" in text and "no oneDNN plan" in text
    with mxdeconv.use_impl("onednn"), pytest.raises(mxdeconv.MXNetError, match="forced"):
        nd.Deconvolution(data, weight, bias, **PARAMS)


def test_the_check_runs_once_per_geometry_not_per_call_or_thread(monkeypatch):
    # no kept verdict
    monkeypatch.setattr(plans.current_planner(), "store", plans.plan_store.PlanStore(None))
    calls = []
    real = kernel_check.forward_check

    def counting(*args):
        check = real(*args)

        def counted(plan):
            calls.append(plan.impl)
            return check(plan)
        return counted
    monkeypatch.setattr(kernel_check, "forward_check", counting)
    data, weight, bias = layer_arrays(np.random.default_rng(2))
    for _ in range(3):
        nd.Deconvolution(data, weight, bias, **PARAMS)
    checked = len(calls)
    assert checked >= 1
    errors = []

    def other_thread():
        try:
            out = nd.Deconvolution(data, weight, bias, **PARAMS)
            np.testing.assert_allclose(out.asnumpy(), expected_k3s2p1(data, weight, bias),
                                       rtol=1e-4, atol=1e-4)
        except Exception as error:  # noqa: BLE001
            errors.append(error)
    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert not errors and len(calls) == checked  # the other thread reused the choice


@pytest.mark.parametrize("what", ["forward", "accumulate", "backward_data",
                                  "backward_weights"])
def test_every_check_accepts_oneDNNs_correct_plain_kernel(what):
    """The check itself is right: oneDNN's plain-layout gemm kernel agrees."""
    geom = infer_geometry(parse_params(PARAMS), (3, 20, 5, 5))
    if what in ("forward", "accumulate"):
        candidates = _ops.forward_candidates(geom, "float32", False, what == "accumulate")
        check = kernel_check.forward_check(geom, "float32", what == "accumulate")
    elif what == "backward_data":
        candidates = _ops.backward_data_candidates(geom, "float32")
        check = kernel_check.backward_data_check(geom, "float32")
    else:
        candidates = _ops.backward_weights_candidates(geom, "float32")
        check = kernel_check.backward_weights_check(geom, "float32")
    plan = _plain_gemm_plan(candidates)
    assert check(plan) is None, plan.impl


def _plain_gemm_plan(candidates):
    """oneDNN's gemm-based deconvolution on plain data layouts, which every
    x86-64 CPU has (asked for as "plain", or oneDNN's own choice where that is
    plain, as on SSE4.1: the enumeration lists a layout pair once)."""
    for candidate in candidates:
        if candidate.direct or not candidate.bias_fused or "gemm" not in candidate.impl:
            continue
        plan = candidate.build()
        data_layouts = [getattr(plan, role) for role in ("src", "dst", "diff_src", "diff_dst")
                        if hasattr(plan, role)]
        if all(layout.is_plain for layout in data_layouts):
            return plan
    raise AssertionError("oneDNN offered no gemm kernel on plain layouts")


def test_the_check_catches_a_bias_applied_twice():
    geom = infer_geometry(parse_params(PARAMS), (3, 20, 5, 5))
    check = kernel_check.forward_check(geom, "float32", False)
    real = next(iter(_ops.forward_candidates(geom, "float32", False, False)))
    reason = check(WrongPlan(real.build()))
    assert reason is not None and "values wrong" in reason


@pytest.mark.parametrize("layer", [
    ((2, 512, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256)),
    ((1, 21, 4, 4), dict(kernel=(64, 64), stride=(32, 32), pad=(16, 16), num_filter=21)),
], ids=["dcgan_512_256", "fcn32s_score"])
def test_the_check_refuses_every_brgconv_strided_plan_that_is_really_wrong(planner, layer):
    """The defect the check exists for (docs/kernel_check.rst): oneDNN 3.2's
    brgconv_strided adds a fused bias several times on these layers.  Each
    such candidate oneDNN offers here is run on random inputs and compared
    with the float64 scatter reference: every one that is wrong must be
    refused by the check, and every one it accepts must be right.  Which
    kernels exist depends on the CPU; on one without them there is nothing
    to compare (AVX-512 and AVX2 have them)."""
    if not planner:
        pytest.skip("the planner's mode does not matter here")
    shape, params = layer
    geom = infer_geometry(parse_params(dict(params, no_bias=False)), shape)
    found = [c for c in _ops.forward_candidates(geom, "float32", False, False)
             if "brgconv_strided" in c.impl]
    if not found:
        pytest.skip("oneDNN offers no brgconv_strided kernel for this layer on this CPU")
    rng = np.random.default_rng(7)
    data = rng.standard_normal(shape).astype(np.float32)
    weight = (0.05 * rng.standard_normal(geom.weight_shape)).astype(np.float32)
    bias = rng.standard_normal(geom.bias_shape).astype(np.float32)
    expected = reference_forward(data, weight, bias, kernel=params["kernel"],
                                 stride=params["stride"], dilate=(1, 1), pad_l=params["pad"],
                                 pad_r=params["pad"], num_group=1)
    check = kernel_check.forward_check(geom, "float32", False)
    verdicts = []
    for candidate in found:
        plan = candidate.build()
        error = float(np.abs(plan.run_plain(data, weight, bias) - expected).max())
        right = error <= 1e-3 * max(1.0, float(np.abs(expected).max()))
        accepted = check(plan) is None
        verdicts.append((repr(candidate), error, accepted))
        assert accepted == right, verdicts


def test_the_references_run_on_one_blas_thread_and_the_limit_is_lifted(monkeypatch, planner):
    """NumPy's BLAS threads and oneDNN's OpenMP team both spin between calls:
    the check's references run on one BLAS thread (a generator's first
    training step took twice as long), and the caller's BLAS threads are
    back afterwards."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]:
        pytest.skip("NumPy's BLAS is not visible to threadpoolctl here")

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info()
                if i["user_api"] == "blas"]
    before = blas_threads()
    seen = []
    real = kernel_check.deconv_numpy.forward

    def forward(*args, **kwargs):
        seen.append(blas_threads())
        return real(*args, **kwargs)
    monkeypatch.setattr(kernel_check.deconv_numpy, "forward", forward)
    monkeypatch.setattr(plans.current_planner(), "store", plans.plan_store.PlanStore(None))
    data, weight, bias = layer_arrays(np.random.default_rng(9))
    nd.Deconvolution(data, weight, bias, **PARAMS)
    assert seen and all(threads == [1] * len(threads) for threads in seen)
    assert blas_threads() == before


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_fraction_off_an_integer_result_is_refused(planner, dtype):
    """The check's sums are exact integers, so a right kernel returns integers
    (in bfloat16 too, after rounding).  oneDNN 3.2's jit_bf16 backward
    weights read uninitialised memory on 1x1 images and once returned 0.0028
    where 0 was expected, within the 0.5 allowance: a fraction is wrong."""
    if not planner:
        pytest.skip("the planner's mode does not matter here")
    geom = infer_geometry(parse_params(PARAMS), (3, 20, 5, 5))
    real = next(iter(_ops.forward_candidates(geom, dtype, False, False)), None)
    if real is None:
        pytest.skip(f"oneDNN has no {dtype} kernel for this layer on this CPU")

    class Nudged(WrongPlan):
        def run_plain(self, src, weights, bias, dst_init=None):
            out = self._plan.run_plain(src, weights, bias, dst_init).astype(np.float64)
            out.flat[7] += 0.0028
            return out
    from mxdeconv._core import dtypes
    check = kernel_check.forward_check(geom, dtypes.as_dtype(dtype), False)
    assert check(real.build()) is None
    assert "1 of" in check(Nudged(real.build()))
