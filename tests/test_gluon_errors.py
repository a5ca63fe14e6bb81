"""mxdeconv.gluon against bad input: every constructor argument.

As everywhere in mxdeconv (tests/test_errors.py), a bad value raises MXNetError
and a value of the wrong Python type TypeError, whose message names the
argument, what it accepts and what it got.
"""
import re

import numpy as np
import pytest

from mxdeconv import MXNetError, gluon

MAX = 2**31 - 1
INT_RANGE = re.escape(f"must be an int in [1, {MAX}]")
CLASSES = {1: gluon.Conv1DTranspose, 2: gluon.Conv2DTranspose, 3: gluon.Conv3DTranspose}


# -- constructor -----------------------------------------------------------------------
# Each case changes a valid Conv2DTranspose(4, 3, in_channels=4); the pattern is the
# whole message (re.fullmatch), so the argument, the expectation and the value show.
CONSTRUCTOR_ERRORS = {
    "channels_zero": (dict(channels=0), MXNetError, rf"channels {INT_RANGE}, got channels=0"),
    "channels_negative": (dict(channels=-4), MXNetError,
                          rf"channels {INT_RANGE}, got channels=-4"),
    "channels_huge": (dict(channels=2**70), MXNetError,
                      rf"channels {INT_RANGE}, got channels={2**70}"),
    "channels_float": (dict(channels=8.9), TypeError,
                       r"channels must be an int, got 8.9 of type float"),
    "channels_integral_float": (dict(channels=8.0), TypeError,
                                r"channels must be an int, got 8.0 of type float"),
    "channels_bool": (dict(channels=True), TypeError,
                      r"channels must be an int, got True of type bool"),
    "channels_string": (dict(channels="4"), TypeError,
                        r"channels must be an int, got '4' of type str"),
    "groups_zero": (dict(groups=0), MXNetError, rf"groups {INT_RANGE}, got groups=0"),
    "groups_negative": (dict(groups=-1), MXNetError, rf"groups {INT_RANGE}, got groups=-1"),
    "groups_float": (dict(groups=2.0), TypeError, r"groups must be an int, got 2.0 of type float"),
    "channels_not_divisible": (dict(channels=3, groups=2), MXNetError,
                               r"channels=3 must be divisible by groups=2"),
    "in_channels_not_divisible": (dict(groups=2, in_channels=3), MXNetError,
                                  r"in_channels=3 must be divisible by groups=2"),
    "in_channels_negative": (dict(in_channels=-2), MXNetError,
                             re.escape(f"in_channels must be an int in [0, {MAX}], "
                                       "got in_channels=-2")),
    "in_channels_none": (dict(in_channels=None), TypeError,
                         r"in_channels must be an int, got None of type NoneType"),
    "kernel_float": (dict(kernel_size=3.5), TypeError,
                     r"kernel_size must be an int or a list of 2 ints, got 3.5 of type float"),
    "kernel_float_entry": (dict(kernel_size=(3.5, 3)), TypeError,
                           r"kernel_size\[0\] must be an int, got 3.5 of type float"),
    "kernel_string": (dict(kernel_size="33"), TypeError,
                      r"kernel_size must be an int or a list of 2 ints, got '33' of type str"),
    "kernel_string_form": (dict(kernel_size="(3, 3)"), TypeError,
                           r"kernel_size must be an int or a list of 2 ints, "
                           r"got '\(3, 3\)' of type str"),
    "kernel_nested": (dict(kernel_size=(3, (3, 3))), TypeError,
                      r"kernel_size\[1\] must be an int, got \(3, 3\) of type tuple"),
    "kernel_ndarray": (dict(kernel_size=np.array([3, 3])), TypeError,
                       r"kernel_size must be an int or a list of 2 ints, got array\(\[3, 3\]\) "
                       r"of type ndarray"),
    "kernel_none": (dict(kernel_size=None), TypeError,
                    r"kernel_size must be an int or a list of 2 ints, got None of type NoneType"),
    "kernel_too_long": (dict(kernel_size=(3, 3, 3)), MXNetError,
                        r"kernel_size must be an int or a list of 2 ints, "
                        r"got kernel_size=\(3, 3, 3\)"),
    "kernel_empty": (dict(kernel_size=[]), MXNetError,
                     r"kernel_size must be an int or a list of 2 ints, got kernel_size=\[\]"),
    "kernel_zero": (dict(kernel_size=(3, 0)), MXNetError,
                    rf"kernel_size\[1\] {INT_RANGE}, got kernel_size\[1\]=0"),
    "kernel_huge": (dict(kernel_size=2**70), MXNetError,
                    rf"kernel_size {INT_RANGE}, got kernel_size={2**70}"),
    "strides_float": (dict(strides=(2.7, 2.7)), TypeError,
                      r"strides\[0\] must be an int, got 2.7 of type float"),
    "strides_zero": (dict(strides=0), MXNetError, rf"strides {INT_RANGE}, got strides=0"),
    "strides_bool_entry": (dict(strides=(True, 1)), TypeError,
                           r"strides\[0\] must be an int, got True of type bool"),
    "padding_negative": (dict(padding=(-1, 0)), MXNetError,
                         re.escape(f"padding[0] must be an int in [0, {MAX}], got padding[0]=-1")),
    "padding_huge": (dict(padding=(0, 2**63)), MXNetError,
                     re.escape(f"padding[1] must be an int in [0, {MAX}], "
                               f"got padding[1]={2**63}")),
    "padding_length": (dict(padding=(1,)), MXNetError,
                       r"padding must be an int or a list of 2 ints, got padding=\(1,\)"),
    "output_padding_negative": (dict(output_padding=-1), MXNetError,
                                re.escape(f"output_padding must be an int in [0, {MAX}], "
                                          "got output_padding=-1")),
    "output_padding_not_below_strides": (dict(strides=(2, 1), output_padding=(1, 1)), MXNetError,
                                         r"output_padding must be smaller than strides in every "
                                         r"dim, got output_padding=\(1, 1\) and strides=\(2, 1\)"),
    "dilation_zero": (dict(dilation=(1, 0)), MXNetError,
                      rf"dilation\[1\] {INT_RANGE}, got dilation\[1\]=0"),
    "dilation_string_entry": (dict(dilation=("2", 2)), TypeError,
                              r"dilation\[0\] must be an int, got '2' of type str"),
    "layout_wrong": (dict(layout="NHWC"), MXNetError,
                     r"layout must be one of \('NCHW', None\), got 'NHWC'"),
    "layout_type": (dict(layout=4), TypeError,
                    r"layout must be one of \('NCHW', None\), got 4 of type int"),
    "activation_unsupported": (dict(activation="tanh"), MXNetError,
                               r"activation must be one of \(None, 'relu'\), got 'tanh'"),
    "activation_type": (dict(activation=["relu"]), TypeError,
                        r"activation must be one of \(None, 'relu'\), got \['relu'\] of type list"),
    "use_bias_string": (dict(use_bias="False"), TypeError,
                        r"use_bias must be a bool \(True, False, 0 or 1\), "
                        r"got 'False' of type str"),
    "use_bias_two": (dict(use_bias=2), TypeError,
                     r"use_bias must be a bool \(True, False, 0 or 1\), got 2 of type int"),
    "use_bias_none": (dict(use_bias=None), TypeError,
                      r"use_bias must be a bool \(True, False, 0 or 1\), "
                      r"got None of type NoneType"),
    "weight_initializer_unknown": (dict(weight_initializer="gaussian"), MXNetError,
                                   r"unknown initializer: weight_initializer must be an "
                                   r"Initializer or one of \[.*\], got 'gaussian'"),
    "weight_initializer_type": (dict(weight_initializer=0.5), TypeError,
                                r"weight_initializer must be an Initializer or one of \[.*\], "
                                r"got 0.5 of type float"),
    "bias_initializer_type": (dict(bias_initializer=gluon.Uniform), TypeError,
                              r"bias_initializer must be an Initializer or one of \[.*\], "
                              r"got <class 'mxdeconv.gluon.Uniform'> of type type"),
    "prefix_type": (dict(prefix=3), TypeError,
                    r"prefix must be a string or None, got 3 of type int"),
    "params_given": (dict(params={}), MXNetError,
                     r"sharing parameters through params= is not supported: params must be "
                     r"None, got \{\}"),
    "dtype_keyword": (dict(dtype="float32"), TypeError,
                      r".*__init__\(\) got an unexpected keyword argument 'dtype'"),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTOR_ERRORS))
