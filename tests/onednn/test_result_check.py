"""The result check: one call's own Deconvolution result, sampled, against NumPy.

:mod:`mxdeconv.onednn.result_check` guards a provisional plan's calls until
the kernel check has run.  These tests hold it to both halves of that job:

* a correct float32 result always passes (the float64 reference rounded to
  float32, NumPy's float32 computation, another summation order, a result one
  ulp off), on realistic layers and on random small geometries, with large
  and very unequal magnitudes: a false positive would throw away a good plan;
* the structured defects a wrong kernel makes (a bias added twice over a
  channel block or an image, an image or a channel or a border row wrong, a
  dropped tap, NaN in a channel, a wrong tap of the weight gradient, a bias
  gradient off in one channel) are caught, with a reason that names the pass,
  how many sampled values were wrong and where.

The references are :mod:`mxdeconv.semantics.deconv_numpy` in float64, rounded
to float32 as a correct float32 kernel would round them.
"""
from __future__ import annotations

import functools
import re
from typing import NamedTuple, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxdeconv.onednn import result_check
from mxdeconv.semantics import deconv_numpy
from mxdeconv.semantics.attributes import DeconvGeometry, infer_geometry, parse_params
from helpers import geometry_of
from strategies import configs, seeds

# -- layers ---------------------------------------------------------------------------
_K4S2P1 = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1))
_DCGAN = dict(_K4S2P1, num_filter=256)
_FCN32S = dict(kernel=(64, 64), stride=(32, 32), pad=(16, 16), num_filter=21)

#: name -> (data shape, Deconvolution parameters; a bias unless no_bias says otherwise).
LAYERS = {
    # realistic layers: a DCGAN generator's 512 -> 256 step, FCN-32s' score upsampling
    "dcgan_b8": ((8, 512, 4, 4), _DCGAN),
    "dcgan_b1": ((1, 512, 4, 4), _DCGAN),
    "fcn32s": ((1, 21, 4, 4), _FCN32S),
    "upsample_b4": ((4, 64, 16, 16), dict(_K4S2P1, num_filter=64)),
    # every dimensionality
    "1d_adj": ((2, 128, 9), dict(kernel=(5,), stride=(2,), pad=(2,), adj=(1,), num_filter=64)),
    "3d": ((2, 64, 3, 4, 3), dict(kernel=(3, 3, 3), stride=(2, 2, 2), pad=(1, 1, 1),
                                  adj=(1, 0, 1), num_filter=32)),
    "3d_nobias": ((1, 96, 2, 3, 2), dict(kernel=(2, 3, 2), stride=(1, 2, 2), dilate=(2, 1, 2),
                                         pad=(1, 1, 0), adj=(0, 1, 1), num_filter=64,
                                         no_bias=True)),
    # groups, depthwise (num_group == channels), depthwise with a multiplier
    "groups4": ((2, 128, 6, 6), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=256,
                                     num_group=4)),
    "groups4_nobias": ((3, 64, 5, 5), dict(kernel=(2, 3), stride=(2, 1), pad=(0, 1),
                                           num_filter=128, num_group=4, no_bias=True)),
    "depthwise": ((2, 64, 8, 8), dict(_K4S2P1, num_filter=64, num_group=64)),
    "depthwise_x2": ((2, 64, 8, 8), dict(kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                                         num_filter=128, num_group=64)),
    # dilation; crops where pad < adj (a negative right crop); anisotropic everything
    "dilated": ((2, 64, 7, 7), dict(kernel=(3, 3), stride=(1, 1), dilate=(2, 2), pad=(2, 2),
                                    num_filter=64)),
    "pad_lt_adj": ((2, 64, 5, 5), dict(kernel=(3, 3), stride=(2, 2), pad=(0, 0), adj=(1, 1),
                                       num_filter=96)),
    "anisotropic": ((2, 64, 5, 6), dict(kernel=(3, 2), stride=(2, 3), dilate=(2, 1),
                                        pad=(0, 1), adj=(1, 2), num_filter=64)),
    "target_shape": ((2, 64, 5, 5), dict(kernel=(4, 4), stride=(2, 2), target_shape=(11, 10),
                                         num_filter=64)),
    # stride > kernel: output pixels no tap reaches (the bias alone, or exactly zero)
    "stride_gt_kernel": ((2, 64, 5, 5), dict(kernel=(2, 2), stride=(3, 3), adj=(2, 1),
                                             num_filter=64)),
    "stride_gt_kernel_nobias": ((2, 64, 5, 5), dict(kernel=(2, 2), stride=(3, 3), adj=(2, 1),
                                                    num_filter=64, no_bias=True)),
    "k1_stride3": ((3, 256, 4), dict(kernel=(1,), stride=(3,), adj=(2,), num_filter=128)),
    # batch 1 and big enough that the sample holds every border position: a corrupted
    # corner element is sampled, whatever the seed
    "corner": ((1, 16, 32, 32), dict(_K4S2P1, num_filter=16)),
}


def _geometry(name: str) -> DeconvGeometry:
    shape, params = LAYERS[name]
    return infer_geometry(parse_params(dict(dict(no_bias=False), **params)), shape)


def _magnitudes(rng: np.random.Generator, shape, scale: str) -> np.ndarray:
    """Standard normal values; times 1e3 ("large"); or each times 10**U(-4, 4)
    ("mixed": sums of very unequal products, which cancel)."""
    values = rng.standard_normal(shape)
    if scale == "large":
        values *= 1e3
    elif scale == "mixed":
        values *= 10.0 ** rng.uniform(-4, 4, size=shape)
    return values.astype(np.float32)


class Case(NamedTuple):
    """A layer's float32 inputs and its float64 references rounded to float32
    (read-only: the tests corrupt copies)."""
    geom: DeconvGeometry
    data: np.ndarray
    weight: np.ndarray
    bias: Optional[np.ndarray]
    out_grad: np.ndarray
    out: np.ndarray
    data_grad: np.ndarray
    weight_grad: np.ndarray
    bias_grad: Optional[np.ndarray]


