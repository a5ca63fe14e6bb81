#!/usr/bin/env python
"""Render a benchmark run's JSON into the documentation's performance page.

    python benchmarks/docs.py                        # benchmarks/results/latest.json
    python benchmarks/docs.py /tmp/run/latest.json   # another run's JSON

writes

* ``docs/performance_table.txt``: the run's date, machine, threads and
  versions, then per layer and batch mxdeconv's time per call and its speed-up
  over MXNet and PyTorch (narrow enough for the page, no sideways scrolling);
* ``docs/_static/benchmark_full.txt``: the run's full per-layer tables, as
  ``run.py`` printed them (every contender, every ratio, the plans chosen);
* ``docs/_static/speedup.png``: the plot (needs matplotlib: ``pip install -e
  ".[bench]"``).

``python benchmarks/run.py --docs`` measures and then does the same.
Standard library only (plus matplotlib for the plot): it reads no timings but
the JSON's.
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import contender
import report

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DOCS = ROOT / "docs"
TABLE = DOCS / "performance_table.txt"
FULL = DOCS / "_static" / "benchmark_full.txt"
PLOT = DOCS / "_static" / "speedup.png"
#: Columns of the compact tables, with their short headings.
COLUMNS = (("fwd_infer", "infer"), ("fwd_train", "train"), ("bwd", "bwd"),
           ("fwd_bwd", "f+b"))
#: Lines of performance_table.txt stay within this many characters (the page's
#: code column at 1280 px holds about 90).
WIDTH = 84


def _speedup(value: Optional[float]) -> str:
    return "-" if not value else (f"{value:.2f}" if value < 100 else f"{value:.0f}")


def _geomean(values: Sequence[float]) -> Optional[float]:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def run_date(document: Mapping[str, Any]) -> str:
    """The run's date and time, in UTC."""
    created = datetime.datetime.fromisoformat(document["created"])
    return created.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def header_lines(document: Mapping[str, Any]) -> List[str]:
    """Date, machine, threads, versions: what the figures depend on."""
    host = document["machine"]
    versions = document.get("versions", {})
    status = document.get("status", {})
    peers = []
    for name, key in ((report.MXNET, "mxnet"), (report.TORCH, "torch")):
        peers.append(f"{name} {versions[key]}" if key in versions else
                     f"{name} not measured ({status.get(name, 'absent')})")
    lines = [
        f"Benchmark run of {run_date(document)} ({document['mode']} run"
        f"{'' if document.get('complete', True) else ', INCOMPLETE'}, "
        f"{document['elapsed_s'] / 60:.0f} min)",
        f"CPU:      {host['cpu_model']} (family {host['cpu_family']}), {host['cores']} cores, "
        f"{host['isa']}",
        f"threads:  {document['threads']} for every contender",
        (f"peak:     {host['peak_gflops']:.1f} GFLOP/s fp32 ({host['peak_source']})"
         if host.get("peak_source", "threads x GHz").startswith("measured") else
         f"peak:     {host['peak_gflops']:.1f} GFLOP/s fp32 = {host['threads']} x "
         f"{host['ghz']:.2f} GHz x {host['flops_per_cycle']} FLOP/cycle (measured)"),
        f"versions: mxdeconv {versions.get('mxdeconv', '?')} on oneDNN "
        f"{versions.get('mxdeconv_onednn_version', '?')} "
        f"({versions.get('mxdeconv_cpu_isa', '?')});",
        f"          {'; '.join(peers)}; Python {document['python']}, "
        f"NumPy {document['numpy']}",
    ]
    return lines


def _flag(record: Mapping[str, Any]) -> str:
    """'!' for a case measured while other processes took over 10% of the CPU."""
    taken = record["info"].get("cpu_taken_by_others") or {}
    return "!" if sum(taken.values()) > 0.10 else " "