def test_constructor_error(name):
    change, error, pattern = CONSTRUCTOR_ERRORS[name]
    kwargs = dict(dict(channels=4, kernel_size=3, in_channels=4), **change)
    with pytest.raises(error) as info:
        gluon.Conv2DTranspose(**kwargs)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)


@pytest.mark.parametrize("ndim", sorted(CLASSES))
@pytest.mark.parametrize("argument", ["kernel_size", "strides", "padding", "output_padding",
                                      "dilation"])
def test_every_tuple_argument_of_every_class(ndim, argument):
    """Per class (its own number of dims): length, entry type, string, range."""
    low = 1 if argument in ("kernel_size", "strides", "dilation") else 0
    key = {"kernel_size": "kernel", "strides": "stride", "padding": "pad",
           "output_padding": "adj", "dilation": "dilate"}[argument]

    def build(value):
        kwargs = dict(kernel_size=2, strides=2 if argument == "output_padding" else 1)
        return CLASSES[ndim](2, **dict(kwargs, **{argument: value}))

    assert build([low] * ndim)._kwargs[key] == (low,) * ndim
    assert build(np.int64(low))._kwargs[key] == (low,) * ndim
    with pytest.raises(MXNetError, match=rf"{argument} must be an int or a list of {ndim} ints"):
        build((low,) * (ndim + 1))
    with pytest.raises(TypeError, match=rf"{argument}\[{ndim - 1}\] must be an int, got 1.5"):
        build((low,) * (ndim - 1) + (1.5,))
    with pytest.raises(TypeError, match=rf"{argument} must be an int or a list of {ndim} ints, "
                                        r"got '1' of type str"):
        build("1")
    with pytest.raises(MXNetError, match=rf"{argument}\[0\] must be an int in \[{low}, "):
        build((low - 1,) * ndim)
    with pytest.raises(MXNetError, match=rf"{argument} must be an int in \[{low}, {MAX}\], "
                                         rf"got {argument}={2**70}"):
        build(2**70)


