"""MXNet's string attribute forms (``kernel="(3, 3)"``, ``num_filter="6"``,
``no_bias="true"``), ``name=``, against what MXNet 1.9.1 itself does.

The cases live in tests/data/attr_forms.py; scripts/fixtures/make_attr_fixtures.py ran them
through MXNet 1.9.1 and recorded, per case, whether MXNet accepted the arguments and
the shapes it inferred (tests/data/mxnet_attr_forms.json).  Here mxdeconv must accept
exactly those and infer the same shapes.  test_live_mxnet re-runs the script when an
MXNet 1.9.1 venv exists on this machine (MXNET_VENV, .venv-mxnet or /tmp/mxnet-venv)
and is skipped otherwise, e.g. in CI.
"""
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import mxdeconv
from mxdeconv import MXNetError, autograd, gluon, nd
from mxdeconv.semantics.attributes import infer_geometry, parse_params

from helpers import DATA, FIXTURE_SCRIPTS, mxnet_python

sys.path.insert(0, str(DATA))
from attr_forms import GLUON_CASES, MXNET_TEST_STYLE, OP_CASES  # noqa: E402

FIXTURE = json.loads((DATA / "mxnet_attr_forms.json").read_text())
OPS = {case_id: (data_shape, kwargs) for case_id, data_shape, kwargs in OP_CASES}
LAYERS = {case_id: (cls, kwargs, data_shape) for case_id, cls, kwargs, data_shape in GLUON_CASES}

# Where mxdeconv deliberately refuses what MXNet 1.9.1 accepts, and why.
DEVIATIONS = {
    # istream >> uint32_t negates "-4294967290" modulo 2**32: MXNet reads num_filter=6.
    "num_filter_wrapped_negative": "a negative num_filter is refused",
    # MXNet's imperative operators ignore name= whatever it is; a str or None is asked.
    "name_int": "name must be a str or None",
    # MXNet's layer computes `not use_bias`: every non-empty string means True, so
    # use_bias="False" would silently keep the bias.
    "gluon_use_bias_false_string": "a string use_bias is refused",
    "gluon_use_bias_zero_string": "a string use_bias is refused",
}


def _op_verdict(data_shape, kwargs):
    """What mxdeconv does with the case, in the fixture's terms."""
    params = {k: v for k, v in kwargs.items() if k != "name"}
    try:
        geom = infer_geometry(parse_params(params), data_shape)
        bias = None if geom.bias_shape is None else nd.ones(geom.bias_shape)
        out = nd.Deconvolution(nd.ones(data_shape), nd.ones(geom.weight_shape), bias, **kwargs)
    except (MXNetError, TypeError) as err:
        return {"accepted": False, "error": f"{type(err).__name__}: {err}"}
    return {"accepted": True, "out_shape": list(out.shape),
            "weight_shape": list(geom.weight_shape),
            "bias_shape": None if geom.bias_shape is None else list(geom.bias_shape)}


def _gluon_verdict(class_name, kwargs, data_shape):
    try:
        layer = getattr(gluon, class_name)(**kwargs)
        layer.initialize()
        out = layer(nd.ones(data_shape))
    except (MXNetError, TypeError) as err:
        return {"accepted": False, "error": f"{type(err).__name__}: {err}"}
    return {"accepted": True, "out_shape": list(out.shape),
            "weight_shape": list(layer.weight.shape),
            "bias_shape": None if layer.bias is None else list(layer.bias.shape)}


def _agrees(ours, theirs):
    """Both refuse, or both accept with the same shapes (MXNet's error text and
    whether its own compute path then managed are not compared)."""
    keys = ("accepted", "out_shape", "weight_shape", "bias_shape")
    if not theirs["accepted"]:
        return not ours["accepted"]
    return all(ours.get(k) == theirs.get(k) for k in keys)


def test_fixture_is_mxnet_191_and_complete():
    assert FIXTURE["mxnet_version"] == "1.9.1"
    assert sorted(FIXTURE["op"]) == sorted(OPS)
    assert sorted(FIXTURE["gluon"]) == sorted(LAYERS)


@pytest.mark.parametrize("case_id", sorted(OPS))
def test_operator_matches_mxnet(case_id):
    ours, theirs = _op_verdict(*OPS[case_id]), FIXTURE["op"][case_id]
    if case_id in DEVIATIONS:
        assert theirs["accepted"] and not ours["accepted"], (ours, theirs)
    else:
        assert _agrees(ours, theirs), (ours, theirs)


