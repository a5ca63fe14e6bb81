"""Batch inference with a mxdeconv Gluon generator on Ray: one worker process
per CPU, one thread each, one plan cache for all of them.

The generator (examples/batch_generator.py, DCGAN's 100 -> 512 -> 256 -> 128
-> 64 -> 3) goes into Ray's object store once (``ray.put``); each task, one
CPU, maps it over one partition of the latent vectors.  Ray starts a task of
``num_cpus=1`` with ``OMP_NUM_THREADS=1`` (when the driver set none), so each
worker's oneDNN runs one thread.  ``MXDECONV_CACHE_DIR`` goes to every worker
in the job's ``runtime_env``: they share one plan cache (the file is merged
under a lock); ``warm_up`` tunes each layer in one task first, so that the
workers find it tuned there: once per node, not once per worker.  The workers
import this folder's modules (the tasks' code) through ``PYTHONPATH``, given
in the same ``runtime_env``.

Run (``pip install "mxdeconv[ray]"``)::

    python examples/ray_inference.py                  # 2 workers x 1 thread
    python examples/ray_inference.py --compare        # and 1 process, its own threads
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

import mxdeconv
from batch_generator import (best_seconds, generate, latent_partitions, make_generator,  # noqa: F401
                             on_this_process, partitions, report, warmed)


def runtime_env(cache_dir: str) -> Dict[str, Any]:
    """What every worker of the job gets: the node's plan cache, and this
    folder on its import path."""
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"MXDECONV_CACHE_DIR": cache_dir, "PYTHONPATH": path}}


def _tasks() -> Any:
    """The remote functions (made after ``import ray``: Ray is an optional extra)."""
    import ray

    @ray.remote(num_cpus=1)
    def generate_task(net: Any, latent: np.ndarray) -> np.ndarray:
        return generate(net, latent)

    @ray.remote(num_cpus=1)
    def warm_task(net: Any, latent: np.ndarray) -> Tuple[int, int]:
        return os.getpid(), warmed(net, latent)

    @ray.remote(num_cpus=1)
    def threads_task() -> tuple:
        return os.getpid(), mxdeconv.get_num_threads(), str(mxdeconv.plan_cache_path())
    return generate_task, warm_task, threads_task


def on_ray(net_ref: Any, parts: Sequence[np.ndarray]) -> np.ndarray:
    """Every partition through the generator (in the object store as
    ``net_ref``) on the cluster, in order."""
    import ray
    generate_task = _tasks()[0]
    return np.concatenate(ray.get([generate_task.remote(net_ref, part) for part in parts]))


def warm_up(net_ref: Any, part: np.ndarray, workers: int) -> List[Tuple[int, int]]:
    """Each worker's first calls (later calls would tune), every layer tuned
    once for the node: one task first, whose checked and tuned plans land in
    the shared plan cache, then one task per worker at once, which find them
    there (Ray runs them on whichever workers are free, the first one's
    process too).  Returns (pid, layer passes tuned) per task, the first
    task's first."""
    import ray
    warm_task = _tasks()[1]
    first = ray.get(warm_task.remote(net_ref, part))
    return [first] + ray.get([warm_task.remote(net_ref, part) for _ in range(workers)])


def workers_info(workers: int) -> List[tuple]:
    """(pid, oneDNN threads, plan cache) of the workers that ran the tasks."""
    import ray
    threads_task = _tasks()[2]
    return ray.get([threads_task.remote() for _ in range(workers)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--partition", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compare", action="store_true",
                        help="also time this process alone (its default threads)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import ray

    cache = os.environ.setdefault("MXDECONV_CACHE_DIR",
                                  tempfile.mkdtemp(prefix="mxdeconv-plans-"))
    net = make_generator()
    parts = latent_partitions(args.images, args.partition)
    single = None
    if args.compare:
        on_this_process(net, parts[:1])
        single = best_seconds(lambda: [generate(net, p) for p in parts], args.repeats)
    ray.init(num_cpus=args.workers, include_dashboard=False, runtime_env=runtime_env(cache),
             log_to_driver=False)
    try:
        net_ref = ray.put(net)
        warm_up(net_ref, parts[0], args.workers)
        threads = sorted({info[1] for info in workers_info(args.workers)})
        best = best_seconds(lambda: on_ray(net_ref, parts), args.repeats)
    finally:
        ray.shutdown()
    report(args.images, args.partition, args.repeats, single,
           f"{args.workers} Ray workers x {threads} thread(s)", best)

if __name__ == "__main__":
    main()
