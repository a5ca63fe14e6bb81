"""mxdeconv.gluon: Conv1D/2D/3DTranspose against real MXNet 1.9.1 numbers, MXNet's
default initialisation, deferred shapes, hybridize, save/load to .params and .npz
(MXNet's .params files themselves: tests/io/test_params_files.py).

The MXNet numbers come from tests/data (made by scripts/fixtures/make_mxnet_gluon_fixtures.py
under MXNet 1.9.1), so CI checks them without MXNet.  test_live_mxnet_cross_check
re-runs that script with a new seed when an MXNet 1.9.1 venv exists on this
machine (MXNET_VENV, .venv-mxnet, or /tmp/mxnet-venv) and is SKIPPED otherwise,
e.g. in CI."""
import os
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose

import mxdeconv
from mxdeconv import MXNetError, autograd, gluon, nd

from helpers import DATA, FIXTURE_SCRIPTS, mxnet_python

sys.path.insert(0, str(DATA))
from mxnet_layers import DEFAULT_LAYER, LAYERS  # noqa: E402

IMPLS = ("numpy", "onednn")


MXNET_PYTHON = mxnet_python()


def _layer(key, **extra):
    cls_name, kwargs, _ = LAYERS[key]
    return getattr(gluon, cls_name)(**dict(kwargs, **extra))


