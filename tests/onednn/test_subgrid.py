"""Plans onto the output sub-grid of a layer whose stride and dilation share a
factor (``semantics/subgrid.py``, ``onednn/_subgrid.pxi``): the forward and
the backward weights of the sub-grid's layer run by oneDNN, mxdeconv's loops
moving pixels between the sub-grid and the full tensor.

They are planner candidates like oneDNN's (after oneDNN's first choice;
float32, forward without req=add's sum or an activation), so they are checked
here as the GEMM plan is: against the float64 scatter reference at realistic
channel counts, with a non-zero bias, 1-D to 3-D, the sub-grid starting past
pixel 0, steps that differ by axis, an axis without a sub-grid, channels that
fill no whole block, grouped and depthwise, batch > 1, on one thread and on
the caller's count; against the kernel check; and through the public call.
"""
import math

import numpy as np
import pytest

import mxdeconv
from mxdeconv import _ops, autograd, nd
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from mxdeconv.semantics.subgrid import subgrid_of
from helpers import assert_close, force_plan, run_threads
from reference import reference_backward, reference_forward

LAYERS = {
    # name: (data shape, parameters); every one has a sub-grid
    "dilated_k3_s2_d2": ((2, 64, 16, 16), dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2),
                                              pad=(2, 2), adj=(1, 1), num_filter=64)),
    "odd_pad_first_1": ((2, 64, 9, 7), dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2),
                                            pad=(1, 3), num_filter=96)),
    "steps_differ": ((2, 20, 7, 9), dict(kernel=(3, 2), stride=(4, 2), dilate=(2, 2),
                                         pad=(1, 0), adj=(1, 1), num_filter=12)),
    "padded_blocks": ((2, 64, 7, 9), dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2),
                                          pad=(1, 2), num_filter=12)),
    "one_axis_only": ((2, 32, 6, 8), dict(kernel=(3, 3), stride=(2, 2), dilate=(1, 2),
                                          pad=(1, 2), adj=(1, 0), num_filter=48)),
    "audio_1d_s3_d3": ((3, 128, 40), dict(kernel=(5,), stride=(3,), dilate=(3,), pad=(4,),
                                          num_filter=64)),
    "volume_3d_grouped": ((2, 32, 4, 5, 6), dict(kernel=(2, 3, 2), stride=(2, 2, 1),
                                                 dilate=(2, 4, 3), pad=(1, 3, 1),
                                                 num_filter=16, num_group=2)),
    "depthwise": ((2, 64, 9, 9), dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2),
                                      pad=(1, 1), num_filter=64, num_group=64)),
    "adj_past_the_taps": ((2, 16, 5, 5), dict(kernel=(2, 2), stride=(3, 3), dilate=(3, 3),
                                              pad=(0, 0), adj=(2, 2), num_filter=16)),
}


def _layer(name, with_bias=True):
    shape, params = LAYERS[name]
    geom = infer_geometry(parse_params(dict(params, no_bias=not with_bias)), shape)
    rng = np.random.default_rng(len(name))
    data = rng.standard_normal(geom.data_shape).astype(np.float32)
    weight = (rng.standard_normal(geom.weight_shape) / 8).astype(np.float32)
    bias = rng.standard_normal(geom.out_shape[1]).astype(np.float32) if with_bias else None
    out_grad = rng.standard_normal(geom.out_shape).astype(np.float32)
    return geom, data, weight, bias, out_grad


def _forward(geom, dtype="float32", training=True, accumulate=False, act_type=None):
    extra = () if act_type is None else (act_type,)
    return [c for c in _ops.forward_candidates(geom, dtype, training, accumulate, *extra)
            if c.impl.startswith(_ops.SUBGRID)]


def _backward_weights(geom, dtype="float32"):
    return [c for c in _ops.backward_weights_candidates(geom, dtype)
            if c.impl.startswith(_ops.SUBGRID)]


