"""The package under test: mxdeconv's public API, its raw oneDNN hooks, its NumPy fallback.

* :class:`MXDeconvAPI` times ``mxdeconv.nd.Deconvolution`` and
  ``mxdeconv.nd.Deconvolution_backward`` exactly as a user calls them, in
  training (``mxdeconv.set_training(True)``) and inference mode (``False``,
  where the weight is cached in its blocked layout after the first call).
  With ``impl="numpy"`` the same steps run inside
  ``mxdeconv.use_impl("numpy")``: the fallback, for scale.
* :class:`RawOneDNN` calls ``mxdeconv.ops.primitive_timing.raw_forward_seconds`` and
  ``raw_backward_seconds``, which return per-iteration seconds of the bare
  oneDNN primitives; the per-call overhead is the API's time minus these.

Each mode gets its own NDArrays, so that one mode's cached layouts never leak
into another's timings; within a mode the same arrays are reused every
iteration, as a training loop reuses its weights.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path
from typing import (Any, Callable, Collection, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

from contender import (MODES, Prepared, StepSpec, prepare_runners, prepare_steps,
                       short_error, unavailable_for)
from layers import Case, Inputs
from timing import Runner

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Modes whose first call took longer are not called again just to probe them.
PROBE_LIMIT_SECONDS = 1.0


def _planner_of(mx: Any) -> Any:
    """The planner module (``mxdeconv.onednn.planner``; ``mxdeconv.plans``
    before the package was split into subpackages), or None."""
    try:
        return importlib.import_module("mxdeconv.onednn.planner")
    except ImportError:
        return getattr(mx, "plans", None)


def import_mxdeconv() -> Tuple[Any, Optional[str]]:
    """``(module, None)`` or ``(None, reason)``; the repo root comes first on sys.path.

    The package is built in place (``mxdeconv/_ops*.so`` next to its sources),
    so the checkout itself is what gets measured unless it is missing there.
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(1, str(REPO_ROOT))
    try:
        module = importlib.import_module("mxdeconv")
        importlib.import_module("mxdeconv.nd")
    except Exception as exc:  # noqa: BLE001 - an unbuilt extension, a syntax error...
        return None, f"missing (import mxdeconv.nd failed: {short_error(exc)})"
    return module, None


