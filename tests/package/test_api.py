"""The public API: nd arrays, nd.Deconvolution / nd.Deconvolution_backward on both
implementations against the float64 reference, req semantics, dispatch."""
import importlib
import math
import re
import threading
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

import mxdeconv
from mxdeconv import MXNetError, NDArray, nd
from helpers import host
from strategies import BLOCKED_CASES, EDGE_CASES, configs, reqs, seeds, wide_channels

IMPLS = ("numpy", "onednn")
BY_IMPL = pytest.mark.parametrize("impl", IMPLS)
EDGES = pytest.mark.parametrize("name", sorted(EDGE_CASES))
GRAD_NAMES = ("data_grad", "weight_grad", "bias_grad")
BLOCKED_NAME = re.compile(r"[A-Za-z]+(\d+[A-Za-z])*")  # nChw16c, aBcd16b, gOIhw16i16o...


def tolerance(cfg):
    """float32 results against the float64 reference on the same (float32) inputs.

    Every result element is a sum of at most ``cfg.max_terms`` products of values
    in [-1, 1]; float32 rounding (eps 6e-8 per operation) accumulates roughly as
    sqrt(terms) for random signs, and oneDNN's blocked kernels sum in another
    order than NumPy.  1e-4 * (1 + sqrt(terms)) is > 100x that error yet far
    below a wrong or shifted term (O(0.1..1), see test_reference's off-by-one test).
    """
    return dict(rtol=1e-4, atol=1e-4 * (1 + math.sqrt(cfg.max_terms)))


def as_inputs(arrays, as_numpy):
    """NumPy arrays as they are, or copied into NDArrays."""
    return tuple(a if as_numpy or a is None else nd.array(a) for a in arrays)


def _forget_last_impl():
    # Reset this thread's record so that last_impl() after a call can only name
    # the implementation that ran *that* call (registry internals, on purpose).
    mxdeconv.ops.registry.dispatch.last = None


def forced(impl, fn, *args, dispatches=True, **kwargs):
    """Call ``fn`` with ``impl`` forced and prove that ``impl`` ran it."""
    _forget_last_impl()
    with mxdeconv.use_impl(impl):
        result = fn(*args, **kwargs)
    assert mxdeconv.last_impl() == (impl if dispatches else None)
    return result


def small_case(dtype=np.float32, name="anisotropic_2d", seed=0):
    cfg = EDGE_CASES[name]
    return cfg, cfg.arrays(seed, dtype)


# -- the extension and runtime ------------------------------------------------
def test_extension_is_built():
    """Fails (never skips) when the oneDNN extension is missing or does not load."""
    ops = importlib.import_module("mxdeconv.onednn._ops")
    assert mxdeconv.onednn._loader.extension is ops, mxdeconv.onednn._loader.ERROR
    assert mxdeconv.runtime_info()["onednn_version"].startswith("3.2")


def test_mxnet_error_is_exported_value_error():
    assert issubclass(MXNetError, ValueError)
    assert MXNetError is mxdeconv._core.errors.MXNetError


