"""mxdeconv.gluon against bad input: every constructor argument, the Parameter and
ParameterDict methods, load_parameters and a deferred first forward.

As everywhere in mxdeconv (tests/ops/test_errors.py), a bad value raises MXNetError
and a value of the wrong Python type TypeError, whose message names the
argument, what it accepts and what it got; and nothing is half-done: after an
error every parameter holds exactly the NDArray, values, shape and dtype it held
before.
"""
import io
import re
import warnings
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

from mxdeconv import MXNetError, autograd, gluon, nd
from mxdeconv.semantics.attributes import DeconvolutionParam

MAX = 2**31 - 1
INT_RANGE = re.escape(f"must be an int in [1, {MAX}]")
CLASSES = {1: gluon.Conv1DTranspose, 2: gluon.Conv2DTranspose, 3: gluon.Conv3DTranspose}


# -- helpers ---------------------------------------------------------------------------
def state(layer):
    """What a failed call must not change: per parameter its NDArray object, a copy
    of its values, its shape, dtype, pending deferred initializer, grad_req and contexts."""
    return {key: (param._data, None if param._data is None else param._data.asnumpy().copy(),
                  param.shape, param.dtype, param._deferred, param.grad_req,
                  None if param._ctx_list is None else list(param._ctx_list))
            for key, param in layer._structural().items()}


def assert_same_state(layer, before):
    after = state(layer)
    assert after.keys() == before.keys()
    for key, (data, values, shape, dtype, deferred, grad_req, contexts) in before.items():
        now = after[key]
        assert now[0] is data, f"{key}: another NDArray"
        assert now[2:] == (shape, dtype, deferred, grad_req, contexts), \
            f"{key}: shape/dtype/init/contexts changed"
        if values is None:
            assert now[1] is None
        else:
            assert now[1].dtype == values.dtype
            assert_array_equal(now[1], values, err_msg=f"{key}: values changed")


def initialised_layer(seed=0, **kwargs):
    """Conv2DTranspose(4, 3, groups=2, in_channels=4): weight (4, 2, 3, 3), bias (4,),
    both random (the bias too, so that a replaced bias shows)."""
    layer = gluon.Conv2DTranspose(4, 3, groups=2, **dict(dict(in_channels=4), **kwargs))
    np.random.seed(seed)
    layer.initialize(gluon.Uniform(1.0))
    if layer.bias is not None:
        layer.bias.set_data(np.random.uniform(-1, 1, layer.bias.shape))
    return layer


W_SHAPE, B_SHAPE = (4, 2, 3, 3), (4,)


def good(shape, dtype=np.float32, value=0.5):
    return np.full(shape, value, dtype)


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
    "channels_bad_text": (dict(channels="4.0"), MXNetError,
                          r"Invalid Parameter format for channels expect int such as '6' "
                          r"but value='4.0'"),
    "channels_bytes": (dict(channels=b"4"), TypeError,
                       r"channels must be an int, got b'4' of type bytes"),
    "groups_bad_text": (dict(groups="two"), MXNetError,
                        r"Invalid Parameter format for groups expect int such as '6' "
                        r"but value='two'"),
    "strides_bad_text": (dict(strides="(2, x)"), MXNetError,
                         r"Invalid Parameter format for strides expect Shape\(tuple\) such as "
                         r"'\(3, 3\)', '\[3, 3\]' or '3' but value='\(2, x\)'"),
    "strides_text_rank": (dict(strides="2"), MXNetError,
                          r"strides must be an int or a list of 2 ints, got strides='2', "
                          r"which MXNet reads as \(2,\)"),
    "padding_text_none": (dict(padding="None"), MXNetError,
                          r"padding must be an int or a list of 2 ints, got padding='None', "
                          r"which MXNet reads as a shape of unknown rank"),
    "in_channels_text": (dict(in_channels="4"), TypeError,
                         r"in_channels must be an int, got '4' of type str"),
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
    "activation_unsupported": (dict(activation="leaky"), MXNetError,
                               r"activation must be one of \(None, 'relu', 'sigmoid', "
                               r"'softrelu', 'softsign', 'tanh'\), got 'leaky'"),
    "activation_type": (dict(activation=["relu"]), TypeError,
                        r"activation must be one of \(None, 'relu', 'sigmoid', 'softrelu', "
                        r"'softsign', 'tanh'\), got \['relu'\] of type list"),
    "use_bias_string": (dict(use_bias="False"), TypeError,
                        r"use_bias must be a bool \(True, False, 0 or 1\), "
                        r"got 'False' of type str \(MXNet would read any non-empty string "
                        r"as True\)"),
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
                              r"got <class 'mxdeconv.initializer.Uniform'> of type type"),
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
    # MXNet's text: the layer hands it to the operator, which reads "1" as (1,);
    # kernel_size and output_padding must first be as long as the layer has dims.
    text = "(" + ", ".join([str(low)] * ndim) + ")"
    if argument in ("kernel_size", "output_padding"):
        if ndim == 1:
            assert build(str(low))._kwargs[key] == (low,)
        else:
            with pytest.raises(TypeError, match=rf"{argument} must be an int or a list of "
                                                rf"{ndim} ints, got '{re.escape(text)}' "
                                                r"of type str"):
                build(text)
    else:
        assert build(text)._kwargs[key] == (low,) * ndim
        if ndim > 1:
            with pytest.raises(MXNetError, match=rf"{argument} must be an int or a list of {ndim} "
                                                 rf"ints, got {argument}='1', which MXNet reads "
                                                 r"as \(1,\)"):
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


