"""Figures derived from the measurements (ratios, GFLOP/s, overhead), the JSON, the plot.

Everything printed by :mod:`run` is computed here first and stored in the JSON,
so the file holds every figure of the table and more (quartiles, per-round
medians, the numerical check, versions, the machine).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from contender import FLOP_FACTOR, MODE_LABELS, MODES
from layers import Case

SUBJECT, RAW, MXNET, TORCH, NUMPY = "mxdeconv", "raw", "MXNet", "PyTorch", "NumPy"
#: mxdeconv with the planner's tuning off: oneDNN's first correct candidate.
FIRST = "first choice"
CONTENDERS: Tuple[str, ...] = (SUBJECT, RAW, FIRST, MXNET, TORCH, NUMPY)
#: Raw oneDNN has no "+asnumpy": that row compares with the raw inference forward.
RAW_MODE_FOR = {"fwd_infer_asnumpy": "fwd_infer"}
#: (numerator, denominator) of every ratio; the first three are the table's.
RATIOS: Tuple[Tuple[str, str], ...] = (
    (SUBJECT, RAW), (MXNET, SUBJECT), (TORCH, SUBJECT), (FIRST, SUBJECT), (NUMPY, SUBJECT),
    (MXNET, TORCH))
#: Conventions, printed under the tables and stored in the JSON.
NOTES = {
    "flops": "FLOPs = 2*N*C_in*prod(in_spatial)*(C_out/groups)*prod(kernel) per forward, "
             "bwd = 2x, fwd+bwd = 3x; this counts products cropped away by pad, which a "
             "direct algorithm skips, so GFLOP/s and %peak overstate the arithmetic done "
             "by 1/useful_fraction (shown per layer) and %peak can exceed 100%",
    "raw": "raw = mxdeconv.bench_hooks.raw_{forward,backward}_seconds (the cached oneDNN "
           "primitives in a C loop); the +asnumpy row compares with the raw inference "
           "forward, raw fwd+bwd is one training forward plus one backward per sample",
    "overhead": "overhead_us = contender median - raw median on the tiny layer",
    "first choice": "first choice = mxdeconv with the planner's tuning off "
                    "(MXDECONV_TUNE=0: oneDNN's first candidate that passes the check); "
                    "first choice/mxdeconv > 1 means tuning made the call faster; raw is the "
                    "tuned plan's primitives",
    "timing": "median over all iterations of interleaved rounds (round-robin over "
              "every contender and mode, order rotated each round)",
}


def ratio_name(numerator: str, denominator: str) -> str:
    return f"{numerator}/{denominator}"


def entry_of(contenders: Mapping[str, Mapping[str, Any]], name: str,
             mode: str) -> Optional[Mapping[str, Any]]:
    """A contender's record for ``mode`` (raw's stand-in row where it has none).

    None when the contender does not offer the mode at all; else a summary
    with ``median_s`` or a ``status`` saying why not.
    """
    if name == RAW:
        mode = RAW_MODE_FOR.get(mode, mode)
    return contenders.get(name, {}).get(mode)


def median_of(contenders: Mapping[str, Mapping[str, Any]], name: str,
              mode: str) -> Optional[float]:
    return (entry_of(contenders, name, mode) or {}).get("median_s")


def summarize_case(case: Case, contenders: Dict[str, Dict[str, Dict[str, Any]]],
                   peak_gflops: float, check: Dict[str, Any],
                   info: Dict[str, Any]) -> Dict[str, Any]:
    """One case's record: measurements plus ratios, GFLOP/s and % of peak."""
    ratios: Dict[str, Dict[str, Optional[float]]] = {}
    gflops: Dict[str, Dict[str, float]] = {}
    pct_peak: Dict[str, Dict[str, float]] = {}
    for mode in MODES:
        ratios[mode] = {}
        for numerator, denominator in RATIOS:
            top = median_of(contenders, numerator, mode)
            bottom = median_of(contenders, denominator, mode)
            ratios[mode][ratio_name(numerator, denominator)] = (
                top / bottom if top is not None and bottom else None)
        for name in contenders:
            seconds = median_of(contenders, name, mode)
            if seconds:
                rate = case.forward_flops * FLOP_FACTOR[mode] / seconds / 1e9
                gflops.setdefault(name, {})[mode] = rate
                pct_peak.setdefault(name, {})[mode] = 100.0 * rate / peak_gflops
    return {"case": case.describe(), "contenders": contenders, "ratios": ratios,
            "gflops": gflops, "pct_peak": pct_peak, "check": check, "info": info}


