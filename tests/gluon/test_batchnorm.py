"""``nn.BatchNorm`` and ``nd.BatchNorm`` against MXNet 1.9.1 (fixtures from
``scripts/fixtures/make_mxnet_batchnorm_fixtures.py`` in tests/data/batchnorm) and
against NumPy written here:

* single layers: inference with given statistics, one training step (output,
  gradients of data, gamma and beta, running statistics after the backward)
  on 2-D to 5-D data, ``axis=-1``, ``scale=False``, ``center=False``,
  ``use_global_stats=True``, another momentum and epsilon;
* a DCGAN-style generator (Conv2DTranspose, BatchNorm, Activation) loaded
  from MXNet's initial ``.params``, trained 5 Adam steps: MXNet's losses, final
  parameters (running statistics included), inference image, parameter names
  and file bytes.
"""
from __future__ import annotations

import json
import subprocess
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest

import mxdeconv
from mxdeconv import MXNetError, autograd, gluon, nd
from mxdeconv.gluon import nn
import helpers

DATA = helpers.DATA / "batchnorm"
CASES = np.load(DATA / "cases.npz")
NAMES = sorted({key.split("/")[0] for key in CASES.files})
# float32: MXNet reduces in float32 (oneDNN), mxdeconv in float64 then rounds;
# measured differences are below 2e-6 on these values of order 1.
ATOL = 1e-5


def make_layer(name: str) -> nn.BatchNorm:
    kwargs = json.loads(str(CASES[f"{name}/kwargs"]))
    channels = CASES[f"{name}/x"].shape[kwargs.get("axis", 1)]
    bn = nn.BatchNorm(in_channels=channels, **kwargs)
    bn.initialize()
    for key in ("gamma", "beta", "running_mean", "running_var"):
        getattr(bn, key).set_data(CASES[f"{name}/{key}"])
    return bn


@pytest.mark.parametrize("name", NAMES)
def test_inference_matches_mxnet(name: str) -> None:
    bn = make_layer(name)
    out = bn(nd.array(CASES[f"{name}/x"])).asnumpy()
    np.testing.assert_allclose(out, CASES[f"{name}/inference"], rtol=1e-5, atol=ATOL)


@pytest.mark.parametrize("name", NAMES)
def test_training_step_matches_mxnet(name: str) -> None:
    bn = make_layer(name)
    x = nd.array(CASES[f"{name}/x"])
    x.attach_grad()
    with autograd.record():
        y = bn(x)
        loss = (y * nd.array(CASES[f"{name}/head"])).sum()
    loss.backward()
    np.testing.assert_allclose(y.asnumpy(), CASES[f"{name}/train_out"], rtol=1e-5, atol=ATOL)
    np.testing.assert_allclose(x.grad.asnumpy(), CASES[f"{name}/grad_x"], rtol=1e-4, atol=ATOL)
    for key in ("gamma", "beta"):
        param = getattr(bn, key)
        if f"{name}/grad_{key}" in CASES.files:
            np.testing.assert_allclose(param.grad().asnumpy(), CASES[f"{name}/grad_{key}"],
                                       rtol=1e-4, atol=1e-4)
        else:  # scale=False / center=False: not learned, as in MXNet
            assert param.grad_req == "null"
    for key in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(bn, key).data().asnumpy(),
                                   CASES[f"{name}/{key}_after"], rtol=1e-6, atol=1e-6)


def test_training_formula_against_numpy() -> None:
    """Batch statistics with the biased variance; running statistics moved by
    ``momentum`` toward them, the variance biased too, after the backward."""
    rng = np.random.RandomState(3)
    x = rng.normal(1.0, 3.0, (5, 3, 4)).astype(np.float32)
    bn = nn.BatchNorm(momentum=0.8, epsilon=1e-3, in_channels=3)
    bn.initialize()
    with autograd.record():
        y = bn(nd.array(x))
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    expected = (x - mean[None, :, None]) / np.sqrt(var[None, :, None] + 1e-3)
    np.testing.assert_allclose(y.asnumpy(), expected, rtol=1e-5, atol=1e-5)
    # MXNet's CPU kernels move the running statistics in the backward only.
    assert (bn.running_mean.data().asnumpy() == 0).all()
    y.backward()
    np.testing.assert_allclose(bn.running_mean.data().asnumpy(), 0.2 * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.data().asnumpy(), 0.8 + 0.2 * var, rtol=1e-5)


def test_deferred_channels_and_errors() -> None:
    bn = nn.BatchNorm()
    bn.initialize()
    with pytest.raises(MXNetError, match="axis=1 is out of range"):
        bn(nd.ones((4,)))
    assert bn.gamma.shape == (0,)  # a failed first call completes nothing
    assert bn(nd.ones((2, 5, 3))).shape == (2, 5, 3)
    assert bn.gamma.shape == bn.running_var.shape == (5,)
    assert repr(bn) == ("BatchNorm(axis=1, eps=1e-05, momentum=0.9, fix_gamma=False, "
                        "use_global_stats=False, in_channels=5)")
    with pytest.raises(TypeError, match="momentum must be a real number"):
        nn.BatchNorm(momentum="0.9")
    with pytest.raises(MXNetError, match="epsilon must be >= 0"):
        nn.BatchNorm(epsilon=-1e-5)
    with pytest.raises(MXNetError, match="gamma must have shape \\(3,\\)"):
        nd.BatchNorm(nd.ones((2, 3)), nd.ones((2,)), nd.zeros((3,)), nd.zeros((3,)),
                     nd.ones((3,)))
    with pytest.raises(TypeError, match="moving_var must be an NDArray"):
        nd.BatchNorm(nd.ones((2, 3)), nd.ones((3,)), nd.zeros((3,)), nd.zeros((3,)), None)


