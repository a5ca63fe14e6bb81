"""Fused vs unfused activation after a deconvolution, in inference (and the
cost of the activation's gradient in training).

    PYTHONPATH=. python benchmarks/activation_fusion.py [--rounds 7]

Per layer, interleaved (``timing.measure_interleaved``: round-robin blocks,
medians over every iteration):

* ``fused``: ``DeconvolutionActivation`` (what ``Conv2DTranspose(activation=...)``
  runs): the planner's plan, the activation an eltwise post-op where that
  is fastest and checked;
* ``unfused``: ``nd.Deconvolution`` then ``nd.Activation`` (NumPy);
* each ends by turning the result into the default layout (what reading it costs).

Then, for each kernel and layout family oneDNN offers (bias fused, oneDNN's
weight layout), its primitives alone (``bench_raw``, interleaved): the
deconvolution without an activation, with it fused, and followed by a
separate eltwise primitive, each with the plan-time check's verdict; and in
training the NumPy gradient of the activation against
``Deconvolution_backward`` (whether a oneDNN eltwise backward would pay).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import Schedule, measure_interleaved, step_runner  # noqa: E402

import mxdeconv  # noqa: E402
from mxdeconv import _ops, autograd, nd
from mxdeconv.semantics import activations as activation
from mxdeconv.onednn import kernel_check
from mxdeconv.onednn import planner as plans  # noqa: E402
from mxdeconv.ops.deconvolution import DeconvolutionActivation  # noqa: E402
from mxdeconv.semantics.attributes import infer_geometry, parse_params  # noqa: E402

LAYERS = {
    "DCGAN last 64->3 k4 s2 p1, 32x64x32x32, tanh": (
        (32, 64, 32, 32), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=3,
                               no_bias=False), "tanh"),
    "DCGAN 512->256 k4 s2 p1, 32x512x4x4, relu": (
        (32, 512, 4, 4), dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=256,
                              no_bias=False), "relu"),
}


def _arrays(shape, params):
    rng = np.random.default_rng(0)
    x = nd.array(rng.standard_normal(shape).astype(np.float32))
    w = nd.array((0.05 * rng.standard_normal(
        (shape[1], params["num_filter"]) + params["kernel"])).astype(np.float32))
    b = nd.array(rng.standard_normal(params["num_filter"]).astype(np.float32))
    return x, w, b


def _median_seconds(step, repeats=30):
    step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _same_kernel(geom, act, schedule) -> None:
    """The primitives alone (``bench_raw``), interleaved: for each kernel and
    layout family the checked candidates of, without a bias-add primitive,
    the deconvolution alone, with the activation fused, and followed by a
    separate eltwise primitive."""
    check = kernel_check.forward_check(geom, "float32", False, act)
    groups = {}
    for placement, candidates in (
            ("alone", _ops.forward_candidates(geom, "float32", False, False)),
            ("fused", _ops.forward_candidates(geom, "float32", False, False, act)),
    ):
        for c in candidates:
            if c.is_reference or not c.bias_fused or c.weights != "any":
                continue
            if placement == "fused":
                placement_here = "fused" if c.act_fused else "separate"
            else:
                placement_here = placement
            key = (c.impl, c.family)
            if placement_here in groups.setdefault(key, {}):
                continue
            plan = c.build()
            reason = None if placement_here == "alone" else check(plan)
            groups[key][placement_here] = (plan, reason)
    print("  same kernel, primitives only (median ms): alone / fused / separate "
          "(n/a: not offered)")
    for (impl, family), found in groups.items():
        if "separate" not in found:
            continue
        slots = {p: (lambda plan: lambda n: _ops.bench_raw(plan, n))(plan)
                 for p, (plan, _) in found.items()}
        results = measure_interleaved(slots, schedule)
        notes = "; ".join(f"{p} rejected by the check" for p, (_, r) in found.items() if r)
        print(f"    {impl:48s} {family:13s} " + " / ".join(
            f"{results[p].median * 1e3:7.3f}" if p in results else "    n/a"
            for p in ("alone", "fused", "separate")) + (f"  ({notes})" if notes else ""))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layer", default="", help="only layers whose name contains this")
    args = parser.parse_args()
    info = mxdeconv.runtime_info()
    print(f"oneDNN {info.get('onednn_version')} {info.get('cpu_isa')}, "
          f"{mxdeconv.get_num_threads()} threads")
    schedule = Schedule(rounds=args.rounds, block_seconds=0.2)
    for name, (shape, params, act) in LAYERS.items():
        if args.layer not in name:
            continue
        x, w, b = _arrays(shape, params)

        def fused():
            DeconvolutionActivation(x, w, b, act_type=act, **params)._plain()

        def unfused():
            nd.Activation(nd.Deconvolution(x, w, b, **params), act_type=act)._plain()

        with autograd.predict_mode():
            fused()
            unfused()
            results = measure_interleaved({"fused": step_runner(fused),
                                           "unfused": step_runner(unfused)}, schedule)
        print(f"\n{name} (inference)")
        for key, m in results.items():
            print(f"  {key:8s} {m.median * 1e3:8.3f} ms  (q1 {m.summary()['q1_s'] * 1e3:.3f}, "
                  f"q3 {m.summary()['q3_s'] * 1e3:.3f}, {len(m.samples)} runs)")
        geom = infer_geometry(parse_params(params), shape)
        plan = plans.forward_plan(geom, "float32", False, False, act)
        print(f"  planner's choice: {plan.impl}, {plan.family} layouts, {act} "
              f"{'fused' if plan.act_fused else 'by a separate eltwise primitive'}")
        _same_kernel(geom, act, schedule)

        # Training: the activation's gradient in NumPy against the backward passes.
        with autograd.train_mode():
            y = DeconvolutionActivation(x, w, b, act_type=act, **params)
        y_plain = y._plain()
        og = nd.array(np.random.default_rng(1).standard_normal(y.shape).astype(np.float32))
        og_plain = og._plain()
        grad = nd.array(activation.gradient(og_plain, y_plain, act))
        numpy_grad = _median_seconds(lambda: activation.gradient(og_plain, y_plain, act))
        backward = _median_seconds(lambda: nd.Deconvolution_backward(grad, x, w, b, **params))
        print(f"  training: {act} gradient in NumPy {numpy_grad * 1e3:.3f} ms, "
              f"Deconvolution_backward {backward * 1e3:.3f} ms "
              f"({100 * numpy_grad / backward:.1f}% on top)")


if __name__ == "__main__":
    main()
