"""mxdeconv.autograd: modes, the tape, backward through chains of Deconvolution and
elementwise ops, grad_req write/add/null, retain_graph, MXNet's error cases.

Gradients are checked against a hand-written float64 backward built from
tests/reference.py (independent of mxdeconv) and, for the float64 NumPy path,
against central finite differences."""
import threading

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mxdeconv
from mxdeconv import MXNetError, autograd, nd
from reference import reference_backward, reference_forward

IMPLS = ("numpy", "onednn")
BY_IMPL = pytest.mark.parametrize("impl", IMPLS)

# Layer 1: grouped, strided, cropped, adj; layer 2: plain 2x2.
L1 = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1), num_filter=4, num_group=2,
          no_bias=False)
L1_REF = dict(kernel=(3, 3), stride=(2, 2), dilate=(1, 1), pad_l=(1, 1), pad_r=(0, 0),
              num_group=2)
L2 = dict(kernel=(2, 2), num_filter=3)
L2_REF = dict(kernel=(2, 2), stride=(1, 1), dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0),
              num_group=1)


@pytest.fixture
def rng():
    return np.random.default_rng(11)


def _chain_inputs(rng, dtype):
    return dict(
        x=rng.uniform(-1, 1, (2, 4, 3, 3)).astype(dtype),
        w1=rng.uniform(-1, 1, (4, 2, 3, 3)).astype(dtype),
        b1=rng.uniform(-1, 1, (4,)).astype(dtype),
        s=rng.uniform(0.5, 1.5, (1, 4, 1, 1)).astype(dtype),
        w2=rng.uniform(-1, 1, (4, 3, 2, 2)).astype(dtype),
        c=rng.uniform(-1, 1, (3, 1, 1)).astype(dtype),
        head=rng.uniform(-1, 1, (2, 3, 7, 7)).astype(dtype),
    )


def _chain(v):
    """z = deconv2(relu(deconv1(x, w1, b1)) * s, w2) + c, on NDArrays or NumPy dicts."""
    h1 = nd.Deconvolution(v["x"], v["w1"], v["b1"], **L1)
    m = nd.relu(h1) * v["s"]
    return nd.Deconvolution(m, v["w2"], **L2) + v["c"]


def _chain_reference(v):
    """The same chain's forward and hand-written backward in float64."""
    h1 = reference_forward(v["x"], v["w1"], v["b1"], **L1_REF)
    a = np.maximum(h1, 0)
    m = a * v["s"]
    z = reference_forward(m, v["w2"], None, **L2_REF) + v["c"]
    g = np.asarray(v["head"], np.float64)
    grads = {"c": g.sum(axis=(0, 2, 3)).reshape(v["c"].shape)}
    g_m, grads["w2"], _ = reference_backward(g, m, v["w2"], with_bias=False, **L2_REF)
    grads["s"] = (g_m * a).sum(axis=(0, 2, 3), keepdims=True)
    g_h1 = g_m * v["s"] * (h1 > 0)
    grads["x"], grads["w1"], grads["b1"] = reference_backward(g_h1, v["x"], v["w1"], **L1_REF)
    return z, grads


def _variables(values, names, grad_req="write"):
    arrays = {k: nd.array(a, dtype=a.dtype) for k, a in values.items()}
    for name in names:
        arrays[name].attach_grad(grad_req)
    return arrays


VARIABLES = ("x", "w1", "b1", "s", "w2", "c")


# -- modes -------------------------------------------------------------------------
def test_defaults_are_inference_and_not_recording():
    assert not autograd.is_training() and not autograd.is_recording()


def test_record_turns_training_on_unless_told_and_restores():
    with autograd.record():
        assert autograd.is_recording() and autograd.is_training()
        with autograd.pause():
            assert not autograd.is_recording() and not autograd.is_training()
            with autograd.train_mode():
                assert autograd.is_training() and not autograd.is_recording()
        with autograd.pause(train_mode=True):
            assert autograd.is_training()
        with autograd.predict_mode():
            assert not autograd.is_training() and autograd.is_recording()
        assert autograd.is_recording() and autograd.is_training()
    assert not autograd.is_recording() and not autograd.is_training()
    with autograd.record(train_mode=False):
        assert autograd.is_recording() and not autograd.is_training()
    assert not autograd.is_recording()


