"""The backward-data plan of mxdeconv's own: im2col of diff_dst and one
dnnl_sgemm per group by MXNet's weight, over a chunk of images
(``onednn/_gemm.pxi``), every tensor in its default layout.

It is a planner candidate like oneDNN's (second, after oneDNN's first choice;
float32 only), so it is checked here as the backward-weights GEMM plan is:
against the float64 scatter reference on the same layers, on one thread and
on the caller's count, with chunks of every size down to one image (a
one-image chunk's GEMM writes diff_src itself; a longer one's result is
copied out); against the kernel check; and through the public call.
"""
import numpy as np
import pytest

import mxdeconv
from mxdeconv import _ops, autograd, nd
from mxdeconv.onednn import kernel_check, plan_db
from mxdeconv.onednn import planner as plans
from gemm_layers import LAYERS, gemm_layer
from helpers import assert_close, force_plan, run_threads
from reference import reference_backward

GEMM = (tuple(_ops.GEMM_PLAIN_VARIANT), _ops.GEMM_IMPL)


def _gemm_candidate(geom, dtype="float32"):
    """The GEMM plan's candidate, as the enumeration offers it."""
    found = [c for c in _ops.backward_data_candidates(geom, dtype)
             if (tuple(c.variant), c.impl) == GEMM]
    assert len(found) <= 1
    return found[0] if found else None


def _weight(geom, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(geom.weight_shape) / 8).astype(np.float32)


def _expected(geom, data, out_grad, weight):
    param = geom.param
    return reference_backward(out_grad, data, weight, param.kernel, param.stride, param.dilate,
                              geom.pad_l, geom.pad_r, param.num_group)[0]


def _image_bytes(geom):
    taps = int(np.prod(geom.param.kernel))
    return int(np.prod(geom.data_shape[2:])) * geom.out_shape[1] * taps * 4