# -- a generator trained as MXNet's DCGAN example trains one ----------------------------
def generator(prefix: str = None) -> nn.HybridSequential:
    """The fixture script's generator, line for line."""
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Conv2DTranspose(16, 4, 1, 0, use_bias=False, in_channels=8))
        net.add(nn.BatchNorm())
        net.add(nn.Activation("relu"))
        net.add(nn.Conv2DTranspose(8, 4, 2, 1, use_bias=False, in_channels=16))
        net.add(nn.BatchNorm())
        net.add(nn.Activation("relu"))
        net.add(nn.Conv2DTranspose(3, 4, 2, 1, use_bias=False, in_channels=8))
        net.add(nn.Activation("tanh"))
    return net


@pytest.mark.parametrize("impl", ["onednn", "numpy"])
def test_generator_training_matches_mxnet(impl: str) -> None:
    if impl == "onednn" and not mxdeconv.onednn_enabled():
        pytest.skip("oneDNN path disabled")
    fixture = np.load(DATA / "generator.npz")
    net = generator()
    net.load_parameters(str(DATA / "generator_init.params"))
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01,
                                                           "beta1": 0.5})
    l2 = gluon.loss.L2Loss()
    z, target = nd.array(fixture["z"]), nd.array(fixture["target"])
    losses = []
    with nullcontext() if impl == "onednn" else mxdeconv.use_impl("numpy"):
        for _ in range(len(fixture["losses"])):
            with autograd.record():
                loss = l2(net(z), target)
            loss.backward()
            trainer.step(z.shape[0])
            losses.append(loss.mean().asscalar())
        image = net(z).asnumpy()
    np.testing.assert_allclose(losses, fixture["losses"], rtol=1e-4, atol=1e-5)
    final = nd.load(str(DATA / "generator_final.params"))
    initial = nd.load(str(DATA / "generator_init.params"))
    mine = {key: p.data().asnumpy() for key, p in net._structural().items()}
    assert list(mine) == list(final)
    for key, values in mine.items():
        want = final[key].asnumpy()
        assert np.abs(want - initial[key].asnumpy()).max() > 1e-3, f"{key} did not move"
        np.testing.assert_allclose(values, want, rtol=1e-4, atol=1e-4, err_msg=key)
    np.testing.assert_allclose(image, fixture["image"], rtol=1e-4, atol=1e-4)


def test_generator_names_and_files_are_mxnets(tmp_path: Path) -> None:
    names = json.loads(str(np.load(DATA / "generator.npz")["names"]))
    net = generator(prefix="hybridsequential0_")
    assert list(net.collect_params()) == names["collect_params"]
    assert list(net._structural()) == names["save_parameters"]
    net.load_parameters(str(DATA / "generator_final.params"))
    net.save_parameters(str(tmp_path / "g.params"))
    assert (tmp_path / "g.params").read_bytes() == (DATA / "generator_final.params").read_bytes()
    # collect_params().save / .load: MXNet's full names, the same bytes.
    other = generator(prefix="hybridsequential0_")
    other.collect_params().load(str(DATA / "generator_collect.params"))
    other.collect_params().save(str(tmp_path / "c.params"))
    assert (tmp_path / "c.params").read_bytes() == \
        (DATA / "generator_collect.params").read_bytes()
    for key, param in other._structural().items():
        np.testing.assert_array_equal(param.data().asnumpy(),
                                      net._structural()[key].data().asnumpy())


@pytest.mark.skipif(helpers.mxnet_python() is None,
                    reason="no MXNet 1.9.1 venv here (CI has none; the committed fixtures "
                           "are what it recorded)")
def test_fixtures_are_what_mxnet_computes(tmp_path: Path) -> None:
    """Reruns the fixture script under real MXNet 1.9.1 into a temporary folder."""
    subprocess.run([helpers.mxnet_python(), str(helpers.FIXTURE_SCRIPTS /
                                                 "make_mxnet_batchnorm_fixtures.py"),
                    str(tmp_path)], check=True, capture_output=True, timeout=600)
    for name in ("cases.npz", "generator.npz"):
        now, then = np.load(tmp_path / name), np.load(DATA / name)
        assert sorted(now.files) == sorted(then.files)
        for key in then.files:
            if now[key].dtype.kind in "US":
                assert str(now[key]) == str(then[key]), key
            else:
                np.testing.assert_allclose(now[key], then[key], rtol=1e-6, atol=1e-6,
                                           err_msg=f"{name}: {key}")
    for name in ("generator_init.params", "generator_final.params",
                 "generator_collect.params"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name
