"""Activations: Gluon's ``Conv*DTranspose(activation=...)`` with every MXNet act_type,
fused into oneDNN's primitive and checked at plan time; ``nd.Activation``.

* every act_type x 1-D/2-D/3-D x bias/no bias x inference/training x both paths,
  against an independent float64 reference (``reference.py`` and the formulas
  below), forward and gradients;
* realistic layers: DCGAN's last layer (64 -> 3, k4 s2 p1, tanh, batch 4) and
  512 -> 256 with relu (the geometry where oneDNN 3.2's ``brgconv_strided``
  is wrong with a post-op), oneDNN against PyTorch in float64;
* float64 gradients against finite differences; float16 and bfloat16;
* real MXNet 1.9.1 numbers (``scripts/fixtures/make_mxnet_activation_fixtures.py``);
* the kernel check: a wrong fused result is caught even where the activation
  saturates, and replaced with one KernelDefectWarning.

Test ids name the path (``numpy``/``onednn``): the kernel-family runs
(``test_kernel_families.py``) repeat this file with ``-k "not numpy"``.
"""
import json
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mxdeconv
from mxdeconv import KernelDefectWarning, MXNetError, _ops, autograd, gluon, nd
from mxdeconv.semantics import activations as activation
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans
from mxdeconv.ops.deconvolution import DeconvolutionActivation
from mxdeconv._core.dtypes import bfloat16
from mxdeconv.semantics.attributes import infer_geometry, parse_params
from helpers import DATA
from reference import reference_backward, reference_forward

ACTS = activation.ACT_TYPES
IMPLS = ("numpy", "onednn")
BFLOAT16 = bfloat16()  # None without ml_dtypes
MXNET = np.load(DATA / "mxnet_activation.npz")


# -- an independent float64 reference ------------------------------------------------
def ref_act(z, act):
    z = np.asarray(z, dtype=np.float64)
    return {"relu": lambda: np.maximum(z, 0), "sigmoid": lambda: 1 / (1 + np.exp(-z)),
            "tanh": lambda: np.tanh(z), "softrelu": lambda: np.logaddexp(0, z),
            "softsign": lambda: z / (1 + np.abs(z))}[act]()


def ref_slope(z, act):
    """d act / d z at the pre-activation z."""
    z = np.asarray(z, dtype=np.float64)
    s = 1 / (1 + np.exp(-z))
    return {"relu": lambda: (z > 0).astype(np.float64), "sigmoid": lambda: s * (1 - s),
            "tanh": lambda: 1 - np.tanh(z) ** 2, "softrelu": lambda: s,
            "softsign": lambda: 1 / (1 + np.abs(z)) ** 2}[act]()


#: (class, constructor arguments, input shape) per number of spatial dims.
LAYERS = {
    1: (gluon.Conv1DTranspose, dict(channels=6, kernel_size=3, strides=2, padding=1,
                                    in_channels=4), (2, 4, 7)),
    2: (gluon.Conv2DTranspose, dict(channels=6, kernel_size=(3, 2), strides=2, padding=(1, 0),
                                    output_padding=(1, 0), groups=2, in_channels=4),
        (2, 4, 5, 4)),
    3: (gluon.Conv3DTranspose, dict(channels=4, kernel_size=2, strides=(2, 1, 2),
                                    in_channels=3), (1, 3, 3, 2, 3)),
}


def _make(ndim, act, bias, seed=0, dtype=np.float32):
    cls, kwargs, shape = LAYERS[ndim]
    layer = cls(activation=act, use_bias=bias, **kwargs)
    layer.initialize()
    rng = np.random.default_rng(seed)
    layer.weight.set_data(rng.uniform(-0.6, 0.6, layer.weight.shape))
    if bias:
        layer.bias.set_data(rng.uniform(-1, 1, layer.bias.shape))
    if dtype != np.float32:
        layer.cast(dtype)
    x = rng.uniform(-1.5, 1.5, shape).astype(dtype)
    return layer, x


