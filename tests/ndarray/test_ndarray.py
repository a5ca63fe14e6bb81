"""NDArray basics a port from MXNet needs: contexts, arithmetic, comparisons,
indexing, reshape and friends, reductions, joins, creation, random, copies, with
MXNet 1.9.1's semantics.

``tests/data/mxnet_ndarray.json`` holds what real MXNet 1.9.1 did with each
case (written by ``scripts/fixtures/make_mxnet_ndarray_fixtures.py``); every case runs
here under mxdeconv and must agree, except the deviations listed in
``DEVIATIONS`` with their reasons.
"""
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mxdeconv
from mxdeconv import MXNetError, nd
from mxdeconv._core.context import context_arg
from mxdeconv.ndarray.indexing import NDArrayIndexError
from mxdeconv.ndarray.ndarray import NDArray
from mxdeconv.semantics.shapes import infer_reshape
from helpers import DATA, fixture_script, replay_case, replay_gradients

FIXTURE = json.loads((DATA / "mxnet_ndarray.json").read_text())
SCRIPT = fixture_script("make_mxnet_ndarray_fixtures")
ERRORS = {"MXNetError": MXNetError, "TypeError": TypeError, "IndexError": IndexError,
          "ValueError": ValueError}


def test_context_is_the_cpu():
    x = nd.ones((2,))
    assert x.context == mxdeconv.cpu() == x.ctx and repr(x.context) == "cpu(0)"
    assert context_arg("ctx", None) == mxdeconv.cpu()
    assert context_arg("ctx", [mxdeconv.cpu(), "cpu(0)"]) == mxdeconv.cpu()
    assert context_arg("ctx", "cpu") == mxdeconv.cpu()
    with pytest.raises(MXNetError, match=r"ctx=gpu\(0\): mxdeconv runs on the CPU only"):
        context_arg("ctx", mxdeconv.gpu(0))
    with pytest.raises(MXNetError, match="ctx must be a context such as 'cpu\\(0\\)', got 'tpu'"):
        context_arg("ctx", "tpu")
    with pytest.raises(TypeError, match="ctx must be a Context"):
        context_arg("ctx", 3)
    with pytest.raises(MXNetError, match="device_id must be an int >= 0, got -1"):
        mxdeconv.cpu(-1)
    with mxdeconv.cpu() as ctx:
        assert ctx == mxdeconv.current_context()


# -- agreement with MXNet 1.9.1 --------------------------------------------------------
def _floor_of_f(result):
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result.asnumpy(), [3.0, -4.0, 2.0, 0.0])  # f // 2


#: label -> (what mxdeconv does instead, why).  Each is checked.
DEVIATIONS = {
    "float32 // 2": (_floor_of_f, "MXNet 1.9.1 has no floor division (TypeError); mxdeconv "
                                  "adds NumPy's, in the operands' dtype"),
    "x[1.0]": (TypeError, "a key of the wrong type is a TypeError here (MXNet: ValueError)"),
    "x['a']": (TypeError, "a key of the wrong type is a TypeError here (MXNet: ValueError)"),
    "x[NumPy bool mask]": (MXNetError, "MXNet silently reads a NumPy boolean mask as 0/1 row "
                                       "indices (rows 1, 0, 1); mxdeconv refuses masks"),
    "nd.concat(list)": (TypeError, "MXNet raises an AssertionError; mxdeconv's errors for bad "
                                   "arguments are TypeError or MXNetError"),
    "nd.stack(list)": (TypeError, "as nd.concat(list)"),
    "dtype is the type": (lambda result: result is False,
                          "NDArray.dtype is a numpy.dtype (== np.float32 holds; `is` does "
                          "not): the package's code and NumPy's take it as one"),
    "dtype as a dict key": (KeyError, "as above: a dict keyed by type classes needs "
                                      "x.dtype.type"),
    "y[[0, 1], None] shape": (lambda result: result.shape == (2, 1, 3, 4),
                              "None after an advanced index goes where NumPy puts it "
                              "(MXNet moves the new axis first)"),
}


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
        with pytest.raises(ERRORS[case["error"]]):
            run()
        return
    result = run()
    if "python" in case:
        encoded = SCRIPT.encode(result, nd.NDArray)
        assert "python" in encoded, f"{label}: got an NDArray, MXNet gave {case['python']!r}"
        assert encoded["python"] == pytest.approx(case["python"]) if isinstance(
            case["python"], float) else encoded["python"] == case["python"], label
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
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=1e-6, equal_nan=True,
                                   err_msg=label)


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=[c["label"] for c in FIXTURE["cases"]])
def test_matches_mxnet(case):
    assert FIXTURE["mxnet_version"] == "1.9.1"
    replay_case(SCRIPT, SCRIPT.run, case, _check_outcome)