# -- Parameter and ParameterDict ---------------------------------------------------------
PARAMETER_ERRORS = {
    "name": (dict(name=3), TypeError, r"name must be a string, got 3 of type int"),
    "shape_float": (dict(shape=(2, 2.5)), TypeError,
                    r"shape\[1\] must be an int, got 2.5 of type float"),
    "shape_negative": (dict(shape=(2, -1)), MXNetError,
                       re.escape(f"shape[1] must be an int in [0, {MAX}], got shape[1]=-1")),
    "shape_string": (dict(shape="22"), TypeError,
                     r"shape must be an int or a tuple of ints, got '22' of type str"),
    "dtype_int": (dict(dtype="int32"), TypeError,
                  r"dtype must be a dtype, one of \[.*'float32'.*\], got 'int32' of type str"),
    "dtype_comma": (dict(dtype=","), TypeError,  # np.dtype(",") raises SyntaxError
                    r"dtype must be a dtype, one of \[.*\], got ',' of type str"),
    "dtype_none": (dict(dtype=None), TypeError,
                   r"dtype must be a dtype, one of \[.*\], got None of type NoneType"),
    "dtype_unknown": (dict(dtype="float33"), TypeError,
                      r"dtype must be a dtype, one of \[.*\], got 'float33' of type str"),
    "init": (dict(init=3), TypeError,
             r"init must be an Initializer or one of \[.*\], got 3 of type int"),
    "grad_req_value": (dict(grad_req="sometimes"), MXNetError,
                       r"grad_req must be one of \('write', 'add', 'null'\), got 'sometimes'"),
    "grad_req_type": (dict(grad_req=None), TypeError,
                      r"grad_req must be one of \('write', 'add', 'null'\), "
                      r"got None of type NoneType"),
    "allow_deferred_init": (dict(allow_deferred_init="no"), TypeError,
                            r"allow_deferred_init must be a bool .*, got 'no' of type str"),
}


@pytest.mark.parametrize("name", sorted(PARAMETER_ERRORS))
def test_parameter_constructor_error(name):
    change, error, pattern = PARAMETER_ERRORS[name]
    with pytest.raises(error) as info:
        gluon.Parameter(**dict(dict(name="w", shape=(2, 3)), **change))
    assert re.fullmatch(pattern, str(info.value)), str(info.value)


def test_parameter_shape_accepts_an_int_as_mxnet():
    assert gluon.Parameter("b", shape=np.int64(4)).shape == (4,)


