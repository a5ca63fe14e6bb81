"""Deconvolution layers of real models (DCGAN, U-Net, FCN, bilinear upsampling,
ResNeXt-style groups, dilation, FSRCNN, WaveGAN, MelGAN, 3-D U-Net/V-Net,
target_shape, pose heads, Mask R-CNN) on the oneDNN path, against
PyTorch 2.13 (float64), MXNet 1.9.1 (float32, where it computes the layer
correctly) and mxdeconv's own NumPy path in float64.

The layers are defined in ``tests/data/model_layers.py``; the expected values
were recorded by ``scripts/fixtures/make_layer_fixtures.py`` into
``tests/data/model_layers.npz`` (sampled element positions, per-channel sums
and max |value| of every result; the inputs are regenerated from each layer's
seed).  Each layer is checked in float32 on oneDNN, and every call must run
there (``mxdeconv.last_impl() == "onednn"``): inference forward twice with the
same weight NDArray (the second call uses the weight oneDNN reordered and
kept), training forward, and the data, weight and bias gradients.

Tolerances scale with the reference: ``1e-4 * max|ref| + 1e-5`` per element
and ``sqrt(elements per channel)`` times that per channel sum (fp32 noise adds
up like a random walk; a systematic error such as a wrong bias grows linearly).
"""
import json
import math
import sys

import numpy as np
import pytest

import mxdeconv
from mxdeconv import autograd, nd

from helpers import DATA  # noqa: E402

sys.path.insert(0, str(DATA))
import model_layers as ml  # noqa: E402

FIXTURE = np.load(DATA / "model_layers.npz")
META = json.loads(str(FIXTURE["meta"]))
LAYERS = {entry["name"]: entry for entry in META["layers"]}
REL_TOL, ABS_TOL = 1e-4, 1e-5
#: The NumPy float64 path against PyTorch's float64 values.
F64_REL_TOL = 1e-9


class Layer:
    """One recorded layer: its inputs (regenerated from the seed) and, computed
    once and shared by the tests, the float64 NumPy path's results."""

    def __init__(self, entry):
        self.entry = entry
        self.name = entry["name"]
        # JSON gives lists; model_layers wants the spatial size as a tuple.
        self.layer = dict(entry, spatial=tuple(entry["spatial"]))
        self.kwargs = ml.mxnet_kwargs(self.layer)
        self.inputs = ml.make_inputs(self.layer)
        self._forward64 = self._backward64 = None

    def inputs64(self):
        return {key: value.astype(np.float64) for key, value in self.inputs.items()}

    @property
    def forward64(self):
        if self._forward64 is None:
            x = self.inputs64()
            with mxdeconv.use_impl("numpy"):
                out = nd.Deconvolution(x["data"], x["weight"], x["bias"], **self.kwargs)
                assert mxdeconv.last_impl() == "numpy"
            self._forward64 = out.asnumpy()
            assert self._forward64.dtype == np.float64
        return self._forward64

    @property
    def backward64(self):
        if self._backward64 is None:
            x = self.inputs64()
            with mxdeconv.use_impl("numpy"):
                grads = nd.Deconvolution_backward(x["out_grad"], x["data"], x["weight"],
                                                  x["bias"], **self.kwargs)
                assert mxdeconv.last_impl() == "numpy"
            self._backward64 = dict(zip(ml.RESULTS[1:], (g.asnumpy() for g in grads)))
        return self._backward64

    def reference64(self, result):
        return self.forward64 if result == "out" else self.backward64[result]

    def ndarrays(self):
        """Fresh float32 NDArrays of data, weight, bias, out_grad."""
        return {key: nd.array(value) for key, value in self.inputs.items()}

    def recorded(self, result):
        """[(oracle name, flat index or None, values, channel sums)] from the fixture,
        and the reference scale max|PyTorch|."""
        prefix = f"{self.name}/{result}/"
        index_key = prefix + "index"
        index = FIXTURE[index_key] if index_key in FIXTURE.files else None
        oracles = [("PyTorch 2.13 float64", index, FIXTURE[prefix + "torch"],
                    FIXTURE[prefix + "torch_chsum"])]
        if prefix + "mxnet" in FIXTURE.files:
            oracles.append((f"MXNet 1.9.1 ({self.entry['mxnet']['path']} path)", index,
                            FIXTURE[prefix + "mxnet"], FIXTURE[prefix + "mxnet_chsum"]))
        return oracles, float(FIXTURE[prefix + "torch_absmax"])

    def onednn_kernel(self, training):
        """The oneDNN kernel mxdeconv chose, for failure messages."""
        x = self.inputs
        text = mxdeconv.explain(x["data"], x["weight"], x["bias"], train=training,
                                **self.kwargs)
        return text.splitlines()[-1].strip()