def test_scopes_restore_on_exceptions():
    with pytest.raises(RuntimeError):
        with autograd.record():
            raise RuntimeError("boom")
    assert not autograd.is_recording() and not autograd.is_training()


def test_modes_are_per_thread():
    seen = {}
    with autograd.record():
        thread = threading.Thread(
            target=lambda: seen.update(rec=autograd.is_recording(), train=autograd.is_training()))
        thread.start()
        thread.join()
    assert seen == {"rec": False, "train": False}


def test_set_recording_and_set_training_return_previous():
    assert autograd.set_recording(True) is False
    try:
        assert autograd.is_recording()
    finally:
        assert autograd.set_recording(False) is True
    assert autograd.set_training(True) is False
    assert autograd.set_training(False) is True


# -- single operator ---------------------------------------------------------------
@BY_IMPL
def test_single_deconvolution_matches_deconvolution_backward(impl, rng):
    v = _chain_inputs(rng, np.float32)
    head = rng.uniform(-1, 1, (2, 4, 6, 6)).astype(np.float32)
    x, w, b = nd.array(v["x"]), nd.array(v["w1"]), nd.array(v["b1"])
    for arr in (x, w, b):
        arr.attach_grad()
    with mxdeconv.use_impl(impl):
        with autograd.record():
            y = nd.Deconvolution(x, w, b, **L1)
        y.backward(nd.array(head))
        expected = nd.Deconvolution_backward(head, v["x"], v["w1"], v["b1"], **L1)
    for arr, exp in zip((x, w, b), expected):
        assert_allclose(arr.grad.asnumpy(), exp.asnumpy(), rtol=1e-5, atol=1e-5)


def test_default_head_gradient_is_ones(rng):
    x = nd.array(rng.uniform(-1, 1, (1, 2, 3)).astype(np.float32))
    w = nd.array(rng.uniform(-1, 1, (2, 1, 2)).astype(np.float32))
    x.attach_grad()
    with autograd.record():
        y = nd.Deconvolution(x, w, kernel=(2,), num_filter=1)
    y.backward()
    expected, _, _ = reference_backward(np.ones((1, 1, 4)), x.asnumpy(), w.asnumpy(),
                                        kernel=(2,), stride=(1,), dilate=(1,), pad_l=(0,),
                                        pad_r=(0,), num_group=1, with_bias=False)
    assert_allclose(x.grad.asnumpy(), expected, rtol=1e-5, atol=1e-6)


# -- chains ------------------------------------------------------------------------
@BY_IMPL
def test_chain_of_deconvolutions_and_elementwise_ops(impl, rng):
    values = _chain_inputs(rng, np.float32)
    arrays = _variables({k: v for k, v in values.items() if k != "head"}, VARIABLES)
    with mxdeconv.use_impl(impl):
        with autograd.record():
            z = _chain(arrays)
        z.backward(nd.array(values["head"]))
    z_ref, grads = _chain_reference(values)
    assert_allclose(z.asnumpy(), z_ref, rtol=1e-4, atol=1e-4)
    for name in VARIABLES:
        assert arrays[name].grad.shape == values[name].shape
        assert_allclose(arrays[name].grad.asnumpy(), grads[name], rtol=1e-4, atol=1e-4,
                        err_msg=name)


