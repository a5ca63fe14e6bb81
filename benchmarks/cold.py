#!/usr/bin/env python
"""What a user meets first: import, first calls and a short training run, cold.

Every figure comes from a fresh process (medians of ``--repeats`` runs,
contenders interleaved run by run), for mxdeconv, PyTorch and MXNet 1.9.1:

* ``import``: NumPy and the library (timed inside the process, from before
  ``import numpy`` to after the library's import).
* ``first forward`` / ``first backward``: the first calls of a new layer
  (DCGAN 512 -> 256, 4x4 -> 8x8, k4 s2 p1, bias, batch 32), then the second
  forward.  mxdeconv twice: with an empty plan cache (a new machine: the
  first calls run provisionally, their results checked, and the second
  forward runs the kernel check) and with the cache the first run filled (a
  new process on the same machine: the kept forward choice is taken as is;
  the backward, called once before, was never confirmed and is provisional
  again).
* ``train 30 steps``: a 3-layer Conv2DTranspose generator (128 -> 64 -> 32 -> 3,
  4x4 -> 32x32, batch 8, bias, relu/relu/tanh) trained with autograd and plain
  SGD for 30 steps on a fresh machine (empty plan cache), end to end, and its
  first step.

    python benchmarks/cold.py                # 5 repeats, about a minute on 2 cores
    python benchmarks/cold.py --repeats 3 --json benchmarks/results/cold.json
    python benchmarks/cold.py --repeats 1 --no-peers   # mxdeconv alone (CI's smoke run)

MXNet runs in its venv (scripts/setup_mxnet_venv.sh; ``--mxnet-python`` or
``MXNET_VENV``); PyTorch where ``import torch`` works.  A missing peer is
reported as missing.  Only the standard library is imported at the top: the
same file is each contender's worker (``--worker NAME WHAT``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
LAYER = dict(data=(32, 512, 4, 4), weight=(512, 256, 4, 4), num_filter=256, kernel=(4, 4),
             stride=(2, 2), pad=(1, 1))
GENERATOR = [(128, 64, "relu"), (64, 32, "relu"), (32, 3, "tanh")]  # in, out, activation
GENERATOR_INPUT, STEPS, LEARNING_RATE = (8, 128, 4, 4), 30, 0.01


# -- workers: one process each, printing one JSON line ---------------------------------
def _worker_first_calls(name: str) -> Dict[str, float]:
    begun = time.perf_counter()
    import numpy as np
    if name == "mxdeconv":
        from mxdeconv import nd as lib
    elif name == "torch":
        import torch
    else:
        import mxnet as mx
        lib = mx.nd
    imported = time.perf_counter()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(LAYER["data"], dtype=np.float32)
    w = (rng.standard_normal(LAYER["weight"], dtype=np.float32) * 0.02)
    b = (rng.standard_normal(LAYER["num_filter"], dtype=np.float32) * 0.1)
    times: List[float] = []
    if name == "torch":
        tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, w, b))
        for _ in range(2):
            start = time.perf_counter()
            y = torch.nn.functional.conv_transpose2d(tx, tw, tb, stride=2, padding=1)
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        y.backward(torch.ones_like(y))
        times.append(time.perf_counter() - start)
    else:
        params = dict(kernel=LAYER["kernel"], stride=LAYER["stride"], pad=LAYER["pad"],
                      num_filter=LAYER["num_filter"], no_bias=False)
        ax, aw, ab = lib.array(x), lib.array(w), lib.array(b)
        for _ in range(2):
            start = time.perf_counter()
            y = lib.Deconvolution(ax, aw, ab, **params)
            y.asnumpy()
            times.append(time.perf_counter() - start)
        start = time.perf_counter()
        if name == "mxdeconv":
            grads = lib.Deconvolution_backward(lib.ones(y.shape), ax, aw, ab, **params)
            [g.asnumpy() for g in grads]
        else:
            for array in (ax, aw, ab):
                array.attach_grad()
            with mx.autograd.record():
                y = lib.Deconvolution(ax, aw, ab, **params)
            y.backward(lib.ones(y.shape))
            [g.grad.asnumpy() for g in (ax, aw, ab)]
        times.append(time.perf_counter() - start)
    return {"import": imported - begun, "first forward": times[0],
            "second forward": times[1], "first backward": times[2]}


def _worker_training(name: str) -> Dict[str, float]:
    """The generator's 30 steps, timed from after the imports."""
    import numpy as np
    if name == "torch":
        import torch
    elif name == "mxdeconv":
        from mxdeconv import autograd, gluon, nd
    else:
        from mxnet import autograd, gluon, nd
    rng = np.random.default_rng(1)
    z = rng.standard_normal(GENERATOR_INPUT, dtype=np.float32)
    target = np.tanh(rng.standard_normal((GENERATOR_INPUT[0], 3, 32, 32), dtype=np.float32))
    steps: List[float] = []
    begun = time.perf_counter()
    if name == "torch":
        layers = [torch.nn.ConvTranspose2d(i, o, 4, stride=2, padding=1) for i, o, _ in GENERATOR]
        acts = {"relu": torch.relu, "tanh": torch.tanh}
        params = [p for layer in layers for p in layer.parameters()]
        tz, tt = torch.from_numpy(z), torch.from_numpy(target)
        for _ in range(STEPS):
            start = time.perf_counter()
            out = tz
            for layer, (_, _, act) in zip(layers, GENERATOR):
                out = acts[act](layer(out))
            loss = ((out - tt) ** 2).mean()
            for p in params:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= LEARNING_RATE * p.grad
            loss.item()
            steps.append(time.perf_counter() - start)
    else:
        net = gluon.nn.HybridSequential() if name == "mxnet" else gluon.HybridSequential()
        conv = gluon.nn.Conv2DTranspose if name == "mxnet" else gluon.Conv2DTranspose
        for i, o, act in GENERATOR:
            net.add(conv(o, 4, strides=2, padding=1, in_channels=i, activation=act))
        net.initialize()
        params = list(net.collect_params().values())
        nz, nt = nd.array(z), nd.array(target)
        for _ in range(STEPS):
            start = time.perf_counter()
            with autograd.record():
                out = net(nz)
                diff = out - nt
                loss = (diff * diff).mean()
            loss.backward()
            for p in params:
                weight = p.data()
                weight[:] = weight - LEARNING_RATE * p.grad()
            loss.asnumpy().reshape(-1)[0]
            steps.append(time.perf_counter() - start)
    return {f"train {STEPS} steps": time.perf_counter() - begun, "first step": steps[0],
            "last step": steps[-1]}


