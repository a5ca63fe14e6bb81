#!/usr/bin/env python
"""The long fuzz run: tests/package/test_fuzz.py's property on >= 10^5 examples.

Runs the Hypothesis property of ``tests/package/test_fuzz.py`` (arbitrary, also
invalid, Deconvolution calls checked against the float64 reference or for a
clean MXNetError/TypeError) in chunks, each chunk with a fresh seed, until
``--examples`` calls have run or ``--budget`` seconds have passed, and prints
how many ran, how many were valid (compared with the reference) and how many
raised which error.  A failing example stops the run with Hypothesis' shrunk
counterexample and the seed that reproduces it.

    python scripts/qa/fuzz.py --examples 100000 --budget 1200
    python scripts/qa/fuzz.py --examples 2000 --parser-only   # the parser alone, fast
    python scripts/qa/fuzz.py --examples 100000 --params-files  # the .params reader
                                                           # (tests/io/test_params_files.py)

Exit status: 0 when every example passed, 1 on a failure.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "package"),
                str(ROOT / "tests" / "io")]  # test_fuzz, test_params_files
os.environ.setdefault("OMP_NUM_THREADS", "1")  # before oneDNN loads: one core per run

import test_fuzz  # noqa: E402
import test_params_files  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=100_000)
    ap.add_argument("--budget", type=float, default=1200.0, help="seconds (default 20 min)")
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=None, help="first chunk's seed")
    ap.add_argument("--parser-only", action="store_true",
                    help="fuzz only the parameter parser (test_fuzz_parameter_parser)")
    ap.add_argument("--params-files", action="store_true",
                    help="fuzz the reader of MXNet's NDArray files with truncated, flipped, "
                         "spliced and random bytes (test_params_files.test_fuzz_reader)")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    start = time.monotonic()
    chunks = 0
    key = "parser_examples" if args.parser_only else "examples"
    stats = test_params_files.STATS if args.params_files else test_fuzz.STATS
    status = 0
    while stats[key] < args.examples and time.monotonic() - start < args.budget:
        chunk_seed = rng.getrandbits(32) if args.seed is None or chunks else args.seed
        n = min(args.chunk, args.examples - stats[key])
        if args.params_files:
            test = test_params_files.make_reader_test(n, seed=chunk_seed)
        elif args.parser_only:
            test = test_fuzz.make_parser_test(n, seed=chunk_seed)
        else:
            test = test_fuzz.make_fuzz_test(n, seed=chunk_seed)
        try:
            test()
        except Exception as error:
            traceback.print_exc()  # with Hypothesis' falsifying example(s) as notes
            print(f"FAILED in chunk {chunks} (seed {chunk_seed}): {type(error).__name__}: "
                  f"{error}", file=sys.stderr)
            status = 1
            break
        chunks += 1
        elapsed = time.monotonic() - start
        print(f"[{elapsed:7.1f} s] chunk {chunks}: {dict(sorted(stats.items()))}",
              flush=True)
    elapsed = time.monotonic() - start
    figures = dict(sorted(stats.items()), seconds=round(elapsed, 1), chunks=chunks,
                   passed=status == 0, target=args.examples, budget_s=args.budget)
    print(json.dumps(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if status == 0 and stats[key] < args.examples:
        print(f"budget of {args.budget:.0f} s spent after {stats[key]} examples "
              f"(target {args.examples})", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
