"""The backward-weights plan of mxdeconv's own: im2col of diff_dst and one
dnnl_sgemm per group over a chunk of images (``onednn/_gemm.pxi``), in two
orientations: diff_weights transposed (then reordered) or in MXNet's layout.

It is a planner candidate like oneDNN's (second and third, after oneDNN's
first choice; float32 only), so each orientation is checked here the way the
direct convolutions are: against the float64 scatter reference at realistic
channel counts, with a non-zero bias, 1-D to 3-D, strided, dilated, padded,
cropped by ``adj`` or ``target_shape``, grouped and depthwise, batch > 1, on
one thread and on the caller's count, with chunks of every size down to one
image; against the kernel check (exact small-integer inputs); and through the
public call.
"""
import numpy as np
import pytest

import mxdeconv
from mxdeconv import _ops, autograd, nd
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans
from gemm_layers import LAYERS, gemm_layer as _layer
from helpers import assert_close, force_plan, run_threads
from reference import reference_backward

def _gemm_candidate(geom, dtype="float32", plain=False):
    """The GEMM plan's candidate in one orientation, as the enumeration offers it."""
    variant = _ops.GEMM_PLAIN_VARIANT if plain else _ops.GEMM_VARIANT
    found = [c for c in _ops.backward_weights_candidates(geom, dtype)
             if c.impl == _ops.GEMM_IMPL and tuple(c.variant) == variant]
    assert len(found) <= 1
    return found[0] if found else None


ORIENTATIONS = pytest.mark.parametrize("plain", [False, True],
                                       ids=["transposed", "mxnet_layout"])


