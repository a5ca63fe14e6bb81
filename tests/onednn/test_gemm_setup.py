"""oneDNN's GEMM kernels made on an idle core at load (onednn.gemm_setup)."""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from mxdeconv import MXNetError
from mxdeconv._core.cpus import UsableCpus
from mxdeconv.onednn import gemm_setup
from mxdeconv.onednn._loader import extension as _ops

pytestmark = pytest.mark.skipif(_ops is None, reason="the oneDNN extension did not load")


def _cpus(monkeypatch, count):
    monkeypatch.setattr(gemm_setup, "usable_cpus", lambda: UsableCpus(count, "test"))


@pytest.mark.parametrize("threads, cpus", [(1, 4), (2, 1), (0, 4)])
def test_not_started_on_one_thread_or_one_cpu(monkeypatch, threads, cpus):
    """With one thread (OMP_NUM_THREADS=1, as Dask and Ray set) or one usable
    CPU the thread would take the caller's core: not started."""
    _cpus(monkeypatch, cpus)
    calls = []
    setup = gemm_setup.GemmSetup(lambda: calls.append(1))
    assert not setup.start(threads)
    setup.wait()  # returns at once
    assert calls == []


def test_started_once_and_waited_for(monkeypatch):
    _cpus(monkeypatch, 2)
    calls, release = [], threading.Event()
    setup = gemm_setup.GemmSetup(lambda: (release.wait(10), calls.append(
        threading.current_thread().name)))
    assert setup.start(2)
    assert not setup.start(2)  # once
    release.set()
    setup.wait()
    assert calls == ["mxdeconv-gemm-setup"] and setup.error is None


def test_a_failure_is_kept_not_raised(monkeypatch):
    """The first real GEMM reports its own failure; the thread raises
    nothing (no traceback printed by threading's hook)."""
    _cpus(monkeypatch, 2)

    def failing():
        raise MXNetError("no GEMM here")
    setup = gemm_setup.GemmSetup(failing)
    assert setup.start(2)
    setup.wait()
    assert isinstance(setup.error, MXNetError)


def test_the_real_set_up_runs_a_gemm():
    _ops.set_gemm_up()  # made at load, or now: either way it agrees


def _run_python(code, env=None):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env=env)


def test_a_fork_waits_for_the_set_up():
    """A child forked while the thread ran would find oneDNN's kernels half
    made by a thread it does not have (its first GEMM would wait forever):
    the fork waits for the thread."""
    run = _run_python("""
        import os, time
        from mxdeconv.onednn import gemm_setup
        from mxdeconv._core.cpus import UsableCpus
        gemm_setup.usable_cpus = lambda: UsableCpus(2, "test")
        done = []
        setup = gemm_setup.GemmSetup(lambda: (time.sleep(0.5), done.append(1)))
        assert setup.start(2)
        pid = os.fork()
        if pid == 0:
            os._exit(0 if done == [1] else 3)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        print("ok")
        """)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


@pytest.mark.parametrize("threads", ["1", "2"])
def test_loading_the_extension_starts_it_with_two_threads(threads):
    run = _run_python("""
        import os
        import mxdeconv
        from mxdeconv._core.cpus import usable_cpus
        from mxdeconv.onednn import _loader
        setup = _loader.GEMM_SETUP
        setup.wait()
        started = setup._thread is not None
        expected = int(os.environ["OMP_NUM_THREADS"]) > 1 and usable_cpus().count > 1
        assert started == expected, (started, expected)
        assert setup.error is None, setup.error
        pid = os.fork()  # after the set-up: the child's GEMM runs
        if pid == 0:
            import faulthandler
            faulthandler.dump_traceback_later(30, exit=True)
            from mxdeconv.onednn._loader import extension
            extension.set_gemm_up()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        print("ok")
        """, env=dict(os.environ, OMP_NUM_THREADS=threads))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]


def test_the_package_loads_the_extension_before_its_other_layers():
    """The GEMM set-up starts when the extension loads: loaded first, it runs
    beside the rest of the package's import, not beside a first call made
    right after it."""
    script = textwrap.dedent("""
        import sys
        order = []

        class Recorder:
            def find_spec(self, name, path=None, target=None):
                if name.startswith("mxdeconv."):
                    order.append(name)
                return None

        sys.meta_path.insert(0, Recorder())
        import mxdeconv
        print(order.index("mxdeconv.onednn._ops"), order.index("mxdeconv.autograd"),
              order.index("mxdeconv.gluon"))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True, timeout=120)
    extension, autograd, gluon = map(int, result.stdout.split())
    assert extension < autograd and extension < gluon