def _reference(layer, x, head):
    """(output, data_grad, weight_grad, bias_grad) in float64."""
    kw = layer._kwargs
    geom = infer_geometry(parse_params(kw), x.shape)
    w = layer.weight.data().asnumpy().astype(np.float64)
    b = None if layer.bias is None else layer.bias.data().asnumpy().astype(np.float64)
    geo = dict(kernel=kw["kernel"], stride=kw["stride"], dilate=kw["dilate"],
               pad_l=geom.pad_l, pad_r=geom.pad_r, num_group=kw["num_group"])
    z = reference_forward(x.astype(np.float64), w, b, **geo)
    og = head * ref_slope(z, layer._activation)
    dx, dw, db = reference_backward(og, x.astype(np.float64), w, with_bias=b is not None,
                                    **geo)
    return ref_act(z, layer._activation), dx, dw, db


# -- every act_type, dims, bias, mode and path ------------------------------------------
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("ndim", [1, 2, 3], ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("act", ACTS)
def test_layer_matches_the_reference(act, ndim, bias, training, impl):
    layer, x_values = _make(ndim, act, bias, seed=ndim)
    x = nd.array(x_values, dtype=x_values.dtype)
    x.attach_grad()
    with mxdeconv.use_impl(impl):
        if training:
            with autograd.record():
                y = layer(x)
            head = np.random.default_rng(7).uniform(-1, 1, y.shape)
            y.backward(nd.array(head.astype(np.float32), dtype=np.float32))
        else:
            y = layer(x)
            head = np.zeros(y.shape)
    assert mxdeconv.last_impl() == impl
    out, dx, dw, db = _reference(layer, x_values, head)
    assert_allclose(y.asnumpy(), out, rtol=1e-5, atol=1e-5)
    if training:
        assert_allclose(x.grad.asnumpy(), dx, rtol=1e-4, atol=1e-5)
        assert_allclose(layer.weight.grad().asnumpy(), dw, rtol=1e-4, atol=1e-5)
        if bias:
            assert_allclose(layer.bias.grad().asnumpy(), db, rtol=1e-4, atol=1e-5)


def test_the_activation_is_one_recorded_operator_fused_on_onednn():
    layer, x_values = _make(2, "tanh", True)
    x = nd.array(x_values, dtype=x_values.dtype)
    x.attach_grad()
    with autograd.record():
        y = layer(x)
    assert y._node.op == "DeconvolutionActivation" and mxdeconv.last_impl() == "onednn"
    geom = infer_geometry(parse_params(layer._kwargs), x.shape)
    plan = plans.forward_plan(geom, "float32", True, False, "tanh")
    assert plan.act_type == "tanh"
    text = mxdeconv.explain(x, layer.weight.data(), layer.bias.data(), act_type="tanh",
                            train=True, **layer._kwargs)
    assert "tanh" in text and ("tanh fused" in text or "tanh by a separate" in text)
    # softsign: Deconvolution then Activation (its gradient needs the pre-activation)
    soft, _ = _make(2, "softsign", True)
    with autograd.record():
        z = soft(x)
    assert z._node.op == "Activation" and z._node.parents[0].op == "Deconvolution"
    assert "softsign: applied after the result by nd.Activation" in mxdeconv.explain(
        x, soft.weight.data(), soft.bias.data(), act_type="softsign", **soft._kwargs)


def test_planner_and_prepared_call_keys_hold_the_activation():
    layer_relu, x_values = _make(2, "relu", True)
    x = nd.array(x_values, dtype=x_values.dtype)
    kwargs = layer_relu._kwargs
    w, b = layer_relu.weight.data(), layer_relu.bias.data()
    plain = nd.Deconvolution(x, w, b, **kwargs).asnumpy()
    for _ in range(2):  # the second round runs through the prepared calls
        for act in ("relu", "sigmoid", None):
            got = (nd.Deconvolution(x, w, b, **kwargs) if act is None else
                   DeconvolutionActivation(x, w, b, act_type=act, **kwargs)).asnumpy()
            want = plain if act is None else ref_act(plain, act)
            assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    geom = infer_geometry(parse_params(kwargs), x.shape)
    assert (plans.forward_plan(geom, "float32", False, False, "relu")
            is not plans.forward_plan(geom, "float32", False, False, "sigmoid"))
    keys = [plans._store_key(plans.ForwardKey("forward", geom, "float32", False, False, act, 2,
                                              True), geom)
            for act in (None, "relu", "sigmoid")]
    assert len(set(keys)) == 3 and "relu" in keys[1] and "sigmoid" in keys[2]


# -- realistic layers ---------------------------------------------------------------------
def _torch_reference(x, w, b, act, head, stride, padding):
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tw = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    conv = torch.nn.functional.conv_transpose2d
    z = conv(tx, tw, tb, stride=stride, padding=padding)
    y = {"tanh": torch.tanh, "relu": torch.relu}[act](z)
    y.backward(torch.tensor(head, dtype=torch.float64))
    return (y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy())


@pytest.mark.parametrize("name,shape,channels,act", [
    ("dcgan_last_tanh", (4, 64, 32, 32), 3, "tanh"),
    ("dcgan_512_256_relu", (4, 512, 4, 4), 256, "relu"),
])
def test_realistic_layers_on_onednn_match_pytorch(name, shape, channels, act):
    rng = np.random.default_rng(11)
    layer = gluon.Conv2DTranspose(channels, 4, strides=2, padding=1, activation=act,
                                  in_channels=shape[1])
    layer.initialize(gluon.Normal(0.05))
    layer.bias.set_data(rng.uniform(-1, 1, channels))
    x_values = rng.standard_normal(shape).astype(np.float32)
    x = nd.array(x_values, dtype=x_values.dtype)
    x.attach_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelDefectWarning)  # oneDNN 3.2's brgconv_strided
        with autograd.predict_mode():
            inference = layer(x).asnumpy()
        assert mxdeconv.last_impl() == "onednn"
        with autograd.record():
            y = layer(x)
        assert mxdeconv.last_impl() == "onednn"
        head = rng.uniform(-1, 1, y.shape)
        y.backward(nd.array(head.astype(np.float32), dtype=np.float32))
    out, dx, dw, db = _torch_reference(x_values, layer.weight.data().asnumpy(),
                                       layer.bias.data().asnumpy(), act, head, 2, 1)
    scale = np.abs(out).max()
    assert_allclose(inference, out, rtol=1e-4, atol=1e-4 * scale)
    assert_allclose(y.asnumpy(), out, rtol=1e-4, atol=1e-4 * scale)
    for got, want in ((x.grad, dx), (layer.weight.grad(), dw), (layer.bias.grad(), db)):
        assert_allclose(got.asnumpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# -- float64 finite differences, 16-bit dtypes -------------------------------------------
@pytest.mark.parametrize("act", ACTS)
def test_float64_gradients_match_finite_differences_numpy(act):
    layer, x_values = _make(2, act, True, seed=5, dtype=np.float64)
    x = nd.array(x_values, dtype=x_values.dtype)
    x.attach_grad()
    with autograd.record():
        y = layer(x)
    assert mxdeconv.last_impl() == "numpy"
    head = np.random.default_rng(6).uniform(-1, 1, y.shape)
    y.backward(nd.array(head, dtype=head.dtype))
    params = {"data": x_values, "weight": layer.weight.data().asnumpy(),
              "bias": layer.bias.data().asnumpy()}
    grads = {"data": x.grad.asnumpy(), "weight": layer.weight.grad().asnumpy(),
             "bias": layer.bias.grad().asnumpy()}

    def loss(values):
        with autograd.pause():
            out = DeconvolutionActivation(values["data"], values["weight"], values["bias"],
                                          act_type=act, **layer._kwargs)
        return float((out.asnumpy() * head).sum())

    rng = np.random.default_rng(8)
    eps = 1e-6
    for name, values in params.items():
        for flat in rng.choice(values.size, size=min(8, values.size), replace=False):
            index = np.unravel_index(flat, values.shape)
            shifted = {k: v.copy() for k, v in params.items()}
            shifted[name][index] += eps
            up = loss(shifted)
            shifted[name][index] -= 2 * eps
            down = loss(shifted)
            assert (up - down) / (2 * eps) == pytest.approx(grads[name][index], rel=1e-5,
                                                            abs=1e-7), (name, index)


@pytest.mark.parametrize("act", ACTS)
def test_float16_follows_float32_numpy(act):
    layer, x_values = _make(2, act, True)
    y32 = layer(nd.array(x_values, dtype=x_values.dtype)).asnumpy()
    layer.cast("float16")
    y16 = layer(nd.array(x_values.astype(np.float16), dtype=np.float16))
    assert y16.dtype == np.float16 and mxdeconv.last_impl() == "numpy"
    assert_allclose(y16.asnumpy().astype(np.float32), y32, rtol=4e-3, atol=4e-3)


@pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed")
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_bfloat16_runs_saturating_activations_unfused(act):
    layer, x_values = _make(2, act, True)
    y32 = layer(nd.array(x_values, dtype=x_values.dtype)).asnumpy()
    layer.cast(BFLOAT16)
    y16 = layer(nd.array(x_values.astype(BFLOAT16), dtype=BFLOAT16)).asnumpy().astype(np.float32)
    assert_allclose(y16, y32, rtol=2e-2, atol=2e-2)
    if act != "relu" and mxdeconv.runtime_info()["cpu_isa"] == "avx512_core_bf16":
        geom = infer_geometry(parse_params(layer._kwargs), x_values.shape)
        plan = plans.forward_plan(geom, "bfloat16", False, False, act)
        assert not plan.act_fused  # bf16 rounding would hide a wrong fused tanh


# -- real MXNet 1.9.1 ---------------------------------------------------------------------
LAYER_CASES = sorted({int(k.split("/")[1]) for k in MXNET.files if k.startswith("layer/")})


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("index", LAYER_CASES)
def test_gluon_layers_match_mxnet(index, impl):
    assert str(MXNET["mxnet_version"]) == "1.9.1"
    get = lambda name: MXNET[f"layer/{index}/{name}"]  # noqa: E731
    cls_name, kwargs = json.loads(str(get("spec")))
    layer = getattr(gluon, cls_name)(**kwargs)
    layer.initialize()
    layer.weight.set_data(get("weight"))
    if layer.bias is not None:
        layer.bias.set_data(get("bias"))
    x = nd.array(get("input"), dtype=get("input").dtype)
    x.attach_grad()
    with mxdeconv.use_impl(impl):
        with autograd.record():
            y = layer(x)
        y.backward(nd.array(get("head_grad"), dtype=get("head_grad").dtype))
    tol = dict(rtol=1e-5, atol=1e-5)
    assert_allclose(y.asnumpy(), get("output"), **tol)
    assert_allclose(x.grad.asnumpy(), get("data_grad"), **tol)
    assert_allclose(layer.weight.grad().asnumpy(), get("weight_grad"), **tol)
    if layer.bias is not None:
        assert_allclose(layer.bias.grad().asnumpy(), get("bias_grad"), **tol)


@pytest.mark.parametrize("act", ACTS)
def test_nd_activation_matches_mxnet_float64_numpy(act):
    get = lambda name: MXNET[f"act/{act}/{name}"]  # noqa: E731
    x = nd.array(get("x"), dtype=get("x").dtype)
    x.attach_grad()
    with autograd.record():
        y = nd.Activation(x, act_type=act)
    y.backward(nd.array(get("head_grad"), dtype=get("head_grad").dtype))
    assert_allclose(y.asnumpy(), get("y"), rtol=1e-14, atol=1e-300)
    assert_allclose(x.grad.asnumpy(), get("x_grad"), rtol=1e-12, atol=1e-300)  # 1 - y*y


# -- nd.Activation ------------------------------------------------------------------------
def test_nd_activation_arguments_and_out():
    x = nd.array([[-2.0, 0.0, 3.0]])
    out = nd.zeros((1, 3))
    assert nd.Activation(x, act_type="relu", out=out) is out
    assert out.asnumpy().tolist() == [[0.0, 0.0, 3.0]]
    nd.Activation(x, act_type="tanh", out=x, name="act0")  # in place, not recording
    assert_allclose(x.asnumpy(), np.tanh([[-2.0, 0.0, 3.0]]), rtol=1e-6)
    with pytest.raises(MXNetError, match=r"act_type: Invalid Input: 'gelu', valid values "
                                         r"are: \{'relu', 'sigmoid', 'softrelu', 'softsign', "
                                         r"'tanh'\}"):
        nd.Activation(x, act_type="gelu")
    with pytest.raises(TypeError, match="act_type must be one of"):
        nd.Activation(x, act_type=None)
    with pytest.raises(MXNetError, match="shape"):
        nd.Activation(x, act_type="relu", out=nd.zeros((3,)))
    v = nd.ones((2,))
    v.attach_grad()
    with autograd.record(), pytest.raises(MXNetError, match="Assigning to NDArrays"):
        nd.Activation(v, act_type="relu", out=v)
    with pytest.raises(MXNetError, match=r"activation must be one of \(None, 'relu', "
                                         r"'sigmoid', 'softrelu', 'softsign', 'tanh'\)"):
        gluon.Conv2DTranspose(2, 3, activation="leaky")


def test_written_output_is_refused_by_backward():
    layer, x_values = _make(1, "sigmoid", True)
    x = nd.array(x_values, dtype=x_values.dtype)
    x.attach_grad()
    with autograd.record():
        y = layer(x)
    nd.Deconvolution(x, layer.weight.data(), layer.bias.data(), out=y, **layer._kwargs)
    with pytest.raises(MXNetError, match="written after the operator was recorded"):
        y.backward()


# -- the kernel check ---------------------------------------------------------------------
CHECK_PARAMS = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=8, no_bias=False)
CHECK_SHAPE = (2, 48, 6, 6)


