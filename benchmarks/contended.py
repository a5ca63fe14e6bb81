#!/usr/bin/env python
"""Quiet and contended speed in one run: how each library degrades when
another process keeps a core busy.

    python benchmarks/contended.py                      # mxdeconv, the settings below
    python benchmarks/contended.py --peers torch,mxnet  # and the peers, at their defaults
    python benchmarks/contended.py --peers torch,mxnet,mxnet@2   # MXNet at 2 threads too
    python benchmarks/contended.py --settings default,passive --rounds 9
    python benchmarks/contended.py --layers "dcgan 512-256 b32" --seconds 1

The layers are first_calls.py's (DCGAN, U-Net, 3-D, 1-D, FCN; bias, float32),
each as a training step (forward, then the three gradients) and an inference
forward (the weight kept in the primitive's layout).  Every contender (a
library under one setting: GNU OpenMP's wait policy, its spin count, a thread
count, whether the team follows the load) runs in its own process, started
with its environment (GNU OpenMP reads OMP_WAIT_POLICY and GOMP_SPINCOUNT
once, when it loads) and warmed up: every step for ``--seconds`` quiet and
again beside the hog, then mxdeconv finishes tuning.  Then rounds alternate:
a quiet round, and a contended round in which this script's own hog
(``python -c "while True: pass"``) runs; the hog is paused (SIGSTOP) between
contended rounds.  In each round every contender runs each layer-mode for
``--seconds`` (a program that calls a layer steadily, as a training loop or
a generator does), the order of contenders rotating each round.  A figure is
each block's mean step time (the block's steps over its length: what such a
program meets), the median over the rounds of a kind.  Not the median step:
beside the hog a team may run most steps at full speed and stall on the rest,
and the median step hides the stalls.

Each library runs at its default thread count unless a setting names one.
The peers are optional: PyTorch when ``import torch`` works in this Python,
MXNet 1.9.1 from ``--mxnet-python`` (default ``$MXNET_VENV/bin/python``, else
/work/venv-mxnet or .venv-mxnet).  Standard library only in this process: the
libraries load in the workers.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from first_calls import LAYERS
from machine import cpu_name

HERE = Path(__file__).resolve().parent
#: GNU OpenMP's knobs: a contender's own environment says which it sets; the
#: rest are removed from what the workers inherit, so "default" is the default.
OPENMP_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MXDECONV_FOLLOW_LOAD")

#: name -> the environment a mxdeconv contender runs with.
SETTINGS: Dict[str, Dict[str, str]] = {
    "default": {},          # mxdeconv's own default (GOMP_SPINCOUNT, the team follows the load)
    "fixed-team": {"MXDECONV_FOLLOW_LOAD": "off"},   # the default team whatever the load
    "passive": {"OMP_WAIT_POLICY": "passive"},
    "active": {"OMP_WAIT_POLICY": "active"},
    "spin-0": {"GOMP_SPINCOUNT": "0"},
    "spin-1k": {"GOMP_SPINCOUNT": "1000"},
    "spin-3k": {"GOMP_SPINCOUNT": "3000"},
    "spin-10k": {"GOMP_SPINCOUNT": "10000"},
    "spin-30k": {"GOMP_SPINCOUNT": "30000"},
    "spin-100k": {"GOMP_SPINCOUNT": "100000"},
    "spin-300k": {"GOMP_SPINCOUNT": "300000"},   # GNU OpenMP's own default
    "1-thread": {"OMP_NUM_THREADS": "1"},
}
DEFAULT_SETTINGS = "default,fixed-team,passive,1-thread"
MODES = ("train", "infer")


# ---------------------------------------------------------------------------
# Workers: one library, one setting; commands on stdin, answers on stdout
# ---------------------------------------------------------------------------
def _inputs(layer: str):
    """The layer's arrays (first_calls.LAYERS: the shape and parameters)."""
    import numpy as np
    shape, params = LAYERS[layer]
    rng = np.random.default_rng(0)
    weight_shape = (shape[1], params["num_filter"]) + tuple(params["kernel"])
    data = rng.standard_normal(shape).astype(np.float32)
    weight = (rng.standard_normal(weight_shape) * 0.05).astype(np.float32)
    bias = rng.standard_normal(params["num_filter"]).astype(np.float32)
    out_shape = (shape[0], params["num_filter"]) + tuple(
        (n - 1) * s - 2 * p + k for n, s, p, k in zip(
            shape[2:], params["stride"], params.get("pad", (0,) * len(shape[2:])),
            params["kernel"]))
    out_grad = rng.standard_normal(out_shape).astype(np.float32)
    return data, weight, bias, out_grad, dict(params, no_bias=False)