def _check_against_mxnet(folder, key, impl):
    io = np.load(folder / "mxnet_gluon_io.npz")
    layer = _layer(key)
    layer.load_parameters(str(folder / f"mxnet_{key}.npz"))  # MXNet's names: conv0_weight
    x = nd.array(io[f"{key}_input"])
    x.attach_grad()
    with mxdeconv.use_impl(impl):
        with autograd.record():
            y = layer(x)
        y.backward(nd.array(io[f"{key}_head_grad"]))
    assert_allclose(y.asnumpy(), io[f"{key}_output"], rtol=1e-5, atol=1e-5)
    assert_allclose(x.grad.asnumpy(), io[f"{key}_data_grad"], rtol=1e-5, atol=1e-5)
    assert_allclose(layer.weight.grad().asnumpy(), io[f"{key}_weight_grad"],
                    rtol=1e-5, atol=1e-5)
    if layer.bias is not None:
        assert_allclose(layer.bias.grad().asnumpy(), io[f"{key}_bias_grad"],
                        rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("key", sorted(LAYERS))
def test_matches_mxnet_fixture(key, impl):
    _check_against_mxnet(DATA, key, impl)


@pytest.mark.skipif(MXNET_PYTHON is None,
                    reason="no MXNet 1.9.1 venv here (CI has none; the committed "
                           "tests/data fixture covers the same check)")
def test_live_mxnet_cross_check(tmp_path):
    """Runs real MXNet 1.9.1 in its own interpreter, then compares."""
    subprocess.run([MXNET_PYTHON, str(FIXTURE_SCRIPTS / "make_mxnet_gluon_fixtures.py"),
                    str(tmp_path), "7"], check=True, capture_output=True, timeout=300)
    for key in sorted(LAYERS):
        _check_against_mxnet(tmp_path, key, "onednn")
    io = np.load(tmp_path / "mxnet_gluon_io.npz")
    _check_default_init(io["default_weight"], io["default_bias"])


# -- initialisation ------------------------------------------------------------------
def _check_default_init(weight, bias):
    """MXNet's default: weight ~ Uniform(-0.07, 0.07) (std 0.07/sqrt(3)), bias zeros."""
    assert np.abs(weight).max() <= 0.07
    assert np.abs(weight).max() > 0.06
    assert weight.std() == pytest.approx(0.07 / np.sqrt(3), rel=0.15)
    assert abs(weight.mean()) < 0.01
    assert not bias.any()


def test_mxnet_default_initialisation_is_uniform_007():
    io = np.load(DATA / "mxnet_gluon_io.npz")
    _check_default_init(io["default_weight"], io["default_bias"])


def test_default_initialisation_matches_mxnet():
    cls_name, kwargs = DEFAULT_LAYER
    layer = getattr(gluon, cls_name)(**kwargs)
    layer.initialize()
    mxnet = np.load(DATA / "mxnet_gluon_io.npz")["default_weight"]
    assert layer.weight.shape == mxnet.shape
    _check_default_init(layer.weight.data().asnumpy(), layer.bias.data().asnumpy())


def test_global_init_applies_to_the_weight_only_as_in_mxnet():
    layer = gluon.Conv2DTranspose(2, 3, in_channels=2)
    layer.initialize(gluon.One())
    assert (layer.weight.data().asnumpy() == 1).all()
    assert not layer.bias.data().asnumpy().any()      # bias_initializer='zeros' wins
    layer = gluon.Conv2DTranspose(2, 3, in_channels=2, weight_initializer=gluon.Constant(3.0),
                                  bias_initializer="ones")
    layer.initialize(gluon.Normal(0.02))
    assert (layer.weight.data().asnumpy() == 3).all()
    assert (layer.bias.data().asnumpy() == 1).all()


def test_initialize_is_repeatable_with_numpy_seed_and_force_reinit():
    layer = gluon.Conv1DTranspose(2, 3, in_channels=2)
    np.random.seed(3)
    layer.initialize()
    first = layer.weight.data().asnumpy()
    layer.initialize()                      # already initialised: unchanged
    assert (layer.weight.data().asnumpy() == first).all()
    np.random.seed(3)
    layer.initialize(force_reinit=True)
    assert (layer.weight.data().asnumpy() == first).all()


def test_xavier_bounds():
    weight = gluon.Xavier()("w_weight", (8, 4, 3, 3), "float32")
    bound = np.sqrt(3 / ((4 * 9 + 8 * 9) / 2))
    assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.8 * bound


# -- constructor, deferred shapes, hybridize ---------------------------------------------
def test_constructor_arguments_map_to_deconvolution():
    layer = gluon.Conv2DTranspose(6, kernel_size=(3, 2), strides=2, padding=(1, 0),
                                  output_padding=1, dilation=(1, 2), groups=3,
                                  use_bias=False, in_channels=9)
    assert layer._kwargs == dict(kernel=(3, 2), stride=(2, 2), dilate=(1, 2), pad=(1, 0),
                                 adj=(1, 1), num_filter=6, num_group=3, no_bias=True,
                                 layout="NCHW")
    assert layer.weight.shape == (9, 2, 3, 2) and layer.bias is None
    layer.initialize()
    x = np.random.default_rng(0).uniform(-1, 1, (2, 9, 4, 5)).astype(np.float32)
    expected = nd.Deconvolution(x, layer.weight.data(), **layer._kwargs).asnumpy()
    assert_allclose(layer(nd.array(x)).asnumpy(), expected, rtol=1e-6)
    assert "groups=3" in repr(layer) and "bias=False" in repr(layer)


def test_constructor_errors():
    with pytest.raises(MXNetError, match="list of 2"):
        gluon.Conv2DTranspose(2, kernel_size=(3, 3, 3))
    with pytest.raises(MXNetError, match="layout"):
        gluon.Conv2DTranspose(2, 3, layout="NHWC")
    with pytest.raises(MXNetError, match="activation"):
        gluon.Conv2DTranspose(2, 3, activation="gelu")
    with pytest.raises(MXNetError, match="divisible"):
        gluon.Conv2DTranspose(3, 3, groups=2)


def test_deferred_initialisation_takes_in_channels_from_the_first_batch():
    layer = gluon.Conv3DTranspose(4, kernel_size=2, strides=2)
    layer.initialize()
    with pytest.raises(MXNetError, match="deferred"):
        layer.weight.data()
    y = layer(nd.ones((1, 3, 2, 2, 2)))
    assert y.shape == (1, 4, 4, 4, 4)
    assert layer.weight.shape == (3, 4, 2, 2, 2)


def test_uninitialised_layer_raises():
    layer = gluon.Conv1DTranspose(2, 3, in_channels=2)
    with pytest.raises(MXNetError, match="not been initialized"):
        layer(nd.ones((1, 2, 4)))


def test_hybridize_is_a_no_op_and_relu_activation():
    layer = gluon.Conv1DTranspose(2, 3, in_channels=2, activation="relu")
    layer.initialize(gluon.Uniform(1.0))
    x = nd.array(np.random.default_rng(1).uniform(-1, 1, (2, 2, 5)).astype(np.float32))
    before = layer(x).asnumpy()
    assert layer.hybridize() is None
    layer.hybridize(static_alloc=True, static_shape=True)
    after = layer(x).asnumpy()
    assert (after == before).all() and (after >= 0).all()


def test_names_follow_mxnet():
    a, b = gluon.Conv2DTranspose(2, 3), gluon.Conv1DTranspose(2, 3)
    assert a.prefix.startswith("conv") and a.weight.name == a.prefix + "weight"
    assert int(b.prefix[4:-1]) == int(a.prefix[4:-1]) + 1
    named = gluon.Conv2DTranspose(2, 3, prefix="up_")
    assert sorted(named.collect_params()) == ["up_bias", "up_weight"]
    assert list(named.collect_params(".*weight")) == ["up_weight"]


def test_training_step_with_grad_req(tmp_path):
    layer = gluon.Conv2DTranspose(2, 3, strides=2, in_channels=3)
    layer.initialize()
    x = nd.array(np.random.default_rng(2).uniform(-1, 1, (2, 3, 3, 3)).astype(np.float32))
    layer.collect_params().setattr("grad_req", "add")
    for _ in range(2):
        with autograd.record():
            y = layer(x)
        y.backward()
    once = nd.Deconvolution_backward(nd.ones(y.shape), x, layer.weight.data(),
                                     layer.bias.data(), **layer._kwargs)
    assert_allclose(layer.weight.grad().asnumpy(), 2 * once[1].asnumpy(), rtol=1e-5)
    assert_allclose(layer.bias.grad().asnumpy(), 2 * once[2].asnumpy(), rtol=1e-5)
    layer.collect_params().zero_grad()
    assert not layer.weight.grad().asnumpy().any()
    layer.bias.grad_req = "null"
    with pytest.raises(MXNetError, match="grad_req='null'"):
        layer.bias.grad()


# -- save / load ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["layer.params", "layer.npz"])
def test_save_and_load_round_trip(tmp_path, name):
    layer = gluon.Conv2DTranspose(4, 3, strides=2, padding=1, in_channels=2)
    layer.initialize()
    path = tmp_path / name   # saved under exactly this name: MXNet's format, or .npz
    layer.save_parameters(str(path))
    assert os.listdir(tmp_path) == [name]
    if name.endswith(".npz"):
        with np.load(path) as saved:
            assert sorted(saved.files) == ["bias", "weight"]
    else:
        assert sorted(nd.load(str(path))) == ["bias", "weight"]
    other = gluon.Conv2DTranspose(4, 3, strides=2, padding=1)  # in_channels from the file
    other.load_parameters(str(path))
    x = nd.ones((1, 2, 3, 3))
    assert (other(x).asnumpy() == layer(x).asnumpy()).all()


def test_load_checks_names_shapes_and_dtypes(tmp_path):
    layer = gluon.Conv1DTranspose(2, 3, in_channels=2)
    weight = np.zeros((2, 2, 3), np.float32)
    np.savez(tmp_path / "w.npz", weight=weight)
    with pytest.raises(MXNetError, match="missing"):
        layer.load_parameters(str(tmp_path / "w.npz"))
    layer.load_parameters(str(tmp_path / "w.npz"), allow_missing=True)
    np.savez(tmp_path / "extra.npz", weight=weight, bias=np.zeros(2, np.float32),
             other=np.zeros(1))
    with pytest.raises(MXNetError, match="ignore_extra"):
        layer.load_parameters(str(tmp_path / "extra.npz"))
    layer.load_parameters(str(tmp_path / "extra.npz"), ignore_extra=True)
    np.savez(tmp_path / "f64.npz", weight=weight.astype(np.float64), bias=np.zeros(2))
    with pytest.raises(MXNetError, match="cast_dtype=True"):
        layer.load_parameters(str(tmp_path / "f64.npz"))
    layer.load_parameters(str(tmp_path / "f64.npz"), cast_dtype=True)
    assert layer.weight.data().dtype == np.float32
    np.savez(tmp_path / "bad.npz", weight=np.zeros((3, 2, 3), np.float32),
             bias=np.zeros(2, np.float32))
    with pytest.raises(MXNetError, match="shape"):
        layer.load_parameters(str(tmp_path / "bad.npz"))