def test_chain_gradients_match_finite_differences(rng):
    """float64 (NumPy path): <grad, v> equals the central difference of
    sum(head * z) along a random direction v, for every variable."""
    values = _chain_inputs(rng, np.float64)
    head = values.pop("head")
    arrays = _variables(values, VARIABLES)
    with autograd.record():
        z = _chain(arrays)
    z.backward(nd.array(head, dtype=head.dtype))

    def loss(vals):
        return float((head * _chain(vals).asnumpy()).sum())

    eps = 1e-6
    for name in VARIABLES:
        direction = rng.standard_normal(values[name].shape)
        plus = dict(values, **{name: values[name] + eps * direction})
        minus = dict(values, **{name: values[name] - eps * direction})
        numeric = (loss(plus) - loss(minus)) / (2 * eps)
        analytic = float((arrays[name].grad.asnumpy() * direction).sum())
        assert analytic == pytest.approx(numeric, rel=1e-5, abs=1e-7), name


@BY_IMPL
def test_record_in_predict_mode_still_backpropagates(impl, rng):
    """record(train_mode=False): forward_inference primitives and inference weight
    layouts; the backward turns the weight back to the default layout."""
    values = _chain_inputs(rng, np.float32)
    arrays = _variables({k: v for k, v in values.items() if k != "head"}, VARIABLES)
    with mxdeconv.use_impl(impl):
        with autograd.record(train_mode=False):
            z = _chain(arrays)
        z.backward(nd.array(values["head"]))
    _, grads = _chain_reference(values)
    for name in VARIABLES:
        assert_allclose(arrays[name].grad.asnumpy(), grads[name], rtol=1e-4, atol=1e-4)


def test_training_mode_in_record_keeps_weights_in_the_default_layout(rng):
    x = nd.array(rng.uniform(-1, 1, (2, 32, 6, 6)).astype(np.float32))
    w = nd.array(rng.uniform(-1, 1, (32, 32, 3, 3)).astype(np.float32))
    w.attach_grad()
    params = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=32)
    with autograd.record():
        nd.Deconvolution(x, w, **params)
    assert w.layout == "default"


