"""Check a oneDNN plan on its real geometry against an independent computation.

oneDNN picks among many kernels by shape and ISA, and some are wrong on some
geometries: oneDNN 3.2's ``brgconv_strided`` adds a fused bias several times
on some output pixels of layers with hundreds of channels or large kernels.
So before a new plan's result reaches anyone, the planner runs it once here,
on the real geometry, and compares it with the NumPy path's result:

* Every value is a small integer, so every product and partial sum is exact
  in float32 (and in bfloat16 inputs): a correct kernel agrees exactly, up to
  the result dtype's rounding, whatever order it sums in.
* Every image of the batch holds one image times a small factor, so a single
  reference image (cheap) gives the expected value of every image, and every
  batch position, channel and pixel is still compared.
* The bias is non-zero everywhere (a bias added twice is off by at least 1),
  and a req=add plan adds onto a known prefill.

A check is made once per planner key (:func:`forward_check` and kin build it)
and then called on each candidate plan: inputs and the reference are computed
on the first call and reused for the next candidates.  A call returns None
when the plan agrees, else why it does not.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from . import fallback
from .base import MXNetError
from .dtypes import BFLOAT16
from .params import DeconvGeometry, infer_geometry

_SEED = 20261203
#: Per-image factors: images differ, values stay small integers.
_BATCH_FACTORS = (1, -1, 2, -2)
_WEIGHT_GRAD_FACTORS = (1, 2)
#: Below this bound on a sum's magnitude, float32 represents every partial sum.
_EXACT_LIMIT = 2 ** 24

Check = Callable[[Any], Optional[str]]


def _integers(rng: np.random.Generator, shape: Sequence[int],
              nonzero: bool = False) -> np.ndarray:
    """Small integers (int8): in [-2, 2], or in {-2, -1, 1, 2} when ``nonzero``."""
    if nonzero:
        return rng.choice(np.array([-2, -1, 1, 2], dtype=np.int8), size=tuple(shape))
    return rng.integers(-2, 3, size=tuple(shape), dtype=np.int8)


def _one_image(geom: DeconvGeometry) -> DeconvGeometry:
    return infer_geometry(geom.param, (1,) + geom.data_shape[1:])


def _per_image(factors: Sequence[int], batch: int, ndim: int) -> np.ndarray:
    """Factors cycled over the batch (int8), shaped to broadcast over (N, C, *spatial)."""
    return np.resize(np.array(factors, dtype=np.int8), batch).reshape(
        (batch,) + (1,) * (ndim - 1))


def _reference_dtype(bound: float) -> np.dtype:
    """float32 when every partial sum is exact in it (twice as fast), else float64."""
    return np.dtype(np.float32 if bound < _EXACT_LIMIT else np.float64)


def _compare(what: str, got: Optional[np.ndarray], expected: Any, bound: float,
             dtype: np.dtype) -> Optional[str]:
    """None if ``got`` equals the expected values within what exact integer
    inputs allow.  ``expected`` is an array, or a function of an image index
    giving that image's expected values (compared one image at a time, so the
    check's memory stays near one image beyond the result itself).

    ``bound`` bounds the magnitude of every partial sum: below 2**24 float32
    sums are exact (tolerance 0.5, far below the error of any wrong term);
    above, rounding of the partial sums is allowed for.  A bfloat16 result is
    rounded to 8 significant bits on top.
    """
    if got is None:
        return f"{what}: no result"
    images = ((n, expected(n)) for n in range(got.shape[0])) if callable(expected) else \
        [(None, expected)]
    wrong_total, worst = 0, None
    for image, want in images:
        have = got if image is None else got[image]
        if have.shape != want.shape:
            return f"{what}: shape {have.shape}, expected {want.shape}"
        tolerance = 0.5 + (bound * 2.0 ** -20 if bound >= _EXACT_LIMIT else 0.0)
        if BFLOAT16 is not None and dtype == BFLOAT16:
            tolerance = tolerance + np.abs(want) * 2.0 ** -7
        error = np.abs(have.astype(want.dtype) - want)
        wrong = ~(error <= tolerance)  # NaN counts as wrong
        count = int(wrong.sum())
        if not count:
            continue
        wrong_total += count
        at = np.unravel_index(int(np.argmax(np.where(
            wrong, np.nan_to_num(error, nan=np.inf), -1.0))), error.shape)
        if worst is None or not error[at] <= worst[0]:
            index = at if image is None else (image,) + tuple(at)
            worst = (float(error[at]), index, float(want[at]), float(have[at]))
    if worst is None:
        return None
    return (f"{what}: {wrong_total} of {got.size} values wrong, max error {worst[0]:g} at "
            f"{tuple(int(i) for i in worst[1])} (expected {worst[2]:g}, got {worst[3]:g})")


class CheckUnavailable(MXNetError):
    """The check could not run (not enough memory): no verdict on the kernel."""


def _run(what: str, run: Callable[[], Any]) -> Tuple[Any, Optional[str]]:
    """The plan's result, or the failure as a reason (a kernel may also crash out).
    Running out of memory says nothing about the kernel: it is not a verdict."""
    try:
        return run(), None
    except MemoryError as error:
        raise CheckUnavailable(f"{what}: not enough memory to run the check ({error})") \
            from None
    except Exception as error:  # noqa: BLE001 - any failure rejects the candidate
        return None, f"{what}: {type(error).__name__}: {error}"


def _lazy(prepare: Callable[[], Check]) -> Check:
    """A check whose inputs and reference are made on its first call only."""
    prepared: list = []

    def check(plan: Any) -> Optional[str]:
        if not prepared:
            try:
                prepared.append(prepare())
            except MemoryError as error:
                raise CheckUnavailable(f"not enough memory for the check's reference "
                                       f"({error})") from None
        return prepared[0](plan)
    return check


def forward_check(geom: DeconvGeometry, dtype: Any, accumulate: bool) -> Check:
    """Forward: data_n = factor_n * x, so out_n = factor_n * ref(x) + bias (+ prefill)."""
    def prepare() -> Check:
        rng = np.random.default_rng(_SEED)
        param = geom.param
        bound = 8.0 * geom.in_channels // param.num_group * math.prod(param.kernel) + 4.0
        ref_dtype = _reference_dtype(bound)
        one = _one_image(geom)
        image = _integers(rng, one.data_shape)
        weight = _integers(rng, geom.weight_shape)
        factors = _per_image(_BATCH_FACTORS, geom.data_shape[0], len(geom.data_shape))
        reference = fallback.forward(one, image.astype(ref_dtype), weight.astype(ref_dtype),
                                     None)[0]
        bias = None if geom.bias_shape is None else _integers(rng, geom.bias_shape,
                                                              nonzero=True)
        prefill = _integers(rng, geom.out_shape) if accumulate else None
        scale = np.asarray(_BATCH_FACTORS, dtype=ref_dtype)

        def expected(n: int) -> np.ndarray:
            want = scale[n % len(scale)] * reference
            if bias is not None:
                want += bias.reshape((-1,) + (1,) * (want.ndim - 1))
            if prefill is not None:
                want += prefill[n]
            return want

        inputs = ((factors * image).astype(dtype), weight.astype(dtype),
                  None if bias is None else bias.astype(dtype),
                  None if prefill is None else prefill.astype(dtype))

        def check(plan: Any) -> Optional[str]:
            got, failure = _run("forward", lambda: plan.run_plain(*inputs))
            return failure or _compare("forward", got, expected, bound, dtype)
        return check
    return _lazy(prepare)


def backward_data_check(geom: DeconvGeometry, dtype: Any) -> Check:
    """Backward data: out_grad_n = factor_n * g, so data_grad_n = factor_n * ref(g)."""
    def prepare() -> Check:
        rng = np.random.default_rng(_SEED + 1)
        param = geom.param
        bound = 8.0 * (param.num_filter // param.num_group) * math.prod(param.kernel)
        ref_dtype = _reference_dtype(bound)
        one = _one_image(geom)
        grad = _integers(rng, one.out_shape)
        weight = _integers(rng, geom.weight_shape)
        factors = _per_image(_BATCH_FACTORS, geom.data_shape[0], len(geom.data_shape))
        reference = fallback.backward(one, grad.astype(ref_dtype),
                                      np.zeros(one.data_shape, ref_dtype),
                                      weight.astype(ref_dtype), need_data=True,
                                      need_weight=False, need_bias=False)[0][0]
        scale = np.asarray(_BATCH_FACTORS, dtype=ref_dtype)
        inputs = ((factors * grad).astype(dtype), weight.astype(dtype))

        def check(plan: Any) -> Optional[str]:
            got, failure = _run("backward data", lambda: plan.run_plain(*inputs))
            return failure or _compare("backward data", got,
                                       lambda n: scale[n % len(scale)] * reference, bound,
                                       dtype)
        return check
    return _lazy(prepare)


def backward_weights_check(geom: DeconvGeometry, dtype: Any) -> Check:
    """Backward weights: data_n = factor_n * x and out_grad_n = g, so
    weight_grad = sum(factors) * ref(x, g) and bias_grad = N * ref_bias(g)."""
    def prepare() -> Check:
        rng = np.random.default_rng(_SEED + 2)
        batch = geom.data_shape[0]
        bound = 8.0 * batch * math.prod(geom.spatial_in)
        bias_bound = 2.0 * batch * math.prod(geom.spatial_out)
        ref_dtype = _reference_dtype(max(bound, bias_bound))
        one = _one_image(geom)
        image = _integers(rng, one.data_shape)
        grad = _integers(rng, one.out_shape)
        factors = _per_image(_WEIGHT_GRAD_FACTORS, batch, len(geom.data_shape))
        _, weight_ref, bias_ref = fallback.backward(
            one, grad.astype(ref_dtype), image.astype(ref_dtype),
            np.zeros(geom.weight_shape, ref_dtype), need_data=False, need_weight=True,
            need_bias=geom.bias_shape is not None)
        weight_expected = int(factors.sum()) * weight_ref
        bias_expected = None if bias_ref is None else batch * bias_ref
        inputs = ((factors * image).astype(dtype),
                  np.broadcast_to(grad, geom.out_shape).astype(dtype))

        def check(plan: Any) -> Optional[str]:
            got, failure = _run("backward weights", lambda: plan.run_plain(*inputs))
            if failure:
                return failure
            weight_grad, bias_grad = got
            reason = _compare("backward weights", weight_grad, weight_expected, bound, dtype)
            if reason is None and bias_expected is not None:
                reason = _compare("backward bias", bias_grad, bias_expected, bias_bound,
                                  dtype)
            return reason
        return check
    return _lazy(prepare)