def _mxdeconv_steps(layer: str):
    import mxdeconv
    from mxdeconv import nd
    *arrays, kw = _inputs(layer)
    data, weight, bias, out_grad = (nd.array(a) for a in arrays)
    infer_w = nd.array(weight.asnumpy())      # its own copy: kept in the plan's layout

    def train():
        mxdeconv.set_training(True)
        nd.Deconvolution(data, weight, bias, **kw).wait_to_read()
        for grad in nd.Deconvolution_backward(out_grad, data, weight, bias, **kw):
            grad.wait_to_read()

    def infer():
        mxdeconv.set_training(False)
        nd.Deconvolution(data, infer_w, bias, **kw).wait_to_read()
    return {"train": train, "infer": infer}


def _mxdeconv_info():
    import mxdeconv
    runtime = mxdeconv.runtime_info()
    return {"library": f"mxdeconv {mxdeconv.__version__}", "threads": runtime["num_threads"],
            "threads_source": runtime.get("num_threads_source", ""),
            "openmp_wait": runtime.get("openmp_wait", "")}


def _torch_steps(layer: str):
    import torch
    import torch.nn.functional as F
    *arrays, kw = _inputs(layer)
    data, weight, bias, out_grad = (torch.from_numpy(a) for a in arrays)
    x, w, b = (t.clone().requires_grad_(True) for t in (data, weight, bias))
    conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[data.dim() - 2]
    options = dict(stride=kw["stride"], padding=kw.get("pad", 0))

    def train():
        y = conv(x, w, b, **options)
        y.backward(out_grad)
        x.grad = w.grad = b.grad = None

    def infer():
        with torch.no_grad():
            conv(data, weight, bias, **options)
    return {"train": train, "infer": infer}


def _torch_info():
    import torch
    return {"library": f"PyTorch {torch.__version__}", "threads": torch.get_num_threads(),
            "threads_source": "torch default"}


def _mxnet_steps(layer: str):
    from mxnet import autograd, nd
    *arrays, kw = _inputs(layer)
    data, weight, bias, out_grad = (nd.array(a) for a in arrays)
    for array in (data, weight, bias):
        array.attach_grad()

    def train():
        with autograd.record():
            y = nd.Deconvolution(data, weight, bias, **kw)
        y.backward(out_grad)
        nd.waitall()

    def infer():
        nd.Deconvolution(data, weight, bias, **kw).wait_to_read()
    return {"train": train, "infer": infer}


def _mxnet_info():
    import mxnet as mx
    threads = os.environ.get("OMP_NUM_THREADS") or "MXNet default"
    return {"library": f"MXNet {mx.__version__}", "threads": threads,
            "threads_source": "MXNet default"}


WORKERS = {"mxdeconv": (_mxdeconv_steps, _mxdeconv_info), "torch": (_torch_steps, _torch_info),
           "mxnet": (_mxnet_steps, _mxnet_info)}


def _run_for(step, seconds: float, least: int = 3) -> List[float]:
    """Run ``step`` for ``seconds`` (at least ``least`` times); each one's time."""
    clock, times = time.perf_counter, []
    begun = clock()
    while len(times) < least or clock() - begun < seconds:
        start = clock()
        step()
        times.append(clock() - start)
    return times


def worker(kind: str) -> None:
    """Set up every layer, then answer ``warm SECONDS`` (run every step that
    long, then finish tuning) and ``LAYER MODE SECONDS`` (that step's times)."""
    make_steps, make_info = WORKERS[kind]
    layers = os.environ["CONTENDED_LAYERS"].split(",")
    steps = {layer: make_steps(layer) for layer in layers}
    for by_mode in steps.values():        # first calls: plans, allocations
        for step in by_mode.values():
            step()
    print(json.dumps(make_info()), flush=True)
    for line in sys.stdin:
        words = line.rstrip("\n").split("|")
        if words[0] == "warm":
            for by_mode in steps.values():
                for step in by_mode.values():
                    _run_for(step, float(words[1]))
            if kind == "mxdeconv":
                import mxdeconv
                mxdeconv.finish_tuning()
            print(json.dumps(make_info()), flush=True)
            continue
        layer, mode, seconds = words
        print(json.dumps(_run_for(steps[layer][mode], float(seconds))), flush=True)


