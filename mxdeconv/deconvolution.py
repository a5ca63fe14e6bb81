"""The Deconvolution operator: argument checks, its two implementations, dispatch.

Everything a user can get wrong is checked here, before any buffer is
written, so that an error leaves inputs and outputs untouched.  The checked
call then goes to the oneDNN implementation (``_ops``) when its support check
passes, otherwise to the NumPy fallback.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import autograd, fallback, plans, registry
from ._loader import ERROR as EXTENSION_ERROR
from ._loader import ops as _ops
from .base import Float16OverflowWarning, MXNetError
from .buffers import PHYSICAL_MEMORY, check_fits
from .ndarray import BFLOAT16, NDArray, as_ndarray, array
from .params import DeconvGeometry, _as_bool, check_shape, infer_geometry, parse_params

REQS = ("write", "inplace", "add", "null")
# float16 has no oneDNN kernels on CPUs without AVX-512 FP16: it stays on NumPy.
ONEDNN_DTYPES = (np.dtype(np.float32),) + ((BFLOAT16,) if BFLOAT16 is not None else ())
OPERATOR = registry.operator("Deconvolution")
FORWARD, BACKWARD = "forward", "backward"


@dataclass
class Call:
    """A validated Deconvolution call: which pass, on what, in which mode.

    ``accumulate`` (forward only): the result is added onto ``out=`` by the
    primitive itself.  ``plan`` is filled in by the oneDNN support check.
    """

    geom: DeconvGeometry
    data: NDArray
    weight: NDArray
    bias: Optional[NDArray]
    training: bool
    purpose: str = FORWARD
    accumulate: bool = False
    plan: Any = None

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype


def _check_req(name: str, req: Any) -> str:
    if not isinstance(req, str):
        raise TypeError(f"{name} must be a string, one of {REQS}, got {req!r} "
                        f"of type {type(req).__name__}")
    if req not in REQS:
        raise MXNetError(f"{name} must be one of {REQS}, got {req!r}")
    # "inplace" is "write": a target that shares memory with an input is
    # detected (see _aliased) and written only after the computation.
    return "write" if req == "inplace" else req


def _check_array(name: str, arr: NDArray, shape: Sequence[int], dtype: np.dtype) -> None:
    check_shape(name, arr.shape, shape)
    if arr.dtype != dtype:
        raise MXNetError(f"{name} dtype mismatch: expected {dtype}, got {arr.dtype}")


def _check_target(name: str, arr: Any, shape: Sequence[int], dtype: np.dtype) -> None:
    """An array a result is written into: an NDArray of the right shape and dtype
    whose memory can be written as one C-contiguous block."""
    if not isinstance(arr, NDArray):
        raise TypeError(f"{name} must be an NDArray, got {type(arr).__name__}")
    _check_array(name, arr, shape, dtype)
    buffer, layout = arr._state
    if layout is None:
        if not buffer.flags.writeable:
            raise MXNetError(f"{name} must be writeable, got a read-only array")
        if not buffer.flags.c_contiguous:
            raise MXNetError(f"{name} must be C-contiguous, got strides "
                             f"{buffer.strides} for shape {arr.shape}")


def _input(value: Any, name: str) -> NDArray:
    """An NDArray whose default-layout buffer is C-contiguous (copies otherwise)."""
    arr = as_ndarray(value, name)
    buffer, layout = arr._state
    if layout is None and not buffer.flags.c_contiguous:
        arr = array(buffer)
    return arr


def make_call(data: Any, weight: Any, bias: Any, params: dict,
              training: Optional[bool], purpose: str = FORWARD) -> Call:
    """Validate inputs and parameters; copies NumPy inputs (never aliases them)."""
    param = parse_params(params)
    training = autograd.is_training() if training is None else _as_bool("train", training)
    data = _input(data, "data")
    weight = _input(weight, "weight")
    geom = infer_geometry(param, data.shape)
    _check_array("weight", weight, geom.weight_shape, data.dtype)
    if param.no_bias:
        if bias is not None:
            raise MXNetError("bias was given but no_bias=True; pass no_bias=False to use it")
    else:
        if bias is None:
            raise MXNetError(f"no_bias=False needs a bias of shape {geom.bias_shape}")
        bias = _input(bias, "bias")
        _check_array("bias", bias, geom.bias_shape, data.dtype)
    check_fits(f"the output of shape {geom.out_shape}",
               math.prod(geom.out_shape) * data.dtype.itemsize)
    return Call(geom, data, weight, bias, training, purpose)


def _aliased(target: Optional[NDArray], others: Iterable[Optional[NDArray]]) -> bool:
    """Whether ``target`` is, or may share memory with, one of ``others``."""
    if target is None:
        return False
    for other in others:
        if other is not None and (other is target or np.may_share_memory(
                other._state[0], target._state[0])):
            return True
    return False


# -- the NumPy implementation ---------------------------------------------------
_FLOAT16 = np.dtype(np.float16)
_FLOAT16_MAX = float(np.finfo(np.float16).max)


def _final_values(result: np.ndarray, target: Optional[NDArray], req: str) -> np.ndarray:
    """What ``target`` will hold: ``result``, or for req=add ``target + result``
    (float16 sums are formed in float32 so that an overflow can be seen)."""
    if target is None or req != "add":
        return result
    plain = target._plain()
    if result.dtype == _FLOAT16:
        return plain.astype(np.float32) + result
    return result  # added in place by _store


def _check_float16_overflow(names: Sequence[str], values: Sequence[Optional[np.ndarray]],
                            inputs: Sequence[Optional[NDArray]]) -> None:
    """Warn (:class:`Float16OverflowWarning`) before anything is stored when a
    float16 result has a finite value beyond float16's range: it becomes +-inf.
    Results that are inf because an input holds inf or NaN are propagation, not
    overflow, and do not warn."""
    messages = []
    for name, value in zip(names, values):
        if value is None or value.size == 0:
            continue
        big = int(np.count_nonzero(np.abs(value) > _FLOAT16_MAX))
        if big:
            messages.append(f"{name}: {big} of {value.size} values")
    if messages and all(np.isfinite(np.asarray(a)).all() for a in inputs if a is not None):
        warnings.warn(Float16OverflowWarning(
            f"float16 overflow: {'; '.join(messages)} exceed float16's largest finite "
            f"value {_FLOAT16_MAX:g} and are stored as +-inf (they were computed in "
            "float32; use float32 inputs to keep them)"), stacklevel=5)


def _store(value: np.ndarray, target: Optional[NDArray], req: str) -> NDArray:
    """Write (or add) ``value`` from :func:`_final_values` into ``target``, or wrap
    it in a new NDArray of the call's dtype."""
    if target is None:
        return array(value, dtype=value.dtype)
    plain = target._plain()
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE inf/NaN, warned above
        if req == "add" and value.dtype == plain.dtype:
            plain += value
        else:  # write, or a float16 sum formed in float32
            np.copyto(plain, value, casting="unsafe")
    target._bump()
    return target


