#!/usr/bin/env python
"""Quiet and contended speed in one run: how each library degrades when
another process keeps a core busy.

    python benchmarks/contended.py                      # mxdeconv, the settings below
    python benchmarks/contended.py --peers torch,mxnet  # and the peers, at their defaults
    python benchmarks/contended.py --settings default,passive --rounds 9

The layer is DCGAN 512 -> 256 (32x512x4x4 -> 32x256x8x8, k4 s2 p1, bias; ``--batch``),
float32: a training step (forward, then the three gradients) and an
inference forward (the weight kept in the primitive's layout).  Every
contender (a library under one setting: GNU OpenMP's wait policy, its spin
count, a thread count) runs in its own process, started with its environment
(GNU OpenMP reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it loads)
and warmed up (its plans tuned) while the machine is as quiet as it gets.
Then rounds alternate: a quiet round, and a contended round in which this
script's own hog (``python -c "while True: pass"``) runs; the hog is paused
(SIGSTOP) between contended rounds.  In each round every contender runs one
block of steps, the order rotating each round; the figures are medians over
all steps of all rounds of a kind.

Each library runs at its default thread count unless a setting names one.
The peers are optional: PyTorch when ``import torch`` works in this Python,
MXNet 1.9.1 from ``--mxnet-python`` (default ``$MXNET_VENV/bin/python``, else
/work/venv-mxnet or .venv-mxnet).  Standard library only in this process: the
libraries load in the workers.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from machine import cpu_name

HERE = Path(__file__).resolve().parent
#: GNU OpenMP's knobs: a contender's own environment says which it sets; the
#: rest are removed from what the workers inherit, so "default" is the default.
OPENMP_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")

#: name -> the environment a mxdeconv contender runs with.
SETTINGS: Dict[str, Dict[str, str]] = {
    "default": {},          # mxdeconv's own default (GOMP_SPINCOUNT, mxdeconv/onednn/_loader.py)
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
DEFAULT_SETTINGS = "default,spin-300k,passive,spin-1k,spin-10k,1-thread"
MODES = ("train", "infer")


# ---------------------------------------------------------------------------
# Workers: one library, one setting; commands on stdin, answers on stdout
# ---------------------------------------------------------------------------
def _layer():
    import numpy as np
    rng = np.random.default_rng(0)
    batch = int(os.environ.get("CONTENDED_BATCH", "32"))
    data = rng.standard_normal((batch, 512, 4, 4)).astype(np.float32)
    weight = (rng.standard_normal((512, 256, 4, 4)) * 0.05).astype(np.float32)
    bias = rng.standard_normal(256).astype(np.float32)
    out_grad = rng.standard_normal((batch, 256, 8, 8)).astype(np.float32)
    return data, weight, bias, out_grad


def _mxdeconv_steps():
    import mxdeconv
    from mxdeconv import nd
    data, weight, bias, out_grad = (nd.array(a) for a in _layer())
    infer_w = nd.array(weight.asnumpy())      # its own copy: kept in the plan's layout
    kw = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256, no_bias=False)

    def train():
        mxdeconv.set_training(True)
        nd.Deconvolution(data, weight, bias, **kw).wait_to_read()
        for grad in nd.Deconvolution_backward(out_grad, data, weight, bias, **kw):
            grad.wait_to_read()

    def infer():
        mxdeconv.set_training(False)
        nd.Deconvolution(data, infer_w, bias, **kw).wait_to_read()

    def settle():
        for step in (train, infer, train, infer):
            step()
        mxdeconv.finish_tuning()
        mxdeconv.set_training(False)
        kernel = [line.strip() for line in mxdeconv.explain(data, infer_w, bias, **kw)
                  .splitlines() if "forward kernel" in line]
        info["inference plan"] = kernel[0] if kernel else "?"
    runtime = mxdeconv.runtime_info()
    info = {"library": f"mxdeconv {mxdeconv.__version__}", "threads": runtime["num_threads"],
            "threads_source": runtime.get("num_threads_source", ""),
            "openmp_wait": runtime.get("openmp_wait", "")}
    return {"train": train, "infer": infer}, settle, info


def _torch_steps():
    import torch
    import torch.nn.functional as F
    data, weight, bias, out_grad = (torch.from_numpy(a) for a in _layer())
    x, w, b = (t.clone().requires_grad_(True) for t in (data, weight, bias))

    def train():
        y = F.conv_transpose2d(x, w, b, stride=2, padding=1)
        y.backward(out_grad)
        x.grad = w.grad = b.grad = None

    def infer():
        with torch.no_grad():
            F.conv_transpose2d(data, weight, bias, stride=2, padding=1)
    return {"train": train, "infer": infer}, lambda: None, {
        "library": f"PyTorch {torch.__version__}", "threads": torch.get_num_threads(),
        "threads_source": "torch default"}


def _mxnet_steps():
    import mxnet as mx
    from mxnet import autograd, nd
    data, weight, bias, out_grad = (nd.array(a) for a in _layer())
    for array in (data, weight, bias):
        array.attach_grad()
    kw = dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256, no_bias=False)

    def train():
        with autograd.record():
            y = nd.Deconvolution(data, weight, bias, **kw)
        y.backward(out_grad)
        nd.waitall()

    def infer():
        nd.Deconvolution(data, weight, bias, **kw).wait_to_read()
    threads = os.environ.get("OMP_NUM_THREADS") or "MXNet default"
    return {"train": train, "infer": infer}, lambda: None, {
        "library": f"MXNet {mx.__version__}", "threads": threads,
        "threads_source": "MXNet default"}


def worker(kind: str) -> None:
    steps, settle, info = {"mxdeconv": _mxdeconv_steps, "torch": _torch_steps,
                           "mxnet": _mxnet_steps}[kind]()
    for step in steps.values():        # first calls: plans, allocations
        step()
    settle()
    for _ in range(3):
        for step in steps.values():
            step()
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        mode, count = line.split()
        step, clock, times = steps[mode], time.perf_counter, []
        for _ in range(int(count)):
            start = clock()
            step()
            times.append(clock() - start)
        print(json.dumps(times), flush=True)


# ---------------------------------------------------------------------------
# The parent: contenders, the hog, interleaved rounds
# ---------------------------------------------------------------------------
class Contender:
    def __init__(self, name: str, kind: str, python: str, env: Dict[str, str]) -> None:
        self.name, self.kind = name, kind
        self.process = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", kind],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{name}: the worker died while warming up")
        self.info = json.loads(line)
        self.times: Dict[tuple, List[float]] = {}

    def run(self, mode: str, count: int, state: str) -> None:
        self.process.stdin.write(f"{mode} {count}\n")
        self.process.stdin.flush()
        times = json.loads(self.process.stdout.readline())
        self.times.setdefault((mode, state), []).extend(times)

    def median_ms(self, mode: str, state: str) -> float:
        return 1e3 * statistics.median(self.times[(mode, state)])

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
    parser.add_argument("--peers", default="", help="torch and/or mxnet, comma-separated")
    parser.add_argument("--mxnet-python", help="python of the MXNet 1.9.1 venv")
    parser.add_argument("--rounds", type=int, default=5,
                        help="quiet and contended rounds each (default %(default)s)")
    parser.add_argument("--steps", type=int, default=10,
                        help="training steps per block; inference runs 3x as many "
                             "(default %(default)s)")
    parser.add_argument("--batch", type=int, default=32, help="batch size (%(default)s)")
    parser.add_argument("--json", type=Path, help="write every time here")
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0

    names = [n for n in args.settings.split(",") if n]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        parser.error(f"unknown setting(s) {unknown}; known: {', '.join(SETTINGS)}")
    base = {k: v for k, v in os.environ.items() if k not in OPENMP_KNOBS}
    # One plan cache for every mxdeconv contender, the first one's choices
    # kept there even when it tuned under load (MXDECONV_LOAD_WATCH=0; on a
    # shared machine each process would otherwise tune, and may choose, anew):
    # the settings are compared on the same plans (per thread count).
    base.setdefault("MXDECONV_CACHE_DIR", tempfile.mkdtemp(prefix="mxdeconv-contended-"))
    base.setdefault("MXDECONV_LOAD_WATCH", "0")
    base["CONTENDED_BATCH"] = str(args.batch)      # the workers' layer
    wanted = [("mxdeconv " + n, "mxdeconv", sys.executable, dict(base, **SETTINGS[n]))
              for n in names]
    for peer in [p for p in args.peers.split(",") if p]:
        if peer == "torch":
            wanted.append(("PyTorch default", "torch", sys.executable, dict(base)))
        elif peer == "mxnet":
            python = _mxnet_python(args.mxnet_python)
            if python is None:
                print("MXNet: no venv found (--mxnet-python); skipped", file=sys.stderr)
                continue
            env = {k: v for k, v in base.items() if not k.startswith("PYTHON")}
            wanted.append(("MXNet default", "mxnet", python, env))
        else:
            parser.error(f"--peers takes torch and mxnet, got {peer!r}")

    contenders: List[Contender] = []
    hog = None
    try:
        for name, kind, python, env in wanted:
            print(f"warming up {name} ...", file=sys.stderr, flush=True)
            try:
                contenders.append(Contender(name, kind, python, env))
            except (RuntimeError, ValueError) as error:
                print(f"{name}: skipped ({error})", file=sys.stderr)
        hog = Hog()
        for round_ in range(args.rounds):
            for state in ("quiet", "contended"):
                if state == "contended":
                    hog.resume()
                shift = round_ % len(contenders)
                for contender in contenders[shift:] + contenders[:shift]:
                    for mode in MODES:
                        count = args.steps * (3 if mode == "infer" else 1)
                        contender.run(mode, count, state)
                if state == "contended":
                    hog.pause()
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        if hog is not None:
            hog.close()
        for contender in contenders:
            contender.close()

    print(f"DCGAN 512 -> 256, {args.batch}x512x4x4, k4 s2 p1, bias, float32; {cpu_name()}, "
          f"{len(os.sched_getaffinity(0))} CPUs; {args.rounds} quiet and {args.rounds} "
          "contended rounds interleaved (contended: one python busy loop); medians, ms")
    header = (f"{'contender':<26} {'threads':>7}  {'train quiet':>11} {'contended':>9} "
              f"{'x':>5}  {'infer quiet':>11} {'contended':>9} {'x':>5}")
    print(header)
    print("-" * len(header))
    rows = []
    for c in contenders:
        t_q, t_c = c.median_ms("train", "quiet"), c.median_ms("train", "contended")
        i_q, i_c = c.median_ms("infer", "quiet"), c.median_ms("infer", "contended")
        print(f"{c.name:<26} {str(c.info['threads']):>7}  {t_q:>11.1f} {t_c:>9.1f} "
              f"{t_c / t_q:>5.2f}  {i_q:>11.2f} {i_c:>9.2f} {i_c / i_q:>5.2f}")
        rows.append({"name": c.name, "info": c.info,
                     "times": {f"{m}/{s}": t for (m, s), t in c.times.items()}})
    for c in contenders:
        if "inference plan" in c.info:
            print(f"{c.name}: {c.info['inference plan']}; OpenMP wait: {c.info['openmp_wait']}")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu_name(), "rounds": args.rounds,
                                         "contenders": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
