"""The Deconvolution operator's entry points: forward, backward, explain.

A call whose signature (parameters, array shapes and dtypes, mode, req,
thread count, dispatch switches) was seen before in this thread runs through
its prepared call (``_exec``), which checks only what can change between
calls.  Any other call takes the full path here: :mod:`~mxdeconv.ops.validation`
checks everything before a buffer is written, the registry picks the
implementation (oneDNN when its support check passes, else NumPy), results
reach ``out=``/``grads=`` targets through :mod:`~mxdeconv.ops.outputs`, and a
oneDNN call leaves a prepared call behind for the next one.

:func:`DeconvolutionActivation` is the same operator followed by an
activation, as one operator (Gluon's layers with ``activation=``): oneDNN
applies the activation as an eltwise post-op of its plan, the NumPy path after
its result, and the backward takes out_grad through the activation's
derivative (from the output) into :func:`Deconvolution_backward`.
"""
from __future__ import annotations

import functools
import time
import weakref
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from mxdeconv.semantics import activations
from . import activation, numpy_impl, onednn_impl, provisional, registry
from mxdeconv.onednn import planner
from mxdeconv.autograd import tape
from mxdeconv._core.errors import MXNetError
from .outputs import aliased, store_result
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


def Deconvolution(data: Any, weight: Any, bias: Any = None, out: Optional[NDArray] = None,
                  req: str = "write", train: Optional[bool] = None,
                  name: Optional[str] = None, **params: Any) -> Optional[NDArray]:
    """Transposed convolution with MXNet 1.9.1's ``Deconvolution`` semantics.

    Args:
        data: ``(N, C_in, *spatial)`` NDArray or NumPy array (NumPy is copied).
        weight: ``(C_in, num_filter // num_group, *kernel)``.
        bias: ``(num_filter,)`` when ``no_bias=False``, else None.
        out: optional NDArray of the output shape to write (or add) into.
        req: ``"write"``, ``"inplace"`` (same as write), ``"add"`` (accumulate
            into ``out``) or ``"null"`` (compute nothing, return ``out``).
        train: training mode for this call; None follows
            :func:`mxdeconv.autograd.is_training`.
        name: accepted and ignored, as by MXNet's imperative operators (a str or None).
        **params: MXNet's ``kernel``, ``stride``, ``dilate``, ``pad``, ``adj``,
            ``target_shape``, ``num_filter``, ``num_group``, ``no_bias``,
            ``layout``, ``workspace``, ``cudnn_tune``, ``cudnn_off`` (the last three
            ignored); each also as MXNet's text (``kernel="(3, 3)"``,
            ``no_bias="true"``, see :doc:`semantics`).

    Output size per spatial dim: ``stride*(in-1) + dilate*(k-1) + 1 - 2*pad + adj``
    (``pad``/``adj`` inferred from ``target_shape`` when it is set).  The result
    may hold a oneDNN blocked layout (see ``NDArray.layout``); reading it
    turns it to the default layout.

    Inside :func:`mxdeconv.autograd.record` the call is recorded for
    ``backward()`` when an input needs a gradient (with ``out=`` and
    ``req="add"`` only the new term is differentiated: the previous contents
    of ``out`` count as a constant).

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> y = nd.Deconvolution(np.ones((1, 1, 2)), np.ones((1, 1, 2)), kernel=(2,),
    ...                      stride=(2,), num_filter=1)
    >>> y.asnumpy()
    array([[[1., 1., 1., 1.]]])
    """
    if name is not None:
        check_name(name)
    # With the extension loaded, _exec.Deconvolution replaces this function
    # (below): this body runs only without it, so there is no prepared call.
    return full_forward(None, data, weight, bias, out, req, train, params)


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
    prepared.serving.generation = planner.settlements
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


def DeconvolutionActivation(data: Any, weight: Any, bias: Any = None, *, act_type: str,
                            train: Optional[bool] = None, **params: Any) -> NDArray:
    """``Activation(Deconvolution(data, weight, bias, **params), act_type)`` as one
    operator: what Gluon's ``Conv*DTranspose(activation=act_type)`` runs.

    ``act_type`` is one of MXNet's ``"relu"``, ``"sigmoid"``, ``"softrelu"``,
    ``"softsign"``, ``"tanh"``.  On the oneDNN path the activation is an eltwise
    post-op of the plan (after the bias), checked at plan time like the bias
    (see :doc:`kernel_check`); on the NumPy path it follows the result.  Its
    gradient comes from the output, as MXNet's does.  softsign's gradient needs
    the pre-activation and oneDNN 3.2 has no softsign, so softsign runs as the
    two operators ``Deconvolution`` then :func:`mxdeconv.nd.Activation`.

    >>> import numpy as np
    >>> from mxdeconv.ops.deconvolution import DeconvolutionActivation
    >>> x, w = np.ones((1, 1, 2)), -np.ones((1, 1, 2))
    >>> y = DeconvolutionActivation(x, w, kernel=(2,), stride=(2,), num_filter=1,
    ...                             act_type="relu")
    >>> y.asnumpy()
    array([[[0., 0., 0., 0.]]])
    """
    act_type = activations.check_act_type("act_type", act_type)
    if act_type not in activations.GRADIENT_FROM_OUTPUT:
        return activation.Activation(
            Deconvolution(data, weight, bias, train=train, **params), act_type)
    if _exec is not None:
        prepared = _exec.forward(data, weight, bias, None, "write", train, params, act_type)
        if not isinstance(prepared, _exec.Miss):
            return prepared
        key = prepared.key
    else:
        key = None
    result = full_forward(key, data, weight, bias, None, "write", train, params, act_type)
    assert result is not None  # req="write" makes a result
    return result


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


