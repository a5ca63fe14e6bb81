"""Helpers shared by the test files of several packages (tests/<package>/):
the repository's paths, the MXNet 1.9.1 venv where one exists, the small
float32 layer the plan tests run, and one-liners the files used to copy.

Importable from every test folder: ``pythonpath = ["tests"]`` in
pyproject.toml's ``[tool.pytest.ini_options]``.
"""
import contextlib
import importlib.util
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np

import mxdeconv
from mxdeconv import _ops, autograd, nd
from mxdeconv._core.dtypes import is_float_dtype
from mxdeconv.onednn import planner as plans

from reference import reference_forward

#: The repository root and the tests' data folder, whatever a test file's depth.
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def mxnet_python():
    """The python of an MXNet 1.9.1 venv ($MXNET_VENV, .venv-mxnet, /tmp/mxnet-venv), or None."""
    for venv in (os.environ.get("MXNET_VENV"), str(ROOT / ".venv-mxnet"), "/tmp/mxnet-venv"):
        if venv and (Path(venv) / "bin" / "python").exists():
            return str(Path(venv) / "bin" / "python")
    return None


#: The layer of the plan tests (kernel check, planner, tuning, prepared calls).
K3S2P1 = dict(kernel=(3, 3), stride=(2, 2), dilate=(1, 1), pad_l=(1, 1), pad_r=(1, 1),
              num_group=1)


def layer_arrays(seed=0, batch=3, channels=20, size=5, num_filter=24, scale=0.1, as_nd=False):
    """float32 (data, weight, bias) of a 3x3 layer: data (batch, channels, size, size),
    weight ``scale`` * (channels, num_filter, 3, 3), bias (num_filter,), drawn in that
    order from ``seed`` (an int or a numpy Generator); NDArrays with ``as_nd``."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    data = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    weight = (scale * rng.standard_normal((channels, num_filter, 3, 3))).astype(np.float32)
    bias = rng.standard_normal(num_filter).astype(np.float32)
    if as_nd:
        from mxdeconv import nd
        return nd.array(data), nd.array(weight), nd.array(bias)
    return data, weight, bias


def expected_k3s2p1(data, weight, bias):
    """The float64 reference forward of the K3S2P1 layer (NumPy arrays or NDArrays)."""
    data, weight, bias = (a.asnumpy() if hasattr(a, "asnumpy") else a
                          for a in (data, weight, bias))
    return reference_forward(data, weight, bias, **K3S2P1)


def host(x):
    """A result as NumPy (None stays None); np.asarray also reorders blocked layouts."""
    return None if x is None else np.asarray(x)


def geometry_of(cfg):
    """The geometry of a strategies.Config."""
    from mxdeconv.semantics.attributes import infer_geometry, parse_params
    return infer_geometry(parse_params(cfg.kwargs()), cfg.data_shape)


def nd_keeping_dtype(values):
    """``values`` (a NumPy array) as an NDArray of its own float dtype, as
    ``nd.array`` made it before it followed MXNet (float32 from anything but
    an NDArray); other dtypes still become float32."""
    return nd.array(values, dtype=values.dtype if is_float_dtype(values.dtype) else None)


# -- replaying what scripts/fixtures/make_mxnet_*_fixtures.py recorded from MXNet -----
#: The scripts that record the MXNet fixtures (and run again under MXNet where its
#: venv exists).
FIXTURE_SCRIPTS = ROOT / "scripts" / "fixtures"


def fixture_script(name):
    """The recording script ``scripts/fixtures/<name>.py`` as a module (its cases and
    runner)."""
    spec = importlib.util.spec_from_file_location(name, FIXTURE_SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def replay_case(script, run, case, check_outcome):
    """Run a recorded case's code under mxdeconv on the script's fresh arrays
    (no warnings: MXNet is silent) and hand the outcome to ``check_outcome``."""
    namespace = dict(script.fresh(nd, np), nd=nd, np=np, autograd=autograd, cpu=mxdeconv.cpu,
                     mxr=mxdeconv.random)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # MXNet is silent: so must we be
            check_outcome(case, lambda: run(case["code"], namespace))
    finally:
        autograd.set_recording(False)
        autograd.set_training(False)


def replay_gradients(case, grads, rtol):
    """A recorded gradient case's function of its inputs, differentiated under
    mxdeconv; each input's gradient must equal ``grads``."""
    arrays = [nd.array(values) for values in case["inputs"]]
    for arr in arrays:
        arr.attach_grad()
    with autograd.record():
        head = eval(case["function"], dict(nd=nd))(*arrays)  # noqa: S307
    head.backward()
    for arr, expected in zip(arrays, grads):
        np.testing.assert_allclose(arr.grad.asnumpy(), expected, rtol=rtol, atol=1e-6,
                                   err_msg=case["label"])


