"""Prepared calls: a repeated signature skips validation and planning, and
nothing that changes between calls is ever taken from a stale one.

A prepared call is keyed by the parameters (equal-but-invalid values such as
3.0 for 3 or True for 1 are never keyed), the shapes and dtypes of every array,
the mode, req, the thread count and the dispatch switches; per call it checks
only aliasing and layouts.
"""
import functools

import numpy as np
import pytest

import mxdeconv
from mxdeconv import MXNetError, autograd, nd
from mxdeconv.ops import full_path
from helpers import expected_k3s2p1, layer_arrays
from reference import reference_backward, reference_forward

KW = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=8, no_bias=False)
TOL = dict(rtol=1e-4, atol=1e-4)


#: NDArrays (data, weight, bias) of the KW layer (tests/helpers.py).
_arrays = functools.partial(layer_arrays, batch=2, channels=8, size=5, num_filter=8,
                            scale=0.2, as_nd=True)


@pytest.fixture
def full_paths(monkeypatch):
    """Counts how often each entry point took the full (validating) path."""
    counts = {"forward": 0, "backward": 0}
    real_forward, real_backward = full_path.full_forward, full_path.full_backward

    def forward(*args):
        counts["forward"] += 1
        return real_forward(*args)

    def backward(*args):
        counts["backward"] += 1
        return real_backward(*args)
    # The compiled entries (ops._fastpath) read full_path.full_forward and
    # full_path.full_backward at call time: the full path's own module is the seam.
    monkeypatch.setattr(full_path, "full_forward", forward)
    monkeypatch.setattr(full_path, "full_backward", backward)
    mxdeconv.clear_cache()
    yield counts


def test_a_repeated_forward_skips_the_full_path(full_paths):
    x, w, b = _arrays()
    first = nd.Deconvolution(x, w, b, **KW).asnumpy()
    mxdeconv.finish_tuning()  # while a layer is tuned on its calls, they take the full path
    nd.Deconvolution(x, w, b, **KW)
    settled = full_paths["forward"]
    assert settled <= 2
    for _ in range(3):
        again = nd.Deconvolution(x, w, b, **KW)
        assert mxdeconv.last_impl() == "onednn"
        np.testing.assert_allclose(again.asnumpy(), first, rtol=1e-5, atol=1e-5)
    assert full_paths["forward"] == settled
    np.testing.assert_allclose(first, expected_k3s2p1(x, w, b), **TOL)


def test_a_repeated_backward_skips_the_full_path(full_paths):
    x, w, b = _arrays(1)
    og = nd.array(np.random.default_rng(2).standard_normal((2, 8, 9, 9)).astype(np.float32))
    ref = reference_backward(og.asnumpy(), x.asnumpy(), w.asnumpy(), kernel=(3, 3),
                             stride=(2, 2), dilate=(1, 1), pad_l=(1, 1), pad_r=(1, 1),
                             num_group=1)
    targets = [nd.zeros(x.shape), nd.zeros(w.shape), nd.zeros(b.shape)]
    nd.Deconvolution_backward(og, x, w, b, grads=targets, **KW)
    mxdeconv.finish_tuning()  # while a layer is tuned on its calls, they take the full path
    nd.Deconvolution_backward(og, x, w, b, grads=targets, **KW)
    settled = full_paths["backward"]
    assert settled <= 2
    for _ in range(3):
        grads = nd.Deconvolution_backward(og, x, w, b, grads=targets, **KW)
        assert all(g is t for g, t in zip(grads, targets))
        for got, want in zip(grads, ref):
            np.testing.assert_allclose(got.asnumpy(), want, **TOL)
    assert full_paths["backward"] == settled


@pytest.mark.parametrize("bad, error, match", [
    (dict(kernel=(3.0, 3)), TypeError, r"kernel\[0\] must be an integer"),
    (dict(num_filter=True), TypeError, "num_filter must be an integer"),
    (dict(no_bias=2), TypeError, "no_bias must be a bool"),
    (dict(stride=[2, 2.5]), TypeError, r"stride\[1\] must be an integer"),
])
def test_equal_but_invalid_parameters_never_reuse_a_prepared_call(bad, error, match):
    x, w, b = _arrays()
    nd.Deconvolution(x, w, b, **KW)
    with pytest.raises(error, match=match):
        nd.Deconvolution(x, w, b, **dict(KW, **bad))


