"""Parameter validation and shape inference (mxdeconv.semantics.attributes), MXNet 1.9.1
semantics."""
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.attributes import (DeconvolutionParam, infer_geometry, parse_bool_text,
                             parse_int_text, parse_params, parse_shape_text)
from strategies import EDGE_CASES, configs, full_size


def geometry(data_shape, **kwargs):
    return infer_geometry(parse_params(kwargs), tuple(data_shape))


def raises(message, exc=MXNetError):
    """pytest.raises matching ``message`` literally (not as a regex)."""
    return pytest.raises(exc, match=re.escape(message))


def test_mxnet_error_is_a_value_error():
    assert issubclass(MXNetError, ValueError)
    with pytest.raises(ValueError):
        DeconvolutionParam.from_kwargs(num_filter=1)


# -- normalisation ------------------------------------------------------------
def test_defaults_are_mxnet_defaults():
    p = DeconvolutionParam.from_kwargs(kernel=(3, 3), num_filter=8)
    assert (p.stride, p.dilate, p.pad, p.adj, p.target_shape) == ((1, 1), (1, 1), (0, 0),
                                                                  (0, 0), ())
    assert (p.num_group, p.no_bias, p.layout, p.ndim) == (1, True, "NCHW", 2)


@pytest.mark.parametrize("kernel, normalised, layout", [
    (3, (3,), "NCW"), ([3], (3,), "NCW"), ((3, 2), (3, 2), "NCHW"),
    ([3, 2, 1], (3, 2, 1), "NCDHW")])
def test_kernel_spellings_and_default_layout(kernel, normalised, layout):
    p = DeconvolutionParam.from_kwargs(kernel=kernel, num_filter=1)
    assert p.kernel == normalised
    assert p.layout == layout
    assert DeconvolutionParam.from_kwargs(kernel=kernel, num_filter=1, layout=layout) == p


def test_ignored_tuning_fields_are_accepted():
    p = parse_params(dict(kernel=(2,), num_filter=1, workspace=1024, cudnn_tune="fastest",
                          cudnn_off=True))
    assert p == DeconvolutionParam.from_kwargs(kernel=(2,), num_filter=1)


def test_parse_params_accepts_lists():
    kw = dict(kernel=(3, 3), stride=(2, 2), num_filter=4)
    assert parse_params(kw) == parse_params(dict(kw))
    assert parse_params(dict(kernel=[3, 3], stride=[2, 2], num_filter=4)) == parse_params(kw)


def test_geometry_fields():
    g = geometry((2, 6, 5, 4), kernel=(3, 2), stride=(2, 3), pad=(1, 0), adj=(1, 2),
                 num_filter=4, num_group=2, no_bias=False)
    assert g.out_shape == (2, 4, 2 * 4 + 3 - 2 + 1, 3 * 3 + 2 + 2)
    assert g.weight_shape == (6, 2, 3, 2)
    assert g.bias_shape == (4,)
    assert (g.pad_l, g.pad_r, g.adj) == ((1, 0), (0, -2), (1, 2))
    assert geometry((2, 6, 5, 4), kernel=(3, 2), num_filter=4).bias_shape is None


def test_batch_zero_is_a_valid_shape():
    assert geometry((0, 3, 4), kernel=(3,), num_filter=2).out_shape == (0, 2, 6)


def test_target_shape_overrides_pad_and_adj():
    g = geometry((1, 1, 4, 4), kernel=(3, 3), stride=(2, 2), pad=(2, 0), adj=(5, 7),
                 target_shape=(8, 9), num_filter=1)
    # full 9: total 1 -> pad 1, adj 1; total 0 -> pad 0, adj 0
    assert g.out_shape == (1, 1, 8, 9)
    assert (g.pad_l, g.pad_r, g.adj) == ((1, 0), (0, 0), (1, 0))


