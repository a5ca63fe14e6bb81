"""The full path of a Deconvolution call: what a call without a prepared call runs.

The compiled entries (``ops._fastpath``) run a repeated signature's prepared
call; every other call comes here, with the key its prepared call would have.
:mod:`~mxdeconv.ops.validation` checks everything before a buffer is written,
the registry picks the implementation (oneDNN when its support check passes,
else NumPy), results reach ``out=``/``grads=`` targets through
:mod:`~mxdeconv.ndarray.results`, and a oneDNN call leaves a prepared call
(``_exec``) behind for the next one.

This module imports downward only (``_exec`` through ``onednn_impl``); the
entries above import it.  Without the extension, ``forward_entry`` and
``backward_entry`` stand in for the compiled entries (every call comes here).
"""
from __future__ import annotations

import time
import weakref
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import numpy_impl, onednn_impl, provisional, registry
from mxdeconv.onednn import planner
from mxdeconv.autograd import tape
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.results import aliased, store_result
from mxdeconv.ndarray.ndarray import NDArray
from .validation import (
    BACKWARD, as_input, check_array, check_name, check_req, check_target, make_call)

_exec = onednn_impl._exec  # the extension's glue, or None when it failed to load
OPERATOR = registry.operator("Deconvolution")
OPERATOR.register(registry.Implementation(registry.ONEDNN, onednn_impl.supports,
                                          onednn_impl.forward, onednn_impl.backward,
                                          onednn_impl.prepare))
OPERATOR.register(registry.Implementation(registry.NUMPY, numpy_impl.supports,
                                          numpy_impl.forward, numpy_impl.backward))
_GRAD_NAMES = ("data_grad", "weight_grad", "bias_grad")


def full_forward(key: Any, data: Any, weight: Any, bias: Any, out: Optional[NDArray],
                 req: Any, train: Any, params: dict,
                 act_type: Optional[str] = None) -> Optional[NDArray]:
    """The full path of a forward call (and, on oneDNN, its prepared call);
    ``act_type`` (with out=None and req='write' only): DeconvolutionActivation."""
    req = check_req("req", req)
    call = make_call(data, weight, bias, params, train)
    call.act_type = act_type
    if out is not None:
        check_target("out", out, call.geom.out_shape, call.dtype)
        tape.check_assignable("out", out)
    elif req == "add":
        raise MXNetError("req='add' accumulates into out=, which was not given")
    if req == "null":
        return out
    # out= sharing memory with an input: compute into a fresh array first,
    # then write or add; otherwise req=add is the primitive's own sum post-op.
    out_aliased = aliased(out, (call.data, call.weight, call.bias))
    tape.check_not_in_place("out", out, out_aliased, (call.data, call.weight, call.bias))
    call.accumulate = req == "add" and not out_aliased
    impl = OPERATOR.select(call)
    onednn = impl.name == registry.ONEDNN
    if out_aliased:
        assert out is not None  # aliased() is False for no target
        result = store_result(provisional.forward(impl, call, None, "write", OPERATOR.select)
                              if onednn else impl.forward(call, None, "write"), out, req)
    elif key is not None and onednn and not planner.provisional(call.plan):
        prepared = _exec.PreparedForward(call.plan, call.training, call.accumulate, req,
                                         act_type, _record)
        return _run_prepared(key, prepared, call.plan, lambda: prepared.run(
            call.data, call.weight, call.bias, out, params))
    elif onednn:  # timed for the tuner; a provisional plan's result checked
        result = provisional.forward(impl, call, out, req, OPERATOR.select)
    else:
        result = impl.forward(call, out, req)
    return _record(result, (call.data, call.weight, call.bias), params, act_type)


def _run_prepared(key: Any, prepared: Any, plan: Any, run: Callable[[], Any]) -> Any:
    """Keep ``prepared`` as this thread's prepared call for ``key`` and run it
    (``run``).  While ``plan`` is still tuned on its calls, the run is timed
    and the prepared call serves the calls that, with this one, pay for the
    next unit of tuning, then sends the next back here, where the planner
    runs that unit."""
    _exec.keep(key, prepared)
    if planner.settled(plan):
        return run()
    begun = time.perf_counter()
    result = run()
    prepared.serving.generation, prepared.serving.paid_by = planner.settlements, plan
    prepared.serving.calls_left = planner.serve(plan, time.perf_counter() - begun)
    return result


def _record(result: Any, inputs: Tuple[Any, ...], params: dict,
            act_type: Optional[str]) -> Any:
    """Record a forward on the tape (when recording): ``Deconvolution``, or
    ``DeconvolutionActivation`` with the output kept for its backward."""
    if act_type is None:
        return tape.record_op("Deconvolution", result, inputs, params)
    if not tape.would_record(inputs):
        return result
    return tape.record_op("DeconvolutionActivation", result, inputs,
                          _ActivationAttrs(params, act_type, result))



class _ActivationAttrs:
    """What a recorded DeconvolutionActivation's backward needs: the parameters,
    the act_type and the output (the derivative is a function of it).  The
    output is held weakly (it holds the node: no cycle) with its version: every
    path to this node's gradient runs through a live output, and one written
    since (out=, a gradient target) would give the wrong derivative."""

    __slots__ = ("params", "act_type", "_output", "_version")

    def __init__(self, params: dict, act_type: str, output: NDArray) -> None:
        self.params, self.act_type = params, act_type
        self._output = weakref.ref(output)
        self._version = output._version

    def output_values(self) -> np.ndarray:
        output = self._output()
        if output is None:
            raise MXNetError("DeconvolutionActivation: its output was freed before "
                             "backward reached it")
        if output._version != self._version:
            raise MXNetError(
                f"DeconvolutionActivation: its output (shape {output.shape}) was written "
                "after the operator was recorded (out=, req='add' or a gradient target), so "
                f"the {self.act_type} derivative would read the new values; write into "
                "another array, or record again after writing")
        return output._plain()