@tape.register_backward("DeconvolutionActivation")
def _recorded_activation_backward(out_grad: Any, inputs: Tuple[Any, ...],
                                  attrs: _ActivationAttrs, reqs: Tuple[str, ...],
                                  targets: Tuple[Any, ...]) -> Tuple[Any, ...]:
    data, weight, bias = inputs
    og = out_grad._plain()
    grad = activations.gradient(og, attrs.output_values(), attrs.act_type)
    return Deconvolution_backward(NDArray(grad), data, weight, bias, req=reqs, grads=targets,
                                  **attrs.params)


def Deconvolution_backward(out_grad: Any, data: Any, weight: Any, bias: Any = None,
                           req: Union[str, Sequence[str]] = "write",
                           grads: Optional[Sequence[Optional[NDArray]]] = None,
                           train: Optional[bool] = True, name: Optional[str] = None,
                           **params: Any) -> Tuple[Optional[NDArray], ...]:
    """Gradients of :func:`Deconvolution`: ``(data_grad, weight_grad, bias_grad)``.

    Args:
        out_grad: gradient of the loss with respect to the output.
        data, weight, bias: the forward inputs (bias only tells its shape).
        req: one string or three, for data, weight and bias: ``"write"``,
            ``"inplace"``, ``"add"`` (accumulate into the array in ``grads``)
            or ``"null"`` (not computed; None returned).
        grads: three NDArrays or Nones to write the gradients into; required
            where req is ``"add"``.
        name: accepted and ignored (a str or None).
        **params: the forward's parameters.

    ``bias_grad`` is None when ``no_bias`` is True.  Weight gradients come
    back in the default layout (optimizer code reads plain memory).

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> dx, dw, db = nd.Deconvolution_backward(np.ones((1, 1, 4)), np.ones((1, 1, 2)),
    ...     np.ones((1, 1, 2)), np.zeros(1), kernel=(2,), stride=(2,), num_filter=1,
    ...     no_bias=False)
    >>> dx.asnumpy(), db.asnumpy()
    (array([[[2., 2.]]]), array([4.]))
    """
    if name is not None:
        check_name(name)
    return full_backward(None, out_grad, data, weight, bias, req, grads, train, params)  # as above


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


@tape.register_backward("Deconvolution")
def _recorded_backward(out_grad: Any, inputs: Tuple[Any, ...], params: Any,
                       reqs: Tuple[str, ...], targets: Tuple[Any, ...]) -> Tuple[Any, ...]:
    data, weight, bias = inputs
    return Deconvolution_backward(out_grad, data, weight, bias, req=reqs, grads=targets,
                                  **params)


def explain(data: Any, weight: Any, bias: Any = None, train: Optional[bool] = None,
            act_type: Optional[str] = None, **params: Any) -> str:
    """Which implementation a Deconvolution forward call would use, and why.

    For oneDNN it names the kernel and layouts the planner chose, how the bias
    (and the activation ``act_type``, as in :func:`DeconvolutionActivation`:
    a Gluon layer's ``activation``) is applied, and the verdict of the
    plan-time check against the NumPy path (with any kernel it rejected).

    >>> import numpy as np, mxdeconv
    >>> text = mxdeconv.explain(np.ones((1, 2, 3, 3)), np.ones((2, 1, 2, 2)),
    ...                         kernel=(2, 2), num_filter=1)
    >>> text.splitlines()[0]           # float64 runs on NumPy; the next lines say why
    'Deconvolution: numpy would run'
    """
    if act_type is not None:
        act_type = activations.check_act_type("act_type", act_type)
    call = make_call(data, weight, bias, params, train)
    if act_type in activations.GRADIENT_FROM_OUTPUT:
        call.act_type = act_type
    text = OPERATOR.explain(call)
    if act_type is not None and call.act_type is None:
        text += (f"\n  {act_type}: applied after the result by nd.Activation (NumPy): its "
                 "gradient needs the pre-activation, and oneDNN has no eltwise for it")
    plan = call.plan
    if plan is not None:
        if plan.bias is None:
            bias_note = "no bias"
        elif plan.bias_fused:
            bias_note = "bias fused"
        elif plan.direct:
            bias_note = "bias added by mxdeconv"
        else:
            bias_note = "bias added by a separate primitive"
        if plan.act_type is None:
            pass
        elif not plan.act_fused:
            bias_note += f"; {plan.act_type} by a separate eltwise primitive"
        elif plan.bias is None or plan.bias_fused:
            bias_note += f"; {plan.act_type} fused as an eltwise post-op"
        else:
            bias_note += f"; {plan.act_type} fused into the bias addition"
        text += (f"\n  oneDNN forward kernel {plan.impl} ({bias_note}); layouts: src "
                 f"{plan.src.name}, weights {plan.weights.name}, dst {plan.dst.name}"
                 f"\n  check: {plan.verdict.verdict()}"
                 f"\n  threads: {plan.threads} ({_threads_source()})")
    return text


def _threads_source() -> str:
    """Where the process's thread count came from (the oneDNN extension's word)."""
    from mxdeconv.onednn._loader import extension
    return extension.num_threads_source() if extension is not None else "unknown"


if _exec is not None:
    # The same functions compiled (see _exec.Deconvolution): a repeated call
    # skips the Python frame.  The documented ones stay their signatures,
    # docstrings and error paths; the compiled ones keep their own __module__.
    Deconvolution = functools.update_wrapper(_exec.Deconvolution, Deconvolution,
                                             assigned=("__doc__",))
    Deconvolution_backward = functools.update_wrapper(
        _exec.Deconvolution_backward, Deconvolution_backward, assigned=("__doc__",))
