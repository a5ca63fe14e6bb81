"""MXNet 1.9.1 programs ported to mxdeconv, checked against what MXNet computed
(fixtures from ``scripts/fixtures/make_mxnet_porting_fixtures.py``, in tests/data/porting):

* a short training loop: a two-layer deconvolution generator, loaded from MXNet's
  initial ``.params``, trained by the same manual SGD steps (the same source
  lines as the fixture script's), must give MXNet's loss at every step and
  MXNet's final weights, on the oneDNN path and on the NumPy path;
* the worked port of ``docs/porting.rst``: a DCGAN generator's inference from
  MXNet's ``.params`` file must give MXNet's image;
* a Gluon training loop with ``gluon.Trainer`` and ``gluon.loss``
  (``tests/data/porting/trainer_loop.py``, recorded by
  ``scripts/fixtures/make_mxnet_trainer_fixtures.py``), run from its own text with only
  the import lines replaced, must give MXNet's loss at each of its 25 steps and
  MXNet's final weights.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import ContextManager, Dict, List, Tuple

import numpy as np
import pytest

import mxdeconv
from mxdeconv import autograd, nd
from mxdeconv.gluon import nn  # MXNet: from mxnet.gluon import nn
import helpers

DATA = helpers.DATA / "porting"

# float32 tolerances.  A forward sums ~130 (training net) or ~500 (DCGAN)
# float32 products per output, in an order that oneDNN, MXNet's MKL-DNN and
# NumPy choose differently (and that changes with the CPU's ISA): about 1e-6
# relative each.  Five SGD steps carry that through the gradients; values are
# of order 0.1-1.  Measured on the development machine (AVX-512): losses and
# weights within 6e-8 of MXNet's on both paths, the DCGAN image within 6e-7.
# 1e-5 absolute leaves room for other ISAs while a wrong gradient, a missed
# step or a wrong lr is off by >= 1e-3 (every weight moves by > 1e-2).
LOSS_ATOL = 1e-5
WEIGHT_ATOL = 1e-5
IMAGE_ATOL = 1e-5


def impl_scope(impl: str) -> ContextManager[None]:
    return nullcontext() if impl == "onednn" else mxdeconv.use_impl("numpy")


def train_like_mxnet(impl: str) -> Tuple[List[float], Dict[str, np.ndarray], List[str]]:
    """The fixture script's loop, line for line; returns the losses, the final
    parameters by structural name and the implementations that ran."""
    fixture = np.load(DATA / "train.npz")
    lr = float(fixture["lr"])
    steps = len(fixture["losses"])
    ran = set()
    net = nn.HybridSequential()
    net.add(nn.Conv2DTranspose(16, 4, strides=1, in_channels=8, use_bias=True,
                               activation="relu"),
            nn.Conv2DTranspose(3, 4, strides=2, padding=1, in_channels=16,
                               activation="tanh"))
    net.load_parameters(str(DATA / "train_init.params"))
    z_nd, target_nd = nd.array(fixture["z"]), nd.array(fixture["target"])
    losses = []
    with impl_scope(impl):
        for _ in range(steps):
            with autograd.record():
                loss = ((net(z_nd) - target_nd) ** 2).mean()
                ran.add(mxdeconv.last_impl())
            loss.backward()
            for p in net.collect_params().values():
                p.data()[:] = p.data() - lr * p.grad()
            losses.append(loss.asscalar())
    final = {key: p.data().asnumpy() for key, p in net._structural().items()}
    return losses, final, sorted(ran)


@pytest.mark.parametrize("impl", ["onednn", "numpy"])
def test_training_loop_reproduces_mxnet(impl: str) -> None:
    if impl == "onednn" and not mxdeconv.onednn_enabled():
        pytest.skip("oneDNN path disabled")
    expected_losses = np.load(DATA / "train.npz")["losses"]
    expected_final = nd.load(str(DATA / "train_final.params"))
    initial = nd.load(str(DATA / "train_init.params"))
    losses, final, ran = train_like_mxnet(impl)
    assert ran == [impl]
    loss_diff = np.abs(np.array(losses) - expected_losses)
    assert loss_diff.max() <= LOSS_ATOL, (losses, expected_losses.tolist())
    assert sorted(final) == sorted(expected_final) == ["0.bias", "0.weight", "1.bias",
                                                       "1.weight"]
    for key, values in final.items():
        want = expected_final[key].asnumpy()
        moved = np.abs(want - initial[key].asnumpy()).max()
        assert moved > 100 * WEIGHT_ATOL, f"{key} barely moved: the check would be void"
        np.testing.assert_allclose(values, want, rtol=0, atol=WEIGHT_ATOL, err_msg=key)
    # The losses fall, as they did in MXNet: the loop trains.
    assert all(np.diff(losses) < 0)


def dcgan_generator() -> nn.HybridSequential:
    """docs/porting.rst's port: the fixture script's generator, line for line."""
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2DTranspose(32, 4, strides=1, padding=0, in_channels=8,
                                   activation="relu"),
                nn.Conv2DTranspose(16, 4, strides=2, padding=1, in_channels=32,
                                   activation="relu"),
                nn.Conv2DTranspose(8, 4, strides=2, padding=1, in_channels=16,
                                   activation="relu"),
                nn.Conv2DTranspose(3, 4, strides=2, padding=1, in_channels=8,
                                   activation="tanh"))
    return net


@pytest.mark.parametrize("impl", ["onednn", "numpy"])
def test_dcgan_inference_reproduces_mxnet(impl: str) -> None:
    if impl == "onednn" and not mxdeconv.onednn_enabled():
        pytest.skip("oneDNN path disabled")
    io = np.load(DATA / "dcgan_io.npz")
    net = dcgan_generator()
    net.load_parameters(str(DATA / "dcgan_g.params"))
    with impl_scope(impl):
        image = net(nd.array(io["z"])).asnumpy()
        assert mxdeconv.last_impl() == impl
    assert image.shape == io["image"].shape == (2, 3, 32, 32)
    np.testing.assert_allclose(image, io["image"], rtol=0, atol=IMAGE_ATOL)


def test_sequential_round_trips_mxnet_names(tmp_path: Path) -> None:
    """save_parameters writes MXNet's structural names, byte for byte MXNet's file."""
    net = dcgan_generator()
    net.load_parameters(str(DATA / "dcgan_g.params"))
    path = tmp_path / "g.params"
    net.save_parameters(str(path))
    assert path.read_bytes() == (DATA / "dcgan_g.params").read_bytes()


def test_sequential_container_rules() -> None:
    net = dcgan_generator()
    assert len(net) == 4 and isinstance(net[3], nn.Conv2DTranspose)
    head = net[:2]
    assert type(head) is nn.HybridSequential and len(head) == 2 and head[0] is net[0]
    # name_scope: the container's prefix, counts of its own (as MXNet names them).
    assert [p.name[len(net.prefix):] for p in net.collect_params().values()][:2] == [
        "conv0_weight", "conv0_bias"]
    with pytest.raises(TypeError, match="block"):
        net.add(np.zeros(3))
    assert len(net) == 4  # nothing added
    with pytest.raises(TypeError, match="key"):
        net["0"]
    with pytest.raises(mxdeconv.MXNetError, match="params"):
        nn.Sequential(params={})


def test_sequential_load_is_all_or_nothing(tmp_path: Path) -> None:
    """A file for another network (here: a layer too few) changes no parameter."""
    net = dcgan_generator()
    net.initialize()
    before = {k: p.data().asnumpy().copy() for k, p in net._structural().items()}
    arrays = nd.load(str(DATA / "dcgan_g.params"))
    del arrays["3.weight"]
    path = tmp_path / "short.params"
    nd.save(str(path), arrays)
    with pytest.raises(mxdeconv.MXNetError, match="3.weight"):
        net.load_parameters(str(path))
    assert all((p.data().asnumpy() == before[k]).all() for k, p in net._structural().items())
    net.load_parameters(str(path), allow_missing=True)
    assert (net[0].weight.data().asnumpy() == arrays["0.weight"].asnumpy()).all()


# -- a Trainer + loss training loop, run from MXNet's program text ------------------------
MXNET_IMPORTS = ("import mxnet as mx\n"
                 "from mxnet import autograd, gluon, nd\n"
                 "from mxnet.gluon import nn\n")
MXDECONV_IMPORTS = ("import mxdeconv as mx\n"
                    "from mxdeconv import autograd, gluon, nd\n"
                    "from mxdeconv.gluon import nn\n")


def ported_trainer_loop() -> Dict[str, object]:
    """tests/data/porting/trainer_loop.py with its import lines (and nothing else)
    replaced by mxdeconv's, executed: its functions by name."""
    text = (DATA / "trainer_loop.py").read_text()
    start = text.index("# --- imports")
    end = text.index("# --- end of imports ---")
    assert text[start:end].splitlines(keepends=True)[1:] == MXNET_IMPORTS.splitlines(
        keepends=True)
    ported = text[:start] + text[start:end].replace(MXNET_IMPORTS, MXDECONV_IMPORTS) + text[end:]
    assert ported.replace(MXDECONV_IMPORTS, MXNET_IMPORTS) == text  # only the imports differ
    namespace: Dict[str, object] = {"__name__": "trainer_loop"}
    exec(compile(ported, str(DATA / "trainer_loop.py"), "exec"), namespace)
    return namespace