def _worker(name: str, what: str) -> None:
    result = _worker_first_calls(name) if what == "first" else _worker_training(name)
    print(json.dumps(result))


# -- the driver -------------------------------------------------------------------------
def run_worker(python: str, script: str, args: List[str], env: Dict[str, str],
               timeout: float = 600) -> Any:
    """``script --worker *args`` in a fresh process of ``python`` (from the
    temporary folder): the JSON of its last output line, or None (its error
    reported) when it failed.  The benchmarks of this folder run their
    contenders so."""
    run = subprocess.run([python, str(Path(script).resolve()), "--worker", *args],
                         env=env, capture_output=True, text=True, timeout=timeout,
                         cwd=tempfile.gettempdir())
    if run.returncode != 0:
        sys.stderr.write(f"{' '.join(args)} failed:\n{run.stderr[-2000:]}\n")
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])


def _run(python: str, name: str, what: str, env: Dict[str, str]) -> Optional[Dict[str, float]]:
    return run_worker(python, __file__, [name, what], env)


def _contenders(mxnet_python: Path, peers: bool) -> Dict[str, str]:
    found = {"mxdeconv": sys.executable}
    if not peers:
        return found
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        found["torch"] = sys.executable
    else:
        print("PyTorch: missing (pip install torch==2.13.0)")
    if mxnet_python.exists():
        found["mxnet"] = str(mxnet_python)
    else:
        print(f"MXNet 1.9.1: missing (no {mxnet_python}: run scripts/setup_mxnet_venv.sh)")
    return found