@pytest.mark.parametrize("case", FIXTURE["gradients"],
                         ids=[c["label"] for c in FIXTURE["gradients"]])
def test_gradients_match_mxnet(case):
    replay_gradients(case, case["grads"], rtol=1e-6)


def test_the_fixture_covers_every_deviation():
    labels = {c["label"] for c in FIXTURE["cases"]}
    assert set(DEVIATIONS) <= labels


# -- semantics MXNet's fixture cannot show ----------------------------------------------
def test_operators_keep_the_dtype_and_write_in_place():
    x = nd.array([1.0, 2.0])
    version, buffer = x._version, x._state[0]
    y = x
    y += 1
    y -= 0.5
    y *= 2
    y /= 3
    y %= 2
    assert y is x and x._state[0] is buffer and x._version == version + 5
    np.testing.assert_allclose(x.asnumpy(), [1.0, 5 / 3], rtol=1e-6)
    z = x
    z **= 2  # MXNet has no in-place power: Python makes a new array
    assert z is not x


def test_numpy_functions_on_ndarrays_return_ndarrays():
    x = nd.array([[1.0, 4.0], [9.0, 16.0]])
    assert isinstance(np.sqrt(x), nd.NDArray) and np.sqrt(x).dtype == np.float32
    assert np.sum(x).shape == (1,) and isinstance(np.mean(x, axis=0), nd.NDArray)
    assert isinstance(np.concatenate([x, x]), nd.NDArray)
    assert isinstance(np.float32(2) * x, nd.NDArray)
    # Functions with no MXNet counterpart run on NumPy views and return NumPy results.
    assert np.allclose(x, x.asnumpy()) is True
    assert isinstance(np.cumsum(x), np.ndarray)


def test_hash_bool_iteration_and_len():
    x = nd.array([[1.0, 2.0], [3.0, 4.0]])
    assert {x: 1}[x] == 1 and hash(x) == hash(x)
    assert [row.asnumpy().tolist() for row in x] == [[1.0, 2.0], [3.0, 4.0]]
    assert bool(nd.array([0.0])) is False and bool(nd.zeros((0,))) is False
    with pytest.raises(MXNetError, match="truth value of an NDArray with multiple elements"):
        bool(x)
    with pytest.raises(TypeError, match="iteration over a 0-d NDArray"):
        iter(nd.array(5)).__next__()
    assert 3.0 in x[1]


def test_integer_arrays_are_refused_by_deconvolution():
    data = nd.ones((1, 1, 2), dtype="int32")
    with pytest.raises(TypeError, match="data must be a floating-point array, got dtype int32"):
        nd.Deconvolution(data, nd.ones((1, 1, 2)), kernel=(2,), num_filter=1)
    with pytest.raises(TypeError, match="relu: data must be a floating-point array"):
        nd.relu(data)