def time_table(records: Sequence[Mapping[str, Any]]) -> List[str]:
    lines = ["mxdeconv, time per call (median)                               % of peak",
             f"{'layer':16s} {'batch':>5s}" + "".join(f"{h:>11s}" for _, h in COLUMNS)
             + f"{'f+b':>10s}"]
    for record in records:
        case = record["case"]
        medians = [report.median_of(record["contenders"], report.SUBJECT, mode)
                   for mode, _ in COLUMNS]
        cells = [report.format_seconds(median) for median in medians]
        pct = record["pct_peak"].get(report.SUBJECT, {}).get("fwd_bwd")
        pct_text = "-" if pct is None else f"{pct * case['useful_fraction']:.0f}%"
        lines.append(f"{case['layer']:16s} {case['batch']:>5d}"
                     + "".join(f"{c:>11s}" for c in cells) + f"{pct_text:>9s}"
                     + _flag(record))
    return lines


#: Modes of the per-pass share of peak, with their headings.
PASS_COLUMNS = (("fwd_infer", "fwd-i"), ("fwd_train", "fwd-t"), ("bwd_data", "bwd-d"),
                ("bwd_weights", "bwd-w"), ("fwd_bwd", "f+b"))


#: How oneDNN is asked for a pass, short: its deconvolution primitive, its
#: convolution wrapper, or the convolution the pass is made of, run directly.
ROUTES = {"deconv": "dc", "any": "any", "bwd_data": "bd", "fwd": "fw", "bwd_weights": "bw",
          "im2col": "mm", "scatter": "mm"}


def _kernel(impl: Optional[str]) -> str:
    """A plan's kernel, short: route/kernel family (ROUTES), e.g. ``bd/jit`` for
    ``conv:bwd_data+jit:avx512_core`` or ``dc/brgconv_strided``; a sub-grid
    plan's is ``sg:`` and its sub-grid layer's plan's."""
    if not impl:
        return "-"
    if impl.startswith("subgrid+"):
        return "sg:" + _kernel(impl[len("subgrid+"):])
    route, _, kernel = impl.rpartition("+")
    route = route.split(":")[-1] if route.startswith(("conv:", "mxdeconv:")) else "deconv"
    family = kernel.split(":")[-2 if kernel.count(":") > 1 else 0]
    return f"{ROUTES.get(route, route)}/{family}"


def peak_table(records: Sequence[Mapping[str, Any]]) -> List[str]:
    """mxdeconv's share of the peak per pass (useful products only)."""
    lines = ["mxdeconv, % of the fp32 peak (useful products) per pass",
             f"{'layer':16s} {'batch':>5s}" + "".join(f"{h:>7s}" for _, h in PASS_COLUMNS)]
    for record in records:
        case = record["case"]
        pct = record["pct_peak"].get(report.SUBJECT, {})
        lines.append(f"{case['layer']:16s} {case['batch']:>5d}" + "".join(
            f"{'-' if pct.get(m) is None else format(pct[m] * case['useful_fraction'], '.0f'):>7s}"
            for m, _ in PASS_COLUMNS) + _flag(record))
    return lines


def kernel_table(records: Sequence[Mapping[str, Any]]) -> List[str]:
    """The kernel each pass of a training step runs (route/kernel family)."""
    lines = ["mxdeconv, the kernel of each pass of a training step: route/kernel family",
             "(route: dc deconvolution primitive, any its convolution wrapper; the",
             "convolution run directly: bd backward data, fw forward, bw backward weights;",
             "mm mxdeconv's GEMM plans; sg: the sub-grid layer's plan, on the",
             "output sub-grid where stride and dilation share a factor)",
             f"{'layer':16s} {'batch':>5s} " + " ".join(
                 f"{h:19s}" for h in ("forward", "backward data", "backward weights"))]
    for record in records:
        case = record["case"]
        plans = record["info"].get(report.SUBJECT, {}).get("plans", {}).get("training", {})
        kernels = [_kernel(plans.get(name, {}).get("impl") if isinstance(plans, dict) else None)
                   for name in ("forward", "backward_data", "backward_weights")]
        lines.append(f"{case['layer']:16s} {case['batch']:>5d} "
                     + " ".join(f"{k[:19]:19s}" for k in kernels))
    return lines