def _check_geometry(no_bias=False):
    return infer_geometry(parse_params(dict(CHECK_PARAMS, no_bias=no_bias)), CHECK_SHAPE)


def _separate_plan(geom, act):
    return next(c for c in _ops.forward_candidates(geom, "float32", False, False, act, False)
                if "gemm" in c.impl).build()


class OneTermOff:
    """A fused plan whose pre-activation is off by the smallest error a wrong
    term can make (one input times one weight unit) at fixed pixels, where the
    activation saturates most (tanh) or where it is negative (relu)."""

    act_fused = True

    def __init__(self, separate, act):
        self._separate, self.act_type = separate, act
        self.impl, self._where = "planted:one_term_off", None

    def __getattr__(self, name):  # layouts, threads...: the real plan's
        return getattr(self._separate, name)

    def run_plain(self, src, weights, bias, dst_init=None, activate=True):
        pre = self._separate.run_plain(src, weights, bias, activate=False).astype(np.float64)
        unit = np.abs(src[src != 0]).min() * np.abs(weights[weights != 0]).min()
        if self._where is None:  # chosen on the first run, kept (a kernel's defect is)
            self._where = (np.abs(pre) == np.abs(pre).max()) if self.act_type == "tanh" \
                else pre < -unit
        return ref_act(pre + unit * self._where, self.act_type).astype(np.float32)


