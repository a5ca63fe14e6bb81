"""Blocked layouts, lazy reorders and the inference/training weight policy."""
import numpy as np
import pytest

import mxdeconv
from mxdeconv import autograd, nd
from mxdeconv.semantics import attributes

from reference import reference_forward

# A layer for which oneDNN on AVX-512 picks blocked layouts (16 channels a block).
PARAMS = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1), num_filter=32)


#: oneDNN's own first choice: blocked layouts here on every run (conftest).
pytestmark = pytest.mark.usefixtures("onednn_first_choice")


def _inputs(rng, batch=2, channels=32, size=6):
    data = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    weight = (0.1 * rng.standard_normal((channels, 32, 3, 3))).astype(np.float32)
    return data, weight


def _expected(data, weight):
    return reference_forward(data, weight, None, kernel=(3, 3), stride=(2, 2),
                             dilate=(1, 1), pad_l=(1, 1), pad_r=(0, 0), num_group=1)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _clean_counters():
    mxdeconv.reset_reorder_counts()
    yield


def test_result_keeps_the_primitive_layout_until_read(rng):
    data, weight = _inputs(rng)
    out = nd.Deconvolution(data, weight, **PARAMS)
    chosen = mxdeconv.onednn.planner.forward_plan(
        attributes.infer_geometry(attributes.parse_params(PARAMS), data.shape),
        "float32", False, False).dst
    assert out.layout == ("default" if chosen.is_plain else chosen.name)
    assert mxdeconv.reorder_counts().get("to_default", 0) == 0
    values = out.asnumpy()          # reading turns it default, in place
    assert out.layout == "default"
    np.testing.assert_allclose(values, _expected(data, weight), rtol=1e-4, atol=1e-4)


def test_blocked_output_fed_onward_is_not_reordered(rng):
    data, weight = _inputs(rng)
    first = nd.Deconvolution(data, weight, **PARAMS)
    if first.layout == "default":
        pytest.skip("oneDNN chose the plain layout on this CPU; nothing to prove")
    second_weight = (0.1 * rng.standard_normal((32, 8, 1, 1))).astype(np.float32)
    mxdeconv.reset_reorder_counts()
    second = nd.Deconvolution(first, second_weight, kernel=(1, 1), num_filter=8)
    counts = mxdeconv.reorder_counts()
    plan = mxdeconv.onednn.planner.forward_plan(
        attributes.infer_geometry(
            attributes.parse_params(dict(kernel=(1, 1), num_filter=8)), first.shape),
        "float32", False, False)
    if plan.src.name == first.layout:
        assert counts.get("data", 0) == 0, counts
    assert counts.get("to_default", 0) == 0, counts
    expected = reference_forward(first.asnumpy(), second_weight, None, kernel=(1, 1),
                                 stride=(1, 1), dilate=(1, 1), pad_l=(0, 0),
                                 pad_r=(0, 0), num_group=1)
    np.testing.assert_allclose(second.asnumpy(), expected, rtol=1e-4, atol=1e-4)


def test_inference_weight_is_reordered_once_and_kept(rng):
    data, weight_np = _inputs(rng)
    weight = nd.array(weight_np)
    with autograd.predict_mode():
        nd.Deconvolution(data, weight, **PARAMS)
        first = mxdeconv.reorder_counts().get("weights", 0)
        layout = weight.layout
        for _ in range(3):
            out = nd.Deconvolution(data, weight, **PARAMS)
        assert mxdeconv.reorder_counts().get("weights", 0) == first
    assert first <= 1
    assert (layout == "default") == (first == 0)
    np.testing.assert_allclose(out.asnumpy(), _expected(data, weight_np), rtol=1e-4,
                               atol=1e-4)
    # Reading the weight gives the user's values back, in the default layout.
    np.testing.assert_array_equal(weight.asnumpy(), weight_np)
    assert weight.layout == "default"


def test_training_weight_stays_default(rng):
    data, weight_np = _inputs(rng)
    weight = nd.array(weight_np)
    with autograd.train_mode():
        for _ in range(2):
            out = nd.Deconvolution(data, weight, **PARAMS)
            assert weight.layout == "default"
    np.testing.assert_allclose(out.asnumpy(), _expected(data, weight_np), rtol=1e-4,
                               atol=1e-4)


def test_blocked_inference_weight_returns_to_default_in_training(rng):
    data, weight_np = _inputs(rng)
    weight = nd.array(weight_np)
    with autograd.predict_mode():
        nd.Deconvolution(data, weight, **PARAMS)
    with autograd.train_mode():
        out = nd.Deconvolution(data, weight, **PARAMS)
    assert weight.layout == "default"
    np.testing.assert_array_equal(weight.asnumpy(), weight_np)
    np.testing.assert_allclose(out.asnumpy(), _expected(data, weight_np), rtol=1e-4,
                               atol=1e-4)


def test_fallback_reads_blocked_arrays(rng):
    data, weight = _inputs(rng)
    blocked = nd.Deconvolution(data, weight, **PARAMS)
    with mxdeconv.use_impl("numpy"):
        out = nd.Deconvolution(blocked, np.ones((32, 1, 1, 1), np.float32),
                               kernel=(1, 1), num_filter=1)
    assert blocked.layout == "default"
    np.testing.assert_allclose(out.asnumpy()[:, 0], _expected(data, weight).sum(axis=1),
                               rtol=1e-4, atol=1e-3)