@pytest.mark.parametrize("impl", ["onednn", "numpy"])
def test_trainer_loop_reproduces_mxnet(impl: str) -> None:
    if impl == "onednn" and not mxdeconv.onednn_enabled():
        pytest.skip("oneDNN path disabled")
    program = ported_trainer_loop()
    fixture = np.load(DATA / "trainer.npz")
    net = program["build_generator"]()
    net.load_parameters(str(DATA / "trainer_init.params"))
    with impl_scope(impl):
        losses = program["train"](net, fixture["z"], fixture["target"], len(fixture["losses"]))
        assert mxdeconv.last_impl() == impl
    # Measured: losses within 1e-8, weights within 5e-7 of MXNet's on both paths
    # (Adam divides by the gradients' root mean square, which amplifies rounding a
    # little in weights whose gradients are tiny).
    np.testing.assert_allclose(losses, fixture["losses"], rtol=0, atol=LOSS_ATOL)
    assert losses[-1] < 0.5 * losses[0]
    expected_final = nd.load(str(DATA / "trainer_final.params"))
    initial = nd.load(str(DATA / "trainer_init.params"))
    final = {key: p.data().asnumpy() for key, p in net._structural().items()}
    assert sorted(final) == sorted(expected_final)
    for key, values in final.items():
        want = expected_final[key].asnumpy()
        assert np.abs(want - initial[key].asnumpy()).max() > 100 * WEIGHT_ATOL, key
        np.testing.assert_allclose(values, want, rtol=0, atol=WEIGHT_ATOL, err_msg=key)
