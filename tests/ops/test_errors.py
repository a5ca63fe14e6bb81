"""Bad input never crashes or corrupts.

Every invalid argument of every public entry point (``nd.Deconvolution``,
``nd.Deconvolution_backward``, ``mxdeconv.explain``) raises ``MXNetError`` (or
``TypeError`` for a wrong Python type) whose message names the argument, the
expected and the given value.  After each error the test checks that

* the inputs hold the values they held before (NumPy and NDArray inputs),
* the ``out=`` / ``grads=`` arrays were not written at all (they hold a
  sentinel), and
* the next valid call works and matches the reference.

Valid-but-unusual input is covered too: non-contiguous and read-only NumPy
inputs (copied, never written), NaN/Inf (propagated), an empty batch, targets
that share memory with an input, and outputs too big for this machine (refused
before anything is allocated).
"""
import re
import warnings
from dataclasses import replace

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import mxdeconv
from mxdeconv import Float16OverflowWarning, MXNetError, NDArray, nd
from mxdeconv.semantics.attributes import MAX_PARAM
from helpers import host
from strategies import Config

IMPLS = ("numpy", "onednn")
BY_IMPL = pytest.mark.parametrize("impl", IMPLS)
SENTINEL = 7.25  # exactly representable in every float dtype

# 2-D, grouped, dilated, with adj and a bias: weight (4, 3, 3, 2), out (2, 6, 6, 6).
CFG = Config(batch=2, num_group=2, in_per_group=2, out_per_group=3, spatial=(3, 4),
             kernel=(3, 2), stride=(2, 1), dilate=(1, 2), pad=(1, 0), adj=(1, 0),
             no_bias=False)
KW = CFG.kwargs()
TOL = dict(rtol=1e-4, atol=1e-4)


def arrays(dtype=np.float32, seed=0):
    data, weight, bias = CFG.arrays(seed, dtype)
    return data, weight, bias, CFG.out_grad(seed, dtype)


def sentinel(shape, dtype=np.float32):
    return nd.array(np.full(shape, SENTINEL, dtype), dtype=dtype)


def snapshot(values):
    return [None if v is None else np.array(np.asarray(v), copy=True) for v in values]


def assert_unchanged(values, before, what="input"):
    for i, (v, b) in enumerate(zip(values, before)):
        if b is not None:
            assert_array_equal(np.asarray(v), b, err_msg=f"{what} {i} changed")


def assert_next_call_works():
    """A valid forward and backward right after an error give the reference."""
    data, weight, bias, og = arrays(seed=1)
    y = nd.Deconvolution(data, weight, bias, **KW)
    assert_allclose(host(y), CFG.ref_forward(data, weight, bias), **TOL)
    got = nd.Deconvolution_backward(og, data, weight, bias, **KW)
    for g, ref in zip(got, CFG.ref_backward(og, data, weight)):
        assert_allclose(host(g), ref, **TOL)


# -- forward: every bad argument ------------------------------------------------
def forward_case(**changes):
    return changes


W_SHAPE, OUT_SHAPE = CFG.weight_shape, CFG.out_shape

