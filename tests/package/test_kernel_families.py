"""The suite again, under the other kernel families this CPU can run.

oneDNN picks its kernels by shape *and* instruction set: the same layer runs
``brgconv:avx512_core`` on an AVX-512 CPU, ``brgconv:avx2`` on an older one and
``gemm:jit`` on an SSE4.1 one, with different layouts and different defects.
No test may assume which of them a CPU offers, and this file checks that the
suite holds on each: ``ONEDNN_MAX_CPU_ISA`` caps the instruction set, but
oneDNN reads it once, before its first primitive, so each family runs in a
fresh process.

* AVX2: the whole suite (the family of most x86-64 CPUs in use without
  AVX-512; bfloat16 must fall back to NumPy there).
* AVX512_CORE, AVX (older laptops) and SSE41: the tests that run oneDNN.

A family above this process's own ISA cannot run here, and the family this
process already runs is the main run itself: both are skipped, with the
reason.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mxdeconv

TESTS = Path(__file__).resolve().parents[1]
#: The test files that run oneDNN, relative to tests/ (the rest test the NumPy
#: path, the NDArray layer, files and docs, which no kernel family changes).
ONEDNN_TESTS = ["package/test_model_layers.py", "package/test_api.py", "ops/test_numerics.py",
                "onednn/test_layouts.py", "ops/test_mxnet_fixtures.py", "ops/test_bfloat16.py",
                "ops/test_activation.py", "onednn/test_direct_convolutions.py",
                "onednn/test_planner.py", "onednn/test_kernel_check.py",
                "ops/test_prepared_calls.py", "package/test_state_safety.py",
                "autograd/test_autograd.py"]
WHOLE_SUITE = None
#: ONEDNN_MAX_CPU_ISA value: (the ISA oneDNN then reports, the tests to run,
#: a bound on their seconds: about 3x what 2 cores take, so a hang fails
#: within CI's budget instead of using it up).
FAMILIES = {"AVX2": ("avx2", WHOLE_SUITE, 900),
            "AVX512_CORE": ("avx512_core", ONEDNN_TESTS, 450),
            "AVX": ("avx", ONEDNN_TESTS, 450),
            "SSE41": ("sse41", ONEDNN_TESTS, 450)}
# oneDNN's ISA ladder (dnnl_cpu_isa_t), lowest first.
ISA_ORDER = ["sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core",
             "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx",
             "avx512_core_amx_fp16"]
#: Set in the processes this file starts, so they do not start their own.
NESTED = "MXDECONV_KERNEL_FAMILY_RUN"


def _env(isa: str) -> dict:
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa, PYTHONUNBUFFERED="1")
    env[NESTED] = isa
    env.pop("PYTEST_ADDOPTS", None)
    return env


@pytest.mark.skipif(bool(os.environ.get(NESTED)), reason="already a kernel-family run")
@pytest.mark.parametrize("isa", sorted(FAMILIES))
def test_the_suite_passes_under_kernel_family(isa):
    family, files, seconds = FAMILIES[isa]
    here = mxdeconv.runtime_info()["cpu_isa"]
    if ISA_ORDER.index(here) < ISA_ORDER.index(family):
        pytest.skip(f"this process's oneDNN ISA is {here}: the {isa} family cannot run here")
    if here == family:
        pytest.skip(f"this process already runs the {isa} family: the main run covers it")
    effective = subprocess.run(
        [sys.executable, "-c", "import mxdeconv; print(mxdeconv.runtime_info()['cpu_isa'])"],
        env=_env(isa), capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    assert effective == family, f"ONEDNN_MAX_CPU_ISA={isa} gave {effective}"
    targets = ([str(TESTS)] if files is WHOLE_SUITE else
               ["-k", "not numpy", *[str(TESTS / name) for name in files]])
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets],
        env=_env(isa), capture_output=True, text=True, cwd=TESTS.parent, timeout=seconds)
    assert run.returncode == 0, (f"tests failed under ONEDNN_MAX_CPU_ISA={isa} "
                                 f"({effective} kernels):\n{run.stdout[-8000:]}\n"
                                 f"{run.stderr[-2000:]}")
