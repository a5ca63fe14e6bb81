"""Record PyTorch 2.13 and MXNet 1.9.1 results for the model layers of
``tests/data/model_layers.py`` into ``tests/data/model_layers.npz``.

Regenerate, from the repository root, in the project's venv (the one with
mxdeconv's test extra) with PyTorch installed and MXNet's venv set up::

    pip install torch==2.13.0          # once
    scripts/setup_mxnet_venv.sh        # once: MXNet 1.9.1 + NumPy 1.23.5 in .venv-mxnet
    python scripts/make_layer_fixtures.py

The script runs PyTorch itself, and re-runs itself twice under MXNet's
interpreter (``$MXNET_VENV/bin/python``, default ``<repo>/.venv-mxnet/bin/python``,
or ``--mxnet-python PATH``): once on MXNet's default MKL-DNN path and once on
its native path (``MXNET_MKLDNN_ENABLED=0``).  It takes about two minutes on
two cores and needs about 2 GB of memory.  ``--no-mxnet`` records PyTorch only
(every layer's MXNet entry then says so).

For every layer the inputs are regenerated from the layer's seed
(``model_layers.make_inputs``: float32, ``np.random.RandomState``), never
stored; their SHA-256 checksums are stored and the MXNet worker, which draws
them under NumPy 1.23, must reproduce them.

* PyTorch: ``torch.nn.functional.conv_transpose{1,2,3}d`` in float64 on the
  float32 inputs cast up, with ``padding = pad``, ``output_padding = adj``
  (inferred from ``target_shape`` as MXNet does), ``groups = num_group``,
  ``dilation = dilate``; the backward of ``sum(out * out_grad)`` gives the
  data, weight and bias gradients.
* MXNet: ``mx.nd.Deconvolution`` in float32 under ``mx.autograd``.  Its result
  for a layer is kept only where it agrees with PyTorch on all four results
  (``max|mxnet - torch| <= 1e-4 * max|torch| + 1e-5``); the MKL-DNN path is
  preferred (MXNet's default on CPUs), the native path is the second choice.
  Known failures of MXNet 1.9.1: its MKL-DNN path rejects ``target_shape``
  and dilated 3-D deconvolution, its native path computes dilated
  deconvolution wrongly, and it has no native 3-D path.  Each layer's
  ``mxnet`` entry in the fixture records, per path, what happened (agreed,
  with its maximum error; disagreed, with the errors; or the exception).

Stored per layer and result (``out``, ``data_grad``, ``weight_grad``,
``bias_grad``): with more than ``SAMPLE_SIZE`` elements, the sorted flat
positions ``<layer>/<result>/index`` drawn from the layer's seed and the
values there, otherwise the whole (flattened) result; always the float64
per-channel sums over every axis but ``CHANNEL_AXIS[result]`` and max|value|:

    <layer>/<result>/index              int32 (only for sampled results)
    <layer>/<result>/torch              float64 values (PyTorch, float64)
    <layer>/<result>/torch_chsum        float64 per-channel sums
    <layer>/<result>/torch_absmax       float64 max |value| over the whole result
    <layer>/<result>/mxnet              float32 values (MXNet, where recorded)
    <layer>/<result>/mxnet_chsum        float64 per-channel sums of MXNet's values

and ``meta``: JSON with the versions and, per layer, its model, parameters,
seed, shapes, PyTorch's padding/output_padding, input checksums and the MXNet
record.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
sys.path.insert(0, str(DATA))
import model_layers as ml  # noqa: E402

OUTPUT = DATA / "model_layers.npz"
#: MXNet's paths, in order of preference, and the environment each needs.
MXNET_BACKENDS = {"mkldnn": {}, "native": {"MXNET_MKLDNN_ENABLED": "0"}}
REL_TOL, ABS_TOL = 1e-4, 1e-5


# -- the MXNet worker (runs under MXNet's interpreter) ---------------------------
def mxnet_worker(backend, out_dir, names):
    """Compute each named layer with MXNet; write ``<name>.npz`` or ``<name>.err``."""
    import mxnet as mx

    out_dir = Path(out_dir)
    (out_dir / "versions.json").write_text(json.dumps(
        {"mxnet": mx.__version__, "numpy": np.__version__,
         "mkldnn": bool(mx.runtime.Features().is_enabled("MKLDNN"))}))
    for name in names:
        layer = ml.LAYERS_BY_NAME[name]
        (out_dir / "current").write_text(name)
        inputs = ml.make_inputs(layer)
        sums = {key: ml.checksum(value) for key, value in inputs.items()}
        try:
            arrays = [mx.nd.array(inputs[k], dtype="float32") for k in ("data", "weight",
                                                                        "bias")]
            for array in arrays:
                array.attach_grad()
            with mx.autograd.record():
                out = mx.nd.Deconvolution(*arrays, **ml.mxnet_kwargs(layer))
            out.backward(mx.nd.array(inputs["out_grad"], dtype="float32"))
            results = {"out": out.asnumpy(), "data_grad": arrays[0].grad.asnumpy(),
                       "weight_grad": arrays[1].grad.asnumpy(),
                       "bias_grad": arrays[2].grad.asnumpy()}
        except Exception as error:  # MXNet raises MXNetError, sometimes late (asnumpy)
            message = " ".join(str(error).split())
            if not message.startswith(type(error).__name__):
                message = f"{type(error).__name__}: {message}"
            (out_dir / f"{name}.err").write_text(message[:600])
            continue
        np.savez(out_dir / f"{name}.npz", checksums=json.dumps(sums), **results)
    (out_dir / "current").unlink()


def run_mxnet(python, backend, out_dir):
    """Run the worker for every layer under ``backend``; a layer that kills the
    process is recorded as crashed and the worker restarted after it."""
    out_dir = Path(out_dir) / backend
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "MXNET_MKLDNN_ENABLED"}
    env.update(MXNET_BACKENDS[backend], OMP_NUM_THREADS="2")
    remaining = [layer["name"] for layer in ml.LAYERS]
    while remaining:
        proc = subprocess.run([python, __file__, "--worker", backend, str(out_dir)]
                              + remaining, env=env, capture_output=True, text=True)
        done = [n for n in remaining if (out_dir / f"{n}.npz").exists()
                or (out_dir / f"{n}.err").exists()]
        if proc.returncode != 0:
            current = out_dir / "current"
            if not current.exists():
                raise RuntimeError(f"MXNet worker ({backend}) failed before any layer:\n"
                                   f"{proc.stderr[-3000:]}")
            crashed = current.read_text()
            current.unlink()
            (out_dir / f"{crashed}.err").write_text(
                f"the MXNet process died (exit status {proc.returncode}): "
                + " ".join(proc.stderr.split())[-400:])
            done.append(crashed)
        remaining = [n for n in remaining if n not in done]
    return json.loads((out_dir / "versions.json").read_text())


# -- PyTorch ---------------------------------------------------------------------
def torch_results(layer, inputs):
    """out and the three gradients from PyTorch in float64."""
    import torch
    import torch.nn.functional as F

    geo = ml.geometry(layer)
    conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[
        len(geo["kernel"])]
    tensors = {k: torch.from_numpy(inputs[k].astype(np.float64)).requires_grad_()
               for k in ("data", "weight", "bias")}
    out = conv(tensors["data"], tensors["weight"], tensors["bias"], stride=geo["stride"],
               padding=geo["pad"], output_padding=geo["adj"],
               groups=layer["params"]["num_group"], dilation=geo["dilate"])
    expected = ml.shapes(layer)["out"]
    if tuple(out.shape) != expected:
        raise RuntimeError(f"{layer['name']}: PyTorch's output shape {tuple(out.shape)} "
                           f"differs from MXNet's {expected}")
    out.backward(torch.from_numpy(inputs["out_grad"].astype(np.float64)))
    return {"out": out.detach().numpy(), "data_grad": tensors["data"].grad.numpy(),
            "weight_grad": tensors["weight"].grad.numpy(),
            "bias_grad": tensors["bias"].grad.numpy()}


def max_errors(results, reference):
    """Per result: (max |error|, tolerance)."""
    errors = {}
    for key in ml.RESULTS:
        ref = reference[key]
        err = float(np.max(np.abs(results[key].astype(np.float64) - ref)))
        errors[key] = (err, REL_TOL * float(np.max(np.abs(ref))) + ABS_TOL)
    return errors


def judge_mxnet(layer, torch_res, checksums, mxnet_dirs):
    """Choose the MXNet path whose results agree with PyTorch; say what each did."""
    notes, chosen = {}, None
    for backend, directory in mxnet_dirs.items():
        err_file = directory / f"{layer['name']}.err"
        if err_file.exists():
            notes[backend] = "failed: " + err_file.read_text()
            continue
        with np.load(directory / f"{layer['name']}.npz") as stored:
            mx_res = {key: stored[key] for key in ml.RESULTS}
            if json.loads(str(stored["checksums"])) != checksums:
                raise RuntimeError(f"{layer['name']}: MXNet's NumPy drew other inputs "
                                   "from the same seed")
        errors = max_errors(mx_res, torch_res)
        text = ", ".join(f"{k} {e:.3g} (tol {t:.3g})" for k, (e, t) in errors.items())
        if all(e <= t for e, t in errors.values()):
            notes[backend] = "agrees with PyTorch: max |error| " + text
            chosen = chosen or (backend, mx_res)
        else:
            notes[backend] = "disagrees with PyTorch: max |error| " + text
    return chosen, notes


def record(arrays, layer, key, results, source):
    """Store the sampled (or whole) values, channel sums and max |value|."""
    name = layer["name"]
    values = results[key]
    index = ml.sample_indices(layer, key, values.size)
    flat = values.reshape(-1)
    dtype = np.float64 if source == "torch" else np.float32
    if index is not None:
        arrays.setdefault(f"{name}/{key}/index", index.astype(np.int32))
        flat = flat[index]
    arrays[f"{name}/{key}/{source}"] = flat.astype(dtype)
    arrays[f"{name}/{key}/{source}_chsum"] = ml.channel_sums(values, key)
    if source == "torch":
        arrays[f"{name}/{key}/torch_absmax"] = np.float64(np.max(np.abs(values)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_venv = os.environ.get("MXNET_VENV", str(REPO / ".venv-mxnet"))
    parser.add_argument("--mxnet-python", default=os.path.join(default_venv, "bin", "python"),
                        help="MXNet 1.9.1's interpreter (default: %(default)s)")
    parser.add_argument("--no-mxnet", action="store_true", help="record PyTorch only")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)

    import torch
    torch.set_num_threads(max(1, min(os.cpu_count() or 1, 4)))
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="mxdeconv-layers-") as tmp:
        mxnet_dirs, versions = {}, {}
        if not args.no_mxnet:
            if not os.path.exists(args.mxnet_python):
                parser.error(f"no MXNet interpreter at {args.mxnet_python}: run "
                             "scripts/setup_mxnet_venv.sh, set MXNET_VENV, or pass "
                             "--mxnet-python (or --no-mxnet)")
            for backend in MXNET_BACKENDS:
                versions[backend] = run_mxnet(args.mxnet_python, backend, tmp)
                mxnet_dirs[backend] = Path(tmp) / backend
                print(f"MXNet {backend} path done ({time.time() - start:.0f} s)",
                      file=sys.stderr)
        arrays, layers_meta = {}, []
        for layer in ml.LAYERS:
            inputs = ml.make_inputs(layer)
            checksums = {key: ml.checksum(value) for key, value in inputs.items()}
            torch_res = torch_results(layer, inputs)
            for key in ml.RESULTS:
                record(arrays, layer, key, torch_res, "torch")
            if args.no_mxnet:
                chosen, notes = None, {"all": "not run (--no-mxnet)"}
            else:
                chosen, notes = judge_mxnet(layer, torch_res, checksums, mxnet_dirs)
            if chosen is not None:
                for key in ml.RESULTS:
                    record(arrays, layer, key, chosen[1], "mxnet")
            geo = ml.geometry(layer)
            layers_meta.append(dict(
                name=layer["name"], model=layer["model"], seed=layer["seed"],
                batch=layer["batch"], in_channels=layer["in_channels"],
                spatial=layer["spatial"], params=layer["params"],
                shapes=ml.shapes(layer),
                torch_args=dict(stride=geo["stride"], padding=geo["pad"],
                                output_padding=geo["adj"], dilation=geo["dilate"],
                                groups=layer["params"]["num_group"]),
                checksums=checksums,
                mxnet=dict(path=None if chosen is None else chosen[0], notes=notes)))
            print(f"{layer['name']:26s} MXNet: "
                  f"{'-' if chosen is None else chosen[0]:7s} "
                  + "; ".join(f"{k}: {v[:90]}" for k, v in notes.items()), file=sys.stderr)
            del inputs, torch_res, chosen
    meta = dict(format=1, generator="scripts/make_layer_fixtures.py",
                torch_version=torch.__version__, numpy_version=np.__version__,
                mxnet=versions, sample_size=ml.SAMPLE_SIZE, channel_axis=ml.CHANNEL_AXIS,
                layers=layers_meta)
    arrays["meta"] = np.array(json.dumps(meta, indent=1))
    np.savez_compressed(args.output, **arrays)
    print(f"wrote {len(layers_meta)} layers to {args.output} "
          f"({args.output.stat().st_size / 1e6:.2f} MB) in {time.time() - start:.0f} s",
          file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mxnet_worker(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
