#!/usr/bin/env python
"""Benchmark mxdeconv's Deconvolution against raw oneDNN, MXNet 1.9.1, PyTorch and NumPy.

    python benchmarks/run.py                 # every layer, batch 1 and 32
    python benchmarks/run.py --quick         # a few layers, under 2 minutes on 2 cores
    python benchmarks/run.py --smoke         # one tiny layer, 1 repeat: does it work?
    python benchmarks/run.py --layers dcgan_g2,audio1d --threads 1
    python benchmarks/run.py --peers-only    # MXNet and PyTorch only
    python benchmarks/run.py --list          # the layer set
    python benchmarks/run.py --docs          # every layer, then refresh docs/performance.rst's
                                             # table and plot (benchmarks/docs.py)

All contenders get the same inputs and thread count in one run; their calls
are interleaved round-robin (see timing.py).  MXNet runs in its own venv
(scripts/setup_mxnet_venv.sh; ``MXNET_VENV`` or ``--mxnet-python`` point
elsewhere).  Then the cold start, each figure in fresh processes
(benchmarks/cold.py: the import, a new layer's first calls with an empty and
a filled plan cache, a short training run; ``--cold-repeats``).  Results: a
table per layer on stdout,
``benchmarks/results/latest.json`` (every figure) and
``benchmarks/results/speedup.png`` (``--smoke`` writes ``smoke.json`` and
``smoke_speedup.png`` instead, leaving real results alone).  Neither is in
git: what the repository keeps of a run is what ``--docs`` renders from the
JSON (docs/performance_table.txt, docs/_static/benchmark_full.txt and
docs/_static/speedup.png).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

# None of these imports NumPy, an OpenMP runtime or a BLAS at import time: those
# (numpy, torch, mxdeconv) load only after configure_threads() has run.
import contender
import layers
import machine
import report
import timing
from layers import Case

HERE = Path(__file__).resolve().parent


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="the quick layer set, 3 short rounds (< 2 min on 2 cores)")
    size.add_argument("--smoke", action="store_true",
                      help="the tiny layer, 1 round of 1 repeat, no timing value")
    parser.add_argument("--layers", help="comma-separated layer names (see --list)")
    parser.add_argument("--batches", help="comma-separated batch sizes to keep, e.g. 1")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads for every contender (default: all cores, %(default)s)")
    parser.add_argument("--peers-only", action="store_true",
                        help="measure MXNet and PyTorch only (no mxdeconv import)")
    parser.add_argument("--no-mxnet", action="store_true")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-numpy", action="store_true", help="skip the NumPy fallback")
    parser.add_argument("--no-first-choice", action="store_true",
                        help="skip the 'first choice' column (mxdeconv with the planner's "
                             "tuning off: oneDNN's first correct candidate)")
    parser.add_argument("--numpy-max-batch", type=int, default=1,
                        help="largest batch the slow NumPy fallback runs (%(default)s)")
    parser.add_argument("--mxnet-python", type=Path,
                        help="python of the MXNet venv (default: $MXNET_VENV/bin/python "
                             "or .venv-mxnet/bin/python)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; quick 3)")
    parser.add_argument("--block-seconds", type=float,
                        help="time per contender per round (default 0.1; quick 0.04)")
    parser.add_argument("--max-call-seconds", type=float, default=20.0,
                        help="skip a contender's mode at a larger batch when its time at a "
                             "smaller batch of the layer, scaled by the batch ratio, "
                             "predicts more per call (default %(default)s; 0: never)")
    parser.add_argument("--retry-contended", type=int, default=0, metavar="N",
                        help="re-measure, up to N times, every case during which other "
                             "processes took over 10%% of the CPU; the least disturbed "
                             "measurement is kept (default %(default)s)")
    parser.add_argument("--flops-per-cycle", type=int,
                        help="fp32 FLOP/cycle/core for the peak (default 32 for AVX-512)")
    parser.add_argument("--no-clock-measure", action="store_true",
                        help="take the clock from /proc/cpuinfo instead of a timing loop")
    parser.add_argument("--seed", type=int, default=0, help="input data seed")
    parser.add_argument("--output-dir", type=Path, default=HERE / "results")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--docs", action="store_true",
                        help="then write docs/performance_table.txt, "
                             "docs/_static/benchmark_full.txt and docs/_static/speedup.png "
                             "from the JSON (benchmarks/docs.py)")
    parser.add_argument("--cold-repeats", type=int, metavar="N",
                        help="fresh processes per cold-start figure (benchmarks/cold.py: "
                             "import, a new layer's first calls, a short training run; "
                             "default 3, 0 skips it; --smoke: 0)")
    parser.add_argument("--list", action="store_true", help="list the layers and exit")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    if args.docs and (args.smoke or args.no_plot):
        parser.error("--docs needs timings and the plot: not with --smoke or --no-plot")
    return args


def configure_threads(threads: int) -> None:
    """Before any OpenMP runtime or BLAS loads (torch, oneDNN, NumPy): they read these.

    OPENBLAS_THREAD_TIMEOUT=4 (2**4 cycles) makes NumPy's OpenBLAS workers sleep
    right after a call instead of spinning for ~2**28 cycles: measured here, the
    spinning workers left by one NumPy-fallback block made the next contender's
    first calls 200x slower (its OpenMP barriers waited for a core).  It costs
    the NumPy fallback a thread wake-up per BLAS call, nothing else.
    """
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[variable] = str(threads)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")


# --------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------

#: Share of the CPU taken by others during a case above which its table warns.
FOREIGN_LOAD_WARNING = 0.10
#: What mxdeconv.last_impl() must say after each contender's calls.
EXPECTED_IMPL = {"mxdeconv": "onednn", "first choice": "onednn", "NumPy": "numpy"}


def disturbance(record: Dict[str, Any]) -> float:
    """Share of the CPU that other processes and the hypervisor took during a case."""
    return sum((record["info"].get("cpu_taken_by_others") or {}).values())


def format_ratio(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def short_status(entry: Dict[str, Any]) -> str:
    """A table cell for an unmeasured mode: its status's first word."""
    return (entry.get("status") or "?").split(" ", 1)[0].rstrip(":")


def shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape)


def _peak_text(pct: Optional[float]) -> str:
    return "" if pct is None else f" at {pct:.{0 if pct >= 10 else 1}f}% of peak"


def case_header(record: Dict[str, Any]) -> List[str]:
    case = record["case"]
    kw = ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v}"
                   for k, v in case["kwargs"].items())
    lines = [f"== {case['layer']}  batch {case['batch']}: {case['description']} ==",
             f"   data {shape_text(case['data_shape'])}, weight "
             f"{shape_text(case['weight_shape'])}, out {shape_text(case['out_shape'])}; "
             f"{kw}; forward {case['forward_flops'] / 1e9:.4g} GFLOP "
             f"({case['useful_fraction']:.0%} of it not cropped by pad)"]
    if case["batch_note"]:
        lines.append(f"   note: {case['batch_note']}")
    check = record["check"]
    if check.get("max_abs_diff"):
        diffs = ", ".join(f"{name} {diff:.2e}" for name, diff in check["max_abs_diff"].items())
        verdict = ("all agree" if not check.get("disagree") else
                   "WRONG: " + ", ".join(check["disagree"]))
        lines.append(f"   check, max |fwd output (bias included) - {check['reference']}|: "
                     f"{diffs} (|ref| max {check['reference_max_abs']:.3g}): {verdict}")
    elif check.get("note"):
        lines.append(f"   check: {check['note']}")
    chosen = record["info"].get(report.SUBJECT, {}).get("plans", {})
    pct = record["pct_peak"].get(report.SUBJECT, {})
    for mode, passes in chosen.items():
        if isinstance(passes, dict) and "forward" in passes:
            # Each pass's plan beside the % of peak of the mode that runs it alone.
            alone = {"forward": "fwd_train" if mode == "training" else "fwd_infer",
                     "backward_data": "bwd_data", "backward_weights": "bwd_weights"}
            lines.append(f"   plans ({mode}): " + "; ".join(
                f"{name.replace('_', ' ')} {p['impl']} x{p['threads']}"
                f"{_peak_text(pct.get(alone.get(name, '')))} ({p['how']}, "
                f"{p['choose_s'] * 1e3:.0f} ms to choose)" for name, p in passes.items()))
    taken = record["info"].get("cpu_taken_by_others") or {}
    if disturbance(record) > FOREIGN_LOAD_WARNING:
        lines.append(f"   WARNING: other processes took {taken['other_processes']:.0%} and "
                     f"the hypervisor {taken['steal']:.0%} of the CPU while this was "
                     "measured: these timings are unreliable (OpenMP teams with one "
                     "thread per core stall when a core is taken; rerun on a quiet machine "
                     "or with fewer --threads)")
    for name, expected in EXPECTED_IMPL.items():
        for mode, details in record["info"].get(name, {}).items():
            if details.get("impl") not in (None, expected):
                lines.append(f"   WARNING: {name} {contender.MODE_LABELS[mode]} ran "
                             f"{details['impl']!r}, not {expected!r}")
    return lines