def test_valid_spellings_are_accepted():
    """NumPy integers and bools, lists, 0/1 for bools, the layout by name or None."""
    i = np.int64
    layer = gluon.Conv2DTranspose(i(4), [i(3), 2], strides=(i(2), 2), padding=[1, i(0)],
                                  output_padding=i(1), dilation=(1, i(2)), groups=i(2),
                                  layout=None, use_bias=np.bool_(False), in_channels=i(6),
                                  weight_initializer="xavier", bias_initializer=gluon.Zero())
    assert layer._kwargs == dict(kernel=(3, 2), stride=(2, 2), dilate=(1, 2), pad=(1, 0),
                                 adj=(1, 1), num_filter=4, num_group=2, no_bias=True,
                                 layout="NCHW")
    assert all(type(v) is int for v in layer._kwargs["kernel"] + layer.weight.shape)
    assert gluon.Conv1DTranspose(2, 3, use_bias=0).bias is None
    assert gluon.Conv3DTranspose(2, 3, use_bias=1, layout="NCDHW").bias is not None
    assert gluon.Conv1DTranspose(2, np.int32(MAX)).weight.shape == (0, 2, MAX)


def test_a_failed_constructor_does_not_take_a_name():
    before = gluon.Conv2DTranspose(2, 3).prefix
    with pytest.raises(TypeError):
        gluon.Conv2DTranspose(2, 3.5)
    after = gluon.Conv2DTranspose(2, 3).prefix
    assert int(after[4:-1]) == int(before[4:-1]) + 1
