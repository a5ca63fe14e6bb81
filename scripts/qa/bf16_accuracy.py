#!/usr/bin/env python
"""How accurate is bfloat16?  Measured on realistic layers, against float64.

    python scripts/qa/bf16_accuracy.py            # the table docs/bfloat16.rst shows
    python scripts/qa/bf16_accuracy.py --json bf16.json

For each layer (a DCGAN generator layer, FCN 2x upsampling, 1-D audio, 3-D)
it draws float32 data, weight, bias and output gradient (weights scaled like
a trained layer's), then computes the forward and backward passes

* in float64 on the NumPy path, from the float32 values: the truth;
* in bfloat16 on the oneDNN path (and, with ``--numpy``, on the NumPy path),
  from the same values rounded to bfloat16;
* in float32 on the oneDNN path, for scale.

and prints, per result, the median and the largest relative error
``|got - truth| / |truth|`` over the elements whose ``|truth|`` is at least
1e-2 of the result's largest magnitude (near zero, cancellation makes relative
error meaningless), and the normwise error ``||got - truth|| / ||truth||``.
Two bfloat16 columns: against the truth from the float32 inputs (what a user
gets: the inputs' rounding included) and against float64 on the same
bfloat16-rounded inputs (the kernel's own error: float32 accumulation and one
final rounding).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

import mxdeconv
from mxdeconv import nd
from mxdeconv.semantics.attributes import DeconvolutionParam, infer_geometry

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - the script says what to install
    sys.exit("bf16_accuracy.py needs ml_dtypes: pip install -e \".[bf16]\"")

BF16 = np.dtype(ml_dtypes.bfloat16)
#: (name, data shape, MXNet parameters); each with a bias.
LAYERS: List[Tuple[str, Tuple[int, ...], Dict[str, Any]]] = [
    ("dcgan 512->256 4x4 b8", (8, 512, 4, 4),
     dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256, no_bias=False)),
    ("dcgan 128->64 16x16 b8", (8, 128, 16, 16),
     dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=64, no_bias=False)),
    ("fcn up2x 256->128 32x32 b2", (2, 256, 32, 32),
     dict(kernel=(2, 2), stride=(2, 2), num_filter=128, no_bias=False)),
    ("audio 1-D 128->64 k16 s8 b2", (2, 128, 1024),
     dict(kernel=(16,), stride=(8,), pad=(4,), num_filter=64, no_bias=False)),
    ("3-D 64->32 k4 s2 b1", (1, 64, 8, 16, 16),
     dict(kernel=(4, 4, 4), stride=(2, 2, 2), pad=(1, 1, 1), num_filter=32, no_bias=False)),
]
RESULTS = ("output", "data grad", "weight grad", "bias grad")
#: Elements with |truth| below this share of the result's largest magnitude
#: are left out of the elementwise relative error.
FLOOR = 1e-2


def make_inputs(shape: Sequence[int], params: Dict[str, Any],
                seed: int) -> Tuple[np.ndarray, ...]:
    """float32 data ~ N(0, 1), weight ~ N(0, 1/fan_in) (He-like), bias ~ N(0, 0.1),
    and an output gradient ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    channels = shape[1]
    kernel = params["kernel"]
    weight_shape = (channels, params["num_filter"]) + tuple(kernel)
    fan_in = channels * int(np.prod(kernel))
    data = rng.standard_normal(shape).astype(np.float32)
    weight = (rng.standard_normal(weight_shape) / np.sqrt(fan_in)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(params["num_filter"])).astype(np.float32)
    out_shape = infer_geometry(DeconvolutionParam.from_kwargs(**params), shape).out_shape
    out_grad = rng.standard_normal(out_shape).astype(np.float32)
    return data, weight, bias, out_grad


