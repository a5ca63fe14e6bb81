"""Cases an adversarial pass found, each pinned down against its fix.

Every test compares with an independent reference or checks that an error is
an MXNetError/TypeError raised before anything is written.
"""
import warnings

import numpy as np
import pytest

import mxdeconv
from mxdeconv import MXNetError, _ops, autograd, gluon, nd
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans
from reference import reference_backward

ml_dtypes = pytest.importorskip("ml_dtypes")


# -- autograd --------------------------------------------------------------------------
def test_out_over_an_input_of_a_recorded_call_is_refused_and_writes_nothing():
    rng = np.random.default_rng(0)
    d0 = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    d = nd.array(d0)
    w = nd.array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    w.attach_grad()
    with autograd.record():
        with pytest.raises(MXNetError, match="out: Assigning to NDArrays"):
            nd.Deconvolution(d, w, kernel=(1, 1), num_filter=4, out=d)
    np.testing.assert_array_equal(d.asnumpy(), d0)


def test_an_input_written_after_recording_fails_backward_before_any_gradient():
    rng = np.random.default_rng(1)
    d0 = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    d, q = nd.array(d0), nd.array([7.0])
    w = nd.array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    w.attach_grad()
    q.attach_grad()
    with autograd.record():
        y = nd.Deconvolution(d, w, kernel=(1, 1), num_filter=4)
        z = q * 2
    nd.Deconvolution(nd.array(d0 + 1), w, kernel=(1, 1), num_filter=4, out=d)
    before = (w.grad.asnumpy(), q.grad.asnumpy())
    with pytest.raises(MXNetError, match="input 0 .* was written after the operator was "
                                         "recorded"):
        autograd.backward([z, y])
    np.testing.assert_array_equal(w.grad.asnumpy(), before[0])
    np.testing.assert_array_equal(q.grad.asnumpy(), before[1])


def test_a_head_gradient_of_another_dtype_fails_before_any_gradient():
    q = nd.array([7.0])
    q.attach_grad()
    w = nd.ones((4, 4, 1, 1))
    w.attach_grad()
    with autograd.record():
        z = q * 2
        y = nd.Deconvolution(nd.ones((1, 4, 2, 2)), w, kernel=(1, 1), num_filter=4)
    with pytest.raises(MXNetError, match="head_grad dtype float64 does not match"):
        autograd.backward([z, y], [None, nd.ones(y.shape, dtype="float64")])
    assert q.grad.asnumpy().tolist() == [0.0]


def test_bfloat16_broadcast_gradients_are_summed_in_float32():
    x = nd.ones((16, 8, 32, 32), dtype="bfloat16")
    b = nd.zeros((1, 8, 1, 1), dtype="bfloat16")
    c = nd.ones((1,), dtype="bfloat16")
    b.attach_grad()
    c.attach_grad()
    with autograd.record():
        y = x * c + b
    y.backward()
    assert b.grad.asnumpy().astype(np.float32).ravel().tolist() == [16384.0] * 8
    assert c.grad.asnumpy().astype(np.float32).tolist() == [131072.0]


def test_mark_variables_refuses_a_read_only_gradient():
    read_only = nd.from_dlpack(nd.to_dlpack_for_read(nd.zeros((2,))))
    with pytest.raises(MXNetError, match="gradients must be writeable"):
        autograd.mark_variables(nd.ones((2,)), read_only)
    with pytest.raises(TypeError, match="attach_grad: grad_req must be a string"):
        nd.ones((2,)).attach_grad(5)