def speedup_table(records: Sequence[Mapping[str, Any]],
                  versions: Mapping[str, str]) -> List[str]:
    mx = f"over MXNet {versions.get('mxnet', '')}".strip()
    pt = f"over PyTorch {versions.get('torch', '').split('+')[0]}".strip()
    group = 4 * 6
    lines = ["speed-up of mxdeconv (peer time / mxdeconv time; > 1: mxdeconv faster)",
             f"{'':22s} {mx:^{group}s}   {pt:^{group}s}",
             f"{'layer':16s} {'batch':>5s} " + "".join(f"{h:>6s}" for _, h in COLUMNS)
             + "   " + "".join(f"{h:>6s}" for _, h in COLUMNS)]
    for record in records:
        case = record["case"]
        cells = []
        for peer in (report.MXNET, report.TORCH):
            ratio = report.ratio_name(peer, report.SUBJECT)
            cells.append("".join(f"{_speedup(record['ratios'][mode].get(ratio)):>6s}"
                                 for mode, _ in COLUMNS))
        lines.append(f"{case['layer']:16s} {case['batch']:>5d} {cells[0]}   {cells[1]}"
                     + _flag(record))
    return lines


def summary_lines(records: Sequence[Mapping[str, Any]]) -> List[str]:
    """Geometric mean speed-up over each peer per batch size and mode, and the
    cases where a peer was faster."""
    batches = sorted({r["case"]["batch"] for r in records})
    group = 6 * len(COLUMNS)
    lines = ["geometric mean speed-up of mxdeconv over the layers",
             f"{'':12s} {'over ' + report.MXNET:^{group}s}   {'over ' + report.TORCH:^{group}s}",
             f"{'batch':>12s} " + "".join(f"{h:>6s}" for _, h in COLUMNS) + "   "
             + "".join(f"{h:>6s}" for _, h in COLUMNS)]
    slower: Dict[str, List[str]] = {}
    for batch in batches:
        cells = []
        for peer in (report.MXNET, report.TORCH):
            values = []
            for mode, _ in COLUMNS:
                ratios = [r["ratios"][mode].get(report.ratio_name(peer, report.SUBJECT))
                          for r in records if r["case"]["batch"] == batch]
                values.append(_speedup(_geomean([v for v in ratios if v])))
                for r, v in zip([r for r in records if r["case"]["batch"] == batch], ratios):
                    if v and v < 1.0:
                        slower.setdefault(f"{r['case']['layer']}/b{batch}", []).append(
                            f"{contender.MODE_LABELS[mode]} ({peer} {v:.2f})")
            cells.append("".join(f"{v:>6s}" for v in values))
        lines.append(f"{batch:>12d} {cells[0]}   {cells[1]}")
    if slower:
        text = "; ".join(f"{case}: {', '.join(modes)}" for case, modes in slower.items())
        lines += textwrap.wrap("a peer was faster on " + text, WIDTH,
                               subsequent_indent="  ")
    else:
        lines.append("mxdeconv was faster than both peers on every layer and mode")
    return lines


def check_line(records: Sequence[Mapping[str, Any]]) -> List[str]:
    wrong = [f"{r['case']['layer']}/b{r['case']['batch']}" for r in records
             if r["check"].get("disagree")]
    if wrong:
        return textwrap.wrap("CORRECTNESS: forward outputs disagree with the reference on "
                             + ", ".join(wrong), WIDTH)
    return textwrap.wrap(f"every contender's forward output (bias included) agreed with "
                         f"PyTorch's on all {len(records)} cases", WIDTH)


def overhead_lines(document: Mapping[str, Any]) -> List[str]:
    """The tiny layer's time per call: mxdeconv's against its plan's primitives alone."""
    figures = document.get("overhead_us") or {}
    rows = [(label, figures.get(name, {})) for label, name in
            (("mxdeconv", report.SUBJECT), ("raw oneDNN", report.RAW))]
    if not all(values for _, values in rows):
        return []
    case = next((r["case"] for r in document["cases"]
                 if r["case"]["layer"] == document["overhead_layer"]), None)
    what = f" ({case['description'].split(': ', 1)[-1]})" if case else ""
    lines = [f"per-call cost on the tiny layer{what}",
             f"{'':16s}" + "".join(f"{h:>10s}" for _, h in COLUMNS)]
    for label, values in rows:
        lines.append(f"{label:16s}" + "".join(
            f"{values[mode]['per_call_us']:>7.1f} us" if mode in values else f"{'-':>10s}"
            for mode, _ in COLUMNS))
    return lines


