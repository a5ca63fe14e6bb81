"""``python -m mxdeconv``: what was loaded, and a short self-check.

Prints the runtime (package, oneDNN version and the instruction set it
dispatched to, threads, primitive cache capacity, the plan cache file, tuning,
bfloat16 support), then runs one small Deconvolution with a bias forward and
backward on the oneDNN path and compares it with the NumPy path.  The exit
status is 0 when everything agrees, 1 when the check fails or the extension
did not load.  ``--no-check`` prints the runtime only.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

#: The check's layer: 8 -> 6 channels, groups, stride, pad, adj, a bias.
CHECK_PARAMS: Dict[str, Any] = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
                                    num_filter=6, num_group=2, no_bias=False)
CHECK_SHAPES = ((2, 8, 5, 5), (8, 3, 3, 3), (6,))
#: float32 with different summation orders: far below this relative to the
#: largest magnitude of each result.
CHECK_RTOL = 1e-5


def runtime_lines() -> List[str]:
    """The runtime as ``name: value`` lines (raises MXNetError if the extension
    did not load)."""
    import mxdeconv
    from mxdeconv._core import dtypes
    from mxdeconv.onednn import planner

    info = mxdeconv.runtime_info()
    bf16 = ("yes (ml_dtypes)" if dtypes.bfloat16_available()
            else "no (pip install ml_dtypes)")
    rows = [
        ("mxdeconv", f"{mxdeconv.__version__} ({mxdeconv.__file__.rsplit('/', 1)[0]})"),
        ("oneDNN", info["onednn_version"]),
        ("cpu_isa", info["cpu_isa"]),
        ("threads", f"{info['num_threads']} ({info['num_threads_source']})"),
        ("OpenMP wait", info["openmp_wait"]),
        ("oneDNN path", "enabled" if info["onednn_enabled"] else
         "switched off (MXDECONV_ONEDNN=0 or set_onednn_enabled(False))"),
        ("primitive cache", f"{info['cache_capacity']} entries per thread"),
        ("plan cache", mxdeconv.plan_cache_path()
         or "memory only (MXDECONV_CACHE_DIR='', or no usable cache directory)"),
        ("tuning", "on" if mxdeconv.tuning_enabled() else "off (MXDECONV_TUNE=0)"),
        ("first calls", "provisional on big layers: the result checked, the kernel check "
         "on the next call" if planner.provisional_enabled() else
         "the kernel check first (MXDECONV_PROVISIONAL=0)"),
        ("bfloat16", bf16),
    ]
    width = max(len(name) for name, _ in rows)
    return [f"{name.ljust(width)}  {value}" for name, value in rows]


def _run(impl: str, arrays: Sequence[np.ndarray]) -> Tuple[np.ndarray, ...]:
    import mxdeconv
    from mxdeconv import nd

    data, weight, bias, out_grad = arrays
    with mxdeconv.use_impl(impl):
        out = nd.Deconvolution(data, weight, bias, **CHECK_PARAMS)
        grads = nd.Deconvolution_backward(out_grad, data, weight, bias, **CHECK_PARAMS)
    values = []
    for result in (out,) + tuple(grads):
        assert result is not None  # no out= and req "write": every result is new
        values.append(result.asnumpy())
    return tuple(values)


def self_check() -> Tuple[bool, str]:
    """One forward and backward on oneDNN against the NumPy path: (ok, message)."""
    import mxdeconv

    rng = np.random.default_rng(0)
    data, weight, bias = (rng.uniform(-1, 1, shape).astype(np.float32)
                          for shape in CHECK_SHAPES)
    out_grad = rng.uniform(-1, 1, (2, 6, 10, 10)).astype(np.float32)
    arrays = (data, weight, bias, out_grad)
    started = time.perf_counter()
    reference = _run("numpy", arrays)
    if not mxdeconv.onednn_enabled():
        return True, ("self-check       skipped: the oneDNN path is switched off "
                      "(only the NumPy path runs)")
    try:
        result = _run("onednn", arrays)
    except mxdeconv.MXNetError as error:
        return False, f"self-check       FAILED: the oneDNN path cannot run a small layer: {error}"
    names = ("output", "data grad", "weight grad", "bias grad")
    worst = []
    for name, got, want in zip(names, result, reference):
        scale = float(np.abs(want).max()) or 1.0
        worst.append((float(np.abs(got - want).max()) / scale, name))
    largest, name = max(worst)
    seconds = time.perf_counter() - started
    summary = (f"self-check       Deconvolution 2x8x5x5 -> 2x6x10x10, k3 s2 p1 adj1, "
               f"2 groups, bias\n"
               f"                 forward and backward, oneDNN vs NumPy: largest "
               f"difference\n                 {largest:.1e} of the magnitude ({name}), "
               f"{seconds:.2f} s: ")
    if not largest <= CHECK_RTOL:
        return False, f"{summary}FAILED (more than {CHECK_RTOL:g})"
    return True, f"{summary}ok"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the runtime, run the self-check; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m mxdeconv", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-check", action="store_true", help="print the runtime only")
    args = parser.parse_args(argv)
    from mxdeconv import MXNetError

    try:
        print("\n".join(runtime_lines()))
    except MXNetError as error:
        print(f"mxdeconv: {error}", file=sys.stderr)
        return 1
    if args.no_check:
        return 0
    ok, message = self_check()
    print(message)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