def test_saturation_would_hide_a_wrong_preactivation():
    assert np.tanh(np.float32(59)) == np.tanh(np.float32(65)) == 1


def test_the_check_sees_one_wrong_term_through_a_saturated_tanh():
    geom = _check_geometry()
    plan = OneTermOff(_separate_plan(geom, "tanh"), "tanh")
    check = kernel_check.forward_check(geom, "float32", False, "tanh")
    reason = check(plan)
    assert reason is not None and "conditioned inputs" in reason and "values wrong" in reason
    # the same fault on the exact integers is invisible after tanh: saturated
    case = kernel_check._ForwardCase(geom, "float32", False)
    pre = np.stack([case.expected(n) for n in range(CHECK_SHAPE[0])]).astype(np.float32)
    assert np.abs(pre).max() > 20 and np.tanh(pre.max()) == np.tanh(pre.max() + 1)


def test_the_check_sees_a_wrong_negative_preactivation_through_relu():
    geom = _check_geometry(no_bias=True)
    plan = OneTermOff(_separate_plan(geom, "relu"), "relu")
    reason = kernel_check.forward_check(geom, "float32", False, "relu")(plan)
    assert reason is not None and "(inputs negated)" in reason


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh", "softrelu"])
def test_the_check_accepts_oneDNNs_correct_kernels(act):
    """The check itself is right: oneDNN's gemm kernel agrees with the
    activation by its own eltwise primitive or fused into a separate bias
    addition, and some kernel agrees with it fused into the deconvolution."""
    geom = _check_geometry()
    check = kernel_check.forward_check(geom, "float32", False, act)
    candidates = list(_ops.forward_candidates(geom, "float32", False, False, act))
    for bias_fused, act_fused in ((True, False), (False, False), (False, True)):
        candidate = next(c for c in candidates if "gemm" in c.impl
                         and c.act_fused == act_fused and c.bias_fused == bias_fused)
        assert check(candidate.build()) is None, candidate
    fused = [c for c in candidates if c.act_fused and c.bias_fused]
    if fused:  # none where this kernel family has no native deconvolution
        assert any(check(c.build()) is None for c in fused), fused