def missing_lines(records: Sequence[Mapping[str, Any]]) -> List[str]:
    """Why a peer's cells are "-": its status, once per peer and status."""
    reasons: Dict[str, List[str]] = {}
    for record in records:
        case = record["case"]
        for peer in (report.MXNET, report.TORCH):
            for mode, _ in COLUMNS:
                entry = report.entry_of(record["contenders"], peer, mode) or {}
                if "median_s" not in entry and entry.get("status"):
                    key = f"{peer}: {entry['status']}"
                    where = f"{case['layer']}/b{case['batch']}"
                    if where not in reasons.setdefault(key, []):
                        reasons[key].append(where)
    lines: List[str] = []
    for reason, cases in reasons.items():
        lines += textwrap.wrap(f"-: {reason} ({', '.join(cases)})", WIDTH,
                               subsequent_indent="   ")
    return lines


def table_text(document: Mapping[str, Any]) -> str:
    records = document["cases"]
    flagged = any(_flag(r) == "!" for r in records)
    parts = [header_lines(document), summary_lines(records), time_table(records),
             peak_table(records), kernel_table(records),
             speedup_table(records, document.get("versions", {})) + missing_lines(records)
             + (["! other processes took over 10% of the CPU while this case ran"]
                if flagged else []),
             overhead_lines(document), check_line(records)]
    text = "\n\n".join("\n".join(line.rstrip() for line in lines)
                        for lines in parts if lines) + "\n"
    too_wide = [line for line in text.splitlines() if len(line) > WIDTH]
    if too_wide:
        raise ValueError(f"lines wider than {WIDTH} characters: {too_wide}")
    return text


def full_text(document: Mapping[str, Any]) -> str:
    """The run's full tables, as run.py printed them."""
    import run

    columns = [name for name in document["status"]]
    lines = header_lines(document) + [""]
    for record in document["cases"]:
        lines += run.case_header(record) + run.case_table(record, columns) + [""]
    if document.get("overhead_us"):
        lines += run.overhead_lines(document["overhead_us"])
    lines += list(report.target_lines(document["targets"]))
    lines += [f"note ({key}): {note}" for key, note in document.get("notes", {}).items()]
    return "\n".join(lines) + "\n"


def plot_title(document: Mapping[str, Any]) -> str:
    host = document["machine"]
    versions = document.get("versions", {})
    return (f"{run_date(document)}: {host['cpu_model']}, {document['threads']} threads; "
            f"mxdeconv {versions.get('mxdeconv', '?')} (oneDNN "
            f"{versions.get('mxdeconv_onednn_version', '?')}), MXNet "
            f"{versions.get('mxnet', '-')}, PyTorch {versions.get('torch', '-')}")


def render(json_path: Path, table: Path = TABLE, full: Path = FULL,
           plot: Path = PLOT) -> List[str]:
    """Write the three files from ``json_path``; returns what was done, a line each."""
    import json

    document = json.loads(Path(json_path).read_text())
    if document.get("mode") == "smoke":
        raise ValueError(f"{json_path} is a --smoke run: its timings mean nothing")
    table.write_text(table_text(document))
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(full_text(document))
    done = [f"table written to {table}", f"full tables written to {full}",
            report.plot_speedups(plot, document["cases"], plot_title(document))]
    if not document.get("complete", True):
        done.append(f"WARNING: {json_path} is from an incomplete run")
    return done


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__)
    parser.add_argument("json", nargs="?", type=Path, default=HERE / "results" / "latest.json",
                        help="the run's JSON (default: %(default)s)")
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--full", type=Path, default=FULL)
    parser.add_argument("--plot", type=Path, default=PLOT)
    args = parser.parse_args(argv)
    try:
        done = render(args.json, args.table, args.full, args.plot)
    except (OSError, ValueError, KeyError) as error:
        print(f"docs.py: {error}", file=sys.stderr)
        return 1
    print("\n".join(done))
    return 0 if not any(line.startswith("plot skipped") for line in done) else 1


if __name__ == "__main__":
    sys.exit(main())