FORWARD_ERRORS = {
    # data
    "data_ndim_3": (forward_case(data=lambda a: a[0]), MXNetError,
                    r"data must have 4 dimensions \(N, C, H, W\) for kernel=\(3, 2\), "
                    r"got data shape \(4, 3, 4\) with 3"),
    "data_ndim_5": (forward_case(data=lambda a: a[..., None]), MXNetError,
                    r"data must have 4 dimensions .* got data shape \(2, 4, 3, 4, 1\)"),
    "data_list": (forward_case(data=lambda a: a.tolist()), TypeError,
                  r"data must be an NDArray or a NumPy array, got list"),
    "data_int": (forward_case(data=lambda a: a.astype(np.int32)), TypeError,
                 r"data must be a floating-point array, got dtype int32"),
    "data_complex": (forward_case(data=lambda a: a.astype(np.complex64)), TypeError,
                     r"data must be a floating-point array, got dtype complex64"),
    "data_scalar": (forward_case(data=lambda a: np.float32(1)), TypeError,
                    r"data must be an NDArray or a NumPy array, got float32"),
    "data_zero_spatial": (forward_case(data=lambda a: a[:, :, :0]), MXNetError,
                          r"data spatial dims must be >= 1, got data shape \(2, 4, 0, 4\)"),
    # channels: data vs weight, groups
    "channels_mismatch": (forward_case(data=lambda a: np.concatenate([a, a], 1)), MXNetError,
                          r"weight shape mismatch: expected \(8, 3, 3, 2\), "
                          r"got \(4, 3, 3, 2\)"),
    "channels_not_divisible": (forward_case(data=lambda a: a[:, :3], weight=lambda w: w[:3]),
                               MXNetError, r"input num_filter must divide group size: "
                               r"data has 3 channels, num_group=2"),
    "num_filter_not_divisible": (forward_case(num_filter=5), MXNetError,
                                 r"output num_filter must divide group size: "
                                 r"num_filter=5, num_group=2"),
    "num_filter_zero": (forward_case(num_filter=0), MXNetError,
                        r"num_filter must be >= 1, got num_filter=0"),
    "num_filter_huge": (forward_case(num_filter=2**40), MXNetError,
                        rf"num_filter must be <= {MAX_PARAM}, got num_filter={2**40}"),
    "num_filter_float": (forward_case(num_filter=6.0), TypeError,
                         r"num_filter must be an integer, got 6.0 of type float"),
    "num_group_zero": (forward_case(num_group=0), MXNetError,
                       r"num_group must be >= 1, got num_group=0"),
    "num_group_bool": (forward_case(num_group=True), TypeError,
                       r"num_group must be an integer, got True of type bool"),
    # shape-like parameters: length, range, type
    "kernel_missing": (forward_case(kernel=None), MXNetError,
                       r"Required parameter kernel of Shape\(tuple\) is not presented"),
    "kernel_4d": (forward_case(kernel=(3, 2, 1, 1)), MXNetError,
                  r"kernel must have 1, 2 or 3 dimensions, got kernel=\(3, 2, 1, 1\)"),
    "kernel_zero": (forward_case(kernel=(3, 0)), MXNetError,
                    r"incorrect kernel size: kernel=\(3, 0\); every entry must be >= 1"),
    "kernel_negative": (forward_case(kernel=(-3, 2)), MXNetError,
                        r"incorrect kernel size: kernel=\(-3, 2\); every entry must be >= 1"),
    "kernel_huge": (forward_case(kernel=(3, 2**62)), MXNetError,
                    rf"incorrect kernel size: kernel=\(3, {2**62}\); every entry must be "
                    rf"<= {MAX_PARAM}"),
    "kernel_float": (forward_case(kernel=(3.0, 2)), TypeError,
                     r"kernel\[0\] must be an integer, got 3.0 of type float"),
    "kernel_bytes": (forward_case(kernel=b"3"), TypeError,
                     r"kernel must be a tuple of integers, got b'3' of type bytes"),
    # MXNet's text forms: "3" is the 1-tuple (3,), as in MXNet
    "kernel_text_rank": (forward_case(kernel="3"), MXNetError,
                         r"stride must have the same number of dimensions as kernel, "
                         r"but kernel=\(3,\) while stride=\(2, 1\)"),
    "kernel_text_malformed": (forward_case(kernel="(3, x)"), MXNetError,
                              r"Invalid Parameter format for kernel expect Shape\(tuple\) "
                              r"such as '\(3, 3\)', '\[3, 3\]' or '3' but value='\(3, x\)'"),
    "num_filter_text_float": (forward_case(num_filter="6.5"), MXNetError,
                              r"Invalid Parameter format for num_filter expect int such as "
                              r"'6' but value='6.5'"),
    "kernel_vs_weight": (forward_case(kernel=(3, 3)), MXNetError,
                         r"weight shape mismatch: expected \(4, 3, 3, 3\), got \(4, 3, 3, 2\)"),
    "stride_length": (forward_case(stride=(2,)), MXNetError,
                      r"stride must have the same number of dimensions as kernel, "
                      r"but kernel=\(3, 2\) while stride=\(2,\)"),
    "stride_zero": (forward_case(stride=(0, 1)), MXNetError,
                    r"incorrect stride: stride=\(0, 1\); every entry must be >= 1"),
    "stride_negative": (forward_case(stride=(2, -1)), MXNetError,
                        r"incorrect stride: stride=\(2, -1\); every entry must be >= 1"),
    "stride_huge": (forward_case(stride=(2, 10**20)), MXNetError,
                    rf"incorrect stride: stride=\(2, {10**20}\); every entry must be "
                    rf"<= {MAX_PARAM}"),
    "dilate_length": (forward_case(dilate=(1, 2, 1)), MXNetError,
                      r"dilate must have the same number of dimensions as kernel, "
                      r"but kernel=\(3, 2\) while dilate=\(1, 2, 1\)"),
    "dilate_zero": (forward_case(dilate=(0, 2)), MXNetError,
                    r"incorrect dilate: dilate=\(0, 2\); every entry must be >= 1"),
    "dilate_huge": (forward_case(dilate=(1, 2**31)), MXNetError,
                    rf"incorrect dilate: dilate=\(1, {2**31}\); every entry must be "
                    rf"<= {MAX_PARAM}"),
    "pad_length": (forward_case(pad=(1,)), MXNetError,
                   r"pad must have the same number of dimensions as kernel, "
                   r"but kernel=\(3, 2\) while pad=\(1,\)"),
    "pad_negative": (forward_case(pad=(-1, 0)), MXNetError,
                     r"incorrect pad: pad=\(-1, 0\); every entry must be >= 0"),
    "pad_huge": (forward_case(pad=(2**63, 0)), MXNetError,
                 rf"incorrect pad: pad=\({2**63}, 0\); every entry must be <= {MAX_PARAM}"),
    "pad_too_big_output_empty": (forward_case(pad=(5, 0)), MXNetError,
                                 r"output size must be positive, got output spatial shape "
                                 r"\(-2, 6\) from data shape \(2, 4, 3, 4\)"),
    "pad_output_exactly_empty": (forward_case(pad=(4, 0)), MXNetError,
                                 r"output size must be positive, got output spatial shape "
                                 r"\(0, 6\)"),
    "adj_length": (forward_case(adj=(1, 0, 0)), MXNetError,
                   r"adj must have the same number of dimensions as kernel, "
                   r"but kernel=\(3, 2\) while adj=\(1, 0, 0\)"),
    "adj_negative": (forward_case(adj=(-1, 0)), MXNetError,
                     r"incorrect adj: adj=\(-1, 0\); every entry must be >= 0"),
    "adj_not_below_stride": (forward_case(adj=(2, 0)), MXNetError,
                             re.escape("adj(y) must be samller than stride[0]: "
                                       "adj=(2, 0), stride=(2, 1)")),
    "adj_huge": (forward_case(adj=(0, 2**40)), MXNetError,
                 rf"incorrect adj: adj=\(0, {2**40}\); every entry must be <= {MAX_PARAM}"),
    "target_length": (forward_case(target_shape=(6,)), MXNetError,
                      r"target_shape must have the same number of dimensions as kernel, "
                      r"but kernel=\(3, 2\) while target_shape=\(6,\)"),
    "target_negative": (forward_case(target_shape=(-6, 6)), MXNetError,
                        r"incorrect target_shape: target_shape=\(-6, 6\); "
                        r"every entry must be >= 0"),
    "target_huge": (forward_case(target_shape=(6, 2**31)), MXNetError,
                    rf"incorrect target_shape: target_shape=\(6, {2**31}\); every entry "
                    rf"must be <= {MAX_PARAM}"),
    "target_too_big": (forward_case(target_shape=(8, 6)), MXNetError,
                       r"too big target shape: target_shape=\(8, 6\) but at most 7 is "
                       r"reachable in dim 0 from data shape \(2, 4, 3, 4\)"),
    "target_zero_entry": (forward_case(target_shape=(0, 6)), MXNetError,
                          r"output size must be positive, got output spatial shape \(0, 6\)"),
    "target_odd_stride_1": (forward_case(target_shape=(6, 5)), MXNetError,
                            re.escape("adj(x) must be samller than stride[1]: target_shape="
                                      "(6, 5) implies adj=(1, 1), stride=(2, 1)")),
    # other parameters
    "layout_wrong": (forward_case(layout="NHWC"), MXNetError,
                     r"layout 'NHWC' is not supported for a 2-D deconvolution: "
                     r"only 'NCHW' \(or None\) is"),
    "layout_type": (forward_case(layout=4), TypeError,
                    r"layout must be a string or None, got 4 of type int"),
    "no_bias_type": (forward_case(no_bias=None), TypeError,
                     r"no_bias must be a bool, got None of type NoneType"),
    "no_bias_text": (forward_case(no_bias="maybe"), MXNetError,
                     r"Invalid Parameter format for no_bias expect boolean \('true', "
                     r"'false', '1' or '0', any case\) but value='maybe'"),
    "no_bias_two": (forward_case(no_bias=2), TypeError,
                    r"no_bias must be a bool, got 2 of type int"),
    "workspace_type": (forward_case(workspace=1.5), TypeError,
                       r"workspace must be an integer, got 1.5 of type float"),
    "workspace_text": (forward_case(workspace="big"), MXNetError,
                       r"Invalid Parameter format for workspace expect int such as '6' "
                       r"but value='big'"),
    "workspace_huge": (forward_case(workspace=2**64), MXNetError,
                       rf"workspace must fit MXNet's uint64 \(a negative one wraps around, as "
                       rf"in MXNet\), got workspace={2**64}"),
    "workspace_huge_negative": (forward_case(workspace="-18446744073709551616"), MXNetError,
                                r"workspace must fit MXNet's uint64 .*, "
                                r"got workspace=-18446744073709551616"),
    "cudnn_tune_value": (forward_case(cudnn_tune="slow"), MXNetError,
                         r"cudnn_tune must be one of \(None, 'off', 'limited_workspace', "
                         r"'fastest'\), got 'slow'"),
    "unknown_keyword": (forward_case(kernal=(3, 2)), TypeError,
                        re.escape("Deconvolution got unexpected keyword argument(s) "
                                  "['kernal']")),
    "train_type": (forward_case(train="yes"), TypeError,
                   r"train must be a bool, got 'yes' of type str"),
    # weight and bias
    "weight_shape": (forward_case(weight=lambda w: w[:, :2]), MXNetError,
                     r"weight shape mismatch: expected \(4, 3, 3, 2\), got \(4, 2, 3, 2\)"),
    "weight_dtype": (forward_case(weight=lambda w: w.astype(np.float64)), MXNetError,
                     r"weight dtype mismatch: expected float32, got float64"),
    "weight_type": (forward_case(weight=lambda w: "w"), TypeError,
                    r"weight must be an NDArray or a NumPy array, got str"),
    "bias_shape": (forward_case(bias=lambda b: b[:5]), MXNetError,
                   r"bias shape mismatch: expected \(6,\), got \(5,\)"),
    "bias_dtype": (forward_case(bias=lambda b: b.astype(np.float16)), MXNetError,
                   r"bias dtype mismatch: expected float32, got float16"),
    "bias_missing": (forward_case(bias=lambda b: None), MXNetError,
                     r"no_bias=False needs a bias of shape \(6,\)"),
    "bias_with_no_bias": (forward_case(no_bias=True), MXNetError,
                          r"bias was given but no_bias=True"),
    "mixed_dtypes_data_f64": (forward_case(data=lambda a: a.astype(np.float64)), MXNetError,
                              r"weight dtype mismatch: expected float64, got float32"),
    "mixed_dtypes_data_f16": (forward_case(data=lambda a: a.astype(np.float16)), MXNetError,
                              r"weight dtype mismatch: expected float16, got float32"),
    # out= and req
    "out_shape": (forward_case(out=lambda: sentinel((2, 6, 6, 5))), MXNetError,
                  r"out shape mismatch: expected \(2, 6, 6, 6\), got \(2, 6, 6, 5\)"),
    "out_dtype": (forward_case(out=lambda: sentinel(OUT_SHAPE, np.float64)), MXNetError,
                  r"out dtype mismatch: expected float32, got float64"),
    "out_numpy": (forward_case(out=lambda: np.zeros(OUT_SHAPE, np.float32)), TypeError,
                  r"out must be an NDArray, got ndarray"),
    "out_read_only": (forward_case(out=lambda: read_only_ndarray(OUT_SHAPE)), MXNetError,
                      r"out must be writeable, got a read-only array"),
    "out_non_contiguous": (forward_case(out=lambda: strided_ndarray(OUT_SHAPE)), MXNetError,
                           r"out must be C-contiguous, got strides \(.*\) for shape "
                           r"\(2, 6, 6, 6\)"),
    "req_unknown": (forward_case(req="sometimes"), MXNetError,
                    r"req must be one of \('write', 'inplace', 'add', 'null'\), "
                    r"got 'sometimes'"),
    "req_type": (forward_case(req=["write"]), TypeError,
                 r"req must be a string, one of \(.*\), got \['write'\] of type list"),
    "req_add_without_out": (forward_case(out=lambda: None, req="add"), MXNetError,
                            r"req='add' accumulates into out=, which was not given"),
    # memory
    "output_exceeds_memory": (forward_case(stride=(2**20, 2**20)), MXNetError,
                              r"the output of shape \(2, 6, 2097154, 3145731\) would need "
                              r"\d+ bytes, more than this machine's \d+ bytes of memory"),
}