def case_table(record: Dict[str, Any], columns: Sequence[str]) -> List[str]:
    """Rows per mode: medians, the three ratios, GFLOP/s and % peak of one contender."""
    contenders = record["contenders"]
    subject_ok = any("median_s" in e for e in contenders.get(report.SUBJECT, {}).values())
    ratio_keys = ([("mx/raw", "mxdeconv/raw"), ("MXNet/mx", "MXNet/mxdeconv"),
                   ("PyTorch/mx", "PyTorch/mxdeconv"),
                   ("first/mx", f"{report.FIRST}/mxdeconv")] if subject_ok else
                  [("MXNet/PyTorch", "MXNet/PyTorch")])
    rate_of = next((name for name in (report.SUBJECT, report.RAW, report.MXNET,
                                      report.TORCH) if record["gflops"].get(name)), None)
    widths = [20] + [10] * len(columns) + [max(9, len(k) + 1) for k, _ in ratio_keys]
    head = (["mode"] + list(columns) + [k for k, _ in ratio_keys]
            + [f"GFLOP/s({rate_of or '-'})", "%peak"])
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w)
                       for i, (h, w) in enumerate(zip(head, widths + [16, 6])))]
    notes: Dict[str, List[str]] = {}
    for mode in contender.MODES:
        label = contender.MODE_LABELS[mode]
        cells = [label.ljust(widths[0])]
        for name, width in zip(columns, widths[1:]):
            entry = report.entry_of(contenders, name, mode)
            if entry is None:  # the contender does not offer this mode
                text = "-"
            elif "median_s" in entry:
                text = (report.format_seconds(entry["median_s"])
                        + ("*" if entry.get("note") else ""))
                if entry.get("note"):
                    notes.setdefault(f"{name}: * {entry['note']}", []).append(label)
            else:
                text = short_status(entry)
                notes.setdefault(f"{name}: {entry.get('status')}", []).append(label)
            cells.append(text.rjust(width))
        for (_, key), width in zip(ratio_keys, widths[1 + len(columns):]):
            cells.append(format_ratio(record["ratios"][mode].get(key)).rjust(width))
        rate = record["gflops"].get(rate_of, {}).get(mode) if rate_of else None
        pct = record["pct_peak"].get(rate_of, {}).get(mode) if rate_of else None
        cells.append(("-" if rate is None else f"{rate:.1f}").rjust(16))
        cells.append(("-" if pct is None else f"{pct:.{0 if pct >= 10 else 1}f}%").rjust(6))
        lines.append("  ".join(cells))
    for message, modes in notes.items():
        which = "all modes" if len(modes) == len(contender.MODES) else ", ".join(modes)
        lines.append(f"   {message}  [{which}]")
    return lines


def overhead_lines(figures: Dict[str, Dict[str, Any]]) -> List[str]:
    lines = ["== per-call overhead on the tiny layer (1x8x4x4 -> 8, k3), microseconds =="]
    for name, modes in figures.items():
        if name == report.RAW:
            lines.append("   raw       " + "; ".join(
                f"{contender.MODE_LABELS[m]} {v['per_call_us']:.1f}" for m, v in modes.items()))
            continue
        parts = []
        for mode, values in modes.items():
            over = values["over_raw_us"]
            extra = "" if over is None else f" ({over:+.1f} over raw)"
            parts.append(f"{contender.MODE_LABELS[mode]} {values['per_call_us']:.1f}{extra}")
        lines.append(f"   {name:9s} " + "; ".join(parts))
    return lines


