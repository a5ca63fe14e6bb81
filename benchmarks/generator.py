#!/usr/bin/env python
"""MXNet's DCGAN example generator in inference: mxdeconv unfolded and folded
against MXNet 1.9.1 and PyTorch.

The generator of MXNet's ``example/gluon/dc_gan/dcgan.py`` (nz = 100,
ngf = 64): ``Conv2DTranspose`` 100 -> 512 (k4 s1 p0), then 512 -> 256 ->
128 -> 64 (k4 s2 p1), each without bias and followed by ``BatchNorm`` and
relu, and 64 -> 3 (k4 s2 p1) with tanh: a 1 x 1 noise to a 64 x 64 image.
Every contender runs the same weights (NumPy, from a seed; the running
statistics non-trivial: random means, positive random variances), in inference
(the running statistics), in a fresh process of its own:

* ``mxdeconv, unfolded``: ``mxdeconv.gluon.nn``, as ported (only the imports
  change), ``fold_batchnorm`` off;
* ``mxdeconv, folded``: the same with ``mxdeconv.gluon.folding.fold_batchnorm``
  on (each Conv2DTranspose + BatchNorm pair one Deconvolution);
* ``MXNet 1.9.1, hybridized``: ``net.hybridize()``, as MXNet users run it;
* ``MXNet 1.9.1, imperative``: the same net not hybridized;
* ``PyTorch``: ``ConvTranspose2d`` + ``BatchNorm2d`` + ``ReLU`` in eval mode
  under ``torch.no_grad()``.

First every contender's image is checked against mxdeconv's unfolded one
(1e-4).  Then ``--repeats`` rounds, the contenders interleaved (each round
starting one contender later), each process doing warm-up calls and then
``--calls`` timed calls (the result read back into NumPy each call); a
process reports the median of its calls, the table the median over rounds.
mxdeconv's processes share one plan cache (a machine where the net ran
before), filled by the check pass, which tunes every layer to the end
(``mxdeconv.finish_tuning()`` after the first call, as a server would; every
mxdeconv process calls it after its first call).

    python benchmarks/generator.py                     # batch 1 and 64, 5 rounds
    python benchmarks/generator.py --batch 64 --repeats 7 --json out.json
    python benchmarks/generator.py --threads 1         # what the docs' table ran
    python benchmarks/generator.py --smoke             # seconds, mxdeconv alone, untuned

MXNet runs in its venv (``--mxnet-python``, ``MXNET_VENV``, or
``/work/venv-mxnet`` / the repo's ``.venv-mxnet``); PyTorch where ``import
torch`` works.  A missing peer is reported as missing.  Only the standard
library is imported at the top: the same file is each contender's worker.
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
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
NZ, NGF = 100, 64
# (in, out, stride, pad, activation); every layer k4, no bias, BatchNorm before relu.
LAYERS = [(NZ, NGF * 8, 1, 0, "relu"), (NGF * 8, NGF * 4, 2, 1, "relu"),
          (NGF * 4, NGF * 2, 2, 1, "relu"), (NGF * 2, NGF, 2, 1, "relu"),
          (NGF, 3, 2, 1, "tanh")]
CONTENDERS = {  # name: (label, interpreter kind)
    "unfolded": ("mxdeconv, unfolded", "self"),
    "folded": ("mxdeconv, folded", "self"),
    "mxnet-hybrid": ("MXNet 1.9.1, hybridized", "mxnet"),
    "mxnet": ("MXNet 1.9.1, imperative", "mxnet"),
    "torch": ("PyTorch", "self"),
}
TOLERANCE = 1e-4
WARMUP = 5
#: {batch: {label: each round's median seconds}} of the last measure().
SAMPLES: Dict[int, Dict[str, List[float]]] = {}


# -- weights and the workers ------------------------------------------------------------
def make_weights(path: Path, seed: int = 0) -> None:
    """The generator's arrays (``w0``, ``gamma0``, ``beta0``, ``mean0``,
    ``var0``, ..., ``w4``) into ``path`` (an .npz)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    arrays = {}
    for i, (c_in, c_out, _, _, act) in enumerate(LAYERS):
        arrays[f"w{i}"] = (rng.standard_normal((c_in, c_out, 4, 4)) * 0.05).astype(np.float32)
        if act == "relu":
            arrays[f"gamma{i}"] = rng.uniform(0.5, 1.5, c_out).astype(np.float32)
            arrays[f"beta{i}"] = (rng.standard_normal(c_out) * 0.1).astype(np.float32)
            arrays[f"mean{i}"] = (rng.standard_normal(c_out) * 0.1).astype(np.float32)
            arrays[f"var{i}"] = rng.uniform(0.5, 2.0, c_out).astype(np.float32)
    np.savez(path, **arrays)


