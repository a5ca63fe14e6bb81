#!/usr/bin/env python
"""Soak test: many forward+backward calls on small shapes; does memory grow?

    python scripts/qa/soak.py                   # 10^5 calls, the documented run
    python scripts/qa/soak.py --calls 20000 --json soak.json

A *call* is one forward and one backward of a small Deconvolution, cycling
through a few shapes: oneDNN float32 with plain and blocked layouts, with bias
and req="add" into preallocated targets, an inference weight that stays in
the primitive's layout, and (every ``--numpy-every`` calls) the float64 NumPy
path.  After ``--warmup`` calls (primitive cache, NumPy and OpenMP pools all
warm) the resident set size (RSS, /proc/self/statm) is read, the calls run,
and RSS is read again; both readings follow ``gc.collect()`` and glibc's
``malloc_trim(0)`` so that freed-but-cached heap pages do not count.  Then a
shorter phase runs under ``tracemalloc`` and prints the source lines whose
Python allocations grew most, and the count of live NDArrays and oneDNN
objects (Primitive, MemoryDesc) before and after.  Exit status 1 when RSS grew
by more than ``--max-growth-kib`` (default 1024 KiB).
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before oneDNN loads

import numpy as np  # noqa: E402

import mxdeconv  # noqa: E402
from mxdeconv import nd  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")
try:
    _LIBC = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc: no trim, RSS readings are noisier
    _LIBC = None


def rss_kib() -> int:
    """Resident set size of this process in KiB, after a full collection and trim."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE // 1024


def live_objects() -> Counter:
    """Live NDArrays and oneDNN wrapper objects (Primitive, MemoryDesc, plans)."""
    gc.collect()
    names = Counter()
    for obj in gc.get_objects():
        cls = type(obj)
        if cls.__name__ == "NDArray" or cls.__module__ == "mxdeconv.onednn._ops":
            names[cls.__name__] += 1
    return names


def make_workload(seed: int = 0) -> List[Callable[[], None]]:
    """The calls of one cycle; each closure runs one forward and one backward."""
    rng = np.random.default_rng(seed)
    u = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32)  # noqa: E731
    steps = []

    # 1. plain layout, no bias, fresh results every time
    x1, w1 = u(2, 3, 5, 5), u(3, 4, 3, 3)
    kw1 = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=4)

    def plain():
        y = nd.Deconvolution(x1, w1, train=True, **kw1)
        nd.Deconvolution_backward(y, x1, w1, **kw1)
    steps.append(plain)

    # 2. blocked layouts (16 channels), bias, req=add into preallocated targets
    x2, w2, b2 = nd.array(u(1, 16, 4, 4)), nd.array(u(16, 16, 4, 4)), nd.array(u(16))
    kw2 = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=16, no_bias=False)
    out2 = nd.zeros((1, 16, 8, 8))
    grads2 = [nd.zeros(x2.shape), nd.zeros(w2.shape), nd.zeros(b2.shape)]

    def blocked_add():
        nd.Deconvolution(x2, w2, b2, out=out2, req="add", train=True, **kw2)
        nd.Deconvolution_backward(out2, x2, w2, b2, req="add", grads=grads2, **kw2)
    steps.append(blocked_add)

    # 3. inference weight kept in the primitive's layout; 1-D and 3-D shapes
    w3 = nd.array(u(8, 8, 4))
    x3 = u(2, 8, 6)
    kw3 = dict(kernel=(4,), stride=(2,), pad=(1,), num_filter=8, num_group=1)
    x4, w4 = u(1, 2, 2, 3, 2), u(2, 2, 2, 2, 2)
    kw4 = dict(kernel=(2, 2, 2), stride=(2, 1, 2), num_filter=4, num_group=1)

    def inference_1d_3d():
        y = nd.Deconvolution(x3, w3, train=False, **kw3)
        y.asnumpy()
        nd.Deconvolution_backward(y, x3, w3, **kw3)
        y4 = nd.Deconvolution(x4, w4, **dict(kw4, num_filter=2))
        nd.Deconvolution_backward(y4, x4, w4, **dict(kw4, num_filter=2))
    steps.append(inference_1d_3d)
    return steps


def numpy_step(seed: int = 1) -> Callable[[], None]:
    rng = np.random.default_rng(seed)
    x, w = rng.uniform(-1, 1, (2, 4, 3, 3)), rng.uniform(-1, 1, (4, 3, 3, 3))
    kw = dict(kernel=(3, 3), stride=(2, 2), num_filter=6, num_group=2)

    def step():
        y = nd.Deconvolution(x, w, **kw)
        nd.Deconvolution_backward(y, x, w, **kw)
    return step


