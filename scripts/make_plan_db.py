#!/usr/bin/env python
"""Make the shipped plan database (mxdeconv/onednn/plan_db.json) by tuning a
grid of layers from real models, under each kernel family this CPU can run.

    python scripts/make_plan_db.py                      # every family, 1 and 2 threads
    python scripts/make_plan_db.py --families AVX2 --threads 2 --out /tmp/db.json
    python scripts/make_plan_db.py --tables-in run1.json run2.json   # from timing tables
    python scripts/make_plan_db.py --evaluate tables.json     # held-out accuracy of tables

For each layer (GRID: DCGAN, WGAN, U-Net, FCN, super-resolution, pose and
detection heads, segmentation, grouped and dilated layers, 1-D audio, 3-D;
each at batch 1 and a typical batch), each pass and mode (forward inference,
forward training, backward weights, backward data; float32) and each thread
count, a worker process (``ONEDNN_MAX_CPU_ISA`` set before oneDNN loads)
times every candidate the planner would (end to end for the mode, with the
planner's own cost functions), times the fastest few again in interleaved
rounds (medians), and records the fastest that passes the kernel check.
Reference kernels are never candidates.  Timing tables go to ``--tables``
(not shipped); ``--tables-in`` makes the database from such tables instead of
timing, merging several runs (each candidate's fastest time counts: a slow
moment of one run does not).

The database keeps each record's layer, its choice and the candidates within
``plan_db.NEAR_RATIO`` of the fastest (their times over the fastest's), and
under ``made`` how it was made (machine, date, oneDNN version, families, the
command) and the predictor's accuracy on held-out layers: each base layer in
turn is left out (all its batch sizes and passes) and predicted from the
others.  Per kernel family: how often the predicted candidate ran within 5%
of the fastest, the geometric mean of its time over the fastest's, how often
the best of the tuner's shortlist did, how long that shortlist was,
oneDNN's first choice's figures beside them (what the planner runs without a
database), and the first plan's (what the planner runs from a layer's first
call: the prediction where confident or where a hint displaces oneDNN's
first choice, see ``planner.tuner.HINT_START_RATIO``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "mxdeconv" / "onednn" / "plan_db.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_name  # noqa: E402


def _k(size, ndim=2):
    return (size,) * ndim


def _layer(model, c_in, spatial, num_filter, kernel, stride, pad=None, batches=(1, 8), **more):
    ndim = len(spatial)
    params = dict(kernel=_k(kernel, ndim) if isinstance(kernel, int) else kernel,
                  stride=_k(stride, ndim) if isinstance(stride, int) else stride,
                  num_filter=num_filter, no_bias=False)
    if pad is not None:
        params["pad"] = _k(pad, ndim) if isinstance(pad, int) else pad
    for name, value in more.items():
        params[name] = _k(value, ndim) if isinstance(value, int) and name != "num_group" \
            else value
    return dict(model=model, c_in=c_in, spatial=tuple(spatial), params=params,
                batches=tuple(batches))


#: Base layers (each at its batch sizes).  Channel counts, kernels and strides
#: are the models'; large spatial sizes are cut so that a pass runs in tens
#: of milliseconds on two cores.
GRID = [
    # DCGAN (ngf 64 and 128), WGAN-GP's generator
    _layer("dcgan project", 100, (1, 1), 512, 4, 1, 0, batches=(1, 16)),
    _layer("dcgan 512-256", 512, (4, 4), 256, 4, 2, 1, batches=(1, 16)),
    _layer("dcgan 256-128", 256, (8, 8), 128, 4, 2, 1, batches=(1, 16)),
    _layer("dcgan 128-64", 128, (16, 16), 64, 4, 2, 1, batches=(1, 16)),
    _layer("dcgan 64-rgb", 64, (32, 32), 3, 4, 2, 1, batches=(1, 16)),
    _layer("dcgan128 1024-512", 1024, (4, 4), 512, 4, 2, 1, batches=(1, 8)),
    _layer("wgan 512-512", 512, (4, 4), 512, 4, 2, 1, batches=(1, 8)),
    # U-Net decoders (k2 s2), Mask R-CNN's mask head
    _layer("unet 1024-512", 1024, (16, 16), 512, 2, 2, batches=(1, 4)),
    _layer("unet 512-256", 512, (32, 32), 256, 2, 2, batches=(1, 4)),
    _layer("unet 256-128", 256, (64, 64), 128, 2, 2, batches=(1, 2)),
    _layer("unet 128-64", 128, (96, 96), 64, 2, 2, batches=(1,)),
    _layer("mask head", 256, (14, 14), 256, 2, 2, batches=(1, 16)),
    # FCN score upsampling, super-resolution
    _layer("fcn upscore2", 21, (16, 16), 21, 4, 2, 1, batches=(1, 8)),
    _layer("fcn upscore8", 21, (32, 32), 21, 16, 8, 4, batches=(1, 4)),
    _layer("fcn upscore32", 21, (8, 8), 21, 64, 32, 16, batches=(1,)),
    _layer("fsrcnn x2", 56, (64, 64), 1, 9, 2, 4, batches=(1, 8), adj=1),
    _layer("fsrcnn x4", 56, (32, 32), 1, 9, 4, 4, batches=(1, 8), adj=3),
    _layer("lapsrn", 64, (32, 32), 64, 4, 2, 1, batches=(1, 8)),
    # pose and detection heads
    _layer("simple baselines 2048", 2048, (8, 6), 256, 4, 2, 1, batches=(1, 4)),
    _layer("simple baselines 256", 256, (16, 12), 256, 4, 2, 1, batches=(1, 4)),
    _layer("centernet 256", 256, (16, 16), 256, 4, 2, 1, batches=(1, 4)),
    _layer("centernet 64", 64, (64, 64), 64, 4, 2, 1, batches=(1,)),
    # depthwise bilinear upsampling, grouped, dilated
    _layer("bilinear dw64", 64, (32, 32), 64, 4, 2, 1, batches=(1, 8), num_group=64),
    _layer("bilinear dw256", 256, (16, 16), 256, 4, 2, 1, batches=(1, 4), num_group=256),
    _layer("resnext g32", 256, (14, 14), 256, 3, 2, 1, batches=(1, 8), num_group=32, adj=1),
    _layer("grouped g4", 128, (16, 16), 128, 4, 2, 1, batches=(1, 8), num_group=4),
    _layer("dilated s1", 64, (32, 32), 64, 3, 1, 2, batches=(1, 8), dilate=2),
    _layer("dilated s2", 128, (16, 16), 64, 3, 2, 2, batches=(1, 8), dilate=2, adj=1),
    # 1-D audio: WaveGAN, MelGAN, a plain upsampler
    _layer("wavegan 1024", 1024, (16,), 512, 25, 4, 11, batches=(1, 8), adj=1),
    _layer("wavegan 256", 256, (256,), 128, 25, 4, 11, batches=(1, 8), adj=1),
    _layer("wavegan 64", 64, (1024,), 1, 25, 4, 11, batches=(1, 8), adj=1),
    _layer("melgan 512", 512, (64,), 256, 16, 8, 4, batches=(1, 8)),
    _layer("melgan 128", 128, (512,), 64, 4, 2, 1, batches=(1, 8)),
    _layer("audio k8s4", 128, (1024,), 64, 8, 4, 2, batches=(1, 8)),
    _layer("audio k2s2", 64, (2048,), 64, 2, 2, batches=(1, 8)),
    # 3-D: U-Net and V-Net decoders, a 3-D GAN, video
    _layer("unet3d 256", 256, (4, 4, 4), 128, 2, 2, batches=(1, 2)),
    _layer("unet3d 64", 64, (16, 16, 16), 32, 2, 2, batches=(1,)),
    _layer("gan3d 512", 512, (4, 4, 4), 256, 4, 2, 1, batches=(1, 2)),
    _layer("gan3d 128", 128, (8, 8, 8), 64, 4, 2, 1, batches=(1, 2)),
    _layer("video", 64, (4, 16, 16), 32, (3, 4, 4), (1, 2, 2), (1, 1, 1), batches=(1, 2)),
]

PASSES = (("forward", False), ("forward", True), ("backward_weights", False),
          ("backward_data", False))
#: How many of the fastest estimates are timed again, and in how many rounds.
REFINE, ROUNDS = 4, 3


def _layers():
    for base, layer in enumerate(GRID):
        for batch in layer["batches"]:
            yield base, dict(data=(batch, layer["c_in"]) + layer["spatial"],
                             params=layer["params"], model=layer["model"])


# -- the worker: one kernel family, one thread count --------------------------------------
def _time_pass(what: str, training: bool, geom, threads: int) -> Optional[Dict[str, Any]]:
    from mxdeconv.onednn import kernel_check
    from mxdeconv.onednn import planner as plans
    from mxdeconv.onednn._loader import extension as ops
    costs = plans._Costs()
    dtype = "float32"
    if what == "forward":
        enumerate_ = lambda: ops.forward_candidates(geom, dtype, training, False)  # noqa: E731
        cost = lambda plan: plans._forward_cost(costs, plan, training, False)  # noqa: E731
        check = kernel_check.forward_check(geom, dtype, False)
    elif what == "backward_weights":
        defective = plans._known_defective(geom, dtype)
        enumerate_ = lambda: (c for c in ops.backward_weights_candidates(  # noqa: E731
            geom, dtype) if not defective(c))
        cost = lambda plan: plans._backward_weights_cost(costs, plan)  # noqa: E731
        check = kernel_check.backward_weights_check(geom, dtype)
    else:
        enumerate_ = lambda: ops.backward_data_candidates(geom, dtype)  # noqa: E731
        cost = lambda plan: plans._backward_data_cost(costs, plan, None, None)  # noqa: E731
        check = kernel_check.backward_data_check(geom, dtype)
    macs = plans.result_check.pass_macs(geom)
    options = [1, threads] if threads > 1 and macs < plans.ONE_THREAD_MACS else [threads]
    timed = []
    first = None  # oneDNN's first choice on the caller's threads
    costs.precise = False
    for count in options:
        with ops.using_threads(count):
            for candidate in enumerate_():
                if candidate.is_reference:
                    continue
                if first is None and count == threads:
                    first = candidate
                try:
                    seconds = cost(candidate.build())
                except Exception:  # noqa: BLE001 - not a contender
                    continue
                if math.isfinite(seconds):
                    timed.append([candidate, count, seconds, False])
    if not timed:
        return None
    timed.sort(key=lambda entry: entry[2])
    costs.precise = True
    best = timed[:REFINE]
    rounds = [[] for _ in best]
    for _ in range(ROUNDS):  # interleaved: a slow moment hits every contender
        for entry, times in zip(best, rounds):
            with ops.using_threads(entry[1]):
                times.append(cost(entry[0].build()))
    for entry, times in zip(best, rounds):
        entry[2], entry[3] = statistics.median(times), True
    timed.sort(key=lambda entry: (not entry[3], entry[2]))
    chosen = None
    for entry in timed:
        with ops.using_threads(entry[1]):
            try:
                if check(entry[0].build()) is None:
                    chosen = entry
                    break
            except Exception:  # noqa: BLE001
                continue
    if chosen is None:
        return None
    ops.release_timing_buffers()

    def name(entry):
        return {"variant": list(entry[0].variant), "impl": entry[0].impl,
                "one_thread": entry[1] == 1 and threads > 1}
    return {"choice": name(chosen),
            "first": None if first is None else name([first, threads]),
            "times": [[name(e), e[2], e[3]] for e in timed]}


def worker(threads: int, out: str) -> None:
    from mxdeconv.onednn._loader import extension as ops
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    ops.set_num_threads(threads)
    records = []
    begun = time.perf_counter()
    for base, layer in _layers():
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in layer["params"].items()}
        geom = infer_geometry(parse_params(params), layer["data"])
        for what, training in PASSES:
            timed = _time_pass(what, training, geom, threads)
            if timed is None:
                continue
            records.append(dict(isa=ops.cpu_isa(), threads=threads, base=base,
                                model=layer["model"], **{"pass": what}, dtype="float32",
                                training=training,
                                layer=dict(data=list(layer["data"]), params=layer["params"]),
                                **timed))
        print(f"  {ops.cpu_isa()} {threads} thread(s): {layer['model']} {layer['data']} "
              f"({time.perf_counter() - begun:.0f} s)", file=sys.stderr, flush=True)
    Path(out).write_text(json.dumps(records))


# -- held-out accuracy ------------------------------------------------------------------------
def _ratios(record: Dict[str, Any]) -> Dict[Any, float]:
    """Each timed candidate's time over the record's fastest."""
    from mxdeconv.onednn import plan_db
    fastest = min(t[1] for t in record["times"])
    ratios: Dict[Any, float] = {}
    for named, seconds, *_ in record["times"]:
        choice = plan_db._choice_of(named)
        ratios[choice] = min(ratios.get(choice, math.inf), seconds / fastest)
    return ratios


def evaluate(records: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Leave each base layer out, predict its records from the others."""
    from mxdeconv.onednn import plan_db
    from mxdeconv.onednn.planner.tuner import hint_displaces
    summary: Dict[str, Dict[str, Any]] = {}
    bases = sorted({r["base"] for r in records})
    for family in sorted({r["isa"] for r in records}):
        predicted, shortlisted, firsts, lengths, started = [], [], [], [], []
        confident = confident_hits = 0
        for base in bases:
            held = [r for r in records if r["isa"] == family and r["base"] == base]
            database = _database([r for r in records if r["base"] != base])
            for record in held:
                ratios = _ratios(record)
                geom = plan_db.geometry_of_layer(record["layer"])
                prediction = database.predict(
                    plan_db.LayerKey(record["pass"], record["dtype"], record["training"],
                                     len(geom.spatial_in)), geom, record["threads"], family)
                first = plan_db._choice_of(record.get("first"))
                first_ratio = ratios.get(first, plan_db.UNKEPT_RATIO)
                if first is not None:
                    firsts.append(first_ratio)
                if prediction is None:  # planned as without a database
                    predicted.append(first_ratio)
                    started.append(first_ratio)
                    continue
                ratio = ratios.get(prediction.choice, first_ratio)  # not offered: the first
                predicted.append(ratio)
                # The planner's first plan: the prediction where confident, or
                # where the hint displaces oneDNN's first choice.
                hint_starts = first is not None and hint_displaces(prediction, first.variant,
                                                                   first.impl)
                started.append(ratio if prediction.confident or hint_starts else first_ratio)
                short = [ratios[c] for c in prediction.shortlist if c in ratios]
                shortlisted.append(min(short + [first_ratio]))
                lengths.append(len(short))
                if prediction.confident:
                    confident += 1
                    confident_hits += ratio <= 1.05
        summary[family] = dict(
            held_out=len(predicted),
            within_5_percent=_share(predicted), geomean_ratio=_geomean(predicted),
            confident=confident, confident_within_5_percent=round(
                confident_hits / max(confident, 1), 3),
            shortlist_best_within_5_percent=_share(shortlisted),
            shortlist_mean_length=round(statistics.fmean(lengths), 1) if lengths else None,
            first_choice_within_5_percent=_share(firsts) if firsts else None,
            first_choice_geomean_ratio=_geomean(firsts) if firsts else None,
            first_plan_within_5_percent=_share(started),
            first_plan_geomean_ratio=_geomean(started))
    return summary