def test_all_zero_target_shape_is_ignored():
    g = geometry((1, 1, 4), kernel=(3,), stride=(2,), pad=(1,), adj=(1,), target_shape=(0,),
                 num_filter=1)
    assert g.out_shape == (1, 1, 8)


# -- errors -------------------------------------------------------------------
VALID = dict(kernel=(3, 3), num_filter=4)


@pytest.mark.parametrize("overrides, message", [
    (dict(kernel=None), "Required parameter kernel of Shape(tuple) is not presented"),
    (dict(num_filter=None), "Required parameter num_filter of int is not presented"),
    (dict(kernel=()), "kernel must have 1, 2 or 3 dimensions, got kernel=()"),
    (dict(kernel=(1, 1, 1, 1)), "kernel must have 1, 2 or 3 dimensions"),
    (dict(kernel=(3, 0)), "incorrect kernel size: kernel=(3, 0)"),
    (dict(stride=(0, 1)), "incorrect stride: stride=(0, 1); every entry must be >= 1"),
    (dict(dilate=(1, 0)), "incorrect dilate: dilate=(1, 0); every entry must be >= 1"),
    (dict(pad=(-1, 0)), "incorrect pad: pad=(-1, 0); every entry must be >= 0"),
    (dict(adj=(0, -1)), "incorrect adj: adj=(0, -1); every entry must be >= 0"),
    (dict(target_shape=(-2, 4)), "incorrect target_shape"),
    (dict(stride=(2,)), "stride must have the same number of dimensions as kernel, "
                        "but kernel=(3, 3) while stride=(2,)"),
    (dict(dilate=(1, 1, 1)), "dilate must have the same number of dimensions as kernel"),
    (dict(pad=(1, 1, 1)), "pad must have the same number of dimensions as kernel"),
    (dict(adj=(1,)), "adj must have the same number of dimensions as kernel"),
    (dict(target_shape=(4,)), "target_shape must have the same number of dimensions"),
    (dict(stride=(2, 2), adj=(2, 0)), "adj(y) must be samller than stride[0]"),
    (dict(stride=(2, 2), adj=(0, 3)), "adj(x) must be samller than stride[1]"),
    (dict(adj=(1, 0)), "adj(y) must be samller than stride[0]"),  # default stride 1
    (dict(kernel=(3,), stride=(2,), adj=(2,)), "adj(x) must be samller than stride[0]"),
    (dict(kernel=(3, 3, 3), stride=(2, 2, 2), adj=(0, 2, 0)),
     "adj(h) must be samller than stride[1]"),
    (dict(num_filter=0), "num_filter must be >= 1"),
    (dict(num_group=0), "num_group must be >= 1"),
    (dict(num_filter=5, num_group=2),
     "output num_filter must divide group size: num_filter=5, num_group=2"),
    (dict(layout="NHWC"), "layout 'NHWC' is not supported for a 2-D deconvolution"),
    (dict(kernel=(3,), layout="NCHW"), "layout 'NCHW' is not supported for a 1-D"),
])
def test_param_errors(overrides, message):
    with raises(message):
        DeconvolutionParam.from_kwargs(**{**VALID, **overrides})


@pytest.mark.parametrize("overrides, message", [
    (dict(kernel=(3.0, 3)), "kernel[0] must be an integer, got 3.0"),
    (dict(kernel=b"3"), "kernel must be a tuple of integers"),
    (dict(kernel=(True, 3)), "kernel[0] must be an integer"),
    (dict(stride=(2, 1.5)), "stride[1] must be an integer"),
    (dict(num_filter=2.5), "num_filter must be an integer"),
    (dict(num_group=1.0), "num_group must be an integer"),
    (dict(no_bias=2), "no_bias must be a bool"),
])
def test_param_type_errors(overrides, message):
    with raises(message, TypeError):
        DeconvolutionParam.from_kwargs(**{**VALID, **overrides})