def full_backward(key: Any, out_grad: Any, data: Any, weight: Any, bias: Any, req: Any,
                  grads: Any, train: Any, params: dict) -> Tuple[Optional[NDArray], ...]:
    """The full path of a backward call (and, on oneDNN, its prepared call)."""
    if isinstance(req, str):
        reqs = [req] * 3
    elif isinstance(req, (tuple, list)):
        reqs = list(req)
    else:
        raise TypeError(f"req must be a string or a sequence of three strings (data, "
                        f"weight, bias), got {req!r} of type {type(req).__name__}")
    if len(reqs) != 3:
        raise MXNetError(f"req must be one string or three (data, weight, bias), got {req!r}")
    reqs = [check_req(f"req[{i}]", r) for i, r in enumerate(reqs)]
    if grads is None:
        grads = [None] * 3
    elif isinstance(grads, (tuple, list)):
        grads = list(grads)
    else:
        raise TypeError(f"grads must be a sequence of three NDArrays or Nones (data, "
                        f"weight, bias), got {type(grads).__name__}")
    if len(grads) != 3:
        raise MXNetError(f"grads must hold three entries (data, weight, bias), got {len(grads)}")
    call = make_call(data, weight, bias, params, train, BACKWARD)
    geom = call.geom
    out_grad = as_input(out_grad, "out_grad")
    check_array("out_grad", out_grad, geom.out_shape, call.dtype)
    if geom.param.no_bias:
        reqs[2], grads[2] = "null", None
    shapes = (geom.data_shape, geom.weight_shape, geom.bias_shape)
    for name, grad, shape, r in zip(_GRAD_NAMES, grads, shapes, reqs):
        if grad is not None:
            assert shape is not None  # no bias: its target was dropped above
            check_target(name, grad, shape, call.dtype)
        elif r == "add":
            raise MXNetError(f"req='add' for {name} accumulates into grads[...], "
                             "which was not given")
    if all(r == "null" for r in reqs):
        return (None, None, None)
    impl = OPERATOR.select(call)
    onednn = impl.name == registry.ONEDNN
    checked = onednn and provisional.provisional_backward(call)
    # A target sharing memory with an input, or with another target, would be
    # written while the other passes still read it: such targets get fresh
    # results, written or added once every pass has run.  So do req='add'
    # targets of a provisional pass (its results are checked before use).
    late: List[Optional[NDArray]] = [
        g if checked and r == "add" else None for g, r in zip(grads, reqs)]
    if grads[0] is not None or grads[1] is not None or grads[2] is not None:
        inputs = (out_grad, call.data, call.weight)
        for i, grad in enumerate(grads):
            if grad is not None and reqs[i] != "null" and aliased(
                    grad, inputs + tuple(g for j, g in enumerate(grads) if j != i)):
                late[i] = grad
    if late[0] is not None or late[1] is not None or late[2] is not None:
        run_grads = [None if t is not None else g for g, t in zip(grads, late)]
        run_reqs = ["write" if t is not None else r for r, t in zip(reqs, late)]
        results = provisional.backward(impl, call, out_grad, run_grads, run_reqs,
                                       OPERATOR.select) if onednn else \
            impl.backward(call, out_grad, run_grads, run_reqs)
        results = tuple(res if t is None else store_result(res, t, r)
                        for res, t, r in zip(results, late, reqs))
    elif key is not None and onednn and not checked:
        prepared = _exec.PreparedBackward(call.plan.data, call.plan.weights, tuple(reqs))
        return _run_prepared(key, prepared, call.plan, lambda: prepared.run(
            out_grad, call.data, call.weight, tuple(grads)))
    elif onednn:  # timed for the tuner; a provisional pass's results checked
        results = provisional.backward(impl, call, out_grad, grads, reqs, OPERATOR.select)
    else:
        results = impl.backward(call, out_grad, grads, reqs)
    return tuple(None if r == "null" else res for res, r in zip(results, reqs))


# -- without the extension ------------------------------------------------------------
def forward_entry(data: Any, weight: Any, bias: Any = None, out: Optional[NDArray] = None,
                  req: str = "write", train: Optional[bool] = None,
                  name: Optional[str] = None, **params: Any) -> Optional[NDArray]:
    """``Deconvolution`` where the oneDNN extension failed to load (no
    ``ops._fastpath``): every call takes the full path.  See
    :func:`mxdeconv.nd.Deconvolution`."""
    if name is not None:
        check_name(name)
    return full_forward(None, data, weight, bias, out, req, train, params)


def backward_entry(out_grad: Any, data: Any, weight: Any, bias: Any = None,
                   req: Union[str, Sequence[str]] = "write",
                   grads: Optional[Sequence[Optional[NDArray]]] = None,
                   train: Optional[bool] = True, name: Optional[str] = None,
                   **params: Any) -> Tuple[Optional[NDArray], ...]:
    """``Deconvolution_backward`` where the oneDNN extension failed to load:
    every call takes the full path.  See :func:`mxdeconv.nd.Deconvolution_backward`."""
    if name is not None:
        check_name(name)
    return full_backward(None, out_grad, data, weight, bias, req, grads, train, params)
