"""``mxdeconv.init`` (MXNet's ``mx.init`` / ``mx.initializer``) and
``mxdeconv.context``: the imports MXNet programs write, and each initializer's
values checked against the formula written here in NumPy."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import mxdeconv as mx
from mxdeconv import MXNetError, gluon, nd


def test_mxnet_import_lines_work() -> None:
    namespace: dict = {}
    exec("import mxdeconv as mx\nfrom mxdeconv import nd, autograd, gluon, init\n"
         "from mxdeconv.gluon import nn\nfrom mxdeconv.init import Xavier\n"
         "import mxdeconv.initializer\n", namespace)
    assert namespace["init"] is mx.init is mx.initializer
    assert importlib.import_module("mxdeconv.init") is mx.initializer
    assert namespace["Xavier"] is gluon.Xavier is mx.initializer.Xavier
    assert namespace["nn"].Conv2DTranspose is gluon.Conv2DTranspose


def test_context_module() -> None:
    assert mx.cpu() == mx.context.cpu() == mx.context.Context("cpu", 0)
    assert mx.context.current_context() == mx.cpu(0)
    assert mx.context.num_gpus() == 0
    assert mx.context.Context is mx.Context and mx.context.cpu is mx.cpu


@pytest.mark.parametrize("make, sample_check", [
    (lambda: mx.init.Normal(0.02),
     lambda w: abs(w.std() - 0.02) < 0.001 and abs(w.mean()) < 0.001),
    (lambda: mx.init.Uniform(0.3),
     lambda w: w.min() >= -0.3 and w.max() <= 0.3 and abs(w.std() - 0.3 / math.sqrt(3)) < 0.01),
])
def test_random_initializers_follow_their_distribution(make, sample_check) -> None:
    np.random.seed(0)
    w = make()("conv0_weight", (64, 32, 4, 4), "float32")
    assert w.dtype == np.float32 and sample_check(w.astype(np.float64))


@pytest.mark.parametrize("rnd_type, factor_type, magnitude", [
    ("uniform", "avg", 3), ("uniform", "in", 2), ("gaussian", "out", 2),
    ("gaussian", "avg", 2.34)])
def test_xavier_scale(rnd_type: str, factor_type: str, magnitude: float) -> None:
    shape = (64, 32, 4, 4)
    fan_in, fan_out = 32 * 16, 64 * 16
    factor = {"avg": (fan_in + fan_out) / 2, "in": fan_in, "out": fan_out}[factor_type]
    scale = math.sqrt(magnitude / factor)
    np.random.seed(1)
    w = mx.init.Xavier(rnd_type, factor_type, magnitude)("w_weight", shape, "float64")
    if rnd_type == "uniform":
        assert np.abs(w).max() <= scale
        assert abs(w.std() - scale / math.sqrt(3)) < 0.02 * scale
    else:
        assert abs(w.std() - scale) < 0.02 * scale


def test_msraprelu_is_gaussian_xavier_with_he_magnitude() -> None:
    init = mx.init.MSRAPrelu(slope=0.1)
    assert (init.rnd_type, init.factor_type) == ("gaussian", "avg")
    assert init.magnitude == pytest.approx(2 / 1.01)
    np.random.seed(2)
    w = init("w_weight", (128, 64, 3, 3), "float64")
    assert abs(w.std() - math.sqrt(2 / 1.01 / ((64 + 128) * 9 / 2))) < 0.002


def bilinear_kernel(in_channels: int, out_channels: int, size: int) -> np.ndarray:
    """The FCN upsampling kernel, as MXNet tutorials write it."""
    factor = (size + 1) // 2
    center = factor - 1 if size % 2 == 1 else factor - 0.5
    og = np.ogrid[:size, :size]
    filt = (1 - abs(og[0] - center) / factor) * (1 - abs(og[1] - center) / factor)
    weight = np.zeros((in_channels, out_channels, size, size), dtype="float32")
    weight[range(in_channels), range(out_channels), :, :] = filt
    return weight


@pytest.mark.parametrize("wrap", [nd.array, np.asarray, lambda k: k.tolist()])
def test_constant_takes_an_array(wrap) -> None:
    kernel = bilinear_kernel(3, 3, 4)
    layer = gluon.nn.Conv2DTranspose(3, 4, strides=2, padding=1, in_channels=3)
    layer.initialize(mx.init.Constant(wrap(kernel)))
    np.testing.assert_array_equal(layer.weight.data().asnumpy(), kernel)
    assert (layer.bias.data().asnumpy() == 0).all()  # bias_initializer='zeros' wins
    # The kernel doubles a constant image: a bilinear upsampler.
    out = layer(nd.ones((1, 3, 4, 4))).asnumpy()
    np.testing.assert_allclose(out[0, :, 1:-1, 1:-1], 1.0, rtol=1e-6)


def test_constant_is_a_copy_and_broadcasts() -> None:
    values = np.array([1.0, 2.0])
    init = mx.init.Constant(values)
    values[:] = 0  # later writes to the caller's array change nothing
    assert init("w", (2, 2), "float32").tolist() == [[1.0, 2.0], [1.0, 2.0]]
    with pytest.raises(MXNetError, match="parameter 'w' of shape \\(3,\\)"):
        init("w", (3,), "float32")
    with pytest.raises(MXNetError, match="finite"):
        mx.init.Constant(np.array([1.0, np.nan]))
    with pytest.raises(TypeError, match="Constant value must be"):
        mx.init.Constant(np.array(["a"]))


def test_mixed_and_create() -> None:
    mixed = mx.init.Mixed([".*bias$", ".*"], [mx.init.Constant(1.0), "zeros"])
    layer = gluon.nn.Conv1DTranspose(2, 3, in_channels=2, bias_initializer=None)
    layer.initialize(mixed)
    assert (layer.bias.data().asnumpy() == 1).all() and (layer.weight.data().asnumpy() == 0).all()
    with pytest.raises(MXNetError, match="did not match any pattern"):
        mx.init.Mixed(["bias$"], ["zeros"])("conv0_weight", (2,), "float32")
    with pytest.raises(MXNetError, match="as many"):
        mx.init.Mixed(["a"], [])
    assert isinstance(mx.init.create("msraprelu"), mx.init.MSRAPrelu)
    with pytest.raises(MXNetError, match="unknown initializer"):
        mx.init.create("bilinearish")


def test_name_table_for_parameters_without_an_initializer() -> None:
    """MXNet's Initializer: gamma and running_var ones, beta and running_mean zeros."""
    init = mx.init.Normal(1.0)
    assert init("bn_gamma", (2,), "float32").tolist() == [1.0, 1.0]
    assert init("bn_running_var", (2,), "float32").tolist() == [1.0, 1.0]
    assert init("bn_beta", (2,), "float32").tolist() == [0.0, 0.0]
    assert init("bn_running_mean", (2,), "float32").tolist() == [0.0, 0.0]
