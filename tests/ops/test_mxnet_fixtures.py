"""Agreement with real MXNet 1.9.1: outputs and gradients it computed itself.

The fixtures were written by ``scripts/fixtures/make_mxnet_fixtures.py`` running MXNet
1.9.1 (native path in float64 for 1-D/2-D, its MKL-DNN path in float32 for
3-D), so these tests need no MXNet installed.
"""
import json

import numpy as np
import pytest

import mxdeconv
from mxdeconv import nd
from helpers import DATA

FIXTURES = {backend: np.load(DATA / f"mxnet_deconvolution_{backend}.npz")
            for backend in ("native", "mkldnn")}
CASES = [(backend, index) for backend, fixture in FIXTURES.items()
         for index in range(sum(k.endswith("/params") for k in fixture.files))]


def _case(backend, index):
    fixture = FIXTURES[backend]
    get = lambda name: fixture[f"{index}/{name}"]  # noqa: E731
    params = json.loads(str(get("params")))
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    return get, params


@pytest.mark.parametrize("impl", ["numpy", "onednn"])
@pytest.mark.parametrize("backend,index", CASES)
def test_matches_mxnet(backend, index, impl):
    get, params = _case(backend, index)
    assert str(FIXTURES[backend]["mxnet_version"]) == "1.9.1"
    # oneDNN computes in float32; the native fixtures are float64.
    dtype = np.float32 if impl == "onednn" else get("data").dtype
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    data, weight, out_grad = (get(n).astype(dtype) for n in ("data", "weight", "out_grad"))
    bias = None if params.get("no_bias", True) else get("bias").astype(dtype)
    with mxdeconv.use_impl(impl):
        out = nd.Deconvolution(data, weight, bias, **params)
        grads = nd.Deconvolution_backward(out_grad, data, weight, bias, **params)
    np.testing.assert_allclose(out.asnumpy(), get("out"), **tol)
    names = ["data_grad", "weight_grad"] + ([] if bias is None else ["bias_grad"])
    for name, grad in zip(names, grads):
        np.testing.assert_allclose(grad.asnumpy(), get(name), **tol, err_msg=name)
