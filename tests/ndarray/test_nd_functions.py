"""The ``nd`` function forms (``nd.mean``, ``nd.square``, ``nd.clip``, ``nd.dot``,
``nd.softmax``, ``nd.LeakyReLU``, ...) with MXNet 1.9.1's semantics and gradients.

``tests/data/mxnet_nd_functions.json`` holds what real MXNet 1.9.1 did with
each case (written by ``scripts/fixtures/make_mxnet_nd_function_fixtures.py``); every
case runs here under mxdeconv and must agree, except the deviations listed in
``DEVIATIONS`` and ``TYPE_ERRORS`` with their reasons (docs/porting.rst
lists them too).
"""
import json

import numpy as np
import pytest

from mxdeconv import MXNetError, autograd, nd
from mxdeconv.ndarray import elementwise, reductions, shaping, softmax, unary
from mxdeconv.ndarray.ndarray import NDArray
from helpers import DATA, fixture_script, replay_case, replay_gradients

FIXTURE = json.loads((DATA / "mxnet_nd_functions.json").read_text())
SCRIPT = fixture_script("make_mxnet_nd_function_fixtures")
ERRORS = {"MXNetError": MXNetError, "TypeError": TypeError, "IndexError": IndexError,
          "ValueError": ValueError}

#: What MXNet's error says -> why mxdeconv raises a TypeError there instead.
TYPE_ERRORS = {
    "must have NDArray type": "MXNet asserts that array arguments are NDArrays "
                              "(AssertionError); an argument of the wrong type is a TypeError here",
    "Invalid Parameter format": "MXNet parses every argument from its text (MXNetError); a value "
                                "of the wrong type (a string, None, a bool, a float axis) is a "
                                "TypeError here",
    "is not presented": "a missing required argument is Python's TypeError",
    "expects 1 inputs, but got 0": "a missing required argument is Python's TypeError",
    "only support floating point types": "a dtype the function does not take is a TypeError, "
                                         "as for nd.Activation",
    "only support integer types": "a dtype the function does not take is a TypeError",
    "type_flag_ == kFloat32": "dot of integers or float16 (CPU): a dtype the function does not "
                              "take is a TypeError",
}


def _is_name(result):
    assert result == "NDArray"


#: label -> (what mxdeconv does instead, why).  Each is checked.
DEVIATIONS = {
    "LeakyReLU rrelu result type": (_is_name, "MXNet's rrelu returns [output, mask], the mask "
                                              "uninitialized outside training; mxdeconv returns "
                                              "the output, as for every other act_type"),
    "relu int32": (TypeError, "nd.relu takes floating-point arrays only, as nd.Activation and "
                              "Deconvolution (MXNet: an integer relu)"),
    "reshape bad": (MXNetError, "MXNet 1.9.1's nd.reshape of 6 values into (4, 2) reads past the "
                                "array (garbage values); mxdeconv raises, as x.reshape does"),
    "rrelu recorded in predict mode": (
        lambda result: np.testing.assert_allclose(result, [[-0.459, 3.0], [0.2295, 1.0]],
                                                  rtol=1e-6),
        "MXNet's rrelu backward outside training gives the output (-0.459) as the gradient "
        "of -2; mxdeconv gives the slope 0.2295, the derivative of its forward"),
}

#: label -> (the gradients mxdeconv gives instead, why).  Each is checked.
GRADIENT_DEVIATIONS = {
    "prod(axis=1)": ([[[6.0, 3.0, 2.0], [0.0, 24.0, 0.0]]],
                     "MXNet divides the product by each element: NaN for the 0 (0/0); mxdeconv "
                     "gives the product of the others, 24"),
    "LeakyReLU selu": ([[1.0507009873554805 * 1.6732632423543772 * np.exp(-1.0),
                         1.0507009873554805 * 1.6732632423543772, 1.0507009873554805]],
                       "MXNet 1.9.1's selu gradient below 0 is lambda * (y + alpha), not the "
                       "derivative of its forward, lambda * alpha * exp(x); mxdeconv gives the "
                       "derivative (checked by central differences below)"),
}

