"""Check a oneDNN plan on its real geometry against an independent computation.

oneDNN picks among many kernels by shape and ISA, and some are wrong on some
geometries: oneDNN 3.2's ``brgconv_strided`` adds a fused bias several times
on some output pixels of layers with hundreds of channels or large kernels.
So before a new plan's result reaches anyone, the planner runs it once here,
on the real geometry, and compares it with the NumPy path's float64 result:

* Every value is a small integer, so every product and partial sum is exact
  in float32 (and in bfloat16 inputs): a correct kernel agrees exactly, up to
  the result dtype's rounding, whatever order it sums in.
* Every image of the batch holds one image times a small factor, so a single
  reference image gives the expected value of every image cheaply, and every
  batch position, channel and pixel is still compared.
* The bias is non-zero everywhere (a bias added twice is off by at least 1),
  and a req=add plan adds onto a known prefill.

Each function returns None when the plan agrees, else why it does not.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from . import fallback
from .ndarray import BFLOAT16
from .params import DeconvGeometry, infer_geometry

_SEED = 20261203
#: Per-image factors: images differ, values stay small integers.
_BATCH_FACTORS = (1, -1, 2, -2)
_WEIGHT_GRAD_FACTORS = (1, 2)
#: Below this bound on a sum's magnitude, float32 represents every partial sum.
_EXACT_LIMIT = 2 ** 24


def _integers(rng: np.random.Generator, shape: Sequence[int],
              nonzero: bool = False) -> np.ndarray:
    if nonzero:
        return rng.choice(np.array([-2.0, -1.0, 1.0, 2.0]), size=tuple(shape))
    return rng.integers(-2, 3, size=tuple(shape)).astype(np.float64)


def _one_image(geom: DeconvGeometry) -> DeconvGeometry:
    return infer_geometry(geom.param, (1,) + geom.data_shape[1:])


def _per_image(factors: Sequence[int], batch: int, ndim: int) -> np.ndarray:
    """Factors cycled over the batch, shaped to broadcast over (N, C, *spatial)."""
    return np.resize(np.array(factors, dtype=np.float64), batch).reshape(
        (batch,) + (1,) * (ndim - 1))


def _compare(what: str, got: Optional[np.ndarray], expected: np.ndarray, bound: float,
             dtype: np.dtype) -> Optional[str]:
    """None if ``got`` equals ``expected`` within what exact integer inputs allow.

    ``bound`` bounds the magnitude of every partial sum: below 2**24 float32
    sums are exact (tolerance 0.5, far below the error of any wrong term);
    above, rounding of the partial sums is allowed for.  A bfloat16 result is
    rounded to 8 significant bits on top.
    """
    if got is None:
        return f"{what}: no result"
    got = np.asarray(got, dtype=np.float64)
    if got.shape != expected.shape:
        return f"{what}: shape {got.shape}, expected {expected.shape}"
    tolerance = 0.5 + (bound * 2.0 ** -20 if bound >= _EXACT_LIMIT else 0.0)
    if BFLOAT16 is not None and dtype == BFLOAT16:
        tolerance = tolerance + np.abs(expected) * 2.0 ** -7
    error = np.abs(got - expected)
    wrong = ~(error <= tolerance)  # NaN counts as wrong
    if not wrong.any():
        return None
    worst = np.unravel_index(int(np.argmax(np.where(wrong, np.nan_to_num(error, nan=np.inf),
                                                    -1.0))), error.shape)
    return (f"{what}: {int(wrong.sum())} of {error.size} values wrong, max error "
            f"{float(error[worst]):g} at {tuple(int(i) for i in worst)} (expected "
            f"{float(expected[worst]):g}, got {float(got[worst]):g})")


def _run(what: str, run: Any) -> Any:
    """The plan's result, or the failure as a reason (a kernel may also crash out)."""
    try:
        return run(), None
    except Exception as error:  # noqa: BLE001 - any failure rejects the candidate
        return None, f"{what}: {type(error).__name__}: {error}"