@ORIENTATIONS
@pytest.mark.parametrize("chunk_bytes", [None, 1], ids=["default_chunks", "one_image_chunks"])
@pytest.mark.parametrize("threads", [1, None], ids=["1_thread", "callers_threads"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_gemm_plan_agrees_with_the_reference(name, with_bias, threads, chunk_bytes, plain,
                                                 monkeypatch):
    if chunk_bytes is not None:
        monkeypatch.setattr(_ops, "GEMM_COL_BYTES", chunk_bytes)
    geom, data, out_grad = _layer(name, with_bias)
    param = geom.param
    weight = np.zeros(geom.weight_shape, np.float32)
    _, weight_grad, bias_grad = reference_backward(
        out_grad, data, weight, param.kernel, param.stride, param.dilate, geom.pad_l,
        geom.pad_r, param.num_group, with_bias=with_bias)
    transposed = _gemm_candidate(geom).build()
    if plain and transposed.diff_weights.is_plain:   # one input channel per group
        assert _gemm_candidate(geom, plain=True) is None   # the same plan: not offered twice
        return
    with _ops.using_threads(threads or _ops.get_num_threads()):
        plan = _gemm_candidate(geom, plain=plain).build()
        assert plan.chunk == (1 if chunk_bytes else plan.images)
        assert plan.diff_weights.is_plain == (plain or transposed.diff_weights.is_plain)
        got_weight, got_bias = plan.run_plain(data, out_grad)
    assert_close(got_weight, weight_grad, "weight gradient")
    if with_bias:
        assert_close(got_bias, bias_grad, "bias gradient")
    else:
        assert got_bias is None


@ORIENTATIONS
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_the_gemm_plan_passes_the_kernel_check(name, plain):
    """The check every candidate meets before use (exact small-integer inputs)."""
    geom, *_ = _layer(name)
    candidate = _gemm_candidate(geom, plain=plain) or _gemm_candidate(geom)  # depthwise: one
    plan = candidate.build()
    assert kernel_check.backward_weights_check(geom, "float32")(plan) is None


def test_the_gemm_plan_comes_second_in_float32_and_not_at_all_in_bfloat16():
    """oneDNN's first choice stays first (the provisional first call and
    tuning off take it); the bounded tuner reaches the GEMM plan second and
    third (transposed, then in MXNet's layout)."""
    geom, *_ = _layer("dilated_adj")
    candidates = [c for c in _ops.backward_weights_candidates(geom, "float32")
                  if not c.is_reference]
    assert candidates[0].impl != _ops.GEMM_IMPL
    assert [(c.impl, tuple(c.variant)) for c in candidates[1:3]] == [
        (_ops.GEMM_IMPL, _ops.GEMM_VARIANT), (_ops.GEMM_IMPL, _ops.GEMM_PLAIN_VARIANT)]
    assert [c.index for c in candidates] == list(range(len(candidates)))
    assert "bias" not in repr(candidates[1])     # it computes the bias gradient itself
    try:
        bf16 = list(_ops.backward_weights_candidates(geom, "bfloat16"))
    except Exception:   # no bfloat16 kernels on this CPU
        bf16 = []
    assert all(c.impl != _ops.GEMM_IMPL for c in bf16)


@ORIENTATIONS
def test_a_kept_gemm_choice_is_found_again_by_its_variant(plain):
    """The plan cache names a tuned choice by its variant and layouts
    (planner.kept._rebuild): the GEMM plan is found again in its orientation,
    and nothing else is enumerated for its variant."""
    geom, *_ = _layer("audio_1d")
    candidate = _gemm_candidate(geom, plain=plain)
    alone = list(_ops.backward_weights_candidates(geom, "float32", candidate.variant))
    assert [(c.impl, c.variant) for c in alone] == [(_ops.GEMM_IMPL, candidate.variant)]
    choice = plans.Choice(candidate.index, _ops.get_num_threads(), candidate.impl, "tuned",
                          found_at=plans._found_at(candidate))
    rebuilt = plans._rebuild(choice, lambda variant=None: _ops.backward_weights_candidates(
        geom, "float32", variant))
    assert rebuilt is not None and rebuilt.impl == _ops.GEMM_IMPL
    assert rebuilt.diff_weights.name == candidate.build().diff_weights.name


@ORIENTATIONS
@pytest.mark.parametrize("req", ["write", "add"])
def test_the_gemm_plan_runs_through_the_public_call(req, plain):
    """Forced as the backward-weights plan of a public call with autograd, it
    gives the reference's gradients: its diff_weights reaches the user in
    MXNet's layout, and req='add' adds onto the gradient there."""
    geom, data, out_grad = _layer("dilated_adj")
    param = geom.param
    params = dict(LAYERS["dilated_adj"][1], no_bias=False)
    rng = np.random.default_rng(7)
    weight = (rng.standard_normal(geom.weight_shape) / 8).astype(np.float32)
    bias = rng.standard_normal(geom.bias_shape).astype(np.float32)
    expected = reference_backward(out_grad, data, weight, param.kernel, param.stride,
                                  param.dilate, geom.pad_l, geom.pad_r, param.num_group)
    mxdeconv.clear_cache()
    force_plan(("backward_weights", geom, "float32", _ops.get_num_threads(), plans.tuning()),
               _gemm_candidate(geom, plain=plain))
    try:
        x, w, b = nd.array(data), nd.array(weight), nd.array(bias)
        start = np.full(geom.weight_shape, 0.5, np.float32)
        x.attach_grad()
        w.attach_grad(req)
        b.attach_grad()
        if req == "add":
            w.grad[:] = start
        with autograd.record():
            y = nd.Deconvolution(x, w, b, **params)
        y.backward(nd.array(out_grad))
        assert mxdeconv.last_impl() == "onednn"
        assert_close(w.grad.asnumpy(), expected[1] + (start if req == "add" else 0),
               f"weight gradient (req={req})")
        assert_close(b.grad.asnumpy(), expected[2], "bias gradient")
        assert_close(x.grad.asnumpy(), expected[0], "data gradient")
    finally:
        mxdeconv.clear_cache()


def test_clear_cache_returns_the_gemm_workspace():
    geom, data, out_grad = _layer("audio_1d")
    plan = _gemm_candidate(geom).build()
    plan.run_plain(data, out_grad)
    assert _ops.workspace_bytes() > 0
    mxdeconv.clear_cache()
    assert _ops.workspace_bytes() == 0


def test_the_gemm_plan_is_not_offered_where_one_image_needs_too_much_workspace(monkeypatch):
    """Its workspace holds at least one image's im2col matrix: a big 3-D layer
    would need gigabytes, so above GEMM_MAX_IMAGE_BYTES oneDNN's plans alone
    are candidates."""
    geom, *_ = _layer("volume_3d")
    one_image = 16 * (2 * 3 * 3) * (3 * 4 * 5) * 4   # out channels x taps x pixels x 4 bytes
    monkeypatch.setattr(_ops, "GEMM_MAX_IMAGE_BYTES", one_image)
    assert _gemm_candidate(geom) is not None
    monkeypatch.setattr(_ops, "GEMM_MAX_IMAGE_BYTES", one_image - 1)
    assert _gemm_candidate(geom) is None
    assert any(not c.is_reference for c in _ops.backward_weights_candidates(geom, "float32"))


def test_threads_running_gemm_plans_at_once_each_use_their_own_workspace(monkeypatch):
    """Plans and their workspace are per thread: four threads running GEMM
    plans of two layers at once (one-image chunks, so each run reuses its
    workspace many times) all get their reference's gradients."""
    layers = {name: _layer(name) for name in ("audio_1d", "dilated_adj")}
    expected = {}
    for name, (geom, data, out_grad) in layers.items():
        param = geom.param
        expected[name] = reference_backward(
            out_grad, data, np.zeros(geom.weight_shape, np.float32), param.kernel,
            param.stride, param.dilate, geom.pad_l, geom.pad_r, param.num_group)[1:]
    monkeypatch.setattr(_ops, "GEMM_COL_BYTES", 1)

    def worker(i):
        name = sorted(layers)[i % 2]
        geom, data, out_grad = layers[name]
        plan = _gemm_candidate(geom).build()
        for _ in range(3):
            weight_grad, bias_grad = plan.run_plain(data, out_grad)
            assert_close(weight_grad, expected[name][0], f"{name} weight gradient, thread {i}")
            assert_close(bias_grad, expected[name][1], f"{name} bias gradient, thread {i}")
        return _ops.workspace_bytes()

    sizes = run_threads(worker, 4)
    assert all(size > 0 for size in sizes)


def test_a_shortlist_naming_the_transposed_gemm_plan_names_both_orientations():
    """The shipped database predates the orientation in MXNet's layout: a
    hinted layer's tuner times it wherever the database shortlists the other."""
    from mxdeconv.onednn.planner import core
    transposed = (tuple(_ops.GEMM_VARIANT), _ops.GEMM_IMPL)
    plain = (tuple(_ops.GEMM_PLAIN_VARIANT), _ops.GEMM_IMPL)
    other = (("any", "any", True, False, ""), "conv:any+jit:avx512_core")
    assert core._with_later_forms(frozenset({other})) == {other}
    assert core._with_later_forms(frozenset({other, transposed})) == {other, transposed, plain}