def run(impl: str, dtype: Any, arrays: Sequence[np.ndarray],
        params: Dict[str, Any]) -> List[np.ndarray]:
    """Forward and backward in ``dtype`` on ``impl``; results as float64."""
    data, weight, bias, out_grad = (nd.array(a.astype(dtype), dtype=dtype) for a in arrays)
    with mxdeconv.use_impl(impl):
        out = nd.Deconvolution(data, weight, bias, **params)
        grads = nd.Deconvolution_backward(out_grad, data, weight, bias, **params)
    return [r.asnumpy().astype(np.float64) for r in (out,) + tuple(grads)]


def errors(got: np.ndarray, truth: np.ndarray) -> Dict[str, float]:
    """Median and largest elementwise relative error (|truth| >= FLOOR x max),
    and the normwise relative error."""
    magnitude = np.abs(truth)
    keep = magnitude >= FLOOR * magnitude.max()
    relative = np.abs(got - truth)[keep] / magnitude[keep]
    return {"median": float(np.median(relative)), "max": float(relative.max()),
            "norm": float(np.linalg.norm(got - truth) / np.linalg.norm(truth))}


def measure(paths: Sequence[str], seed: int) -> List[Dict[str, Any]]:
    rows = []
    for name, shape, params in LAYERS:
        arrays = make_inputs(shape, params, seed)
        truth = run("numpy", np.float64, arrays, params)
        rounded = [a.astype(BF16).astype(np.float64) for a in arrays]
        truth_rounded = run("numpy", np.float64, rounded, params)
        columns = {"float32 oneDNN": (run("onednn", np.float32, arrays, params), truth)}
        for impl in paths:
            results = run(impl, BF16, arrays, params)
            columns[f"bf16 {impl} vs fp32 inputs"] = (results, truth)
            columns[f"bf16 {impl} vs bf16 inputs"] = (results, truth_rounded)
        for index, result in enumerate(RESULTS):
            rows.append({"layer": name, "result": result, "errors": {
                column: errors(got[index], want[index])
                for column, (got, want) in columns.items()}})
    return rows


def table(rows: Sequence[Dict[str, Any]], column_names: Sequence[str]) -> str:
    """A text table: per layer and result, median / max relative error per column."""
    heading = f"{'layer':28s} {'result':11s}" + "".join(
        f"  {name:>21s}" for name in column_names)
    lines = [heading, f"{'':40s}" + "".join(f"  {'median / max':>21s}"
                                            for _ in column_names)]
    previous = None
    for row in rows:
        layer = row["layer"] if row["layer"] != previous else ""
        previous = row["layer"]
        cells = "".join(f"  {row['errors'][c]['median']:9.1e} / {row['errors'][c]['max']:7.1e}"
                        for c in column_names)
        lines.append(f"{layer:28s} {row['result']:11s}{cells}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numpy", action="store_true",
                        help="also run bfloat16 on the NumPy path (computes in float32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args(argv)
    info = mxdeconv.runtime_info()
    paths = ["onednn"] + (["numpy"] if args.numpy else [])
    started = time.perf_counter()
    rows = measure(paths, args.seed)
    columns = list(rows[0]["errors"])
    print(f"mxdeconv {mxdeconv.__version__}, oneDNN {info['onednn_version']} "
          f"({info['cpu_isa']}), {info['num_threads']} threads; relative error "
          f"|got - float64| / |float64| over elements >= {FLOOR:g} x max")
    print(table(rows, columns))
    worst = {c: max(r["errors"][c]["max"] for r in rows) for c in columns}
    median = {c: float(np.median([r["errors"][c]["median"] for r in rows])) for c in columns}
    norm = {c: max(r["errors"][c]["norm"] for r in rows) for c in columns}
    for column in columns:
        print(f"{column:>26s}: median of medians {median[column]:.1e}, largest "
              f"{worst[column]:.1e}, largest normwise {norm[column]:.1e}")
    print(f"({time.perf_counter() - started:.1f} s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"runtime": info, "floor": FLOOR, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
