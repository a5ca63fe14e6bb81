#!/usr/bin/env python
"""Does oneDNN compute with the GIL released?  Three timing ratios.

0. *Longest stall*: a Python thread stamps the time in a loop while the main
   thread makes one long oneDNN call (~0.1-1 s); the longest gap between two
   stamps, divided by the call's duration, is ~0 when the call releases the GIL
   and ~1 when it holds it (the control row: ``sum(range(n))``, a C loop that
   never releases the GIL, of about the same duration).  This one is robust to
   other load on the machine.
1. *Bystander ratio*: a pure-Python thread counts in a loop; its rate while the
   main thread runs oneDNN forward+backward calls, divided by its rate while
   the main thread sleeps.  About 1 when the GIL is released during compute
   (given a free core), about 0.5 or less when the main thread holds it (the
   control row: the main thread runs a Python loop instead).
2. *Scaling*: the same total number of oneDNN calls run by 1 Python thread and
   by 2 threads (OpenMP limited to 1 thread each); the speed-up is about 2 on
   two free cores when compute runs without the GIL, 1 when it does not.

    python scripts/qa/gil_release.py [--seconds 3] [--json out.json]

Timings depend on the machine's load; run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core per Python thread

import numpy as np  # noqa: E402

import mxdeconv  # noqa: E402
from mxdeconv import nd  # noqa: E402

# a DCGAN-like layer: ~10 ms per forward+backward on one core, nearly all in oneDNN
X = nd.array(np.random.default_rng(0).uniform(-1, 1, (8, 128, 8, 8)).astype(np.float32))
W = nd.array(np.random.default_rng(1).uniform(-1, 1, (128, 64, 4, 4)).astype(np.float32))
KW = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64)


def onednn_call() -> None:
    y = nd.Deconvolution(X, W, train=True, **KW)
    nd.Deconvolution_backward(y, X, W, **KW)


def python_work() -> None:
    total = 0
    for i in range(200_000):
        total += i * i


def bystander_rate(main_work, seconds: float) -> float:
    """Counts per second of a Python thread while the main thread runs main_work."""
    stop = threading.Event()
    count = [0]

    def counter():
        n = 0
        while not stop.is_set():
            n += 1
        count[0] = n

    thread = threading.Thread(target=counter)
    start = time.perf_counter()
    thread.start()
    while time.perf_counter() - start < seconds:
        main_work()
    stop.set()
    thread.join()
    return count[0] / (time.perf_counter() - start)


BIG_X = nd.array(np.random.default_rng(2).uniform(-1, 1, (32, 256, 16, 16)).astype(np.float32))
BIG_W = nd.array(np.random.default_rng(3).uniform(-1, 1, (256, 128, 4, 4)).astype(np.float32))


def big_onednn_call() -> None:
    nd.Deconvolution(BIG_X, BIG_W, kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                     num_filter=128, train=True)


def longest_stall(work) -> tuple:
    """(longest gap of a stamping Python thread during ``work()``, work's duration)."""
    stamps, stop = [], threading.Event()

    def stamper():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    thread = threading.Thread(target=stamper)
    thread.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    work()
    t1 = time.perf_counter()
    stop.set()
    thread.join()
    inside = [t for t in stamps if t0 <= t <= t1]
    edges = [t0] + inside + [t1]
    return max(b - a for a, b in zip(edges, edges[1:])), t1 - t0


def calls_per_second(threads: int, calls: int) -> float:
    barrier = threading.Barrier(threads + 1)

    def worker():
        barrier.wait()
        for _ in range(calls // threads):
            onednn_call()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    return calls / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    mxdeconv.set_num_threads(1)
    for _ in range(5):
        onednn_call()  # primitives cached, pages touched
    big_onednn_call()
    stalls = [longest_stall(big_onednn_call) for _ in range(3)]
    duration = min(d for _, d in stalls)
    n = 1
    while True:  # a GIL-holding C loop of about the same duration
        t = time.perf_counter()
        sum(range(n))
        if time.perf_counter() - t > duration or n > 10**10:
            break
        n *= 2
    controls = [longest_stall(lambda: sum(range(n))) for _ in range(3)]
    idle = bystander_rate(lambda: time.sleep(0.01), args.seconds)
    during_onednn = bystander_rate(onednn_call, args.seconds)
    during_python = bystander_rate(python_work, args.seconds)
    one = calls_per_second(1, args.calls)
    two = calls_per_second(2, args.calls)
    figures = dict(
        cpu_count=os.cpu_count(), load_average=os.getloadavg(),
        onednn_call_seconds=round(min(d for _, d in stalls), 3),
        stall_ratio_onednn=round(max(g / d for g, d in stalls), 3),
        stall_ratio_gil_held_control=round(min(g / d for g, d in controls), 3),
        bystander_ratio_onednn=round(during_onednn / idle, 3),
        bystander_ratio_python_control=round(during_python / idle, 3),
        calls_per_second_1_thread=round(one, 1), calls_per_second_2_threads=round(two, 1),
        scaling_2_threads=round(two / one, 3))
    print(f"longest stall of a Python thread during one {figures['onednn_call_seconds']:.2f} s "
          f"oneDNN call: {figures['stall_ratio_onednn']:.3f} of the call (GIL-holding "
          f"C loop, control: {figures['stall_ratio_gil_held_control']:.3f})")
    print(f"bystander Python thread, rate relative to idle: during oneDNN calls "
          f"{figures['bystander_ratio_onednn']:.2f}, during a Python loop (GIL held, "
          f"control) {figures['bystander_ratio_python_control']:.2f}")
    print(f"oneDNN forward+backward calls/s: 1 thread {one:.1f}, 2 threads {two:.1f} "
          f"(speed-up {figures['scaling_2_threads']:.2f}x; load average "
          f"{figures['load_average'][0]:.1f} on {figures['cpu_count']} CPUs)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