# -- MXNet's text forms (dmlc's parser; tests/semantics/test_attr_forms.py checks them against
# MXNet 1.9.1 itself) ------------------------------------------------------------------
SHAPE_TEXT = [
    ("(3, 3)", (3, 3)), ("(3,3)", (3, 3)), ("[3,3]", (3, 3)), ("(3, 3,)", (3, 3)),
    (" ( 3 , 3 ) ", (3, 3)), ("(3L, 3L)", (3, 3)), ("(3, 3]", (3, 3)), ("[3, 3)", (3, 3)),
    ("(+3, 3)", (3, 3)), ("(03, -3)", (3, -3)), ("3", (3,)), (" 3 ", (3,)), ("-3", (-3,)),
    ("(3,)", (3,)), ("[7]", (7,)), ("()", ()), ("[ ]", ()), ("(2, 2, 2)", (2, 2, 2)),
    ("None", None), ("None  ", None), ("N one", None),
]
BAD_SHAPE_TEXT = ["", " ", "(3, x)", "(3 3)", "33x", "3,3", "((3, 3))", "(3, 3", "(3, 3)x",
                  "(3,,3)", "(3.0, 3.0)", "3.0", "3L", "+3", "(0x3, 3)", "(3L , 3)", "(,)",
                  "{3, 3}", "Nonsense", "none", "(None)", "(3, 3) (3, 3)"]


@pytest.mark.parametrize("text, shape", SHAPE_TEXT)
def test_shape_text(text, shape):
    assert parse_shape_text("kernel", text) == shape


@pytest.mark.parametrize("text", BAD_SHAPE_TEXT)
def test_bad_shape_text(text):
    with raises(f"Invalid Parameter format for kernel expect Shape(tuple) such as '(3, 3)', "
                f"'[3, 3]' or '3' but value={text!r}"):
        parse_shape_text("kernel", text)


@pytest.mark.parametrize("text, value", [("6", 6), (" 6 ", 6), ("+6", 6), ("06", 6),
                                         ("-6", -6), ("\t6\n", 6)])
def test_int_text(text, value):
    assert parse_int_text("num_filter", text) == value


@pytest.mark.parametrize("text", ["", "6.5", "6.0", "6e0", "6L", "0x6", "six", "None", "6 6",
                                  "+-6", "٦"])
def test_bad_int_text(text):
    with raises(f"Invalid Parameter format for num_filter expect int such as '6' "
                f"but value={text!r}"):
        parse_int_text("num_filter", text)


@pytest.mark.parametrize("text, value", [("true", True), ("True", True), ("TRUE", True),
                                         ("tRuE", True), ("1", True), ("false", False),
                                         ("False", False), ("FALSE", False), ("0", False)])
def test_bool_text(text, value):
    assert parse_bool_text("no_bias", text) is value


@pytest.mark.parametrize("text", ["", "yes", "no", "maybe", "2", "1.0", " true", "true ",
                                  "None", "t", "\u0130"])
def test_bad_bool_text(text):
    with raises(f"Invalid Parameter format for no_bias expect boolean ('true', 'false', "
                f"'1' or '0', any case) but value={text!r}"):
        parse_bool_text("no_bias", text)


def test_text_parameters_equal_python_ones():
    text = DeconvolutionParam.from_kwargs(
        kernel="(3, 3)", num_filter="8", stride="[2,2]", pad="(1, 1)", adj="(1,1)",
        dilate="()", target_shape="()", num_group="2", no_bias="False",
        layout="None", workspace="512", cudnn_tune="None", cudnn_off="true")
    values = DeconvolutionParam.from_kwargs(
        kernel=(3, 3), num_filter=8, stride=(2, 2), pad=(1, 1), adj=(1, 1), num_group=2,
        no_bias=False)
    assert text == values and hash(text) == hash(values)


def test_unknown_keyword_is_a_type_error():
    with raises("Deconvolution got unexpected keyword argument(s) ['kernal']", TypeError):
        parse_params(dict(VALID, kernal=(3, 3)))