def read_only_ndarray(shape, dtype=np.float32):
    buffer = np.full(shape, SENTINEL, dtype)
    buffer.flags.writeable = False
    return NDArray(buffer)  # as a DLPack import of read-only memory would be


def strided_ndarray(shape, dtype=np.float32):
    wide = np.full(shape[:-1] + (2 * shape[-1],), SENTINEL, dtype)
    return NDArray(wide[..., ::2])  # a view with gaps: cannot be written as one block


def build_forward(case, as_numpy):
    data, weight, bias, _ = arrays()
    out = sentinel(OUT_SHAPE)
    call = dict(KW, out=out, req="add")
    values = dict(data=data, weight=weight, bias=bias)
    for key, change in case.items():
        if key in values:
            values[key] = change(values[key])
        elif key == "out":
            call["out"] = change()
        elif key == "kernel" and change is None:
            del call["kernel"]
        else:
            call[key] = change
    if not as_numpy:
        values = {k: v if not isinstance(v, np.ndarray) or v.dtype.kind != "f"
                  or v.dtype == np.longdouble else nd.array(v, dtype=v.dtype)
                  for k, v in values.items()}
    return values, call


@pytest.mark.parametrize("as_numpy", [True, False], ids=["numpy_in", "ndarray_in"])
@pytest.mark.parametrize("name", sorted(FORWARD_ERRORS))
def test_forward_error(name, as_numpy):
    case, error, pattern = FORWARD_ERRORS[name]
    values, call = build_forward(case, as_numpy)
    inputs = [values["data"], values["weight"], values["bias"]]
    before_in = snapshot([v if isinstance(v, (np.ndarray, NDArray)) else None for v in inputs])
    out = call.get("out")
    before_out = snapshot([out]) if isinstance(out, NDArray) else [None]
    with pytest.raises(error, match=pattern):
        nd.Deconvolution(*inputs, **call)
    assert_unchanged(inputs, before_in)
    assert_unchanged([out], before_out, "out=")
    assert_next_call_works()


