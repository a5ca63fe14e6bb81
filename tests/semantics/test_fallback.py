"""The NumPy im2col implementation (mxdeconv.semantics.deconv_numpy) against the independent
reference, its own finite differences, and in float16."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from mxdeconv.semantics import deconv_numpy as fallback
from helpers import geometry_of
from reference import reference_backward
from strategies import EDGE_CASES, configs, seeds

EXACT = dict(rtol=1e-10, atol=1e-10)  # float64 against float64: only summation order differs
# float16 results: inputs are exactly representable (rounded before the reference
# sees them) and accumulation is float32, so the error is the final rounding to
# float16 (relative 2**-11 ~ 4.9e-4) plus float32 noise; outputs are O(1..10).
FP16 = dict(rtol=2e-3, atol=2e-3)
EDGES = pytest.mark.parametrize("name", sorted(EDGE_CASES))


def check_forward(cfg, seed, dtype=np.float64, tol=EXACT):
    data, weight, bias = cfg.arrays(seed, dtype)
    out = fallback.forward(geometry_of(cfg), data, weight, bias)
    assert out.dtype == dtype and out.shape == cfg.out_shape
    assert out.flags.c_contiguous
    assert_allclose(out, cfg.ref_forward(data, weight, bias), **tol)


def check_backward(cfg, seed, dtype=np.float64, tol=EXACT):
    data, weight, _ = cfg.arrays(seed, dtype)
    og = cfg.out_grad(seed, dtype)
    got = fallback.backward(geometry_of(cfg), og, data, weight)
    for name, g, ref in zip(("data", "weight", "bias"), got, cfg.ref_backward(og, data, weight)):
        if ref is None:
            assert g is None, name
        else:
            assert g.dtype == dtype and g.shape == ref.shape, name
            assert_allclose(g, ref, err_msg=f"{name} grad", **tol)


# -- against the reference ----------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(cfg=configs(), seed=seeds)
def test_forward_matches_reference(cfg, seed):
    check_forward(cfg, seed)


@settings(max_examples=120, deadline=None)
@given(cfg=configs(), seed=seeds)
def test_backward_matches_reference(cfg, seed):
    check_backward(cfg, seed)


@EDGES
def test_forward_edge_cases(name):
    check_forward(EDGE_CASES[name], seed=1)


@EDGES
def test_backward_edge_cases(name):
    check_backward(EDGE_CASES[name], seed=2)


@settings(max_examples=40, deadline=None)
@given(cfg=configs(min_batch=0, max_batch=0), seed=seeds)
def test_forward_empty_batch(cfg, seed):
    data, weight, bias = cfg.arrays(seed)
    out = fallback.forward(geometry_of(cfg), data, weight, bias)
    assert out.shape == cfg.out_shape and out.size == 0


@pytest.mark.parametrize("name", ["anisotropic_2d", "target_3d"])
def test_backward_empty_batch(name):
    """Sums over an empty batch: weight and bias grads are zeros, data grad is empty."""
    cfg = replace(EDGE_CASES[name], batch=0)
    data, weight, _ = cfg.arrays(6)
    dgrad, wgrad, bgrad = fallback.backward(geometry_of(cfg), cfg.out_grad(6), data, weight)
    assert dgrad.shape == cfg.data_shape
    np.testing.assert_array_equal(wgrad, np.zeros(cfg.weight_shape))
    np.testing.assert_array_equal(bgrad, np.zeros(cfg.bias_shape))


@settings(max_examples=60, deadline=None)
@given(cfg=configs(no_bias=False), seed=seeds,
       need=st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_backward_skips_unneeded_grads(cfg, seed, need):
    data, weight, _ = cfg.arrays(seed)
    og = cfg.out_grad(seed)
    full = fallback.backward(geometry_of(cfg), og, data, weight)
    got = fallback.backward(geometry_of(cfg), og, data, weight, *need)
    for wanted, g, ref in zip(need, got, full):
        if wanted:
            assert_allclose(g, ref, **EXACT)
        else:
            assert g is None


def test_inputs_are_not_modified():
    cfg = EDGE_CASES["anisotropic_2d"]
    data, weight, bias = cfg.arrays(3)
    og = cfg.out_grad(3)
    copies = [a.copy() for a in (data, weight, bias, og)]
    fallback.forward(geometry_of(cfg), data, weight, bias)
    fallback.backward(geometry_of(cfg), og, data, weight)
    for before, after in zip(copies, (data, weight, bias, og)):
        np.testing.assert_array_equal(before, after)


@EDGES
def test_off_by_one_geometry_fails_the_comparison(name):
    """The comparisons above are sharp: the fallback run with its crop moved by
    one pixel (same output size) no longer matches the reference."""
    cfg = EDGE_CASES[name]
    geom = geometry_of(cfg)
    last = cfg.ndim - 1
    shift = lambda t, d: t[:last] + (t[last] + d,)  # noqa: E731
    moved = replace(geom, pad_l=shift(geom.pad_l, 1), pad_r=shift(geom.pad_r, -1))
    data, weight, bias = cfg.arrays(4)
    with pytest.raises(AssertionError):
        assert_allclose(fallback.forward(moved, data, weight, bias),
                        cfg.ref_forward(data, weight, bias), **EXACT)


# -- finite differences ---------------------------------------------------------
def numerical_grad(f, x, eps=1e-6):
    """Central differences of the scalar f() with respect to every element of x."""
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        orig = x[idx]
        x[idx] = orig + eps
        plus = f()
        x[idx] = orig - eps
        minus = f()
        x[idx] = orig
        grad[idx] = (plus - minus) / (2 * eps)
    return grad


@pytest.mark.parametrize("name", ["adj_gt_pad_2d", "target_2d_mixed", "dilated_3d_groups",
                                  "target_pad2_adj1_1d"])
def test_backward_matches_finite_differences(name):
    cfg = EDGE_CASES[name]
    geom = geometry_of(cfg)
    data, weight, bias = cfg.arrays(5)
    og = cfg.out_grad(5)
    loss = lambda: float(np.sum(fallback.forward(geom, data, weight, bias) * og))  # noqa: E731
    analytic = fallback.backward(geom, og, data, weight)
    # the loss is bilinear, so central differences are exact up to rounding
    for x, g in zip((data, weight, bias), analytic):
        assert_allclose(g, numerical_grad(loss, x), rtol=1e-6, atol=1e-6)


# -- float16 -----------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(cfg=configs(), seed=seeds)
def test_float16_forward(cfg, seed):
    check_forward(cfg, seed, np.float16, FP16)


@settings(max_examples=60, deadline=None)
@given(cfg=configs(), seed=seeds)
def test_float16_backward(cfg, seed):
    check_backward(cfg, seed, np.float16, FP16)


def test_compute_dtype():
    assert fallback.compute_dtype(np.float16) == np.float32
    assert fallback.compute_dtype(np.float32) == np.float32
    assert fallback.compute_dtype(np.float64) == np.float64


# -- kernel taps a chunk at a time (found by an adversarial pass) ---------------------------
def test_the_numpy_path_and_the_check_take_kernel_taps_a_chunk_at_a_time():
    from mxdeconv.semantics import deconv_numpy as fallback
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    geom = infer_geometry(parse_params(dict(kernel=(256, 256), num_filter=64)), (1, 1, 64, 64))
    assert fallback.workspace_bytes(geom, np.dtype(np.float32)) < 256 << 20  # was 64 GiB
    small = infer_geometry(parse_params(dict(kernel=(5, 5), stride=(2, 2), num_filter=3,
                                             num_group=1)), (2, 4, 6, 6))
    rng = np.random.default_rng(2)
    x = rng.standard_normal(small.data_shape)
    w = rng.standard_normal(small.weight_shape)
    og = rng.standard_normal(small.out_shape)
    previous = fallback.COLUMN_BUDGET
    try:
        whole = (fallback.forward(small, x, w, None), fallback.backward(small, og, x, w))
        fallback.COLUMN_BUDGET = 1                   # one tap per chunk
        chunked = (fallback.forward(small, x, w, None), fallback.backward(small, og, x, w))
    finally:
        fallback.COLUMN_BUDGET = previous
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(chunked[1][:2], whole[1][:2]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    ref = reference_backward(og, x, w, kernel=(5, 5), stride=(2, 2), dilate=(1, 1),
                             pad_l=(0, 0), pad_r=(0, 0), num_group=1)
    np.testing.assert_allclose(chunked[1][1], ref[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("budget, chunks", [(1, 9), (4 * 1280, 3), (1 << 20, 1)])
def test_a_column_budget_changes_the_chunks_not_the_result(budget, chunks):
    """``column_budget`` (the kernel check's small one): one tap, a few taps or
    the whole kernel per chunk, the last chunk shorter than the reused buffer."""
    from mxdeconv.semantics import deconv_numpy as fallback
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    geom = infer_geometry(parse_params(dict(kernel=(3, 3), stride=(2, 1), pad=(1, 0),
                                            num_filter=4, num_group=2)), (2, 6, 5, 4))
    # A tap's float64 columns: 2 images x 4 filters x 20 pixels x 8 bytes = 1280.
    assert len(fallback._tap_chunks(geom, 8, budget)) == chunks
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s) for s in (geom.data_shape, geom.weight_shape, (4,)))
    og = rng.standard_normal(geom.out_shape)
    whole = (fallback.forward(geom, x, w, b), fallback.backward(geom, og, x, w))
    chunked = (fallback.forward(geom, x, w, b, budget),
               fallback.backward(geom, og, x, w, column_budget=budget))
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-12, atol=1e-12)
    for a, b_ in zip(chunked[1][:2], whole[1][:2]):
        np.testing.assert_allclose(a, b_, rtol=1e-12, atol=1e-12)
