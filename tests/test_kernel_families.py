"""The oneDNN-path tests again, under every kernel family this CPU has.

oneDNN picks its kernels by shape *and* instruction set: the same layer runs
``brgconv:avx512_core`` here, ``brgconv:avx2`` on an older CPU, and the two
have different defects.  ``ONEDNN_MAX_CPU_ISA`` caps the instruction set, but
oneDNN reads it once, before its first primitive, so each family runs in a
fresh process: the realistic-layer suite, the hypothesis equivalence tests,
layouts, MXNet fixtures and bfloat16 (on oneDNN from avx512_core on; it must
fall back to NumPy under AVX2, which has no bf16 kernels).  The default family (avx512_core_bf16 here) is
the main test run itself.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mxdeconv

TESTS = Path(__file__).parent
ONEDNN_TESTS = ["test_model_layers.py", "test_api.py", "test_numerics.py", "test_layouts.py",
                "test_mxnet_fixtures.py", "test_bfloat16.py"]
# oneDNN's ISA ladder (dnnl_cpu_isa_t), lowest first.
ISA_ORDER = ["sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core",
             "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx",
             "avx512_core_amx_fp16"]
FAMILIES = {"AVX2": "avx2", "AVX512_CORE": "avx512_core"}


def _env(isa: str) -> dict:
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa, PYTHONUNBUFFERED="1")
    env.pop("PYTEST_ADDOPTS", None)
    return env


@pytest.mark.parametrize("isa", sorted(FAMILIES))
def test_onednn_tests_pass_under_kernel_family(isa):
    machine = mxdeconv.runtime_info()["cpu_isa"]
    if ISA_ORDER.index(machine) < ISA_ORDER.index(FAMILIES[isa]):
        pytest.skip(f"this CPU's best ISA is {machine}: the {isa} family cannot run here")
    effective = subprocess.run(
        [sys.executable, "-c", "import mxdeconv; print(mxdeconv.runtime_info()['cpu_isa'])"],
        env=_env(isa), capture_output=True, text=True, check=True).stdout.strip()
    assert effective == FAMILIES[isa], f"ONEDNN_MAX_CPU_ISA={isa} gave {effective}"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not numpy",
         *[str(TESTS / name) for name in ONEDNN_TESTS]],
        env=_env(isa), capture_output=True, text=True, cwd=TESTS.parent, timeout=900)
    assert run.returncode == 0, (f"oneDNN tests failed under ONEDNN_MAX_CPU_ISA={isa} "
                                 f"({effective} kernels):\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}")