def _plain(arr: Optional[NDArray]) -> Optional[np.ndarray]:
    return None if arr is None else arr._plain()


def _numpy_forward(call: Call, out: Optional[NDArray], req: str) -> NDArray:
    data, weight, bias = _plain(call.data), _plain(call.weight), _plain(call.bias)
    with np.errstate(over="ignore", invalid="ignore"):  # NaN/inf propagate silently
        result = fallback.forward(call.geom, data, weight, bias)
    value = _final_values(result, out, req)
    if result.dtype == _FLOAT16:
        _check_float16_overflow(("output",), (value,), (data, weight, bias))
    return _store(value, out, req)


def _numpy_backward(call: Call, out_grad: NDArray, grads, reqs) -> Tuple:
    needed = [r != "null" for r in reqs]
    og, data, weight = _plain(out_grad), _plain(call.data), _plain(call.weight)
    with np.errstate(over="ignore", invalid="ignore"):
        results = fallback.backward(call.geom, og, data, weight, *needed)
    values = [None if r is None else _final_values(r, g, q)
              for r, g, q in zip(results, grads, reqs)]
    if data.dtype == _FLOAT16:  # every check before the first store
        _check_float16_overflow(("data_grad", "weight_grad", "bias_grad"), values,
                                (og, data, weight))
    return tuple(None if v is None else _store(v, g, q)
                 for v, g, q in zip(values, grads, reqs))