@pytest.fixture(scope="module", params=list(LAYERS))
def layer(request):
    """One layer at a time (pytest groups the tests by layer): its inputs and
    float64 references live only while its tests run."""
    return Layer(LAYERS[request.param])


def _tolerance(scale, rel_tol=REL_TOL, abs_tol=ABS_TOL):
    return rel_tol * scale + abs_tol


def _where(flat_index, shape):
    return tuple(int(i) for i in np.unravel_index(int(flat_index), shape))


def compare(layer, result, got, oracles="", float64=True, rel_tol=REL_TOL, abs_tol=ABS_TOL):
    """Problems (one line each) of ``got`` (the full ``result``) against the
    recorded oracles whose name starts with ``oracles`` (None: none) and the
    float64 NumPy path; empty when all agree."""
    problems = []
    got = np.asarray(got)
    recorded, scale = layer.recorded(result)
    shape_of = "out" if result == "out" else result[:-len("_grad")]
    expected_shape = tuple(layer.entry["shapes"][shape_of])
    if got.shape != expected_shape:
        return [f"{result}: shape {got.shape}, expected {expected_shape}"]
    flat = got.reshape(-1).astype(np.float64)
    sums = ml.channel_sums(got, result)
    per_channel = got.size // sums.size
    for oracle, index, values, chsum in recorded:
        if oracles is None or not oracle.startswith(oracles):
            continue
        positions = np.arange(flat.size) if index is None else index
        err = np.abs(flat[positions] - values)
        tol = _tolerance(scale, rel_tol, abs_tol)
        if not err.max() <= tol:
            worst = int(np.argmax(err))
            at = _where(positions[worst], got.shape)
            problems.append(
                f"{result} vs {oracle}: max |error| {err[worst]:.4g} at {at} "
                f"(got {flat[positions[worst]]:.6g}, expected {values[worst]:.6g}; "
                f"tolerance {tol:.3g}, max|ref| {scale:.4g}; "
                f"{int((err > tol).sum())} of {err.size} sampled elements off)")
        sum_err = np.abs(sums - chsum)
        sum_tol = tol * math.sqrt(per_channel)
        if not sum_err.max() <= sum_tol:
            problems.append(
                f"{result} vs {oracle}: channel sums off by up to {sum_err.max():.4g} "
                f"(channel {int(np.argmax(sum_err))}, tolerance {sum_tol:.3g}; "
                f"{int((sum_err > sum_tol).sum())} of {sums.size} channels off)")
    if float64:
        ref = layer.reference64(result)
        err = np.abs(got.astype(np.float64) - ref)
        tol = _tolerance(float(np.max(np.abs(ref))), rel_tol, abs_tol)
        if not err.max() <= tol:
            at = _where(np.argmax(err), got.shape)
            problems.append(
                f"{result} vs mxdeconv NumPy float64: max |error| {err.max():.4g} at {at} "
                f"(got {got[at]:.6g}, expected {ref[at]:.6g}; tolerance {tol:.3g}; "
                f"{int((err > tol).sum())} of {err.size} elements off)")
    return problems


def _report(layer, what, problems, training):
    header = (f"{layer.name} ({layer.entry['model']}), {what}, oneDNN kernel: "
              f"{layer.onednn_kernel(training)}, ISA {mxdeconv.runtime_info()['cpu_isa']}")
    return header + "\n  " + "\n  ".join(problems)


