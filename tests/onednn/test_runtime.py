"""Runtime facts: the library loaded, its ISA, thread control, loading without env vars."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mxdeconv
from mxdeconv import nd
from mxdeconv.onednn import planner as plans
from mxdeconv.semantics.attributes import infer_geometry, parse_params


def test_runtime_info_reports_loaded_onednn():
    info = mxdeconv.runtime_info()
    assert info["onednn_version"].startswith("3.2.")
    assert info["cpu_isa"]  # e.g. avx512_core_bf16: whatever oneDNN dispatches to
    assert info["num_threads"] >= 1


def test_extension_loads_without_library_path():
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    # Import from outside the checkout; find the package where it is (installed
    # or built in place).
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(mxdeconv.__file__))
    code = "import mxdeconv; print(mxdeconv.runtime_info()['onednn_version'])"
    result = subprocess.run([sys.executable, "-c", code], env=env, cwd="/",
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith("3.2.")


def test_set_num_threads_changes_the_count_and_keeps_results():
    before = mxdeconv.get_num_threads()
    data = np.random.default_rng(0).standard_normal((2, 16, 5, 5)).astype(np.float32)
    weight = np.ones((16, 8, 3, 3), np.float32)
    params = dict(kernel=(3, 3), stride=(2, 2), num_filter=8)
    geom = infer_geometry(parse_params(params), data.shape)
    expected = nd.Deconvolution(data, weight, **params).asnumpy()
    try:
        mxdeconv.set_num_threads(1)
        assert mxdeconv.get_num_threads() == 1
        got = nd.Deconvolution(data, weight, **params).asnumpy()
        assert mxdeconv.last_impl() == "onednn", mxdeconv.explain(data, weight, **params)
        # Primitives are planned for a thread count: on one thread, one-thread plans.
        plan = plans.forward_plan(geom, "float32", False, False)
        assert plan.threads == 1, (plan.threads, plan.choice.describe())
    finally:
        mxdeconv.set_num_threads(before)
    assert mxdeconv.get_num_threads() == before
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_set_num_threads_rejects_zero():
    with pytest.raises(mxdeconv.MXNetError, match="set_num_threads needs a count >= 1, got 0"):
        mxdeconv.set_num_threads(0)


def test_omp_num_threads_is_followed():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    code = "import mxdeconv; print(mxdeconv.get_num_threads())"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "1"


def _threads_in_subprocess(code, **env_changes):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(env_changes)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().split(" ", 1)


REPORT = "print(mxdeconv.get_num_threads(), mxdeconv.runtime_info()['num_threads_source'])"


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity masks")
def test_a_reduced_affinity_mask_is_the_default_thread_count():
    count, source = _threads_in_subprocess(
        "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
        "import mxdeconv; " + REPORT)
    assert (count, source) == ("1", "affinity mask (1 CPU)")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity masks")
def test_omp_num_threads_wins_over_the_affinity_mask():
    count, source = _threads_in_subprocess(
        "import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
        "import mxdeconv; " + REPORT, OMP_NUM_THREADS="3")
    assert (count, source) == ("3", "OMP_NUM_THREADS=3")


def test_a_cgroup_quota_is_applied_to_every_thread():
    """The import applies the count _core.cpus reports (here a fake quota of
    one CPU) to the importing thread and to threads started later (OpenMP
    keeps the count per thread); junk in OMP_NUM_THREADS, which GNU OpenMP
    ignores, does not count as the user's choice."""
    count, source = _threads_in_subprocess(
        "import threading, mxdeconv; from mxdeconv._core.cpus import UsableCpus; "
        "mxdeconv._ops._default_threads(UsableCpus(1, 'cgroup CPU quota (fake)')); "
        "seen = []; t = threading.Thread(target=lambda: seen.append("
        "mxdeconv.get_num_threads())); t.start(); t.join(); assert seen == [1], seen; "
        "from mxdeconv import nd; nd.Deconvolution(nd.ones((1, 16, 3, 3)), "
        "nd.ones((16, 8, 3, 3)), kernel=(3, 3), num_filter=8).asnumpy(); " + REPORT,
        OMP_NUM_THREADS="junk")
    assert (count, source) == ("1", "cgroup CPU quota (fake)")


def test_the_source_of_the_thread_count_follows_set_num_threads():
    before = mxdeconv.get_num_threads()
    try:
        mxdeconv.set_num_threads(1)
        assert mxdeconv.runtime_info()["num_threads_source"] == "set_num_threads(1)"
    finally:
        mxdeconv.set_num_threads(before)


def _without_wait_variables(**changes):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(changes)
    return env


def test_gnu_openmp_spins_briefly_unless_told_otherwise():
    """GNU OpenMP reads GOMP_SPINCOUNT when it loads: mxdeconv sets its
    default for that moment only (OMP_DISPLAY_ENV shows what libgomp took),
    and the environment its children inherit is the user's."""
    from mxdeconv.onednn import _loader
    code = ("import os, mxdeconv; print(repr(mxdeconv.runtime_info()['openmp_wait']), "
            "'GOMP_SPINCOUNT' in os.environ)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_without_wait_variables(OMP_DISPLAY_ENV="verbose"),
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    wait = f"GOMP_SPINCOUNT={_loader.SPINCOUNT} (mxdeconv's default)"
    assert result.stdout.strip() == f"{wait!r} False"
    assert f"GOMP_SPINCOUNT = '{_loader.SPINCOUNT}'" in result.stderr


@pytest.mark.parametrize("variable, value", [("OMP_WAIT_POLICY", "passive"),
                                             ("GOMP_SPINCOUNT", "300000")])
def test_the_users_wait_policy_wins(variable, value):
    code = "import mxdeconv; print(mxdeconv.runtime_info()['openmp_wait'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_without_wait_variables(**{variable: value,
                                                           "OMP_DISPLAY_ENV": "verbose"}),
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"{variable}={value} (the environment)"
    if variable == "GOMP_SPINCOUNT":
        assert f"GOMP_SPINCOUNT = '{value}'" in result.stderr


def test_the_wait_policy_is_left_alone_when_gnu_openmp_is_already_loaded(monkeypatch):
    from mxdeconv.onednn import _loader
    monkeypatch.setattr(_loader, "_gomp_loaded", lambda: True)
    words, set_it = _loader._wait_policy({})
    assert not set_it and "loaded before mxdeconv" in words
    monkeypatch.setattr(_loader, "_gomp_loaded", lambda: False)
    assert _loader._wait_policy({"OMP_WAIT_POLICY": ""}) == (
        f"GOMP_SPINCOUNT={_loader.SPINCOUNT} (mxdeconv's default)", True)


def test_disabling_onednn_by_environment():
    env = dict(os.environ, MXDECONV_ONEDNN="0")
    code = ("import numpy as np, mxdeconv; from mxdeconv import nd; "
            "nd.Deconvolution(np.ones((1, 1, 2, 2), np.float32), "
            "np.ones((1, 1, 2, 2), np.float32), kernel=(2, 2), num_filter=1); "
            "print(mxdeconv.last_impl())")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "numpy"


def test_import_loads_nothing_a_float32_user_does_not_need():
    """``import mxdeconv`` was 1.5 s, 1.24 s of it ml_dtypes; the plan cache's
    helpers (filelock, platformdirs) and the wheel's RECORD (importlib.metadata)
    load when first needed too."""
    code = ("import sys, mxdeconv; print(sorted({'ml_dtypes', 'filelock', 'platformdirs', "
            "'importlib.metadata', 'torch', 'scipy', 'matplotlib', 'hypothesis', 'pytest'} "
            "& set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd="/", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