# Each case: a call on initialised_layer() that must fail and change nothing.
METHOD_ERRORS = {
    "set_data_shape": (lambda layer: layer.weight.set_data(np.zeros((4, 2, 3, 2))), MXNetError,
                       r"Parameter 'conv\d+_weight' has shape \(4, 2, 3, 3\), "
                       r"cannot set data of shape \(4, 2, 3, 2\)"),
    "set_data_scalar": (lambda layer: layer.bias.set_data(np.float32(1)), MXNetError,
                        r"Parameter 'conv\d+_bias' has shape \(4,\), "
                        r"cannot set data of shape \(\)"),
    "set_data_string": (lambda layer: layer.bias.set_data("1234"), TypeError,
                        r"value must be an NDArray, a NumPy array or a nested list of numbers, "
                        r"got '1234' of type str"),
    "set_data_none": (lambda layer: layer.bias.set_data(None), TypeError,
                      r"value must be an NDArray, .*, got None of type NoneType"),
    "set_data_string_array": (lambda layer: layer.bias.set_data(np.array(["1", "2", "3", "4"])),
                              TypeError, r"value must hold real numbers \(an integer or "
                              r"floating-point dtype\), got dtype <U1"),
    "set_data_complex": (lambda layer: layer.bias.set_data(np.ones(4, np.complex64)), TypeError,
                         r"value must hold real numbers .*, got dtype complex64"),
    "set_data_object": (lambda layer: layer.bias.set_data([1, 2, 3, None]), TypeError,
                        r"value must hold real numbers .*, got dtype object"),
    "set_data_bool": (lambda layer: layer.bias.set_data(np.ones(4, bool)), TypeError,
                      r"value must hold real numbers .*, got dtype bool"),
    "set_data_ragged": (lambda layer: layer.bias.set_data([1, 2, [3], 4]), MXNetError,
                        r"value must be a nested list of numbers of one shape, "
                        r"got \[1, 2, \[3\], 4\]"),
    "param_cast_int": (lambda layer: layer.weight.cast("int64"), TypeError,
                       r"dtype must be a dtype, one of \[.*\], got 'int64' of type str"),
    "layer_cast_none": (lambda layer: layer.cast(None), TypeError,
                        r"dtype must be a dtype, one of \[.*\], got None of type NoneType"),
    "layer_cast_unknown": (lambda layer: layer.cast("float24"), TypeError,
                           r"dtype must be a dtype, one of \[.*\], got 'float24' of type str"),
    "layer_cast_complex": (lambda layer: layer.cast(np.complex64), TypeError,
                           r"dtype must be a dtype, .*, "
                           r"got <class 'numpy.complex64'> of type type"),
    "grad_req_value": (lambda layer: setattr(layer.weight, "grad_req", "always"), MXNetError,
                       r"grad_req must be one of \('write', 'add', 'null'\), got 'always'"),
    "grad_req_type": (lambda layer: setattr(layer.bias, "grad_req", True), TypeError,
                      r"grad_req must be one of \('write', 'add', 'null'\), got True of type bool"),
    "setattr_grad_req": (lambda layer: layer.collect_params().setattr("grad_req", "accumulate"),
                         MXNetError, r"grad_req must be one of \('write', 'add', 'null'\), "
                                     r"got 'accumulate'"),
    "setattr_other_attribute": (lambda layer: layer.collect_params().setattr("dtype", "float64"),
                                MXNetError, r"name must be one of \('grad_req', 'lr_mult', "
                                            r"'wd_mult'\), got 'dtype'"),
    "setattr_name_type": (lambda layer: layer.collect_params().setattr(None, "add"), TypeError,
                          r"name must be one of \('grad_req', 'lr_mult', 'wd_mult'\), got None "
                          r"of type NoneType"),
    "initialize_init_type": (lambda layer: layer.initialize(init=1.0, force_reinit=True), TypeError,
                             r"init must be an Initializer or one of \[.*\], "
                             r"got 1.0 of type float"),
    "initialize_init_unknown": (lambda layer: layer.initialize(init="he", force_reinit=True),
                                MXNetError,
                                r"unknown initializer: init must be an Initializer or one of "
                                r"\[.*\], got 'he'"),
    "initialize_force_reinit": (lambda layer: layer.initialize(force_reinit="yes"), TypeError,
                                r"force_reinit must be a bool \(True, False, 0 or 1\), "
                                r"got 'yes' of type str"),
    "param_initialize_default_init": (
        lambda layer: layer.weight.initialize(default_init=[1], force_reinit=True), TypeError,
        r"default_init must be an Initializer or one of \[.*\], got \[1\] of type list"),
    "collect_params_regex": (lambda layer: layer.collect_params("conv(0"), MXNetError,
                             r"select must be a regular expression, got 'conv\(0': .*"),
    "collect_params_type": (lambda layer: layer.collect_params(3), TypeError,
                            r"select must be a regular expression \(str\) or None, "
                            r"got 3 of type int"),
    "hybridize_active": (lambda layer: layer.hybridize("no"), TypeError,
                         r"active must be a bool \(True, False, 0 or 1\), got 'no' of type str"),
    "save_filename_type": (lambda layer: layer.save_parameters(3), TypeError,
                           r"filename must be a path \(str or os.PathLike\), got 3 of type int"),
    "save_missing_folder": (lambda layer: layer.save_parameters("/nonexistent-mxdeconv/x.npz"),
                            MXNetError, r"cannot write filename='/nonexistent-mxdeconv/x.npz': "
                                        r".*No such file or directory.*"),
}


@pytest.mark.parametrize("name", sorted(METHOD_ERRORS))
def test_method_error_changes_nothing(name):
    call, error, pattern = METHOD_ERRORS[name]
    layer = initialised_layer()
    layer.bias.grad_req = "add"
    before = state(layer)
    with pytest.raises(error) as info:
        call(layer)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)
    assert_same_state(layer, before)


def test_set_data_casts_numbers_as_mxnet_and_completes_a_deferred_shape():
    layer = gluon.Conv2DTranspose(4, 3, groups=2)
    layer.initialize()
    layer.bias.set_data([1, 2, 3, 4])                       # ints: cast to float32
    assert layer.bias.data().asnumpy().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert layer.bias.data().dtype == np.float32
    before = state(layer)
    with pytest.raises(MXNetError, match=r"has shape \(0, 2, 3, 3\) \(0: not known yet\), "
                                         r"cannot set data of shape \(0, 2, 3, 3\)"):
        layer.weight.set_data(np.zeros((0, 2, 3, 3), np.float32))
    assert_same_state(layer, before)
    layer.weight.set_data(np.ones((6, 2, 3, 3)))
    assert layer.weight.shape == (6, 2, 3, 3) and layer._in_channels == 6
    assert layer(nd.ones((1, 6, 2, 2))).shape == (1, 4, 4, 4)


# -- load_parameters: all or nothing ----------------------------------------------------------
def npz(path, **arrays):
    np.savez(path, **arrays)
    return str(path)