# --------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------

def build_contenders(args: argparse.Namespace) -> List[contender.Contender]:
    """The contenders in column order; a disabled one is simply absent."""
    chosen: List[contender.Contender] = []
    if not args.peers_only:
        from subject_mxdeconv import MXDeconvAPI, RawOneDNN
        chosen += [MXDeconvAPI(args.threads), RawOneDNN()]
        if not args.no_first_choice:
            chosen.append(MXDeconvAPI(args.threads, first_choice=True))
    if not args.no_mxnet:
        from peer_mxnet import MXNetPeer
        chosen.append(MXNetPeer(args.threads, args.mxnet_python))
    if not args.no_torch:
        from peer_torch import TorchPeer
        chosen.append(TorchPeer(args.threads))
    if not (args.peers_only or args.no_numpy):
        from subject_mxdeconv import MXDeconvAPI
        chosen.append(MXDeconvAPI(args.threads, impl="numpy",
                                  modes=("fwd_infer", "fwd_bwd"),
                                  max_batch=args.numpy_max_batch))
    return chosen


#: A forward output (bias included) agrees with the reference's within this
#: share of the reference's largest magnitude (fp32 accumulation noise is ~1e-6).
AGREEMENT_RTOL = 1e-4


def cross_check(outputs: Dict[str, Any]) -> Dict[str, Any]:
    """Max abs difference of every forward output (bias included) against
    PyTorch's (or the first one), and which contenders disagree beyond
    AGREEMENT_RTOL of the reference's magnitude."""
    import numpy as np

    if len(outputs) < 2:
        return {"note": "fewer than two forward outputs to compare"}
    reference = next((n for n in (report.TORCH, report.MXNET) if n in outputs),
                     next(iter(outputs)))
    expected = outputs[reference]
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    diffs: Dict[str, float] = {}
    for name, actual in outputs.items():
        if name == reference:
            continue
        if actual.shape != expected.shape:
            diffs[name] = float("inf")
        else:
            diffs[name] = float(np.max(np.abs(actual.astype(np.float64) - expected)))
    tolerance = AGREEMENT_RTOL * scale + 1e-5
    wrong = sorted(name for name, diff in diffs.items() if not diff <= tolerance)
    return {"reference": reference, "max_abs_diff": diffs, "reference_max_abs": scale,
            "tolerance": tolerance, "disagree": wrong}


class SlowCallGuard:
    """Predicts calls too slow to make, from the same layer at a smaller batch.

    A pathological path (a reference kernel picked by oneDNN, say) can take
    seconds at batch 1 and minutes at batch 32; one cold call is already too
    many.  The prediction scales the smaller batch's median by the batch ratio.
    """

    def __init__(self, limit_seconds: float) -> None:
        self._limit = limit_seconds
        self._seen: Dict[Any, Any] = {}  # (layer, contender, mode) -> (batch, seconds)

    def record(self, case: Case, measured: Dict[str, Dict[str, Dict[str, Any]]]) -> None:
        for name, modes in measured.items():
            for mode, entry in modes.items():
                if "median_s" in entry:
                    self._seen[(case.layer.name, name, mode)] = (case.batch, entry["median_s"])

    def skips(self, case: Case) -> Dict[Any, str]:
        """(contender, mode) -> why it is skipped for ``case``."""
        if self._limit <= 0:
            return {}
        found = {}
        for (layer, name, mode), (batch, seconds) in self._seen.items():
            predicted = seconds * case.batch / batch
            if layer == case.layer.name and batch < case.batch and predicted > self._limit:
                found[(name, mode)] = (f"skipped (~{predicted:.0f} s per call predicted from "
                                       f"batch {batch}; --max-call-seconds {self._limit:g})")
        return found