def default_mxnet_python() -> Path:
    """MXNet's interpreter: ``$MXNET_VENV/bin/python``, else the repo's ``.venv-mxnet``."""
    return Path(os.environ.get("MXNET_VENV") or REPO_ROOT / ".venv-mxnet") / "bin" / "python"


def measure(repeats: int, threads: int, mxnet_python: Optional[Path] = None,
            peers: bool = True) -> Dict[str, Dict[str, float]]:
    """{row: {figure: median seconds}}, each run a fresh process (``mxnet_python``
    None: :func:`default_mxnet_python`)."""
    contenders = _contenders(mxnet_python or default_mxnet_python(), peers)
    base = dict(os.environ, OMP_NUM_THREADS=str(threads))
    # An installed package imports from bytecode caches: with writing them off
    # (some sandboxes set this) every import would compile its sources again,
    # about 0.1 s for mxdeconv.  One untimed import per contender writes them.
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    for name, python in contenders.items():
        subprocess.run([python, "-c", f"import {'mxnet' if name == 'mxnet' else name}"],
                       env=base, capture_output=True, cwd=tempfile.gettempdir(), timeout=600)
    samples: Dict[str, Dict[str, List[float]]] = {}

    def add(row: str, result: Optional[Dict[str, float]]) -> None:
        if result is not None:
            for figure, seconds in result.items():
                samples.setdefault(row, {}).setdefault(figure, []).append(seconds)

    order = list(contenders.items())
    for repeat in range(repeats):
        # Interleaved run by run, each round starting one contender later: on a
        # small VM a process runs slower right after a big one, and no
        # contender should always follow the same one.
        shift = repeat % len(order)
        for name, python in order[shift:] + order[:shift]:
            if name == "mxdeconv":
                cache = tempfile.mkdtemp(prefix="mxdeconv-cold-")
                env = dict(base, MXDECONV_CACHE_DIR=cache)
                add("mxdeconv, empty plan cache", _run(python, name, "first", env))
                add("mxdeconv, plan cache filled", _run(python, name, "first", env))
                add("mxdeconv, empty plan cache",
                    _run(python, name, "train", dict(base, MXDECONV_CACHE_DIR=tempfile.mkdtemp(
                        prefix="mxdeconv-cold-"))))
            else:
                label = "PyTorch" if name == "torch" else "MXNet 1.9.1"
                add(label, _run(python, name, "first", base))
                add(label, _run(python, name, "train", base))
        print(f"round {repeat + 1}/{repeats} done", flush=True)
    return {row: {figure: statistics.median(values) for figure, values in figures.items()}
            for row, figures in samples.items()}


FIGURES = ["import", "first forward", "second forward", "first backward",
           f"train {STEPS} steps", "first step", "last step"]


def table(results: Dict[str, Dict[str, float]]) -> str:
    """The results as a Markdown-style table of milliseconds."""
    lines = ["| | " + " | ".join(FIGURES) + " |", "|---" * (len(FIGURES) + 1) + "|"]
    for row, figures in results.items():
        cells = [f"{figures[f] * 1e3:.0f} ms" if f in figures else "" for f in FIGURES]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--mxnet-python", type=Path, default=default_mxnet_python())
    parser.add_argument("--json", type=Path, help="also write the medians here")
    parser.add_argument("--no-peers", action="store_true", help="mxdeconv alone")
    parser.add_argument("--worker", nargs=2, metavar=("NAME", "WHAT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(*args.worker)
        return 0
    results = measure(args.repeats, args.threads, args.mxnet_python, not args.no_peers)
    if "mxdeconv, empty plan cache" not in results:
        print("mxdeconv's runs failed (see above)")
        return 1
    print(f"\nCold start, {args.threads} threads, medians of {args.repeats} fresh processes:\n")
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"threads": args.threads, "repeats": args.repeats,
                                         "medians_seconds": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