def overhead_us(record: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Per-call time and time over raw oneDNN, in microseconds, for every contender."""
    figures: Dict[str, Dict[str, Any]] = {}
    for name in record["contenders"]:
        for mode in MODES:
            seconds = median_of(record["contenders"], name, mode)
            if seconds is None:
                continue
            raw = median_of(record["contenders"], RAW, mode)
            figures.setdefault(name, {})[mode] = {
                "per_call_us": seconds * 1e6,
                "over_raw_us": None if raw is None else (seconds - raw) * 1e6}
    return figures


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, sort_keys=False, default=str) + "\n")


def plot_ratios(path: Path, records: Sequence[Mapping[str, Any]],
                modes: Sequence[str] = ("fwd_train", "fwd_infer", "fwd_bwd")) -> str:
    """Grouped bars of the ratios per case, one panel per mode; returns a status line."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed (pip install matplotlib)"
    names = [ratio_name(n, d) for n, d in RATIOS if NUMPY not in (n, d)]
    series = [name for name in names
              if any(r["ratios"][m].get(name) for r in records for m in modes)]
    if not series:
        return "plot skipped: no ratio could be computed (contenders missing)"
    labels = [f"{r['case']['layer']}\nb{r['case']['batch']}" for r in records]
    figure, axes = plt.subplots(len(modes), 1, figsize=(max(8, 0.9 * len(records) + 3),
                                                        3.2 * len(modes)), squeeze=False)
    width = 0.8 / len(series)
    for axis, mode in zip(axes[:, 0], modes):
        for index, name in enumerate(series):
            values = [r["ratios"][mode].get(name) or math.nan for r in records]
            axis.bar([x + (index - (len(series) - 1) / 2) * width for x in range(len(records))],
                     values, width, label=name)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_yscale("log")
        axis.set_title(f"{MODE_LABELS[mode]}: time ratio (> 1: the denominator is faster)")
        axis.set_xticks(range(len(records)))
        axis.set_xticklabels(labels, fontsize=7)
        axis.grid(axis="y", which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=8, ncol=len(series))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"plot written to {path}"



#: The targets of the planner (issue "fastest correct plan"), as computed below.
TARGET_MODES = ("fwd_infer", "fwd_train", "fwd_bwd")


def _geomean(values: Sequence[float]) -> Optional[float]:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def target_summary(records: Sequence[Mapping[str, Any]],
                   peak_gflops: float) -> Dict[str, Any]:
    """Speed-ups over the faster peer per batch size and mode (geometric mean,
    layers slower than either peer), mxdeconv/raw at batch 1 in training, and
    the share of peak on layers over 1 GFLOP (counting only products not cropped
    by pad)."""
    summary: Dict[str, Any] = {"vs_faster_peer": {}, "batch1_over_raw": {},
                               "peak_over_1gflop": []}
    for batch_class in ("batch 1", "batch >= 32"):
        for mode in TARGET_MODES:
            speedups, slower = [], []
            for record in records:
                batch = record["case"]["batch"]
                if (batch == 1) != (batch_class == "batch 1") or batch not in (1, 32):
                    continue
                mine = median_of(record["contenders"], SUBJECT, mode)
                peers = [t for t in (median_of(record["contenders"], MXNET, mode),
                                     median_of(record["contenders"], TORCH, mode)) if t]
                if not mine or not peers:
                    continue
                speedups.append(min(peers) / mine)
                if mine > min(peers):
                    slower.append(f"{record['case']['layer']}/b{batch}")
            if speedups:
                summary["vs_faster_peer"][f"{batch_class}, {MODE_LABELS[mode]}"] = {
                    "geomean_speedup": _geomean(speedups), "layers": len(speedups),
                    "slower_than_a_peer": slower}
    for mode in ("fwd_train", "bwd"):
        ratios = [(f"{r['case']['layer']}/b1",
                   median_of(r["contenders"], SUBJECT, mode) /
                   median_of(r["contenders"], RAW, mode))
                  for r in records if r["case"]["batch"] == 1
                  and median_of(r["contenders"], SUBJECT, mode)
                  and median_of(r["contenders"], RAW, mode)]
        summary["batch1_over_raw"][MODE_LABELS[mode]] = ratios
    for record in records:
        case = record["case"]
        mine = median_of(record["contenders"], SUBJECT, "fwd_bwd")
        if mine and case["forward_flops"] * 3 > 1e9:
            useful = case["forward_flops"] * 3 * case["useful_fraction"]
            summary["peak_over_1gflop"].append(
                (f"{case['layer']}/b{case['batch']}", 100.0 * useful / mine / 1e9 / peak_gflops))
    return summary


def target_lines(summary: Mapping[str, Any]) -> Sequence[str]:
    lines = ["== targets: mxdeconv against the faster of MXNet and PyTorch (speed-up, "
             "geometric mean; > 1: mxdeconv faster) =="]
    for label, figures in summary["vs_faster_peer"].items():
        slower = figures["slower_than_a_peer"]
        lines.append(f"   {label:28s} {figures['geomean_speedup']:.2f}x over "
                     f"{figures['layers']} layer(s); slower than a peer: "
                     f"{', '.join(slower) if slower else 'none'}")
    for label, ratios in summary["batch1_over_raw"].items():
        if ratios:
            worst = max(ratios, key=lambda item: item[1])
            lines.append(f"   batch 1, {label} / its plan's primitives alone: worst "
                         f"{worst[1]:.2f}x ({worst[0]}), geometric mean "
                         f"{_geomean([r for _, r in ratios]):.2f}x")
    for name, pct in summary["peak_over_1gflop"]:
        lines.append(f"   {name}: fwd+bwd at {pct:.0f}% of the measured fp32 peak "
                     "(useful products only)")
    return lines