def test_out_in_another_layout_is_written_and_added(rng):
    data, weight = _inputs(rng)
    expected = _expected(data, weight)
    out = nd.array(np.full(expected.shape, 2.0, np.float32))
    result = nd.Deconvolution(data, weight, out=out, req="add", **PARAMS)
    assert result is out
    np.testing.assert_allclose(out.asnumpy(), expected + 2.0, rtol=1e-4, atol=1e-4)
    nd.Deconvolution(data, weight, out=out, req="write", **PARAMS)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-4, atol=1e-4)


def test_out_given_blocked_accumulates_in_place(rng):
    data, weight = _inputs(rng)
    out = nd.Deconvolution(data, weight, **PARAMS)
    layout = out.layout
    nd.Deconvolution(data, weight, out=out, req="add", **PARAMS)
    assert out.layout == layout
    np.testing.assert_allclose(out.asnumpy(), 2 * _expected(data, weight), rtol=1e-4,
                               atol=1e-4)


def test_backward_reorders_out_grad_once(rng):
    data, weight = _inputs(rng)
    out_grad = rng.standard_normal((2, 32, 12, 12)).astype(np.float32)
    geom = attributes.infer_geometry(attributes.parse_params(PARAMS), data.shape)
    plan = mxdeconv.onednn.planner.backward_plans(geom, "float32")
    nd.Deconvolution_backward(out_grad, data, weight, **PARAMS)
    # out_grad arrives plain: it is reordered once into each blocked layout the
    # two backward passes read (one copy when they agree, as they mostly do;
    # which layouts oneDNN offers, and the planner picks, depends on the CPU).
    reorders = mxdeconv.reorder_counts().get("out_grad", 0)
    wanted = {layout for layout in (plan.data.diff_dst, plan.weights.diff_dst)
              if not layout.is_plain}
    assert reorders == len(wanted), (reorders, wanted)


#: Data tensors whose layouts oneDNN may block: channels that fill no whole
#: block (19, 20), 1-D to 3-D, realistic channel counts.
_TAKE_LAYERS = [
    ((2, 20, 5, 5), dict(kernel=(3, 3), dilate=(2, 2), num_filter=19)),
    ((2, 64, 4, 8, 8), dict(kernel=(4, 4, 4), stride=(2, 2, 2), pad=(1, 1, 1), num_filter=32)),
    ((4, 512, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256)),
    ((2, 128, 33), dict(kernel=(8,), stride=(4,), pad=(2,), num_filter=64)),
]


def _data_layouts():
    """Every data layout oneDNN offers here for the layers' results (forward
    dst, backward-data diff_src): which ones depends on the CPU."""
    layouts = {}
    for shape, params in _TAKE_LAYERS:
        geom = attributes.infer_geometry(attributes.parse_params(dict(params, no_bias=False)),
                                         shape)
        for candidates, tensor in (
                (mxdeconv._ops.forward_candidates(geom, "float32", False, False), "dst"),
                (mxdeconv._ops.backward_data_candidates(geom, "float32"), "diff_src")):
            for candidate in candidates:
                if not candidate.is_reference:
                    layout = getattr(candidate.build(), tensor)
                    layouts.setdefault((layout.name, layout.shape), layout)
    return list(layouts.values())


def test_take_reads_the_elements_to_plain_would_give_in_every_offered_layout(rng):
    layouts = _data_layouts()
    assert any(layout.is_plain for layout in layouts)
    for layout in layouts:
        values = rng.standard_normal(layout.shape).astype(np.float32)
        buffer = layout.from_plain(values)
        # Random elements, every channel (padded blocks' last one included) and
        # both corners of every axis.
        count = 64
        index = tuple(rng.integers(0, n, size=(count, 1)) for n in layout.shape)
        index = (index[0], np.arange(layout.shape[1])[None, :]) + index[2:]
        np.testing.assert_array_equal(layout.take(buffer, index), values[index],
                                      err_msg=repr(layout))
        for corner in ([0] * len(layout.shape), [n - 1 for n in layout.shape]):
            at = tuple(np.array([i]) for i in corner)
            assert layout.take(buffer, at)[0] == values[tuple(corner)], (layout, corner)


def test_take_refuses_weights_and_indices_out_of_range():
    shape, params = _TAKE_LAYERS[2]
    geom = attributes.infer_geometry(attributes.parse_params(dict(params, no_bias=False)),
                                     shape)
    plan = next(c for c in mxdeconv._ops.forward_candidates(geom, "float32", False, False)
                if not c.is_reference).build()
    weights = plan.weights
    with pytest.raises(mxdeconv.MXNetError, match="weights layout"):
        weights.take(weights.from_plain(np.zeros(weights.shape, np.float32)),
                     tuple(np.zeros(1, np.int64) for _ in weights.shape))
    dst = plan.dst
    buffer = dst.from_plain(np.zeros(dst.shape, np.float32))
    for axis in range(len(dst.shape)):
        for bad in (-1, dst.shape[axis]):
            index = [np.zeros(1, np.int64) for _ in dst.shape]
            index[axis] = np.array([bad])
            with pytest.raises(mxdeconv.MXNetError, match=f"out of range for axis {axis}"):
                dst.take(buffer, tuple(index))
    with pytest.raises(mxdeconv.MXNetError, match="one array per axis"):
        dst.take(buffer, (np.zeros(1, np.int64),))
    zeros = tuple(np.zeros(1, np.int64) for _ in dst.shape)
    with pytest.raises(mxdeconv.MXNetError, match=f"buffer must be the {dst.desc.size}"):
        dst.take(buffer.reshape(-1)[:-4], zeros)   # a buffer too short
    with pytest.raises(TypeError, match="axis 0 must hold integers"):
        dst.take(buffer, (np.zeros(1),) + zeros[1:])
