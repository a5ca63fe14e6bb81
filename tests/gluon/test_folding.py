"""Inference folding of a transposed convolution followed by BatchNorm in a
Sequential (mxdeconv.gluon.folding, on by default): the same result as the two layers run one
after the other (computed here with folding off), refreshed whenever any of the
six arrays changes, and never while training or recording."""
from __future__ import annotations

import numpy as np
import pytest

import mxdeconv as mx
from mxdeconv import autograd, gluon, nd
from mxdeconv.gluon import folding, nn


@pytest.fixture(autouse=True)
def folding_on():
    """These tests turn folding on (whatever the environment chose) and restore
    the setting."""
    previous, folding.fold_batchnorm = folding.fold_batchnorm, True
    yield
    folding.fold_batchnorm = previous


def pair(conv: nn.Block, bn: nn.BatchNorm, tail: bool = True) -> nn.HybridSequential:
    net = nn.HybridSequential()
    net.add(conv, bn)
    if tail:
        net.add(nn.Activation("relu"))
    net.initialize(mx.init.Normal(0.3))
    rng = np.random.RandomState(0)
    channels = bn.gamma.shape[0]
    for key, low, high in (("gamma", 0.5, 1.5), ("beta", -0.5, 0.5),
                           ("running_mean", -0.5, 0.5), ("running_var", 0.5, 2.0)):
        getattr(bn, key).set_data(rng.uniform(low, high, channels))
    return net


def unfolded(net: nn.Sequential, x: nd.NDArray) -> np.ndarray:
    previous, folding.fold_batchnorm = folding.fold_batchnorm, False
    try:
        return net(x).asnumpy()
    finally:
        folding.fold_batchnorm = previous


def no_batchnorm_call(bn: nn.BatchNorm) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("BatchNorm ran: the pair was not folded")
    bn.hybrid_forward = refuse


CASES = {
    "2d": (lambda: nn.Conv2DTranspose(6, 4, strides=2, padding=1, in_channels=4,
                                      use_bias=False), (2, 4, 5, 5), {}),
    "2d bias groups": (lambda: nn.Conv2DTranspose(6, 3, strides=2, groups=2, in_channels=4),
                       (2, 4, 3, 3), {}),
    "1d no scale": (lambda: nn.Conv1DTranspose(6, 5, strides=3, in_channels=3),
                    (2, 3, 7), {"scale": False, "epsilon": 1e-3}),
    "3d groups": (lambda: nn.Conv3DTranspose(4, 2, strides=2, groups=4, in_channels=4,
                                             use_bias=False), (1, 4, 2, 3, 2), {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_folded_equals_unfolded(name: str) -> None:
    make, shape, kwargs = CASES[name]
    conv = make()
    bn = nn.BatchNorm(in_channels=conv._channels, **kwargs)
    net = pair(conv, bn)
    x = nd.array(np.random.RandomState(1).normal(0, 1, shape))
    expected = unfolded(net, x)
    no_batchnorm_call(bn)
    got = net(x).asnumpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_folded_arrays_follow_every_change() -> None:
    conv = nn.Conv2DTranspose(4, 4, strides=2, padding=1, in_channels=3)
    bn = nn.BatchNorm(in_channels=4)
    net = pair(conv, bn, tail=False)
    x = nd.array(np.random.RandomState(2).normal(0, 1, (4, 3, 3, 3)))
    first = net(x).asnumpy()
    np.testing.assert_allclose(first, unfolded(net, x), rtol=1e-5, atol=1e-5)
    # A training step: batch statistics while recording (not folded), then the
    # backward moves the running statistics and the Trainer the weights.
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    with autograd.record():
        loss = (net(x) ** 2).mean()
    loss.backward()
    trainer.step(1)
    after = net(x).asnumpy()
    assert np.abs(after - first).max() > 1e-3
    np.testing.assert_allclose(after, unfolded(net, x), rtol=1e-5, atol=1e-5)
    bn.gamma.set_data(np.full(4, 3.0))              # a new array
    np.testing.assert_allclose(net(x).asnumpy(), unfolded(net, x), rtol=1e-5, atol=1e-5)
    view = np.asarray(conv.weight.data())          # exposed memory, written unseen
    view *= -1
    np.testing.assert_allclose(net(x).asnumpy(), unfolded(net, x), rtol=1e-5, atol=1e-5)


def test_not_folded_in_training_recording_or_with_an_activation() -> None:
    conv = nn.Conv2DTranspose(2, 3, in_channels=2, activation="relu")
    bn = nn.BatchNorm(in_channels=2)
    net = pair(conv, bn)
    calls = []
    original = bn.hybrid_forward
    bn.hybrid_forward = lambda *a, **k: calls.append(1) or original(*a, **k)
    x = nd.ones((1, 2, 2, 2))
    net(x)                                   # activation inside the conv: no folding
    plain = pair(nn.Conv2DTranspose(2, 3, in_channels=2), nn.BatchNorm(in_channels=2))
    plain_bn = plain[1]
    plain_original = plain_bn.hybrid_forward
    plain_bn.hybrid_forward = lambda *a, **k: calls.append(2) or plain_original(*a, **k)
    with autograd.record(train_mode=False):  # recording: gradients need the originals
        plain(x)
    with autograd.train_mode():
        plain(x)
    assert calls == [1, 2, 2]



@pytest.mark.parametrize("value, expected", [(None, "True"), ("0", "False"), ("1", "True")])
def test_folding_is_on_by_default_and_the_environment_opts_out(value, expected):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "MXDECONV_FOLD_BATCHNORM"}
    if value is not None:
        env["MXDECONV_FOLD_BATCHNORM"] = value
    run = subprocess.run([sys.executable, "-c", "from mxdeconv.gluon import folding; "
                          "print(folding.fold_batchnorm)"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == expected