def test_no_candidate_leaves_a_fused_activation_to_oneDNNs_reference_loop():
    """A convolution-based deconvolution ("conv:any+...") applies post-ops in a
    scalar loop, slower than the same kernel and an eltwise primitive."""
    geom = _check_geometry()
    for c in _ops.forward_candidates(geom, "float32", False, False, "tanh"):
        assert not (c.act_fused and c.bias_fused and c.impl.startswith("conv:any+")), c
    assert any(c.impl.startswith("conv:any+") and not c.act_fused
               for c in _ops.forward_candidates(geom, "float32", False, False, "tanh"))


def test_the_check_catches_oneDNNs_brgconv_with_an_eltwise_post_op():
    """oneDNN 3.2's brgconv_strided:avx512_core is wrong with a fused relu even
    without a bias on some CPUs (checked on AMD Zen 4 and 5: 2x512x4x4 -> 256,
    k4 s2 p1) and right on others (an Intel CPU with AMX): each such candidate
    is judged against the float64 NumPy reference on small-integer inputs,
    and the check must refuse exactly the wrong ones.  Skipped where this CPU
    or kernel family does not offer the kernel."""
    params = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256)
    geom = infer_geometry(parse_params(params), (2, 512, 4, 4))
    candidates = [c for c in _ops.forward_candidates(geom, "float32", False, False, "relu")
                  if c.act_fused and "brgconv_strided:avx512_core" in c.impl]
    if not candidates:
        pytest.skip("no brgconv_strided:avx512_core kernel here")
    rng = np.random.default_rng(0)
    data = rng.integers(-2, 3, geom.data_shape).astype(np.float32)
    weight = rng.integers(-2, 3, geom.weight_shape).astype(np.float32)
    want = np.maximum(reference_forward(data, weight, None, (4, 4), (2, 2), (1, 1), (1, 1),
                                        (1, 1), 1), 0)
    check = kernel_check.forward_check(geom, "float32", False, "relu")
    for candidate in candidates:
        plan = candidate.build()
        wrong = not np.array_equal(plan.run_plain(data, weight, None), want)
        assert (check(plan) is not None) == wrong, (candidate, wrong)


