"""The oneDNN implementation of Deconvolution: float32 and bfloat16 calls the
planner has a checked plan for (see :mod:`mxdeconv.onednn.planner`), run by the
extension's glue (``_exec``).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from mxdeconv.onednn import planner
from mxdeconv.onednn._loader import ERROR as EXTENSION_ERROR
from mxdeconv.onednn._loader import extension as onednn_ops
from mxdeconv._core.dtypes import onednn_dtype_names, onednn_name
from mxdeconv.ndarray.ndarray import NDArray
from .validation import FORWARD, Call

try:
    from . import _exec
except ImportError:  # the extension failed to load: EXTENSION_ERROR says why
    _exec = None  # type: ignore[assignment]  # None: no compiled module (see EXTENSION_ERROR)


def supports(call: Call) -> Optional[str]:
    if onednn_ops is None:
        return EXTENSION_ERROR
    dtype = onednn_name(call.dtype)
    if dtype is None:
        return (f"dtype {call.dtype} is not supported by the oneDNN path "
                f"({' or '.join(onednn_dtype_names())} only)")
    if call.geom.out_shape[0] == 0:
        return "an empty batch has nothing for oneDNN to compute"
    return None


def prepare(call: Call) -> Optional[str]:
    """The planner's checked plan for ``call`` (kept in ``call.plan``; chosen,
    checked and perhaps tuned on the first call of its layer, from memory
    after), or why there is none."""
    dtype = onednn_name(call.dtype)
    assert dtype is not None  # supports() turned away the dtypes oneDNN does not compute
    if call.purpose == FORWARD:
        plan = planner.forward_plan(call.geom, dtype, call.training, call.accumulate,
                                  call.act_type)
    else:
        plan = planner.backward_plans(call.geom, dtype)
    if isinstance(plan, planner.Unavailable):
        return plan.reason
    call.plan = plan
    return None


def forward(call: Call, out: Optional[NDArray], req: str) -> NDArray:
    return _exec.deconv_forward(call.plan, call.data, call.weight, call.bias, out,
                                req == "add", call.training)


def backward(call: Call, out_grad: NDArray, grads: Sequence[Optional[NDArray]],
             reqs: Sequence[str]) -> Tuple:
    return _exec.deconv_backward(call.plan.data, call.plan.weights, out_grad, call.data,
                                 call.weight, tuple(grads), tuple(r == "add" for r in reqs),
                                 tuple(r != "null" for r in reqs))