def _as_f64(*arrays):
    return tuple(None if a is None else a.astype(np.float64) for a in arrays)


def _as_f32(*arrays):
    return tuple(None if a is None else a.astype(np.float32) for a in arrays)


def exact_results(geom, data, weight, bias, out_grad):
    """(out, data_grad, weight_grad, bias_grad): float64, rounded to float32."""
    out, = _as_f32(deconv_numpy.forward(geom, *_as_f64(data, weight, bias)))
    grads = _as_f32(*deconv_numpy.backward(geom, *_as_f64(out_grad, data, weight)))
    return (out,) + grads


@functools.lru_cache(maxsize=None)
def case(name: str, scale: str = "unit", seed: int = 0) -> Case:
    geom = _geometry(name)
    rng = np.random.default_rng(seed)
    data = _magnitudes(rng, geom.data_shape, scale)
    # Weights shrink with the fan-in, as trained weights do (their magnitude is
    # what "large" scales, not the result's).
    fan_in = geom.weight_shape[0] // geom.param.num_group * int(np.prod(geom.param.kernel))
    weight = (_magnitudes(rng, geom.weight_shape, scale) / np.sqrt(fan_in)).astype(np.float32)
    bias = None if geom.bias_shape is None else _magnitudes(rng, geom.bias_shape, scale)
    out_grad = _magnitudes(rng, geom.out_shape, scale)
    arrays = (data, weight, bias, out_grad) + exact_results(geom, data, weight, bias, out_grad)
    for array in arrays:
        if array is not None:
            array.setflags(write=False)
    return Case(geom, *arrays)


def check_all(c: Case, out, data_grad, weight_grad, bias_grad, seed=0):
    """The three checks' verdicts on these results of ``c``'s inputs."""
    return (result_check.forward_result(c.geom, c.data, c.weight, c.bias, out, seed=seed),
            result_check.backward_data_result(c.geom, c.out_grad, c.weight, data_grad,
                                              seed=seed),
            result_check.backward_weights_result(c.geom, c.data, c.out_grad, weight_grad,
                                                 bias_grad, seed=seed))


#: A reason: the pass, how many sampled values were wrong, the worst one's index.
REASON = re.compile(
    r"(?P<pass>forward|backward data|backward weights|backward bias) \(sampled on the "
    r"call's own inputs\): (?P<count>\d+) of (?P<total>\d+) sampled values wrong, max error "
    r"(?P<error>\S+) at \((?P<index>\d+(?:, \d+)*),?\) \(expected \S+, got \S+, allowed \S+\)")


def parse(reason: Optional[str], expected_pass: str):
    """The reason's (count, total, index), after checking it names ``expected_pass``."""
    assert reason is not None, f"the {expected_pass} check missed the defect"
    found = REASON.fullmatch(reason)
    assert found, reason
    assert found["pass"] == expected_pass, reason
    count, total = int(found["count"]), int(found["total"])
    assert 1 <= count <= total, reason
    return count, total, tuple(int(i) for i in found["index"].split(", "))


def _copy(array):
    return np.array(array, copy=True)