@pytest.mark.parametrize("name", ["weight_shape", "bias_dtype", "kernel_zero", "target_too_big",
                                  "unknown_keyword", "output_exceeds_memory"])
def test_explain_raises_the_same_errors(name):
    case, error, pattern = FORWARD_ERRORS[name]
    values, call = build_forward(case, True)
    call.pop("out"), call.pop("req")
    with pytest.raises(error, match=pattern):
        mxdeconv.explain(values["data"], values["weight"], values["bias"], **call)


# -- backward: every bad argument -----------------------------------------------------
def grad_targets(dtype=np.float32):
    return [sentinel(s, dtype) for s in (CFG.data_shape, W_SHAPE, CFG.bias_shape)]


BACKWARD_ERRORS = {
    "out_grad_shape": (dict(out_grad=lambda g: g[:, :, :5]), MXNetError,
                       r"out_grad shape mismatch: expected \(2, 6, 6, 6\), got \(2, 6, 5, 6\)"),
    "out_grad_dtype": (dict(out_grad=lambda g: g.astype(np.float64)), MXNetError,
                       r"out_grad dtype mismatch: expected float32, got float64"),
    "out_grad_type": (dict(out_grad=lambda g: None), TypeError,
                      r"out_grad must be an NDArray or a NumPy array, got NoneType"),
    "data_grad_shape": (dict(grads=lambda t: [sentinel((2, 4, 3, 3)), t[1], t[2]]), MXNetError,
                        r"data_grad shape mismatch: expected \(2, 4, 3, 4\), "
                        r"got \(2, 4, 3, 3\)"),
    "weight_grad_shape_for_add": (dict(grads=lambda t: [t[0], sentinel((4, 3, 3, 1)), t[2]]),
                                  MXNetError, r"weight_grad shape mismatch: expected "
                                  r"\(4, 3, 3, 2\), got \(4, 3, 3, 1\)"),
    "bias_grad_dtype": (dict(grads=lambda t: [t[0], t[1], sentinel((6,), np.float64)]),
                        MXNetError, r"bias_grad dtype mismatch: expected float32, "
                        r"got float64"),
    "grad_numpy": (dict(grads=lambda t: [np.zeros(CFG.data_shape, np.float32), t[1], t[2]]),
                   TypeError, r"data_grad must be an NDArray, got ndarray"),
    "grad_read_only": (dict(grads=lambda t: [t[0], read_only_ndarray(W_SHAPE), t[2]]),
                       MXNetError, r"weight_grad must be writeable, got a read-only array"),
    "grad_non_contiguous": (dict(grads=lambda t: [strided_ndarray(CFG.data_shape), t[1],
                                                  t[2]]),
                            MXNetError, r"data_grad must be C-contiguous"),
    "grads_length": (dict(grads=lambda t: t[:2]), MXNetError,
                     r"grads must hold three entries \(data, weight, bias\), got 2"),
    "grads_type": (dict(grads=lambda t: 3), TypeError,
                   r"grads must be a sequence of three NDArrays or Nones \(data, weight, "
                   r"bias\), got int"),
    "grad_missing_for_add": (dict(grads=lambda t: [t[0], None, t[2]]), MXNetError,
                             re.escape("req='add' for weight_grad accumulates into "
                                       "grads[...], which was not given")),
    "req_unknown": (dict(req=("add", "add", "accumulate")), MXNetError,
                    r"req\[2\] must be one of \('write', 'inplace', 'add', 'null'\), "
                    r"got 'accumulate'"),
    "req_length": (dict(req=("add", "add")), MXNetError,
                   r"req must be one string or three \(data, weight, bias\), "
                   r"got \('add', 'add'\)"),
    "req_type": (dict(req=1), TypeError,
                 r"req must be a string or a sequence of three strings \(data, weight, "
                 r"bias\), got 1 of type int"),
    "req_entry_type": (dict(req=("add", None, "add")), TypeError,
                       r"req\[1\] must be a string, one of .*, got None of type NoneType"),
    "weight_dtype": (dict(weight=lambda w: w.astype(np.float64)), MXNetError,
                     r"weight dtype mismatch: expected float32, got float64"),
    "stride_zero": (dict(stride=(0, 1)), MXNetError, r"incorrect stride: stride=\(0, 1\)"),
    "bias_shape": (dict(bias=lambda b: b[:3]), MXNetError,
                   r"bias shape mismatch: expected \(6,\), got \(3,\)"),
}