def test_variable_used_twice_sums_its_gradients(rng):
    x = nd.array(rng.uniform(-1, 1, (1, 2, 3, 3)).astype(np.float32))
    wa = rng.uniform(-1, 1, (2, 2, 2, 2)).astype(np.float32)
    wb = rng.uniform(-1, 1, (2, 2, 2, 2)).astype(np.float32)
    x.attach_grad()
    params = dict(kernel=(2, 2), num_filter=2)
    with autograd.record():
        z = nd.Deconvolution(x, wa, **params) + nd.Deconvolution(x, wb, **params)
    z.backward()
    ref = dict(kernel=(2, 2), stride=(1, 1), dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0),
               num_group=1, with_bias=False)
    ones = np.ones((1, 2, 4, 4))
    expected = (reference_backward(ones, x.asnumpy(), wa, **ref)[0]
                + reference_backward(ones, x.asnumpy(), wb, **ref)[0])
    assert_allclose(x.grad.asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_same_variable_on_both_sides_of_multiply():
    x = nd.array([1.0, -2.0, 3.0])
    x.attach_grad()
    with autograd.record():
        y = x * x
    y.backward()
    assert_allclose(x.grad.asnumpy(), [2.0, -4.0, 6.0])


def test_elementwise_broadcast_and_scalar_gradients():
    a = nd.ones((2, 3))
    b = nd.array([1.0, 2.0, 3.0])
    a.attach_grad()
    b.attach_grad()
    with autograd.record():
        y = (2 * a + 1) * b + 0.5
    y.backward()
    assert_allclose(b.grad.asnumpy(), [6.0, 6.0, 6.0])      # sum over the broadcast rows
    assert_allclose(a.grad.asnumpy(), np.tile([2.0, 4.0, 6.0], (2, 1)))


def test_relu_gradient_is_zero_at_zero():
    x = nd.array([-1.0, 0.0, 2.0])
    x.attach_grad()
    with autograd.record():
        y = nd.relu(x)
    y.backward()
    assert_allclose(x.grad.asnumpy(), [0.0, 0.0, 1.0])  # MXNet's relu: 0 at 0


def test_multiple_heads(rng):
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    with autograd.record():
        y1 = x * 3
        y2 = x * x
    autograd.backward([y1, y2], [None, nd.array([1.0, 10.0])])
    assert_allclose(x.grad.asnumpy(), [3 + 2.0, 3 + 40.0])


# -- grad_req ------------------------------------------------------------------------
def _deconv_step(x, w, b, head):
    with autograd.record():
        y = nd.Deconvolution(x, w, b, **L1)
    y.backward(head)


@BY_IMPL
def test_grad_req_write_overwrites_add_accumulates_null_leaves_alone(impl, rng):
    v = _chain_inputs(rng, np.float32)
    head = nd.array(rng.uniform(-1, 1, (2, 4, 6, 6)).astype(np.float32))
    x, w, b = nd.array(v["x"]), nd.array(v["w1"]), nd.array(v["b1"])
    x.attach_grad("write")
    w.attach_grad("add")
    b.attach_grad("null")
    np.asarray(x.grad)[...] = 123.0  # write must overwrite this
    with mxdeconv.use_impl(impl):
        _deconv_step(x, w, b, head)
        _deconv_step(x, w, b, head)
    dx, dw, _ = reference_backward(head.asnumpy(), v["x"], v["w1"], **L1_REF)
    assert_allclose(x.grad.asnumpy(), dx, rtol=1e-4, atol=1e-4)
    assert_allclose(w.grad.asnumpy(), 2 * dw, rtol=1e-4, atol=1e-4)
    assert b.grad_req == "null"
    assert not np.asarray(b.grad).any()  # MXNet: a null variable keeps its zero gradient


@BY_IMPL
def test_grad_req_add_through_a_chain(impl, rng):
    values = _chain_inputs(rng, np.float32)
    arrays = _variables({k: v for k, v in values.items() if k != "head"}, VARIABLES, "add")
    with mxdeconv.use_impl(impl):
        for _ in range(3):
            with autograd.record():
                z = _chain(arrays)
            z.backward(nd.array(values["head"]))
    _, grads = _chain_reference(values)
    for name in VARIABLES:
        assert_allclose(arrays[name].grad.asnumpy(), 3 * grads[name], rtol=1e-4, atol=1e-4)


def test_null_variables_are_not_recorded():
    x = nd.ones((2,))
    x.attach_grad("null")
    with autograd.record():
        y = x * 2
    with pytest.raises(MXNetError, match="not in a computational graph"):
        y.backward()


def test_mark_variables_uses_the_given_gradient_arrays():
    x, gx = nd.array([1.0, 2.0]), nd.array([10.0, 10.0])
    autograd.mark_variables([x], [gx], "add")
    with autograd.record():
        y = x * 3
    y.backward()
    assert x.grad is gx
    assert_allclose(gx.asnumpy(), [13.0, 13.0])


def test_mark_variables_checks_its_arguments():
    with pytest.raises(MXNetError, match="grad_req"):
        autograd.mark_variables(nd.ones((2,)), nd.zeros((2,)), "sometimes")
    with pytest.raises(MXNetError, match="shape"):
        autograd.mark_variables(nd.ones((2,)), nd.zeros((3,)))
    with pytest.raises(MXNetError, match="do not match"):
        autograd.mark_variables([nd.ones((2,))], [], "write")


# -- graphs: freeing, errors, out= ---------------------------------------------------
def test_backward_twice_needs_retain_graph():
    x = nd.array([1.0, 2.0])
    x.attach_grad("add")
    with autograd.record():
        y = x * x
    y.backward(retain_graph=True)
    y.backward()
    assert_allclose(x.grad.asnumpy(), [4.0, 8.0])
    with pytest.raises(MXNetError, match="retain_graph=True"):
        y.backward()


def test_a_freed_graph_becomes_constant():
    """As in MXNet: after y.backward(), y feeds a new graph as a constant."""
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    with autograd.record():
        y = x * 2
    y.backward()
    with autograd.record():
        z = y * 3 + x
    z.backward()
    assert_allclose(x.grad.asnumpy(), [1.0, 1.0])


def test_backward_without_a_graph_raises():
    with pytest.raises(MXNetError, match="not in a computational graph"):
        nd.ones((2,)).backward()
    x = nd.ones((2,))
    x.attach_grad()
    y = x * 2  # not recorded
    with pytest.raises(MXNetError, match="not in a computational graph"):
        y.backward()


def test_pause_stops_recording():
    x = nd.ones((2,))
    x.attach_grad()
    with autograd.record():
        with autograd.pause():
            y = x * 2
    assert y._node is None


def test_attach_grad_inside_record_starts_a_new_leaf():
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    with autograd.record():
        y = x * 2
        y.attach_grad()
        z = y * y
    z.backward()
    assert_allclose(y.grad.asnumpy(), [4.0, 8.0])
    assert_allclose(x.grad.asnumpy(), [0.0, 0.0])


def test_detach_cuts_the_graph():
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    with autograd.record():
        y = x * 2
        z = y.detach() * x
    z.backward()
    assert_allclose(x.grad.asnumpy(), [2.0, 4.0])


def test_head_grad_shape_is_checked():
    x = nd.ones((2,))
    x.attach_grad()
    with autograd.record():
        y = x * 2
    with pytest.raises(MXNetError, match="head_grad shape"):
        y.backward(nd.ones((3,)))


def test_out_argument_is_recorded(rng):
    v = _chain_inputs(rng, np.float32)
    x, w = nd.array(v["x"]), nd.array(v["w2"])
    x.attach_grad()
    out = nd.zeros((2, 3, 4, 4))
    with autograd.record():
        y = nd.Deconvolution(x, w, out=out, **L2)
    assert y is out
    y.backward()
    expected = reference_backward(np.ones((2, 3, 4, 4)), v["x"], v["w2"], with_bias=False,
                                  **L2_REF)[0]
    assert_allclose(x.grad.asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_numpy_inputs_are_constants(rng):
    v = _chain_inputs(rng, np.float32)
    w = nd.array(v["w2"])
    w.attach_grad()
    with autograd.record():
        y = nd.Deconvolution(v["x"], w, **L2)  # data as NumPy: copied, no gradient
    y.backward()
    expected = reference_backward(np.ones((2, 3, 4, 4)), v["x"], v["w2"], with_bias=False,
                                  **L2_REF)[1]
    assert_allclose(w.grad.asnumpy(), expected, rtol=1e-4, atol=1e-4)


# -- elementwise operators themselves ----------------------------------------------------
def test_elementwise_values_and_errors():
    a = nd.array([[1.0, -2.0]])
    assert_allclose(nd.add(a, a).asnumpy(), [[2.0, -4.0]])
    assert_allclose((1 + a).asnumpy(), [[2.0, -1.0]])
    assert_allclose((a * a).asnumpy(), [[1.0, 4.0]])
    assert_allclose(nd.relu(a).asnumpy(), [[1.0, 0.0]])
    assert nd.add(a, 1).dtype == np.float32
    with pytest.raises(MXNetError, match="different dtypes"):
        nd.add(a, nd.ones((1, 2), dtype="float64"))
    with pytest.raises(MXNetError, match="broadcast"):
        nd.multiply(a, nd.ones((3,)))
    assert nd.add(1, 2) == 3  # two numbers: a Python number, as MXNet's nd.add
    with pytest.raises(TypeError):
        nd.add("a", a)


def test_elementwise_reads_blocked_inputs(rng):
    data = rng.uniform(-1, 1, (1, 32, 4, 4)).astype(np.float32)
    weight = rng.uniform(-1, 1, (32, 32, 3, 3)).astype(np.float32)
    y = nd.Deconvolution(data, weight, kernel=(3, 3), num_filter=32)
    expected = np.maximum(reference_forward(data, weight, None, kernel=(3, 3), stride=(1, 1),
                                            dilate=(1, 1), pad_l=(0, 0), pad_r=(0, 0),
                                            num_group=1), 0)
    assert_allclose(nd.relu(y).asnumpy(), expected, rtol=1e-4, atol=1e-4)


# -- NDArray basics: gradients against central finite differences in float64 ----------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

FD = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _finite_difference_check(function, values, eps=1e-6):
    """autograd's gradients of sum(function(*xs) * head) against central differences."""
    rng = np.random.default_rng(len(values))
    values = [np.array(v, dtype=np.float64) for v in values]
    arrays = [nd.array(v, dtype="float64") for v in values]
    for arr in arrays:
        arr.attach_grad()
    with autograd.record():
        out = function(*arrays)
    head = rng.uniform(-1, 1, out.shape)
    out.backward(nd.array(head, dtype="float64"))

    def loss(vals):
        with autograd.pause():
            result = function(*[nd.array(v, dtype="float64") for v in vals])
        return float((result.asnumpy() * head).sum())

    for index, arr in enumerate(arrays):
        numeric = np.zeros(values[index].shape)
        for position in np.ndindex(values[index].shape):
            plus = [v.copy() for v in values]
            minus = [v.copy() for v in values]
            plus[index][position] += eps
            minus[index][position] -= eps
            numeric[position] = (loss(plus) - loss(minus)) / (2 * eps)
        assert_allclose(arr.grad.asnumpy(), numeric, rtol=1e-6, atol=1e-6,
                        err_msg=f"input {index}")


def _values(draw, shape, low=-2.0, high=2.0, away_from_zero=False):
    values = draw(hnp.arrays(np.float64, shape, elements=st.floats(low, high)))
    if away_from_zero:
        values = np.where(np.abs(values) < 0.5, np.copysign(0.5, values) + values, values)
    return values


BINARY = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "power": lambda a, b: abs(a) ** b,
    "maximum": lambda a, b: np.maximum(a, b),
}


@FD
@given(data=st.data(), op=st.sampled_from(sorted(BINARY)))
def test_broadcast_binary_gradients_match_finite_differences(data, op):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    a = _values(data.draw, shapes.input_shapes[0], away_from_zero=True)
    b = _values(data.draw, shapes.input_shapes[1], away_from_zero=op in ("divide", "power"))
    if op == "maximum":  # no ties: the gradient is defined
        b = b + 0.25 * np.sign(b - a.mean()) + 1e-3
    _finite_difference_check(BINARY[op], [a, b])


UNARY = {
    "negative": lambda a: -a,
    "abs": lambda a: abs(a),
    "times constant": lambda a: a * 3 - 1.5,
    "constant minus": lambda a: 2 - a,
    "constant over": lambda a: 2 / a,
    "power 3": lambda a: a ** 3,
    "power 0.5": lambda a: abs(a) ** 0.5,
    "constant power": lambda a: 1.5 ** a,
    "sqrt": lambda a: abs(a).sqrt(),
    "exp": lambda a: a.exp(),
    "log": lambda a: abs(a).log(),
    "square": lambda a: a.square(),
    "copy": lambda a: a.copy() * a,
    "astype": lambda a: a.astype("float64") * 2,
}


@FD
@given(data=st.data(), op=st.sampled_from(sorted(UNARY)))
def test_unary_gradients_match_finite_differences(data, op):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=3))
    _finite_difference_check(UNARY[op], [_values(data.draw, shape, away_from_zero=True)])


