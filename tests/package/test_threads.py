"""Concurrency: 8 Python threads calling forward and backward at once.

Each thread runs, for a bounded time, a cycle of calls with different shapes
(float32 on oneDNN, blocked and plain layouts, bias, req=add, float64 on the
NumPy path) and compares every result with the one computed serially, in this
thread, before the threads started: they must be bitwise identical (same
primitive, same thread count, hence the same summation order).  The primitive
cache is per thread: each thread's cache_info() counts its own hits and
misses, and a small capacity that makes every thread evict all the time does
not change a single result.  ``MXDECONV_THREAD_SECONDS`` sets the time per
test (default 2 s); the GIL release is measured in scripts/qa/gil_release.py,
not here.
"""
import os
import threading
import time

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import mxdeconv
from mxdeconv import nd
import helpers

@pytest.fixture(autouse=True, scope="module")
def _settled_plans():
    """Layers tuned to the end at their first (serial) call: a plan that
    changes while the threads run (tuning on the calls) would change the
    summation order, and bitwise equality with it.  Threads calling a layer
    while it is tuned on their calls: tests/onednn/test_tuning_on_calls.py."""
    from mxdeconv.onednn import planner as plans
    eager = plans.set_eager_tuning(True)
    yield
    plans.set_eager_tuning(eager)


THREADS = 8
SECONDS = float(os.environ.get("MXDECONV_THREAD_SECONDS", "2"))
#: Every (thread, cycle) result that was checked, per test; shown in the report.
RUNS = {}

# (data shape, num_filter, kernel, stride, pad, num_group, no_bias, dtype)
SHAPES = [
    ((2, 16, 5, 5), 16, (3, 3), (2, 2), (1, 1), 1, False, np.float32),   # blocked
    ((1, 3, 7, 6), 5, (2, 3), (1, 2), (0, 1), 1, True, np.float32),      # plain, odd
    ((2, 8, 4), 8, (4,), (2,), (1,), 2, False, np.float32),              # 1-D, groups
    ((1, 4, 3, 3, 3), 4, (2, 2, 2), (2, 1, 2), (0, 0, 1), 1, False, np.float32),  # 3-D
    ((1, 17, 4, 4), 17, (3, 3), (1, 1), (1, 1), 1, True, np.float32),    # padded blocks
    ((2, 4, 5, 5), 6, (3, 3), (2, 2), (1, 1), 2, False, np.float64),     # NumPy path
    ((3, 32, 2, 2), 16, (4, 4), (2, 2), (1, 1), 1, False, np.float32),   # DCGAN-like
    ((1, 2, 9), 3, (5,), (3,), (2,), 1, False, np.float32),
]


