#!/usr/bin/env python
"""Record MXNet 1.9.1's binary NDArray files (``.params``) as test fixtures, and
check that MXNet reads the files mxdeconv writes.

Regenerate, from the repository root, with MXNet's interpreter (MXNet 1.9.1,
NumPy 1.23.5; see scripts/setup_mxnet_venv.sh)::

    .venv-mxnet/bin/python scripts/make_params_fixtures.py

It takes a few seconds and does three things:

1. **Record** (MXNet): writes into ``tests/data/params/`` small files made by
   ``mx.nd.save`` (every dtype MXNet's Python API has, as a list and as a dict
   with ``arg:``/``aux:`` names; zero-size arrays; an empty list; 0-d arrays
   under NumPy shape semantics (the V3 form); bfloat16; csr and row_sparse
   arrays), by Gluon (``Conv2DTranspose.save_parameters``,
   ``collect_params().save``, ``export``), plus ``expected.npz`` (every
   array's values, written by NumPy, bfloat16 as its uint16 bits),
   ``gluon_io.npz`` (the layer's input and MXNet's output) and
   ``manifest.json`` (per file: how it was made, names, dtypes, shapes).
2. **Write with mxdeconv**: runs ``--write-mxdeconv DIR`` under mxdeconv's
   interpreter (``--mxdeconv-python``, default ``$MXDECONV_PYTHON``, else
   ``<repo>/.venv/bin/python``; ``PYTHONPATH`` is set to this repository), which
   loads every recorded file with ``mxdeconv.nd.load``, saves it again with
   ``mxdeconv.nd.save``, and saves a Gluon layer with ``save_parameters``
   together with its output.
3. **Verify** (MXNet): ``mx.nd.load`` reads each of mxdeconv's files; names,
   dtypes, shapes and values must equal the originals, and the bytes must
   equal MXNet's own file; MXNet's ``Conv2DTranspose.load_parameters`` reads
   mxdeconv's checkpoint and must reproduce mxdeconv's output.  Any mismatch
   stops the script with a non-zero status.

``tests/io/test_params_files.py`` repeats steps 2 and 3 in a temporary folder
when an MXNet venv exists on the machine (``--verify-only``), and otherwise
checks mxdeconv against the committed files alone.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "params"
SEED = 20260312
#: The Gluon layer of the checkpoint fixtures (MXNet's and mxdeconv's arguments agree).
LAYER = dict(channels=4, kernel_size=3, strides=2, padding=1, output_padding=1, groups=2,
             in_channels=6)
IN_SHAPE = (1, 6, 4, 4)
DTYPES = ["float32", "float64", "float16", "uint8", "int8", "int32", "int64", "bool"]
SHAPES = [(2, 3), (4,), (1, 2, 2), (3, 1), (5,), (2, 2), (1, 1, 1, 3), (6,)]


def sample(rng, dtype, shape):
    """Deterministic values of ``dtype``: floats in [-2, 2], ints over a range
    that reaches the type's sign, bools."""
    if dtype == "bool":
        return rng.rand(*shape) < 0.5
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.randint(max(info.min, -100), min(info.max, 200), size=shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


# -- 1. record (MXNet) ----------------------------------------------------------------------
def record(out):
    import mxnet as mx
    from mxnet.gluon import nn

    rng = np.random.RandomState(SEED)
    mx.random.seed(SEED)
    manifest, expected = {}, {}

    def save(name, data, how, np_shape=False):
        if np_shape:
            with mx.util.np_shape(True):
                mx.nd.save(str(out / name), data)
        else:
            mx.nd.save(str(out / name), data)
        note(name, data, how)

    def note(name, data, how):
        if isinstance(data, dict):
            names, arrays = list(data), list(data.values())
        else:
            names, arrays = [], list(data)
        entry = dict(how=how, names=names, dtypes=[], shapes=[])
        for index, array in enumerate(arrays):
            key = names[index] if names else str(index)
            if array.stype != "default":
                entry["dtypes"].append(f"{array.stype}:{np.dtype(array.dtype).name}")
                entry["shapes"].append(list(array.shape))
                continue
            if array.dtype == mx.nd.ndarray._DTYPE_MX_TO_NP[12]:  # bfloat16
                values = array.astype("float32").asnumpy()
                entry["dtypes"].append("bfloat16")
                expected[f"{name}/{key}"] = bfloat16_bits(values)
            else:
                values = array.asnumpy()
                entry["dtypes"].append(np.dtype(values.dtype).name)
                expected[f"{name}/{key}"] = values
            entry["shapes"].append(list(array.shape))
        manifest[name] = entry

    arrays = [mx.nd.array(sample(rng, dtype, shape), dtype=dtype)
              for dtype, shape in zip(DTYPES, SHAPES)]
    save("list_dtypes.params", arrays, "mx.nd.save(list) of every dtype")
    named = {"arg:conv0_weight": arrays[0], "arg:conv0_bias": arrays[1],
             "aux:bn0_moving_mean": arrays[2], "aux:bn0_moving_var": arrays[3],
             "int8": arrays[4], "int32": arrays[5], "int64": arrays[6], "bool": arrays[7],
             "unicode_\u00e4\u00df": mx.nd.array([1.5], dtype="float32")}
    save("dict_dtypes.params", named, "mx.nd.save(dict) of every dtype, arg:/aux: names")
    # Outside NumPy shape semantics mx.nd.zeros((0,)) fails (0 means unknown), but
    # mx.nd.array makes zero-size arrays.
    save("zero_size.params", {"empty": mx.nd.array(np.zeros((0,), np.float32)),
                              "empty_2x0x3": mx.nd.array(np.zeros((2, 0, 3)), dtype="float64"),
                              "one": mx.nd.ones((1,))}, "mx.nd.save(dict) of zero-size arrays")
    save("empty_list.params", [], "mx.nd.save([])")
    with mx.util.np_shape(True):
        scalar = mx.nd.array(np.array(3.25, np.float32))
        assert scalar.shape == (), scalar.shape
        np_arrays = [scalar, mx.nd.zeros((0,)), mx.nd.array(sample(rng, "float64", (2, 2)),
                                                           dtype="float64")]
    save("np_shape.params", np_arrays, "mx.nd.save(list) under mx.util.np_shape(True): V3",
         np_shape=True)
    # MXNet 1.9.1's Python API names bfloat16 only as this structured dtype.
    bf16 = mx.nd.array(sample(rng, "float32", (2, 3))).astype(mx.nd.ndarray._DTYPE_MX_TO_NP[12])
    save("bfloat16.params", {"w": bf16, "f": mx.nd.ones((2,))}, "mx.nd.save(dict) with bfloat16")
    save("sparse_csr.params", [mx.nd.ones((1,)), mx.nd.array([[0, 1], [2, 0]]).tostype("csr")],
         "mx.nd.save(list): dense then csr")
    manifest["sparse_csr.params"]["refused"] = "csr storage"
    save("sparse_row_sparse.params",
         {"rsp": mx.nd.array([[0, 1], [0, 0]]).tostype("row_sparse")},
         "mx.nd.save(dict): row_sparse")
    manifest["sparse_row_sparse.params"]["refused"] = "row_sparse storage"
    # A 0-d array saved outside NumPy shape semantics: MXNet writes the V2 form
    # with ndim 0, which it reads as its empty 'none' array and then misparses.
    scalar = mx.nd.array(np.array(1.5, np.float32))
    assert scalar.shape == (), scalar.shape
    save("zero_d_v2.params", [scalar, mx.nd.ones((1,))], "mx.nd.save(list) of a 0-d array "
         "outside NumPy shape semantics (V2, ndim 0)")
    try:
        mx.nd.load(str(out / "zero_d_v2.params"))
    except mx.base.MXNetError as err:
        manifest["zero_d_v2.params"]["refused"] = "MXNet cannot load it either: " + \
            str(err).strip().splitlines()[-1][:200]
    else:
        raise AssertionError("MXNet 1.9.1 loaded a V2 0-d array: update the test")

    net = nn.Conv2DTranspose(bias_initializer=mx.init.Uniform(0.5), **LAYER)
    net.initialize(mx.init.Uniform(0.5))
    # Save before the forward: MXNet's forward reorders the weight into its oneDNN layout.
    net.save_parameters(str(out / "gluon_conv2dtranspose.params"))
    note("gluon_conv2dtranspose.params", {"weight": net.weight.data(), "bias": net.bias.data()},
         "Conv2DTranspose.save_parameters")
    net.collect_params().save(str(out / "gluon_collect_params.params"))
    note("gluon_collect_params.params",
         {p.name: p.data() for p in net.collect_params().values()},
         "Conv2DTranspose.collect_params().save (prefixed names)")
    x = mx.nd.array(rng.uniform(-1, 1, IN_SHAPE).astype(np.float32))
    y = net(x)
    np.savez(out / "gluon_io.npz", input=x.asnumpy(), output=y.asnumpy(),
             layer=json.dumps(LAYER))
    net2 = nn.HybridSequential()
    net2.add(nn.Conv2DTranspose(**LAYER))
    net2.initialize(mx.init.Uniform(0.5))
    net2.hybridize()
    net2(x)
    with tempfile.TemporaryDirectory() as folder:
        net2.export(os.path.join(folder, "export"))
        shutil.copy(os.path.join(folder, "export-0000.params"), out / "gluon_export-0000.params")
    loaded = mx.nd.load(str(out / "gluon_export-0000.params"))
    note("gluon_export-0000.params", loaded, "HybridSequential(Conv2DTranspose).export "
         "(save_checkpoint's arg:/aux: names)")

    np.savez(out / "expected.npz", **expected)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


def bfloat16_bits(values):
    """float32 values exactly representable in bfloat16, as bfloat16's 16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    assert not (bits & 0xFFFF).any(), "not bfloat16 values"
    return (bits >> 16).astype(np.uint16)


# -- 2. write with mxdeconv (mxdeconv's interpreter) ------------------------------------------
def write_mxdeconv(source, out):
    """Load every recorded file with mxdeconv and save it again; save a Gluon layer."""
    from mxdeconv import MXNetError, gluon, nd

    written = {}
    for path in sorted(source.glob("*.params")):
        try:
            data = nd.load(str(path))
        except MXNetError as err:  # sparse files: refused, as documented
            written[path.name] = f"refused: {err}"
            continue
        nd.save(str(out / path.name), data)
        written[path.name] = "saved"
    io = np.load(source / "gluon_io.npz")
    layer = gluon.Conv2DTranspose(bias_initializer=gluon.Uniform(0.5),
                                  **json.loads(str(io["layer"])))
    layer.initialize(gluon.Uniform(0.5))
    layer.save_parameters(str(out / "mxdeconv_gluon.params"))
    np.savez(out / "mxdeconv_gluon_io.npz", input=io["input"],
             output=layer(nd.array(io["input"])).asnumpy())
    (out / "written.json").write_text(json.dumps(written, indent=1))


# -- 3. verify (MXNet) ----------------------------------------------------------------------
def verify(source, written):
    """MXNet reads mxdeconv's files: same names, dtypes, shapes, values and bytes."""
    import mxnet as mx
    from mxnet.gluon import nn

    manifest = json.loads((source / "manifest.json").read_text())
    expected = np.load(source / "expected.npz")
    report = json.loads((written / "written.json").read_text())
    failures = []
    for name, entry in sorted(manifest.items()):
        if report.get(name) != "saved":
            if "refused" not in entry:
                failures.append(f"{name}: mxdeconv did not save it ({report.get(name)})")
            continue
        if "refused" in entry:
            failures.append(f"{name}: mxdeconv loaded a file it must refuse")
            continue
        path = written / name
        if path.read_bytes() != (source / name).read_bytes():
            failures.append(f"{name}: mxdeconv's bytes differ from MXNet's")
        if "np_shape" in entry["how"]:
            with mx.util.np_shape(True):
                loaded = mx.nd.load(str(path))
        else:
            loaded = mx.nd.load(str(path))
        names = list(loaded) if isinstance(loaded, dict) else []
        arrays = list(loaded.values()) if isinstance(loaded, dict) else loaded
        if sorted(names) != sorted(entry["names"]) or len(arrays) != len(entry["dtypes"]):
            failures.append(f"{name}: MXNet read names {names}, expected {entry['names']}")
            continue
        keys = entry["names"] or [str(i) for i in range(len(arrays))]
        for key, dtype, shape in zip(keys, entry["dtypes"], entry["shapes"]):
            array = loaded[key] if names else arrays[int(key)]
            if dtype == "bfloat16":
                values = bfloat16_bits(array.astype("float32").asnumpy())
                got_dtype = "bfloat16" if array.dtype == mx.nd.ndarray._DTYPE_MX_TO_NP[12] \
                    else str(array.dtype)
            else:
                values = array.asnumpy()
                got_dtype = np.dtype(values.dtype).name
            want = expected[f"{name}/{key}"]
            if got_dtype != dtype or list(array.shape) != shape or \
                    not np.array_equal(values, want):
                failures.append(f"{name}/{key}: MXNet read {got_dtype} {array.shape}, "
                                f"expected {dtype} {shape} (or the values differ)")
    io = np.load(written / "mxdeconv_gluon_io.npz")
    net = nn.Conv2DTranspose(**LAYER)
    net.load_parameters(str(written / "mxdeconv_gluon.params"))
    output = net(mx.nd.array(io["input"])).asnumpy()
    if not np.allclose(output, io["output"], rtol=1e-5, atol=1e-6):
        failures.append("MXNet's Conv2DTranspose with mxdeconv's checkpoint gives another "
                        f"output (max difference {np.abs(output - io['output']).max()})")
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    checked = sum(1 for v in report.values() if v == "saved")
    print(f"MXNet read {checked} files mxdeconv wrote and its Gluon checkpoint: "
          f"{'all agree' if not failures else f'{len(failures)} failures'}")
    return 1 if failures else 0


def _mxdeconv_python(given):
    for candidate in (given, os.environ.get("MXDECONV_PYTHON"), str(ROOT / ".venv/bin/python")):
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("mxdeconv's interpreter not found: pass --mxdeconv-python or set MXDECONV_PYTHON")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT, help="fixture folder (default: %(default)s)")
    ap.add_argument("--mxdeconv-python", help="interpreter with mxdeconv's dependencies")
    ap.add_argument("--write-mxdeconv", type=Path, metavar="DIR",
                    help="(step 2, mxdeconv's interpreter) write mxdeconv's files into DIR")
    ap.add_argument("--verify-only", type=Path, metavar="DIR",
                    help="(steps 2 and 3 only) check the committed fixtures in a scratch DIR")
    args = ap.parse_args()
    if args.write_mxdeconv:
        write_mxdeconv(args.out, args.write_mxdeconv)
        return 0
    if not args.verify_only:
        args.out.mkdir(parents=True, exist_ok=True)
        record(args.out)
    scratch = args.verify_only or Path(tempfile.mkdtemp(prefix="mxdeconv-params-"))
    scratch.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([_mxdeconv_python(args.mxdeconv_python), __file__, "--out", str(args.out),
                    "--write-mxdeconv", str(scratch)], check=True, env=env, cwd=ROOT)
    return verify(args.out, scratch)


if __name__ == "__main__":
    sys.exit(main())