class MXDeconvAPI:
    """mxdeconv's public API; ``impl="numpy"`` selects the fallback."""

    def __init__(self, threads: int, impl: Optional[str] = None,
                 modes: Sequence[str] = MODES, max_batch: Optional[int] = None,
                 first_choice: bool = False) -> None:
        self.name = ("NumPy" if impl == "numpy" else
                     "first choice" if first_choice else "mxdeconv")
        self._impl = impl
        # first_choice: the planner's tuning off (oneDNN's first correct candidate).
        self._tuning = not first_choice
        self._modes = tuple(modes)
        self._max_batch = max_batch
        self._mx, self._problem = import_mxdeconv()
        if self._mx is not None:
            missing = [name for name in ("set_training", "use_impl")
                       if not hasattr(self._mx, name)]
            missing += [f"nd.{name}" for name in ("Deconvolution", "Deconvolution_backward")
                        if not hasattr(self._mx.nd, name)]
            if _planner_of(self._mx) is None:  # tuning could not be set: say so
                missing.append("onednn.planner")
            if missing:
                self._problem = f"missing (mxdeconv lacks {', '.join(missing)})"
            elif hasattr(self._mx, "set_num_threads"):
                self._mx.set_num_threads(threads)

    def status(self) -> Optional[str]:
        return self._problem

    def versions(self) -> Dict[str, str]:
        if self._mx is None or self.name != "mxdeconv":
            return {}
        found = {"mxdeconv": str(getattr(self._mx, "__version__", "unknown")),
                 "mxdeconv_path": str(Path(self._mx.__file__).parent)}
        if hasattr(self._mx, "runtime_info"):
            try:
                found.update({f"mxdeconv_{k}": str(v)
                              for k, v in self._mx.runtime_info().items()})
            except Exception as exc:  # noqa: BLE001 - e.g. the extension failed to load
                found["mxdeconv_runtime_info"] = f"error: {short_error(exc)}"
        return found

    def _probe(self, runner: Any) -> Dict[str, Any]:
        """One more call: which implementation ran it and which reorders it did."""
        mx = self._mx
        if hasattr(mx, "reset_reorder_counts"):
            mx.reset_reorder_counts()
        runner(1)
        return {"impl": mx.last_impl() if hasattr(mx, "last_impl") else None,
                "reorders": dict(mx.reorder_counts()) if hasattr(mx, "reorder_counts")
                else None}

    def _mode(self, training: bool) -> Callable[[], Any]:
        """A context factory: this contender's implementation and training flag."""
        mx, impl = self._mx, self._impl
        planner = _planner_of(mx)
        tuning = self._tuning

        @contextlib.contextmanager
        def scope() -> Iterator[None]:
            mx.set_training(training)
            previous = planner.set_tuning(tuning) if planner is not None else None
            # Steady state: a new layer is tuned to the end at its first
            # (untimed) call, not over its timed calls.
            eager = getattr(planner, "set_eager_tuning", None)
            previous_eager = eager(True) if eager is not None else None
            try:
                with mx.use_impl(impl) if impl else contextlib.nullcontext():
                    yield
            finally:
                if previous is not None:
                    planner.set_tuning(previous)
                if previous_eager is not None:
                    eager(previous_eager)
        return scope

    def prepare(self, case: Case, inputs: Inputs, modes: Collection[str]) -> Prepared:
        modes = [mode for mode in self._modes if mode in modes]
        if self._max_batch is not None and case.batch > self._max_batch:
            return Prepared(unavailable=unavailable_for(
                modes, f"skipped (batch > {self._max_batch}, --numpy-max-batch)"))
        nd, kwargs = self._mx.nd, case.kwargs

        def operands() -> Tuple[Any, Any, Any]:
            return tuple(None if a is None else nd.array(a, dtype=a.dtype)
                         for a in (inputs.data, inputs.weight, inputs.bias))

        def wait_all(results: Any) -> None:
            for result in results:
                if result is not None:
                    result.wait_to_read()

        per_mode = {mode: operands() for mode in modes}
        out_grad = nd.array(inputs.out_grad, dtype=inputs.out_grad.dtype)
        train, infer = self._mode(True), self._mode(False)

        def forward(mode: str) -> Any:
            return nd.Deconvolution(*per_mode[mode], **kwargs)

        def backward(mode: str, req: Any = "write") -> Any:
            return nd.Deconvolution_backward(out_grad, *per_mode[mode], req=req, **kwargs)

        def forward_backward() -> None:
            forward("fwd_bwd").wait_to_read()
            wait_all(backward("fwd_bwd"))

        steps: Dict[str, StepSpec] = {
            "fwd_train": (lambda: forward("fwd_train").wait_to_read(), train),
            "fwd_infer": (lambda: forward("fwd_infer").wait_to_read(), infer),
            "fwd_infer_asnumpy": (lambda: forward("fwd_infer_asnumpy").asnumpy(), infer),
            "bwd": (lambda: wait_all(backward("bwd")), train),
            "bwd_data": (lambda: wait_all(backward("bwd_data", ["write", "null", "null"])),
                         train),
            "bwd_weights": (lambda: wait_all(backward("bwd_weights",
                                                      ["null", "write", "write"])), train),
            "fwd_bwd": (forward_backward, train),
        }
        prepared = prepare_steps(steps, modes)
        probes = {mode: self._probe(runner) for mode, runner in prepared.runners.items()
                  if prepared.first_seconds[mode] < PROBE_LIMIT_SECONDS}

        def output() -> Any:
            with infer():
                return nd.Deconvolution(*operands(), **kwargs).asnumpy()

        def info() -> Dict[str, Any]:
            # Per mode: the implementation and reorders of one call after warm-up, and
            # the layouts the inputs hold after the run (inference caches the weight);
            # the planner's choices (kernel, threads, time spent choosing).
            found: Dict[str, Any] = {
                mode: dict(probes.get(mode, {}), input_layouts=[
                    getattr(a, "layout", "?") for a in arrays if a is not None])
                for mode, arrays in per_mode.items()}
            if self._impl is None:
                found["plans"] = self.plans(case, inputs)
            return found

        prepared.output, prepared.info = output, info
        return prepared

    def plans(self, case: Case, inputs: Inputs) -> Dict[str, Any]:
        """The planner's choices for the case, in both modes (already made by the
        measured calls, so this costs no tuning)."""
        try:
            hooks = _primitive_timing()
            with self._mode(False)():
                chosen = {"inference": hooks.plan_summary(
                    inputs.data, inputs.weight, inputs.bias, False, **case.kwargs)}
            with self._mode(True)():
                chosen["training"] = hooks.plan_summary(
                    inputs.data, inputs.weight, inputs.bias, True, **case.kwargs)
            return chosen
        except Exception as exc:  # noqa: BLE001 - an older mxdeconv without the hook
            return {"error": short_error(exc)}

    def close(self) -> None:
        pass