@FD
@given(data=st.data(), op=st.sampled_from(["sum", "mean", "max", "min", "prod", "norm",
                                           "norm1"]))
def test_reduction_gradients_match_finite_differences(data, op):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3))
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(0, len(shape) - 1), min_size=1,
                                                   max_size=len(shape), unique=True)))
    keepdims = data.draw(st.booleans())
    exclude = data.draw(st.booleans()) and op not in ("norm", "norm1")
    values = _values(data.draw, shape, away_from_zero=True)
    # Distinct values: the extreme of each reduced group is unique.
    values = values + np.arange(values.size).reshape(shape) * 1e-2
    def function(a):
        if op in ("norm", "norm1"):
            return a.norm(ord=1 if op == "norm1" else 2, axis=axes, keepdims=keepdims)
        return getattr(a, op)(axis=axes, keepdims=keepdims, exclude=exclude)
    _finite_difference_check(function, [values])


def _basic_key(draw, shape):
    key = []
    for extent in shape:
        kind = draw(st.sampled_from(["int", "slice", "all"]))
        if kind == "int":
            key.append(draw(st.integers(-extent, extent - 1)))
        elif kind == "slice":
            key.append(slice(draw(st.integers(-extent, extent)),
                             draw(st.integers(-extent, extent)) if draw(st.booleans()) else None,
                             draw(st.sampled_from([None, 1, 2, -1]))))
        else:
            key.append(slice(None))
    if draw(st.booleans()):
        key.insert(draw(st.integers(0, len(key))), None)
    return tuple(key)