# -- NDArray ---------------------------------------------------------------------
def test_array_copies_never_aliases():
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    arr = nd.array(source)
    source[:] = -1
    assert_array_equal(arr.asnumpy(), np.arange(6).reshape(2, 3))
    snapshot = arr.asnumpy()
    snapshot[:] = 7
    assert_array_equal(np.asarray(arr), np.arange(6).reshape(2, 3))
    again = nd.array(arr)
    np.asarray(again)[:] = 3
    assert_array_equal(arr.asnumpy(), np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("source, dtype", [
    ([1, 2], np.float32), (np.ones(2, np.float64), np.float32),
    (np.ones(2, np.float16), np.float32), (np.ones(2, np.int64), np.float32)])
def test_array_dtype(source, dtype):
    """float32 from anything but an NDArray, as MXNet 1.9.1's nd.array."""
    arr = nd.array(source)
    assert isinstance(arr, NDArray)
    assert arr.dtype == dtype and np.asarray(arr).dtype == dtype
    assert arr.shape == (2,) and arr.layout == "default"


@pytest.mark.parametrize("make, fill", [(nd.zeros, 0), (nd.ones, 1), (nd.empty, None)])
def test_constructors(make, fill):
    for shape, dtype in [((2, 3, 4), np.float32), ((5,), np.float64), (4, np.float16)]:
        arr = make(shape, dtype=dtype)
        expected_shape = (shape,) if isinstance(shape, int) else shape
        assert arr.shape == expected_shape and arr.dtype == dtype
        assert arr.layout == "default"
        values = np.asarray(arr)
        assert values.shape == expected_shape and values.dtype == dtype
        if fill is not None:
            assert_array_equal(values, np.full(expected_shape, fill, dtype))
    assert make((2,)).dtype == np.float32


# -- forward and backward against the reference, both implementations -------------
def check_forward(impl, cfg, seed, req="write", give_out=False, as_numpy=False):
    """One forced forward call against the reference, with ``req`` semantics."""
    data, weight, bias = cfg.arrays(seed, np.float32)
    copies = [None if a is None else a.copy() for a in (data, weight, bias)]
    expected = cfg.ref_forward(data, weight, bias)
    out = old = None
    if give_out or req in ("add", "null"):
        old = cfg.out_grad(seed, np.float32)  # arbitrary previous contents
        out = nd.array(old)
    inputs = as_inputs((data, weight, bias), as_numpy)
    result = forced(impl, nd.Deconvolution, *inputs, out=out, req=req,
                    dispatches=req != "null", **cfg.kwargs())
    if out is not None:
        assert result is out
    if req == "add":
        expected = old + expected
    elif req == "null":
        expected = old
    assert result.shape == cfg.out_shape and result.dtype == np.float32
    assert result.layout == "default" or BLOCKED_NAME.fullmatch(result.layout), result.layout
    assert_allclose(host(result), expected, **tolerance(cfg))
    # inputs are read, never written (nor aliased, for NumPy inputs)
    for before, given_input in zip(copies, inputs):
        if before is not None:
            assert_array_equal(host(given_input), before)


def check_backward(impl, cfg, seed, req=("write",) * 3, give=(False,) * 3, as_numpy=False):
    """One forced backward call against the reference, with per-gradient ``req``."""
    data, weight, bias = cfg.arrays(seed, np.float32)
    og = cfg.out_grad(seed, np.float32)
    refs = cfg.ref_backward(og, data, weight)
    rng = np.random.default_rng(seed + 2)
    olds = [None if ref is None else rng.uniform(-1, 1, ref.shape).astype(np.float32)
            for ref in refs]
    grads = tuple(nd.array(old) if old is not None and (g or r == "add") else None
                  for old, g, r in zip(olds, give, req))
    effective = req[:2] + (("null",) if cfg.no_bias else req[2:])
    og_in, data_in, weight_in, bias_in = as_inputs((og, data, weight, bias), as_numpy)
    results = forced(impl, nd.Deconvolution_backward, og_in, data_in, weight_in, bias_in,
                     req=req, grads=grads, dispatches=any(r != "null" for r in effective),
                     **cfg.kwargs())
    assert len(results) == 3
    tol = tolerance(cfg)
    for name, res, ref, old, grad, r in zip(GRAD_NAMES, results, refs, olds, grads, effective):
        if r == "null":
            assert res is None, name
            if grad is not None:  # left untouched
                assert_array_equal(host(grad), old, err_msg=name)
            continue
        if grad is not None:
            assert res is grad, name
        expected = ref + old if r == "add" else ref
        assert res.shape == ref.shape and res.dtype == np.float32, name
        assert_allclose(host(res), expected, err_msg=name, **tol)


@BY_IMPL
@settings(max_examples=120, deadline=None)
@given(cfg=configs(), seed=seeds, req=reqs, give_out=st.booleans(), as_numpy=st.booleans())
def test_forward_matches_reference(impl, cfg, seed, req, give_out, as_numpy):
    check_forward(impl, cfg, seed, req, give_out, as_numpy)


@BY_IMPL
@settings(max_examples=120, deadline=None)
@given(cfg=configs(), seed=seeds, req=st.tuples(reqs, reqs, reqs),
       give=st.tuples(st.booleans(), st.booleans(), st.booleans()), as_numpy=st.booleans())
def test_backward_matches_reference(impl, cfg, seed, req, give, as_numpy):
    check_backward(impl, cfg, seed, req, give, as_numpy)


WIDE = configs(channels=wide_channels, max_groups=2, max_spatial=2, max_batch=1)


@BY_IMPL
@settings(max_examples=40, deadline=None)
@given(cfg=WIDE, seed=seeds, req=reqs, give_out=st.booleans())
def test_forward_blocked_layouts(impl, cfg, seed, req, give_out):
    """8/16/17 channels per group: oneDNN picks blocked (and padded) layouts."""
    check_forward(impl, cfg, seed, req, give_out)


@BY_IMPL
@settings(max_examples=40, deadline=None)
@given(cfg=WIDE, seed=seeds, req=st.tuples(reqs, reqs, reqs),
       give=st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_backward_blocked_layouts(impl, cfg, seed, req, give):
    check_backward(impl, cfg, seed, req, give)


@BY_IMPL
@pytest.mark.parametrize("name", sorted(BLOCKED_CASES))
@pytest.mark.parametrize("req", ["write", "add"])
def test_blocked_cases(impl, name, req):
    cfg = BLOCKED_CASES[name]
    check_forward(impl, cfg, seed=9, req=req)
    check_backward(impl, cfg, seed=9, req=(req,) * 3)


@BY_IMPL
@EDGES
def test_edge_cases_forward_and_backward(impl, name):
    cfg = EDGE_CASES[name]
    data, weight, bias = cfg.arrays(7, np.float32)
    og = cfg.out_grad(7, np.float32)
    tol = tolerance(cfg)
    out = forced(impl, nd.Deconvolution, data, weight, bias, **cfg.kwargs())
    assert_allclose(host(out), cfg.ref_forward(data, weight, bias), **tol)
    results = forced(impl, nd.Deconvolution_backward, og, data, weight, bias, **cfg.kwargs())
    for res, ref in zip(results, cfg.ref_backward(og, data, weight)):
        assert_allclose(host(res), ref, **tol)


@EDGES
def test_float64_runs_numpy_exactly(name):
    cfg = EDGE_CASES[name]
    data, weight, bias = cfg.arrays(8, np.float64)
    _forget_last_impl()
    out = nd.Deconvolution(data, weight, bias, **cfg.kwargs())
    assert mxdeconv.last_impl() == "numpy" and out.dtype == np.float64
    assert_allclose(host(out), cfg.ref_forward(data, weight, bias), rtol=1e-10, atol=1e-10)


def test_float16_runs_numpy():
    cfg, (data, weight, bias) = small_case(np.float16)
    _forget_last_impl()
    out = nd.Deconvolution(data, weight, bias, **cfg.kwargs())
    assert mxdeconv.last_impl() == "numpy" and out.dtype == np.float16
    # float32 accumulation, one final rounding to float16 (relative 2**-11)
    assert_allclose(host(out), cfg.ref_forward(data, weight, bias), rtol=2e-3, atol=2e-3)


# -- req semantics -------------------------------------------------------------------
@BY_IMPL
def test_forward_req_sequence_on_one_out(impl):
    """write, add, add, write, null on the same out (and the same cached primitive)."""
    cfg, (data, weight, bias) = small_case()
    new = cfg.ref_forward(data, weight, bias)
    out = nd.array(np.full(cfg.out_shape, 5, np.float32))
    for req, expected in [("write", new), ("add", 2 * new), ("add", 3 * new),
                          ("inplace", new), ("write", new), ("null", new)]:
        forced(impl, nd.Deconvolution, data, weight, bias, out=out, req=req,
               dispatches=req != "null", **cfg.kwargs())
        assert_allclose(host(out), expected, err_msg=req, **tolerance(cfg))
    fresh = forced(impl, nd.Deconvolution, data, weight, bias, **cfg.kwargs())
    assert fresh is not out
    assert_allclose(host(fresh), new, **tolerance(cfg))


@BY_IMPL
def test_backward_add_accumulates_twice(impl):
    cfg, (data, weight, bias) = small_case()
    og = cfg.out_grad(0, np.float32)
    refs = cfg.ref_backward(og, data, weight)
    grads = tuple(nd.ones(ref.shape) for ref in refs)
    for times in (1, 2):
        results = forced(impl, nd.Deconvolution_backward, og, data, weight, bias,
                         req=("add", "add", "add"), grads=grads, **cfg.kwargs())
        for name, res, grad, ref in zip(GRAD_NAMES, results, grads, refs):
            assert res is grad, name
            assert_allclose(host(res), 1 + times * ref, err_msg=name, **tolerance(cfg))


@BY_IMPL
def test_backward_null_leaves_grads_untouched(impl):
    cfg, (data, weight, bias) = small_case()
    og = cfg.out_grad(0, np.float32)
    refs = cfg.ref_backward(og, data, weight)
    grads = tuple(nd.array(np.full(ref.shape, 9, np.float32)) for ref in refs)
    results = forced(impl, nd.Deconvolution_backward, og, data, weight, bias,
                     req=("null", "write", "null"), grads=grads, **cfg.kwargs())
    assert results[0] is None and results[2] is None
    assert_allclose(host(results[1]), refs[1], **tolerance(cfg))
    assert_array_equal(host(grads[0]), np.full(refs[0].shape, 9))
    assert_array_equal(host(grads[2]), np.full(refs[2].shape, 9))
    assert forced(impl, nd.Deconvolution_backward, og, data, weight, bias,
                  req=("null",) * 3, dispatches=False, **cfg.kwargs()) == (None, None, None)


@BY_IMPL
def test_no_bias_has_no_bias_grad(impl):
    cfg = EDGE_CASES["groups3_2d"]
    data, weight, _ = cfg.arrays(1, np.float32)
    kwargs = {**cfg.kwargs(), "no_bias": True}
    results = forced(impl, nd.Deconvolution_backward, cfg.out_grad(1, np.float32), data,
                     weight, None, **kwargs)
    assert results[2] is None and results[0] is not None and results[1] is not None


# -- layouts, chaining and reuse -------------------------------------------------------
def chained_configs():
    """Two layers, the second eating the first's output (8 channels: blocked layouts)."""
    first = replace(EDGE_CASES["anisotropic_2d"], out_per_group=8, batch=1)
    second = replace(first, in_per_group=8, out_per_group=2, spatial=first.out_spatial,
                     stride=(1, 1), adj=(0, 0))
    return first, second


@pytest.mark.parametrize("first_impl, second_impl", [(a, b) for a in IMPLS for b in IMPLS])
def test_chained_layers_across_layouts(first_impl, second_impl):
    first, second = chained_configs()
    data, w1, b1 = first.arrays(3, np.float32)
    _, w2, b2 = second.arrays(4, np.float32)
    hidden = forced(first_impl, nd.Deconvolution, data, w1, b1, **first.kwargs())
    assert hidden.layout == "default" or BLOCKED_NAME.fullmatch(hidden.layout), hidden.layout
    result = forced(second_impl, nd.Deconvolution, hidden, w2, b2, **second.kwargs())
    ref_hidden = first.ref_forward(data, w1, b1)
    expected = second.ref_forward(ref_hidden, w2, b2)
    assert_allclose(host(result), expected, rtol=1e-4,
                    atol=1e-4 * (1 + math.sqrt(first.max_terms * second.max_terms)))
    assert_allclose(host(hidden), ref_hidden, **tolerance(first))
    assert hidden.layout == "default"  # np.asarray turned it back
    # a blocked array as out_grad, and as the target of req='add'
    hidden = forced(first_impl, nd.Deconvolution, data, w1, b1, **first.kwargs())
    og = expected.astype(np.float32)
    grads = forced(second_impl, nd.Deconvolution_backward, nd.array(og), hidden, w2, b2,
                   **second.kwargs())
    refs = second.ref_backward(og, ref_hidden, w2)
    for res, ref in zip(grads, refs):
        assert_allclose(host(res), ref, rtol=1e-3, atol=1e-3 * (1 + np.abs(ref).max()))
    hidden = forced(first_impl, nd.Deconvolution, data, w1, b1, **first.kwargs())
    forced(second_impl, nd.Deconvolution, data, w1, b1, out=hidden, req="add",
           **first.kwargs())
    assert_allclose(host(hidden), 2 * ref_hidden, **tolerance(first))


@pytest.mark.parametrize("mode", ["predict_mode", "train_mode"])
def test_weight_reused_with_other_groups_and_impls(mode):
    """One weight NDArray (4, 2, 3, 3) read as 1 group (2 filters) then 2 groups
    (4 filters): a weight kept in a oneDNN layout after the first call must
    still mean the same values."""
    base = EDGE_CASES["anisotropic_2d"]
    one = replace(base, in_per_group=4, out_per_group=2, num_group=1)
    two = replace(base, in_per_group=2, out_per_group=2, num_group=2)
    data, weight_np, _ = one.arrays(5, np.float32)
    weight = nd.array(weight_np)
    with getattr(mxdeconv.autograd, mode)():
        for cfg, impl in [(one, "onednn"), (two, "onednn"), (one, "numpy"), (two, "numpy"),
                          (one, "onednn")]:
            bias = None if cfg.no_bias else np.linspace(-1, 1, cfg.num_filter,
                                                        dtype=np.float32)
            out = forced(impl, nd.Deconvolution, data, weight, bias, **cfg.kwargs())
            assert_allclose(host(out), cfg.ref_forward(data, weight_np, bias),
                            err_msg=f"{cfg.num_group} groups on {impl}", **tolerance(cfg))
    assert_array_equal(host(weight), weight_np)


# -- dispatch -------------------------------------------------------------------------
def test_default_dispatch_and_explain():
    cfg, arrays32 = small_case(np.float32)
    _, arrays64 = small_case(np.float64)
    _forget_last_impl()
    nd.Deconvolution(*arrays32, **cfg.kwargs())
    assert mxdeconv.last_impl() == "onednn"
    nd.Deconvolution(*arrays64, **cfg.kwargs())
    assert mxdeconv.last_impl() == "numpy"
    text32 = mxdeconv.explain(*arrays32, **cfg.kwargs())
    text64 = mxdeconv.explain(*arrays64, **cfg.kwargs())
    assert isinstance(text32, str) and "onednn" in text32
    assert "numpy" in text64 and "float64" in text64


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_forcing_onednn_on_unsupported_dtype_raises(dtype):
    cfg, arrays = small_case(dtype)
    with mxdeconv.use_impl("onednn"), pytest.raises(MXNetError):
        nd.Deconvolution(*arrays, **cfg.kwargs())
    with mxdeconv.use_impl("onednn"), pytest.raises(MXNetError):
        nd.Deconvolution_backward(cfg.out_grad(0, dtype), *arrays, **cfg.kwargs())


def test_use_impl_nests_and_restores():
    cfg, arrays = small_case()
    with mxdeconv.use_impl("numpy"):
        with mxdeconv.use_impl("onednn"):
            nd.Deconvolution(*arrays, **cfg.kwargs())
            assert mxdeconv.last_impl() == "onednn"
        nd.Deconvolution(*arrays, **cfg.kwargs())
        assert mxdeconv.last_impl() == "numpy"
    nd.Deconvolution(*arrays, **cfg.kwargs())
    assert mxdeconv.last_impl() == "onednn"


def test_last_impl_is_per_thread():
    cfg, arrays = small_case()
    with mxdeconv.use_impl("numpy"):
        nd.Deconvolution(*arrays, **cfg.kwargs())
    seen = []
    thread = threading.Thread(target=lambda: seen.append(mxdeconv.last_impl()))
    thread.start()
    thread.join()
    assert seen == [None] and mxdeconv.last_impl() == "numpy"


def test_forward_empty_batch():
    cfg = replace(EDGE_CASES["anisotropic_2d"], batch=0)
    out = nd.Deconvolution(*cfg.arrays(0, np.float32), **cfg.kwargs())
    assert out.shape == cfg.out_shape and host(out).size == 0


# -- errors ---------------------------------------------------------------------------
def test_errors_leave_out_untouched():
    cfg, (data, weight, bias) = small_case()
    out = nd.array(np.full(cfg.out_shape, 4, np.float32))
    bad_calls = [
        (dict(weight=weight[:, :1]), "weight shape mismatch"),
        (dict(weight=weight.astype(np.float64)), "weight dtype mismatch"),
        (dict(bias=bias[:1]), "bias shape mismatch"),
        (dict(req="sometimes"), "req must be one of"),
        (dict(stride=(0, 1)), "incorrect stride"),
    ]
    for change, message in bad_calls:
        args = dict(data=data, weight=weight, bias=bias, out=out, req="add",
                    **cfg.kwargs())
        args.update(change)
        with pytest.raises(MXNetError, match=re.escape(message)):
            nd.Deconvolution(**args)
        assert_array_equal(host(out), np.full(cfg.out_shape, 4))
    with pytest.raises(MXNetError, match="out shape mismatch"):
        nd.Deconvolution(data, weight, bias, out=nd.zeros((1,)), **cfg.kwargs())


def test_unknown_keyword_is_a_type_error():
    cfg, arrays = small_case()
    with pytest.raises(TypeError, match="kernal"):
        nd.Deconvolution(*arrays, kernal=(3, 3), **cfg.kwargs())