@pytest.mark.parametrize("chunk", ["default", "two_images", "one_image"])
@pytest.mark.parametrize("threads", [1, None], ids=["1_thread", "callers_threads"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_gemm_plan_agrees_with_the_reference(name, threads, chunk, monkeypatch):
    geom, data, out_grad = gemm_layer(name)
    images = geom.data_shape[0]
    if chunk != "default":
        monkeypatch.setattr(_ops, "GEMM_COL_BYTES",
                            _image_bytes(geom) * (2 if chunk == "two_images" else 1))
    weight = _weight(geom)
    with _ops.using_threads(threads or _ops.get_num_threads()):
        plan = _gemm_candidate(geom).build()
        assert plan.chunk == {"default": images, "two_images": min(2, images),
                              "one_image": 1}[chunk]
        assert plan.diff_dst.is_plain and plan.weights.is_plain and plan.diff_src.is_plain
        got = plan.run_plain(out_grad, weight)
    assert_close(got, _expected(geom, data, out_grad, weight), "data gradient")


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_gemm_plan_passes_the_kernel_check(name):
    """The check every candidate meets before use (exact small-integer inputs)."""
    geom, *_ = gemm_layer(name)
    plan = _gemm_candidate(geom).build()
    assert kernel_check.backward_data_check(geom, "float32")(plan) is None


def test_the_gemm_plan_comes_second_in_float32_and_not_at_all_in_bfloat16():
    """oneDNN's first choice stays first (the provisional first call and
    tuning off take it); the bounded tuner reaches the GEMM plan second."""
    geom, *_ = gemm_layer("dilated_adj")
    candidates = [c for c in _ops.backward_data_candidates(geom, "float32")
                  if not c.is_reference]
    assert candidates[0].impl != _ops.GEMM_IMPL
    assert (tuple(candidates[1].variant), candidates[1].impl) == GEMM
    assert sum((tuple(c.variant), c.impl) == GEMM for c in candidates) == 1
    assert [c.index for c in candidates] == list(range(len(candidates)))
    try:
        bf16 = list(_ops.backward_data_candidates(geom, "bfloat16"))
    except Exception:   # no bfloat16 kernels on this CPU
        bf16 = []
    assert all(c.impl != _ops.GEMM_IMPL for c in bf16)


def test_a_kept_gemm_choice_is_found_again_by_its_variant():
    """The plan cache names a tuned choice by its variant and layouts
    (planner.kept._rebuild): the GEMM plan is found again, and nothing else
    is enumerated for its variant."""
    geom, *_ = gemm_layer("audio_1d")
    candidate = _gemm_candidate(geom)
    alone = list(_ops.backward_data_candidates(geom, "float32", candidate.variant))
    assert [(tuple(c.variant), c.impl) for c in alone] == [GEMM]
    choice = plans.Choice(candidate.index, _ops.get_num_threads(), candidate.impl, "tuned",
                          found_at=plans._found_at(candidate))
    rebuilt = plans._rebuild(choice, lambda variant=None: _ops.backward_data_candidates(
        geom, "float32", variant))
    assert rebuilt is not None and rebuilt.impl == _ops.GEMM_IMPL


@pytest.mark.parametrize("req", ["write", "add"])
def test_the_gemm_plan_runs_through_the_public_call(req):
    """Forced as the backward-data plan of a public call with autograd, it
    gives the reference's data gradient, and req='add' adds onto it."""
    geom, data, out_grad = gemm_layer("grouped")
    params = dict(LAYERS["grouped"][1], no_bias=False)
    weight = _weight(geom, 7)
    bias = np.random.default_rng(8).standard_normal(geom.bias_shape).astype(np.float32)
    expected = _expected(geom, data, out_grad, weight)
    mxdeconv.clear_cache()
    force_plan(("backward_data", geom, "float32", _ops.get_num_threads(), plans.tuning()),
               _gemm_candidate(geom))
    try:
        x, w, b = nd.array(data), nd.array(weight), nd.array(bias)
        start = np.full(geom.data_shape, 0.5, np.float32)
        x.attach_grad(req)
        w.attach_grad()
        b.attach_grad()
        if req == "add":
            x.grad[:] = start
        with autograd.record():
            y = nd.Deconvolution(x, w, b, **params)
        y.backward(nd.array(out_grad))
        assert mxdeconv.last_impl() == "onednn"
        assert_close(x.grad.asnumpy(), expected + (start if req == "add" else 0),
                     f"data gradient (req={req})")
    finally:
        mxdeconv.clear_cache()


def test_the_gemm_plan_is_not_offered_where_one_image_needs_too_much_workspace(monkeypatch):
    geom, *_ = gemm_layer("volume_3d")
    monkeypatch.setattr(_ops, "GEMM_MAX_IMAGE_BYTES", _image_bytes(geom))
    assert _gemm_candidate(geom) is not None
    monkeypatch.setattr(_ops, "GEMM_MAX_IMAGE_BYTES", _image_bytes(geom) - 1)
    assert _gemm_candidate(geom) is None
    assert any(not c.is_reference for c in _ops.backward_data_candidates(geom, "float32"))


def test_threads_running_gemm_plans_at_once_each_use_their_own_workspace(monkeypatch):
    """Four threads running the GEMM plans of two layers at once, in chunks
    of two images (the first chunk's result copied out, the last one's
    written in place), all get their reference's data gradients."""
    layers = {name: gemm_layer(name) for name in ("dcgan_512_256", "audio_1d")}
    weights = {name: _weight(geom) for name, (geom, *_) in layers.items()}
    expected = {name: _expected(geom, data, out_grad, weights[name])
                for name, (geom, data, out_grad) in layers.items()}
    monkeypatch.setattr(_ops, "GEMM_COL_BYTES",
                        2 * max(_image_bytes(geom) for geom, *_ in layers.values()))

    def worker(i):
        name = sorted(layers)[i % 2]
        geom, data, out_grad = layers[name]
        plan = _gemm_candidate(geom).build()
        for _ in range(3):
            assert_close(plan.run_plain(out_grad, weights[name]), expected[name],
                         f"{name} data gradient, thread {i}")
        return _ops.workspace_bytes()

    assert all(size > 0 for size in run_threads(worker, 4))


def test_a_backward_data_shortlist_names_the_gemm_plan_where_the_database_never_measured_it():
    """The shipped database may predate the GEMM backward data: a hinted
    layer's tuner times it on every backward-data pass whose records never
    name it, and leaves the database's word where they do."""
    from mxdeconv.onednn.planner import core
    other = (("any", "any", True, False, ""), "conv:any+jit:avx512_core")
    choice = plan_db.Choice(other[0], other[1], False)
    predates = plan_db.Prediction(choice, False, "test", named=frozenset({other}))
    measured = plan_db.Prediction(choice, False, "test", named=frozenset({other, GEMM}))
    shortlist = frozenset({other})
    assert core._with_later_forms(shortlist, predates, "backward_data") == {other, GEMM}
    assert core._with_later_forms(shortlist, measured, "backward_data") == {other}
    assert core._with_later_forms(shortlist, predates, "forward") == {other}


def test_a_prediction_names_what_its_group_measured():
    """``Prediction.named``: every (variant, implementation) the records of the
    layer's group name, near or chosen, that the shortlist rule reads."""
    database = plan_db.PlanDatabase()
    geom, *_ = gemm_layer("dcgan_512_256")
    isa = _ops.cpu_isa()
    prediction = database.predict(plan_db.LayerKey("backward_data", "float32", False, 2),
                                  geom, 2, isa)
    if prediction is None:
        pytest.skip(f"the shipped database holds no records this CPU ({isa}) can use")
    assert (tuple(prediction.choice.variant), prediction.choice.impl) in prediction.named
    assert all((tuple(c.variant), c.impl) in prediction.named for c in prediction.shortlist)


@pytest.mark.parametrize("plain", [False, True], ids=["transposed", "mxnet_layout"])
@pytest.mark.parametrize("reqs", [("write", "write", "write"), ("add", "add", "null"),
                                  ("write", "null", "write")])
def test_both_backward_gemm_plans_share_their_im2col_and_give_the_plans_results(
        plain, reqs, monkeypatch):
    """Forced as both backward plans of a public call (chunks of two images,
    the last one shorter), the two GEMMs share each chunk's im2col matrix:
    the gradients are the reference's, bit for bit those of the two plans
    run one after the other, whichever gradients are asked for."""
    name = "dcgan_512_256"
    geom, data, out_grad = gemm_layer(name)
    monkeypatch.setattr(_ops, "GEMM_COL_BYTES", 2 * _image_bytes(geom))
    params = dict(LAYERS[name][1], no_bias=False)
    weight = _weight(geom, 5)
    bias = np.random.default_rng(6).standard_normal(geom.bias_shape).astype(np.float32)
    data_plan = _gemm_candidate(geom).build()
    weights_candidate = [c for c in _ops.backward_weights_candidates(geom, "float32")
                         if c.impl == _ops.GEMM_IMPL and tuple(c.variant) == tuple(
                             _ops.GEMM_PLAIN_VARIANT if plain else _ops.GEMM_VARIANT)][0]
    alone = {"data": data_plan.run_plain(out_grad, weight)}
    alone["weight"], alone["bias"] = weights_candidate.build().run_plain(data, out_grad)
    param = geom.param
    expected = dict(zip(("data", "weight", "bias"), reference_backward(
        out_grad, data, weight, param.kernel, param.stride, param.dilate, geom.pad_l,
        geom.pad_r, param.num_group)))
    mxdeconv.clear_cache()
    threads = _ops.get_num_threads()
    forced = (force_plan(("backward_data", geom, "float32", threads, plans.tuning()),
                         _gemm_candidate(geom)),
              force_plan(("backward_weights", geom, "float32", threads, plans.tuning()),
                         weights_candidate))
    assert _ops.shares_im2col(*forced)
    try:
        arrays = {"data": nd.array(data), "weight": nd.array(weight), "bias": nd.array(bias)}
        start = {k: np.full(a.shape, 0.25, np.float32) for k, a in arrays.items()}
        for (k, a), req in zip(arrays.items(), reqs):
            a.attach_grad(req)
            if req == "add":
                a.grad[:] = start[k]
        with autograd.record():
            y = nd.Deconvolution(arrays["data"], arrays["weight"], arrays["bias"], **params)
        y.backward(nd.array(out_grad))
        assert mxdeconv.last_impl() == "onednn"
        for (k, a), req in zip(arrays.items(), reqs):
            if req == "null":
                continue
            got = a.grad.asnumpy() - (start[k] if req == "add" else 0)
            assert_close(got, expected[k], f"{k} gradient (req={req})")
            if req == "write":
                np.testing.assert_array_equal(a.grad.asnumpy(), alone[k], f"{k} gradient")
    finally:
        mxdeconv.clear_cache()


def test_only_gemm_plans_of_one_layer_and_team_are_paired():
    geom, *_ = gemm_layer("dcgan_512_256")
    other, *_ = gemm_layer("dilated_adj")
    data_plan = _gemm_candidate(geom).build()
    weights = [c for c in _ops.backward_weights_candidates(geom, "float32")
               if c.impl == _ops.GEMM_IMPL][0]
    onednn = [c for c in _ops.backward_weights_candidates(geom, "float32")
              if c.impl != _ops.GEMM_IMPL and not c.is_reference][0]
    other_weights = [c for c in _ops.backward_weights_candidates(other, "float32")
                     if c.impl == _ops.GEMM_IMPL][0]
    assert _ops.shares_im2col(data_plan, weights.build())
    assert not _ops.shares_im2col(data_plan, onednn.build())
    assert not _ops.shares_im2col(data_plan, other_weights.build())
    with _ops.using_threads(1):
        one_thread = weights.build()
    assert one_thread.threads == 1
    if _ops.get_num_threads() > 1:
        assert not _ops.shares_im2col(data_plan, one_thread)