@pytest.mark.parametrize("name", sorted(BACKWARD_ERRORS))
def test_backward_error(name):
    case, error, pattern = BACKWARD_ERRORS[name]
    data, weight, bias, og = arrays()
    values = dict(out_grad=og, data=data, weight=weight, bias=bias)
    targets = grad_targets()
    call = dict(KW, req="add", grads=targets)
    for key, change in case.items():
        if key in values:
            values[key] = change(values[key])
        elif key == "grads":
            call["grads"] = change(targets)
        else:
            call[key] = change
    inputs = [values[k] for k in ("out_grad", "data", "weight", "bias")]
    before_in = snapshot([v if isinstance(v, (np.ndarray, NDArray)) else None for v in inputs])
    given = call["grads"] if isinstance(call["grads"], list) else []
    before_targets = snapshot(given)
    with pytest.raises(error, match=pattern):
        nd.Deconvolution_backward(*inputs, **call)
    assert_unchanged(inputs, before_in)
    assert_unchanged(given, before_targets, "grads=")
    for t in targets:  # the sentinel targets were never written either
        assert_array_equal(host(t), np.full(t.shape, SENTINEL))
    assert_next_call_works()


def test_parameter_cache_does_not_change_validity():
    """kernel=(3.0, 2) equals (3, 2) and hashes alike: a cached valid parse must
    not let the float spelling through (nor num_group=True for 1)."""
    data, weight, bias, _ = arrays()
    nd.Deconvolution(data, weight, bias, **KW)
    with pytest.raises(TypeError, match=r"kernel\[0\] must be an integer, got 3.0"):
        nd.Deconvolution(data, weight, bias, **dict(KW, kernel=(3.0, 2)))
    one_group = dict(KW, num_group=1, num_filter=3)
    w1 = np.ones((4, 3, 3, 2), np.float32)
    nd.Deconvolution(data, w1, np.ones(3, np.float32), **one_group)
    with pytest.raises(TypeError, match=r"num_group must be an integer, got True"):
        nd.Deconvolution(data, w1, np.ones(3, np.float32), **dict(one_group, num_group=True))


