"""MXNet 1.9.1 programs ported by changing their import lines only.

Each program in tests/data/porting/programs/ is written as MXNet users write
them (a DCGAN generator with BatchNorm trained with Adam; an FCN upsampler
initialised with a bilinear kernel through ``init.Constant(ndarray)``; a 1-D
audio upsampler with a FactorScheduler; a 3-D grouped decoder as a custom
HybridBlock; a checkpoint saved and resumed).  ``scripts/fixtures/make_mxnet_porting_programs.py``
ran each under MXNet 1.9.1 and kept its initial parameters and results; here
the same text runs under mxdeconv with ``mxnet`` replaced by ``mxdeconv`` in
its import lines (and nothing else), starting from MXNet's initial
parameters, on the oneDNN and on the NumPy path, and must give MXNet's losses
and outputs to 1e-4.
"""
from __future__ import annotations

import re
import subprocess
from contextlib import nullcontext
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

import mxdeconv
from mxdeconv import nd
import helpers

PROGRAMS = helpers.DATA / "porting" / "programs"
MXNET_PYTHON = helpers.mxnet_python()
NAMES = sorted(path.stem for path in PROGRAMS.glob("*.py"))
START, END = "# --- imports: the only lines a port changes ---\n", "# --- end of imports ---\n"


def ported_text(path: Path) -> str:
    """The program with ``mxnet`` replaced by ``mxdeconv`` in its import block only."""
    text = path.read_text()
    start, end = text.index(START) + len(START), text.index(END)
    imports = text[start:end]
    assert all(line.startswith(("import mxnet", "from mxnet")) for line in
               imports.splitlines()), imports
    ported = text[:start] + re.sub(r"\bmxnet\b", "mxdeconv", imports) + text[end:]
    assert "mxnet" not in ported.replace("MXNet", "")[start:]  # nothing else names MXNet
    return ported


def run_ported(name: str, workdir: Path) -> Dict[str, np.ndarray]:
    path = PROGRAMS / f"{name}.py"
    namespace: Dict[str, object] = {"__name__": name}
    exec(compile(ported_text(path), str(path), "exec"), namespace)
    data = namespace["data"]()
    net = namespace["build"]()
    net(*[nd.array(data[key]) for key in namespace.get("INPUTS", ("x",))])
    net.load_parameters(str(PROGRAMS / f"{name}_init.params"))
    results = namespace["train"](net, data, str(workdir))
    return {key: np.asarray(value) for key, value in results.items()}


def test_every_program_has_fixtures() -> None:
    assert NAMES == ["audio_upsampler", "checkpoint_resume", "dcgan_generator", "decoder_3d",
                     "fcn_bilinear"]
    for name in NAMES:
        assert (PROGRAMS / f"{name}.npz").exists() and (PROGRAMS / f"{name}_init.params").exists()


@pytest.mark.parametrize("impl", ["onednn", "numpy"])
@pytest.mark.parametrize("name", NAMES)
def test_ported_program_reproduces_mxnet(name: str, impl: str, tmp_path: Path) -> None:
    if impl == "onednn" and not mxdeconv.onednn_enabled():
        pytest.skip("oneDNN path disabled")
    expected = np.load(PROGRAMS / f"{name}.npz")
    with nullcontext() if impl == "onednn" else mxdeconv.use_impl("numpy"):
        results = run_ported(name, tmp_path)
        assert mxdeconv.last_impl() == impl
    assert sorted(results) == sorted(expected.files)
    losses = expected["losses"]
    assert losses[-1] < losses[0]  # the program trains (the check is not void)
    for key in expected.files:
        np.testing.assert_allclose(results[key], expected[key], rtol=1e-4, atol=1e-4,
                                   err_msg=f"{name}: {key}")


@pytest.mark.skipif(MXNET_PYTHON is None,
                    reason="no MXNet 1.9.1 venv here (CI has none; the committed fixtures "
                           "are what it recorded)")
def test_fixtures_are_what_mxnet_computes(tmp_path: Path) -> None:
    """Reruns every program under real MXNet 1.9.1 into a temporary folder: the
    committed initial parameters and results must be what it computes now."""
    subprocess.run([MXNET_PYTHON, str(helpers.FIXTURE_SCRIPTS /
                                               "make_mxnet_porting_programs.py"), str(tmp_path)],
                   check=True, capture_output=True, timeout=600)
    for name in NAMES:
        fresh = nd.load(str(tmp_path / f"{name}_init.params"))
        kept = nd.load(str(PROGRAMS / f"{name}_init.params"))
        assert list(fresh) == list(kept)
        for key in kept:
            np.testing.assert_array_equal(fresh[key].asnumpy(), kept[key].asnumpy())
        now, then = np.load(tmp_path / f"{name}.npz"), np.load(PROGRAMS / f"{name}.npz")
        assert sorted(now.files) == sorted(then.files)
        for key in then.files:
            np.testing.assert_allclose(now[key], then[key], rtol=1e-6, atol=1e-6,
                                       err_msg=f"{name}: {key}")
