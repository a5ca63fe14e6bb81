"""The forward plan of mxdeconv's own for layers whose taps do not overlap
(kernel <= stride, no dilation): one dnnl_sgemm per image and group and a
scatter of its rows into dst, the bias added (``onednn/_gemm.pxi``).

It is a planner candidate like oneDNN's (after oneDNN's first choice; float32
without req=add's sum or an activation), so it is checked here as the other
plans of mxdeconv's own are: against the float64 scatter reference at
realistic channel counts (U-Net's and FCN's k2 s2 upsampling), with a
non-zero bias, 1-D to 3-D, taps smaller than the stride, crops by ``pad``,
pixels past the taps by ``adj``, grouped and depthwise, batch > 1, on one
thread and on the caller's count; against the kernel check; and through the
public call.
"""
import numpy as np
import pytest

import mxdeconv
from mxdeconv import _ops, autograd, nd
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import assert_close, force_plan, run_threads
from reference import reference_backward, reference_forward

LAYERS = {
    # name: (data shape, parameters); in every one the taps do not overlap
    "unet_k2_s2": ((2, 256, 12, 10), dict(kernel=(2, 2), stride=(2, 2), num_filter=128)),
    "gaps_pad_adj_grouped": ((2, 24, 5, 7), dict(kernel=(2, 3), stride=(3, 3), pad=(1, 2),
                                                 adj=(2, 1), num_filter=12, num_group=3)),
    "audio_1d_k4_s4": ((3, 64, 40), dict(kernel=(4,), stride=(4,), pad=(3,), adj=(2,),
                                         num_filter=32)),
    "volume_3d": ((2, 32, 3, 4, 5), dict(kernel=(2, 2, 2), stride=(2, 3, 2), pad=(0, 1, 1),
                                         num_filter=16)),
    "depthwise_1x1_s2": ((2, 64, 6, 6), dict(kernel=(1, 1), stride=(2, 2), adj=(1, 1),
                                             num_filter=64, num_group=64)),
}


def _layer(name, with_bias=True):
    shape, params = LAYERS[name]
    geom = infer_geometry(parse_params(dict(params, no_bias=not with_bias)), shape)
    rng = np.random.default_rng(len(name))
    data = rng.standard_normal(geom.data_shape).astype(np.float32)
    weight = (rng.standard_normal(geom.weight_shape) / 8).astype(np.float32)
    bias = rng.standard_normal(geom.out_shape[1]).astype(np.float32) if with_bias else None
    return geom, data, weight, bias


def _expected(geom, data, weight, bias):
    param = geom.param
    return reference_forward(data, weight, bias, param.kernel, param.stride, param.dilate,
                             geom.pad_l, geom.pad_r, param.num_group)


def _gemm(geom, dtype="float32", **kwargs):
    found = [c for c in _ops.forward_candidates(geom, dtype, True, False, **kwargs)
             if c.impl == _ops.GEMM_FORWARD_IMPL]
    assert len(found) <= 1
    return found[0] if found else None