# -- an error after computing: nothing is stored -------------------------------------------
@pytest.mark.parametrize("req", ["write", "add"])
def test_float16_overflow_as_error_writes_nothing(req):
    """Float16OverflowWarning is checked for every result before the first store:
    turned into an error, it leaves all three gradient targets untouched."""
    data, weight, bias, og = (a * 300 for a in arrays(np.float16))
    targets = grad_targets(np.float16)
    out = sentinel(OUT_SHAPE, np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float16OverflowWarning)
        with pytest.raises(Float16OverflowWarning, match=r"float16 overflow: .*weight_grad"):
            nd.Deconvolution_backward(og, data, weight, bias, req=req, grads=targets, **KW)
        with pytest.raises(Float16OverflowWarning, match=r"float16 overflow: output: \d+ of "
                           r"432 values exceed float16's largest finite value 65504"):
            nd.Deconvolution(data, weight, bias, out=out, req=req, **KW)
    for t in targets + [out]:
        assert_array_equal(host(t), np.full(t.shape, SENTINEL))
    assert_next_call_works()


# -- valid but unusual input ------------------------------------------------------------
def unusual_numpy_inputs():
    """The same values as arrays(): Fortran-ordered, strided and read-only views."""
    data, weight, bias, og = arrays()
    strided = np.zeros(data.shape[:-1] + (2 * data.shape[-1],), np.float32)
    strided[..., ::2] = data
    fortran = np.asfortranarray(weight)
    frozen = bias.copy()
    frozen.flags.writeable = False
    reversed_og = og[:, ::-1].copy()[:, ::-1]  # negative strides
    return (data, weight, bias, og), (strided[..., ::2], fortran, frozen, reversed_og)