def measure_case(case: Case, contenders: Sequence[contender.Contender],
                 schedule: timing.Schedule, seed: int,
                 peak_gflops: float, guard: SlowCallGuard) -> Dict[str, Any]:
    inputs = layers.make_inputs(case, seed)
    skips = guard.skips(case)
    measured: Dict[str, Dict[str, Dict[str, Any]]] = {}
    slots: Dict[Any, timing.Runner] = {}
    first_seconds: Dict[Any, Optional[float]] = {}
    prepared: Dict[str, contender.Prepared] = {}
    outputs: Dict[str, Any] = {}
    check_errors: Dict[str, str] = {}
    for peer in contenders:
        status = peer.status()
        if status is not None:
            measured[peer.name] = {m: {"status": status} for m in contender.MODES}
            continue
        skipped = {mode: reason for (name, mode), reason in skips.items() if name == peer.name}
        modes = [mode for mode in contender.MODES if mode not in skipped]
        try:
            ready = peer.prepare(case, inputs, modes)
        except Exception as exc:  # noqa: BLE001 - one contender's failure is a result
            ready = contender.Prepared(unavailable=contender.unavailable_for(
                modes, f"error: {contender.short_error(exc)}"))
        prepared[peer.name] = ready
        measured[peer.name] = {m: {"status": s}
                               for m, s in dict(skipped, **ready.unavailable).items()}
        for mode, runner in ready.runners.items():
            slots[(peer.name, mode)] = runner
            first_seconds[(peer.name, mode)] = ready.first_seconds.get(mode)
        if ready.output is not None and "fwd_infer" in ready.runners:
            try:
                outputs[peer.name] = ready.output()
            except Exception as exc:  # noqa: BLE001
                check_errors[peer.name] = f"error: {contender.short_error(exc)}"
    load = machine.ForeignLoad()
    results = timing.measure_interleaved(
        slots, schedule, {k: v for k, v in first_seconds.items() if v is not None},
        on_error=lambda e: f"error: {contender.short_error(e)}")
    for (name, mode), measurement in results.items():
        summary = measurement.summary()
        if "error" in summary:
            summary = {"status": summary.pop("error")}
        measured[name][mode] = summary
    info: Dict[str, Any] = {"cpu_taken_by_others": load.share()}
    for name, ready in prepared.items():
        details = ready.info()
        if details:
            info[name] = details
        ready.close()
    check = cross_check(outputs)
    if check_errors:
        check["errors"] = check_errors
    for name in measured:  # table order: modes in MODES order
        measured[name] = {m: measured[name][m] for m in contender.MODES if m in measured[name]}
    guard.record(case, measured)
    return report.summarize_case(case, measured, peak_gflops, check, info)


