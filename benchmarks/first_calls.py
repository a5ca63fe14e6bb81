#!/usr/bin/env python
"""A new layer's first K calls: what a short script, a notebook or a test suite
meets, beside the peers.

Each contender runs in a fresh process: K calls of one layer (results read
back every call), timed cumulatively; the table gives the peers' cumulative
time of calls 1..K divided by mxdeconv's (above 1: mxdeconv is faster), for
K = 1, 10, 100, 300.  mxdeconv runs twice: with an empty plan cache (a new
machine; the shipped plan database still applies) and with the cache the
first run filled (a new process on the same machine).  Rounds interleave the
contenders; medians of ``--repeats`` rounds.  Before each contender's run,
machine.py's FMA loop probes the machine's speed (about 0.1 s); a row whose
probes differ by more than DRIFT_RATIO is marked, and ``--json`` keeps them:
a virtual machine's speed can drift 2x in phases of seconds to minutes.

    python benchmarks/first_calls.py                     # every layer-mode, 3 rounds
    python benchmarks/first_calls.py --repeats 1 --no-peers --calls 10   # smoke
    python benchmarks/first_calls.py --json benchmarks/results/first_calls.json
    python benchmarks/first_calls.py --without-database    # beside MXDECONV_PLAN_DB=0
    python benchmarks/first_calls.py --steady    # each contender at the machine's full speed
    python benchmarks/first_calls.py --settle 0.5    # the first call 0.5 s after the import

``--settle S`` waits S seconds between a contender's import (and its inputs)
and its first call, every contender alike: the first call then meets the
layer, not the interpreter's start.  NumPy's OpenBLAS keeps a thread spinning
for about 0.1 s after NumPy's import (and after each BLAS call on more than
one thread): a first call that follows the import sooner shares a core with
it (mxdeconv's import is short enough to; MXNet's and PyTorch's are not).

MXNet 1.9.1 runs in its venv (scripts/setup_mxnet_venv.sh; ``MXNET_VENV`` or
``--mxnet-python``), PyTorch where ``import torch`` works; a missing peer is
reported as missing.  Only the standard library is imported at the top: this
file is each contender's worker too (``--worker``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

MARKS = (1, 10, 100, 300)

#: name -> (data shape, MXNet's Deconvolution parameters, batch-free name)
LAYERS = {
    "dcgan 512-256 b32": ((32, 512, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                                num_filter=256)),
    "dcgan 256-128 b32": ((32, 256, 8, 8), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                                num_filter=128)),
    "unet 512-256 28x28 b4": ((4, 512, 28, 28), dict(kernel=(2, 2), stride=(2, 2),
                                                     num_filter=256)),
    "3-D 64-32 8x16x16 b2": ((2, 64, 8, 16, 16), dict(kernel=(4, 4, 4), stride=(2, 2, 2),
                                                       pad=(1, 1, 1), num_filter=32)),
    "1-D 128-64 1024 b8": ((8, 128, 1024), dict(kernel=(16,), stride=(8,), pad=(4,),
                                                 num_filter=64)),
    "fcn 2x 21 b8": ((8, 21, 32, 32), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                                           num_filter=21)),
}
MODES = ("inference", "training")
#: The worker's wait before its first call, in seconds (``--settle``).
SETTLE_VARIABLE = "FIRST_CALLS_SETTLE"


# -- the worker ---------------------------------------------------------------------------
def _settle() -> None:
    """Wait ``--settle`` seconds (after the import and the inputs)."""
    time.sleep(float(os.environ.get(SETTLE_VARIABLE, "0")))


def _worker(name: str, layer: str, mode: str, calls: int) -> List[float]:
    import numpy as np
    shape, params = LAYERS[layer]
    rng = np.random.default_rng(0)
    weight_shape = (shape[1], params["num_filter"]) + params["kernel"]
    x = rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal(weight_shape, dtype=np.float32) * 0.02
    b = rng.standard_normal(params["num_filter"], dtype=np.float32) * 0.1
    training = mode == "training"
    cumulative, total = [], 0.0
    if name == "torch":
        import torch
        conv = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
                3: torch.nn.functional.conv_transpose3d}[len(shape) - 2]
        pad = params.get("pad", (0,) * (len(shape) - 2))
        tx, tw, tb = (torch.from_numpy(a).requires_grad_(training) for a in (x, w, b))
        _settle()
        for _ in range(calls):
            start = time.perf_counter()
            if training:
                for t in (tx, tw, tb):
                    t.grad = None
                y = conv(tx, tw, tb, stride=params["stride"], padding=pad)
                y.backward(torch.ones_like(y))
                [t.grad.numpy() for t in (tx, tw, tb)]
            else:
                with torch.no_grad():
                    conv(tx, tw, tb, stride=params["stride"], padding=pad).numpy()
            total += time.perf_counter() - start
            cumulative.append(total)
        return cumulative
    if name == "mxnet":
        import mxnet as lib
    else:
        import mxdeconv as lib
    nd, autograd = lib.nd, lib.autograd
    ax, aw, ab = nd.array(x), nd.array(w), nd.array(b)
    kwargs = dict(params, no_bias=False)
    if training:
        for array in (ax, aw, ab):
            array.attach_grad()
    _settle()
    for _ in range(calls):
        start = time.perf_counter()
        if training:
            with autograd.record():
                y = nd.Deconvolution(ax, aw, ab, **kwargs)
            y.backward(nd.ones(y.shape))
            [a.grad.asnumpy() for a in (ax, aw, ab)]
        else:
            nd.Deconvolution(ax, aw, ab, **kwargs).asnumpy()
        total += time.perf_counter() - start
        cumulative.append(total)
    return cumulative


# -- the driver ---------------------------------------------------------------------------
def _run(python: str, name: str, layer: str, mode: str, calls: int,
         env: Dict[str, str]) -> Optional[List[float]]:
    from cold import run_worker  # this folder: the script's own
    return run_worker(python, __file__, [name, layer, mode, str(calls)], env, timeout=1200)


def _peers(mxnet_python: Path, peers: bool) -> Dict[str, str]:
    """The peers found (cold.py's search), by name: their interpreters."""
    from cold import _contenders  # this folder: the script's own
    found = _contenders(mxnet_python, peers)
    found.pop("mxdeconv")
    return found


#: A layer-mode's probes of the machine's speed (machine.py's FMA loop, run
#: before each contender) that differ by more than this ratio mark its row:
#: on a virtual machine whose speed drifts in phases, the phase a contender's
#: process fell in can decide more than the code (2x seen on one instance).
DRIFT_RATIO = 1.15
#: The key under which a layer-mode's probes are kept in the results.
SPEED = "machine speed (FMA loop GFLOP/s, before each run)"


def _speed(threads: int) -> Optional[float]:
    """The FMA loop's GFLOP/s on ``threads`` threads now (about 0.1 s); None
    where it cannot be measured (no compiler, not AVX-512)."""
    from machine import detect  # this folder: the script's own
    return detect(threads).fma_loop_gflops


#: With ``--steady``, a contender runs only while the machine is at full
#: speed: its FMA loop within STEADY_RATIO of the fastest probe of the run
#: (probed again every STEADY_WAIT seconds, STEADY_TRIES times at most, then
#: run anyway and marked), and a run after which the probe reads slower is
#: run once more.
STEADY_RATIO, STEADY_WAIT, STEADY_TRIES = 0.9, 2.0, 30


class SpeedGate:
    """The fastest probe seen in a run, and a wait until the machine is near it."""

    def __init__(self, probe: Callable[[], Optional[float]],
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.probe, self.sleep = probe, sleep
        self.best = 0.0

    def read(self) -> Optional[float]:
        speed = self.probe()
        if speed is not None:
            self.best = max(self.best, speed)
        return speed

    def fast(self, speed: Optional[float]) -> bool:
        """Whether ``speed`` is full speed (an unknown one counts as full)."""
        return speed is None or speed >= STEADY_RATIO * self.best

    def wait(self) -> Optional[float]:
        """The speed once it is full, or after STEADY_TRIES probes."""
        speed = self.read()
        for _ in range(STEADY_TRIES):
            if self.fast(speed):
                break
            self.sleep(STEADY_WAIT)
            speed = self.read()
        return speed


def measure(layers: List[str], modes: List[str], repeats: int, calls: int, threads: int,
            mxnet_python: Path, peers: bool, deterministic: bool = False,
            without_database: bool = False, steady: bool = False, settle: float = 0.0
            ) -> Dict[str, Dict[str, Any]]:
    """{layer-mode: {contender: {K: median cumulative seconds}, SPEED: probes}}."""
    gate = SpeedGate(lambda: _speed(threads))
    base = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    base[SETTLE_VARIABLE] = str(settle)
    base.pop("MXDECONV_CACHE_DIR", None)
    others = _peers(mxnet_python, peers)
    marks = [k for k in MARKS if k <= calls]
    results: Dict[str, Dict[str, Any]] = {}
    for layer in layers:
        for mode in modes:
            runs: Dict[str, List[List[float]]] = {}
            speeds: List[Tuple[str, float]] = []
            for round_ in range(repeats):
                with tempfile.TemporaryDirectory(prefix="mxdeconv-first-") as cache, \
                        tempfile.TemporaryDirectory(prefix="mxdeconv-first-") as other_cache:
                    env = dict(base, MXDECONV_CACHE_DIR=cache)
                    order = [("mxdeconv (empty cache)", sys.executable, "mxdeconv", env),
                             ("mxdeconv (filled cache)", sys.executable, "mxdeconv", env)]
                    if deterministic:  # its own empty cache: nothing kept is read
                        order.append(("mxdeconv (deterministic)", sys.executable, "mxdeconv",
                                      dict(base, MXDECONV_DETERMINISTIC="1",
                                           MXDECONV_CACHE_DIR="")))
                    if without_database:  # an empty cache of its own, no plan database
                        order.append(("mxdeconv (no database)", sys.executable, "mxdeconv",
                                      dict(base, MXDECONV_PLAN_DB="0",
                                           MXDECONV_CACHE_DIR=other_cache)))
                    order += [(name, python, name, base) for name, python in others.items()]
                    # The filled cache needs the empty run first; the others
                    # rotate, so that no contender always follows the same one.
                    rest = order[2:]
                    turn = round_ % max(len(rest), 1)
                    order = rest[turn:] + order[:2] + rest[:turn]
                    for label, python, name, contender_env in order:
                        speed = gate.wait() if steady else _speed(threads)
                        times = _run(python, name, layer, mode, calls, contender_env)
                        if steady and label != "mxdeconv (empty cache)" and \
                                not gate.fast(gate.read()):
                            # slowed during the run: once more at full speed
                            # (an empty cache's run filled the cache: not again)
                            speed = gate.wait()
                            times = _run(python, name, layer, mode, calls, contender_env)
                        if speed is not None:  # the probe before the run counted
                            speeds.append((label, round(speed)))
                        if times is not None:
                            runs.setdefault(label, []).append(times)
            row: Dict[str, Any] = {
                label: {str(k): statistics.median(t[k - 1] for t in times) for k in marks}
                for label, times in runs.items()}
            print(_row(f"{layer} {mode}", row, marks) + _drift(speeds), flush=True)
            row[SPEED] = speeds
            results[f"{layer} {mode}"] = row
    return results


def _drift(speeds: List[Tuple[str, float]]) -> str:
    """A mark for a row whose probes of the machine's speed differ by more than
    DRIFT_RATIO (empty otherwise)."""
    rates = [rate for _, rate in speeds]
    if not rates or max(rates) <= DRIFT_RATIO * min(rates):
        return ""
    return (f"  [machine speed drifted: FMA loop {min(rates):.0f}-{max(rates):.0f} GFLOP/s "
            f"across the runs]")


def _row(name: str, contenders: Dict[str, Dict[str, float]], marks: List[int]) -> str:
    ours = contenders.get("mxdeconv (empty cache)")
    filled = contenders.get("mxdeconv (filled cache)")
    fixed = contenders.get("mxdeconv (deterministic)")
    bare = contenders.get("mxdeconv (no database)")
    peers = {k: v for k, v in contenders.items() if not k.startswith("mxdeconv")}
    cells = []
    for k in marks:
        key = str(k)
        if ours is None:
            cells.append("   -")
            continue
        text = f"{ours[key] * 1e3:8.1f} ms"
        if peers:
            fastest = min(p[key] for p in peers.values())
            text += f" {fastest / ours[key]:5.2f}x"
            if filled is not None:
                text += f" ({fastest / filled[key]:4.2f}x filled)"
            if bare is not None:
                text += f" [{fastest / bare[key]:4.2f}x without the database]"
        if fixed is not None:
            text += f" [deterministic {fixed[key] / ours[key]:4.2f}x the time]"
        cells.append(text)
    return f"{name:34s} " + " | ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs=4, metavar=("NAME", "LAYER", "MODE", "CALLS"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--layers", nargs="*", default=list(LAYERS))
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--deterministic", action="store_true",
                        help="also mxdeconv in deterministic mode (MXDECONV_DETERMINISTIC=1)")
    parser.add_argument("--without-database", action="store_true",
                        help="also mxdeconv without the plan database (MXDECONV_PLAN_DB=0)")
    parser.add_argument("--mxnet-python", type=Path, default=None,
                        help="MXNet 1.9.1's interpreter (default: $MXNET_VENV or .venv-mxnet)")
    parser.add_argument("--steady", action="store_true",
                        help="run each contender only at the machine's full speed (a VM whose "
                             "speed drifts in phases; see SpeedGate)")
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds between each contender's import and its first call")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.worker:
        name, layer, mode, calls = args.worker
        print(json.dumps(_worker(name, layer, mode, int(calls))))
        return
    marks = [k for k in MARKS if k <= args.calls]
    print(f"cumulative time of a new layer's first K calls (K = {marks}), {args.threads} "
          f"thread(s); the faster peer's time / mxdeconv's (above 1: mxdeconv faster)")
    from cold import default_mxnet_python
    results = measure(args.layers, args.modes, args.repeats, args.calls, args.threads,
                      args.mxnet_python or default_mxnet_python(), not args.no_peers,
                      args.deterministic, args.without_database, args.steady, args.settle)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(threads=args.threads, marks=marks,
                                             results=results), indent=1))


if __name__ == "__main__":
    main()