def write_zip(path, members):
    with zipfile.ZipFile(path, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a repeated member name, on purpose
        for name, data in members:
            archive.writestr(name, data)
    return str(path)


def npy_bytes(array):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    return buffer.getvalue()


def lying_header(shape):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + bytes(64)


# Each case: (file maker, load keywords, error, message pattern).  The weight is
# always valid (and different from the layer's) where the file has one, so an
# implementation that assigns as it goes changes the weight before it fails.
LOAD_ERRORS = {
    "bias_shape": (lambda p: npz(p, weight=good(W_SHAPE), bias=good((3,))), {}, MXNetError,
                   r"Failed loading Parameter 'conv\d+_bias' from array 'bias' of '.*': shape "
                   r"incompatible expected \(4,\) vs saved \(3,\)"),
    "bias_missing": (lambda p: npz(p, weight=good(W_SHAPE)), {}, MXNetError,
                     r"Parameter 'bias' is missing in file '.*', which contains \['weight'\]. "
                     r"Set allow_missing=True to ignore missing parameters."),
    "extra_key": (lambda p: npz(p, weight=good(W_SHAPE), bias=good(B_SHAPE), other=good(1)), {},
                  MXNetError, r"Parameters \['other'\] in file '.*' are not in the layer. "
                              r"Set ignore_extra=True to ignore them."),
    "int64_dtype_source_saved": (
        lambda p: npz(p, weight=good(W_SHAPE, np.int64), bias=good(B_SHAPE, np.int64)),
        dict(cast_dtype=True, dtype_source="saved"), MXNetError,
        r"Failed loading Parameter 'conv\d+_weight' from array 'weight' of '.*': "
        r"dtype_source='saved' would make it int64, but a parameter's dtype must be one of "
        r"\['float16', 'float32', 'float64'.*\]"),
    "int64_bias_dtype_source_saved": (
        lambda p: npz(p, weight=good(W_SHAPE), bias=good(B_SHAPE, np.int64)),
        dict(cast_dtype=True, dtype_source="saved"), MXNetError,
        r"Failed loading Parameter 'conv\d+_bias' .*: dtype_source='saved' would make it int64.*"),
    "bias_dtype_without_cast": (lambda p: npz(p, weight=good(W_SHAPE),
                                              bias=good(B_SHAPE, np.float64)), {}, MXNetError,
                                r"Failed loading Parameter 'conv\d+_bias' .*: dtype incompatible "
                                r"expected float32 vs saved float64. Set cast_dtype=True to cast "
                                r"the dtype of saved params."),
    "bias_ambiguous": (lambda p: npz(p, weight=good(W_SHAPE), a_bias=good(B_SHAPE),
                                     b_bias=good(B_SHAPE)), {}, MXNetError,
                       r".*: several arrays could be 'bias': \['a_bias', 'b_bias'\]"),
    "bias_complex": (lambda p: npz(p, weight=good(W_SHAPE), bias=good(B_SHAPE, np.complex64)),
                     dict(cast_dtype=True), MXNetError,
                     r"Failed loading Parameter 'conv\d+_bias' .*: it must hold real numbers "
                     r"\(an integer or floating-point dtype\), got dtype complex64"),
    "bias_object_pickled": (lambda p: npz(p, weight=good(W_SHAPE),
                                          bias=np.array([1, 2, 3, "4"], dtype=object)),
                            dict(cast_dtype=True), MXNetError,
                            r"Failed loading Parameter 'conv\d+_bias' .*: it must hold real "
                            r"numbers .*, got dtype object"),
    "bias_strings": (lambda p: npz(p, weight=good(W_SHAPE), bias=np.array(["1", "2", "3", "4"])),
                     dict(cast_dtype=True), MXNetError,
                     r"Failed loading Parameter 'conv\d+_bias' .*got dtype <U1"),
    "weight_0d": (lambda p: npz(p, weight=np.float32(1), bias=good(B_SHAPE)), {}, MXNetError,
                  r"Failed loading Parameter 'conv\d+_weight' .*: shape incompatible expected "
                  r"\(4, 2, 3, 3\) vs saved \(\)"),
    "npy_file": (lambda p: np.save(p.with_suffix(".npy"), good(W_SHAPE))
                 or str(p.with_suffix(".npy")), {}, MXNetError,
                 r"filename='.*\.npy' must be an .npz archive of NumPy arrays \(as np.savez "
                 r"writes\), got a .npy file \(one array\); save the parameters with "
                 r"np.savez\(path, weight=..., bias=...\)"),
    "garbage": (lambda p: p.write_bytes(b"\x00garbage" * 50) and str(p), {}, MXNetError,
                r"filename='.*' must be an .npz archive of NumPy arrays \(as np.savez writes\), "
                r"got a file that is not a zip archive"),
    "empty_file": (lambda p: p.write_bytes(b"") is not None and str(p), {}, MXNetError,
                   r"filename='.*' must be an .npz archive .*not a zip archive"),
    "truncated_npz": (lambda p: p.write_bytes(
        (lambda data: data[:len(data) // 2])(open(npz(p, weight=good(W_SHAPE),
                                                      bias=good(B_SHAPE)), "rb").read()))
        and str(p), {}, MXNetError, r"filename='.*' must be an .npz archive .*"),
    "member_not_npy": (lambda p: write_zip(p, [("weight.npy", npy_bytes(good(W_SHAPE))),
                                               ("bias", b"1234")]), {}, MXNetError,
                       r"filename='.*' must be an .npz archive of NumPy arrays, each stored once "
                       r"as '<key>.npy', got an archive with other members \['bias'\]"),
    "member_repeated": (lambda p: write_zip(p, [("weight.npy", npy_bytes(good(W_SHAPE))),
                                                ("bias.npy", npy_bytes(good(B_SHAPE))),
                                                ("bias.npy", npy_bytes(good(B_SHAPE)))]),
                        {}, MXNetError, r".*got an archive with repeated members \['bias.npy'\]"),
    "bias_not_npy_data": (lambda p: write_zip(p, [("weight.npy", npy_bytes(good(W_SHAPE))),
                                                  ("bias.npy", b"not an array")]), {}, MXNetError,
                          r"cannot read array 'bias' of filename='.*': ValueError: .*"),
    "bias_header_lies": (lambda p: write_zip(p, [("weight.npy", npy_bytes(good(W_SHAPE))),
                                                 ("bias.npy", lying_header((2**40,)))]),
                         {}, MXNetError,
                         r"cannot read array 'bias' of filename='.*': its header says shape "
                         rf"\({2**40},\) and dtype float32, {4 * 2**40} bytes, but the archive "
                         r"holds 64"),
    "bias_data_truncated": (lambda p: write_zip(p, [("weight.npy", npy_bytes(good(W_SHAPE))),
                                                    ("bias.npy", npy_bytes(good(B_SHAPE))[:-4])]),
                            {}, MXNetError, r"cannot read array 'bias' of filename='.*': .*"),
    "missing_file": (lambda p: str(p.parent / "nothing-here.npz"), {}, MXNetError,
                     r"cannot read filename='.*nothing-here.npz': .*No such file or directory.*"),
    "folder": (lambda p: str(p.parent), {}, MXNetError, r"cannot read filename='.*': .*"),
    "filename_type": (lambda p: 3, {}, TypeError,
                      r"filename must be a path \(str or os.PathLike\), got 3 of type int"),
    "allow_missing_type": (lambda p: npz(p, weight=good(W_SHAPE)), dict(allow_missing="yes"),
                           TypeError, r"allow_missing must be a bool \(True, False, 0 or 1\), "
                                      r"got 'yes' of type str"),
    "cast_dtype_type": (lambda p: npz(p, weight=good(W_SHAPE), bias=good(B_SHAPE)),
                        dict(cast_dtype=2), TypeError, r"cast_dtype must be a bool .*, got 2 .*"),
    "dtype_source_value": (lambda p: npz(p, weight=good(W_SHAPE), bias=good(B_SHAPE)),
                           dict(cast_dtype=True, dtype_source="file"), MXNetError,
                           r"dtype_source must be one of \('current', 'saved'\), got 'file'"),
}


