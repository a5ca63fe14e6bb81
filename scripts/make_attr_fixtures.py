"""Record which string attribute forms MXNet 1.9.1 accepts, as a test fixture.

Runs under MXNet's own environment (see scripts/setup_mxnet_venv.sh):

    .venv-mxnet/bin/python scripts/make_attr_fixtures.py [OUTPUT.json]

For every case of tests/data/attr_forms.py it calls ``mx.nd.Deconvolution`` (the
weight and bias shapes come from MXNet's own shape inference) or builds the
Gluon layer and runs one batch through it, and records whether MXNet accepted
the arguments, the shapes it produced, or the first line of its error.  Writes
tests/data/mxnet_attr_forms.json unless another path is given.
"""
import json
import os
import re
import sys

import mxnet as mx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "data"))
from attr_forms import GLUON_CASES, OP_CASES  # noqa: E402


def _error(err):
    """The line of MXNet's message that says what failed (its C++ stack trace
    follows it), without the time stamp and the node's generated name."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    failed = [line for line in lines if "Check failed" in line or "Invalid" in line]
    line = (failed or lines or [""])[0]
    line = re.sub(r"\[\d\d:\d\d:\d\d\] ", "", line)
    line = re.sub(r"Error in operator \S+: ", "", line)
    prefix = f"{type(err).__name__}: "
    return line if line.startswith(prefix) else prefix + line


def run_op(data_shape, kwargs):
    """MXNet's verdict on the arguments: its parameter parser and shape inference
    (the symbolic and the imperative call share both).  The imperative call is run
    too; where it fails after all (MXNet's MKL-DNN path cannot compute
    target_shape), ``computed`` holds its error."""
    # name= is the symbol's own name there (a str); imperatively it is ignored.
    attributes = {k: v for k, v in kwargs.items() if k != "name"}
    try:
        sym = mx.sym.Deconvolution(mx.sym.var("data"), **attributes)
        arg_shapes, out_shapes, _ = sym.infer_shape(data=data_shape)
    except Exception as err:  # noqa: BLE001 - recording whatever MXNet raises
        return {"accepted": False, "error": _error(err)}
    names = sym.list_arguments()
    shapes = dict(zip(names, arg_shapes))
    record = {"accepted": True, "out_shape": list(out_shapes[0]),
              "weight_shape": list(shapes[names[1]]),
              "bias_shape": list(shapes[names[2]]) if len(names) > 2 else None}
    try:
        out = mx.nd.Deconvolution(*[mx.nd.ones(shapes[name]) for name in names], **kwargs)
        out.wait_to_read()
        assert list(out.shape) == record["out_shape"], (out.shape, record)
        record["computed"] = True
    except Exception as err:  # noqa: BLE001
        record["computed"] = _error(err)
    return record


def run_gluon(class_name, kwargs, data_shape):
    try:
        layer = getattr(mx.gluon.nn, class_name)(**kwargs)
        layer.initialize()
        out = layer(mx.nd.ones(data_shape))
        out.wait_to_read()
    except Exception as err:  # noqa: BLE001
        return {"accepted": False, "error": _error(err)}
    return {"accepted": True, "out_shape": list(out.shape),
            "weight_shape": list(layer.weight.shape),
            "bias_shape": None if layer.bias is None else list(layer.bias.shape)}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        HERE, "..", "tests", "data", "mxnet_attr_forms.json")
    record = {"mxnet_version": mx.__version__, "op": {}, "gluon": {}}
    for case_id, data_shape, kwargs in OP_CASES:
        record["op"][case_id] = run_op(data_shape, kwargs)
    for case_id, class_name, kwargs, data_shape in GLUON_CASES:
        record["gluon"][case_id] = run_gluon(class_name, kwargs, data_shape)
    with open(path, "w") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print(f"wrote {len(OP_CASES) + len(GLUON_CASES)} cases from MXNet {mx.__version__} "
          f"to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