def schedule_for(args: argparse.Namespace) -> timing.Schedule:
    if args.smoke:
        base = timing.Schedule(rounds=1, fixed_repeats=1)
    elif args.quick:
        base = timing.Schedule(rounds=3, block_seconds=0.04, warmup_seconds=0.02,
                               max_slot_seconds=1.5)
    else:
        base = timing.Schedule()
    return timing.Schedule(rounds=args.rounds or base.rounds,
                           block_seconds=args.block_seconds or base.block_seconds,
                           warmup_seconds=base.warmup_seconds,
                           max_slot_seconds=base.max_slot_seconds,
                           fixed_repeats=base.fixed_repeats)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    configure_threads(args.threads)
    if args.list:
        for layer in layers.LAYERS:
            quick = f"; --quick: {', '.join(map(str, layer.quick))}" if layer.quick else ""
            print(f"{layer.name:16s} {layer.description} "
                  f"(batches {', '.join(map(str, layer.batches))}{quick})")
        return 0
    names = ["tiny"] if args.smoke else (args.layers.split(",") if args.layers else None)
    batches = [int(b) for b in args.batches.split(",")] if args.batches else None
    try:
        cases = layers.select_cases(names, args.quick, batches)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    schedule = schedule_for(args)
    started = time.perf_counter()
    host = machine.detect(args.threads, args.flops_per_cycle,
                          measure=not args.no_clock_measure)
    contenders = build_contenders(args)
    columns = [peer.name for peer in contenders]
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"machine: {host.describe()}")
    print(f"threads: {args.threads} for every contender (OMP_NUM_THREADS, "
          f"torch.set_num_threads); schedule: {schedule}")
    statuses = {peer.name: peer.status() or "ok" for peer in contenders}
    for peer in contenders:
        details = ", ".join(f"{k} {v}" for k, v in peer.versions().items())
        print(f"  {peer.name:9s} {statuses[peer.name]}{': ' + details if details else ''}")
    print()

    import numpy

    json_path = args.output_dir / f"{'smoke' if args.smoke else 'latest'}.json"
    records: List[Dict[str, Any]] = []
    overhead: Dict[str, Any] = {}  # filled once every case is measured
    versions: Dict[str, str] = {}
    for peer in contenders:
        versions.update(peer.versions())

    def save(complete: bool) -> None:
        """The JSON after every case too, so an interrupted run keeps what it measured."""
        report.write_json(json_path, {
            "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "complete": complete, "command": [sys.executable] + sys.argv,
            "mode": "smoke" if args.smoke else "quick" if args.quick else "full",
            "elapsed_s": time.perf_counter() - started, "threads": args.threads,
            "machine": host.as_dict(), "python": platform.python_version(),
            "numpy": numpy.__version__, "versions": versions,
            "schedule": schedule.__dict__, "max_call_seconds": args.max_call_seconds,
            "status": statuses, "notes": report.NOTES,
            "overhead_layer": layers.OVERHEAD_LAYER, "overhead_us": overhead,
            "targets": report.target_summary(records, host.peak_gflops),
            "cases": records})

    guard = SlowCallGuard(args.max_call_seconds)
    try:
        pending = list(range(len(cases)))
        for attempt in range(1 + args.retry_contended):
            if attempt:
                print(f"== re-measuring {len(pending)} disturbed case(s), retry {attempt} "
                      f"of {args.retry_contended} ==\n")
            for index in pending:
                record = measure_case(cases[index], contenders, schedule, args.seed,
                                      host.peak_gflops, guard)
                if index == len(records):
                    records.append(record)
                elif disturbance(record) < disturbance(records[index]):
                    records[index] = record
                print("\n".join(case_header(record) + case_table(record, columns)),
                      flush=True)
                print()
                save(complete=False)
            pending = [i for i, r in enumerate(records)
                       if disturbance(r) > FOREIGN_LOAD_WARNING]
            if not pending:
                break
        overhead = next((report.overhead_us(r) for r in records
                         if r["case"]["layer"] == layers.OVERHEAD_LAYER), {})
    finally:
        for peer in contenders:
            peer.close()

    if overhead:
        print("\n".join(overhead_lines(overhead)))
    targets = report.target_summary(records, host.peak_gflops)
    print("\n".join(report.target_lines(targets)))
    for key, note in report.NOTES.items():
        print(f"note ({key}): {note}")
    save(complete=True)
    cold_repeats = args.cold_repeats if args.cold_repeats is not None else \
        (0 if args.smoke else 3)
    if cold_repeats > 0:
        import cold  # what a user meets first, each figure in fresh processes
        print(f"\nCold start, {args.threads} threads, medians of {cold_repeats} fresh "
              "processes (benchmarks/cold.py):\n")
        cold_results = cold.measure(cold_repeats, args.threads, args.mxnet_python,
                                    peers=not (args.no_torch and args.no_mxnet))
        print(cold.table(cold_results))
        cold_path = json_path.with_name(json_path.stem + "_cold.json")
        cold_path.write_text(json.dumps({"threads": args.threads, "repeats": cold_repeats,
                                         "medians_seconds": cold_results}, indent=1))
    print(f"results written to {json_path} ({time.perf_counter() - started:.0f} s)")
    if not args.no_plot:
        print(report.plot_speedups(args.output_dir / f"{'smoke_' if args.smoke else ''}"
                                                     "speedup.png", records))
    wrong = [f"{r['case']['layer']}/b{r['case']['batch']}: {', '.join(r['check']['disagree'])}"
             for r in records if r["check"].get("disagree")]
    if wrong:
        print("CORRECTNESS: forward outputs (bias included) disagree with the reference "
              f"on {len(wrong)} case(s): {'; '.join(wrong)}", file=sys.stderr)
        return 1
    print(f"correctness: every forward output (bias included) agrees with the reference "
          f"on all {len(records)} case(s)")
    if args.docs:
        import docs
        print("\n".join(docs.render(json_path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
