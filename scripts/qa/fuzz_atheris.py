#!/usr/bin/env python
"""Coverage-guided fuzzing (atheris / libFuzzer) of the parameter parser.

    pip install atheris
    python scripts/qa/fuzz_atheris.py -max_total_time=300 -print_final_stats=1

Each input becomes a keyword dict for ``parse_params`` (any subset of the
fields, each value an int of any size, a bool, a float, a string, None, or a
tuple/list of such) and a data shape for ``infer_geometry``.  Both must either
return or raise ``MXNetError``/``TypeError``; anything else is a crash that
libFuzzer reports with the input that caused it.  The parser is pure Python,
so this fuzzes only validation (fast: ~10^4-10^5 inputs per second); the
Hypothesis fuzzer (scripts/qa/fuzz.py) covers whole calls against the reference.
"""
import os
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

with atheris.instrument_imports():
    from mxdeconv._core.errors import MXNetError
    from mxdeconv.semantics.attributes import (MAX_PARAM, DeconvolutionParam, infer_geometry,
                                               parse_params)

FIELDS = ["kernel", "stride", "dilate", "pad", "adj", "target_shape", "num_filter",
          "num_group", "no_bias", "layout", "workspace", "cudnn_tune", "cudnn_off", "kernal"]
INTS = [0, 1, 2, 3, -1, MAX_PARAM, MAX_PARAM + 1, 2**63, -2**63, 10**30]


def value(fdp: atheris.FuzzedDataProvider, depth: int = 0):
    kind = fdp.ConsumeIntInRange(0, 9)
    if kind <= 2:
        return fdp.ConsumeIntInRange(-3, 8)
    if kind == 3:
        return INTS[fdp.ConsumeIntInRange(0, len(INTS) - 1)]
    if kind == 4:
        return fdp.ConsumeBool()
    if kind == 5:
        return fdp.ConsumeRegularFloat()
    if kind == 6:
        return fdp.ConsumeUnicodeNoSurrogates(4)
    if kind == 7:
        return None
    if depth > 1:
        return 1
    items = [value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))]
    return tuple(items) if kind == 8 else items


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kwargs = {}
    for _ in range(fdp.ConsumeIntInRange(0, 8)):
        kwargs[FIELDS[fdp.ConsumeIntInRange(0, len(FIELDS) - 1)]] = value(fdp)
    shape = tuple(fdp.ConsumeIntInRange(-1, 6) for _ in range(fdp.ConsumeIntInRange(0, 6)))
    try:
        param = parse_params(kwargs)
    except (MXNetError, TypeError):
        return
    assert isinstance(param, DeconvolutionParam)
    assert all(1 <= k <= MAX_PARAM for k in param.kernel)
    try:
        geom = infer_geometry(param, shape)
    except (MXNetError, TypeError):
        return
    assert all(o >= 1 for o in geom.out_shape[2:]), geom
    assert geom.weight_shape[0] == shape[1] and geom.out_shape[1] == param.num_filter


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