def _numpy_workspace(call: Call) -> int:
    """Bytes the fallback allocates at most for ``call`` (either pass): the
    im2col columns, the uncropped canvas and the result."""
    geom, param = call.geom, call.geom.param
    batch = geom.data_shape[0]
    cols = batch * param.num_filter * math.prod(param.kernel) * math.prod(geom.spatial_in)
    canvas = batch * param.num_filter * math.prod(fallback._canvas_extent(geom))
    out = math.prod(geom.out_shape)
    return (cols + canvas + out) * fallback.compute_dtype(call.dtype).itemsize


def _numpy_supports(call: Call) -> Optional[str]:
    need = _numpy_workspace(call)
    if need > PHYSICAL_MEMORY:
        return (f"the NumPy fallback would need {need} bytes of work space, more than "
                f"this machine's {PHYSICAL_MEMORY} bytes of memory")
    return None


# -- the oneDNN implementation --------------------------------------------------
def _onednn_supports(call: Call) -> Optional[str]:
    if _ops is None:
        return EXTENSION_ERROR
    if call.dtype not in ONEDNN_DTYPES:
        return (f"dtype {call.dtype} is not supported by the oneDNN path "
                f"({' or '.join(str(d) for d in ONEDNN_DTYPES)} only)")
    if call.geom.out_shape[0] == 0:
        return "an empty batch has nothing for oneDNN to compute"
    dtype = _DTYPE_NAMES[call.dtype]
    if call.purpose == FORWARD:
        plan = plans.forward_plan(call.geom, dtype, call.training, call.accumulate)
    else:
        plan = plans.backward_plans(call.geom, dtype)
    if isinstance(plan, plans.Unavailable):
        return plan.reason
    call.plan = plan
    return None


_DTYPE_NAMES = {np.dtype(np.float32): "float32"}
if BFLOAT16 is not None:
    _DTYPE_NAMES[BFLOAT16] = "bfloat16"


def _onednn_forward(call: Call, out: Optional[NDArray], req: str) -> NDArray:
    return _ops.deconv_forward(call.plan, call.data, call.weight, call.bias, out,
                               req == "add", call.training)


def _onednn_backward(call: Call, out_grad: NDArray, grads, reqs) -> Tuple:
    return _ops.deconv_backward(call.plan.data, call.plan.weights, out_grad, call.data,
                                call.weight, tuple(grads), tuple(r == "add" for r in reqs),
                                tuple(r != "null" for r in reqs))


OPERATOR.register(registry.Implementation(registry.ONEDNN, _onednn_supports,
                                          _onednn_forward, _onednn_backward))
OPERATOR.register(registry.Implementation(registry.NUMPY, _numpy_supports,
                                          _numpy_forward, _numpy_backward))


# -- public entry points ----------------------------------------------------------
def _store_result(result: NDArray, target: NDArray, req: str) -> NDArray:
    """Write or add an implementation's fresh ``result`` into ``target``."""
    values = result._plain()
    value = _final_values(values, target, req)
    if values.dtype == _FLOAT16:
        _check_float16_overflow(("result",), (value,), (values, _plain(target)))
    return _store(value, target, req)


def deconvolution(data: Any, weight: Any, bias: Any = None, out: Optional[NDArray] = None,
                  req: str = "write", train: Optional[bool] = None,
                  **params: Any) -> Optional[NDArray]:
    """See :func:`mxdeconv.nd.Deconvolution`."""
    req = _check_req("req", req)
    call = make_call(data, weight, bias, params, train)
    if out is not None:
        _check_target("out", out, call.geom.out_shape, call.dtype)
        autograd.check_assignable("out", out)
    elif req == "add":
        raise MXNetError("req='add' accumulates into out=, which was not given")
    if req == "null":
        return out
    # out= sharing memory with an input: compute into a fresh array first,
    # then write or add; otherwise req=add is the primitive's own sum post-op.
    aliased = _aliased(out, (call.data, call.weight, call.bias))
    call.accumulate = req == "add" and not aliased
    impl = OPERATOR.select(call)
    if aliased:
        result = _store_result(impl.forward(call, None, "write"), out, req)
    else:
        result = impl.forward(call, out, req)
    return autograd.record_op("Deconvolution", result, (call.data, call.weight, call.bias),
                              params)


