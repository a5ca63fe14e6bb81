"""``mxdeconv.gluon.nn``: custom ``Block`` / ``HybridBlock`` subclasses written as
MXNet users write them, the parameter-free layers against NumPy, and
``ParameterDict``'s ``get``, ``save`` / ``load``, ``setattr``, ``zero_grad`` and
``reset_ctx``.  Names are MXNet 1.9.1's (checked against MXNet itself for a
generator in tests/gluon/test_batchnorm.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mxdeconv as mx
from mxdeconv import MXNetError, autograd, gluon, nd
from mxdeconv.gluon import nn


class Upsampler(nn.HybridBlock):
    """A residual upsampling block in MXNet 1.9.1's custom-block style."""

    def __init__(self, channels: int, **kwargs) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.up = nn.Conv2DTranspose(channels, 4, strides=2, padding=1, use_bias=False)
            self.bn = nn.BatchNorm()
            self.gain = self.params.get("gain", shape=(1,), init=mx.init.Constant(0.5))

    def hybrid_forward(self, F, x, gain):
        return F.relu(self.bn(self.up(x))) * gain


class Head(nn.Block):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential()
            self.body.add(Upsampler(4), nn.Conv2DTranspose(2, 3, padding=1))

    def forward(self, x):
        return nd.tanh(self.body(x))


def test_custom_blocks_names_and_forward(tmp_path: Path) -> None:
    net = Head(prefix="head_")
    net.initialize(mx.init.Normal(0.1))
    net.hybridize()
    y = net(nd.ones((2, 3, 4, 4)))
    assert y.shape == (2, 2, 8, 8)
    # As MXNet 1.9.1 names them (checked there): the Upsampler and the last layer
    # are made in Head's name_scope, not the HybridSequential's.
    assert list(net.collect_params()) == [
        "head_upsampler0_gain", "head_upsampler0_conv0_weight",
        "head_upsampler0_batchnorm0_gamma", "head_upsampler0_batchnorm0_beta",
        "head_upsampler0_batchnorm0_running_mean", "head_upsampler0_batchnorm0_running_var",
        "head_conv0_weight", "head_conv0_bias"]
    assert list(net._structural()) == [
        "body.0.gain", "body.0.up.weight", "body.0.bn.gamma", "body.0.bn.beta",
        "body.0.bn.running_mean", "body.0.bn.running_var", "body.1.weight", "body.1.bias"]
    assert list(net.collect_params("head_.*gamma")) == ["head_upsampler0_batchnorm0_gamma"]
    net.save_parameters(str(tmp_path / "h.params"))
    again = Head(prefix="other_")
    again.load_parameters(str(tmp_path / "h.params"))
    np.testing.assert_array_equal(again(nd.ones((2, 3, 4, 4))).asnumpy(), y.asnumpy())


def test_gradients_reach_custom_parameters() -> None:
    block = Upsampler(2)
    block.initialize()
    with autograd.record():
        loss = block(nd.ones((2, 3, 2, 2)) * nd.array(np.arange(24).reshape(2, 3, 2, 2))).sum()
    loss.backward()
    # d loss / d gain = sum(relu(bn(up(x)))): the output without the gain
    with autograd.record():
        raw = block(nd.ones((2, 3, 2, 2)) * nd.array(np.arange(24).reshape(2, 3, 2, 2)))
    np.testing.assert_allclose(block.gain.grad().asnumpy(), [raw.asnumpy().sum() / 0.5],
                               rtol=1e-5)
    assert np.abs(block.up.weight.grad().asnumpy()).sum() > 0


def test_block_rules() -> None:
    class Early(nn.Block):
        def __init__(self):
            self.layer = nn.Identity()  # before super().__init__()
    with pytest.raises(MXNetError, match="super\\(\\).__init__\\(\\)"):
        Early()
    with pytest.raises(NotImplementedError):
        nn.Block()(nd.ones((1,)))
    with pytest.raises(NotImplementedError):
        nn.HybridBlock()(nd.ones((1,)))
    with pytest.raises(MXNetError, match="params"):
        nn.HybridBlock(params={})
    with pytest.raises(TypeError, match="block"):
        nn.Sequential().add(lambda x: x)
    holder = nn.Block()
    holder.child = nn.Identity()
    holder.child = None  # unregisters it
    assert holder._children == {}


