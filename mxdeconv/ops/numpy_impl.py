"""The NumPy implementation of Deconvolution: the fallback for every call
(float64, float16 computed in float32, any geometry), with the same results
as the oneDNN path.  The arithmetic is in :mod:`mxdeconv.semantics.deconv_numpy`.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from mxdeconv.semantics import activations, deconv_numpy
from mxdeconv._core.buffers import PHYSICAL_MEMORY
from mxdeconv.ndarray.results import FLOAT16, check_float16_overflow, final_values, plain, store
from mxdeconv.ndarray.ndarray import NDArray
from .validation import Call


def forward(call: Call, out: Optional[NDArray], req: str) -> NDArray:
    data, weight, bias = plain(call.data), plain(call.weight), plain(call.bias)
    with np.errstate(over="ignore", invalid="ignore"):  # NaN/inf propagate silently
        result = deconv_numpy.forward(call.geom, data, weight, bias)
    if call.act_type is not None:
        result = activations.forward(result, call.act_type, result)
    value = final_values(result, out, req)
    if result.dtype == FLOAT16:
        check_float16_overflow(("output",), (value,), (data, weight, bias))
    return store(value, out, req)


def backward(call: Call, out_grad: NDArray, grads: Sequence[Optional[NDArray]],
             reqs: Sequence[str]) -> Tuple:
    needed = [r != "null" for r in reqs]
    og, data, weight = plain(out_grad), plain(call.data), plain(call.weight)
    with np.errstate(over="ignore", invalid="ignore"):
        results = deconv_numpy.backward(call.geom, og, data, weight, *needed)
    values = [None if r is None else final_values(r, g, q)
              for r, g, q in zip(results, grads, reqs)]
    if data.dtype == FLOAT16:  # every check before the first store
        check_float16_overflow(("data_grad", "weight_grad", "bias_grad"), values,
                                (og, data, weight))
    return tuple(None if v is None else store(v, g, q)
                 for v, g, q in zip(values, grads, reqs))


def supports(call: Call) -> Optional[str]:
    need = deconv_numpy.workspace_bytes(call.geom, call.dtype)
    if need > PHYSICAL_MEMORY:
        return (f"the NumPy fallback would need {need} bytes of work space, more than "
                f"this machine's {PHYSICAL_MEMORY} bytes of memory")
    return None


