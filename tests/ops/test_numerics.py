"""Numerics: gradients, float32 error bounds, float16 range.

* float64 (NumPy fallback): the backward pass is the gradient of the forward
  pass, checked by central finite differences of L = sum(out_grad * forward),
  in random directions and entry by entry.
* float32 (oneDNN): every result is within the classic a-priori bound of a sum
  of n products computed in any order with any blocking,
  ``|fl(s) - s| <= gamma_n * sum|a_i b_i|``, ``gamma_n = n u / (1 - n u)``,
  ``u = 2**-24``, where ``sum|a_i b_i|`` is the same operator applied to the
  absolute values (computed in float64 by the fallback) and n the number of
  terms summed into that element; the adjoint identity
  ``<og, F(x)> = <F^T og, x>`` holds within the same kind of bound.
* float16 (fallback): computed in float32 and rounded once, so partial sums
  beyond float16's range do not overflow, the result is bitwise the float32
  result rounded to float16, and a result beyond 65504 becomes +-inf with a
  :class:`mxdeconv.Float16OverflowWarning` (inf inputs propagate silently).
"""
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import mxdeconv
from mxdeconv import Float16OverflowWarning, nd
from mxdeconv.semantics import deconv_numpy as fallback
from helpers import geometry_of
from strategies import EDGE_CASES, configs, seeds, wide_channels

U32 = 2.0**-24


def gamma(n):
    return n * U32 / (1 - n * U32)


def loss(geom, og, data, weight, bias):
    return float(np.sum(og * fallback.forward(geom, data, weight, bias)))


# -- float64: backward is the gradient of forward ----------------------------------
@settings(max_examples=60, deadline=None)
@given(cfg=configs(min_batch=1), seed=seeds)
def test_float64_gradients_match_directional_finite_differences(cfg, seed):
    geom = geometry_of(cfg)
    data, weight, bias = cfg.arrays(seed, np.float64)
    og = cfg.out_grad(seed, np.float64)
    grads = fallback.backward(geom, og, data, weight)
    rng = np.random.default_rng(seed + 7)
    h = 1e-3  # L is bilinear in (data, weight), linear in bias: central FD is exact
    for index, name in enumerate(("data", "weight", "bias")):
        if grads[index] is None:
            continue
        args = [data, weight, bias]
        v = rng.uniform(-1, 1, args[index].shape)
        plus, minus = list(args), list(args)
        plus[index], minus[index] = args[index] + h * v, args[index] - h * v
        fd = (loss(geom, og, *plus) - loss(geom, og, *minus)) / (2 * h)
        analytic = float(np.sum(grads[index] * v))
        scale = float(np.sum(np.abs(grads[index] * v))) + 1.0
        assert abs(fd - analytic) <= 1e-9 * scale, (name, fd, analytic)


@pytest.mark.parametrize("name", ["adj_gt_pad_2d", "target_2d_mixed", "dilated_3d_groups"])
def test_float64_gradients_match_entrywise_finite_differences(name):
    cfg = EDGE_CASES[name]
    geom = geometry_of(cfg)
    data, weight, bias = cfg.arrays(3, np.float64)
    og = cfg.out_grad(3, np.float64)
    grads = fallback.backward(geom, og, data, weight)
    h = 1e-4
    for index, arr in enumerate((data, weight, bias)):
        fd = np.zeros_like(arr)
        for pos in np.ndindex(arr.shape):
            saved = arr[pos]
            arr[pos] = saved + h
            up = loss(geom, og, data, weight, bias)
            arr[pos] = saved - h
            down = loss(geom, og, data, weight, bias)
            arr[pos] = saved
            fd[pos] = (up - down) / (2 * h)
        np.testing.assert_allclose(grads[index], fd, rtol=1e-7, atol=1e-8)


# -- float32 on oneDNN: within the a-priori rounding bound ---------------------------------
def onednn_results(cfg, data, weight, bias, og):
    with mxdeconv.use_impl("onednn"):
        y = nd.Deconvolution(data, weight, bias, **cfg.kwargs())
        grads = nd.Deconvolution_backward(og, data, weight, bias, **cfg.kwargs())
    return [np.asarray(y, np.float64)] + [None if g is None else np.asarray(g, np.float64)
                                          for g in grads]


def check_within_bound(cfg, seed):
    geom = geometry_of(cfg)
    data, weight, bias = cfg.arrays(seed, np.float32)
    og = cfg.out_grad(seed, np.float32)
    got = onednn_results(cfg, data, weight, bias, og)
    f64 = [None if a is None else a.astype(np.float64) for a in (data, weight, bias, og)]
    x, w, b, g = f64
    exact = [fallback.forward(geom, x, w, b)] + list(fallback.backward(geom, g, x, w))
    absx, absw, absg = np.abs(x), np.abs(w), np.abs(g)
    absb = None if b is None else np.abs(b)
    magnitude = [fallback.forward(geom, absx, absw, absb)] + list(
        fallback.backward(geom, absg, absx, absw))
    taps = math.prod(cfg.kernel)
    terms = [cfg.in_per_group * taps + 1, cfg.out_per_group * taps,
             cfg.batch * math.prod(cfg.spatial), cfg.batch * math.prod(cfg.out_spatial)]
    for name, r, e, m, n in zip(("output", "data_grad", "weight_grad", "bias_grad"), got,
                                exact, magnitude, terms):
        if e is None:
            assert r is None
            continue
        # the float32 result itself is rounded once more when stored: + u * |e|
        bound = gamma(n) * m + U32 * np.abs(e) + 1e-30
        excess = np.abs(r - e) - bound
        assert excess.max(initial=-1) <= 0, (name, float(excess.max()), n)