#: label prefix -> (absolute tolerance, why): MXNet's own rounding is coarser there.
TOLERANCES = {
    "log_softmax": (1e-5, "MXNet 1.9.1's log_softmax is off by up to 3e-6 in float32 (its "
                          "log(sum(exp)) loses digits: -0.1328421 for -0.1328452); mxdeconv's "
                          "agrees with float64 to float32 rounding"),
}


def _type_error_reason(case):
    return next((why for words, why in TYPE_ERRORS.items() if words in case["message"]), None)


def _same_python(label, actual, expected):
    """Python results (JSON: nested lists, numbers, bools, strings) alike,
    numbers to float32 rounding."""
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (label, actual)
        for a, e in zip(actual, expected):
            _same_python(label, a, e)
    elif isinstance(expected, (bool, str)) or expected is None:
        assert actual == expected and type(actual) is type(expected), (label, actual, expected)
    else:
        assert not isinstance(actual, (bool, str)), (label, actual, expected)
        assert actual == pytest.approx(expected, rel=1e-6, nan_ok=True), (label, actual)


def _check_outcome(case, run):
    label = case["label"]
    if label in DEVIATIONS:
        expected, _why = DEVIATIONS[label]
        if isinstance(expected, type) and issubclass(expected, BaseException):
            with pytest.raises(expected):
                run()
        else:
            expected(run())
        return
    if "error" in case:
        expected = TypeError if _type_error_reason(case) else ERRORS[case["error"]]
        with pytest.raises(expected):
            run()
        return
    result = run()
    if "python" in case:
        encoded = SCRIPT.basics.encode(result, nd.NDArray)
        assert "python" in encoded, f"{label}: got an NDArray, MXNet gave {case['python']!r}"
        _same_python(label, encoded["python"], case["python"])
        return
    assert isinstance(result, nd.NDArray), f"{label}: got {result!r}"
    assert str(result.dtype) == case["dtype"], label
    assert list(result.shape) == case["shape"], label
    expected = np.array(case["values"], dtype=np.float64).reshape(case["shape"])
    actual = result.asnumpy().astype(np.float64)
    if result.dtype.kind in "iu":
        np.testing.assert_array_equal(actual, expected, err_msg=label)
    else:
        rtol = 1e-3 if result.dtype == np.float16 else 1e-6
        atol = next((tol for prefix, (tol, _why) in TOLERANCES.items()
                     if label.startswith(prefix)), 1e-6)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=label)


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=[c["label"] for c in FIXTURE["cases"]])
def test_matches_mxnet(case):
    assert FIXTURE["mxnet_version"] == "1.9.1"
    replay_case(SCRIPT, SCRIPT.basics.run, case, _check_outcome)


@pytest.mark.parametrize("case", FIXTURE["gradients"],
                         ids=[c["label"] for c in FIXTURE["gradients"]])
def test_gradients_match_mxnet(case):
    replay_gradients(case, GRADIENT_DEVIATIONS.get(case["label"], (case["grads"],))[0], rtol=1e-5)


def test_the_fixture_covers_every_function_and_deviation():
    labels = {c["label"] for c in FIXTURE["cases"]}
    assert set(DEVIATIONS) <= labels
    assert set(GRADIENT_DEVIATIONS) <= {c["label"] for c in FIXTURE["gradients"]}
    code = " ".join([c["code"] for c in FIXTURE["cases"]]
                    + [c["function"] for c in FIXTURE["gradients"]])
    modules = (elementwise, reductions, shaping, softmax, unary)
    names = {name for module in modules for name in module.__all__} | {"dot", "LeakyReLU", "cast"}
    missing = sorted(name for name in names if f"nd.{name}(" not in code
                     and f"'{name}'" not in code)
    # The broadcast family's names are built from their operator in the script.
    missing = [name for name in missing if not (name.startswith("broadcast_") and
                                                name[len("broadcast_"):] in SCRIPT.BROADCAST)]
    assert not missing, f"no MXNet case calls {missing}"
    # Every MXNet error that mxdeconv reports as a TypeError has a reason.
    for case in FIXTURE["cases"]:
        if case.get("error") in ("AssertionError",):
            assert _type_error_reason(case), case["label"]