@pytest.mark.parametrize("name", sorted(LOAD_ERRORS))
def test_failed_load_changes_nothing(name, tmp_path):
    make, kwargs, error, pattern = LOAD_ERRORS[name]
    layer = initialised_layer()
    before = state(layer)
    filename = make(tmp_path / "params.npz")
    with pytest.raises(error) as info:
        layer.load_parameters(filename, **kwargs)
    assert re.fullmatch(pattern, str(info.value), re.DOTALL), str(info.value)
    assert_same_state(layer, before)
    # and the layer still loads a good file
    layer.load_parameters(npz(tmp_path / "good.npz", weight=good(W_SHAPE, value=2.0),
                              bias=good(B_SHAPE, value=3.0)))
    assert (layer.weight.data().asnumpy() == 2).all() and (layer.bias.data().asnumpy() == 3).all()


DEFERRED_LOAD_ERRORS = {
    "weight_0d": (dict(weight=np.float32(1), bias=good(B_SHAPE)),
                  r"Failed loading Parameter 'conv\d+_weight' from array 'weight' of '.*': shape "
                  r"incompatible expected \(0, 2, 3, 3\) \(0: not known yet\) vs saved \(\)"),
    "weight_empty_in_channels": (dict(weight=good((0, 2, 3, 3)), bias=good(B_SHAPE)),
                                 r".*shape incompatible expected \(0, 2, 3, 3\) \(0: not known "
                                 r"yet\) vs saved \(0, 2, 3, 3\)"),
    "weight_in_channels_not_divisible": (dict(weight=good((3, 2, 3, 3)), bias=good(B_SHAPE)),
                                         r"Failed loading Parameter 'conv\d+_weight' .*: "
                                         r"in_channels=3 must be divisible by groups=2"),
    "weight_kernel": (dict(weight=good((4, 2, 3, 2)), bias=good(B_SHAPE)),
                      r".*shape incompatible expected \(0, 2, 3, 3\) \(0: not known yet\) "
                      r"vs saved \(4, 2, 3, 2\)"),
    "bias_shape": (dict(weight=good(W_SHAPE), bias=good((4, 1))),
                   r".*'conv\d+_bias'.*shape incompatible expected \(4,\) vs saved \(4, 1\)"),
}


@pytest.mark.parametrize("name", sorted(DEFERRED_LOAD_ERRORS))
def test_failed_load_into_a_deferred_layer_changes_nothing(name, tmp_path):
    """in_channels unknown: the weight stays deferred, its shape (0, ...), and a
    later batch still decides in_channels."""
    arrays, pattern = DEFERRED_LOAD_ERRORS[name]
    layer = gluon.Conv2DTranspose(4, 3, groups=2)
    layer.initialize()
    before = state(layer)
    with pytest.raises(MXNetError) as info:
        layer.load_parameters(npz(tmp_path / "p.npz", **arrays))
    assert re.fullmatch(pattern, str(info.value)), str(info.value)
    assert_same_state(layer, before)
    assert layer(nd.ones((1, 6, 2, 2))).shape == (1, 4, 4, 4)
    assert layer.weight.shape == (6, 2, 3, 3)


