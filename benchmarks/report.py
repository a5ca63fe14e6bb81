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
             "bwd = 2x (bwd data only and bwd weights only: 1x each, the other "
             "pass's gradients not asked for), fwd+bwd = 3x; this counts products cropped "
             "away by pad, which a "
             "direct algorithm skips, so GFLOP/s and %peak overstate the arithmetic done "
             "by 1/useful_fraction (shown per layer) and %peak can exceed 100%",
    "raw": "raw = mxdeconv.ops.primitive_timing.raw_{forward,backward}_seconds (the cached oneDNN "
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



def format_seconds(seconds: Optional[float]) -> str:
    """A duration for the tables: us below 1 ms, ms below 1 s, else s."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"

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


#: The plot's panels: one per mode, in reading order.
PLOT_MODES: Tuple[str, ...] = ("fwd_infer", "fwd_train", "bwd", "fwd_bwd")
#: Each peer's colour in the plot.
PEER_COLOURS = {MXNET: "#d9730d", TORCH: "#2f6fb3"}
#: Each batch size's marker (filled: the large batch).
BATCH_MARKERS = {1: ("o", "none"), 32: ("s", "full")}


def plot_speedups(path: Path, records: Sequence[Mapping[str, Any]],
                  title: str = "") -> str:
    """The speed-up of mxdeconv over each peer (peer time / mxdeconv time, > 1:
    mxdeconv faster), one panel per mode with the layers down the side, batch 1
    hollow and batch 32 filled, plus a panel of mxdeconv's share of the
    machine's fp32 peak (useful products only).  Returns a status line."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
        from matplotlib.lines import Line2D
    except ImportError:
        return "plot skipped: matplotlib is not installed (pip install -e \".[bench]\")"
    layers: list = []
    for record in records:
        if record["case"]["layer"] not in layers:
            layers.append(record["case"]["layer"])
    peers = [p for p in (MXNET, TORCH)
             if any(r["ratios"][m].get(ratio_name(p, SUBJECT)) for r in records
                    for m in PLOT_MODES)]
    if not peers or not layers:
        return "plot skipped: no speed-up could be computed (a peer or mxdeconv missing)"
    batches = sorted({r["case"]["batch"] for r in records})
    row = {name: index for index, name in enumerate(layers)}
    # Each (peer, batch) on its own sub-row of the layer, so no marker hides another.
    slots = [(peer, batch) for peer in peers for batch in batches]
    offset = {slot: (i - (len(slots) - 1) / 2) * 0.8 / len(slots)
              for i, slot in enumerate(slots)}
    figure, axes = plt.subplots(3, 2, figsize=(9.0, 2.0 + 0.95 * len(layers)),
                                sharey=True, squeeze=False)
    panels = list(axes.flat)
    speedups = [r["ratios"][m].get(ratio_name(p, SUBJECT)) for r in records
                for m in PLOT_MODES for p in peers]
    speedups = [v for v in speedups if v]
    low, high = min(speedups + [0.5]), max(speedups + [2.0])
    for axis, mode in zip(panels, PLOT_MODES):
        axis.axvspan(low / 1.3, 1.0, color="#f2f2f2", zorder=0)
        axis.axvline(1.0, color="black", linewidth=1.0, zorder=1)
        for record in records:
            case = record["case"]
            for peer in peers:
                value = record["ratios"][mode].get(ratio_name(peer, SUBJECT))
                if not value:
                    continue
                marker, fill = BATCH_MARKERS.get(case["batch"], ("D", "full"))
                axis.plot([value], [row[case["layer"]] + offset[(peer, case["batch"])]],
                          marker=marker, fillstyle=fill, linestyle="none", markersize=5.5,
                          color=PEER_COLOURS[peer], zorder=3)
        axis.set_xscale("log")
        axis.set_xlim(low / 1.3, high * 1.3)
        axis.set_title(f"{MODE_LABELS[mode]}: speed-up over each peer", fontsize=10)
        axis.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(
            [t for t in (0.25, 0.5, 1, 2, 5, 10, 20, 50, 100) if low / 1.3 <= t <= high * 1.3]))
        axis.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _: f"{v:g}x"))
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.grid(axis="x", which="major", alpha=0.4)
        axis.text(0.99, 0.01, "mxdeconv faster \u2192", transform=axis.transAxes,
                  ha="right", va="bottom", fontsize=7, color="#555555")
        axis.text(0.01, 0.01, "\u2190 peer faster", transform=axis.transAxes,
                  ha="left", va="bottom", fontsize=7, color="#555555")
    peak_axis = panels[len(PLOT_MODES)]
    peak_modes = ("fwd_infer", "fwd_bwd")
    mode_colours = dict(zip(peak_modes, ("#4c9f38", "#34495e")))
    mode_offset = {(m, b): (i - 1.5) * 0.2 for i, (m, b) in
                   enumerate((m, b) for m in peak_modes for b in (1, 32))}
    for record in records:
        case = record["case"]
        for mode in peak_modes:
            pct = record["pct_peak"].get(SUBJECT, {}).get(mode)
            if pct is None:
                continue
            marker, fill = BATCH_MARKERS.get(case["batch"], ("D", "full"))
            peak_axis.plot([pct * case["useful_fraction"]],
                           [row[case["layer"]] + mode_offset.get((mode, case["batch"]), 0.0)],
                           marker=marker,
                           fillstyle=fill, linestyle="none", markersize=5,
                           color=mode_colours[mode], zorder=3)
    peak_axis.set_xlim(0, 100)
    peak_axis.set_title("mxdeconv: % of fp32 peak", fontsize=10)
    peak_axis.grid(axis="x", alpha=0.3)
    peak_axis.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:.0f}%"))
    for axis in panels[:len(PLOT_MODES) + 1]:
        axis.set_yticks(range(len(layers)))
        axis.set_yticklabels(layers, fontsize=8)
        axis.set_ylim(len(layers) - 0.5, -0.5)
        axis.tick_params(axis="x", labelsize=8)
    legend_axis = panels[-1]
    legend_axis.axis("off")
    handles = [Line2D([], [], linestyle="none", marker="s", color=PEER_COLOURS[p],
                      label=f"over {p}") for p in peers]
    handles += [Line2D([], [], linestyle="none", color="black", marker=m, fillstyle=f,
                       label=f"batch {b} ({'hollow' if f == 'none' else 'filled'})")
                for b, (m, f) in BATCH_MARKERS.items() if b in batches]
    legend_axis.legend(handles=handles, loc="upper left", fontsize=9, frameon=False,
                       title="speed-up = peer time / mxdeconv time\n"
                             "(> 1: mxdeconv faster; log scale)", title_fontsize=9,
                       alignment="left")
    mode_handles = [Line2D([], [], linestyle="none", marker="o", color=mode_colours[m],
                           label=MODE_LABELS[m]) for m in peak_modes]
    legend_axis.add_artist(legend_axis.get_legend())
    legend_axis.legend(handles=mode_handles, loc="lower left", fontsize=9, frameon=False,
                       title="% of the measured fp32 peak\n(products not cropped by "
                             "pad only)", title_fontsize=9, alignment="left")
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout(rect=(0, 0, 1, 0.985) if title else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
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
