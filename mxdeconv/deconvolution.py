"""The Deconvolution operator: argument checks, its two implementations, dispatch.

Everything a user can get wrong is checked here, before any buffer is
written, so that an error leaves inputs and outputs untouched.  The checked
call then goes to the oneDNN implementation (``_ops``) when its support check
passes, otherwise to the NumPy fallback.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import autograd, fallback, registry
from .base import MXNetError
from .ndarray import BFLOAT16, NDArray, as_ndarray, array
from .params import DeconvGeometry, check_shape, infer_geometry, parse_params

REQS = ("write", "inplace", "add", "null")
# float16 has no oneDNN kernels on CPUs without AVX-512 FP16: it stays on NumPy.
ONEDNN_DTYPES = (np.dtype(np.float32),) + ((BFLOAT16,) if BFLOAT16 is not None else ())
OPERATOR = registry.operator("Deconvolution")

try:
    from ._loader import load_extension
    _ops = load_extension()
    EXTENSION_ERROR: Optional[str] = None
except ImportError as error:  # reported by runtime_info(), explain() and the tests
    _ops = None
    EXTENSION_ERROR = f"the oneDNN extension failed to load: {error}"


@dataclass
class Call:
    """A validated Deconvolution call."""

    geom: DeconvGeometry
    data: NDArray
    weight: NDArray
    bias: Optional[NDArray]
    training: bool

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype


def _check_req(name: str, req: Any) -> str:
    if req not in REQS:
        raise MXNetError(f"{name} must be one of {REQS}, got {req!r}")
    return "write" if req == "inplace" else req  # nothing here aliases an input


def _check_array(name: str, arr: NDArray, shape: Sequence[int], dtype: np.dtype) -> None:
    check_shape(name, arr.shape, shape)
    if arr.dtype != dtype:
        raise MXNetError(f"{name} dtype mismatch: expected {dtype}, got {arr.dtype}")


def make_call(data: Any, weight: Any, bias: Any, params: dict,
              training: Optional[bool]) -> Call:
    """Validate inputs and parameters; copies NumPy inputs (never aliases them)."""
    param = parse_params(params)
    data = as_ndarray(data, "data")
    weight = as_ndarray(weight, "weight")
    geom = infer_geometry(param, data.shape)
    _check_array("weight", weight, geom.weight_shape, data.dtype)
    if param.no_bias:
        if bias is not None:
            raise MXNetError("bias was given but no_bias=True; pass no_bias=False to use it")
    else:
        if bias is None:
            raise MXNetError(f"no_bias=False needs a bias of shape {geom.bias_shape}")
        bias = as_ndarray(bias, "bias")
        _check_array("bias", bias, geom.bias_shape, data.dtype)
    return Call(geom, data, weight, bias,
                autograd.is_training() if training is None else bool(training))


# -- the NumPy implementation ---------------------------------------------------
def _store(result: np.ndarray, target: Optional[NDArray], req: str) -> NDArray:
    """Write or add a NumPy result into ``target`` (or wrap it in a new NDArray)."""
    if target is None:
        return array(result, dtype=result.dtype)
    plain = target.reorder_to_default()._buffer
    if req == "add":
        plain += result
    else:
        np.copyto(plain, result)
    return target


def _plain(arr: Optional[NDArray]) -> Optional[np.ndarray]:
    return None if arr is None else arr.reorder_to_default()._buffer


def _numpy_forward(call: Call, out: Optional[NDArray], req: str) -> NDArray:
    result = fallback.forward(call.geom, _plain(call.data), _plain(call.weight),
                              _plain(call.bias))
    return _store(result, out, req)


def _numpy_backward(call: Call, out_grad: NDArray, grads, reqs) -> Tuple:
    needed = [r != "null" for r in reqs]
    results = fallback.backward(call.geom, _plain(out_grad), _plain(call.data),
                                _plain(call.weight), *needed)
    return tuple(None if r is None else _store(r, g, q)
                 for r, g, q in zip(results, grads, reqs))


def _numpy_supports(call: Call) -> Optional[str]:
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
    return None


def _onednn_forward(call: Call, out: Optional[NDArray], req: str) -> NDArray:
    return _ops.deconv_forward(call.geom, call.data, call.weight, call.bias, out,
                               req == "add", call.training)


def _onednn_backward(call: Call, out_grad: NDArray, grads, reqs) -> Tuple:
    return _ops.deconv_backward(call.geom, out_grad, call.data, call.weight, tuple(grads),
                                tuple(r == "add" for r in reqs),
                                tuple(r != "null" for r in reqs))


OPERATOR.register(registry.Implementation(registry.ONEDNN, _onednn_supports,
                                          _onednn_forward, _onednn_backward))
OPERATOR.register(registry.Implementation(registry.NUMPY, _numpy_supports,
                                          _numpy_forward, _numpy_backward))


# -- public entry points ----------------------------------------------------------
def deconvolution(data: Any, weight: Any, bias: Any = None, out: Optional[NDArray] = None,
                  req: str = "write", train: Optional[bool] = None,
                  **params: Any) -> Optional[NDArray]:
    """See :func:`mxdeconv.nd.Deconvolution`."""
    req = _check_req("req", req)
    call = make_call(data, weight, bias, params, train)
    if out is not None:
        if not isinstance(out, NDArray):
            raise TypeError(f"out must be an NDArray, got {type(out).__name__}")
        _check_array("out", out, call.geom.out_shape, call.dtype)
    elif req == "add":
        raise MXNetError("req='add' accumulates into out=, which was not given")
    if req == "null":
        return out
    return OPERATOR.select(call).forward(call, out, req)


def deconvolution_backward(out_grad: Any, data: Any, weight: Any, bias: Any = None,
                           req: Union[str, Sequence[str]] = "write",
                           grads: Optional[Sequence[Optional[NDArray]]] = None,
                           train: Optional[bool] = True,
                           **params: Any) -> Tuple[Optional[NDArray], ...]:
    """See :func:`mxdeconv.nd.Deconvolution_backward`."""
    reqs = [req] * 3 if isinstance(req, str) else list(req)
    if len(reqs) != 3:
        raise MXNetError(f"req must be one string or three (data, weight, bias), got {req!r}")
    reqs = [_check_req(f"req[{i}]", r) for i, r in enumerate(reqs)]
    grads = [None] * 3 if grads is None else list(grads)
    if len(grads) != 3:
        raise MXNetError(f"grads must hold three entries (data, weight, bias), got {len(grads)}")
    call = make_call(data, weight, bias, params, train)
    geom = call.geom
    out_grad = as_ndarray(out_grad, "out_grad")
    _check_array("out_grad", out_grad, geom.out_shape, call.dtype)
    if geom.param.no_bias:
        reqs[2], grads[2] = "null", None
    shapes = (geom.data_shape, geom.weight_shape, geom.bias_shape)
    for name, grad, shape, r in zip(("data_grad", "weight_grad", "bias_grad"),
                                    grads, shapes, reqs):
        if grad is not None:
            if not isinstance(grad, NDArray):
                raise TypeError(f"{name} must be an NDArray, got {type(grad).__name__}")
            _check_array(name, grad, shape, call.dtype)
        elif r == "add":
            raise MXNetError(f"req='add' for {name} accumulates into grads[...], "
                             "which was not given")
    if all(r == "null" for r in reqs):
        return (None, None, None)
    results = OPERATOR.select(call).backward(call, out_grad, grads, reqs)
    return tuple(None if r == "null" else res for res, r in zip(results, reqs))


def explain(data: Any, weight: Any, bias: Any = None, train: Optional[bool] = None,
            **params: Any) -> str:
    """Which implementation a Deconvolution call would use, and why."""
    call = make_call(data, weight, bias, params, train)
    text = OPERATOR.explain(call)
    if OPERATOR.reasons(call).get(registry.ONEDNN) is None:
        info = _ops.plan_info(call.geom, str(call.dtype), call.training)
        text += (f"\n  oneDNN forward kernel {info['forward_impl']}; layouts: src "
                 f"{info['src']}, weights {info['weights']}, dst {info['dst']}")
    return text