# -- the fixture itself ------------------------------------------------------------
def test_fixture_versions_and_size():
    assert META["torch_version"].startswith("2.13.")
    assert len(LAYERS) >= 20
    for entry in META["layers"]:
        if entry["mxnet"]["path"] is not None:
            assert META["mxnet"][entry["mxnet"]["path"]]["mxnet"] == "1.9.1"
    assert (DATA / "model_layers.npz").stat().st_size < 5_000_000


def test_inputs_reproduce_stored_checksums(layer):
    """The seed still draws the inputs the fixture was recorded with (NumPy's
    legacy RandomState stream, float32 cast), and the layer definitions in
    model_layers.py are the recorded ones."""
    definition = ml.LAYERS_BY_NAME.get(layer.name)
    assert definition is not None, f"{layer.name} is no longer in model_layers.LAYERS"
    recorded = {key: layer.entry[key]
                for key in ("seed", "batch", "in_channels", "spatial", "params")}
    current = json.loads(json.dumps({key: definition[key] for key in recorded}))
    assert current == recorded, "model_layers.py changed: rerun make_layer_fixtures.py"
    assert ml.shapes(layer.layer) == {k: tuple(v) for k, v in layer.entry["shapes"].items()}
    sums = {key: ml.checksum(value) for key, value in layer.inputs.items()}
    assert sums == layer.entry["checksums"]
    for key, value in layer.inputs.items():
        assert value.dtype == np.float32 and np.isfinite(value).all(), key
    assert np.abs(layer.inputs["bias"]).min() > 0  # a real, non-zero bias


def test_numpy_float64_reference_matches_pytorch(layer):
    """The float64 NumPy path, used below as a full-tensor reference, agrees with
    PyTorch's float64 values to ~1e-9 (and with MXNet's float32 ones to 1e-4)."""
    problems = []
    for result in ml.RESULTS:
        ref = layer.reference64(result)
        problems += compare(layer, result, ref, oracles="PyTorch", float64=False,
                            rel_tol=F64_REL_TOL, abs_tol=1e-12)
        problems += compare(layer, result, ref, oracles="MXNet", float64=False)
    if problems:
        pytest.fail(f"{layer.name}:\n  " + "\n  ".join(problems))


# -- oneDNN against the references -----------------------------------------------
def test_forward_inference_twice(layer):
    """Inference forward, twice with one weight NDArray: the second call runs on the
    weight that the first one reordered into oneDNN's layout and kept."""
    x = layer.ndarrays()
    problems = []
    with autograd.predict_mode():
        first = nd.Deconvolution(x["data"], x["weight"], x["bias"], **layer.kwargs)
        assert mxdeconv.last_impl() == "onednn"
        reorders = mxdeconv.reorder_counts().get("weights", 0)
        second = nd.Deconvolution(x["data"], x["weight"], x["bias"], **layer.kwargs)
        assert mxdeconv.last_impl() == "onednn"
        assert mxdeconv.reorder_counts().get("weights", 0) == reorders, \
            "the second inference call reordered the weight again"
    for call, out in (("first call", first), ("second call (kept weight)", second)):
        problems += [f"{call}: {p}" for p in compare(layer, "out", out.asnumpy())]
    if problems:
        pytest.fail(_report(layer, "inference forward", problems, training=False))


def test_forward_training(layer):
    x = layer.ndarrays()
    with autograd.train_mode():
        out = nd.Deconvolution(x["data"], x["weight"], x["bias"], **layer.kwargs)
        assert mxdeconv.last_impl() == "onednn"
    problems = compare(layer, "out", out.asnumpy())
    if problems:
        pytest.fail(_report(layer, "training forward", problems, training=True))


def test_backward(layer):
    x = layer.ndarrays()
    grads = nd.Deconvolution_backward(x["out_grad"], x["data"], x["weight"], x["bias"],
                                      **layer.kwargs)
    assert mxdeconv.last_impl() == "onednn"
    problems = []
    for result, grad in zip(ml.RESULTS[1:], grads):
        assert grad is not None, result
        problems += compare(layer, result, grad.asnumpy())
    if problems:
        pytest.fail(_report(layer, "backward", problems, training=True))
