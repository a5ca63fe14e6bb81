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
* A plan ending in an activation is checked so that saturation cannot hide a
  wrong pre-activation (tanh(59) == tanh(65) in float32): see
  :func:`forward_check` and ``docs/kernel_check.rst``.
* An exact float32 result is first compared through random projections of
  its channels (Freivalds' check, :mod:`.projections`): the reference of
  the projections costs a channel count less than the full reference (the
  3-D benchmark layer's three passes: 2 ms instead of 38, on its second
  call).  A result they reject is compared element by element, to say where
  it is wrong.

A check is made once per planner key (:func:`forward_check` and kin build it)
and then called on each candidate plan: inputs and the reference are computed
on the first call and reused for the next candidates.  A call returns None
when the plan agrees, else why it does not.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import threading
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from mxdeconv.semantics import activations, deconv_numpy
from .blas_threads import one_blas_thread
from .projections import FLOAT32_EXACT_LIMIT, PROJECTIONS, Projection
from mxdeconv._core.buffers import aligned_empty
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.dtypes import BFLOAT16_NAME
from mxdeconv.semantics.attributes import DeconvGeometry, infer_geometry
from mxdeconv.semantics.phases import on_grid, phase_grid, phases

#: Part of the plan cache's key: a kept choice is a verdict of this check, so
#: this changes whenever what the check verifies does.
CHECK_VERSION = 2
_SEED = 20261203
#: Per-image factors: images differ, values stay small integers.
_BATCH_FACTORS = (1, -1, 2, -2)
_WEIGHT_GRAD_FACTORS = (1, 2)
#: Bytes of im2col columns the reference forms at once (deconv_numpy's
#: ``column_budget``): a check runs on a new layer's early calls, where every
#: fresh page costs a fault (under NumPy's 4 MiB huge-page threshold, whose
#: first touch cost 30-120 ms on a lazily backed VM).
_REFERENCE_COLUMNS = 2 << 20

Check = Callable[[Any], Optional[str]]

#: oneDNN's own acceptance bound on its float32 eltwise results, relative to
#: max(|expected|, 1): benchdnn's threshold (tests/benchdnn/eltwise/eltwise.cpp,
#: oneDNN v3.2) is 4e-6, and 4e-5 for the algorithms with longer
#: approximations (tanh and soft_relu among them); relu is exact.
ELTWISE_TOLERANCE = {"relu": 0.0, "sigmoid": 4e-6, "tanh": 4e-5, "softrelu": 4e-5}
#: The conditioned check of a fused saturating activation scales its exact
#: inputs by powers of two so that every pre-activation lies in [-RADIUS, RADIUS].
RADIUS = 1.0
#: ... and requires the smallest possible kernel error (one unit of the
#: scaled integers) to move the result by MARGIN tolerances at least (2 would
#: do for a kernel as far off as the bound allows).
MARGIN = 4.0
#: Per-image factors of the conditioned check: 1 and -1 keep the peak low.
_ACT_BATCH_FACTORS = (1, -1)


def _one_image_with(geom: DeconvGeometry, in_channels: int, num_filter: int
                    ) -> DeconvGeometry:
    """One image of ``geom`` with other channel counts (the same groups, crops
    and spatial shapes): the layer of a projected forward reference."""
    param = dataclasses.replace(geom.param, num_filter=num_filter)
    return infer_geometry(param, (1, in_channels) + geom.spatial_in)


class Unverifiable(str):
    """A check's reason for refusing a plan that is not a verdict on the
    kernel: the check cannot see a wrong result on this geometry (the planner
    takes the next candidate without a KernelDefectWarning)."""


def _integers(bits: np.random.BitGenerator, shape: Sequence[int],
              nonzero: bool = False) -> np.ndarray:
    """Small random integers (int8): in {-2, -1, 0, 1}, or in {-2, -1, 1, 2}
    when ``nonzero``.  The top two bits of raw random bytes: a big layer's
    weight takes 0.7 ms so, 8 ms with ``Generator.integers``, on each new
    layer's first call."""
    count = math.prod(shape)
    raw = bits.random_raw(-(-count // 8)).view(np.int8)[:count]
    values = raw >> 6  # arithmetic shift: the sign bit and the next
    if nonzero:
        values += values >= 0
    return values.reshape(tuple(shape))


def _pooled(values: np.ndarray, dtype: Any) -> np.ndarray:
    """The check's small integers (int8) as a plan takes them.  A float32 plan
    takes the int8 values themselves: the binding converts them as it lays
    them out (``guarded_from_plain``: a big layer's weight read as 2 MB, not
    first widened into 8 MB of fresh float32).  Other dtypes: converted in a
    block of mxdeconv's pool.  A check's inputs are as big as the layer's:
    freed, the pool's blocks serve the calls that follow, where NumPy's would
    hand the layer fresh memory again (and advise its blocks of 4 MiB and more
    onto huge pages, whose first touch cost a DCGAN weight's conversion 20-50
    ms on a lazily backed VM)."""
    if str(dtype) == "float32" and values.dtype == np.int8:
        return values
    return _widened(values, dtype)


def _widened(values: np.ndarray, dtype: Any) -> np.ndarray:
    """``values`` converted to ``dtype`` in a block of mxdeconv's pool."""
    converted = aligned_empty(values.shape, dtype)
    np.copyto(converted, values, casting="unsafe")
    return converted


def _scaled(factors: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``factors * values`` (int8: each image a small multiple of one), in a
    block of mxdeconv's pool (see _pooled)."""
    shape = np.broadcast_shapes(factors.shape, values.shape)
    return np.multiply(factors, values, out=aligned_empty(shape, np.int8))


def _one_image(geom: DeconvGeometry) -> DeconvGeometry:
    return infer_geometry(geom.param, (1,) + geom.data_shape[1:])


def _per_image(factors: Sequence[int], batch: int, ndim: int) -> np.ndarray:
    """Factors cycled over the batch (int8), shaped to broadcast over (N, C, *spatial)."""
    return np.resize(np.array(factors, dtype=np.int8), batch).reshape(
        (batch,) + (1,) * (ndim - 1))


def _reference_dtype(bound: float) -> np.dtype:
    """float32 when every partial sum is exact in it (twice as fast), else float64."""
    return np.dtype(np.float32 if bound < FLOAT32_EXACT_LIMIT else np.float64)


def _malformed(what: str, got: Any, shape: Sequence[int]) -> Optional[str]:
    """Why ``got`` cannot be the result at all (None: an array of ``shape``
    holding real floating-point values), whatever its values."""
    if got is None:
        return f"{what}: no result"
    if not isinstance(got, np.ndarray):
        return f"{what}: a {type(got).__name__}, expected an array of shape {tuple(shape)}"
    if got.shape != tuple(shape):
        return f"{what}: shape {got.shape}, expected {tuple(shape)}"
    if got.dtype.kind != "f" and str(got.dtype) != BFLOAT16_NAME:
        return f"{what}: dtype {got.dtype}, expected floating-point values"
    return None


def _compare(what: str, got: Any, expected: Any, bound: float, dtype: np.dtype,
             shape: Sequence[int],
             tolerance: Optional[Callable[[np.ndarray], Any]] = None) -> Optional[str]:
    """None if ``got`` is an array of ``shape`` whose values equal the expected
    values within what exact integer inputs allow.  ``expected`` is an array,
    or a function of an image index giving that image's expected values
    (compared one image at a time, so the check's memory stays near one image
    beyond the result itself).

    ``bound`` bounds the magnitude of every partial sum: below 2**24 float32
    sums are exact (tolerance 0.5, far below the error of any wrong term);
    above, rounding of the partial sums is allowed for.  ``tolerance``, a
    function of the expected values, replaces that for results that are not
    integers (activations).  A bfloat16 result is rounded to 8 significant
    bits on top.
    """
    malformed = _malformed(what, got, shape)
    if malformed is not None:
        return malformed
    images = ((n, expected(n)) for n in range(got.shape[0])) if callable(expected) else \
        [(None, expected)]
    wrong_total, worst = 0, None
    for image, want in images:
        have = got if image is None else got[image]
        if have.shape != want.shape:
            return f"{what}: shape {have.shape}, expected {want.shape}"
        if tolerance is None:
            if bound < FLOAT32_EXACT_LIMIT and have.dtype == want.dtype and \
                    np.array_equal(have, want):
                continue  # exact, as a right kernel is here: one pass, no temporaries
            allowed = 0.5 + (bound * 2.0 ** -20 if bound >= FLOAT32_EXACT_LIMIT else 0.0)
        else:
            allowed = tolerance(want)
        if str(dtype) == BFLOAT16_NAME:  # a oneDNN dtype name, or the NumPy dtype
            allowed = allowed + np.abs(want) * 2.0 ** -7
        error = np.abs(have.astype(want.dtype) - want)
        wrong = ~(error <= allowed)  # NaN counts as wrong
        if tolerance is None and bound < FLOAT32_EXACT_LIMIT:
            # Every partial sum is an integer, exact in float32 and an integer
            # again once rounded to bfloat16: a fraction is a wrong value within
            # the rounding allowance (a kernel reading uninitialised memory).
            exact = have.astype(np.float64)
            wrong |= exact != np.rint(exact)
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
                with one_blas_thread():
                    prepared.append(prepare())
            except MemoryError as error:
                raise CheckUnavailable(f"not enough memory for the check's reference "
                                       f"({error})") from None
        return prepared[0](plan)
    return check


class _ForwardCase:
    """The forward check's exact inputs and reference: data_n = factor_n * x,
    so out_n = factor_n * ref(x) + bias (+ prefill).  The full reference
    (:attr:`reference`) is made when a comparison needs it: an exact float32
    result is compared through projections first (:class:`.projections.Projection`)."""

    def __init__(self, geom: DeconvGeometry, dtype: Any, accumulate: bool) -> None:
        bits = np.random.PCG64(_SEED)
        param = geom.param
        self.geom, self.dtype = geom, dtype
        self.bound = 8.0 * geom.in_channels // param.num_group * math.prod(param.kernel) + 4.0
        self.ref_dtype = _reference_dtype(self.bound)
        self.image = _integers(bits, _one_image(geom).data_shape)
        # Never 0: a channel whose every weight is 0 (a depthwise 1x1 layer's,
        # one weight each) would hide any defect on it.
        self.weight = _integers(bits, geom.weight_shape, nonzero=True)
        self.batch, self.ndim = geom.data_shape[0], len(geom.data_shape)
        factors = _per_image(_BATCH_FACTORS, self.batch, self.ndim)
        weight = _pooled(self.weight, dtype)
        self._reference: Optional[np.ndarray] = None
        self._want: Optional[np.ndarray] = None  # expected()'s, reused per image
        self.bias = None if geom.bias_shape is None else _integers(bits, geom.bias_shape,
                                                                   nonzero=True)
        self.prefill = _integers(bits, geom.out_shape) if accumulate else None
        self.inputs = (_pooled(_scaled(factors, self.image), dtype), weight,
                       None if self.bias is None else self.bias.astype(dtype),
                       None if self.prefill is None else _pooled(self.prefill, dtype))
        self.projection = Projection.fitting(_SEED + 6, param.num_group, param.num_filter,
                                              self.bound)
        self._projected: Optional[Tuple[np.ndarray, np.ndarray]] = None

    @property
    def reference(self) -> np.ndarray:
        """One image's exact result without bias, ref(x) (made on first use)."""
        if self._reference is None:
            with one_blas_thread():
                self._reference = deconv_numpy.forward(
                    _one_image(self.geom), self.image.astype(self.ref_dtype),
                    _widened(self.weight, self.ref_dtype), None, _REFERENCE_COLUMNS)[0]
        return self._reference

    def channel_bias(self) -> Any:
        """The bias broadcast over one image (0 without one)."""
        if self.bias is None:
            return 0
        return self.bias.reshape((-1,) + (1,) * (self.reference.ndim - 1)).astype(
            self.ref_dtype)

    def expected(self, n: int, factors: Sequence[int] = _BATCH_FACTORS) -> np.ndarray:
        """Image ``n``'s expected values, in a buffer the next call overwrites."""
        if self._want is None:
            self._want = np.empty_like(self.reference)
        want = np.multiply(self.reference, factors[n % len(factors)], out=self._want)
        want += self.channel_bias()
        if self.prefill is not None:
            want += self.prefill[n]
        return want

    def _projected_reference(self, projection: Projection) -> Tuple[np.ndarray, np.ndarray]:
        """ref(x)'s projections and the bias's, (G, PROJECTIONS, pixels) and
        (G, PROJECTIONS, 1): the reference of a layer with PROJECTIONS output
        channels per group, whose weight is the projected weight."""
        if self._projected is None:
            param = self.geom.param
            narrow = _one_image_with(self.geom, self.geom.in_channels,
                                     param.num_group * PROJECTIONS)
            with one_blas_thread():
                out = deconv_numpy.forward(narrow, self.image.astype(np.float64),
                                           projection.project_columns(self.weight), None,
                                           _REFERENCE_COLUMNS)[0]
            bias = (np.zeros((param.num_group, PROJECTIONS, 1)) if self.bias is None
                    else projection.project(self.bias))
            self._projected = (out.reshape(param.num_group, PROJECTIONS, -1), bias)
        return self._projected

    def projections_agree(self, got: Any) -> bool:
        """Whether ``got``'s projections are the expected ones (False: compare
        it in full)."""
        projection = self.projection
        if projection is None or not projection.applies_to(got, self.dtype, self.bound,
                                                                 self.geom.out_shape):
            return False
        reference, bias = self._projected_reference(projection)
        with one_blas_thread():
            for n in range(self.batch):
                want = reference * _BATCH_FACTORS[n % len(_BATCH_FACTORS)] + bias
                if self.prefill is not None:
                    want += projection.project(self.prefill[n])
                if not np.array_equal(projection.project(got[n]), want):
                    return False
        return True

    def check_exact(self, what: str, run: Callable[..., Any]) -> Optional[str]:
        got, failure = _run(what, lambda: run(*self.inputs))
        if failure:
            return failure
        if self.projections_agree(got):
            return None
        return _compare(what, got, self.expected, self.bound, self.dtype,
                        self.geom.out_shape)


def forward_check(geom: DeconvGeometry, dtype: Any, accumulate: bool,
                  act_type: Optional[str] = None) -> Check:
    """Forward: data_n = factor_n * x, so out_n = factor_n * ref(x) + bias (+ prefill).

    With ``act_type`` (a plan ending in an activation; never with
    ``accumulate``) the check depends on how the plan applies it:

    * by a separate eltwise primitive: the result before it must agree exactly,
      and the activation of that result within oneDNN's eltwise bound;
    * fused relu: exactly, twice, on the inputs and on the inputs negated,
      so that every pre-activation is seen on the positive side in one run;
    * fused sigmoid, tanh or softrelu: on *conditioned* inputs, the same small
      integers scaled by powers of two (every product and sum stays exact) so
      that every pre-activation lies in [-RADIUS, RADIUS], where the
      activation's slope is at least ``f'(RADIUS)``; the result must agree
      with the float64 activation of the exact pre-activation within
      oneDNN's eltwise bound (:data:`ELTWISE_TOLERANCE`), and the check only
      runs where one unit of error moves the result by MARGIN bounds or more
      (elsewhere it returns :class:`Unverifiable`).
    """
    if act_type is not None:
        if accumulate:
            raise MXNetError(f"forward_check: an activation (act_type={act_type!r}) "
                             "cannot follow req=add (accumulate=True)")
        return _lazy(lambda: _activation_check(_ForwardCase(geom, dtype, False), act_type))

    def prepare() -> Check:
        case = _ForwardCase(geom, dtype, accumulate)
        return lambda plan: case.check_exact("forward", plan.run_plain)
    return _lazy(prepare)


def can_check_fused(act_type: str, dtype: Any) -> bool:
    """Whether a fused ``act_type`` can be checked in ``dtype`` at all: relu is
    exact in any dtype; a saturating activation's result in bfloat16 is
    rounded to 8 bits, far coarser than the slope-times-unit the conditioned
    check must see, so those are run by a separate primitive instead."""
    return act_type == "relu" or str(dtype) == "float32"


def _slope_floor(act_type: str, radius: float) -> float:
    """The smallest slope of ``act_type`` on [-radius, radius]: each activation
    here is monotone with a bell-shaped or increasing slope, so at an end."""
    ends = activations.forward(np.array([-radius, radius]), act_type)
    return float(activations.derivative(ends, act_type).min())


def _activation_tolerance(act_type: str) -> Callable[[np.ndarray], np.ndarray]:
    relative = ELTWISE_TOLERANCE[act_type]
    return lambda want: relative * np.maximum(np.abs(want), 1.0)


def _activation_check(case: _ForwardCase, act_type: str) -> Check:
    dtype = case.dtype
    tolerance = _activation_tolerance(act_type)
    what = f"forward with {act_type}"

    def activated(n: int, factors: Sequence[int] = _BATCH_FACTORS, sign: int = 1,
                  unit: float = 1.0) -> np.ndarray:
        return activations.forward(sign * unit * case.expected(n, factors).astype(np.float64),
                                  act_type)

    def check_separate(plan: Any) -> Optional[str]:
        reason = case.check_exact(f"forward before {act_type}",
                                  lambda *a: plan.run_plain(*a, activate=False))
        if reason is not None:
            return reason
        got, failure = _run(what, lambda: plan.run_plain(*case.inputs))
        return failure or _compare(what, got, activated, case.bound, dtype,
                                   case.geom.out_shape, tolerance)

    def check_relu(plan: Any) -> Optional[str]:
        data, weight, bias, _ = case.inputs
        for sign, inputs in ((1, (data, weight, bias)),
                             (-1, (-data, weight, None if bias is None else -bias))):
            got, failure = _run(what, lambda: plan.run_plain(*inputs))
            reason = failure or _compare(
                what + ("" if sign > 0 else " (inputs negated)"), got,
                lambda n: activated(n, sign=sign), case.bound, dtype, case.geom.out_shape)
            if reason is not None:
                return reason
        return None

    # The conditioned inputs of a fused saturating activation.
    factors = _ACT_BATCH_FACTORS
    peak = max(float(np.abs(f * case.reference + case.channel_bias()).max(initial=0.0))
               for f in factors)
    shift = max(0, math.ceil(math.log2(peak / RADIUS))) if peak > 0 else 0
    unit = 2.0 ** -shift               # one unit of the exact integers, scaled
    data_shift = shift // 2            # the scale split between data and weight
    floor = _slope_floor(act_type, RADIUS + unit)
    ceiling = float(np.abs(activations.forward(np.array([-RADIUS - unit, RADIUS + unit]),
                                              act_type)).max())
    allowed = ELTWISE_TOLERANCE[act_type] * max(ceiling, 1.0)
    visible = floor * unit >= MARGIN * allowed
    if case.bias is None:
        scaled_bias = None
    else:
        scaled_bias = (case.bias * unit).astype(dtype)
    scaled = ((_per_image(factors, case.batch, case.ndim) * case.image
               * 2.0 ** -data_shift).astype(dtype),
              (case.weight * 2.0 ** (data_shift - shift)).astype(dtype), scaled_bias)

    def check_conditioned(plan: Any) -> Optional[str]:
        if not visible:
            return Unverifiable(
                f"{what}: a fused {act_type} cannot be checked on this layer (its exact "
                f"pre-activations reach {peak:g}: scaled into [-{RADIUS:g}, {RADIUS:g}], "
                f"one unit of error moves the result by {floor * unit:.2g}, under "
                f"{MARGIN:g} times oneDNN's eltwise bound {allowed:.2g})")
        got, failure = _run(what, lambda: plan.run_plain(*scaled))
        return failure or _compare(what + " (conditioned inputs)", got,
                                   lambda n: activated(n, factors, unit=unit), case.bound,
                                   dtype, case.geom.out_shape, tolerance)

    def check(plan: Any) -> Optional[str]:
        if plan.act_type != act_type:
            return f"{what}: the plan applies {plan.act_type!r}"
        if not plan.act_fused:
            return check_separate(plan)
        if act_type == "relu":
            return check_relu(plan)
        return check_conditioned(plan)
    return check


class _BackwardCase:
    """The backward checks' exact inputs, shared by both passes of a layer:
    one image's out_grad g, the weight of backward data and the image of
    backward weights; and the projections of each pass's result.  Both
    passes' projected references come from one phase-wise pass over g (a
    layer with PROJECTIONS data channels per group: the projected weight's
    data gradient and the projected image's weight gradient, see
    :func:`_narrow_backward`), made once."""

    def __init__(self, geom: DeconvGeometry) -> None:
        param = geom.param
        self.geom, self.one = geom, _one_image(geom)
        self.batch = geom.data_shape[0]
        self.grad = _integers(np.random.PCG64(_SEED + 1), self.one.out_shape)
        # Never 0, as the forward check's (_ForwardCase).
        self.weight = _integers(np.random.PCG64(_SEED + 2), geom.weight_shape, nonzero=True)
        self.image = _integers(np.random.PCG64(_SEED + 3), self.one.data_shape)
        self.data_bound = 8.0 * (param.num_filter // param.num_group) * math.prod(param.kernel)
        self.weight_bound = 8.0 * self.batch * math.prod(geom.spatial_in)
        self.data_projection = Projection.fitting(_SEED + 4, param.num_group,
                                                   geom.in_channels, self.data_bound)
        self.weight_projection = Projection.fitting(_SEED + 5, param.num_group,
                                                     geom.in_channels, self.weight_bound)
        self._projected: Optional[Tuple[np.ndarray, np.ndarray]] = None
        self._lock = threading.Lock()

    def projected(self) -> Tuple[np.ndarray, np.ndarray]:
        """The projected references of backward data (G, PROJECTIONS, pixels)
        and backward weights (G, PROJECTIONS, OC/G * taps), before the batch
        factors; zeros for a pass whose result is not projected."""
        with self._lock:
            if self._projected is None:
                param = self.geom.param
                groups, out_group = param.num_group, param.num_filter // param.num_group
                taps = math.prod(param.kernel)
                weight = np.zeros((groups, PROJECTIONS, out_group, taps)) \
                    if self.data_projection is None else \
                    self.data_projection.project(self.weight).reshape(
                        groups, PROJECTIONS, out_group, taps)
                image = np.zeros((groups, PROJECTIONS) + self.geom.spatial_in) \
                    if self.weight_projection is None else \
                    self.weight_projection.project(self.image[0]).reshape(
                        (groups, PROJECTIONS) + self.geom.spatial_in)
                with one_blas_thread():
                    data_grad, weight_grad = _narrow_backward(
                        self.geom, self.grad[0].astype(np.float64), weight, image)
                self._projected = (data_grad.reshape(groups, PROJECTIONS, -1),
                                   weight_grad.reshape(groups, PROJECTIONS, -1))
            return self._projected

    def full(self, need_data: bool, dtype: np.dtype) -> np.ndarray:
        """One image's full data gradient (need_data) or the weight gradient of
        one image, before the batch factors, in ``dtype``."""
        unused = (self.one.data_shape if need_data else self.geom.weight_shape)
        with one_blas_thread():
            result = deconv_numpy.backward(
                self.one, self.grad.astype(dtype),
                np.broadcast_to(np.zeros((), dtype), unused) if need_data
                else self.image.astype(dtype),
                self.weight.astype(dtype) if need_data
                else np.broadcast_to(np.zeros((), dtype), unused),
                need_data=need_data, need_weight=not need_data, need_bias=False,
                column_budget=_REFERENCE_COLUMNS)
        values = result[0] if need_data else result[1]
        assert values is not None
        return values[0] if need_data else values


def _narrow_backward(geom: DeconvGeometry, grad: np.ndarray, weight: np.ndarray,
                     image: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """One image's gradients in a layer of PROJECTIONS data channels per group:
    of the data with the weight ``weight`` (G, PROJECTIONS, OC/G, taps), and
    of the weight with the data ``image`` (G, PROJECTIONS, *input), for
    ``grad`` (OC, *output); float64, exact on integers.  Phase by phase
    (:mod:`mxdeconv.semantics.phases`): each tap's part is a product over its
    phase's grid of ``grad``, where im2col would gather every tap's columns
    of ``grad`` (the 3-D benchmark layer's 64 taps: 32 MB in float64)."""
    groups, _, out_group, _ = weight.shape
    data_grad = np.zeros(image.shape)
    weight_grad = np.zeros(weight.shape)
    for phase, taps in phases(geom).items():
        grid = grad[(slice(None),) + on_grid(geom, phase)]
        grid = np.ascontiguousarray(grid).reshape(groups, out_group, -1)  # (G, OC/G, M)
        flat = [tap.flat for tap in taps]
        per_tap = (groups, PROJECTIONS, len(taps)) + phase_grid(geom, phase)
        # Data: the weight's taps (G, P * taps, OC/G) times the grid, each
        # tap's product then added over its box of the input.
        product = np.matmul(weight[..., flat].transpose(0, 1, 3, 2).reshape(
            groups, -1, out_group), grid).reshape(per_tap)
        # Weights: the grid times the data, each tap's box shifted onto the
        # grid, (G, M, P * taps).
        shifted = np.zeros(per_tap)
        for j, tap in enumerate(taps):
            data_grad[(slice(None), slice(None)) + tap.pixels] += \
                product[(slice(None), slice(None), j) + tap.grid]
            shifted[(slice(None), slice(None), j) + tap.grid] = \
                image[(slice(None), slice(None)) + tap.pixels]
        weight_grad[..., flat] = np.matmul(grid, shifted.reshape(
            groups, PROJECTIONS * len(taps), -1).transpose(0, 2, 1)).reshape(
            groups, out_group, PROJECTIONS, len(taps)).transpose(0, 2, 1, 3)
    return data_grad, weight_grad


@functools.lru_cache(maxsize=1)
def _backward_case(geom: DeconvGeometry) -> _BackwardCase:
    """The backward checks of one layer share their case: its backward-data
    and backward-weights checks are made on the same call (a layer's first or
    second training call), one after the other; each check keeps its case."""
    return _BackwardCase(geom)


def backward_data_check(geom: DeconvGeometry, dtype: Any) -> Check:
    """Backward data: out_grad_n = factor_n * g, so data_grad_n = factor_n * ref(g);
    compared through projections of its channels first (:class:`.projections.Projection`,
    :class:`_BackwardCase`)."""
    def prepare() -> Check:
        case = _backward_case(geom)
        bound, projection = case.data_bound, case.data_projection
        ref_dtype = _reference_dtype(bound)
        weight = _pooled(case.weight, dtype)
        factors = _per_image(_BATCH_FACTORS, case.batch, len(geom.data_shape))
        inputs = (_pooled(_scaled(factors, case.grad), dtype), weight)
        scale = np.asarray(_BATCH_FACTORS, dtype=ref_dtype)
        full: list = []  # [reference, image n's expected values]: made when needed

        def expected(n: int) -> np.ndarray:
            if not full:
                values = case.full(True, ref_dtype)
                full.extend((values, np.empty_like(values)))
            return np.multiply(full[0], scale[n % len(scale)], out=full[1])

        def projections_agree(got: Any) -> bool:
            if projection is None or not projection.applies_to(got, dtype, bound,
                                                                     geom.data_shape):
                return False
            want = case.projected()[0]
            with one_blas_thread():
                return all(np.array_equal(projection.project(got[n]),
                                          want * _BATCH_FACTORS[n % len(_BATCH_FACTORS)])
                           for n in range(case.batch))

        def check(plan: Any) -> Optional[str]:
            got, failure = _run("backward data", lambda: plan.run_plain(*inputs))
            if failure:
                return failure
            if projections_agree(got):
                return None
            return _compare("backward data", got, expected, bound, dtype, geom.data_shape)
        return check
    return _lazy(prepare)


def backward_weights_check(geom: DeconvGeometry, dtype: Any) -> Check:
    """Backward weights: data_n = factor_n * x and out_grad_n = g, so
    weight_grad = sum(factors) * ref(x, g) and bias_grad = N * ref_bias(g); the
    weight gradient compared through projections of its input channels first
    (:class:`.projections.Projection`, :class:`_BackwardCase`)."""
    def prepare() -> Check:
        case = _backward_case(geom)
        bound, projection = case.weight_bound, case.weight_projection
        bias_bound = 2.0 * case.batch * math.prod(geom.spatial_out)
        ref_dtype = _reference_dtype(max(bound, bias_bound))
        factors = _per_image(_WEIGHT_GRAD_FACTORS, case.batch, len(geom.data_shape))
        total = int(factors.sum())
        # The bias gradient's reference is a sum over out_grad: cheap in full.
        bias_expected = None if geom.bias_shape is None else case.batch * case.grad.sum(
            axis=tuple(range(2, case.grad.ndim)), dtype=ref_dtype).reshape(-1)
        inputs = (_pooled(_scaled(factors, case.image), dtype),
                  _pooled(np.broadcast_to(case.grad, geom.out_shape), dtype))
        full: list = []  # [the weight gradient's reference]: made when needed

        def weights_agree(weight_grad: Any) -> bool:
            if projection is None or not projection.applies_to(weight_grad, dtype, bound,
                                                                     geom.weight_shape):
                return False
            want = case.projected()[1]
            with one_blas_thread():
                return np.array_equal(projection.project(weight_grad), want * total)

        def check(plan: Any) -> Optional[str]:
            got, failure = _run("backward weights", lambda: plan.run_plain(*inputs))
            if failure:
                return failure
            if not (isinstance(got, tuple) and len(got) == 2):
                return (f"backward weights: a {type(got).__name__}, expected the weight "
                        "and bias gradients")
            weight_grad, bias_grad = got
            reason = None
            if not weights_agree(weight_grad):
                if not full:
                    full.append(case.full(False, ref_dtype) * total)
                reason = _compare("backward weights", weight_grad, full[0], bound, dtype,
                                  geom.weight_shape)
            if reason is None and bias_expected is not None:
                reason = _compare("backward bias", bias_grad, bias_expected, bias_bound,
                                  dtype, bias_expected.shape)
            return reason
        return check
    return _lazy(prepare)
