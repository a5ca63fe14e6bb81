#!/usr/bin/env python
"""Record two MXNet 1.9.1 Gluon programs that ``tests/package/test_porting.py`` and
``docs/porting.rst`` port to mxdeconv: a short training loop and a DCGAN
generator's inference from its ``.params`` file.

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh),
from the repository root, in a few seconds::

    .venv-mxnet/bin/python scripts/make_mxnet_porting_fixtures.py

Writes into ``tests/data/porting/`` (about 100 KB in all):

* ``train_init.params``, ``train_final.params``: ``net.save_parameters`` of a
  two-layer deconvolution generator (``nn.HybridSequential``: 8 -> 16 channels,
  k4 s1, relu; 16 -> 3, k4 s2 p1, tanh) before and after ``STEPS`` manual SGD
  steps on a mean squared error, written the way MXNet users write them;
* ``train.npz``: the fixed ``z`` and ``target``, ``lr``, and each step's loss as
  MXNet computed it (float32);
* ``dcgan_g.params``: a DCGAN-style generator (nz=8 -> 32 -> 16 -> 8 -> 3,
  k4 s1 p0 then k4 s2 p1, relu between, tanh at the end), BatchNorm folded
  into the weights and biases (mxdeconv has no BatchNorm), saved with
  ``save_parameters``;
* ``dcgan_io.npz``: a fixed latent batch ``z`` and MXNet's output ``image``.

MXNet runs its default (MKL-DNN) float32 path.  Any change here changes the
fixtures; the test reads every number it checks from them.
"""
import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, nd
from mxnet.gluon import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "porting")
SEED = 20261203
STEPS = 5
LR = 0.5


def train_fixture(rng):
    """The training loop of tests/package/test_porting.py, in MXNet."""
    net = nn.HybridSequential()
    net.add(nn.Conv2DTranspose(16, 4, strides=1, in_channels=8, use_bias=True,
                               activation="relu"),
            nn.Conv2DTranspose(3, 4, strides=2, padding=1, in_channels=16,
                               activation="tanh"))
    # Weights large enough that tanh is not linear; biases zero (Gluon's default)
    # until the first step moves them.
    net.initialize(mx.init.Uniform(0.3))
    net.save_parameters(os.path.join(OUT, "train_init.params"))
    z = rng.uniform(-1, 1, (4, 8, 2, 2)).astype(np.float32)
    target = rng.uniform(-1, 1, (4, 3, 10, 10)).astype(np.float32)

    # -- the loop as MXNet users write it (the test runs the same lines) ------
    z_nd, target_nd = nd.array(z), nd.array(target)
    losses = []
    for _ in range(STEPS):
        with autograd.record():
            loss = ((net(z_nd) - target_nd) ** 2).mean()
        loss.backward()
        for p in net.collect_params().values():
            p.data()[:] = p.data() - LR * p.grad()
        losses.append(loss.asscalar())
    # ---------------------------------------------------------------------------
    net.save_parameters(os.path.join(OUT, "train_final.params"))
    np.savez(os.path.join(OUT, "train.npz"), z=z, target=target, lr=np.float32(LR),
             losses=np.array(losses, dtype=np.float32))
    print(f"training losses: {losses}", file=sys.stderr)


def dcgan_generator():
    """nz=8 -> 32 -> 16 -> 8 -> 3 channels, 1x1 -> 4x4 -> 8x8 -> 16x16 -> 32x32."""
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


def dcgan_fixture(rng):
    net = dcgan_generator()
    net.initialize(mx.init.Normal(0.2))
    # Stand-ins for a trained generator whose BatchNorm was folded in: the shift
    # goes to the bias.
    for name, p in net.collect_params().items():
        if name.endswith("bias"):
            p.set_data(nd.array(rng.uniform(-0.2, 0.2, p.shape).astype(np.float32)))
    net.save_parameters(os.path.join(OUT, "dcgan_g.params"))
    z = rng.normal(0, 1, (2, 8, 1, 1)).astype(np.float32)
    image = net(nd.array(z)).asnumpy()
    np.savez_compressed(os.path.join(OUT, "dcgan_io.npz"), z=z, image=image)
    print(f"dcgan image: shape {image.shape}, |mean| {np.abs(image).mean():.3f}, "
          f"saturated (|y| > 0.99): {(np.abs(image) > 0.99).mean():.3f}", file=sys.stderr)


def main():
    os.makedirs(OUT, exist_ok=True)
    mx.random.seed(SEED)
    rng = np.random.RandomState(SEED)
    train_fixture(rng)
    dcgan_fixture(rng)
    print(f"wrote {sorted(os.listdir(OUT))} with MXNet {mx.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