# -- the kernel check and memory ----------------------------------------------------------
def test_running_out_of_memory_in_the_check_is_no_verdict_and_not_remembered(monkeypatch):
    monkeypatch.setattr(plans, "_store", plans.plan_store.PlanStore(None))  # no kept verdict
    plans.clear_choices()
    mxdeconv.clear_cache()
    real = kernel_check._integers
    state = {"fail": True}

    def integers(*args, **kwargs):  # the check's inputs: as if memory ran out
        if state["fail"]:
            raise MemoryError("Unable to allocate 64.0 GiB")
        return real(*args, **kwargs)
    monkeypatch.setattr(kernel_check, "_integers", integers)
    x, w = nd.ones((1, 8, 4, 4)), nd.ones((8, 8, 3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", mxdeconv.KernelDefectWarning)  # no kernel blamed
        y = nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
    assert mxdeconv.last_impl() == "numpy"          # computed, on the path that fits
    assert float(y.asnumpy().max()) == 72.0
    assert "not enough memory" in mxdeconv.explain(x, w, kernel=(3, 3), num_filter=8)
    state["fail"] = False                            # memory is back: oneDNN again
    nd.Deconvolution(x, w, kernel=(3, 3), num_filter=8)
    assert mxdeconv.last_impl() == "onednn"
    plans.clear_choices()
    mxdeconv.clear_cache()


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


def test_onednns_own_cache_follows_ours():
    capacity = mxdeconv.cache_info()["capacity"]
    try:
        mxdeconv.set_cache_capacity(7)
        assert _ops.onednn_cache_capacity() == 7
        mxdeconv.clear_cache()
        assert _ops.onednn_cache_capacity() == 7
    finally:
        mxdeconv.set_cache_capacity(capacity)


# -- arrays and switches ------------------------------------------------------------------
@pytest.mark.parametrize("values", [
    np.array([1 + 2j]), np.array(["a", "b"]), np.array([b"x"]), np.array([1, None]),
    np.array(["2020-01-01"], dtype="datetime64[D]"), np.zeros(2, dtype=[("a", "f4")]),
    np.array([object()])])
def test_nd_array_refuses_what_is_not_real_numbers(values):
    with pytest.raises(TypeError, match="must hold real numbers"):
        nd.array(values)


def test_use_impl_checks_its_name_on_entry():
    with pytest.raises(TypeError, match="use_impl: name must be a string"):
        with mxdeconv.use_impl(None):
            pass
    with pytest.raises(MXNetError, match="use_impl: no implementation named 'cuda'"):
        with mxdeconv.use_impl("cuda"):
            pass
    with pytest.raises(TypeError, match=r"NDArray\(buffer\) takes a NumPy array"):
        mxdeconv.NDArray(5)


# -- Gluon initializers -------------------------------------------------------------------
@pytest.mark.parametrize("make, error, match", [
    (lambda: gluon.Normal(-0.02), MXNetError, "Normal sigma must be a finite real number >= 0"),
    (lambda: gluon.Uniform("x"), TypeError, "Uniform scale must be a real number"),
    (lambda: gluon.Xavier(magnitude=-3), MXNetError, "Xavier magnitude must be"),
    (lambda: gluon.Xavier(rnd_type="lol"), MXNetError, "Xavier rnd_type must be one of"),
    (lambda: gluon.Constant("0.1x"), TypeError, "Constant value must be a real number"),
    (lambda: gluon.Constant([1, 2]), TypeError, "Constant value must be a real number"),
    (lambda: gluon.Constant(float("nan")), MXNetError, "Constant value must be a finite"),
])
def test_initializer_arguments_are_checked_when_made(make, error, match):
    with pytest.raises(error, match=match):
        make()


class _Failing(gluon.Initializer):
    def __call__(self, name, shape, dtype):
        raise MXNetError(f"planted failure for {name}")


def test_a_layer_initialises_all_its_parameters_or_none():
    layer = gluon.Conv2DTranspose(4, 3, in_channels=4, bias_initializer=_Failing())
    with pytest.raises(MXNetError, match="planted failure"):
        layer.initialize()
    with pytest.raises(MXNetError, match="has not been initialized"):
        layer.weight.data()


def test_a_deep_copied_layer_keeps_its_gradients():
    import copy
    layer = gluon.Conv2DTranspose(4, 3, in_channels=4)
    layer.initialize()
    clone = copy.deepcopy(layer)
    assert clone.weight.grad_req == "write" and clone.weight.grad().shape == (4, 4, 3, 3)
    assert clone.weight.data() is not layer.weight.data()
    np.testing.assert_array_equal(clone.weight.data().asnumpy(), layer.weight.data().asnumpy())
    x = nd.ones((1, 4, 5, 5))
    np.testing.assert_array_equal(clone(x).asnumpy(), layer(x).asnumpy())