@FD
@given(data=st.data(), kind=st.sampled_from(["basic", "advanced", "reshape", "transpose",
                                             "expand_dims", "flatten", "concat", "stack"]))
def test_shape_and_indexing_gradients_match_finite_differences(data, kind):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    values = _values(data.draw, shape)
    if kind == "basic":
        key = _basic_key(data.draw, shape)
        function = lambda a: a[key] * a[key]  # noqa: E731
    elif kind == "advanced":
        rows = data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=4))
        function = lambda a: a[rows] * 2 + a[rows] * a[rows]  # noqa: E731
    elif kind == "reshape":
        codes = data.draw(st.sampled_from([(-1,), (0, -1), (-2, 1), (-3, -2), (1, -1), (-1, 1)]))
        if codes in ((-3, -2),) and len(shape) < 2:
            codes = (-1,)
        function = lambda a: a.reshape(codes) ** 2  # noqa: E731
    elif kind == "transpose":
        perm = tuple(data.draw(st.permutations(range(len(shape)))))
        function = lambda a: a.transpose(perm) * a.transpose(perm)  # noqa: E731
    elif kind == "expand_dims":
        axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
        function = lambda a: a.expand_dims(axis) ** 2  # noqa: E731
    elif kind == "flatten":
        function = lambda a: a.flatten() ** 2  # noqa: E731
    else:
        other = _values(data.draw, shape)
        axis = data.draw(st.integers(0, len(shape) - 1 if kind == "concat" else len(shape)))
        join = nd.concat if kind == "concat" else nd.stack
        key = "dim" if kind == "concat" else "axis"
        function = lambda a, b: join(a, b * b, **{key: axis}) ** 2  # noqa: E731
        _finite_difference_check(function, [values, other])
        return
    _finite_difference_check(function, [values])