def check_forward(plan: Any, geom: DeconvGeometry, accumulate: bool) -> Optional[str]:
    """Forward: data = factor_n * x, so out_n = factor_n * ref(x) + bias (+ prefill)."""
    dtype = plan.dst.np_dtype
    rng = np.random.default_rng(_SEED)
    one = _one_image(geom)
    image = _integers(rng, one.data_shape)
    weight = _integers(rng, geom.weight_shape)
    factors = _per_image(_BATCH_FACTORS, geom.data_shape[0], len(geom.data_shape))
    expected = factors * fallback.forward(one, image, weight, None)
    bias = None
    if geom.bias_shape is not None:
        bias = _integers(rng, geom.bias_shape, nonzero=True)
        expected = expected + bias.reshape((1, -1) + (1,) * (expected.ndim - 2))
    prefill = None
    if accumulate:
        prefill = _integers(rng, geom.out_shape)
        expected = expected + prefill
    param = geom.param
    terms = geom.in_channels // param.num_group * math.prod(param.kernel)
    bound = 8.0 * terms + 4.0
    got, failure = _run("forward", lambda: plan.run_plain(
        (factors * image).astype(dtype), weight.astype(dtype),
        None if bias is None else bias.astype(dtype),
        None if prefill is None else prefill.astype(dtype)))
    return failure or _compare("forward", got, expected, bound, dtype)


def check_backward_data(plan: Any, geom: DeconvGeometry) -> Optional[str]:
    """Backward data: out_grad_n = factor_n * g, so data_grad_n = factor_n * ref(g)."""
    dtype = plan.diff_src.np_dtype
    rng = np.random.default_rng(_SEED + 1)
    one = _one_image(geom)
    grad = _integers(rng, one.out_shape)
    weight = _integers(rng, geom.weight_shape)
    factors = _per_image(_BATCH_FACTORS, geom.data_shape[0], len(geom.data_shape))
    reference = fallback.backward(one, grad, np.zeros(one.data_shape), weight,
                                  need_data=True, need_weight=False, need_bias=False)[0]
    param = geom.param
    bound = 8.0 * (param.num_filter // param.num_group) * math.prod(param.kernel)
    got, failure = _run("backward data", lambda: plan.run_plain(
        (factors * grad).astype(dtype), weight.astype(dtype)))
    return failure or _compare("backward data", got, factors * reference, bound, dtype)


def check_backward_weights(plan: Any, geom: DeconvGeometry) -> Optional[str]:
    """Backward weights: data_n = factor_n * x and out_grad_n = g, so
    weight_grad = sum(factors) * ref(x, g) and bias_grad = N * ref_bias(g)."""
    dtype = plan.diff_weights.np_dtype
    rng = np.random.default_rng(_SEED + 2)
    one = _one_image(geom)
    batch = geom.data_shape[0]
    image = _integers(rng, one.data_shape)
    grad = _integers(rng, one.out_shape)
    factors = _per_image(_WEIGHT_GRAD_FACTORS, batch, len(geom.data_shape))
    _, weight_ref, bias_ref = fallback.backward(
        one, grad, image, np.zeros(geom.weight_shape), need_data=False, need_weight=True,
        need_bias=geom.bias_shape is not None)
    bound = 8.0 * batch * math.prod(geom.spatial_in)
    got, failure = _run("backward weights", lambda: plan.run_plain(
        (factors * image).astype(dtype), np.broadcast_to(grad, geom.out_shape).astype(dtype)))
    if failure:
        return failure
    weight_grad, bias_grad = got
    reason = _compare("backward weights", weight_grad, float(factors.sum()) * weight_ref,
                      bound, dtype)
    if reason is None and bias_ref is not None:
        bias_bound = 2.0 * batch * math.prod(geom.spatial_out)
        reason = _compare("backward bias", bias_grad, batch * bias_ref, bias_bound, dtype)
    return reason