@BY_IMPL
def test_non_contiguous_and_read_only_inputs_are_copied_not_written(impl):
    (data, weight, bias, og), unusual = unusual_numpy_inputs()
    before = snapshot(unusual)
    assert not unusual[0].flags.c_contiguous and not unusual[2].flags.writeable
    with mxdeconv.use_impl(impl):
        y = nd.Deconvolution(*unusual[:3], **KW)
        grads = nd.Deconvolution_backward(unusual[3], *unusual[:3], **KW)
    assert_allclose(host(y), CFG.ref_forward(data, weight, bias), **TOL)
    for g, ref in zip(grads, CFG.ref_backward(og, data, weight)):
        assert_allclose(host(g), ref, **TOL)
    assert_unchanged(unusual, before)


@BY_IMPL
def test_non_contiguous_ndarray_input_is_copied(impl):
    """An NDArray wrapping a strided buffer (a DLPack import can) is read correctly."""
    data, weight, bias, _ = arrays()
    wide = np.zeros(data.shape[:-1] + (2 * data.shape[-1],), np.float32)
    wide[..., ::2] = data
    with mxdeconv.use_impl(impl):
        y = nd.Deconvolution(NDArray(wide[..., ::2]), weight, bias, **KW)
    assert_allclose(host(y), CFG.ref_forward(data, weight, bias), **TOL)


@BY_IMPL
@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_propagate(impl, poison):
    data, weight, bias, og = arrays()
    data[1, 2, 1, 3] = poison
    og[0, 4, 2, 2] = poison
    with mxdeconv.use_impl(impl), warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning either
        y = host(nd.Deconvolution(data, weight, bias, **KW))
        grads = [host(g) for g in nd.Deconvolution_backward(og, data, weight, bias, **KW)]
    with np.errstate(invalid="ignore"):
        expected = CFG.ref_forward(data, weight, bias)
        expected_grads = CFG.ref_backward(og, data, weight)
    assert not np.isfinite(expected).all()
    assert_allclose(y, expected, equal_nan=True, **TOL)
    assert_array_equal(np.isnan(y), np.isnan(expected))
    for g, ref in zip(grads, expected_grads):
        assert_array_equal(np.isnan(g), np.isnan(ref))
        assert_allclose(g, ref, equal_nan=True, **TOL)
    assert_next_call_works()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_empty_batch_is_valid(dtype):
    """Valid (MXNet allows it): empty results, zero weight and bias gradients.
    oneDNN has nothing to compute; the default dispatch sends it to NumPy."""
    cfg = replace(CFG, batch=0)
    data, weight, bias = cfg.arrays(0, dtype)
    og = cfg.out_grad(0, dtype)
    if True:
        y = nd.Deconvolution(data, weight, bias, **KW)
        dx, dw, db = nd.Deconvolution_backward(og, data, weight, bias, **KW)
        out = sentinel(cfg.out_shape, dtype)
        assert nd.Deconvolution(data, weight, bias, out=out, req="add", **KW) is out
    assert y.shape == cfg.out_shape == (0, 6, 6, 6) and host(y).size == 0
    assert dx.shape == cfg.data_shape and host(dx).size == 0
    assert_array_equal(host(dw), np.zeros(cfg.weight_shape))  # sums over no sample
    assert_array_equal(host(db), np.zeros(cfg.bias_shape))


