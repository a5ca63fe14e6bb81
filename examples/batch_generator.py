"""DCGAN's generator as a mxdeconv Gluon block, and the pieces of a batch
inference job the cluster recipes share (examples/dask_inference.py,
examples/ray_inference.py): the network, one partition's images, the
partitions."""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

from mxdeconv import gluon, nd

#: (channels, kernel, stride, padding, activation) per layer, from a 1x1 latent.
DCGAN = [(512, 4, 1, 0, "relu"), (256, 4, 2, 1, "relu"), (128, 4, 2, 1, "relu"),
         (64, 4, 2, 1, "relu"), (3, 4, 2, 1, "tanh")]


def make_generator(latent: int = 100, layers: Sequence[tuple] = DCGAN,
                   seed: int = 0) -> gluon.HybridSequential:
    """The generator, its weights drawn from ``seed`` (DCGAN's N(0, 0.02))."""
    net = gluon.HybridSequential()
    channels = latent
    for out, kernel, stride, pad, act in layers:
        net.add(gluon.Conv2DTranspose(out, kernel, strides=stride, padding=pad,
                                      in_channels=channels, activation=act))
        channels = out
    net.initialize()
    rng = np.random.default_rng(seed)
    for param in net.collect_params().values():
        param.set_data(nd.array((0.02 * rng.standard_normal(param.shape)).astype(np.float32)))
    return net


def generate(net: Any, latent: np.ndarray) -> np.ndarray:
    """One partition: images from latent vectors (N, latent, 1, 1), as NumPy."""
    return net(nd.array(latent)).asnumpy()


def partitions(latent: np.ndarray, size: int) -> List[np.ndarray]:
    return [latent[i:i + size] for i in range(0, len(latent), size)]