def _build(name: str, weights):
    """(call: z ndarray -> image ndarray, the library's input of z)."""
    if name == "torch":
        import torch
        modules = []
        for i, (c_in, c_out, stride, pad, act) in enumerate(LAYERS):
            conv = torch.nn.ConvTranspose2d(c_in, c_out, 4, stride, pad, bias=False)
            conv.weight.data = torch.from_numpy(weights[f"w{i}"].copy())
            modules.append(conv)
            if act == "relu":
                bn = torch.nn.BatchNorm2d(c_out)
                bn.weight.data = torch.from_numpy(weights[f"gamma{i}"].copy())
                bn.bias.data = torch.from_numpy(weights[f"beta{i}"].copy())
                bn.running_mean.copy_(torch.from_numpy(weights[f"mean{i}"]))
                bn.running_var.copy_(torch.from_numpy(weights[f"var{i}"]))
                modules += [bn, torch.nn.ReLU()]
            else:
                modules.append(torch.nn.Tanh())
        net = torch.nn.Sequential(*modules).eval()

        def call(z):
            with torch.no_grad():
                return net(torch.from_numpy(z)).numpy()
        return call
    if name.startswith("mxnet"):
        from mxnet import nd
        from mxnet.gluon import nn
    else:
        from mxdeconv import nd
        from mxdeconv.gluon import folding, nn
        folding.fold_batchnorm = name == "folded"
    net = nn.HybridSequential()
    with net.name_scope():  # MXNet's example, as written
        for c_in, c_out, stride, pad, act in LAYERS:
            net.add(nn.Conv2DTranspose(c_out, 4, stride, pad, use_bias=False,
                                       in_channels=c_in))
            if act == "relu":
                net.add(nn.BatchNorm(in_channels=c_out))
            net.add(nn.Activation(act))
    net.initialize()
    index = 0
    for i, (_, _, _, _, act) in enumerate(LAYERS):
        net[index].weight.set_data(nd.array(weights[f"w{i}"]))
        if act == "relu":
            bn = net[index + 1]
            for param, key in ((bn.gamma, "gamma"), (bn.beta, "beta"),
                               (bn.running_mean, "mean"), (bn.running_var, "var")):
                param.set_data(nd.array(weights[f"{key}{i}"]))
            index += 3
        else:
            index += 2
    if name == "mxnet-hybrid":
        net.hybridize(static_alloc=False)

    def call(z):
        return net(nd.array(z)).asnumpy()
    return call


def _worker(name: str, weights_path: str, batch: int, calls: int, out: str) -> None:
    import numpy as np
    weights = dict(np.load(weights_path))
    z = np.random.default_rng(1).standard_normal((batch, NZ, 1, 1)).astype(np.float32)
    call = _build(name, weights)
    image = call(z)
    if name in ("unfolded", "folded"):
        # Steady state: the planner tunes a layer over its first some hundred
        # calls; a served model runs once, then finish_tuning() (the tuned
        # plans are kept on disk: the check pass tunes, later processes read).
        import mxdeconv
        mxdeconv.finish_tuning()
    if out:
        np.save(out, image)
    for _ in range(WARMUP if calls else 0):
        call(z)
    times: List[float] = []
    for _ in range(calls):
        start = time.perf_counter()
        call(z)
        times.append(time.perf_counter() - start)
    print(json.dumps({"median": statistics.median(times) if times else None,
                      "min": min(times) if times else None}))


# -- the driver -------------------------------------------------------------------------
def default_mxnet_python() -> Path:
    """``$MXNET_VENV/bin/python``, else /work/venv-mxnet's, else the repo's .venv-mxnet's."""
    if os.environ.get("MXNET_VENV"):
        return Path(os.environ["MXNET_VENV"]) / "bin" / "python"
    for venv in (Path("/work/venv-mxnet"), REPO_ROOT / ".venv-mxnet"):
        if (venv / "bin" / "python").exists():
            return venv / "bin" / "python"
    return REPO_ROOT / ".venv-mxnet" / "bin" / "python"


def _run(python: str, name: str, args: List[str], env: Dict[str, str]) -> Optional[dict]:
    from cold import run_worker  # this folder: the script's own
    return run_worker(python, __file__, [name] + args, env)


def _contenders(mxnet_python: Path, peers: bool) -> Dict[str, str]:
    found = {"unfolded": sys.executable, "folded": sys.executable}
    if not peers:
        return found
    if mxnet_python.exists():
        found["mxnet-hybrid"] = found["mxnet"] = str(mxnet_python)
    else:
        print(f"MXNet 1.9.1: missing (no {mxnet_python}: run scripts/setup_mxnet_venv.sh)")
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        found["torch"] = sys.executable
    else:
        print("PyTorch: missing (pip install torch==2.13.0)")
    return found