@pytest.mark.parametrize("data_shape, overrides, message", [
    ((1, 2, 4), {}, "data must have 4 dimensions"),
    ((1, 2, 4, 4, 4), {}, "data must have 4 dimensions"),
    ((1, -2, 4, 4), {}, "data shape must be non-negative"),
    ((1, 2, 0, 4), {}, "data spatial dims must be >= 1"),
    ((1, 0, 4, 4), {}, "input num_filter must divide group size: data has 0 channels"),
    ((1, 3, 4, 4), dict(num_group=2),
     "input num_filter must divide group size: data has 3 channels, num_group=2"),
    # full 3*(4-1)+3 = 12 < 13
    ((1, 2, 4, 4), dict(stride=(3, 3), target_shape=(13, 12)), "too big target shape"),
    # stride 1, total 6 - 5 = 1 is odd: inferred adj 1 >= stride 1
    ((1, 2, 4, 4), dict(target_shape=(5, 6)), "adj(y) must be samller than stride[0]"),
    ((1, 2, 4, 4), dict(target_shape=(6, 5)), "target_shape=(6, 5) implies adj=(0, 1)"),
    # full 3: 3 - 2*2 + 0 = -1
    ((1, 2, 1, 1), dict(pad=(2, 0)), "output size must be positive"),
    # full 4 - 2*2 = 0: exactly empty is rejected too
    ((1, 2, 2, 2), dict(pad=(0, 2)), "output size must be positive"),
    # a zero entry next to a non-zero one is a target of size 0
    ((1, 2, 4, 4), dict(target_shape=(0, 6)), "output size must be positive"),
])
def test_geometry_errors(data_shape, overrides, message):
    with raises(message):
        geometry(data_shape, **{**VALID, "num_filter": 2, **overrides})


# -- shape inference ------------------------------------------------------------
def expected_out_spatial(cfg):
    """MXNet's formula, written out here independently of params.py and reference.py."""
    if any(cfg.target_shape):
        return cfg.target_shape  # a valid target shape is reached exactly
    return tuple(s * (i - 1) + d * (k - 1) + 1 - 2 * p + a
                 for i, k, s, d, p, a in zip(cfg.spatial, cfg.kernel, cfg.stride, cfg.dilate,
                                             cfg.pad, cfg.adj))


def check_geometry(cfg):
    g = geometry(cfg.data_shape, **cfg.kwargs())
    expected = (cfg.batch, cfg.num_filter) + expected_out_spatial(cfg)
    assert g.out_shape == expected == cfg.out_shape
    assert (g.pad_l, g.pad_r) == cfg.pads
    assert g.weight_shape == cfg.weight_shape
    assert g.bias_shape == cfg.bias_shape


@settings(max_examples=150, deadline=None)
@given(cfg=configs(min_batch=0))
def test_inferred_shape_matches_formula(cfg):
    check_geometry(cfg)


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_case_shapes(name):
    check_geometry(EDGE_CASES[name])


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_too_large_pad_is_rejected(data):
    ndim = data.draw(st.integers(1, 3))
    small = st.integers(1, 3)
    spatial, kernel, stride, dilate = ([data.draw(small) for _ in range(ndim)]
                                       for _ in range(4))
    adj = [data.draw(st.integers(0, s - 1)) for s in stride]
    full = [full_size(*a) for a in zip(spatial, kernel, stride, dilate)]
    bad = data.draw(st.integers(0, ndim - 1))
    # smallest pad that makes dim `bad` empty or negative: full - 2*pad + adj <= 0
    pad = [0] * ndim
    pad[bad] = (full[bad] + adj[bad] + 1) // 2 + data.draw(st.integers(0, 2))
    with raises("output size must be positive"):
        geometry([1, 1] + spatial, kernel=tuple(kernel), stride=tuple(stride),
                 dilate=tuple(dilate), pad=tuple(pad), adj=tuple(adj), num_filter=1)