def test_load_casts_and_adopts_dtypes_as_mxnet(tmp_path):
    layer = initialised_layer()
    weight = np.arange(72, dtype=np.int64).reshape(W_SHAPE)
    layer.load_parameters(npz(tmp_path / "i.npz", weight=weight, bias=good(B_SHAPE, np.int16)),
                          cast_dtype=True)                   # dtype_source="current"
    assert layer.weight.data().dtype == np.float32
    assert_array_equal(layer.weight.data().asnumpy(), weight)
    layer.load_parameters(npz(tmp_path / "f64.npz", weight=good(W_SHAPE, np.float64),
                              bias=good(B_SHAPE, np.float64)), cast_dtype=True,
                          dtype_source="saved")
    assert layer.weight.dtype == layer.bias.dtype == np.float64
    assert layer.weight.data().dtype == np.float64
    big_endian = npz(tmp_path / "be.npz", weight=good(W_SHAPE, ">f8", 4.0),
                     bias=good(B_SHAPE, ">f8", 5.0))
    layer.load_parameters(big_endian)                        # the same numbers: no cast needed
    assert layer.weight.data().dtype == np.float64 and (layer.weight.data().asnumpy() == 4).all()


def test_load_reads_only_the_arrays_it_uses(tmp_path):
    """An extra array is never read, so a huge or corrupt one costs nothing with
    ignore_extra=True."""
    layer = initialised_layer()
    filename = write_zip(tmp_path / "p.npz", [("weight.npy", npy_bytes(good(W_SHAPE))),
                                              ("bias.npy", npy_bytes(good(B_SHAPE))),
                                              ("huge.npy", lying_header((2**40, 2**20)))])
    layer.load_parameters(filename, ignore_extra=True)
    assert (layer.weight.data().asnumpy() == 0.5).all()


# -- forward: a bad first batch leaves a deferred weight deferred -----------------------------
FIRST_BATCH_ERRORS = {
    "channels_not_divisible": (nd.ones((1, 3, 4, 4)), MXNetError,
                               r"data channels=3 must be divisible by groups=2"),
    "rank": (nd.ones((4,)), MXNetError, r"data must have 4 dimensions \(NCHW\) and at least one "
                                        r"channel, got data shape \(4,\)"),
    "no_channels": (nd.ones((1, 0, 4, 4)), MXNetError, r"data must have 4 dimensions .*"),
    "dtype": (nd.ones((1, 4, 4, 4), dtype="float64"), MXNetError,
              r"weight dtype mismatch: expected float64, got float32"),
    "spatial_empty": (nd.ones((1, 4, 0, 4)), MXNetError, r"data spatial dims must be >= 1.*"),
}


@pytest.mark.parametrize("name", sorted(FIRST_BATCH_ERRORS))
def test_bad_first_batch_leaves_the_weight_deferred(name):
    x, error, pattern = FIRST_BATCH_ERRORS[name]
    layer = gluon.Conv2DTranspose(4, 3, groups=2)
    layer.initialize()
    before = state(layer)
    with pytest.raises(error) as info:
        layer(x)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)
    assert_same_state(layer, before)
    with pytest.raises(MXNetError, match="deferred"):
        layer.weight.data()
    assert layer(nd.ones((2, 6, 3, 3))).shape == (2, 4, 5, 5)
    assert layer.weight.shape == (6, 2, 3, 3)


NOT_NUMBERS = {
    "string": ("abc", r"data must be an NDArray, a NumPy array or a nested list of numbers, "
                      r"got 'abc' of type str"),
    "none": (None, r"data must be an NDArray, .*, got None of type NoneType"),
    "object": (object(), r"data must be an NDArray, .*, got <object object at .*> of type object"),
    "strings": ([[["a"]]], r"data must hold real numbers \(an integer or floating-point dtype\), "
                           r"got dtype <U1"),
    "complex": (np.ones((1, 4, 2, 2), np.complex64), r"data must hold real numbers .*, "
                                                      r"got dtype complex64"),
}


@pytest.mark.parametrize("deferred", [False, True], ids=["initialised", "deferred"])
@pytest.mark.parametrize("name", sorted(NOT_NUMBERS))
def test_forward_refuses_what_is_not_numbers(name, deferred):
    x, pattern = NOT_NUMBERS[name]
    layer = gluon.Conv2DTranspose(4, 3, groups=2, in_channels=0 if deferred else 4)
    layer.initialize()
    before = state(layer)
    with pytest.raises(TypeError) as info:
        layer(x)
    assert re.fullmatch(pattern, str(info.value)), str(info.value)
    assert_same_state(layer, before)
    assert layer([[[[1.0]]] * 4]).shape == (1, 4, 3, 3)  # lists still work (float32)


def test_weight_created_by_a_recorded_first_batch_gets_its_gradient():
    """The deferred weight is created before the call and installed after it: the
    recorded graph must hold that same array."""
    layer = gluon.Conv2DTranspose(4, 3, groups=2)
    layer.initialize()
    with autograd.record():
        y = layer(nd.ones((1, 6, 3, 3)))
    y.backward()
    weight_grad = nd.Deconvolution_backward(nd.ones(y.shape), nd.ones((1, 6, 3, 3)),
                                            layer.weight.data(), layer.bias.data(),
                                            **layer._kwargs)[1]
    assert_array_equal(layer.weight.grad().asnumpy(), weight_grad.asnumpy())