def test_numpy_inputs_and_wrong_arrays_take_the_full_path():
    x, w, b = _arrays()
    nd.Deconvolution(x, w, b, **KW)
    np.testing.assert_allclose(nd.Deconvolution(x.asnumpy(), w, b, **KW).asnumpy(),
                               expected_k3s2p1(x, w, b), **TOL)
    with pytest.raises(MXNetError, match="weight dtype mismatch"):
        nd.Deconvolution(x, w.astype("float64"), b, **KW)
    with pytest.raises(MXNetError, match="bias dtype mismatch"):
        nd.Deconvolution(x, w, b.astype("float64"), **KW)


def test_switches_and_thread_counts_are_part_of_the_signature():
    x, w, b = _arrays()
    expected = expected_k3s2p1(x, w, b)
    nd.Deconvolution(x, w, b, **KW)
    with mxdeconv.use_impl("numpy"):
        np.testing.assert_allclose(nd.Deconvolution(x, w, b, **KW).asnumpy(), expected, **TOL)
        assert mxdeconv.last_impl() == "numpy"
    previous = mxdeconv.set_onednn_enabled(False)
    try:
        nd.Deconvolution(x, w, b, **KW)
        assert mxdeconv.last_impl() == "numpy"
    finally:
        mxdeconv.set_onednn_enabled(previous)
    threads = mxdeconv.get_num_threads()
    try:
        mxdeconv.set_num_threads(1)
        np.testing.assert_allclose(nd.Deconvolution(x, w, b, **KW).asnumpy(), expected, **TOL)
        assert mxdeconv.last_impl() == "onednn"
    finally:
        mxdeconv.set_num_threads(threads)
    with autograd.train_mode():
        np.testing.assert_allclose(nd.Deconvolution(x, w, b, **KW).asnumpy(), expected, **TOL)


def test_out_targets_are_checked_on_every_call():
    x, w, b = _arrays()
    expected = expected_k3s2p1(x, w, b)
    out = nd.zeros(expected.shape)
    for _ in range(2):
        assert nd.Deconvolution(x, w, b, out=out, **KW) is out
    np.testing.assert_allclose(out.asnumpy(), expected, **TOL)
    nd.Deconvolution(x, w, b, out=out, req="add", **KW)
    nd.Deconvolution(x, w, b, out=out, req="add", **KW)
    np.testing.assert_allclose(out.asnumpy(), 3 * expected, **TOL)
    read_only = nd.from_dlpack(nd.to_dlpack_for_read(nd.zeros(expected.shape)))
    with pytest.raises(MXNetError, match="out must be writeable"):
        nd.Deconvolution(x, w, b, out=read_only, **KW)
    x.attach_grad()
    with autograd.record():
        recorded = nd.Deconvolution(x, w, b, **KW)
        with pytest.raises(MXNetError, match="Assigning to NDArrays"):
            nd.Deconvolution(x, w, b, out=recorded, **KW)


def test_out_aliasing_an_input_in_a_prepared_signature():
    rng = np.random.default_rng(3)
    params = dict(kernel=(1, 1), num_filter=8)
    x = nd.array(rng.standard_normal((2, 8, 4, 4)).astype(np.float32))
    w = nd.array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32))
    other = nd.zeros(x.shape)
    nd.Deconvolution(x, w, out=other, **params)          # prepares (out, not aliased)
    before = x.asnumpy()
    expected = reference_forward(before, w.asnumpy(), None, kernel=(1, 1), stride=(1, 1),
                                 dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0), num_group=1)
    nd.Deconvolution(x, w, out=x, **params)              # same signature, out is data
    np.testing.assert_allclose(x.asnumpy(), expected, **TOL)


def test_recorded_forward_through_a_prepared_call():
    x, w, b = _arrays(4)
    nd.Deconvolution(x, w, b, **KW)
    w.attach_grad()
    with autograd.record():
        y = nd.Deconvolution(x, w, b, **KW)
    y.backward(nd.ones(y.shape))
    ref = reference_backward(np.ones(y.shape), x.asnumpy(), w.asnumpy(), kernel=(3, 3),
                             stride=(2, 2), dilate=(1, 1), pad_l=(1, 1), pad_r=(1, 1),
                             num_group=1)
    np.testing.assert_allclose(w.grad.asnumpy(), ref[1], **TOL)


def test_more_keyword_arguments_than_a_bitmask_holds_take_the_full_path():
    """The prepared-call key marks each bool keyword with a bit of a C long:
    a call with 70 keywords (64 of them unknown) must not shift past it, and
    gets the full path's error naming the unknown arguments."""
    x, w, _ = _arrays()
    nd.Deconvolution(x, w, kernel=(3, 3), num_filter=w.shape[1])  # a prepared call exists
    junk = {f"junk{i}": True for i in range(64)}
    with pytest.raises(TypeError, match="unexpected keyword argument.*junk63"):
        nd.Deconvolution(x, w, kernel=(3, 3), num_filter=w.shape[1], **junk)