def test_big_output_is_refused_before_allocation():
    """An output (or fallback work space) beyond physical memory is an MXNetError
    raised before allocating; RSS stays where it was."""
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    data, weight, bias, _ = arrays()
    with pytest.raises(MXNetError, match="would need"):
        nd.Deconvolution(data, weight, bias, **dict(KW, stride=(2**20, 2**20)))
    # float64 has only the fallback, whose uncropped canvas is the big part here
    # (its im2col columns come a few kernel taps at a time, bounded)
    with pytest.raises(MXNetError, match=r"the NumPy fallback would need \d+ bytes of work "
                                         r"space, more than this machine's \d+ bytes"):
        nd.Deconvolution(np.ones((1, 1, 2, 2)), np.ones((1, 1, 1, 1)), kernel=(1, 1),
                         stride=(2**30, 2**30), pad=(2**29, 2**29), num_filter=1)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100_000  # KiB
    assert_next_call_works()


# -- targets sharing memory with inputs: computed first, stored after ----------------------
SQUARE = Config(batch=2, num_group=1, in_per_group=4, out_per_group=4, spatial=(5, 5),
                kernel=(3, 3), stride=(1, 1), dilate=(1, 1), pad=(1, 1), adj=(0, 0))


@BY_IMPL
@pytest.mark.parametrize("req", ["write", "inplace", "add"])
def test_out_aliasing_data(impl, req):
    data, weight, _ = SQUARE.arrays(0, np.float32)
    expected = SQUARE.ref_forward(data, weight, None) + (data if req == "add" else 0)
    x = nd.array(data)
    with mxdeconv.use_impl(impl):
        assert nd.Deconvolution(x, weight, out=x, req=req, **SQUARE.kwargs()) is x
    assert_allclose(host(x), expected, **TOL)


@BY_IMPL
@pytest.mark.parametrize("alias", ["data_grad_is_out_grad", "data_grad_is_data",
                                   "weight_grad_is_weight"])
def test_grad_targets_aliasing_inputs(impl, alias):
    """oneDNN writes data_grad before the weight pass reads out_grad and data:
    an aliased target must not feed a wrong weight gradient."""
    data, weight, _ = SQUARE.arrays(0, np.float32)
    og = SQUARE.out_grad(0, np.float32)
    ref_dx, ref_dw, _ = SQUARE.ref_backward(og, data, weight)
    x, w, g = nd.array(data), nd.array(weight), nd.array(og)
    grads = {"data_grad_is_out_grad": (g, None, None), "data_grad_is_data": (x, None, None),
             "weight_grad_is_weight": (None, w, None)}[alias]
    with mxdeconv.use_impl(impl):
        dx, dw, _ = nd.Deconvolution_backward(g, x, w, grads=grads, **SQUARE.kwargs())
    assert_allclose(host(dx), ref_dx, **TOL)
    assert_allclose(host(dw), ref_dw, **TOL)
    for target, result in zip(grads, (dx, dw)):
        if target is not None:
            assert result is target


# -- use_impl and NDArray(buffer) (found by an adversarial pass) ----------------------------
def test_use_impl_checks_its_name_on_entry():
    with pytest.raises(TypeError, match="use_impl: name must be a string"):
        with mxdeconv.use_impl(None):
            pass
    with pytest.raises(MXNetError, match="use_impl: no implementation named 'cuda'"):
        with mxdeconv.use_impl("cuda"):
            pass
    with pytest.raises(TypeError, match=r"NDArray\(buffer\) takes a NumPy array"):
        mxdeconv.NDArray(5)