@pytest.mark.parametrize("threads", [1, None], ids=["1_thread", "callers_threads"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_gemm_forward_agrees_with_the_reference(name, with_bias, threads):
    geom, data, weight, bias = _layer(name, with_bias)
    with _ops.using_threads(threads or _ops.get_num_threads()):
        plan = _gemm(geom).build()
        got = plan.run_plain(data, weight, bias)
    assert_close(got, _expected(geom, data, weight, bias), name)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_gemm_forward_passes_the_kernel_check(name):
    """The check every candidate meets before use (exact small-integer inputs)."""
    geom, *_ = _layer(name)
    assert kernel_check.forward_check(geom, "float32", False)(_gemm(geom).build()) is None


def test_the_gemm_forward_comes_after_onednns_first_choice_and_takes_no_reorder():
    """oneDNN's first choice stays first; the bounded tuner reaches the GEMM
    plan next.  It takes every tensor in the default layout, the weight in
    MXNet's, so a call reorders nothing."""
    geom, *_ = _layer("unet_k2_s2")
    candidates = [c for c in _ops.forward_candidates(geom, "float32", False, False)
                  if not c.is_reference]
    assert candidates[0].impl != _ops.GEMM_FORWARD_IMPL
    assert candidates[1].impl == _ops.GEMM_FORWARD_IMPL
    assert [c.index for c in candidates] == list(range(len(candidates)))
    plan = candidates[1].build()
    assert all(layout.is_plain for layout in (plan.src, plan.weights, plan.bias, plan.dst))


@pytest.mark.parametrize("case", ["overlapping taps", "dilation", "req=add", "activation",
                                  "bfloat16"])
def test_the_gemm_forward_is_offered_only_where_its_taps_do_not_overlap(case):
    """Not where a pixel may get two taps (kernel > stride, or dilated taps),
    nor for req=add's sum, an activation, or bfloat16 (dnnl_sgemm is float32)."""
    params = dict(LAYERS["unet_k2_s2"][1], no_bias=False)
    if case == "overlapping taps":
        params.update(kernel=(3, 2))
    if case == "dilation":
        params.update(dilate=(2, 1), kernel=(1, 2))
    geom = infer_geometry(parse_params(params), (2, 64, 6, 6))
    if case == "req=add":
        candidates = _ops.forward_candidates(geom, "float32", True, True)
    elif case == "activation":
        candidates = _ops.forward_candidates(geom, "float32", True, False, "relu")
    elif case == "bfloat16":
        try:
            candidates = list(_ops.forward_candidates(geom, "bfloat16", True, False))
        except mxdeconv.MXNetError:   # no bfloat16 kernels on this CPU
            candidates = []
    else:
        candidates = _ops.forward_candidates(geom, "float32", True, False)
    assert all(c.impl != _ops.GEMM_FORWARD_IMPL for c in candidates)
    assert _ops.gemm_forward_candidate(geom, "float32") is None or case in (
        "req=add", "activation", "bfloat16")


def test_the_gemm_forward_is_not_offered_where_one_image_needs_too_much_workspace(
        monkeypatch):
    geom, *_ = _layer("volume_3d")
    one_image = 16 * 8 * (3 * 4 * 5) * 4   # out channels x taps x input pixels x 4 bytes
    monkeypatch.setattr(_ops, "GEMM_MAX_IMAGE_BYTES", one_image)
    assert _gemm(geom) is not None
    monkeypatch.setattr(_ops, "GEMM_MAX_IMAGE_BYTES", one_image - 1)
    assert _gemm(geom) is None


def test_a_kept_gemm_forward_choice_is_found_again_by_its_variant():
    geom, *_ = _layer("audio_1d_k4_s4")
    candidate = _gemm(geom)

    def candidates(variant=None):
        return _ops.forward_candidates(geom, "float32", True, False, variant=variant)

    assert [c.impl for c in candidates(candidate.variant)] == [_ops.GEMM_FORWARD_IMPL]
    choice = plans.Choice(candidate.index, _ops.get_num_threads(), candidate.impl, "tuned",
                          found_at=plans._found_at(candidate))
    rebuilt = plans._rebuild(choice, candidates)
    assert rebuilt is not None and rebuilt.impl == _ops.GEMM_FORWARD_IMPL


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_the_gemm_forward_runs_through_the_public_call(training):
    """Forced as the forward plan of a public call, it gives the reference's
    result; with autograd the backward (oneDNN's plans) follows it."""
    name = "gaps_pad_adj_grouped"
    geom, data, weight, bias = _layer(name)
    params = dict(LAYERS[name][1], no_bias=False)
    mxdeconv.clear_cache()
    force_plan(("forward", geom, "float32", training, False, None, _ops.get_num_threads(),
                plans.tuning()), _gemm(geom))
    try:
        x, w, b = nd.array(data), nd.array(weight), nd.array(bias)
        x.attach_grad()
        out_grad = np.random.default_rng(3).standard_normal(geom.out_shape).astype(np.float32)
        if training:
            with autograd.record():
                y = nd.Deconvolution(x, w, b, **params)
            y.backward(nd.array(out_grad))
            param = geom.param
            expected_grad = reference_backward(out_grad, data, weight, param.kernel,
                                               param.stride, param.dilate, geom.pad_l,
                                               geom.pad_r, param.num_group)[0]
            assert_close(x.grad.asnumpy(), expected_grad, "data gradient")
        else:
            y = nd.Deconvolution(x, w, b, **params)
        assert mxdeconv.last_impl() == "onednn"
        assert _ops.GEMM_FORWARD_IMPL in mxdeconv.explain(x, w, b, train=training, **params)
        assert_close(y.asnumpy(), _expected(geom, data, weight, bias), "forward")
    finally:
        mxdeconv.clear_cache()


def test_threads_running_gemm_forwards_at_once_each_use_their_own_workspace():
    layers = {name: _layer(name) for name in ("unet_k2_s2", "audio_1d_k4_s4")}
    expected = {name: _expected(*arrays) for name, arrays in layers.items()}

    def worker(i):
        name = sorted(layers)[i % 2]
        geom, data, weight, bias = layers[name]
        plan = _gemm(geom).build()
        for _ in range(3):
            assert_close(plan.run_plain(data, weight, bias), expected[name], f"{name}, thread {i}")
        return _ops.workspace_bytes()

    assert all(size > 0 for size in run_threads(worker, 4))
