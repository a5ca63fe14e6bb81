"""Record real MXNet 1.9.1 Deconvolution results as a test fixture.

Runs under MXNet's own environment (numpy 1.23.5, see scripts/setup_mxnet_venv.sh):

    MXNET_MKLDNN_ENABLED=0 .venv-mxnet/bin/python scripts/make_mxnet_fixtures.py native
    .venv-mxnet/bin/python scripts/make_mxnet_fixtures.py mkldnn

1-D and 2-D cases run on MXNet's native (mshadow) path in float64: its MKL-DNN
path fails on target_shape.  Dilated 2-D cases and 3-D cases (MXNet has no
native 3-D deconvolution) run on its MKL-DNN path in float32, which rejects
dilation in 3-D.
Writes tests/data/mxnet_deconvolution_<backend>.npz: for case i, arrays ``i/data``,
``i/weight``, ``i/bias``, ``i/out_grad``, ``i/out``, ``i/data_grad``,
``i/weight_grad``, ``i/bias_grad`` and the keyword arguments as JSON in ``i/params``.
"""
import json
import os
import sys

import mxnet as mx
import numpy as np

CASES = [
    dict(kernel=(3, 3), num_filter=4),
    dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=3, no_bias=False),
    dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1), num_filter=4),
    dict(kernel=(3, 3), stride=(2, 2), pad=(0, 0), adj=(1, 1), num_filter=2),  # adj > pad
    dict(kernel=(3, 3), stride=(3, 2), pad=(1, 0), adj=(2, 1), num_filter=4, num_group=2),
    dict(kernel=(4, 4), stride=(2, 2), target_shape=(11, 10), num_filter=2),
    dict(kernel=(3,), stride=(2,), pad=(1,), adj=(1,), num_filter=3, no_bias=False),
    dict(kernel=(5,), stride=(4,), target_shape=(27,), num_filter=2, num_group=2),
]
# MXNet's native path gets dilated deconvolution wrong (its MKL-DNN path and
# PyTorch agree with each other and with mxdeconv), so dilated cases come from
# the MKL-DNN path too.
CASES_MKLDNN = [
    dict(kernel=(3, 3), stride=(2, 2), dilate=(2, 2), pad=(1, 1), num_filter=2,
         no_bias=False),
    dict(kernel=(3, 3), stride=(2, 1), dilate=(2, 3), pad=(2, 1), adj=(1, 0), num_filter=4,
         num_group=2),
    dict(kernel=(2, 3, 3), stride=(2, 2, 1), pad=(0, 1, 1), adj=(1, 0, 0), num_filter=2),
    dict(kernel=(3, 3, 3), stride=(2, 2, 2), pad=(1, 1, 1), adj=(1, 0, 1), num_filter=4,
         num_group=2, no_bias=False),
]
IN_CHANNELS = 4


def run(index, params, rng, dtype):
    ndim = len(params["kernel"])
    spatial = {1: (7,), 2: (5, 4), 3: (3, 4, 3)}[ndim]
    groups = params.get("num_group", 1)
    data = rng.uniform(-1, 1, (2, IN_CHANNELS) + spatial).astype(dtype)
    weight = rng.uniform(-1, 1, (IN_CHANNELS, params["num_filter"] // groups)
                         + params["kernel"]).astype(dtype)
    bias = rng.uniform(-1, 1, (params["num_filter"],)).astype(dtype)
    inputs = [mx.nd.array(a, dtype=dtype) for a in (data, weight, bias)]
    for array in inputs:
        array.attach_grad()
    with mx.autograd.record():
        out = mx.nd.Deconvolution(*inputs[: 2 if params.get("no_bias", True) else 3],
                                  **params)
    out_grad = rng.uniform(-1, 1, out.shape).astype(dtype)
    out.backward(mx.nd.array(out_grad, dtype=dtype))
    record = {"data": data, "weight": weight, "bias": bias, "out_grad": out_grad,
              "out": out.asnumpy(), "data_grad": inputs[0].grad.asnumpy(),
              "weight_grad": inputs[1].grad.asnumpy(), "bias_grad": inputs[2].grad.asnumpy()}
    record = {f"{index}/{key}": value for key, value in record.items()}
    record[f"{index}/params"] = np.array(json.dumps(params))
    return record


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "native"
    cases, dtype = (CASES, "float64") if backend == "native" else (CASES_MKLDNN, "float32")
    rng = np.random.default_rng(20261202)
    fixture = {"mxnet_version": np.array(mx.__version__)}
    for index, params in enumerate(cases):
        fixture.update(run(index, params, rng, dtype))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                        f"mxnet_deconvolution_{backend}.npz")
    np.savez_compressed(path, **fixture)
    print(f"wrote {len(cases)} cases from MXNet {mx.__version__} to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
