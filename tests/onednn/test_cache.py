"""The thread-local primitive cache: hits on repeat, bounded LRU eviction."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import mxdeconv
from mxdeconv import _ops, nd


def _call(size, channels=4):
    data = np.ones((1, channels, size, size), np.float32)
    weight = np.ones((channels, 2, 3, 3), np.float32)
    return nd.Deconvolution(data, weight, kernel=(3, 3), num_filter=2, train=True)


@pytest.fixture(autouse=True)
def _restore_capacity():
    capacity = mxdeconv.cache_info()["capacity"]
    mxdeconv.clear_cache()
    yield
    mxdeconv.set_cache_capacity(capacity)
    mxdeconv.clear_cache()


def test_second_identical_call_creates_no_primitive():
    _call(5)
    before = mxdeconv.cache_info()
    _call(5)
    after = mxdeconv.cache_info()
    assert after["misses"] == before["misses"]
    assert after["hits"] > before["hits"]
    assert after["size"] == before["size"]


def test_new_shape_is_a_miss():
    _call(5)
    misses = mxdeconv.cache_info()["misses"]
    _call(6)
    assert mxdeconv.cache_info()["misses"] > misses


def test_capacity_bounds_the_cache_and_evicts_least_recent():
    # One call caches its deconvolution plan and the reorders it needed.
    _call(3)
    per_call = mxdeconv.cache_info()["size"]
    mxdeconv.clear_cache()
    mxdeconv.set_cache_capacity(2 * per_call)
    for size in (3, 4, 5, 6):
        _call(size)
        assert mxdeconv.cache_info()["size"] <= 2 * per_call
    info = mxdeconv.cache_info()
    assert info["evictions"] >= 1  # weight reorders are shared by all four sizes
    misses = info["misses"]
    _call(6)  # most recent: still cached
    assert mxdeconv.cache_info()["misses"] == misses
    _call(3)  # evicted long ago: rebuilt
    assert mxdeconv.cache_info()["misses"] > misses


def test_lowering_capacity_evicts_at_once():
    for size in (3, 4, 5):
        _call(size)
    mxdeconv.set_cache_capacity(1)
    assert mxdeconv.cache_info()["size"] == 1


def test_zero_capacity_still_computes():
    mxdeconv.set_cache_capacity(0)
    out = _call(4)
    assert mxdeconv.cache_info()["size"] == 0
    with mxdeconv.use_impl("numpy"):
        expected = _call(4)
    np.testing.assert_allclose(out.asnumpy(), expected.asnumpy(), rtol=1e-5)


def test_negative_capacity_is_rejected():
    with pytest.raises(mxdeconv.MXNetError, match="cache capacity must be >= 0, got -1"):
        mxdeconv.set_cache_capacity(-1)


def test_cache_is_per_thread():
    _call(5)
    seen = {}

    def worker():
        seen["before"] = mxdeconv.cache_info()["size"]
        _call(5)
        seen["after"] = mxdeconv.cache_info()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["before"] == 0
    assert seen["after"]["misses"] >= 1


def test_capacity_from_environment():
    code = "import mxdeconv; print(mxdeconv.cache_info()['capacity'])"
    env = dict(os.environ, MXDECONV_PRIMITIVE_CACHE_CAPACITY="7")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "7"


# -- oneDNN's own cache (found by an adversarial pass) --------------------------------------
def test_onednns_own_cache_follows_ours():
    capacity = mxdeconv.cache_info()["capacity"]
    try:
        mxdeconv.set_cache_capacity(7)
        assert _ops.onednn_cache_capacity() == 7
        mxdeconv.clear_cache()
        assert _ops.onednn_cache_capacity() == 7
    finally:
        mxdeconv.set_cache_capacity(capacity)