# -- the sub-grid ----------------------------------------------------------------
def _reached(geom):
    """The output pixels each axis's taps reach (from any input pixel)."""
    param = geom.param
    return [{i * s + k * d - pad for i in range(n) for k in range(kernel)} & set(range(size))
            for n, s, d, kernel, pad, size in zip(geom.spatial_in, param.stride, param.dilate,
                                                 param.kernel, geom.pad_l, geom.spatial_out)]


@pytest.mark.parametrize("seed", range(40))
def test_the_sub_grid_holds_every_pixel_a_tap_reaches_and_maps_taps_alike(seed):
    """Against the definition: every pixel a tap reaches is on the sub-grid, tap
    k of input pixel i lands on sub-grid pixel i * stride' + k * dilate' -
    pad_l', and the sub-grid layer's sizes are oneDNN-consistent."""
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    factor = [int(rng.integers(1, 4)) for _ in range(ndim)]
    stride = tuple(f * int(rng.integers(1, 3)) for f in factor)
    dilate = tuple(f * int(rng.integers(1, 3)) for f in factor)
    kernel = tuple(int(rng.integers(1, 4)) for _ in range(ndim))
    pad = tuple(int(rng.integers(0, (k - 1) * d + 1)) for k, d in zip(kernel, dilate))
    adj = tuple(int(rng.integers(0, s)) for s in stride)
    data_shape = (1, 2) + tuple(int(rng.integers(1, 6)) for _ in range(ndim))
    try:
        geom = infer_geometry(parse_params(dict(kernel=kernel, stride=stride, dilate=dilate,
                                                pad=pad, adj=adj, num_filter=2)), data_shape)
    except mxdeconv.MXNetError:
        return   # no output
    sub = subgrid_of(geom)
    steps = tuple(math.gcd(s, d) for s, d in zip(stride, dilate))
    if all(g == 1 for g in steps):
        assert sub is None
        return
    if sub is None:   # an axis without a pixel on the sub-grid: every tap is cropped
        assert any(not pixels for pixels in _reached(geom))
        return
    assert sub.step == steps
    sub_param = sub.geom.param
    for axis, pixels in enumerate(_reached(geom)):
        first, step, count = sub.first[axis], sub.step[axis], sub.geom.spatial_out[axis]
        grid = {first + step * t for t in range(count)}
        assert pixels <= grid
        assert grid == {o for o in range(geom.spatial_out[axis]) if o % step == first}
        for i in range(geom.spatial_in[axis]):
            for k in range(kernel[axis]):
                o = i * stride[axis] + k * dilate[axis] - geom.pad_l[axis]
                t = i * sub_param.stride[axis] + k * sub_param.dilate[axis] \
                    - sub.geom.pad_l[axis]
                assert o == first + step * t
        full = (geom.spatial_in[axis] - 1) * sub_param.stride[axis] \
            + (kernel[axis] - 1) * sub_param.dilate[axis] + 1
        assert full - sub.geom.pad_l[axis] - sub.geom.pad_r[axis] == count
    assert sub.geom.data_shape == geom.data_shape
    assert sub.geom.weight_shape == geom.weight_shape
    assert sub.geom.out_shape[:2] == geom.out_shape[:2]