@pytest.mark.parametrize("case_id", sorted(LAYERS))
def test_gluon_matches_mxnet(case_id):
    ours, theirs = _gluon_verdict(*LAYERS[case_id]), FIXTURE["gluon"][case_id]
    if case_id in DEVIATIONS:
        assert theirs["accepted"] and not ours["accepted"], (ours, theirs)
    else:
        assert _agrees(ours, theirs), (ours, theirs)


MXNET_PYTHON = mxnet_python()


@pytest.mark.skipif(MXNET_PYTHON is None,
                    reason="no MXNet 1.9.1 venv here (CI has none; the committed "
                           "tests/data/mxnet_attr_forms.json covers the same check)")
def test_live_mxnet(tmp_path):
    """Re-records the verdicts with real MXNet 1.9.1 and compares both ways."""
    path = tmp_path / "forms.json"
    subprocess.run([MXNET_PYTHON, str(FIXTURE_SCRIPTS / "make_attr_fixtures.py"), str(path)],
                   check=True, capture_output=True, timeout=300)
    live = json.loads(path.read_text())
    for kind in ("op", "gluon"):
        for case_id, theirs in live[kind].items():
            assert theirs["accepted"] == FIXTURE[kind][case_id]["accepted"], case_id
    for case_id, theirs in live["op"].items():
        if case_id not in DEVIATIONS:
            assert _agrees(_op_verdict(*OPS[case_id]), theirs), case_id


# -- the same parameters, whether spelled as Python values or as text ---------------------
EQUIVALENT = [
    (dict(MXNET_TEST_STYLE, name=None),
     dict(kernel=(3, 3), num_filter=6, no_bias=True, stride=(2, 2), adj=(1, 1),
          target_shape=(10, 10), layout=None, cudnn_tune="off", workspace=512)),
    (dict(kernel="[3,3]", num_filter=" 6", no_bias="FALSE", num_group="2", pad="(1, 1,)",
          dilate="(2L, 1L)", cudnn_off="1", cudnn_tune="None", layout="NCHW"),
     dict(kernel=(3, 3), num_filter=6, no_bias=False, num_group=2, pad=(1, 1),
          dilate=(2, 1), cudnn_off=True)),
    (dict(kernel="3", num_filter="+4", stride="2", adj="(1,)", target_shape="()"),
     dict(kernel=(3,), num_filter=4, stride=(2,), adj=(1,))),
    (dict(kernel="(2, 2, 2)", num_filter="2", no_bias="0", stride="[2, 1, 1]"),
     dict(kernel=(2, 2, 2), num_filter=2, no_bias=False, stride=(2, 1, 1))),
]


@pytest.mark.parametrize("text, values", EQUIVALENT)
def test_text_and_values_give_the_same_parameters(text, values):
    text = {k: v for k, v in text.items() if k != "name"}
    param, expected = parse_params(text), parse_params(values)
    assert param == expected and hash(param) == hash(expected)
    assert all(type(v) is int for v in param.kernel + param.stride + (param.num_filter,))
    assert type(param.no_bias) is bool


def test_mxnet_test_deconvolution_style_call():
    """MXNet 1.9.1's own unit tests call Deconvolution with no_bias="true" (and
    name=): forward, autograd and the explicit backward all take it."""
    kwargs = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=4, no_bias="true",
                  name="deconv")
    rng = np.random.default_rng(3)
    data = nd.array(rng.uniform(-1, 1, (2, 4, 5, 5)).astype(np.float32))
    weight = nd.array(rng.uniform(-1, 1, (4, 4, 3, 3)).astype(np.float32))
    plain = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=4, no_bias=True)
    with autograd.train_mode():  # record() trains: the same plan, bit for bit
        expected = nd.Deconvolution(data, weight, **plain).asnumpy()
    data.attach_grad()
    weight.attach_grad()
    with autograd.record():
        out = nd.Deconvolution(data, weight, **kwargs)
    out.backward(nd.ones(out.shape))
    assert_array_equal(out.asnumpy(), expected)
    grads = nd.Deconvolution_backward(nd.ones(out.shape), data, weight, **kwargs)
    assert grads[2] is None
    assert_array_equal(data.grad.asnumpy(), grads[0].asnumpy())
    assert_array_equal(weight.grad.asnumpy(), grads[1].asnumpy())


