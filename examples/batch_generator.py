"""DCGAN's generator as a mxdeconv Gluon block, and the pieces of a batch
inference job the cluster recipes share (examples/dask_inference.py,
examples/ray_inference.py): the network, one partition's images, the
partitions."""
from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

import mxdeconv
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


def warmed(net: Any, latent: np.ndarray) -> int:
    """A worker's first calls of ``net`` (one partition), then every layer pass
    still being tuned tuned to the end; how many it tuned (0 where the plan
    cache held them tuned already)."""
    generate(net, latent)
    return mxdeconv.finish_tuning()


def partitions(latent: np.ndarray, size: int) -> List[np.ndarray]:
    return [latent[i:i + size] for i in range(0, len(latent), size)]


def latent_partitions(images: int, size: int, latent: int = 100,
                      seed: int = 1) -> List[np.ndarray]:
    """``images`` latent vectors (N, latent, 1, 1) from ``seed``, in partitions of ``size``."""
    vectors = np.random.default_rng(seed).standard_normal(
        (images, latent, 1, 1)).astype(np.float32)
    return partitions(vectors, size)


def best_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The fastest of ``repeats`` timed runs of ``run``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def on_this_process(net: Any, parts: Sequence[np.ndarray], threads: Optional[int] = None
                    ) -> np.ndarray:
    """Every partition here, in order, after the first one's calls and tuning
    to the end (``threads``: on that many, the count restored after)."""
    before = mxdeconv.get_num_threads()
    try:
        if threads is not None:
            mxdeconv.set_num_threads(threads)
        generate(net, parts[0])
        mxdeconv.finish_tuning()
        return np.concatenate([generate(net, p) for p in parts])
    finally:
        if threads is not None:
            mxdeconv.set_num_threads(before)


def report(images: int, size: int, repeats: int, single: Optional[float],
           workers: str, best: float) -> None:
    """The throughputs, as the recipes print them."""
    print(f"{images} images of 64x64 in partitions of {size}")
    if single is not None:
        print(f"1 process x {mxdeconv.get_num_threads()} threads: {single:.2f} s, "
              f"{images / single:.0f} images/s (best of {repeats})")
    print(f"{workers}: {best:.2f} s, {images / best:.0f} images/s (best of {repeats})")
