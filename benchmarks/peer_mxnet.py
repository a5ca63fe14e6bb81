"""MXNet 1.9.1 peer: ``mx.nd.Deconvolution`` (MKLDNN/oneDNN build) in its own venv.

MXNet 1.9.1 needs NumPy < 1.24, so it cannot share the harness's process.  This
file is both halves of the arrangement:

* the **worker**, ``<mxnet venv>/bin/python benchmarks/peer_mxnet.py --worker``:
  imports MXNet (never mxdeconv), reads one JSON request per line on stdin and
  answers one JSON line on stdout.  It times the calls itself with
  :func:`timing.step_runner`, so the pipe's latency is not measured.
* the **client**, :class:`MXNetPeer`, used by ``run.py``: starts the worker,
  hands it each case's inputs as ``.npy`` files (the very arrays the other
  contenders get) and turns its ``run`` answers into runners, so MXNet takes
  part in the same round-robin as everything else.

Requests: ``{"op": "hello"}``, ``{"op": "setup", "key", "kwargs", "paths", "modes"}``,
``{"op": "run", "key", "mode", "n"}``, ``{"op": "output", "key", "path"}``,
``{"op": "release", "key"}``, ``{"op": "quit"}``.  Every answer has ``"ok"``;
failures carry ``"error"``.

Modes: inference forwards are plain calls (MXNet's ``is_train=False``), the
training forward runs under ``autograd.train_mode()``, ``bwd`` replays
``backward(retain_graph=True)`` on one recorded graph and ``fwd+bwd`` records
and differentiates each iteration; every step waits for its results
(``wait_to_read``), MXNet being asynchronous.

Only the standard library is imported at module level.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Collection, Dict, List, Optional

from contender import Prepared, prepare_steps, short_error, unavailable_for
from layers import jsonable

MISSING = "missing (run scripts/setup_mxnet_venv.sh)"
REPO_ROOT = Path(__file__).resolve().parent.parent


def default_python() -> Path:
    """``$MXNET_VENV/bin/python``, else ``<repo>/.venv-mxnet/bin/python``."""
    venv = os.environ.get("MXNET_VENV") or str(REPO_ROOT / ".venv-mxnet")
    return Path(venv) / "bin" / "python"


# --------------------------------------------------------------------------
# Worker side (runs under the MXNet venv)
# --------------------------------------------------------------------------

class _Worker:
    def __init__(self) -> None:
        import mxnet as mx
        import numpy as np

        self.mx, self.np = mx, np
        self.cases: Dict[str, Dict[str, Any]] = {}

    def hello(self, request: Dict[str, Any]) -> Dict[str, Any]:
        mx, np = self.mx, self.np
        features = mx.runtime.Features()
        return {"mxnet": mx.__version__, "numpy": np.__version__,
                "python": sys.version.split()[0],
                "mkldnn": bool(features.is_enabled("MKLDNN")),
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "")}

    def setup(self, request: Dict[str, Any]) -> Dict[str, Any]:
        mx, np = self.mx, self.np
        kwargs = {k: tuple(v) if isinstance(v, list) else v
                  for k, v in request["kwargs"].items()}
        paths = request["paths"]
        arrays = {name: np.load(path) for name, path in paths.items() if path}

        def nd(name: str, grad: bool = False) -> Any:
            if name not in arrays:
                return None
            array = mx.nd.array(arrays[name], dtype=arrays[name].dtype)
            if grad:
                array.attach_grad()
            return array

        def operands(grad: bool = False) -> List[Any]:
            # Fresh arrays per mode: MXNet may keep a reordered weight per array.
            return [a for a in (nd("data", grad), nd("weight", grad), nd("bias", grad))
                    if a is not None]

        def deconv(args: List[Any]) -> Any:
            return mx.nd.Deconvolution(*args, **kwargs)

        out_grad = nd("out_grad")
        train_args, infer_args, numpy_args = operands(), operands(), operands()
        bwd_args, fwd_bwd_args = operands(grad=True), operands(grad=True)
        recorded: Dict[str, Any] = {}

        def wait_grads(args: List[Any]) -> None:
            for array in args:
                array.grad.wait_to_read()

        def backward() -> None:
            if "out" not in recorded:
                with mx.autograd.record():
                    recorded["out"] = deconv(bwd_args)
            recorded["out"].backward(out_grad, retain_graph=True)
            wait_grads(bwd_args)

        def forward_backward() -> None:
            with mx.autograd.record():
                out = deconv(fwd_bwd_args)
            out.backward(out_grad)
            wait_grads(fwd_bwd_args)

        prepared = prepare_steps({
            "fwd_train": (lambda: deconv(train_args).wait_to_read(), mx.autograd.train_mode),
            "fwd_infer": lambda: deconv(infer_args).wait_to_read(),
            "fwd_infer_asnumpy": lambda: deconv(numpy_args).asnumpy(),
            "bwd": backward,
            "fwd_bwd": forward_backward,
        }, request["modes"], after_error=self._drain)
        self.cases[request["key"]] = {"runners": prepared.runners, "infer_args": infer_args,
                                      "deconv": deconv}
        return {"modes": sorted(prepared.runners), "errors": prepared.unavailable,
                "first_seconds": prepared.first_seconds}

    def _drain(self) -> None:
        """Consume exceptions the engine still holds from a failed operator."""
        for _ in range(10):
            try:
                self.mx.nd.waitall()
            except Exception:  # noqa: BLE001 - these are the stale ones
                continue
            return

    def run(self, request: Dict[str, Any]) -> Dict[str, Any]:
        runner = self.cases[request["key"]]["runners"][request["mode"]]
        return {"seconds": runner(int(request["n"]))}

    def output(self, request: Dict[str, Any]) -> Dict[str, Any]:
        case = self.cases[request["key"]]
        self.np.save(request["path"], case["deconv"](case["infer_args"]).asnumpy())
        return {}

    def release(self, request: Dict[str, Any]) -> Dict[str, Any]:
        self.cases.pop(request["key"], None)
        return {}


def worker_main() -> int:
    # The protocol owns the real stdout; anything MXNet or its C++ code prints
    # goes to stderr instead of corrupting it.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        worker: Optional[_Worker] = _Worker()
        startup_error = None
    except Exception as exc:  # noqa: BLE001 - reported to the client
        worker, startup_error = None, f"import mxnet failed: {short_error(exc)}"
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "quit":
            break
        try:
            if worker is None:
                raise RuntimeError(startup_error)
            answer = getattr(worker, op)(request)
            answer["ok"] = True
        except Exception as exc:  # noqa: BLE001
            answer = {"ok": False, "error": short_error(exc)}
            if worker is not None:
                worker._drain()
        protocol.write(json.dumps(answer) + "\n")
    return 0


# --------------------------------------------------------------------------
# Client side (runs in the harness's process; never imports mxnet)
# --------------------------------------------------------------------------

class WorkerError(RuntimeError):
    pass


class MXNetPeer:
    """Drives the worker; see the module docstring."""

    name = "MXNet"

    def __init__(self, threads: int, python: Optional[Path] = None) -> None:
        self._python = Path(python) if python else default_python()
        self._threads = threads
        self._process: Optional[subprocess.Popen] = None
        self._log: Optional[IO[str]] = None
        self._scratch = tempfile.TemporaryDirectory(prefix="mxdeconv-bench-mxnet-")
        self._hello: Dict[str, Any] = {}
        self._problem = self._start()

    def _start(self) -> Optional[str]:
        if not self._python.exists():
            return f"{MISSING}: no {self._python}"
        env = dict(os.environ, OMP_NUM_THREADS=str(self._threads),
                   MXNET_CPU_WORKER_NTHREADS="1", PYTHONNOUSERSITE="1")
        env.pop("PYTHONPATH", None)  # nothing of the main environment leaks in
        self._log = open(Path(self._scratch.name) / "worker.log", "w+")
        self._process = subprocess.Popen(
            [str(self._python), str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            text=True, bufsize=1, env=env, cwd=str(Path(__file__).resolve().parent))
        try:
            self._hello = self._call({"op": "hello"})
        except WorkerError as exc:
            return f"error: {exc}"
        if not self._hello.get("mkldnn"):
            return "error: this MXNet build has no MKLDNN (oneDNN) support"
        return None

    def _call(self, request: Dict[str, Any]) -> Dict[str, Any]:
        process = self._process
        if process is None or process.poll() is not None:
            raise WorkerError(f"MXNet worker is not running{self._log_tail()}")
        try:
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(f"MXNet worker pipe failed: {exc}{self._log_tail()}") from exc
        if not line:
            raise WorkerError(f"MXNet worker exited (code {process.wait()})"
                              f"{self._log_tail()}")
        answer = json.loads(line)
        if not answer.pop("ok", False):
            raise WorkerError(answer.get("error", "unknown worker error"))
        return answer

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().splitlines() if line.strip()]
        return f": {lines[-1]}" if lines else ""

    def status(self) -> Optional[str]:
        return self._problem

    def versions(self) -> Dict[str, str]:
        return {"mxnet": self._hello.get("mxnet", ""),
                "mxnet_numpy": self._hello.get("numpy", ""),
                "mxnet_python": str(self._python),
                "mxnet_omp_num_threads": self._hello.get("omp_num_threads", "")}

    def prepare(self, case: Any, inputs: Any, modes: Collection[str]) -> Prepared:
        import numpy as np

        folder = Path(self._scratch.name) / case.key.replace("/", "_")
        folder.mkdir(exist_ok=True)
        paths: Dict[str, Optional[str]] = {}
        for name in ("data", "weight", "bias", "out_grad"):
            array = getattr(inputs, name)
            paths[name] = None
            if array is not None:
                paths[name] = str(folder / f"{name}.npy")
                np.save(paths[name], array)
        try:
            answer = self._call({"op": "setup", "key": case.key,
                                 "kwargs": jsonable(case.kwargs), "paths": paths,
                                 "modes": list(modes)})
        except WorkerError as exc:
            return Prepared(unavailable=unavailable_for(modes, f"error: {exc}"))

        def runner(mode: str):
            return lambda n: self._call({"op": "run", "key": case.key, "mode": mode,
                                         "n": n})["seconds"]

        def output() -> Any:
            path = folder / "output.npy"
            self._call({"op": "output", "key": case.key, "path": str(path)})
            return np.load(path)

        def close() -> None:
            if self._process is not None and self._process.poll() is None:
                self._call({"op": "release", "key": case.key})
            for path in folder.iterdir():
                path.unlink()

        return Prepared(runners={mode: runner(mode) for mode in answer["modes"]},
                        unavailable=answer["errors"], first_seconds=answer["first_seconds"],
                        output=output, close=close)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            try:
                self._process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self._process.stdin.close()
                self._process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        if self._log is not None:
            self._log.close()
        self._scratch.cleanup()


if __name__ == "__main__":
    if sys.argv[1:] != ["--worker"]:
        sys.exit("usage: <mxnet venv>/bin/python benchmarks/peer_mxnet.py --worker "
                 "(run.py starts it)")
    sys.exit(worker_main())