@pytest.mark.parametrize("impl", ["numpy", "onednn"])
def test_backward_takes_text(impl):
    rng = np.random.default_rng(4)
    data, weight, bias, out_grad = (rng.uniform(-1, 1, s).astype(np.float32)
                                    for s in ((1, 4, 5, 5), (4, 3, 3, 3), (6,), (1, 6, 10, 10)))
    text = dict(kernel="(3, 3)", num_filter="6", num_group="2", stride="[2,2]", pad="(1, 1)",
                adj="(1,1)", no_bias="False")
    values = dict(kernel=(3, 3), num_filter=6, num_group=2, stride=(2, 2), pad=(1, 1),
                  adj=(1, 1), no_bias=False)
    with mxdeconv.use_impl(impl):
        by_text = nd.Deconvolution_backward(out_grad, data, weight, bias, name="d", **text)
        by_values = nd.Deconvolution_backward(out_grad, data, weight, bias, **values)
    for a, b in zip(by_text, by_values):
        assert_array_equal(a.asnumpy(), b.asnumpy())


def test_text_and_values_share_the_cached_plan():
    """The prepared call is keyed by the arguments as given, but the plans under it
    by the parsed geometry: a text call after a value call builds nothing but its
    own prepared call (one miss, one entry), then runs as a repeated value call."""
    data, weight = nd.ones((1, 4, 7, 7)), nd.ones((4, 5, 3, 3))
    values = dict(kernel=(3, 3), stride=(2, 2), num_filter=5, no_bias=True)
    text = dict(kernel="(3, 3)", stride="[2, 2]", num_filter="5", no_bias="true")
    steps = []
    with mxdeconv.use_impl("onednn"):
        nd.Deconvolution(data, weight, **values)
        mxdeconv.finish_tuning()  # settled: its calls may take the prepared path
        mxdeconv.clear_cache()
        for kwargs in (values, values, text, text):
            before = mxdeconv.cache_info()
            nd.Deconvolution(data, weight, **kwargs)
            after = mxdeconv.cache_info()
            steps.append({k: after[k] - before[k] for k in ("size", "hits", "misses")})
    first_value, repeated_value, first_text, repeated_text = steps
    assert first_value["misses"] > 1                       # prepared call and plans built
    assert first_text["size"] == 1 and first_text["misses"] == 1 and first_text["hits"] >= 1
    assert repeated_text == repeated_value


# -- malformed text: MXNet's message, the argument, the value and the expected form ---------
SHAPE_FORMS = r"such as '\(3, 3\)', '\[3, 3\]' or '3'"
TEXT_ERRORS = {
    "kernel_bad_entry": (dict(kernel="(3, x)"), MXNetError,
                         rf"Invalid Parameter format for kernel expect Shape\(tuple\) "
                         rf"{SHAPE_FORMS} but value='\(3, x\)'"),
    "stride_unclosed": (dict(stride="[2, 2"), MXNetError,
                        rf"Invalid Parameter format for stride expect Shape\(tuple\) "
                        rf"{SHAPE_FORMS} but value='\[2, 2'"),
    "pad_float": (dict(pad="(1.0, 1.0)"), MXNetError,
                  rf"Invalid Parameter format for pad expect Shape\(tuple\) {SHAPE_FORMS} "
                  rf"but value='\(1.0, 1.0\)'"),
    "kernel_unknown_rank": (dict(kernel="None"), MXNetError,
                            rf"kernel='None' leaves the number of dimensions unknown; give "
                            rf"kernel as a shape {SHAPE_FORMS}"),
    "stride_one_tuple": (dict(stride="2"), MXNetError,
                         r"stride must have the same number of dimensions as kernel, "
                         r"but kernel=\(3, 3\) while stride=\(2,\)"),
    "num_filter_float": (dict(num_filter="6.5"), MXNetError,
                         r"Invalid Parameter format for num_filter expect int such as '6' "
                         r"but value='6.5'"),
    "num_filter_zero": (dict(num_filter="0"), MXNetError,
                        r"num_filter must be >= 1, got num_filter=0"),
    "num_group_word": (dict(num_group="two"), MXNetError,
                       r"Invalid Parameter format for num_group expect int such as '6' "
                       r"but value='two'"),
    "workspace_empty": (dict(workspace=""), MXNetError,
                        r"Invalid Parameter format for workspace expect int such as '6' "
                        r"but value=''"),
    "no_bias_maybe": (dict(no_bias="maybe"), MXNetError,
                      r"Invalid Parameter format for no_bias expect boolean \('true', 'false', "
                      r"'1' or '0', any case\) but value='maybe'"),
    "no_bias_yes": (dict(no_bias="yes"), MXNetError,
                    r"Invalid Parameter format for no_bias expect boolean .* but value='yes'"),
    "cudnn_off_padded": (dict(cudnn_off=" true"), MXNetError,
                         r"Invalid Parameter format for cudnn_off expect boolean .* "
                         r"but value=' true'"),
    "layout_lower_case": (dict(layout="nchw"), MXNetError,
                          r"layout 'nchw' is not supported for a 2-D deconvolution: "
                          r"only 'NCHW' \(or None\) is"),
    "cudnn_tune_upper_case": (dict(cudnn_tune="OFF"), MXNetError,
                              r"cudnn_tune must be one of \(None, 'off', 'limited_workspace', "
                              r"'fastest'\), got 'OFF'"),
}