@pytest.mark.parametrize("layer, reference", [
    (lambda: nn.Activation("relu"), lambda x: np.maximum(x, 0)),
    (lambda: nn.Activation("sigmoid"), lambda x: 1 / (1 + np.exp(-x))),
    (lambda: nn.Activation("softsign"), lambda x: x / (1 + np.abs(x))),
    (lambda: nn.LeakyReLU(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (lambda: nn.ELU(0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    (lambda: nn.Swish(2.0), lambda x: x / (1 + np.exp(-2 * x))),
    (lambda: nn.Identity(), lambda x: x),
    (lambda: nn.Dropout(0.5), lambda x: x),  # outside training
    (lambda: nn.Flatten(), lambda x: x.reshape(x.shape[0], -1)),
    (lambda: nn.Lambda("tanh"), np.tanh),
    (lambda: nn.Lambda(lambda x: x * 3), lambda x: x * 3),
    (lambda: nn.HybridLambda("square"), np.square),
    (lambda: nn.HybridLambda(lambda F, x: F.sin(x)), np.sin),
])
def test_parameter_free_layers(layer, reference) -> None:
    x = np.random.RandomState(0).normal(0, 2, (2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(layer()(nd.array(x)).asnumpy(), reference(x), rtol=1e-6,
                               atol=1e-6)


def test_activation_prefix_and_errors() -> None:
    assert nn.Activation("relu", prefix=None).prefix.startswith("relu")
    assert repr(nn.LeakyReLU(0.1)) == "LeakyReLU(0.1)"
    with pytest.raises(MXNetError, match="activation must be one of"):
        nn.Activation("gelu_fast")
    with pytest.raises(MXNetError, match="no less than 0"):
        nn.LeakyReLU(-0.1)
    with pytest.raises(MXNetError, match="Dropout rate must be in"):
        nn.Dropout(1.5)
    with pytest.raises(MXNetError, match="not a function of mxdeconv.nd"):
        nn.Lambda("no_such_function")
    with pytest.raises(TypeError, match="function"):
        nn.HybridLambda(3)


def test_dropout_in_training_masks_and_scales() -> None:
    np.random.seed(4)
    x = nd.ones((20, 50))
    x.attach_grad()
    with autograd.record():
        y = nn.Dropout(0.25, axes=(1,))(x)
    y.backward()
    values = y.asnumpy()
    assert set(np.unique(values).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert (values == values[:, :1]).all()  # one draw shared along axis 1
    np.testing.assert_array_equal(x.grad.asnumpy(), values)  # the mask is the gradient
    assert 0.1 < (values == 0).mean() < 0.45


def test_prelu_learns_its_slope() -> None:
    layer = nn.PReLU()
    layer.initialize()
    x = nd.array([-2.0, 3.0])
    with autograd.record():
        y = layer(x)
    y.backward()
    np.testing.assert_allclose(y.asnumpy(), [-0.5, 3.0])
    np.testing.assert_allclose(layer.alpha.grad().asnumpy(), [-2.0])


def test_parameter_dict_helpers(tmp_path: Path) -> None:
    params = gluon.ParameterDict("blk_")
    w = params.get("w", shape=(2, 0))
    assert w.name == "blk_w" and params.get("w", shape=(2, 3)) is w and w.shape == (2, 3)
    with pytest.raises(MXNetError, match="does not match"):
        params.get("w", shape=(4, 3))
    params.get("b", shape=(3,), init="ones")
    params.initialize(mx.init.Normal(1.0))
    params.setattr("grad_req", "add")
    assert w.grad_req == "add"
    w.grad()[:] = 5
    params.zero_grad()
    assert (w.grad().asnumpy() == 0).all()
    params.reset_ctx(mx.cpu(0))
    assert params.list_ctx() == [mx.cpu(0)]
    path = str(tmp_path / "p.params")
    params.save(path, strip_prefix="blk_")
    assert sorted(nd.load(path)) == ["b", "w"]
    with pytest.raises(MXNetError, match="striped before saving"):
        params.save(path, strip_prefix="other_")
    fresh = gluon.ParameterDict("x_")
    fresh.get("w", shape=(2, 3))
    fresh.get("b", shape=(3,))
    fresh.load(path, restore_prefix="x_")
    np.testing.assert_array_equal(fresh["x_w"].data().asnumpy(), w.data().asnumpy())
    strict = gluon.ParameterDict("y_")
    strict.get("z", shape=(1,))
    with pytest.raises(MXNetError, match="'z' is missing"):
        strict.load(path, restore_prefix="y_")
    extra = gluon.ParameterDict("x_")
    extra.get("w", shape=(2, 3))
    with pytest.raises(MXNetError, match="not present"):
        extra.load(path, restore_prefix="x_")
    extra.load(path, restore_prefix="x_", ignore_extra=True)
    assert extra["x_w"].shape == (2, 3)


def test_running_statistics_are_not_trained() -> None:
    net = nn.HybridSequential()
    net.add(nn.Conv2DTranspose(2, 3, in_channels=1), nn.BatchNorm(in_channels=2))
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    with autograd.record():
        loss = net(nd.ones((2, 1, 2, 2))).sum()
    loss.backward()
    trainer.step(2)  # the running statistics (grad_req 'null') are skipped, not stale
    assert net[1].running_mean.grad_req == "null"
    net[1].running_mean.grad_req = "write"  # not differentiable: stays 'null' (MXNet)
    assert net[1].running_mean.grad_req == "null"


def test_apply_and_contrib_identity() -> None:
    from mxdeconv.gluon.contrib.nn import Identity
    assert Identity is nn.Identity
    net = nn.HybridSequential()
    net.add(nn.Conv2DTranspose(2, 3, in_channels=1), Identity())
    seen = []
    assert net.apply(lambda block: seen.append(block.prefix)) is net
    assert seen == [net[0].prefix, net[1].prefix, net.prefix]
    with pytest.raises(TypeError, match="fn must be"):
        net.apply(3)


@pytest.mark.parametrize("call, error, words", [
    (lambda: nd.tile(nd.ones((2,)), "2"), TypeError, "tile: reps"),
    (lambda: nd.tile(nd.ones((2,)), (0,)), MXNetError, "reps=\\(0,\\)"),
    (lambda: nd.one_hot(nd.ones((2,)), -1), MXNetError, "depth=-1"),
    (lambda: nd.one_hot(nd.ones((2,)), 2, on_value="x"), TypeError, "on_value"),
    (lambda: nd.BatchNorm(nd.ones((2, 3)), nd.ones((3,)), nd.zeros((3,)), nd.zeros((3,)),
                          nd.ones((3,)), axis=2), MXNetError, "axis=2"),
    (lambda: nd.BatchNorm(nd.ones((2, 3)), nd.ones((3,)), nd.zeros((3,)), nd.zeros((3,)),
                          nd.ones((3,)), eps=-1.0), MXNetError, "eps=-1.0"),
    (lambda: gluon.ParameterDict("p_").get(3), TypeError, "name must be a string"),
    (lambda: gluon.ParameterDict(prefix=3), TypeError, "prefix must be a string"),
    (lambda: nn.Dropout(0.5, axes="x"), TypeError, "axes"),
    (lambda: nn.Activation(3), TypeError, "activation must be one of"),
    (lambda: nn.BatchNorm(axis="1"), TypeError, "axis must be an int"),
    (lambda: nn.HybridBlock().export("x"), MXNetError, "save_parameters"),
    (lambda: nn.Block().register_child(3), TypeError, "block must be"),
    (lambda: gluon.Parameter("w", differentiable="no"), TypeError, "differentiable"),
])
def test_new_errors_name_the_argument(call, error, words) -> None:
    with pytest.raises(error, match=words):
        call()