def assert_close(actual, expected, what):
    """A float32 plan's result against a float64 reference: within 2e-5 of the
    reference's largest magnitude (at least 1)."""
    scale = max(1.0, float(np.abs(expected).max()))
    error = float(np.abs(actual - expected).max())
    assert error <= 2e-5 * scale, f"{what}: max error {error:.3g} (|ref| max {scale:.3g})"


def force_plan(key, candidate):
    """Put ``candidate``'s plan into this thread's primitive cache under the
    planner key ``key``, as if the planner had chosen it: the public call then
    runs it.  Returns the plan (clear the cache after)."""
    plan = candidate.build()
    plan.choice = plans.Choice(candidate.index, plan.threads, candidate.impl,
                                "forced by a test")
    _ops.cache_put(key, plan)
    return plan


def run_threads(worker, count, timeout=120.0):
    """Run ``worker(i)`` on ``count`` threads at once; their results, or an
    AssertionError naming the first failure (or a thread still running after
    ``timeout`` seconds)."""
    errors, done = [], []

    def wrapped(i):
        try:
            done.append(worker(i))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append((i, error))

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise AssertionError(f"{len(errors)} thread(s) failed, first: {errors[0]!r}") \
            from errors[0][1]
    return done


@contextlib.contextmanager
def planner_afresh(tuning=None, eager=None, monkeypatch=None):
    """A planner with no choices in memory and empty primitive caches, tuning
    and eager tuning set as given (None: left as they are), and, with
    ``monkeypatch``, no plan cache on disk (nothing kept is taken); the
    settings restored and the planner emptied again after.  The planner is a
    new default Planner with the current one's settings (and, with
    ``monkeypatch``, a plan cache in memory only); the current one is
    installed again after."""
    current = plans.current_planner()
    fresh = current.afresh(
        store=plans.plan_store.PlanStore(None) if monkeypatch is not None else None)
    if tuning is not None:
        fresh.set_tuning(tuning)
    if eager is not None:
        fresh.set_eager_tuning(eager)
    current.clear_choices()
    previous = plans.use_planner(fresh)
    mxdeconv.clear_cache()
    try:
        yield
    finally:
        plans.use_planner(previous)
        previous.clear_choices()
        mxdeconv.clear_cache()


def run_fresh(code, cache_dir, timeout=120, cwd=None, args=(), **env):
    """Run ``code`` in a fresh process on the plan cache directory ``cache_dir``
    (None: MXDECONV_CACHE_DIR unset); ``env`` sets variables, None unsets one."""
    environment = dict(os.environ, PYTHONWARNINGS="always")
    environment.pop("MXDECONV_CACHE_DIR", None)
    if cache_dir is not None:
        environment["MXDECONV_CACHE_DIR"] = str(cache_dir)
    for name, value in env.items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          env=environment, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


#: For :func:`run_fresh`: plan one layer and print how explain() says its
#: forward plan was chosen.
CHOOSE = """
    import mxdeconv
    from mxdeconv import nd
    x, w = nd.ones((2, 32, 6, 6)), nd.ones((32, 32, 3, 3))
    nd.Deconvolution(x, w, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=32)
    print(mxdeconv.explain(x, w, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                           num_filter=32).splitlines()[4])
    """