@settings(max_examples=60, deadline=None)
@given(cfg=configs(min_batch=1), seed=seeds)
def test_onednn_float32_within_rounding_bound(cfg, seed):
    check_within_bound(cfg, seed)


@settings(max_examples=15, deadline=None)
@given(cfg=configs(ndims=(1, 2), min_batch=1, channels=wide_channels, max_groups=2,
                   max_spatial=3), seed=seeds)
def test_onednn_float32_blocked_layouts_within_rounding_bound(cfg, seed):
    check_within_bound(cfg, seed)


@settings(max_examples=40, deadline=None)
@given(cfg=configs(min_batch=1, no_bias=True), seed=seeds)
def test_onednn_float32_adjoint_identity(cfg, seed):
    """<og, F_w(x)> = <F_w^T og, x> and <og, F_x(w)> = <G_x^T og, w> in float32."""
    data, weight, _ = cfg.arrays(seed, np.float32)
    og = cfg.out_grad(seed, np.float32)
    y, dx, dw, _ = onednn_results(cfg, data, weight, None, og)
    lhs = float(np.sum(og.astype(np.float64) * y))
    for grad, arg in ((dx, data), (dw, weight)):
        rhs = float(np.sum(grad * arg.astype(np.float64)))
        magnitude = float(np.sum(np.abs(grad * arg))) + float(np.sum(np.abs(og * y)))
        n = max(cfg.max_terms, 1) + og.size
        assert abs(lhs - rhs) <= 2 * gamma(n) * magnitude + 1e-30, (lhs, rhs)


# -- float16 on the fallback ------------------------------------------------------------------
ONE_BY_ONE = dict(kernel=(1, 1), num_filter=1)


def test_float16_partial_sums_beyond_range_do_not_overflow():
    """40000 + 40000 - 40000: float16 accumulation would hit inf at 80000; the
    fallback accumulates in float32 and returns exactly 40000, without warning."""
    data = np.array([40000, 40000, -40000], np.float16).reshape(1, 3, 1, 1)
    weight = np.ones((3, 1, 1, 1), np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = np.asarray(nd.Deconvolution(data, weight, **ONE_BY_ONE))
        og = np.full((2, 1, 1, 1), 40000, np.float16)
        x2 = np.array([1, -1], np.float16).reshape(2, 1, 1, 1)
        _, dw, _ = nd.Deconvolution_backward(og * np.float16(1), x2 * np.float16(1),
                                             np.ones((1, 1, 1, 1), np.float16), **ONE_BY_ONE)
    assert y.dtype == np.float16 and y.item() == 40000
    assert np.asarray(dw).item() == 0  # 40000 - 40000, no inf - inf


@settings(max_examples=40, deadline=None)
@given(cfg=configs(min_batch=1), seed=seeds, scale=st.sampled_from([1.0, 100.0, 3000.0]))
def test_float16_is_float32_rounded_once(cfg, seed, scale):
    """The float16 result is bitwise the float32 computation on the same float16
    inputs, rounded to float16 at the end (or +-inf beyond the range)."""
    geom = geometry_of(cfg)
    data, weight, bias = (None if a is None else (a * scale).astype(np.float16)
                          for a in cfg.arrays(seed, np.float32))
    as32 = [None if a is None else a.astype(np.float32) for a in (data, weight, bias)]
    with np.errstate(over="ignore"):
        expected = fallback.forward(geom, *as32).astype(np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Float16OverflowWarning)
        got = np.asarray(nd.Deconvolution(data, weight, bias, **cfg.kwargs()))
    assert_array_equal(got, expected)


@pytest.mark.parametrize("sign", [1, -1])
def test_float16_overflow_warns_and_gives_signed_inf(sign):
    data = np.full((1, 2, 2, 2), 250, np.float16)
    weight = np.full((2, 1, 1, 1), sign * 250, np.float16)  # 2 * 62500 > 65504
    with pytest.warns(Float16OverflowWarning, match=r"float16 overflow: output: 4 of 4 values "
                      r"exceed float16's largest finite value 65504 and are stored as \+-inf"):
        y = np.asarray(nd.Deconvolution(data, weight, **ONE_BY_ONE))
    assert_array_equal(y, np.full((1, 1, 2, 2), sign * np.inf, np.float16))
    og = np.full((1, 1, 2, 2), 250, np.float16)
    with pytest.warns(Float16OverflowWarning, match=r"weight_grad: 2 of 2 values"):
        _, dw, _ = nd.Deconvolution_backward(og, data, weight, **ONE_BY_ONE)
    assert np.isposinf(np.asarray(dw)).all()


def test_float16_inf_input_propagates_without_warning():
    data = np.ones((1, 2, 2, 2), np.float16)
    data[0, 0, 0, 0] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = np.asarray(nd.Deconvolution(data, np.ones((2, 1, 1, 1), np.float16),
                                        **ONE_BY_ONE))
    assert np.isposinf(y[0, 0, 0, 0]) and np.isfinite(y.reshape(-1)[1:]).all()


def test_float16_req_add_overflow_is_seen():
    """req='add' forms target + result in float32 too: a sum beyond the range warns."""
    out = nd.array(np.full((1, 1, 2, 2), 65000, np.float16), dtype="float16")
    data = np.full((1, 2, 2, 2), 10, np.float16)
    with pytest.warns(Float16OverflowWarning, match="output: 4 of 4"):
        nd.Deconvolution(data, np.full((2, 1, 1, 1), 50, np.float16), out=out, req="add",
                         **ONE_BY_ONE)
    assert np.isposinf(np.asarray(out)).all()