# -- fuzzing: random junk in, only MXNetError/TypeError out, nothing half-done -------------
# Kept to a few seconds in all; the examples are small and nothing is computed.
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HUGE = [2**31, 2**63, 2**70, -2**70, np.uint64(2**64 - 1), np.int64(-1)]
JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5), st.sampled_from(HUGE),
    st.floats(), st.text(max_size=4),
    st.sampled_from(["(3, 3)", "3", "33", "relu", "tanh", "NCHW", "NHWC", "zeros", "False",
                     "float32", "int8", b"3", "write", "saved"]),
    st.recursive(st.integers(-2, 4) | st.floats(-2, 4) | st.sampled_from(["2", None, True]),
                 lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple),
                 max_leaves=8),
    st.sampled_from([np.array([3, 3]), np.array(2), np.float32(2), np.int8(3), np.bool_(True),
                     {}, {"kernel": 3}, object(), gluon.Uniform, gluon.Zero(), np.float32,
                     "float64", np.dtype("f2"), np.dtype([("a", "f4")])]),
)


def spell(values):
    """An int tuple as a Gluon argument: tuple, list, or one (NumPy) int if all equal."""
    forms = [st.just(tuple(values)), st.just(list(values))]
    if len(set(values)) == 1:
        forms += [st.just(values[0]), st.just(np.int64(values[0]))]
    return st.one_of(forms)


@st.composite
def layer_arguments(draw):
    """(class, valid keyword arguments, names of those replaced by junk)."""
    ndim = draw(st.sampled_from(sorted(CLASSES)))

    def per_dim(low, high):
        return draw(st.lists(st.integers(low, high), min_size=ndim, max_size=ndim))

    strides = per_dim(1, 3)
    groups = draw(st.integers(1, 3))
    kwargs = dict(
        channels=groups * draw(st.integers(1, 3)),
        kernel_size=draw(spell(per_dim(1, 4))), strides=draw(spell(strides)),
        padding=draw(spell(per_dim(0, 2))), dilation=draw(spell(per_dim(1, 3))),
        output_padding=draw(spell([draw(st.integers(0, s - 1)) for s in strides])),
        groups=draw(st.sampled_from([groups, np.int64(groups)])),
        in_channels=groups * draw(st.integers(0, 3)),
        layout=draw(st.sampled_from([None, CLASSES[ndim]._layout])),
        activation=draw(st.sampled_from([None, "relu", "tanh", "softsign"])),
        use_bias=draw(st.sampled_from([True, False, 0, 1, np.bool_(False)])),
        weight_initializer=draw(st.sampled_from([None, "xavier", "Normal", gluon.One()])),
        bias_initializer=draw(st.sampled_from(["zeros", None, gluon.Constant(2.0)])),
        prefix=draw(st.sampled_from([None, "up_"])))
    junk = draw(st.lists(st.sampled_from(sorted(kwargs)), max_size=3, unique=True))
    for name in junk:
        kwargs[name] = draw(JUNK)
    return CLASSES[ndim], kwargs, junk


@FUZZ
@given(arguments=layer_arguments())
def test_fuzz_constructor(arguments):
    """Valid arguments with up to three replaced by junk: either a layer the operator
    accepts, or MXNetError/TypeError naming a replaced argument."""
    layer_class, kwargs, junk = arguments
    try:
        layer = layer_class(**kwargs)
    except (MXNetError, TypeError) as err:
        assert junk, f"valid arguments {kwargs} refused: {err}"
        assert any(name in str(err) for name in junk), f"{err} names none of {junk}"
        return
    # accepted: the operator agrees, and the weight has MXNet's shape
    param = DeconvolutionParam.from_kwargs(**layer._kwargs)
    groups = layer._kwargs["num_group"]
    assert layer.weight.shape == (layer._in_channels, layer._channels // groups) + param.kernel
    assert all(type(v) is int for v in layer.weight.shape)


PARAMETER_CALLS = {
    "set_data_weight": lambda layer, value: layer.weight.set_data(value),
    "set_data_bias": lambda layer, value: layer.bias.set_data(value),
    "param_cast": lambda layer, value: layer.bias.cast(value),
    "layer_cast": lambda layer, value: layer.cast(value),
    "grad_req": lambda layer, value: setattr(layer.weight, "grad_req", value),
    "setattr_name": lambda layer, value: layer.collect_params().setattr(value, "null"),
    "setattr_value": lambda layer, value: layer.collect_params().setattr("grad_req", value),
    "initialize": lambda layer, value: layer.initialize(value, force_reinit=True),
    "force_reinit": lambda layer, value: layer.initialize(force_reinit=value),
    "collect_params": lambda layer, value: layer.collect_params(value),
    "load_filename": lambda layer, value: layer.load_parameters(value),
    "initialize_ctx": lambda layer, value: layer.initialize(ctx=value, force_reinit=True),
    "data_ctx": lambda layer, value: layer.weight.data(value),
    "reset_ctx": lambda layer, value: layer.collect_params().reset_ctx(value),
}


@FUZZ
@given(method=st.sampled_from(sorted(PARAMETER_CALLS)),
       value=JUNK | st.sampled_from([np.ones(B_SHAPE), [1, 2, 3, 4], np.ones(W_SHAPE, np.int8),
                                     "float64", "add", "grad_req", "conv.*", "ones"]))
def test_fuzz_parameter_methods(method, value):
    """Junk (or valid values) into the methods: MXNetError/TypeError or success,
    and a failed call changes nothing."""
    layer = initialised_layer()
    before = state(layer)
    try:
        PARAMETER_CALLS[method](layer, value)
    except (MXNetError, TypeError):
        assert_same_state(layer, before)


SAVED_DTYPES = [np.float32, np.float32, np.float64, np.float16, ">f4", np.int64, np.uint8,
                np.bool_, np.complex64, "U3", "S2", "M8[s]", object]
KEYS = st.sampled_from(["weight", "bias", "conv0_weight", "conv0_bias", "up_bias", "other",
                        "weight.npy", ""]) | st.text(alphabet="abw_ei.ghts/", max_size=8)


@st.composite
def saved_arrays(draw):
    arrays = {}
    for key in draw(st.lists(KEYS, max_size=4, unique=True)):
        exact = W_SHAPE if key.endswith("weight") else B_SHAPE
        shape = draw(st.sampled_from([exact, exact, (2,) + exact[1:]])
                     | st.lists(st.integers(0, 4), max_size=5).map(tuple))
        dtype = draw(st.sampled_from(SAVED_DTYPES))
        arrays[key] = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape).astype(dtype)
    return arrays