def _share(ratios: List[float]) -> float:
    return round(sum(r <= 1.05 for r in ratios) / max(len(ratios), 1), 3)


def _geomean(ratios: List[float]) -> Optional[float]:
    return round(statistics.geometric_mean(ratios), 3) if ratios else None


def _merged(runs: List[List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """One record per layer pass of several runs' tables: each candidate at its
    fastest time in any run, the choice the fastest that any run chose."""
    merged: Dict[str, Dict[str, Any]] = {}
    for records in runs:
        for record in records:
            key = json.dumps([record[k] for k in ("isa", "threads", "pass", "dtype",
                                                   "training", "layer")], sort_keys=True)
            if key not in merged:
                merged[key] = dict(record, times=[list(t) for t in record["times"]])
                continue
            into = merged[key]
            times = {json.dumps(t[0], sort_keys=True): t for t in into["times"]}
            for entry in record["times"]:
                known = times.get(json.dumps(entry[0], sort_keys=True))
                if known is None:
                    into["times"].append(list(entry))
                elif entry[1] < known[1]:
                    known[1] = entry[1]
            into["times"].sort(key=lambda t: t[1])
            chosen = {json.dumps(r["choice"], sort_keys=True) for r in (into, record)}
            into["choice"] = next(t[0] for t in into["times"]
                                  if json.dumps(t[0], sort_keys=True) in chosen)
    return list(merged.values())


def _database(records):
    from mxdeconv.onednn import plan_db
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as stream:
        stream.write(_document(records, {}))
    database = plan_db.PlanDatabase(Path(stream.name))
    database.families()  # read now (the file goes)
    os.unlink(stream.name)
    return database


def _document(records, made) -> str:
    """The database file's text: each distinct candidate once (``choices``),
    records naming them by index (``plan_db.file_text``: in their groups)."""
    from mxdeconv.onednn import plan_db
    keep = ("isa", "threads", "pass", "dtype", "training", "layer")
    choices: List[Dict[str, Any]] = []
    index: Dict[str, int] = {}

    def numbered(named):
        text = json.dumps(named, sort_keys=True)
        if text not in index:
            index[text] = len(choices)
            choices.append(named)
        return index[text]
    compact = []
    for record in records:
        fastest = min(t[1] for t in record["times"])
        near = sorted((t[1] / fastest, json.dumps(t[0], sort_keys=True), t[0])
                      for t in record["times"] if t[1] <= plan_db.NEAR_RATIO * fastest)
        compact.append(dict({k: record[k] for k in keep}, choice=numbered(record["choice"]),
                            near=[[numbered(named), round(ratio, 3)]
                                  for ratio, _, named in near[:plan_db.NEAR_KEPT]]))
    return plan_db.file_text(compact, made, choices)



def _timed(families: Optional[List[str]], thread_counts: List[int]) -> List[Dict[str, Any]]:
    """Every family's and thread count's records, each timed by a worker process
    (``ONEDNN_MAX_CPU_ISA`` set before oneDNN loads)."""
    if families is None:
        from mxdeconv.onednn._loader import extension as ops
        native = ops.cpu_isa()
        families = ["DEFAULT"] + (["AVX512_CORE"] if native.startswith("avx512_core_")
                                  else []) + (["AVX2"] if "avx512" in native else [])
    records: List[Dict[str, Any]] = []
    for family in families:
        for threads in thread_counts:
            env = dict(os.environ, MXDECONV_PLAN_DB="0", MXDECONV_CACHE_DIR="")
            env.pop("ONEDNN_MAX_CPU_ISA", None)
            if family != "DEFAULT":
                env["ONEDNN_MAX_CPU_ISA"] = family
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as stream:
                out = stream.name
            subprocess.run([sys.executable, __file__, "--worker", str(threads), out],
                           env=env, check=True)
            records += json.loads(Path(out).read_text())
            os.unlink(out)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="*", default=None,
                        help="ONEDNN_MAX_CPU_ISA values (default: this CPU's own, "
                             "AVX512_CORE where it has more, and AVX2)")
    parser.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--out", default=str(SHIPPED))
    parser.add_argument("--tables", default=None, help="write the timing tables here")
    parser.add_argument("--evaluate", nargs="*", default=None,
                        help="tables files to evaluate (several: one run each, merged)")
    parser.add_argument("--tables-in", nargs="*", default=None,
                        help="make the database from these tables files (merged)")
    parser.add_argument("--worker", nargs=2, metavar=("THREADS", "OUT"))
    args = parser.parse_args()
    if args.worker:
        worker(int(args.worker[0]), args.worker[1])
        return
    if args.evaluate:
        print(json.dumps(evaluate(_merged([json.loads(Path(f).read_text())
                                           for f in args.evaluate])), indent=1))
        return
    begun = time.perf_counter()
    if args.tables_in:
        records = _merged([json.loads(Path(f).read_text()) for f in args.tables_in])
    else:
        records = _timed(args.families, args.threads)
    from mxdeconv.onednn._loader import extension as ops
    accuracy = evaluate(records)
    made = dict(date=datetime.date.today().isoformat(), machine=cpu_name(),
                cores=os.cpu_count(), onednn=ops.onednn_version(),
                families=sorted({r["isa"] for r in records}),
                threads=sorted({r["threads"] for r in records}),
                layers=len(GRID), records=len(records),
                seconds=None if args.tables_in else round(time.perf_counter() - begun),
                command="python scripts/make_plan_db.py " + " ".join(
                    Path(arg).name if os.sep in arg else arg for arg in sys.argv[1:]),
                held_out=accuracy)
    Path(args.out).write_text(_document(records, made))
    if args.tables:
        Path(args.tables).write_text(json.dumps(records))
    print(json.dumps(made, indent=1))


if __name__ == "__main__":
    main()