@pytest.mark.parametrize("case_id", sorted(TEXT_ERRORS))
def test_malformed_text(case_id):
    change, error, pattern = TEXT_ERRORS[case_id]
    kwargs = dict(dict(kernel=(3, 3), num_filter=6), **change)
    data, weight = nd.ones((1, 4, 5, 5)), nd.ones((4, 6, 3, 3))
    for call in (lambda: nd.Deconvolution(data, weight, **kwargs),
                 lambda: nd.Deconvolution_backward(nd.ones((1, 6, 7, 7)), data, weight,
                                                   **kwargs)):
        with pytest.raises(error) as info:
            call()
        assert re.fullmatch(pattern, str(info.value)), str(info.value)


def test_train_stays_a_python_bool():
    """``train`` is mxdeconv's own argument, not an MXNet attribute: no text form."""
    with pytest.raises(TypeError, match=r"train must be a bool, got 'true' of type str"):
        nd.Deconvolution(nd.ones((1, 1, 2, 2)), nd.ones((1, 1, 2, 2)), kernel=(2, 2),
                         num_filter=1, train="true")


# -- name= -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["deconv0", "", None])
def test_name_is_accepted_and_ignored(name):
    data, weight = nd.ones((1, 2, 3, 3)), nd.ones((2, 1, 2, 2))
    out = nd.Deconvolution(data, weight, kernel=(2, 2), num_filter=1, name=name)
    assert out.shape == (1, 1, 4, 4)
    grads = nd.Deconvolution_backward(nd.ones(out.shape), data, weight, kernel=(2, 2),
                                      num_filter=1, name=name)
    assert grads[0].shape == (1, 2, 3, 3)


@pytest.mark.parametrize("name", [3, b"deconv", ["deconv"]])
def test_name_must_be_a_string(name):
    data, weight = nd.ones((1, 2, 3, 3)), nd.ones((2, 1, 2, 2))
    message = rf"name must be a string or None, got {re.escape(repr(name))} of type " \
              rf"{type(name).__name__}"
    with pytest.raises(TypeError, match=message):
        nd.Deconvolution(data, weight, kernel=(2, 2), num_filter=1, name=name)
    with pytest.raises(TypeError, match=message):
        nd.Deconvolution_backward(nd.ones((1, 1, 4, 4)), data, weight, kernel=(2, 2),
                                  num_filter=1, name=name)


def test_gluon_text_arguments_equal_python_ones():
    by_text = gluon.Conv2DTranspose("4", 3, strides="(2, 2)", padding="[1,1]",
                                    dilation="(1, 1,)", groups=" 2", in_channels=4)
    by_values = gluon.Conv2DTranspose(4, 3, strides=2, padding=1, groups=2, in_channels=4)
    assert by_text._kwargs == by_values._kwargs and by_text._channels == 4
    one_d = gluon.Conv1DTranspose(2, "3", strides="2", output_padding="1")
    assert one_d._kwargs == gluon.Conv1DTranspose(2, 3, strides=2, output_padding=1)._kwargs