_GRAD_NAMES = ("data_grad", "weight_grad", "bias_grad")


def deconvolution_backward(out_grad: Any, data: Any, weight: Any, bias: Any = None,
                           req: Union[str, Sequence[str]] = "write",
                           grads: Optional[Sequence[Optional[NDArray]]] = None,
                           train: Optional[bool] = True,
                           **params: Any) -> Tuple[Optional[NDArray], ...]:
    """See :func:`mxdeconv.nd.Deconvolution_backward`."""
    if isinstance(req, str):
        reqs = [req] * 3
    elif isinstance(req, (tuple, list)):
        reqs = list(req)
    else:
        raise TypeError(f"req must be a string or a sequence of three strings (data, "
                        f"weight, bias), got {req!r} of type {type(req).__name__}")
    if len(reqs) != 3:
        raise MXNetError(f"req must be one string or three (data, weight, bias), got {req!r}")
    reqs = [_check_req(f"req[{i}]", r) for i, r in enumerate(reqs)]
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
    out_grad = _input(out_grad, "out_grad")
    _check_array("out_grad", out_grad, geom.out_shape, call.dtype)
    if geom.param.no_bias:
        reqs[2], grads[2] = "null", None
    shapes = (geom.data_shape, geom.weight_shape, geom.bias_shape)
    for name, grad, shape, r in zip(_GRAD_NAMES, grads, shapes, reqs):
        if grad is not None:
            _check_target(name, grad, shape, call.dtype)
        elif r == "add":
            raise MXNetError(f"req='add' for {name} accumulates into grads[...], "
                             "which was not given")
    if all(r == "null" for r in reqs):
        return (None, None, None)
    impl = OPERATOR.select(call)
    # A target sharing memory with an input, or with another target, would be
    # written while the other passes still read it: such targets get fresh
    # results, written or added once every pass has run.
    late: List[Optional[NDArray]] = [None, None, None]
    if grads[0] is not None or grads[1] is not None or grads[2] is not None:
        inputs = (out_grad, call.data, call.weight)
        for i, grad in enumerate(grads):
            if grad is not None and reqs[i] != "null" and _aliased(
                    grad, inputs + tuple(g for j, g in enumerate(grads) if j != i)):
                late[i] = grad
    if late[0] is not None or late[1] is not None or late[2] is not None:
        run_grads = [None if t is not None else g for g, t in zip(grads, late)]
        run_reqs = ["write" if t is not None else r for r, t in zip(reqs, late)]
        results = impl.backward(call, out_grad, run_grads, run_reqs)
        results = tuple(res if t is None else _store_result(res, t, r)
                        for res, t, r in zip(results, late, reqs))
    else:
        results = impl.backward(call, out_grad, grads, reqs)
    return tuple(None if r == "null" else res for res, r in zip(results, reqs))


def explain(data: Any, weight: Any, bias: Any = None, train: Optional[bool] = None,
            **params: Any) -> str:
    """Which implementation a Deconvolution forward call would use, and why.

    For oneDNN it names the kernel and layouts the planner chose, how the bias
    is applied, and the verdict of the plan-time check against the NumPy path
    (with any kernel it rejected).

    >>> import numpy as np, mxdeconv
    >>> text = mxdeconv.explain(np.ones((1, 2, 3, 3)), np.ones((2, 1, 2, 2)),
    ...                         kernel=(2, 2), num_filter=1)
    >>> text.splitlines()[0]           # float64 runs on NumPy; the next lines say why
    'Deconvolution: numpy would run'
    """
    call = make_call(data, weight, bias, params, train)
    text = OPERATOR.explain(call)
    plan = call.plan
    if plan is not None:
        if plan.bias is None:
            bias_note = "no bias"
        elif plan.bias_fused:
            bias_note = "bias fused"
        else:
            bias_note = "bias added by a separate primitive"
        text += (f"\n  oneDNN forward kernel {plan.impl} ({bias_note}); layouts: src "
                 f"{plan.src.name}, weights {plan.weights.name}, dst {plan.dst.name}"
                 f"\n  check: {plan.verdict.verdict()}")
    return text