def run(calls: int, steps: List[Callable[[], None]], slow: Callable[[], None],
        numpy_every: int) -> None:
    n = len(steps)
    for i in range(calls):
        if numpy_every and i % numpy_every == numpy_every - 1:
            slow()
        else:
            steps[i % n]()


def soak(calls: int = 100_000, warmup: int = 2_000, traced_calls: int = 10_000,
         numpy_every: int = 50, top: int = 10, verbose: bool = True) -> Dict[str, object]:
    steps, slow = make_workload(), numpy_step()
    t0 = time.monotonic()
    run(warmup, steps, slow, numpy_every)
    mxdeconv.finish_tuning()  # the steady state: a layer tuned on its calls holds
    run(min(200, warmup), steps, slow, numpy_every)  # its candidates until it settles
    objects_before = live_objects()
    rss_before = rss_kib()
    checkpoints = []
    start = time.monotonic()
    chunk = max(calls // 10, 1)
    done = 0
    while done < calls:
        n = min(chunk, calls - done)
        run(n, steps, slow, numpy_every)
        done += n
        checkpoints.append((done, rss_kib()))
        if verbose:
            print(f"  {done:>7} calls  RSS {checkpoints[-1][1]} KiB  "
                  f"({checkpoints[-1][1] - rss_before:+d} KiB)", flush=True)
    seconds = time.monotonic() - start
    rss_after = rss_kib()
    objects_after = live_objects()

    # Python-level allocations, traced on a shorter run
    tracemalloc.start(10)
    run(min(200, warmup), steps, slow, numpy_every)
    snap0 = tracemalloc.take_snapshot()
    run(traced_calls, steps, slow, numpy_every)
    gc.collect()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    filters = [tracemalloc.Filter(False, tracemalloc.__file__),
               tracemalloc.Filter(False, "<frozen importlib._bootstrap*>")]
    diff = snap1.filter_traces(filters).compare_to(snap0.filter_traces(filters), "lineno")
    traced_growth = sum(d.size_diff for d in diff)
    # largest growth first (negative: blocks CPython's free lists held at the
    # first snapshot and released since; not a concern)
    diff.sort(key=lambda d: d.size_diff, reverse=True)
    figures = dict(
        calls=calls, warmup=warmup, seconds=round(seconds, 1),
        calls_per_second=round(calls / seconds), rss_before_kib=rss_before,
        rss_after_kib=rss_after, rss_growth_kib=rss_after - rss_before,
        rss_max_kib=max(r for _, r in checkpoints),
        traced_calls=traced_calls, tracemalloc_growth_bytes=traced_growth,
        tracemalloc_top=[str(d) for d in diff[:top]],
        live_objects_before=dict(objects_before), live_objects_after=dict(objects_after),
        cache=mxdeconv.cache_info(), warmup_seconds=round(start - t0, 1))
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--warmup", type=int, default=2_000)
    ap.add_argument("--traced-calls", type=int, default=10_000)
    ap.add_argument("--numpy-every", type=int, default=50,
                    help="every N-th call runs the float64 NumPy path (0: never)")
    ap.add_argument("--max-growth-kib", type=int, default=1024)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    print(f"soak: {args.calls} forward+backward calls after {args.warmup} warm-up calls "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})", flush=True)
    figures = soak(args.calls, args.warmup, args.traced_calls, args.numpy_every)
    print(f"RSS: {figures['rss_before_kib']} KiB -> {figures['rss_after_kib']} KiB "
          f"({figures['rss_growth_kib']:+d} KiB) over {figures['calls']} calls in "
          f"{figures['seconds']} s ({figures['calls_per_second']} calls/s)")
    print(f"tracemalloc over {figures['traced_calls']} calls: "
          f"{figures['tracemalloc_growth_bytes']:+d} bytes; top lines:")
    for line in figures["tracemalloc_top"]:
        print("   ", line)
    print(f"live objects before: {figures['live_objects_before']}")
    print(f"live objects after:  {figures['live_objects_after']}")
    print(f"primitive cache: {figures['cache']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    ok = figures["rss_growth_kib"] < args.max_growth_kib
    print("PASS" if ok else f"FAIL: RSS grew by {figures['rss_growth_kib']} KiB "
          f"(limit {args.max_growth_kib} KiB)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