@st.composite
def saved_file(draw, folder):
    """A path: an .npz of random arrays, one with random bytes changed or cut,
    or random bytes."""
    path = folder / f"f{draw(st.integers(0, 10**9))}.npz"
    kind = draw(st.sampled_from(["npz", "compressed", "mutated", "random"]))
    if kind == "random":
        path.write_bytes(draw(st.binary(max_size=300)))
        return str(path), None
    arrays = draw(saved_arrays())
    (np.savez_compressed if kind == "compressed" else np.savez)(path, **arrays)
    if kind == "mutated":  # what it holds if it loads is unknown: None
        data = bytearray(path.read_bytes())
        for _ in range(draw(st.integers(1, 4))):
            position = draw(st.integers(0, len(data) - 1))
            data[position] = draw(st.integers(0, 255))
        path.write_bytes(bytes(data[:draw(st.integers(0, len(data)))]))
        return str(path), None
    return str(path), arrays


def expected_after_load(layer, arrays, before):
    """What each parameter holds after a successful load: the file's array for its key
    (exact, else the one ending in _key), or what it held."""
    expected = {}
    for key, param in layer._structural().items():
        matches = [k for k in arrays if k == key] or [k for k in arrays if k.endswith("_" + key)]
        expected[key] = arrays[matches[0]] if matches else before[key][1]
    return expected


@settings(FUZZ, max_examples=250)
@given(data=st.data(), deferred=st.booleans(), use_bias=st.booleans(),
       options=st.fixed_dictionaries(dict(allow_missing=st.booleans(),
                                          ignore_extra=st.booleans(),
                                          cast_dtype=st.booleans(),
                                          dtype_source=st.sampled_from(["current", "saved"]))))
def test_fuzz_load_parameters(tmp_path_factory, data, deferred, use_bias, options):
    """Random .npz contents, corrupted archives, random bytes: a failed load changes
    nothing; a successful one holds the file's arrays."""
    folder = tmp_path_factory.mktemp("load", numbered=True)
    if deferred:
        layer = gluon.Conv2DTranspose(4, 3, groups=2, use_bias=use_bias)
        layer.initialize()
    else:
        layer = initialised_layer(use_bias=use_bias)
    before = state(layer)
    path, arrays = data.draw(saved_file(folder))
    try:
        layer.load_parameters(path, **options)
    except (MXNetError, TypeError):
        event("refused")
        assert_same_state(layer, before)
        return
    event("loaded")
    for param in layer._structural().values():  # shapes and dtypes still consistent
        assert param.shape[1:] == (W_SHAPE if param is layer.weight else B_SHAPE)[1:]
        if param._data is not None:
            assert (param.data().shape, param.data().dtype) == (param.shape, param.dtype)
    if arrays is None:
        return
    for key, values in expected_after_load(layer, arrays, before).items():
        got = layer._structural()[key]
        if values is None:
            assert got._data is None
        else:
            assert_array_equal(got.data().asnumpy(), np.asarray(values).astype(got.dtype))


# -- Gluon initializers (found by an adversarial pass) --------------------------------------
@pytest.mark.parametrize("make, error, match", [
    (lambda: gluon.Normal(-0.02), MXNetError, "Normal sigma must be a finite real number >= 0"),
    (lambda: gluon.Uniform("x"), TypeError, "Uniform scale must be a real number"),
    (lambda: gluon.Xavier(magnitude=-3), MXNetError, "Xavier magnitude must be"),
    (lambda: gluon.Xavier(rnd_type="lol"), MXNetError, "Xavier rnd_type must be one of"),
    (lambda: gluon.Constant("0.1x"), TypeError, "Constant value must be a real number"),
    (lambda: gluon.Constant({"a": 1}), TypeError, "Constant value must be a real number, a "
     "NumPy array"),
    (lambda: gluon.Constant(["a", "b"]), TypeError, "Constant value must be a real number, a "
     "NumPy array"),
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