def test_integer_division_by_zero_gives_zero():
    # MXNet 1.9.1 dies of SIGFPE here; 0 matches its float `%` by zero.
    x = nd.array([7, -7, 0], dtype="int32")
    np.testing.assert_array_equal((x / 0).asnumpy(), [0, 0, 0])
    np.testing.assert_array_equal((x // 0).asnumpy(), [0, 0, 0])
    np.testing.assert_array_equal((x % 0).asnumpy(), [0, 0, 0])


def test_views_share_memory_and_are_exposed():
    x = nd.arange(12).reshape((3, 4))
    v = x[1:3]
    assert v._exposed and x._exposed
    assert np.shares_memory(np.asarray(v), np.asarray(x))
    v += 1
    np.testing.assert_array_equal(x.asnumpy()[1:], np.arange(4, 12).reshape(2, 4) + 1)
    c = nd.array(np.arange(12).reshape(3, 4))
    copy = c[:, 1:2]  # not one block: a copy, nothing exposed
    assert not c._exposed and not copy._exposed
    assert c[:] is c and c[()] is c
    # Copies made by shape methods leave the source unexposed.
    for copy in (c.flatten(), c.expand_dims(0), c.T, c.transpose(), c[[0]], c.copy()):
        assert not copy._exposed
    assert not c._exposed
    assert c.flatten(inplace=True)._exposed and c._exposed


def test_reshape_special_values_match_the_documented_examples():
    # MXNet's own docstring examples.
    assert infer_reshape((2, 3, 4), (4, 0, 2)) == (4, 3, 2)
    assert infer_reshape((2, 3, 4), (2, 0, 0)) == (2, 3, 4)
    assert infer_reshape((2, 3, 4), (6, 1, -1)) == (6, 1, 4)
    assert infer_reshape((2, 3, 4), (3, -1, 8)) == (3, 1, 8)
    assert infer_reshape((2, 3, 4), (-1,)) == (24,)
    assert infer_reshape((2, 3, 4), (-2,)) == (2, 3, 4)
    assert infer_reshape((2, 3, 4), (2, -2)) == (2, 3, 4)
    assert infer_reshape((2, 3, 4), (-2, 1, 1)) == (2, 3, 4, 1, 1)
    assert infer_reshape((2, 3, 4), (-3, 4)) == (6, 4)
    assert infer_reshape((2, 3, 4, 5), (-3, -3)) == (6, 20)
    assert infer_reshape((2, 3, 4), (0, -3)) == (2, 12)
    assert infer_reshape((2, 3, 4), (-3, -2)) == (6, 4)
    assert infer_reshape((2, 3, 4), (-4, 1, 2, -2)) == (1, 2, 3, 4)
    assert infer_reshape((2, 3, 4), (2, -4, -1, 3, -2)) == (2, 1, 3, 4)
    assert infer_reshape((10, 5, 4), (-1, 0)) == (40, 5)
    assert infer_reshape((10, 5, 4), (-1, 0), reverse=True) == (50, 4)


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
       data=st.data())
@settings(max_examples=60, deadline=None)
def test_reshape_codes_keep_the_size(shape, data):
    size = math.prod(shape)
    codes = data.draw(st.lists(st.sampled_from([0, -1, -2, -3, 1, 2]), min_size=1,
                               max_size=4).map(tuple))
    reverse = data.draw(st.booleans())
    try:
        out = infer_reshape(shape, codes, reverse)
    except MXNetError:
        return
    assert math.prod(out) == size
    assert nd.zeros(shape).reshape(codes, reverse=reverse).shape == out


def test_random_is_seeded_by_mxdeconv_random_seed():
    mxdeconv.random.seed(11)
    a = nd.random.normal(2, 3, shape=(1000,))
    mxdeconv.random.seed(11)
    b = nd.random.normal(2, 3, shape=(1000,))
    np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    assert abs(float(a.mean().asscalar()) - 2) < 0.5
    low = nd.array([0.0, 10.0])
    u = nd.random.uniform(low, low + 1, shape=(50,))
    assert u.shape == (2, 50)
    assert float(u[0].max().asscalar()) < 1 and float(u[1].min().asscalar()) >= 10
    assert nd.random is mxdeconv.random


# -- hostile input -------------------------------------------------------------------------
X = lambda: nd.arange(6).reshape((2, 3))  # noqa: E731


@pytest.mark.parametrize("call, error, match", [
    (lambda: X() + "a", TypeError, "add: rhs must be an NDArray or a number, got str"),
    (lambda: X() * [1, 2, 3], TypeError, "multiply: rhs must be an NDArray or a number"),
    (lambda: X() + nd.ones((2, 3), dtype="float64"), MXNetError,
     "add: operands have different dtypes float32 and float64"),
    (lambda: X() - nd.ones((3, 2)), MXNetError,
     r"subtract: operands could not be broadcast together with shapes \(2, 3\), \(3, 2\)"),
    (lambda: nd.ones((2,), dtype="int32") + 2**40, MXNetError,
     "add: rhs 1099511627776 does not fit in int32"),
    (lambda: nd.ones((2,), dtype="int32") * float("nan"), MXNetError, "does not fit in int32"),
    (lambda: X()[2], NDArrayIndexError, "index 2 is out of bounds for axis 0 with size 2"),
    (lambda: X()[0, -4], NDArrayIndexError, "index -4 is out of bounds for axis 1 with size 3"),
    (lambda: X()[:, [0, 3]], NDArrayIndexError, "index 3 is out of bounds for axis 1"),
    (lambda: X()[0, 0, 0], NDArrayIndexError, r"too many indices \(3\) for array with 2"),
    (lambda: X()[..., ...], NDArrayIndexError, "a single ellipsis"),
    (lambda: X()[::0], MXNetError, "slice step cannot be zero"),
    (lambda: X()[1.5], TypeError, "NDArray indices must be ints, slices, None"),
    (lambda: X()[0:"a"], TypeError, "slice bounds in key .* must be ints or None"),
    (lambda: X()[nd.array([0.5])], MXNetError, "not whole numbers"),
    (lambda: X()[[True, False]], MXNetError, "boolean mask indexing"),
    (lambda: X()[[[0], [0, 1]]], MXNetError, "not a rectangular array"),
    (lambda: X().reshape((4, -1)), MXNetError, r"reshape: cannot infer the -1 in shape=\(4, -1\)"),
    (lambda: X().reshape((7,)), MXNetError, r"cannot reshape an array of shape \(2, 3\)"),
    (lambda: X().reshape((2.0, 3)), TypeError, "shape entries must be ints"),
    (lambda: X().reshape((2, 3), order="F"), TypeError, "unknown keyword arguments"),
    (lambda: X().reshape(), TypeError, "the new shape must be given"),
    (lambda: X().transpose((0, 0)), MXNetError, "is not a permutation"),
    (lambda: X().transpose((0, 2)), MXNetError, "out of range"),
    (lambda: X().sum(axis=2), MXNetError, r"axis=2 is out of range for an array of 2 dims"),
    (lambda: X().sum(axis="0"), TypeError, "axis must be an int or a tuple of ints"),
    (lambda: X().sum(axis=(1, -1)), MXNetError, "duplicate axes"),
    (lambda: X().mean(keepdims="yes"), TypeError, "keepdims must be a bool"),
    (lambda: X().norm(ord=3), MXNetError, "only ord=1 and ord=2"),
    (lambda: nd.zeros((0, 2)).max(), MXNetError, "max: cannot reduce an empty axis"),
    (lambda: nd.concat(), MXNetError, "concat: needs at least one array"),
    (lambda: nd.concat(X(), [1]), TypeError, "concat: array 1 must be an NDArray, got list"),
    (lambda: nd.concat(X(), X(), num_args=3), MXNetError, "num_args=3 but 2 arrays"),
    (lambda: nd.concat(X(), nd.ones((3, 3))), MXNetError, "differ outside dim 1"),
    (lambda: nd.stack(X(), nd.ones((3, 2))), MXNetError, "stack: arrays must have one shape"),
    (lambda: nd.stack(X(), X(), axis=4), MXNetError, "axis=4 is out of range"),
    (lambda: X().astype("complex64"), TypeError, "unsupported dtype complex64"),
    (lambda: X().astype("float32", copy="no"), TypeError, "copy must be a bool"),
    (lambda: X().copyto(nd.zeros((3, 2))), MXNetError, r"target has shape \(3, 2\), the source"),
    (lambda: X().copyto("gpu(0)"), MXNetError, "runs on the CPU only"),
    (lambda: X().copyto(None), TypeError, "copyto: other must be an NDArray or a Context"),
    (lambda: X().as_in_context(mxdeconv.gpu()), MXNetError, "runs on the CPU only"),
    (lambda: nd.zeros((2,), "float32"), MXNetError, "ctx must be a context such as"),
    (lambda: nd.zeros((2,), np.float32), TypeError, "ctx must be a Context"),
    (lambda: nd.full((2,), "x"), TypeError, "full: val must be a number"),
    (lambda: nd.arange(0, 3, 0), MXNetError, "step=0"),
    (lambda: nd.arange("3"), TypeError, "arange: start must be a number"),
    (lambda: nd.arange(3, repeat=0), MXNetError, "repeat must be >= 1"),
    (lambda: nd.random.uniform(1, 0), MXNetError, "low must be less or equal to high"),
    (lambda: nd.random.normal(0, 0), MXNetError, "scale must be positive"),
    (lambda: nd.random.uniform(nd.zeros((2,)), 1), TypeError,
     "low and high must both be numbers or both NDArrays, got NDArray and int"),
    (lambda: nd.random.uniform(shape=(2,), dtype="int32"), MXNetError, "Invalid Input"),
    (lambda: nd.random.uniform(shape=(-1,)), MXNetError, "shape entries must be >= 0"),
    (lambda: nd.random.normal(out=np.zeros(2)), TypeError, "normal: out must be an NDArray"),
    (lambda: mxdeconv.random.seed(1.5), TypeError, "seed_state must be an int"),
    (lambda: mxdeconv.random.seed(-1), MXNetError, r"seed_state must be in \[0, 2\*\*32\)"),
    (lambda: nd.zeros_like([1]), TypeError, "zeros_like: data must be an NDArray"),
    (lambda: NDArray(np.array([True])) + 1, TypeError, "add: operands of dtype bool are not"),
    (lambda: NDArray(np.array([True])).sum(), TypeError, "sum: operands of dtype bool"),
    (lambda: X().flatten(inplace=1), TypeError, "inplace must be a bool"),
    (lambda: np.add(X(), 1, where=True), TypeError, "no keyword arguments besides out="),
    (lambda: np.sum(X(), dtype="float64"), TypeError, "sum: NDArray does not take dtype"),
])
def test_bad_arguments_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def _unchanged_after(make_target, attempt, error, match):
    target = make_target()
    before, version = target.asnumpy(), target._version
    with pytest.raises(error, match=match):
        attempt(target)
    np.testing.assert_array_equal(target.asnumpy(), before)
    assert target._version == version


@pytest.mark.parametrize("attempt, error, match", [
    (lambda x: x.__setitem__(0, nd.ones((2,))), MXNetError,
     r"cannot assign a value of shape \(2,\) to a selection of shape \(3,\)"),
    (lambda x: x.__setitem__((slice(None), [0, 5]), 1), NDArrayIndexError, "out of bounds"),
    (lambda x: x.__setitem__(0, "abc"), TypeError, "value must be a number, an NDArray"),
    (lambda x: x.__setitem__(0, None), TypeError, "value must be a number"),
    (lambda x: x.__setitem__(0, [[1, 2], [3]]), MXNetError, "not a rectangular array"),
    (lambda x: x.__setitem__(0, np.array(["a", "b", "c"])), TypeError, "must hold real numbers"),
    (lambda x: x.__setitem__(0, 10**400), MXNetError, "does not fit in float32"),
    (lambda x: x.__iadd__(nd.ones((2, 2, 3))), MXNetError, "Shape inconsistent"),
    (lambda x: x.__isub__(nd.ones((2, 3), dtype="float64")), MXNetError, "different dtypes"),
    (lambda x: x.__imul__("2"), TypeError, "multiply: rhs must be"),
    (lambda x: nd.ones((2, 2)).copyto(x), MXNetError, "target has shape"),
    (lambda x: nd.random.uniform(shape=(3, 3), out=x), MXNetError, "out= has shape"),
])
def test_failed_writes_leave_the_target_unchanged(attempt, error, match):
    _unchanged_after(X, attempt, error, match)


def _deconvolution():
    """A Deconvolution result, in oneDNN's blocked layout where the CPU has one."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal((1, 32, 4, 4)).astype(np.float32)
    weight = (0.1 * rng.standard_normal((32, 32, 3, 3))).astype(np.float32)
    return lambda: nd.Deconvolution(data, weight, kernel=(3, 3), num_filter=32)


@pytest.mark.parametrize("write, expected", [
    (lambda y: y.__setitem__(0, 1.0), lambda plain: np.ones_like(plain)),
    (lambda y: y.__setitem__((0, 3), y[0, 4]), lambda plain: np.concatenate(
        [plain[:, :3], plain[:, 4:5], plain[:, 4:]], axis=1)),
    (lambda y: y.__iadd__(1.0), lambda plain: plain + 1),
    (lambda y: nd.ones(y.shape).copyto(y), lambda plain: np.ones_like(plain)),
], ids=["setitem", "setitem from itself", "iadd", "copyto"])
def test_writes_reach_blocked_arrays_and_bump_the_version(write, expected):
    deconvolution = _deconvolution()
    plain = deconvolution().asnumpy()
    y = deconvolution()
    version = y._version
    write(y)
    assert y._version == version + 1 and y.layout == "default"
    np.testing.assert_allclose(y.asnumpy(), expected(plain), rtol=1e-6)


def test_results_of_blocked_inputs_match_their_plain_values():
    deconvolution = _deconvolution()
    plain = deconvolution().asnumpy()
    for op, expected in ((lambda y: y - 1, plain - 1), (lambda y: y[0, 3], plain[0, 3]),
                         (lambda y: y.sum(axis=(2, 3)), plain.sum(axis=(2, 3))),
                         (lambda y: y.reshape((0, -1)), plain.reshape(1, -1)),
                         (lambda y: y.T, plain.T), (lambda y: y > 0, (plain > 0) * 1.0)):
        y = deconvolution()
        np.testing.assert_allclose(op(y).asnumpy(), expected, rtol=1e-6, atol=1e-6)


# -- nd.array of what is not real numbers (found by an adversarial pass) --------------------
@pytest.mark.parametrize("values", [
    np.array([1 + 2j]), np.array(["a", "b"]), np.array([b"x"]), np.array([1, None]),
    np.array(["2020-01-01"], dtype="datetime64[D]"), np.zeros(2, dtype=[("a", "f4")]),
    np.array([object()])])
def test_nd_array_refuses_what_is_not_real_numbers(values):
    with pytest.raises(TypeError, match="must hold real numbers"):
        nd.array(values)