def measure(batches: List[int], repeats: int, calls: Dict[int, int], threads: int,
            mxnet_python: Optional[Path] = None, peers: bool = True,
            only: Optional[List[str]] = None,
            tune: bool = True) -> Dict[int, Dict[str, float]]:
    """{batch: {label: median seconds per call}}; raises when an image disagrees
    (``tune`` False: mxdeconv's first choices, ``MXDECONV_TUNE=0``)."""
    import numpy as np
    contenders = _contenders(mxnet_python or default_mxnet_python(), peers)
    if only:
        contenders = {k: v for k, v in contenders.items() if k in only or k == "unfolded"}
    work = Path(tempfile.mkdtemp(prefix="mxdeconv-generator-"))
    weights = work / "weights.npz"
    make_weights(weights)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MXNET_CPU_WORKER_NTHREADS="1",
               PYTHONNOUSERSITE="1", MXDECONV_CACHE_DIR=str(work / "plans"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not tune:
        env["MXDECONV_TUNE"] = "0"
    results: Dict[int, Dict[str, float]] = {}
    for batch in batches:
        # The check (and mxdeconv's plans, and the bytecode caches): one untimed run each.
        images = {}
        for name, python in contenders.items():
            out = work / f"{name}-{batch}.npy"
            if _run(python, name, [str(weights), str(batch), "0", str(out)], env) is None:
                raise RuntimeError(f"{name} failed at batch {batch}")
            images[name] = np.load(out)
        reference = images["unfolded"]
        for name, image in images.items():
            error = float(np.abs(image - reference).max())
            print(f"batch {batch}: {CONTENDERS[name][0]:<24} image {image.shape}, "
                  f"max |diff| vs unfolded {error:.1e}", flush=True)
            if image.shape != reference.shape or not error <= TOLERANCE:
                raise RuntimeError(f"{name}'s image differs from mxdeconv's by {error}")
        samples: Dict[str, List[float]] = {}
        order = list(contenders.items())
        for repeat in range(repeats):
            shift = repeat % len(order)
            for name, python in order[shift:] + order[:shift]:
                got = _run(python, name, [str(weights), str(batch), str(calls[batch]), ""], env)
                if got is not None:
                    samples.setdefault(CONTENDERS[name][0], []).append(got["median"])
            print(f"batch {batch}: round {repeat + 1}/{repeats} done", flush=True)
        results[batch] = {label: statistics.median(values) for label, values in samples.items()}
        SAMPLES[batch] = samples
    return results


def table(results: Dict[int, Dict[str, float]]) -> str:
    """An RST grid-free table: per call in ms, and each row's ratio to mxdeconv folded."""
    batches = sorted(results)
    labels = [CONTENDERS[n][0] for n in CONTENDERS
              if any(CONTENDERS[n][0] in results[b] for b in batches)]
    head = ["contender"] + [f"batch {b}" for b in batches] + [f"/ folded, batch {b}"
                                                              for b in batches]
    rows = []
    for label in labels:
        cells = [label]
        for b in batches:
            t = results[b].get(label)
            cells.append("" if t is None else f"{t * 1e3:.2f} ms")
        for b in batches:
            t, f = results[b].get(label), results[b].get("mxdeconv, folded")
            cells.append("" if t is None or f is None else f"{t / f:.2f}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([rule, fmt(head), rule] + [fmt(r) for r in rows] + [rule])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__)
    parser.add_argument("--batch", type=int, action="append",
                        help="batch size (repeatable; default 1 and 64)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of fresh processes")
    parser.add_argument("--calls", type=int, help="timed calls per process "
                        "(default 40 at batch 1, 8 at larger batches)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--mxnet-python", type=Path, default=None)
    parser.add_argument("--only", action="append", choices=sorted(CONTENDERS),
                        help="these contenders (and mxdeconv unfolded, the reference)")
    parser.add_argument("--no-peers", action="store_true", help="mxdeconv alone")
    parser.add_argument("--json", type=Path, help="also write the medians here")
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds: batch 1, 1 round, 2 calls, no peers, no tuning")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        name, weights, batch, calls, out = args.worker
        _worker(name, weights, int(batch), int(calls), out)
        return 0
    if args.smoke:
        args.batch, args.repeats, args.calls, args.no_peers = [1], 1, 2, True
    batches = args.batch or [1, 64]
    calls = {b: args.calls or (40 if b == 1 else 8) for b in batches}
    results = measure(batches, args.repeats, calls, args.threads, args.mxnet_python,
                      not args.no_peers, args.only, tune=not args.smoke)
    print(f"\nMXNet's DCGAN generator (nz={NZ}, ngf={NGF}, 1x1 -> 64x64), inference, "
          f"{args.threads} threads, per call (result read back), medians of "
          f"{args.repeats} fresh processes x {calls} calls:\n")
    print(table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "threads": args.threads, "repeats": args.repeats, "calls": calls,
            "medians_seconds": {str(b): r for b, r in results.items()},
            "rounds_seconds": {str(b): r for b, r in SAMPLES.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