def test_an_operator_without_gradient_raises_inside_record():
    x = nd.array([0.5, 1.5])
    x.attach_grad()
    with autograd.record():
        for call, name in ((lambda: np.arcsinh(x), "arcsinh"), (lambda: np.cumsum(x), "np.cumsum"),
                           (lambda: np.add.reduce(x), "np.add.reduce"),
                           (lambda: nd.random.uniform(x, x + 1), "uniform")):
            with pytest.raises(MXNetError, match=f"{name}: no gradient is defined"):
                call()
        # Without a gradient to lose, they run (as constants).
        assert np.arcsinh(x.detach()).shape == (2,)
        mask = x > 1  # comparisons: zero gradients, as in MXNet
        y = (mask * x).sum()
    y.backward()
    assert_allclose(x.grad.asnumpy(), [0.0, 1.0])
    assert np.arcsinh(x).shape == (2,)  # outside record() anything goes


def test_writes_into_recorded_inputs_are_detected():
    x = nd.array([1.0, 2.0])
    c = nd.array([3.0, 4.0])
    x.attach_grad()
    with autograd.record():
        y = x * c
    c[:] = 5  # the recorded multiply would read the new values
    with pytest.raises(MXNetError, match="input 1 .* was written after the operator was "
                                         "recorded"):
        y.backward()
    with autograd.record():
        y = x * c
    c += 1
    with pytest.raises(MXNetError, match="was written after"):
        y.backward()


