"""Batch inference with a mxdeconv Gluon generator on Dask: one process per
core, one thread each, one plan cache for all of them.

The generator (a ``HybridSequential`` of ``Conv2DTranspose`` layers, DCGAN's
100 -> 512 -> 256 -> 128 -> 64 -> 3) is pickled to every worker once
(``client.scatter(..., broadcast=True)``); each worker maps it over its
partitions of the latent vectors.  Dask's nanny starts each worker with
``OMP_NUM_THREADS=1`` (its ``distributed.nanny.pre-spawn-environ``), so each
worker's oneDNN runs one thread; ``MXDECONV_CACHE_DIR``, set before the
cluster starts, is inherited by the workers, which share one plan cache (the
file is merged under a lock); ``warm_up`` tunes each layer on one worker
first, so that the others find it tuned there: once per node, not once per
worker.

Run (``pip install "mxdeconv[dask]"``)::

    python examples/dask_inference.py                  # 2 workers x 1 thread
    python examples/dask_inference.py --compare        # and 1 process, its own threads
"""
from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any, List, Sequence

import numpy as np

import mxdeconv
from batch_generator import (DCGAN, best_seconds, generate, latent_partitions,  # noqa: F401
                             make_generator, on_this_process, partitions, report, warmed)

def on_dask(client: Any, net: Any, parts: Sequence[np.ndarray]) -> np.ndarray:
    """Every partition through the generator on the cluster, in order."""
    shared = client.scatter(net, broadcast=True)     # pickled to each worker once
    futures = client.map(generate, [shared] * len(parts), parts, pure=False)
    return np.concatenate(client.gather(futures))


def warm_up(client: Any, net: Any, part: np.ndarray) -> List[int]:
    """Each worker's first calls (a layer's first calls choose and check its
    plans; later ones would tune), every layer tuned once for the node: on
    one worker first, whose tuned plans land in the shared plan cache, then
    on the others at once, which find them there.  Returns how many layer
    passes each worker tuned, the first worker's first."""
    workers = list(client.scheduler_info()["workers"])
    shared = client.scatter(net, broadcast=True)
    tuned = [client.submit(warmed, shared, part, workers=workers[:1], pure=False).result()]
    return tuned + client.gather([client.submit(warmed, shared, part, workers=[w], pure=False)
                                  for w in workers[1:]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--partition", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compare", action="store_true",
                        help="also time this process alone (its default threads)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # One plan cache for the whole node (set before the workers start).
    os.environ.setdefault("MXDECONV_CACHE_DIR", tempfile.mkdtemp(prefix="mxdeconv-plans-"))
    from distributed import Client, LocalCluster

    net = make_generator()
    parts = latent_partitions(args.images, args.partition)
    single = None
    if args.compare:
        on_this_process(net, parts[:1])
        single = best_seconds(lambda: [generate(net, p) for p in parts], args.repeats)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        warm_up(client, net, parts[0])
        threads = client.run(mxdeconv.get_num_threads)
        best = best_seconds(lambda: on_dask(client, net, parts), args.repeats)
    report(args.images, args.partition, args.repeats, single,
           f"{args.workers} Dask workers x {sorted(threads.values())} thread(s)", best)

if __name__ == "__main__":
    main()