def make_case(index, seed):
    shape, nf, kernel, stride, pad, groups, no_bias, dtype = SHAPES[index]
    rng = np.random.default_rng(seed)
    weight_shape = (shape[1], nf // groups) + kernel
    kw = dict(kernel=kernel, stride=stride, pad=pad, num_filter=nf, num_group=groups,
              no_bias=no_bias)
    data = rng.uniform(-1, 1, shape).astype(dtype)
    weight = rng.uniform(-1, 1, weight_shape).astype(dtype)
    bias = None if no_bias else rng.uniform(-1, 1, nf).astype(dtype)
    return data, weight, bias, kw


def compute(index, seed, inference_weight=None):
    """Forward (write, then add onto a copy), backward (write and add) as NumPy."""
    data, weight, bias, kw = make_case(index, seed)
    dtype = data.dtype  # float64 cases compute on the NumPy path
    x = nd.array(data, dtype=dtype)
    w = inference_weight if inference_weight is not None else nd.array(weight, dtype=dtype)
    b = None if bias is None else nd.array(bias, dtype=dtype)
    y = nd.Deconvolution(x, w, b, train=inference_weight is None, **kw)
    out = nd.array(np.full(y.shape, 0.5, dtype), dtype=dtype)
    nd.Deconvolution(x, w, b, out=out, req="add", train=inference_weight is None, **kw)
    og = nd.array(np.asarray(y) * 0.25, dtype=dtype)
    grads = nd.Deconvolution_backward(og, x, w, b, **kw)
    acc = [None if g is None else nd.array(np.ones(g.shape, dtype), dtype=dtype)
           for g in grads]
    nd.Deconvolution_backward(og, x, w, b, req=["add", "add", "add" if b is not None
                                                else "null"], grads=acc, **kw)
    results = [np.asarray(y), np.asarray(out)] + [np.asarray(g) for g in grads + tuple(acc)
                                                   if g is not None]
    return [r.copy() for r in results]


def run_threads(worker, count=THREADS):
    return helpers.run_threads(worker, count, timeout=SECONDS * 20 + 60)


def soak(test, expected, cycle, seconds=SECONDS, capacity=None):
    """Each thread walks ``cycle(i)`` (indices into SHAPES) until ``seconds`` pass."""
    deadline = time.monotonic() + seconds

    def worker(i):
        if capacity is not None:
            assert mxdeconv.cache_info()["capacity"] == capacity
        order, runs, step = cycle(i), 0, 0
        while time.monotonic() < deadline or runs < len(order):
            index = order[step % len(order)]
            got = compute(index, seed=index)
            for a, b in zip(got, expected[index]):
                assert_array_equal(a, b, err_msg=f"thread {i}, shape {index}")
            runs, step = runs + 1, step + 1
        return runs, mxdeconv.cache_info(), mxdeconv.last_impl()

    results = run_threads(worker)
    RUNS[test] = sum(r[0] for r in results)
    return results


@pytest.fixture(scope="module", autouse=True)
def _report_runs():
    yield
    print(f"\nthread runs checked against serial results ({THREADS} threads, "
          f"{SECONDS} s per test): {RUNS}")


@pytest.fixture(scope="module")
def serial():
    """Every case computed in this thread, one after another."""
    return {i: compute(i, seed=i) for i in range(len(SHAPES))}


@pytest.fixture(autouse=True)
def _restore_capacity():
    capacity = mxdeconv.cache_info()["capacity"]
    yield
    mxdeconv.set_cache_capacity(capacity)


def test_eight_threads_different_shapes_match_serial(serial):
    # thread i starts at shape i: at any moment the threads run different shapes
    results = soak("different_shapes", serial,
                   lambda i: [(i + k) % len(SHAPES) for k in range(len(SHAPES))])
    for runs, info, _ in results:
        assert runs >= len(SHAPES)
        assert info["misses"] >= 1 and info["hits"] >= 1  # its own cache, warm
        assert info["size"] <= info["capacity"]


def test_eight_threads_same_shape_match_serial(serial):
    soak("same_shape", serial, lambda i: [0, 6])  # all threads on the same primitives


def test_evicting_cache_under_threads_matches_serial(serial):
    """Capacity 3 with 7 oneDNN shapes per thread: every call misses and evicts."""
    mxdeconv.set_cache_capacity(3)
    results = soak("evicting_cache", serial,
                   lambda i: [(i + k) % len(SHAPES) for k in range(len(SHAPES))],
                   capacity=3)
    for runs, info, _ in results:
        assert info["size"] <= 3 and info["evictions"] > 0


def test_threads_sharing_one_inference_weight(serial):
    """Inference reorders a shared weight into the primitive's layout on first use
    (the NDArray adopts the blocked buffer); 8 threads using the same weight and
    data NDArrays at once still get the serial results."""
    index = 0
    data, weight, bias, kw = make_case(index, seed=index)
    # Training and inference are planned apart (the planner may pick another
    # kernel, summing in another order): each mode has its own serial result.
    expected = {train: np.asarray(nd.Deconvolution(nd.array(data), nd.array(weight),
                                                   nd.array(bias), train=train, **kw)).copy()
                for train in (False, True)}
    shared_w, shared_x, shared_b = nd.array(weight), nd.array(data), nd.array(bias)
    deadline = time.monotonic() + SECONDS / 2
    barrier = threading.Barrier(THREADS)

    def worker(i):
        barrier.wait()
        runs = 0
        while time.monotonic() < deadline or runs < 3:
            train = bool(i % 2 and runs % 2)
            y = nd.Deconvolution(shared_x, shared_w, shared_b, train=train, **kw)
            assert_array_equal(np.asarray(y), expected[train],
                               err_msg=f"thread {i} run {runs}")
            runs += 1
        return runs

    RUNS["shared_inference_weight"] = sum(run_threads(worker))
    assert_array_equal(np.asarray(shared_w), weight)  # values unchanged, layout aside


def test_threads_planning_new_layers_at_once(serial, monkeypatch):
    """Every thread tunes its own new layers at the same time: the planner times
    candidates on shared timing buffers and releases them after each choice,
    while other threads still time theirs without the GIL (a loop that kept a
    raw pointer to a released buffer wrote freed memory).  Results match the
    serial ones within float32 rounding (another plan may sum in another order)."""
    from mxdeconv.onednn import plan_store
    from mxdeconv.onednn import planner as plans
    # nothing kept: tune
    monkeypatch.setattr(plans.current_planner(), "store", plan_store.PlanStore(None))
    plans.clear_choices()
    mxdeconv.clear_cache()
    barrier = threading.Barrier(THREADS)

    def worker(i):
        barrier.wait()
        for index in ((i + k) % len(SHAPES) for k in range(len(SHAPES))):
            got = compute(index, seed=index)
            for a, b in zip(got, serial[index]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5,
                                           err_msg=f"thread {i}, shape {index}")
        return i

    try:
        run_threads(worker)
    finally:
        plans.clear_choices()
        mxdeconv.clear_cache()


def test_last_impl_and_modes_are_per_thread():
    def worker(i):
        case = 5 if i % 2 else 0  # float64 -> numpy, float32 -> onednn
        for _ in range(5):
            compute(case, seed=case)
            assert mxdeconv.last_impl() == ("numpy" if i % 2 else "onednn")
        return i

    run_threads(worker)
