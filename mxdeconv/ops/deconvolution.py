"""The Deconvolution operator's public module: forward, backward, explain.

:func:`Deconvolution` and :func:`Deconvolution_backward` are the compiled
entries of ``ops._fastpath`` (a repeated signature runs its prepared call
without a Python frame; any other call takes the full path,
:mod:`~mxdeconv.ops.full_path`), re-exported here and by :mod:`mxdeconv.nd`.
Without the extension the full path's own entries stand in for them.

:func:`DeconvolutionActivation` is the same operator followed by an
activation, as one operator (Gluon's layers with ``activation=``): oneDNN
applies the activation as an eltwise post-op of its plan, the NumPy path after
its result, and the backward takes out_grad through the activation's
derivative (from the output) into :func:`Deconvolution_backward`.

The modules import one way: this one imports ``_fastpath``, which imports
``full_path``, which imports ``_exec`` (through ``onednn_impl``).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from mxdeconv.semantics import activations
from . import activation, full_path
from mxdeconv.onednn._loader import extension
from mxdeconv.autograd import tape
from mxdeconv.ndarray.ndarray import NDArray
from .full_path import OPERATOR, _ActivationAttrs, full_forward
from .validation import make_call

try:
    from . import _fastpath
except ImportError:  # the extension failed to load: onednn_impl.EXTENSION_ERROR says why
    _fastpath = None  # type: ignore[assignment]

if _fastpath is not None:
    Deconvolution = _fastpath.Deconvolution
    Deconvolution_backward = _fastpath.Deconvolution_backward
else:
    Deconvolution = full_path.forward_entry
    Deconvolution_backward = full_path.backward_entry


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
    if _fastpath is not None:
        prepared = _fastpath.forward(data, weight, bias, None, "write", train, params, act_type)
        if not isinstance(prepared, _fastpath.Miss):
            return prepared
        key = prepared.key
    else:
        key = None
    result = full_forward(key, data, weight, bias, None, "write", train, params, act_type)
    assert result is not None  # req="write" makes a result
    return result



@tape.register_backward("DeconvolutionActivation")
def _recorded_activation_backward(out_grad: Any, inputs: Tuple[Any, ...],
                                  attrs: _ActivationAttrs, reqs: Tuple[str, ...],
                                  targets: Tuple[Any, ...]) -> Tuple[Any, ...]:
    data, weight, bias = inputs
    og = out_grad._plain()
    grad = activations.gradient(og, attrs.output_values(), attrs.act_type)
    return Deconvolution_backward(NDArray(grad), data, weight, bias, req=reqs, grads=targets,
                                  **attrs.params)



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
                 f"\n  check: {plan.choice.describe()}"
                 f"\n  threads: {plan.threads} ({_threads_source()})")
    return text


def _threads_source() -> str:
    """Where the process's thread count came from (the oneDNN extension's word)."""
    return extension.num_threads_source() if extension is not None else "unknown"