def test_views_are_recorded_and_backpropagate():
    x = nd.array([[1.0, 2.0], [3.0, 4.0]])
    x.attach_grad()
    with autograd.record():
        row = x[1]          # a view of x, recorded as a slice
        flat = x.reshape((-1,))  # a view, recorded as a reshape
        y = row * 2 + flat[:2] * 3
    y.backward()
    assert_allclose(x.grad.asnumpy(), [[3.0, 3.0], [2.0, 2.0]])
    assert np.shares_memory(np.asarray(row), np.asarray(x))


def test_copyto_from_a_variable_is_recorded():
    x = nd.array([1.0, 2.0])
    x.attach_grad()
    target = nd.zeros((2,))
    with autograd.record():
        x.copyto(target)
        y = target * target
    y.backward()
    assert_allclose(x.grad.asnumpy(), [2.0, 4.0])


# -- refused writes and gradients (found by an adversarial pass) ----------------------------
def test_out_over_an_input_of_a_recorded_call_is_refused_and_writes_nothing():
    rng = np.random.default_rng(0)
    d0 = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    d = nd.array(d0)
    w = nd.array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    w.attach_grad()
    with autograd.record():
        with pytest.raises(MXNetError, match="out: Assigning to NDArrays"):
            nd.Deconvolution(d, w, kernel=(1, 1), num_filter=4, out=d)
    np.testing.assert_array_equal(d.asnumpy(), d0)


def test_an_input_written_after_recording_fails_backward_before_any_gradient():
    rng = np.random.default_rng(1)
    d0 = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    d, q = nd.array(d0), nd.array([7.0])
    w = nd.array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    w.attach_grad()
    q.attach_grad()
    with autograd.record():
        y = nd.Deconvolution(d, w, kernel=(1, 1), num_filter=4)
        z = q * 2
    nd.Deconvolution(nd.array(d0 + 1), w, kernel=(1, 1), num_filter=4, out=d)
    before = (w.grad.asnumpy(), q.grad.asnumpy())
    with pytest.raises(MXNetError, match="input 0 .* was written after the operator was "
                                         "recorded"):
        autograd.backward([z, y])
    np.testing.assert_array_equal(w.grad.asnumpy(), before[0])
    np.testing.assert_array_equal(q.grad.asnumpy(), before[1])


def test_a_head_gradient_of_another_dtype_fails_before_any_gradient():
    q = nd.array([7.0])
    q.attach_grad()
    w = nd.ones((4, 4, 1, 1))
    w.attach_grad()
    with autograd.record():
        z = q * 2
        y = nd.Deconvolution(nd.ones((1, 4, 2, 2)), w, kernel=(1, 1), num_filter=4)
    with pytest.raises(MXNetError, match="head_grad dtype float64 does not match"):
        autograd.backward([z, y], [None, nd.ones(y.shape, dtype="float64")])
    assert q.grad.asnumpy().tolist() == [0.0]


def test_bfloat16_broadcast_gradients_are_summed_in_float32():
    pytest.importorskip("ml_dtypes")
    x = nd.ones((16, 8, 32, 32), dtype="bfloat16")
    b = nd.zeros((1, 8, 1, 1), dtype="bfloat16")
    c = nd.ones((1,), dtype="bfloat16")
    b.attach_grad()
    c.attach_grad()
    with autograd.record():
        y = x * c + b
    y.backward()
    assert b.grad.asnumpy().astype(np.float32).ravel().tolist() == [16384.0] * 8
    assert c.grad.asnumpy().astype(np.float32).tolist() == [131072.0]


def test_mark_variables_refuses_a_read_only_gradient():
    read_only = nd.from_dlpack(nd.to_dlpack_for_read(nd.zeros((2,))))
    with pytest.raises(MXNetError, match="gradients must be writeable"):
        autograd.mark_variables(nd.ones((2,)), read_only)
    with pytest.raises(TypeError, match="attach_grad: grad_req must be a string"):
        nd.ones((2,)).attach_grad(5)