def test_pass_macs_counts_one_passs_multiply_adds():
    assert result_check.pass_macs(_geometry("dcgan_b8")) == 8 * 512 * 16 * 256 * 16
    assert result_check.pass_macs(_geometry("groups4")) == 2 * 128 * 36 * (256 // 4) * 9
    assert result_check.pass_macs(_geometry("depthwise")) == 2 * 64 * 64 * 1 * 16
    assert result_check.pass_macs(_geometry("3d")) == 2 * 64 * 36 * 32 * 27


# -- 1. correct results pass -------------------------------------------------------------
def _one_ulp_off(values: np.ndarray) -> np.ndarray:
    """Every element moved one float32 ulp away from zero."""
    return np.nextafter(values, np.copysign(np.float32(np.inf), values)).astype(np.float32)


def _split_forward(geom, data, weight, bias):
    """A float32 forward in another summation order: each half of every group's
    input channels separately, then added (in float32)."""
    groups = geom.param.num_group
    in_group = data.shape[1] // groups
    if in_group < 2:
        return None
    first = np.zeros(data.shape[1], dtype=bool)
    first.reshape(groups, in_group)[:, :in_group // 2] = True
    part = lambda keep: deconv_numpy.forward(  # noqa: E731
        geom, np.where(keep.reshape((1, -1) + (1,) * geom.param.ndim), data, 0),
        np.where(keep.reshape((-1,) + (1,) * (1 + geom.param.ndim)), weight, 0), None)
    out = part(first) + part(~first)
    return out if bias is None else out + bias.reshape((1, -1) + (1,) * geom.param.ndim)


_CORRECT = [(name, "unit") for name in LAYERS] + [
    (name, scale) for name in ("dcgan_b1", "upsample_b4", "1d_adj", "3d", "groups4",
                               "depthwise", "pad_lt_adj", "anisotropic", "stride_gt_kernel",
                               "k1_stride3")
    for scale in ("large", "mixed")]


@pytest.mark.parametrize("name, scale", _CORRECT, ids=[f"{n}-{s}" for n, s in _CORRECT])
def test_correct_results_pass(name, scale):
    c = case(name, scale)
    g = c.geom
    exact = (c.out, c.data_grad, c.weight_grad, c.bias_grad)
    assert check_all(c, *exact) == (None, None, None)
    # NumPy's own float32 computation, in its summation order
    out32 = deconv_numpy.forward(g, c.data, c.weight, c.bias)
    grads32 = deconv_numpy.backward(g, c.out_grad, c.data, c.weight)
    assert out32.dtype == np.float32 and grads32[1].dtype == np.float32
    assert check_all(c, out32, *grads32) == (None, None, None)
    # one ulp off everywhere: well inside any float32 kernel's rounding
    assert check_all(c, *(None if r is None else _one_ulp_off(r) for r in exact)) \
        == (None, None, None)
    # another order of the forward sum
    split = _split_forward(g, c.data, c.weight, c.bias)
    if split is not None:
        assert result_check.forward_result(g, c.data, c.weight, c.bias, split) is None
    # other seeds sample other positions, rows and columns
    for seed in (1, 2):
        assert check_all(c, *exact, seed=seed) == (None, None, None)


@pytest.mark.parametrize("name", ["dcgan_b8", "groups4", "k1_stride3"])
def test_either_gradient_may_be_missing(name):
    c = case(name)
    for weight_grad, bias_grad in [(c.weight_grad, None), (None, c.bias_grad), (None, None)]:
        assert result_check.backward_weights_result(c.geom, c.data, c.out_grad, weight_grad,
                                                    bias_grad) is None
    # a wrong gradient is still seen next to a missing one
    wrong = _copy(c.weight_grad)
    wrong[0] += 1
    parse(result_check.backward_weights_result(c.geom, c.data, c.out_grad, wrong, None),
          "backward weights")
    wrong = _copy(c.bias_grad)
    wrong[0] += 1
    parse(result_check.backward_weights_result(c.geom, c.data, c.out_grad, None, wrong),
          "backward bias")


def test_a_sequential_float32_sum_passes_on_cancelling_inputs():
    """The worst summation order in practice: every input channel's
    contribution (float64, rounded) added one at a time in float32, on
    mixed magnitudes."""
    c = case("pad_lt_adj", "mixed")
    g = c.geom
    channels, filters = g.data_shape[1], g.param.num_filter
    # each input channel alone: a grouped deconvolution with one channel per group
    shape, params = LAYERS["pad_lt_adj"]
    alone = infer_geometry(parse_params(dict(params, num_filter=channels * filters,
                                             num_group=channels, no_bias=True)), shape)
    parts, = _as_f32(deconv_numpy.forward(alone, *_as_f64(c.data, c.weight, None)))
    parts = parts.reshape((g.data_shape[0], channels) + g.out_shape[1:])
    out = np.zeros(g.out_shape, dtype=np.float32)
    for channel in range(channels):
        out += parts[:, channel]
    out += c.bias[None, :, None, None]
    assert not np.array_equal(out, c.out)  # it really rounds differently
    assert result_check.forward_result(g, c.data, c.weight, c.bias, out) is None


def test_results_of_large_values_with_very_different_magnitudes_pass():
    """Data ~1e3 with a few channels ~1e-3, weights from 1e-4 to 1: products
    of very different sizes in one sum."""
    c = case("dcgan_b1")
    g = c.geom
    rng = np.random.default_rng(5)
    data = (1e3 * rng.standard_normal(g.data_shape)).astype(np.float32)
    data[:, ::7] *= np.float32(1e-6)
    weight = (rng.standard_normal(g.weight_shape)
              * 10.0 ** rng.uniform(-4, 0, size=g.weight_shape)).astype(np.float32)
    bias = (1e4 * rng.standard_normal(g.bias_shape)).astype(np.float32)
    out_grad = (rng.standard_normal(g.out_shape) * 10.0 ** rng.uniform(-3, 3, size=g.out_shape)
                ).astype(np.float32)
    mixed = Case(g, data, weight, bias, out_grad,
                 *exact_results(g, data, weight, bias, out_grad))
    assert check_all(mixed, *mixed[5:]) == (None, None, None)
    assert check_all(mixed, deconv_numpy.forward(g, data, weight, bias),
                     *deconv_numpy.backward(g, out_grad, data, weight)) == (None, None, None)


@settings(max_examples=60, deadline=None)
@given(cfg=configs(channels=st.integers(1, 4)), seed=seeds, check_seed=st.integers(0, 3))
def test_random_small_geometries(cfg, seed, check_seed):
    """Correct results pass; a result off by one everywhere fails, naming its pass."""
    geom = geometry_of(cfg)
    data, weight, bias = cfg.arrays(seed, np.float32)
    out_grad = cfg.out_grad(seed, np.float32)
    c = Case(geom, data, weight, bias, out_grad,
             *exact_results(geom, data, weight, bias, out_grad))
    exact = c[5:]
    assert check_all(c, *exact, seed=check_seed) == (None, None, None)
    float32 = (deconv_numpy.forward(geom, data, weight, bias),) + deconv_numpy.backward(
        geom, out_grad, data, weight)
    assert check_all(c, *float32, seed=check_seed) == (None, None, None)
    off = [None if r is None else r + np.float32(1) for r in exact]
    verdicts = check_all(c, *off[:3], None, seed=check_seed)
    for reason, name in zip(verdicts, ("forward", "backward data", "backward weights")):
        parse(reason, name)
    if bias is not None:
        parse(result_check.backward_weights_result(geom, data, out_grad, exact[2], off[3],
                                                   seed=check_seed), "backward bias")


# -- 2. structured defects are caught -------------------------------------------------
def _forward_of(c: Case, out, seed=0):
    return result_check.forward_result(c.geom, c.data, c.weight, c.bias, out, seed=seed)


def _data_grad_of(c: Case, data_grad, seed=0):
    return result_check.backward_data_result(c.geom, c.out_grad, c.weight, data_grad,
                                             seed=seed)


def _weights_of(c: Case, weight_grad, bias_grad, seed=0):
    return result_check.backward_weights_result(c.geom, c.data, c.out_grad, weight_grad,
                                                bias_grad, seed=seed)


@pytest.mark.parametrize("name", ["dcgan_b8", "dcgan_b1", "fcn32s", "upsample_b4", "groups4",
                                  "3d"])
def test_a_bias_added_twice_on_a_channel_block(name):
    c = case(name)
    out = _copy(c.out)
    block = slice(16, 32) if c.geom.param.num_filter >= 32 else slice(0, 16)
    spatial = (1,) * c.geom.param.ndim
    out[:, block] += c.bias[block].reshape((-1,) + spatial)
    count, total, index = parse(_forward_of(c, out), "forward")
    assert block.start <= index[1] < block.stop


@pytest.mark.parametrize("name", ["dcgan_b8", "upsample_b4", "1d_adj", "depthwise"])
def test_a_bias_added_twice_on_one_image(name):
    c = case(name)
    out = _copy(c.out)
    image = c.geom.data_shape[0] - 1
    out[image] += c.bias.reshape((-1,) + (1,) * c.geom.param.ndim)
    count, total, index = parse(_forward_of(c, out), "forward")
    assert index[0] == image


@pytest.mark.parametrize("name", ["dcgan_b8", "upsample_b4", "1d_adj", "3d", "groups4",
                                  "k1_stride3"])
def test_one_whole_image_wrong(name):
    c = case(name)
    image = 1
    out, data_grad = _copy(c.out), _copy(c.data_grad)
    out[image] = 0
    data_grad[image] = 0
    assert parse(_forward_of(c, out), "forward")[2][0] == image
    assert parse(_data_grad_of(c, data_grad), "backward data")[2][0] == image


@pytest.mark.parametrize("name", ["dcgan_b8", "fcn32s", "upsample_b4", "groups4"])
def test_one_output_channel_off_by_one_percent(name):
    c = case(name)
    out = _copy(c.out)
    out[:, 5] *= np.float32(1.01)
    assert parse(_forward_of(c, out), "forward")[2][1] == 5


@pytest.mark.parametrize("name, factor", [("dcgan_b8", 1.1), ("upsample_b4", 1.01),
                                          ("groups4", 1.01), ("depthwise", 1.01),
                                          ("1d_adj", 1.01)])
def test_one_input_channels_data_grad_scaled(name, factor):
    """(On the 512 -> 256 layer a data_grad element sums 4096 products: an
    error of 1% is below the rigorous bound there, 10% is not.)"""
    c = case(name)
    data_grad = _copy(c.data_grad)
    data_grad[:, 9] *= np.float32(factor)
    assert parse(_data_grad_of(c, data_grad), "backward data")[2][1] == 9


_BORDERS = {"first row": (slice(None), slice(None), 0),
            "last row": (slice(None), slice(None), -1),
            "first column": (Ellipsis, 0),
            "last column": (Ellipsis, -1)}


def _wrong_border(result, border):
    wrong = _copy(result)
    where = _BORDERS[border]
    wrong[where] = wrong[where] * np.float32(1.5) + np.float32(1)
    return wrong


def _border_index(border, shape):
    """The axis and the coordinate of ``border`` in a result of ``shape``."""
    axis = 2 if "row" in border else len(shape) - 1
    return axis, 0 if "first" in border else shape[axis] - 1


@pytest.mark.parametrize("border", list(_BORDERS))
@pytest.mark.parametrize("name, passes", [
    ("upsample_b4", ("forward", "backward data")), ("corner", ("forward", "backward data")),
    ("fcn32s", ("forward",)), ("3d", ("forward",))])
def test_a_border_wrong_in_every_channel(name, passes, border):
    """Every combination of edge coordinates is sampled (at least, and 2% of
    the multiply-adds when that is more), so a wrong border is seen."""
    c = case(name)
    if "forward" in passes:
        index = parse(_forward_of(c, _wrong_border(c.out, border)), "forward")[2]
        axis, coordinate = _border_index(border, c.geom.out_shape)
        assert index[axis] == coordinate
    if "backward data" in passes:
        index = parse(_data_grad_of(c, _wrong_border(c.data_grad, border)), "backward data")[2]
        axis, coordinate = _border_index(border, c.geom.data_shape)
        assert index[axis] == coordinate


def _seen_or_declared_blind(c: Case, what: str, missed: list) -> None:
    """Every defect in ``missed`` went unseen: that is right only where
    :func:`result_check.blind_spot` says so before the layer's first call
    (the planner then runs the kernel check first), and never otherwise."""
    blind = result_check.blind_spot(c.geom, what.replace(" ", "_"))
    if missed:
        assert blind is not None, f"{what}: {missed} not seen, and no blind spot declared"


@pytest.mark.parametrize("name, what", [
    ("dcgan_b1", "forward"), ("dcgan_b1", "backward data"),
    # Every border is sampled, but each data_grad element sums 86016 products:
    # the rigorous float32 bound (about 1% of their magnitudes) hides the defect.
    ("fcn32s", "backward data")])
def test_every_border_wrong_in_every_channel_is_caught_on_batch_1(name, what):
    """The docstring: 'each output phase and both borders of every axis
    first'.  Batch 1 of the 512 -> 256 layer (8x8 output) and FCN-32s' data
    gradient (4x4) sample one position per call."""
    c = case(name)
    missed = []
    for border in _BORDERS:
        if what == "forward":
            reason = _forward_of(c, _wrong_border(c.out, border))
        else:
            reason = _data_grad_of(c, _wrong_border(c.data_grad, border))
        if reason is None:
            missed.append(border)
    _seen_or_declared_blind(c, what, missed)
    assert (result_check.blind_spot(c.geom, "backward_data") is not None) == (name == "fcn32s")


@pytest.mark.parametrize("name", ["dcgan_b8", "dcgan_b1", "fcn32s", "groups4", "depthwise_x2",
                                  "k1_stride3"])
def test_nan_in_one_whole_channel(name):
    c = case(name)
    out, data_grad, weight_grad, bias_grad = (_copy(a) for a in c[5:])
    out[:, 3] = np.nan
    data_grad[:, 3] = np.nan
    weight_grad[:, 0] = np.nan  # one output channel of every group
    bias_grad[3] = np.nan
    count, total, index = parse(_forward_of(c, out), "forward")
    assert index[1] == 3 and "max error nan" in _forward_of(c, out)
    assert parse(_data_grad_of(c, data_grad), "backward data")[2][1] == 3
    assert parse(_weights_of(c, weight_grad, None), "backward weights")[2][1] == 0
    assert parse(_weights_of(c, c.weight_grad, bias_grad), "backward bias")[2] == (3,)
    # an infinity where the reference is finite is as wrong
    out[:, 3] = np.inf
    assert parse(_forward_of(c, out), "forward")[2][1] == 3


@pytest.mark.parametrize("name", ["dcgan_b8", "dcgan_b1", "fcn32s", "upsample_b4", "3d",
                                  "groups4", "depthwise"])
def test_one_kernel_tap_of_the_weight_gradient_wrong(name):
    c = case(name)
    kernel = c.geom.param.kernel
    tap = tuple(k // 2 for k in kernel)
    flat_tap = int(np.ravel_multi_index(tap, kernel))
    for wrong in ("zero", "one percent"):
        weight_grad = _copy(c.weight_grad)
        where = (slice(None), slice(None)) + tap
        weight_grad[where] = 0 if wrong == "zero" else weight_grad[where] * np.float32(1.01)
        assert parse(_weights_of(c, weight_grad, c.bias_grad), "backward weights")[2][2] \
            == flat_tap, wrong


@pytest.mark.parametrize("name", ["3d", "groups4", "dcgan_b8"])
def test_the_columns_products_over_chunks_of_taps_agree(monkeypatch, name):
    """The sampled columns' references are products over a chunk of taps at
    a time: whatever the chunk (one tap; three, which leaves a shorter last
    chunk of the 3-D and DCGAN kernels; every tap), a correct gradient passes
    and a last tap off by 1% is found in as many sampled values."""
    c = case(name)
    weight_grad = _copy(c.weight_grad)
    last = (slice(None), slice(None)) + (-1,) * c.geom.param.ndim
    weight_grad[last] *= np.float32(1.01)
    counts = set()
    for chunk in (1, 3, None):
        monkeypatch.setattr(result_check, "_column_chunk",
                            lambda tap_bytes, taps: taps if chunk is None else min(chunk, taps))
        assert _weights_of(c, c.weight_grad, c.bias_grad) is None
        counts.add(parse(_weights_of(c, weight_grad, c.bias_grad), "backward weights")[0])
    assert len(counts) == 1, counts


@pytest.mark.parametrize("name", ["k1_stride3", "pad_lt_adj", "1d_adj"])
def test_the_bias_gradient_off_by_a_hundredth_in_one_channel(name):
    """(Small layers: the bias gradient's bound grows with N * output pixels;
    on the batch-32 512 -> 256 layer it is about 0.4.)"""
    c = case(name)
    bias_grad = _copy(c.bias_grad)
    bias_grad[7] += np.float32(1e-2)
    count, total, index = parse(_weights_of(c, c.weight_grad, bias_grad), "backward bias")
    assert (count, total, index) == (1, c.geom.param.num_filter, (7,))
    # the bias is checked whether or not the weight gradient is
    parse(_weights_of(c, None, bias_grad), "backward bias")


@pytest.mark.parametrize("name", ["dcgan_b8", "upsample_b4", "1d_adj", "3d", "groups4",
                                  "depthwise"])
def test_a_dropped_tap(name):
    """Each pass's result computed with one kernel tap of the weight zeroed."""
    c = case(name)
    kernel = c.geom.param.kernel
    weight = _copy(c.weight)
    weight[(slice(None), slice(None)) + tuple(k // 2 for k in kernel)] = 0
    out, data_grad, weight_grad, _ = exact_results(c.geom, c.data, weight, c.bias, c.out_grad)
    parse(_forward_of(c, out), "forward")
    parse(_data_grad_of(c, data_grad), "backward data")
    weight_grad = _copy(c.weight_grad)
    weight_grad[(slice(None), slice(None)) + tuple(k // 2 for k in kernel)] = 0
    parse(_weights_of(c, weight_grad, None), "backward weights")


def _forward_without(c: Case, tap):
    weight = _copy(c.weight)
    weight[(slice(None), slice(None)) + tap] = 0
    return exact_results(c.geom, c.data, weight, c.bias, c.out_grad)[0]


@pytest.mark.parametrize("name, taps", [
    ("dcgan_b1", [(0, 0), (0, 1), (1, 0), (1, 1)]),  # one tap of each phase
    # Each tap lands on one output phase, and the forward sample holds at most
    # 256 positions (MAX_POSITIONS): FCN-32s has 1024 phases.
    ("fcn32s", [(0, 0), (16, 16), (32, 32), (40, 9)])])
def test_every_dropped_tap_is_caught_in_forward(name, taps):
    """The docstring: 'each output phase ... first'.  (The data gradient
    cannot help on FCN-32s: one tap is 21 of 86016 products, below the bound.)"""
    c = case(name)
    missed = [tap for tap in taps if _forward_of(c, _forward_without(c, tap)) is None]
    _seen_or_declared_blind(c, "forward", missed)
    assert (result_check.blind_spot(c.geom, "forward") is not None) == (name == "fcn32s")


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_single_wrong_corner_element_is_caught(seed):
    """On a batch-1 layer whose sample holds every border position, a corner
    element of one channel is sampled whatever the seed; so is, on every
    layer, every element of the weight gradient's first row (input channel)
    and first column (output channel; the last ones: see below)."""
    c = case("corner")
    for corner in ((0, 5, 0, 0), (0, 5, -1, -1), (0, 5, 0, -1)):
        expected = tuple(i % n for i, n in zip(corner, c.geom.out_shape))
        out = _copy(c.out)
        out[corner] += np.float32(0.5)
        count, _, index = parse(_forward_of(c, out, seed), "forward")
        assert (count, index) == (1, expected)
        data_grad = _copy(c.data_grad)
        data_grad[corner] += np.float32(0.5)
        expected = tuple(i % n for i, n in zip(corner, c.geom.data_shape))
        count, _, index = parse(_data_grad_of(c, data_grad, seed), "backward data")
        assert (count, index) == (1, expected)
    for name in ("corner", "dcgan_b8", "groups4"):
        c = case(name)
        taps = c.geom.param.kernel
        # row 0 is sampled with every output channel of its group, column 0
        # with every input channel of its group
        for element in ((0, 0) + (0,) * len(taps), (0, -1) + (-1,) * len(taps),
                        (-1, 0) + tuple(k // 2 for k in taps)):
            weight_grad = _copy(c.weight_grad)
            weight_grad[element] += np.float32(10)
            index = parse(_weights_of(c, weight_grad, None, seed), "backward weights")[2]
            flat = tuple(i % n for i, n in zip(element, c.geom.weight_shape))
            assert index == flat[:2] + (int(np.ravel_multi_index(flat[2:], taps)),)


@pytest.mark.parametrize("name", ["corner", "dcgan_b8"])
def test_the_weight_gradients_last_row_and_column_are_sampled(name):
    """The docstring: 'a few input-channel rows (the first, the last, ...)
    and output-channel columns'.  The element of the last row and the last
    column is sampled only if one of them is."""
    c = case(name)
    weight_grad = _copy(c.weight_grad)
    weight_grad[(-1, -1) + (0,) * c.geom.param.ndim] += np.float32(10)
    assert _weights_of(c, weight_grad, None) is not None


# -- 3. what the reason says --------------------------------------------------------------
def test_the_reason_names_the_pass_the_count_and_the_worst_index():
    c = case("upsample_b4")
    out = _copy(c.out)
    out[2, 11] += np.float32(3)   # every sampled position of image 2, channel 11
    out[2, 12] += np.float32(0.5)
    reason = _forward_of(c, out)
    count, total, index = parse(reason, "forward")
    assert total % c.geom.param.num_filter == 0
    positions = total // c.geom.param.num_filter
    assert 2 <= count <= 2 * positions  # channels 11 and 12 of image 2's positions
    assert index[:2] == (2, 11) and len(index) == 4  # the worst: (image, channel, y, x)
    assert "max error 3 " in reason and reason == _forward_of(c, out)  # deterministic
    data_grad = _copy(c.data_grad)
    data_grad[:, 4] = 0
    count, total, index = parse(_data_grad_of(c, data_grad), "backward data")
    assert index[1] == 4 and count == total // c.geom.data_shape[1]
    weight_grad = _copy(c.weight_grad)
    weight_grad[:, :, 0, 3] += np.float32(10)
    count, total, index = parse(_weights_of(c, weight_grad, c.bias_grad), "backward weights")
    assert index[2] == 3 and len(index) == 3  # (input channel, output channel, flat tap)
    bias_grad = _copy(c.bias_grad)
    bias_grad[60] -= np.float32(50)
    reason = _weights_of(c, weight_grad, bias_grad)
    assert parse(reason, "backward bias")[::2] == (1, (60,))  # the bias is checked first


# -- 4. inputs: untouched, views, NaN ----------------------------------------------------
@pytest.mark.parametrize("name", ["upsample_b4", "groups4", "3d", "fcn32s"])
def test_inputs_are_not_modified(name):
    c = case(name)
    writable = [_copy(a) for a in c[1:]]
    kept = [_copy(a) for a in writable]
    data, weight, bias, out_grad, out, data_grad, weight_grad, bias_grad = writable
    g = c.geom
    wrong_out = out.copy()
    wrong_out[0] = 0
    for result in (out, wrong_out):
        result_check.forward_result(g, data, weight, bias, result)
    result_check.backward_data_result(g, out_grad, weight, data_grad)
    result_check.backward_weights_result(g, data, out_grad, weight_grad, bias_grad)
    for array, before in zip(writable, kept):
        np.testing.assert_array_equal(array, before)


def _strided_view(array: np.ndarray) -> np.ndarray:
    """The same values as a non-contiguous view (every other element of a
    buffer twice as long in the last axis)."""
    buffer = np.full(array.shape[:-1] + (2 * array.shape[-1],), np.nan, dtype=array.dtype)
    buffer[..., ::2] = array
    view = buffer[..., ::2]
    assert not view.flags.c_contiguous
    return view


def _transposed_view(array: np.ndarray) -> np.ndarray:
    """The same values stored channels-last: a view that is not C-contiguous
    (1-D arrays: a strided view)."""
    if array.ndim < 3:
        return _strided_view(array)
    axes = (0,) + tuple(range(2, array.ndim)) + (1,)
    back = (0, array.ndim - 1) + tuple(range(1, array.ndim - 1))
    view = np.ascontiguousarray(array.transpose(axes)).transpose(back)
    assert not view.flags.c_contiguous
    return view


@pytest.mark.parametrize("make_view", [_strided_view, _transposed_view, np.asfortranarray],
                         ids=["strided", "channels_last", "fortran"])
@pytest.mark.parametrize("name", ["upsample_b4", "groups4", "1d_adj", "3d"])
def test_non_contiguous_views(name, make_view):
    c = case(name)
    views = [None if a is None else make_view(a) for a in c[1:]]
    data, weight, bias, out_grad, out, data_grad, weight_grad, bias_grad = views
    g = c.geom
    assert result_check.forward_result(g, data, weight, bias, out) is None
    assert result_check.backward_data_result(g, out_grad, weight, data_grad) is None
    assert result_check.backward_weights_result(g, data, out_grad, weight_grad,
                                                bias_grad) is None
    # ... and a wrong result seen through a view is still wrong
    wrong = _copy(c.out)
    wrong[1, 2] = 0
    assert parse(result_check.forward_result(g, data, weight, bias, make_view(wrong)),
                 "forward")[2][:2] == (1, 2)
    wrong = _copy(c.data_grad)
    wrong[1, 2] = 0
    assert parse(result_check.backward_data_result(g, out_grad, weight, make_view(wrong)),
                 "backward data")[2][:2] == (1, 2)
    wrong = _copy(c.weight_grad)
    wrong[2] = 0
    assert parse(result_check.backward_weights_result(g, data, out_grad, make_view(wrong),
                                                      None), "backward weights")[2][0] == 2


def _with(array, index, value):
    changed = _copy(array)
    changed[index] = value
    return changed


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # inf * 0, inf - inf
@pytest.mark.parametrize("value", [np.nan, np.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("name", ["upsample_b4", "groups4", "1d_adj"])
def test_non_finite_inputs_are_not_compared_where_the_reference_is_not_finite(name, value):
    """A NaN (or infinity) in an input makes the reference non-finite where it
    reaches: those elements are not compared (whatever the kernel wrote
    there), and the others still are."""
    c = case(name)
    g = c.geom
    interior = (1, 2) + tuple(n // 2 for n in g.spatial_in)  # not pixel 0: see below
    data = _with(c.data, interior, value)
    out_interior = (1, 2) + tuple(n // 2 for n in g.spatial_out)
    out_grad = _with(c.out_grad, out_interior, value)
    weight = _with(c.weight, (3, 0) + (0,) * g.param.ndim, value)
    bad = Case(g, data, weight, c.bias, out_grad,
               *exact_results(g, data, weight, c.bias, out_grad))
    results = bad[5:]
    assert all(not np.isfinite(r).all() for r in results)  # the references are not finite
    assert check_all(bad, *results) == (None, None, None)
    # a kernel may write anything where the reference is not finite
    anything = [np.where(np.isfinite(r), r, np.float32(7)) for r in results]
    assert check_all(bad, *anything) == (None, None, None)
    # elsewhere a defect is still caught: image 0 holds no NaN
    out, data_grad, weight_grad, bias_grad = (_copy(r) for r in results)
    out[0], data_grad[0] = 0, 0
    weight_grad[-1] += np.float32(100)
    bias_grad[-1] += np.float32(100)
    assert parse(_forward_of(bad, out), "forward")[2][0] == 0
    assert parse(_data_grad_of(bad, data_grad), "backward data")[2][0] == 0
    assert parse(_weights_of(bad, weight_grad, None), "backward weights")[2][0] \
        == g.data_shape[1] - 1
    assert parse(_weights_of(bad, c.weight_grad, bias_grad), "backward bias")[2] \
        == (g.param.num_filter - 1,)


# -- problems found by review, fixed ---------------------------------------------------
@pytest.mark.parametrize("what", ["forward", "backward data"])
def test_a_nan_at_pixel_0_leaves_the_far_border_checked(what):
    c = case("corner")
    g = c.geom
    corner = (0, slice(None), -1, -1)  # far from pixel (0, 0): its reference is finite
    if what == "forward":
        data = _with(c.data, (0, 0, 0, 0), np.nan)
        out = exact_results(g, data, c.weight, c.bias, c.out_grad)[0]
        assert np.isfinite(out[corner]).all()
        assert result_check.forward_result(g, data, c.weight, c.bias, out) is None
        assert result_check.forward_result(g, data, c.weight, c.bias,
                                           _with(out, corner, 0)) is not None
    else:
        out_grad = _with(c.out_grad, (0, 0, 0, 0), np.nan)
        data_grad = exact_results(g, c.data, c.weight, c.bias, out_grad)[1]
        assert np.isfinite(data_grad[corner]).all()
        assert result_check.backward_data_result(g, out_grad, c.weight, data_grad) is None
        assert result_check.backward_data_result(g, out_grad, c.weight,
                                                 _with(data_grad, corner, 0)) is not None


@pytest.mark.parametrize("what", ["forward", "backward data"])
def test_every_image_of_a_batch_over_128_is_sampled(what):
    geom = infer_geometry(parse_params(dict(kernel=(2, 2), stride=(2, 2), num_filter=8,
                                            no_bias=False)), (130, 8, 3, 3))
    rng = np.random.default_rng(0)
    data, weight, bias = (rng.standard_normal(s).astype(np.float32)
                          for s in (geom.data_shape, geom.weight_shape, geom.bias_shape))
    out_grad = rng.standard_normal(geom.out_shape).astype(np.float32)
    out, data_grad, _, _ = exact_results(geom, data, weight, bias, out_grad)
    if what == "forward":
        assert result_check.forward_result(geom, data, weight, bias, _with(out, 129, 0)) \
            is not None
    else:
        assert result_check.backward_data_result(geom, out_grad, weight,
                                                 _with(data_grad, 129, 0)) is not None


@pytest.mark.parametrize("what", ["forward", "backward weights"])
def test_tiny_inputs_do_not_make_correct_results_fail(what):
    geom = infer_geometry(parse_params(dict(_K4S2P1, num_filter=64)), (2, 64, 8, 8))
    rng = np.random.default_rng(0)
    data = (1e-23 * rng.standard_normal(geom.data_shape)).astype(np.float32)
    weight = (1e8 * rng.standard_normal(geom.weight_shape)).astype(np.float32)
    out_grad = (1e3 * rng.standard_normal(geom.out_shape)).astype(np.float32)
    out, _, weight_grad, _ = exact_results(geom, data, weight, None, out_grad)
    if what == "forward":
        assert result_check.forward_result(geom, data, weight, None, out) is None
    else:
        assert result_check.backward_weights_result(geom, data, out_grad, weight_grad,
                                                    None) is None


@pytest.mark.parametrize("what", ["forward", "backward data", "backward weights"])
def test_huge_inputs_keep_a_finite_bound(what):
    """Values whose float32 squares overflow (above about 1.8e19): the norms
    are summed again in float64, so a wrong result is still seen."""
    geom = infer_geometry(parse_params(dict(_K4S2P1, num_filter=64)), (2, 64, 8, 8))
    rng = np.random.default_rng(1)
    data = (1e20 * rng.standard_normal(geom.data_shape)).astype(np.float32)
    weight = (1e-20 * rng.standard_normal(geom.weight_shape)).astype(np.float32)
    out_grad = (1e-3 * rng.standard_normal(geom.out_shape)).astype(np.float32)
    out, data_grad, weight_grad, _ = exact_results(geom, data, weight, None, out_grad)
    if what == "forward":
        assert result_check.forward_result(geom, data, weight, None, out) is None
        assert result_check.forward_result(geom, data, weight, None, out * 1.01) is not None
    elif what == "backward data":
        check = lambda grad: result_check.backward_data_result(  # noqa: E731
            geom, out_grad, weight, grad)
        assert check(data_grad) is None and check(data_grad * 1.01) is not None
    else:
        check = lambda grad: result_check.backward_weights_result(  # noqa: E731
            geom, data, out_grad, grad, None)
        assert check(weight_grad) is None and check(weight_grad * 1.01) is not None


def test_an_infinite_input_under_the_callers_errstate_raise():
    c = case("upsample_b4")
    out_grad = _with(c.out_grad, (1, 2, 5, 5), np.inf)
    with np.errstate(invalid="ignore"):
        _, _, weight_grad, bias_grad = exact_results(c.geom, c.data, c.weight, c.bias,
                                                     out_grad)
    assert np.isinf(bias_grad[2])
    with np.errstate(all="raise"):
        assert result_check.backward_weights_result(c.geom, c.data, out_grad, weight_grad,
                                                    bias_grad) is None


# -- 5. the reference's building blocks ---------------------------------------------------
@pytest.mark.parametrize("chunk_bytes", [4, 64, 1 << 20])
def test_channel_sums_in_chunks_equal_the_whole_sums(monkeypatch, chunk_bytes):
    """The bias reference takes |out_grad| a chunk at a time, in one reused
    buffer; the sums equal those of the whole array, whatever the chunk."""
    monkeypatch.setattr(result_check, "_ABS_CHUNK_BYTES", chunk_bytes)
    values = np.random.default_rng(3).standard_normal((3, 5, 7)).astype(np.float32)
    sums, magnitudes = result_check._channel_sums(values)
    np.testing.assert_allclose(sums, values.sum(axis=(0, 2), dtype=np.float64), rtol=1e-12)
    np.testing.assert_allclose(magnitudes, np.abs(values).sum(axis=(0, 2), dtype=np.float64),
                               rtol=1e-12)


@pytest.mark.parametrize("block_bytes", [4, 256, 1 << 20])
def test_phase_products_over_blocks_of_the_weight(monkeypatch, block_bytes):
    """Each phase's products and the weight's squares per tap, the weight read
    a block of input channels at a time, equal one product of the phase's
    taps gathered whole (within float32 rounding: the blocks' partial sums
    add in another order)."""
    monkeypatch.setattr(result_check, "_WEIGHT_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(4)
    groups, rows, columns, taps = 2, 6, 3, 9
    weight = rng.standard_normal((groups, rows, columns, taps)).astype(np.float32)
    phase_list = [
        result_check._Phase(np.arange(count), tap_list,
                            rng.standard_normal((groups, count, len(tap_list), rows)
                                                ).astype(np.float32),
                            np.zeros((groups, count, columns), np.float32))
        for count, tap_list in ((5, np.array([0, 2, 6, 8])), (1, np.array([4])),
                                (3, np.array([1, 7])))]
    squares, in_float32 = result_check._phase_products(weight, phase_list)
    assert in_float32
    np.testing.assert_allclose(squares, np.einsum("gito,gito->gto", *(2 * [
        weight.astype(np.float64).transpose(0, 1, 3, 2)])), rtol=1e-6)
    for phase in phase_list:
        kernel = weight.transpose(0, 3, 1, 2)[:, phase.taps].reshape(
            groups, len(phase.taps) * rows, columns).astype(np.float64)
        want = np.matmul(phase.cols.reshape(groups, len(phase.rows), -1).astype(np.float64),
                         kernel)
        np.testing.assert_allclose(phase.product, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["dcgan_b8", "upsample_b4", "3d"])
def test_a_bias_gradient_within_its_rounding_bound_passes(name):
    """The bias gradient sums every output pixel of every image: a float32
    sum of n = batch * output pixels terms may be off by gamma(n) times the
    sum of their magnitudes (the docstring's bound), and half of that passes
    (a bound counted over the input's pixels, fewer on an up-sampling layer,
    would refuse it)."""
    c = case(name)
    terms = c.geom.data_shape[0] * int(np.prod(c.geom.spatial_out))
    g = c.out_grad.reshape(c.geom.data_shape[0], c.geom.param.num_filter, -1)
    exact = g.sum(axis=(0, 2), dtype=np.float64)
    gamma = terms * 2.0 ** -24 / (1 - terms * 2.0 ** -24)
    allowed = gamma * np.abs(g).sum(axis=(0, 2), dtype=np.float64)
    bias_grad = (exact + 0.5 * allowed).astype(np.float32)
    # float32 rounding of the shifted value stays well inside the other half
    assert np.all(np.abs(bias_grad - exact) <= 0.75 * allowed)
    assert _weights_of(c, None, bias_grad) is None


@pytest.mark.parametrize("name", ["dcgan_b8", "3d", "1d_adj", "groups4"])
def test_results_read_in_their_own_layout(name):
    """A blocked result is read in place (Layout.take, as a provisional call
    hands it over): right results pass, a wrong channel is found where it is,
    in every layout oneDNN offers here for the result."""
    from mxdeconv import _ops
    c = case(name)
    g = c.geom
    kinds = ((_ops.forward_candidates(g, "float32", False, False), "dst", c.out,
              _forward_of, "forward"),
             (_ops.backward_data_candidates(g, "float32"), "diff_src", c.data_grad,
              _data_grad_of, "backward data"))
    for candidates, tensor, right, check, what in kinds:
        layouts = {}
        for candidate in candidates:
            if not candidate.is_reference:
                layout = getattr(candidate.build(), tensor)
                layouts.setdefault(layout.name, layout)
        assert layouts
        for layout in layouts.values():
            assert check(c, functools.partial(layout.take, layout.from_plain(right))) is None
            wrong = _copy(right)
            wrong[:, 3] *= np.float32(1.5)
            reader = functools.partial(layout.take, layout.from_plain(wrong))
            assert parse(check(c, reader), what)[2][1] == 3, layout
