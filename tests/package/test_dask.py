"""The Dask recipe (examples/dask_inference.py, docs/shared_machines.rst): a
Gluon generator pickled to 2 worker processes of 1 thread each, mapped over
partitions, one plan cache for all; the result is bitwise the one this
process computes on one thread.  Skipped without ``distributed`` (the
``dask`` extra)."""
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

import mxdeconv

distributed = pytest.importorskip(
    "distributed", reason="Dask is an optional extra: pip install 'mxdeconv[dask]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import dask_inference as recipe  # noqa: E402

#: A small generator of the same shape as DCGAN's (the test stays short).
LAYERS = [(32, 4, 1, 0, "relu"), (16, 4, 2, 1, "relu"), (3, 4, 2, 1, "tanh")]
LATENT = 16


def make_net():
    return recipe.make_generator(latent=LATENT, layers=LAYERS, seed=3)


def test_a_gluon_generator_pickles_with_its_weights():
    net = make_net()
    z = np.random.default_rng(0).standard_normal((4, LATENT, 1, 1)).astype(np.float32)
    before = recipe.generate(net, z)        # inference keeps weights in oneDNN layouts
    copy = pickle.loads(pickle.dumps(net))
    assert repr(copy) == repr(net)
    assert np.array_equal(recipe.generate(copy, z), before)
    for name, param in net.collect_params().items():
        assert np.array_equal(copy.collect_params()[name].data().asnumpy(),
                              param.data().asnumpy()), name


def test_two_workers_give_the_single_process_result_bitwise():
    net = make_net()
    latent = np.random.default_rng(1).standard_normal((48, LATENT, 1, 1)).astype(np.float32)
    parts = recipe.partitions(latent, 8)
    cache = mxdeconv.plan_cache_path()
    assert cache is not None and os.environ.get("MXDECONV_CACHE_DIR")
    # The workers run one thread each: the reference too, with the plans
    # tuned to the end here and kept in the plan cache the workers read.
    expected = recipe.on_this_process(net, parts, threads=1)

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        assert sorted(client.run(mxdeconv.get_num_threads).values()) == [1, 1]
        assert set(client.run(mxdeconv.plan_cache_path).values()) == {cache}
        pids = set(client.run(os.getpid).values())
        assert len(pids) == 2 and os.getpid() not in pids
        got = recipe.on_dask(client, net, parts)
    assert got.dtype == np.float32 and got.shape == expected.shape == (48, 3, 16, 16)
    assert np.array_equal(got, expected)        # bitwise, not close


def test_a_layer_is_tuned_once_per_node(tmp_path, monkeypatch):
    """warm_up tunes each layer on one worker, whose tuned plans land in the
    node's plan cache; the other worker finds them there and tunes none."""
    monkeypatch.setenv("MXDECONV_CACHE_DIR", str(tmp_path))   # the node's plan cache, empty
    net = make_net()
    part = np.random.default_rng(2).standard_normal((8, LATENT, 1, 1)).astype(np.float32)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        paths = set(client.run(mxdeconv.plan_cache_path).values())
        tuned = recipe.warm_up(client, net, part)
    assert len(paths) == 1 and paths.pop().startswith(str(tmp_path))
    assert len(tuned) == 2 and tuned[0] > 0 and tuned[1] == 0, tuned