# -- the plans against the reference ---------------------------------------------
@pytest.mark.parametrize("threads", [1, None], ids=["1_thread", "callers_threads"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_every_sub_grid_plan_agrees_with_the_reference(name, with_bias, threads):
    geom, data, weight, bias, out_grad = _layer(name, with_bias)
    param = geom.param
    args = (param.kernel, param.stride, param.dilate, geom.pad_l, geom.pad_r, param.num_group)
    expected_out = reference_forward(data, weight, bias, *args)
    _, expected_weight, expected_bias = reference_backward(out_grad, data, weight, *args,
                                                           with_bias=with_bias)
    with _ops.using_threads(threads or _ops.get_num_threads()):
        forward, backward = _forward(geom), _backward_weights(geom)
        assert forward and backward, "no sub-grid plan offered"
        for candidate in forward:
            assert_close(candidate.build().run_plain(data, weight, bias), expected_out,
                   f"{candidate!r}: forward")
        for candidate in backward:
            got_weight, got_bias = candidate.build().run_plain(data, out_grad)
            assert_close(got_weight, expected_weight, f"{candidate!r}: weight gradient")
            if with_bias:
                assert_close(got_bias, expected_bias, f"{candidate!r}: bias gradient")
            else:
                assert got_bias is None


@pytest.mark.parametrize("family", ["blocked16", "blocked8", "channels_last", "plain"])
@pytest.mark.parametrize("name", ["padded_blocks", "odd_pad_first_1", "audio_1d_s3_d3"])
def test_the_loops_walk_every_layout_family(name, family):
    """The loops move pixels of 16, 8, all or one lane (a block's padding
    lanes included: 12 output channels fill no block): each layout family's
    first sub-grid plan, asked for by its variant, against the reference."""
    geom, data, weight, bias, out_grad = _layer(name)
    param = geom.param
    args = (param.kernel, param.stride, param.dilate, geom.pad_l, geom.pad_r, param.num_group)
    expected_out = reference_forward(data, weight, bias, *args)
    _, expected_weight, expected_bias = reference_backward(out_grad, data, weight, *args)

    def first(which, variants):
        for variant in variants:
            for candidate in _ops.subgrid_candidates(which, geom, "float32", False, variant):
                return candidate
        return None

    # The deconvolution of the sub-grid layer, else its direct convolution.
    forward = first("forward", [(family, "any", True, False, _ops.SUBGRID),
                                (family, "any", False, False,
                                 _ops.SUBGRID + _ops.DIRECT_FORWARD)])
    backward = first("backward_weights", [
        (family, "any", True, False, _ops.SUBGRID),
        (family, "any", True, False, _ops.SUBGRID + _ops.DIRECT_BACKWARD_WEIGHTS)])
    if forward is None or backward is None:
        pytest.skip(f"oneDNN offers the sub-grid layer no {family} kernel on this CPU")
    forward_plan, backward_plan = forward.build(), backward.build()
    assert forward.family == backward.family == family
    assert_close(forward_plan.run_plain(data, weight, bias), expected_out, f"{forward!r}: forward")
    got_weight, got_bias = backward_plan.run_plain(data, out_grad)
    assert_close(got_weight, expected_weight, f"{backward!r}: weight gradient")
    assert_close(got_bias, expected_bias, f"{backward!r}: bias gradient")


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_every_sub_grid_plan_passes_the_kernel_check(name):
    """The check every candidate meets before use (exact small-integer inputs)."""
    geom, *_ = _layer(name)
    forward_check = kernel_check.forward_check(geom, "float32", False)
    weights_check = kernel_check.backward_weights_check(geom, "float32")
    for candidate in _forward(geom):
        assert forward_check(candidate.build()) is None, repr(candidate)
    for candidate in _backward_weights(geom):
        assert weights_check(candidate.build()) is None, repr(candidate)


# -- where they are offered ----------------------------------------------------------
def test_sub_grid_plans_come_after_onednns_first_choice_and_the_gemm_plan():
    """oneDNN's first choice stays first (the provisional first call and tuning
    off take it); the bounded tuner reaches the sub-grid plans next (backward
    weights: after the GEMM plan), at most SUBGRID_CANDIDATES a pass."""
    geom, *_ = _layer("dilated_k3_s2_d2")
    forward = [c for c in _ops.forward_candidates(geom, "float32", False, False)
               if not c.is_reference]
    count = len(_forward(geom))
    assert 0 < count <= _ops.SUBGRID_CANDIDATES
    assert not forward[0].impl.startswith(_ops.SUBGRID)
    assert all(c.impl.startswith(_ops.SUBGRID) for c in forward[1:1 + count])
    assert [c.index for c in forward] == list(range(len(forward)))
    weights = [c for c in _ops.backward_weights_candidates(geom, "float32")
               if not c.is_reference]
    assert weights[1].impl == weights[2].impl == _ops.GEMM_IMPL   # both orientations
    assert all(c.impl.startswith(_ops.SUBGRID) for c in weights[3:3 + count])
    assert [c.index for c in weights] == list(range(len(weights)))


def test_no_sub_grid_plan_where_the_layer_has_none_or_the_pass_cannot_take_one():
    """Not where stride and dilation share no factor, nor for req=add's sum, an
    activation, or bfloat16 (the loops move float32)."""
    plain = infer_geometry(parse_params(dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                             num_filter=64, no_bias=False)), (2, 64, 8, 8))
    assert subgrid_of(plain) is None
    assert not _forward(plain) and not _backward_weights(plain)
    geom, *_ = _layer("dilated_k3_s2_d2")
    assert not _forward(geom, accumulate=True)
    assert not _forward(geom, act_type="relu")
    try:
        forward_bf16 = _forward(geom, "bfloat16")
        weights_bf16 = _backward_weights(geom, "bfloat16")
    except mxdeconv.MXNetError:   # no bfloat16 kernels on this CPU
        forward_bf16 = weights_bf16 = []
    assert not forward_bf16 and not weights_bf16


def test_no_sub_grid_plan_where_the_sub_grid_tensor_outgrows_the_workspace_bound(
        monkeypatch):
    """The sub-grid tensor lives in the per-thread workspace, kept between
    calls (clear_cache() frees it): above SUBGRID_MAX_BYTES oneDNN's plans alone
    are candidates."""
    geom, data, weight, bias, _ = _layer("dilated_k3_s2_d2")
    sub_bytes = 2 * 64 * 16 * 16 * 4   # images x channels x the 16x16 sub-grid x 4 bytes
    assert subgrid_of(geom).geom.out_shape == (2, 64, 16, 16)
    monkeypatch.setattr(_ops, "SUBGRID_MAX_BYTES", sub_bytes)
    plan = _forward(geom)[0].build()
    mxdeconv.clear_cache()
    plan.run_plain(data, weight, bias)
    assert _ops.workspace_bytes() >= sub_bytes
    mxdeconv.clear_cache()
    assert _ops.workspace_bytes() == 0
    monkeypatch.setattr(_ops, "SUBGRID_MAX_BYTES", sub_bytes - 1)
    assert not _forward(geom) and not _backward_weights(geom)
    assert any(not c.is_reference for c in _ops.forward_candidates(geom, "float32", True, False))


@pytest.mark.parametrize("which", ["forward", "backward_weights"])
def test_a_kept_sub_grid_choice_is_found_again_by_its_variant(which):
    """The plan cache names a tuned choice by its variant and layouts
    (planner.kept._rebuild): each sub-grid plan is found again."""
    geom, *_ = _layer("audio_1d_s3_d3")

    def candidates(variant=None):
        if which == "forward":
            return _ops.forward_candidates(geom, "float32", True, False, variant=variant)
        return _ops.backward_weights_candidates(geom, "float32", variant)

    offered = [c for c in candidates() if c.impl.startswith(_ops.SUBGRID)]
    for candidate in offered:
        alone = list(candidates(candidate.variant))
        assert alone and all(c.impl.startswith(_ops.SUBGRID) for c in alone)
        choice = plans.Choice(candidate.index, _ops.get_num_threads(), candidate.impl, "tuned",
                              found_at=plans._found_at(candidate))
        rebuilt = plans._rebuild(choice, candidates)
        assert rebuilt is not None and rebuilt.impl == candidate.impl


# -- through the public call ------------------------------------------------------------
@pytest.mark.parametrize("req", ["write", "add"])
def test_sub_grid_plans_run_through_the_public_call(req):
    """Forced as the forward and backward-weights plans of a public call with
    autograd, they give the reference's result and gradients: their blocked
    results reach the user in MXNet's layout, req='add' adds there."""
    name = "odd_pad_first_1"
    geom, data, weight, bias, out_grad = _layer(name)
    param = geom.param
    params = dict(LAYERS[name][1], no_bias=False)
    args = (param.kernel, param.stride, param.dilate, geom.pad_l, geom.pad_r, param.num_group)
    expected_out = reference_forward(data, weight, bias, *args)
    expected = reference_backward(out_grad, data, weight, *args)
    threads = _ops.get_num_threads()
    mxdeconv.clear_cache()
    for key, candidate in ((("forward", geom, "float32", True, False, None, threads,
                             plans.tuning()), _forward(geom)[0]),
                           (("backward_weights", geom, "float32", threads, plans.tuning()),
                            _backward_weights(geom)[0])):
        force_plan(key, candidate)
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
        assert "subgrid+" in mxdeconv.explain(x, w, b, train=True, **params)
        assert_close(y.asnumpy(), expected_out, "forward")
        assert_close(w.grad.asnumpy(), expected[1] + (start if req == "add" else 0),
               f"weight gradient (req={req})")
        assert_close(b.grad.asnumpy(), expected[2], "bias gradient")
        assert_close(x.grad.asnumpy(), expected[0], "data gradient")
    finally:
        mxdeconv.clear_cache()


def test_threads_running_sub_grid_plans_at_once_each_use_their_own_workspace():
    """The sub-grid tensor lives in the per-thread workspace: four threads
    running the forward and backward-weights plans of two layers at once all
    get their reference's results."""
    layers = {name: _layer(name) for name in ("dilated_k3_s2_d2", "audio_1d_s3_d3")}
    expected = {}
    for name, (geom, data, weight, bias, out_grad) in layers.items():
        param = geom.param
        args = (param.kernel, param.stride, param.dilate, geom.pad_l, geom.pad_r,
                param.num_group)
        expected[name] = (reference_forward(data, weight, bias, *args),
                          reference_backward(out_grad, data, weight, *args)[1:])

    def worker(i):
        name = sorted(layers)[i % 2]
        geom, data, weight, bias, out_grad = layers[name]
        forward = _forward(geom)[0].build()
        backward = _backward_weights(geom)[0].build()
        for _ in range(3):
            assert_close(forward.run_plain(data, weight, bias), expected[name][0],
                   f"{name} forward, thread {i}")
            weight_grad, bias_grad = backward.run_plain(data, out_grad)
            assert_close(weight_grad, expected[name][1][0], f"{name} weight gradient, thread {i}")
            assert_close(bias_grad, expected[name][1][1], f"{name} bias gradient, thread {i}")
        return _ops.workspace_bytes()

    assert all(size > 0 for size in run_threads(worker, 4))


def test_sub_grid_plans_wrap_onednns_plans_only():
    """The sub-grid layer of k(1, 2) s2 d(2, 1) has taps that do not overlap, so
    mxdeconv's GEMM forward is among its candidates; it uses the workspace the
    sub-grid tensor takes, so no sub-grid plan wraps it (wrapping it crashed)."""
    params = dict(kernel=(1, 2), stride=(2, 2), dilate=(2, 1), num_filter=32, no_bias=False)
    geom = infer_geometry(parse_params(params), (2, 16, 6, 6))
    sub = subgrid_of(geom)
    assert _ops.gemm_forward_candidate(sub.geom, "float32") is not None
    offered = _forward(geom)
    assert offered and all(c.pd is not None for c in offered)
    assert all(_ops.GEMM_FORWARD_IMPL not in c.impl for c in offered)
    rng = np.random.default_rng(5)
    data = rng.standard_normal(geom.data_shape).astype(np.float32)
    weight = rng.standard_normal(geom.weight_shape).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    param = geom.param
    expected = reference_forward(data, weight, bias, param.kernel, param.stride, param.dilate,
                                 geom.pad_l, geom.pad_r, param.num_group)
    for candidate in offered:
        assert_close(candidate.build().run_plain(data, weight, bias), expected, repr(candidate))