# ---------------------------------------------------------------------------
# The parent: contenders, the hog, interleaved rounds
# ---------------------------------------------------------------------------
class Contender:
    def __init__(self, name: str, kind: str, python: str, env: Dict[str, str]) -> None:
        self.name, self.kind = name, kind
        self.process = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", kind],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        self.info = self._answer()
        #: (layer, mode, state) -> each block's step times, in round order.
        self.times: Dict[Tuple[str, str, str], List[List[float]]] = {}

    def _answer(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the worker died")
        return json.loads(line)

    def _ask(self, *words: object):
        self.process.stdin.write("|".join(map(str, words)) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def warm(self, seconds: float) -> None:
        """Every step for ``seconds``, then mxdeconv finishes tuning."""
        self.info = self._ask("warm", seconds)

    def run(self, layer: str, mode: str, seconds: float, state: str) -> None:
        self.times.setdefault((layer, mode, state), []).append(self._ask(layer, mode, seconds))

    def median_ms(self, layer: str, mode: str, state: str) -> float:
        """The median over rounds of each block's mean step time: what a program
        calling the step steadily takes a step.  A median over the steps
        themselves hides a team's stalls beside the hog (PyTorch's FCN
        inference: a median step of 1.05 ms, a mean of 8.8, 35 ms or more on
        one step in ten)."""
        return 1e3 * statistics.median(statistics.fmean(block)
                                       for block in self.times[(layer, mode, state)])

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


class Hog:
    """One process spinning on a CPU, paused (SIGSTOP) outside contended rounds."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        self.pause()

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        time.sleep(0.2)       # let the scheduler place it before timing starts

    def close(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.process.kill()
        self.process.wait()


def _mxnet_python(given: Optional[str]) -> Optional[str]:
    candidates = [given, os.environ.get("MXNET_VENV") and
                  str(Path(os.environ["MXNET_VENV"]) / "bin" / "python"),
                  "/work/venv-mxnet/bin/python", str(HERE.parent / ".venv-mxnet/bin/python")]
    return next((c for c in candidates if c and Path(c).exists()), None)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--settings", default=DEFAULT_SETTINGS,
                        help=f"mxdeconv settings, comma-separated, of {', '.join(SETTINGS)} "
                             "(default %(default)s)")
    parser.add_argument("--peers", default="",
                        help="torch and/or mxnet, comma-separated, each at its default thread "
                             "count or at @THREADS (OMP_NUM_THREADS): torch,mxnet,mxnet@2")
    parser.add_argument("--mxnet-python", help="python of the MXNet 1.9.1 venv")
    parser.add_argument("--layers", default=",".join(LAYERS),
                        help="first_calls.py's layers, comma-separated (default: all)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="quiet and contended rounds each (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="each block's length: a layer-mode's steps, run for this long "
                             "(at least 3; default %(default)s)")
    parser.add_argument("--json", type=Path, help="write every time here")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0

    names = [n for n in args.settings.split(",") if n]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {unknown}; known: {', '.join(SETTINGS)}")
    layers = [n for n in args.layers.split(",") if n]
    missing = [n for n in layers if n not in LAYERS]
    if missing:
        parser.error(f"unknown layer(s) {missing}; known: {', '.join(LAYERS)}")
    base = {k: v for k, v in os.environ.items() if k not in OPENMP_KNOBS}
    # One plan cache for every mxdeconv contender, the first one's choices
    # kept there even when it tuned under load (MXDECONV_LOAD_WATCH=0; on a
    # shared machine each process would otherwise tune, and may choose, anew):
    # the settings are compared on the same plans (per thread count).
    base.setdefault("MXDECONV_CACHE_DIR", tempfile.mkdtemp(prefix="mxdeconv-contended-"))
    base.setdefault("MXDECONV_LOAD_WATCH", "0")
    base["CONTENDED_LAYERS"] = ",".join(layers)
    wanted = [("mxdeconv " + n, "mxdeconv", sys.executable, dict(base, **SETTINGS[n]))
              for n in names]
    for spec in [p for p in args.peers.split(",") if p]:
        peer, _, threads = spec.partition("@")   # "mxnet@2": OMP_NUM_THREADS=2
        if threads and not threads.isdigit():
            parser.error(f"--peers: a thread count is a number, got {spec!r}")
        env = dict(base, OMP_NUM_THREADS=threads) if threads else dict(base)
        label = f"{threads} threads" if threads else "default"
        if peer == "torch":
            wanted.append((f"PyTorch {label}", "torch", sys.executable, env))
        elif peer == "mxnet":
            python = _mxnet_python(args.mxnet_python)
            if python is None:
                print("MXNet: no venv found (--mxnet-python); skipped", file=sys.stderr)
                continue
            env = {k: v for k, v in env.items() if not k.startswith("PYTHON")}
            wanted.append((f"MXNet {label}", "mxnet", python, env))
        else:
            parser.error(f"--peers takes torch and mxnet (each may end @THREADS), got {spec!r}")

    contenders: List[Contender] = []
    hog = None
    try:
        for name, kind, python, env in wanted:
            print(f"starting {name} ...", file=sys.stderr, flush=True)
            try:
                contenders.append(Contender(name, kind, python, env))
            except (RuntimeError, ValueError) as error:
                print(f"{name}: skipped ({error})", file=sys.stderr)
        hog = Hog()
        # Warm-up: each contender alone, quiet and then beside the hog (a team
        # that follows the load plans and tunes its smaller team there).
        for state in ("quiet", "contended"):
            if state == "contended":
                hog.resume()
            for contender in contenders:
                print(f"warming up {contender.name} ({state}) ...", file=sys.stderr, flush=True)
                contender.warm(args.seconds)
            if state == "contended":
                hog.pause()
        for round_ in range(args.rounds):
            for state in ("quiet", "contended"):
                if state == "contended":
                    hog.resume()
                shift = round_ % len(contenders)
                for contender in contenders[shift:] + contenders[:shift]:
                    for layer in layers:
                        for mode in MODES:
                            contender.run(layer, mode, args.seconds, state)
                if state == "contended":
                    hog.pause()
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        if hog is not None:
            hog.close()
        for contender in contenders:
            contender.close()
    _report(contenders, layers, args)
    return 0


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _report(contenders: List["Contender"], layers: List[str], args: argparse.Namespace) -> None:
    print(f"{cpu_name()}, {len(os.sched_getaffinity(0))} CPUs; {args.rounds} quiet and "
          f"{args.rounds} contended rounds interleaved (contended: one python busy loop), "
          f"blocks of {args.seconds} s; each block's mean step time, median over rounds, ms; "
          f"x: contended / quiet")
    width = max(len(c.name) for c in contenders)
    slowdowns: Dict[str, List[float]] = {c.name: [] for c in contenders}
    for layer in layers:
        for mode in MODES:
            print(f"\n{layer}, {mode}")
            for c in contenders:
                quiet = c.median_ms(layer, mode, "quiet")
                busy = c.median_ms(layer, mode, "contended")
                slowdowns[c.name].append(busy / quiet)
                print(f"  {c.name:<{width}}  {quiet:9.2f} {busy:9.2f}  {busy / quiet:5.2f}x")
    peers = [c for c in contenders if c.kind != "mxdeconv"]
    print(f"\ngeomean over {len(layers) * len(MODES)} layer-modes "
          "(slowdown; and where peers ran, the faster peer's time / this one's, quiet and "
          "contended: above 1, this one is faster)")
    for c in contenders:
        line = f"  {c.name:<{width}}  slowdown {_geomean(slowdowns[c.name]):5.2f}x"
        if peers and c.kind == "mxdeconv":
            for state in ("quiet", "contended"):
                ratios = [min(p.median_ms(layer, mode, state) for p in peers)
                          / c.median_ms(layer, mode, state)
                          for layer in layers for mode in MODES]
                line += (f"  {state}: {_geomean(ratios):4.2f}x (lowest {min(ratios):4.2f}x)")
        print(line)
    for c in contenders:
        print(f"{c.name}: {c.info.get('threads')} threads ({c.info.get('threads_source')}); "
              f"OpenMP wait: {c.info.get('openmp_wait', '-')}")
    if args.json:
        rows = [{"name": c.name, "info": c.info,
                 "times": {"/".join(k): t for k, t in c.times.items()}} for c in contenders]
        args.json.write_text(json.dumps({"cpu": cpu_name(), "rounds": args.rounds,
                                         "seconds": args.seconds, "layers": layers,
                                         "contenders": rows}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