class PlantedCandidate:
    def __init__(self, real, act):
        self._real, self.act_type, self.act_fused = real, act, True
        self.index, self.family, self.weights, self.bias_fused = -1, "plain", "any", True
        self.impl, self.is_reference = "planted:one_term_off", False

    def build(self):
        return OneTermOff(self._real.build(), self.act_type)

    def __repr__(self):
        return f"Candidate({self.impl}, {self.act_type} fused)"


@pytest.fixture
def fresh_choices(monkeypatch):
    real_run = plans._Costs.run
    monkeypatch.setattr(plans._Costs, "run", lambda self, plan: 1e-9 if isinstance(
        plan, OneTermOff) else real_run(self, plan))
    plans.clear_choices()
    mxdeconv.clear_cache()
    yield
    plans.clear_choices()
    mxdeconv.clear_cache()


@pytest.mark.parametrize("tuning", [True, False], ids=["tuned", "first-correct"])
def test_a_wrong_fused_plan_is_replaced_with_one_warning(monkeypatch, fresh_choices, tuning):
    real = _ops.forward_candidates

    def candidates(*args, **kwargs):
        found = list(real(*args, **kwargs))
        separate = next(c for c in found if not c.act_fused and "gemm" in c.impl)
        return iter([PlantedCandidate(separate, args[4])] + found)
    monkeypatch.setattr(_ops, "forward_candidates", candidates)
    previous = plans.set_tuning(tuning)
    try:
        rng = np.random.default_rng(3)
        x = rng.standard_normal(CHECK_SHAPE).astype(np.float32)
        w = (0.1 * rng.standard_normal((48, 8, 4, 4))).astype(np.float32)
        b = rng.standard_normal(8).astype(np.float32)
        with pytest.warns(KernelDefectWarning, match=r"planted:one_term_off, tanh fused\) "
                                                     r"gave a wrong result"):
            y = DeconvolutionActivation(x, w, b, act_type="tanh", **CHECK_PARAMS)
        assert mxdeconv.last_impl() == "onednn"
        with mxdeconv.use_impl("numpy"):
            want = DeconvolutionActivation(x, w, b, act_type="tanh", **CHECK_PARAMS)
        assert_allclose(y.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-5)
        text = mxdeconv.explain(x, w, b, act_type="tanh", **CHECK_PARAMS)
        assert "rejected Candidate(planted:one_term_off, tanh fused)" in text
        with warnings.catch_warnings():  # once per kernel and geometry
            warnings.simplefilter("error", KernelDefectWarning)
            DeconvolutionActivation(x, w, b, act_type="tanh", **CHECK_PARAMS)
    finally:
        plans.set_tuning(previous)


def test_an_unverifiable_fused_plan_gives_way_without_a_warning(monkeypatch, fresh_choices):
    monkeypatch.setattr(kernel_check, "MARGIN", 1e12)  # no layer is checkable so
    geom = _check_geometry()
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDefectWarning)
        plan = plans.forward_plan(geom, "float32", False, False, "tanh")
    assert plan.act_type == "tanh" and not plan.act_fused
    fused = next(c for c in _ops.forward_candidates(geom, "float32", False, False, "tanh")
                 if c.act_fused)
    reason = kernel_check.forward_check(geom, "float32", False, "tanh")(fused.build())
    assert isinstance(reason, kernel_check.Unverifiable)
    assert "cannot be checked on this layer" in reason
