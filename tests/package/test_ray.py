"""The Ray recipe (examples/ray_inference.py, docs/shared_machines.rst): a
Gluon generator put once in Ray's object store, mapped over partitions by
tasks of one CPU on 2 worker processes of 1 thread each, one plan cache for
all; the result is bitwise the one this process computes on one thread.
Skipped without ``ray`` (the ``ray`` extra; CI runs the Dask recipe)."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import mxdeconv

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'mxdeconv[ray]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import ray_inference as recipe  # noqa: E402

#: A small generator of the same shape as DCGAN's (the test stays short).
LAYERS = [(32, 4, 1, 0, "relu"), (16, 4, 2, 1, "relu"), (3, 4, 2, 1, "tanh")]
LATENT = 16


def test_two_workers_give_the_single_process_result_bitwise():
    net = recipe.make_generator(latent=LATENT, layers=LAYERS, seed=3)
    latent = np.random.default_rng(1).standard_normal((48, LATENT, 1, 1)).astype(np.float32)
    parts = recipe.partitions(latent, 8)
    cache = os.environ["MXDECONV_CACHE_DIR"]
    # The workers run one thread each: the reference too, with the plans
    # tuned to the end here and kept in the plan cache the workers read.
    expected = recipe.on_this_process(net, parts, threads=1)

    ray.init(num_cpus=2, include_dashboard=False, runtime_env=recipe.runtime_env(cache),
             log_to_driver=False)
    try:
        net_ref = ray.put(net)
        pids = {pid for pid, _ in recipe.warm_up(net_ref, parts[0], 2)}
        infos = recipe.workers_info(4)
        got = recipe.on_ray(net_ref, parts)
    finally:
        ray.shutdown()
    assert os.getpid() not in pids and len({pid for pid, _, _ in infos}) <= 2
    assert {threads for _, threads, _ in infos} == {1}
    assert {path for _, _, path in infos} == {str(mxdeconv.plan_cache_path())}
    assert got.dtype == np.float32 and got.shape == expected.shape == (48, 3, 16, 16)
    assert np.array_equal(got, expected)        # bitwise, not close


def test_a_layer_is_tuned_once_per_node(tmp_path):
    """warm_up tunes each layer in its first task, whose tuned plans land in
    the node's plan cache (empty before): the tasks after it tune none, nor
    does a later job's worker, a process of its own."""
    net = recipe.make_generator(latent=LATENT, layers=LAYERS, seed=3)
    part = np.random.default_rng(2).standard_normal((8, LATENT, 1, 1)).astype(np.float32)
    runs = []
    for _ in range(2):
        ray.init(num_cpus=2, include_dashboard=False,
                 runtime_env=recipe.runtime_env(str(tmp_path)), log_to_driver=False)
        try:
            runs.append(recipe.warm_up(ray.put(net), part, 2))
        finally:
            ray.shutdown()
    (_, first), *rest = runs[0]
    assert first > 0 and all(tuned == 0 for _, tuned in rest), runs
    assert all(tuned == 0 for _, tuned in runs[1]), runs
    assert not {pid for pid, _ in runs[0]} & {pid for pid, _ in runs[1]}, runs