# -- what the fixture cannot show -------------------------------------------------------
def _numeric_gradient(f, x, eps=1e-6):
    """Central differences of sum(f(x)) in float64."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        up = f(nd.array(x + step, dtype="float64")).asnumpy().sum()
        down = f(nd.array(x - step, dtype="float64")).asnumpy().sum()
        grad[i] = (up - down) / (2 * eps)
    return grad


@pytest.mark.parametrize("name,f", [
    ("rsqrt", lambda a: nd.rsqrt(a)),
    ("log1p", lambda a: nd.log1p(a)),
    ("sigmoid", lambda a: nd.sigmoid(a) * a),
    ("smooth_l1", lambda a: nd.smooth_l1(a, scalar=1.5)),
    ("softmax", lambda a: nd.softmax(a, axis=0, temperature=1.5) * nd.arange(6, dtype="float64")
     .reshape((2, 3))),
    ("log_softmax", lambda a: nd.log_softmax(a) * nd.arange(6, dtype="float64").reshape((2, 3))),
    ("dot", lambda a: nd.dot(a, a, transpose_b=True)),
    ("norm", lambda a: nd.norm(a, axis=1)),
    ("pick", lambda a: nd.pick(nd.square(a), nd.array([2, 0], dtype="float64"))),
    ("LeakyReLU gelu", lambda a: nd.LeakyReLU(a, act_type="gelu")),
    ("LeakyReLU selu", lambda a: nd.LeakyReLU(a, act_type="selu")),
    ("LeakyReLU elu", lambda a: nd.LeakyReLU(a, act_type="elu", slope=0.3)),
    ("broadcast_to", lambda a: nd.broadcast_to(nd.reshape(a, (1, 6)), (3, 6)) *
     nd.arange(18, dtype="float64").reshape((3, 6))),
])
def test_gradients_agree_with_central_differences(name, f):
    x = np.array([[0.3, 1.2, 2.0], [0.7, 0.4, 1.6]])  # away from kinks, positive for rsqrt
    arr = nd.array(x, dtype="float64")
    arr.attach_grad()
    with autograd.record():
        head = f(arr)
    head.backward()
    np.testing.assert_allclose(arr.grad.asnumpy(), _numeric_gradient(f, x), rtol=1e-5,
                               atol=1e-7, err_msg=name)


def test_prelu_gamma_gradient_agrees_with_central_differences():
    x = nd.array([[[-1.0, 2.0], [-3.0, 0.5]], [[0.5, -0.25], [1.0, -2.0]]], dtype="float64")
    gamma = nd.array([0.1, 0.4], dtype="float64")
    gamma.attach_grad()
    with autograd.record():
        nd.LeakyReLU(x, gamma, act_type="prelu").backward()
    numeric = _numeric_gradient(lambda g: nd.LeakyReLU(x, g, act_type="prelu"),
                                gamma.asnumpy())
    np.testing.assert_allclose(gamma.grad.asnumpy(), numeric, rtol=1e-6)


def test_out_is_the_recorded_result_and_refused_writes_leave_it_unchanged():
    w = nd.array([1.0, 2.0])
    w.attach_grad()
    out = nd.zeros((2,))
    with autograd.record():
        result = nd.square(w, out=out)
    assert result is out
    out.backward()
    np.testing.assert_allclose(w.grad.asnumpy(), [2.0, 4.0])
    target = nd.full((2,), 7)
    for bad in (nd.zeros((3,)), nd.zeros((2,), dtype="float64")):
        with pytest.raises(MXNetError, match=r"square\(out=\)"):
            nd.square(w, out=bad)
        assert (bad.asnumpy() == 0).all()
    with pytest.raises(TypeError, match=r"square\(out=\): out must be an NDArray"):
        nd.square(w, out=np.zeros(2, dtype=np.float32))
    with autograd.record():  # out= one of the inputs, while recording: MXNet refuses
        with pytest.raises(MXNetError, match="computational graph"):
            nd.broadcast_add(w, target, out=target)
    assert (target.asnumpy() == 7).all()
    p = nd.array([4.0, 9.0])
    assert nd.sqrt(p, out=p) is p and p.asnumpy().tolist() == [2.0, 3.0]


def test_errors_name_the_function_and_the_argument():
    x = nd.array([[1.0, 2.0], [3.0, 4.0]])
    cases = [
        (lambda: nd.clip(x, "x", 3), TypeError, r"clip: a_min must be a number, got 'x'"),
        (lambda: nd.sum(x, keepdims="a"), TypeError, "sum: keepdims must be a bool, got 'a'"),
        (lambda: nd.mean(x, axis=2), MXNetError, r"mean: axis=2 is out of range"),
        (lambda: nd.argmax(x, axis=(0, 1)), TypeError, "argmax: axis must be an int"),
        (lambda: nd.exp([1, 2]), TypeError, "exp: data must be an NDArray, got list"),
        (lambda: nd.broadcast_mul(x, 2), TypeError, "broadcast_mul: rhs must be an NDArray"),
        (lambda: nd.elemwise_add(x, nd.ones((2,))), MXNetError, "elemwise_add: lhs has shape"),
        (lambda: nd.pick(x, nd.array([0.0]), mode="x"), MXNetError, "pick: Invalid Input: 'x'"),
        (lambda: nd.dot(x, nd.ones((3, 2))), MXNetError, r"dot: shape error"),
        (lambda: nd.softmax(x, axis=2), MXNetError, r"softmax: axis=2 is out of range"),
        (lambda: nd.LeakyReLU(x, act_type="x"), MXNetError, "LeakyReLU: act_type: Invalid"),
        (lambda: nd.LeakyReLU(x, slope="a"), TypeError, "LeakyReLU: slope must be a number"),
        (lambda: nd.broadcast_to(x, (3, 2)), MXNetError, "broadcast_to: an array of shape"),
        (lambda: nd.where(nd.ones((3,)), x, x), MXNetError, "where: condition has shape"),
        (lambda: nd.exp(x, name=3), TypeError, "exp: name must be a string or None"),
        (lambda: nd.abs(NDArray(np.array([True, False]))), TypeError, "abs: data: operands "
                                                                        "of dtype bool"),
    ]
    for call, error, words in cases:
        with pytest.raises(error, match=words):
            call()


def test_rrelu_refuses_training_mode():
    x = nd.array([-1.0, 2.0])
    with autograd.train_mode(), pytest.raises(MXNetError, match="rrelu.*training mode"):
        nd.LeakyReLU(x, act_type="rrelu")
    np.testing.assert_allclose(nd.LeakyReLU(x, act_type="rrelu").asnumpy(),
                               [-(0.125 + 0.334) / 2, 2.0], rtol=1e-6)


def test_methods_take_keepdims_as_an_int():
    x = nd.array([[1.0, 2.0], [3.0, 4.0]])
    assert x.sum(axis=1, keepdims=1).shape == (2, 1) and x.max(keepdims=0).shape == (1,)


def test_function_forms_read_blocked_arrays():
    rng = np.random.default_rng(0)
    data = rng.uniform(-1, 1, (1, 16, 3, 3)).astype(np.float32)
    weight = rng.uniform(-1, 1, (16, 16, 3, 3)).astype(np.float32)
    y = nd.Deconvolution(data, weight, kernel=(3, 3), num_filter=16)
    expected = y.asnumpy()
    np.testing.assert_allclose(nd.sigmoid(y).asnumpy(), 1 / (1 + np.exp(-expected)),
                               rtol=1e-5)
    np.testing.assert_allclose(nd.mean(nd.square(y)).asnumpy(), [np.mean(expected ** 2)],
                               rtol=1e-5)
    np.testing.assert_allclose(nd.softmax(y, axis=1).asnumpy().sum(axis=1), 1, rtol=1e-5)