def _primitive_timing() -> Any:
    """``mxdeconv.ops.primitive_timing`` (``mxdeconv.ops.bench_hooks`` in an older
    mxdeconv, which a comparison run may have installed)."""
    try:
        return importlib.import_module("mxdeconv.ops.primitive_timing")
    except ImportError:
        return importlib.import_module("mxdeconv.ops.bench_hooks")


class RawOneDNN:
    """``mxdeconv.ops.primitive_timing.raw_{forward,backward}_seconds`` (bare primitives).

    Called as ``raw_forward_seconds(data, weight, bias, repeats, training=...,
    **kwargs)`` and ``raw_backward_seconds(data, weight, bias, repeats,
    **kwargs)`` with the plain float32 NumPy inputs (``bias`` None when
    ``no_bias``) and the MXNet keyword arguments; each returns ``repeats``
    per-iteration seconds of the primitives that ``nd.Deconvolution`` caches
    for the call, run on buffers already in their layouts.  The backward is
    backward-data plus backward-weights (and bias); the fwd+bwd samples are
    sums of one training forward and one backward sample.
    """

    name = "raw"

    def __init__(self) -> None:
        self._hooks: Any = None
        mx, _ = import_mxdeconv()
        if mx is None:
            self._problem: Optional[str] = "n/a (mxdeconv not importable)"
            return
        try:
            self._hooks = _primitive_timing()
        except Exception as exc:  # noqa: BLE001
            self._problem = f"n/a (mxdeconv.ops.primitive_timing: {short_error(exc)})"
            return
        missing = [n for n in ("raw_forward_seconds", "raw_backward_seconds")
                   if not hasattr(self._hooks, n)]
        self._problem = (f"n/a (primitive_timing lacks {', '.join(missing)})" if missing
                         else None)

    def status(self) -> Optional[str]:
        return self._problem

    def versions(self) -> Dict[str, str]:
        return {}

    def prepare(self, case: Case, inputs: Inputs, modes: Collection[str]) -> Prepared:
        hooks, kwargs = self._hooks, case.kwargs
        operands = (inputs.data, inputs.weight, inputs.bias)

        def forward(training: bool) -> Runner:
            return lambda n: list(hooks.raw_forward_seconds(*operands, n, training=training,
                                                            **kwargs))

        def backward(n: int) -> List[float]:
            return list(hooks.raw_backward_seconds(*operands, n, **kwargs))

        def forward_backward(n: int) -> List[float]:
            return [f + b for f, b in zip(forward(True)(n), backward(n))]

        return prepare_runners({"fwd_train": forward(True), "fwd_infer": forward(False),
                                "bwd": backward, "fwd_bwd": forward_backward}, modes)

    def close(self) -> None:
        pass

