"""Check one call's own result: sampled elements against a NumPy reference.

The kernel check (:mod:`mxdeconv.onednn.kernel_check`) proves a plan right
on its geometry with exact small-integer inputs, but costs one more run of
the plan and its inputs: on a big layer's first call, more than the call.  So
a big layer's first call runs a plan that has not passed it yet (a
*provisional* one, see :mod:`mxdeconv.onednn.planner`), and its result is
returned only after this check passed on it; the kernel check runs on the
layer's next call.

Each function recomputes a sample of the result from the call's inputs, in
float32 with NumPy's BLAS, and requires every sampled element to lie within
the worst-case rounding error of both computations:

    |got - want| <= (gamma(n + 1) * 2) * B + gamma(n + 1) * |bias| + slack

where n is the number of products summed into the element, gamma(n) =
n u / (1 - n u) with u = 2**-24 (float32's unit roundoff; it bounds a dot
product's error in any summation order, with or without FMA), and B, by
Cauchy-Schwarz, bounds the sum of the products' magnitudes (slack: what
products below float32's normal range can lose).  A NaN or an
infinity where the reference is finite is wrong.

What is sampled: every channel of each sampled position, every image (up to
MAX_POSITIONS images, spread evenly over a larger batch), every combination of each
axis' edge coordinates (each output phase at both borders), then random
positions up to SAMPLE_SHARE of the pass's multiply-adds, for the forward and
backward-data passes; for backward weights, a few input-channel rows and
output-channel columns (the first, the last, block edges, random ones) over
every tap, and the whole bias gradient.

What it cannot see: an error below the bound (a kernel wrong by one term in
thousands), or outside the sample (a stride so large that its phases
outnumber MAX_POSITIONS).  :func:`blind_spot` says, before a layer's first
call, whether the sample can see every class of defect the kernel check sees
on that layer; where it cannot, the planner runs the kernel check first.  And
it checks a provisional plan's result until the kernel check has run, never
instead of it.
"""
from __future__ import annotations

import functools
import math
from typing import (Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple,
                    TypeVar, Union)

import numpy as np

from mxdeconv._core.buffers import aligned_empty
from mxdeconv.semantics.attributes import DeconvGeometry
from mxdeconv.semantics.phases import Tap, on_grid, phase_grid, phases
from .blas_threads import one_blas_thread

#: float32's unit roundoff.
_UNIT = 2.0 ** -24
#: The sample's multiply-adds, as a fraction of the pass's, before the floors
#: below (every image; the border positions).
SAMPLE_SHARE = 0.02
#: At most this many positions (forward, backward data) or rows and columns.
MAX_POSITIONS, MAX_LINES = 256, 16


#: A defect the sample must see stands this many times above the rounding
#: bound (for inputs of one scale and random signs): see :func:`blind_spot`.
VISIBILITY_MARGIN = 4.0


F = TypeVar("F", bound=Callable[..., Any])


def _checking(function: F) -> F:
    """A check runs on one BLAS thread (see :mod:`.blas_threads`), and compares
    non-finite values explicitly: no floating-point warning or error (the
    caller's np.errstate) on the way."""
    @functools.wraps(function)
    def checking(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(all="ignore"), one_blas_thread():
            return function(*args, **kwargs)
    return checking  # type: ignore[return-value]


def _gamma(terms: int) -> float:
    product = terms * _UNIT
    return product / (1.0 - product)


def pass_macs(geom: DeconvGeometry) -> int:
    """Multiply-adds of one pass of ``geom`` (each pass has as many)."""
    param = geom.param
    return (math.prod(geom.data_shape) * (param.num_filter // param.num_group)
            * math.prod(param.kernel))


# -- what the sample can see -------------------------------------------------------
def _landing_taps(geom: DeconvGeometry) -> int:
    """The most kernel taps that land on one output pixel (one phase's taps):
    per axis, the taps k with k * dilate in one residue class of the stride."""
    param = geom.param
    taps = 1
    for kernel, stride, dilate in zip(param.kernel, param.stride, param.dilate):
        period = stride // math.gcd(stride, dilate)  # taps repeat a residue this often
        taps *= -(-kernel // period)
    return taps


def _hidden(terms: int, defect_terms: int) -> bool:
    """Whether a defect of ``defect_terms`` products, in an element that sums
    ``terms``, can hide below the rounding bound: with inputs of one scale and
    random signs the element's bound is about 2 gamma(n+1) n and the defect
    about sqrt(m) times one product (the kernel check, with exact inputs,
    sees any of them)."""
    return VISIBILITY_MARGIN * 2.0 * _gamma(terms + 1) * terms > math.sqrt(defect_terms)


def blind_spot(geom: DeconvGeometry, what: str) -> Optional[str]:
    """Why sampling the results of pass ``what`` ("forward", "backward_data",
    "backward_weights") on ``geom`` could miss a defect the kernel check sees
    (None: it sees every class): a phase or border combination outside the
    sample (more than MAX_POSITIONS), an image outside it (a batch over
    MAX_POSITIONS), or one tap's share of an element (a dropped tap) or one
    border line's share of a weight gradient below the rounding bound."""
    param = geom.param
    groups, batch, in_channels, in_group, out_group, taps = _layer_sizes(geom)
    if what == "backward_weights":
        pixels = math.prod(geom.spatial_in)
        line = batch * pixels // max(geom.spatial_in)  # one border line of every image
        if _hidden(batch * pixels, line):
            return (f"a weight-gradient element sums {batch * pixels} products, one border "
                    f"line's {line} hide below the rounding bound")
        return None
    if batch > MAX_POSITIONS:
        return f"a batch of {batch} images is more than the sample's {MAX_POSITIONS}"
    if what == "forward":
        borders = math.prod(len(_edge_coordinates(n, s))
                            for n, s in zip(geom.spatial_out, param.stride))
        if borders > MAX_POSITIONS:
            return (f"{borders} border positions (each output phase at both borders) are "
                    f"more than the sample's {MAX_POSITIONS}")
        terms, tap_terms = in_group * _landing_taps(geom), in_group
    else:
        terms, tap_terms = out_group * taps, out_group
    if _hidden(terms, tap_terms):
        return (f"an element sums {terms} products, one tap's {tap_terms} hide below the "
                f"rounding bound")
    return None


# -- which elements ---------------------------------------------------------------
def _edge_coordinates(length: int, stride: int) -> List[int]:
    """The first and last ``stride + 1`` coordinates of an axis: every phase at
    both borders (where crops and partial tiles live)."""
    near = list(range(min(length, stride + 1)))
    far = list(range(max(0, length - stride - 1), length))
    return sorted(set(near + far))


def _edge_positions(spatial: Sequence[int], stride: Sequence[int]) -> np.ndarray:
    """Every combination of each axis' edge coordinates: (count, axes)."""
    grids = np.meshgrid(*[_edge_coordinates(n, s) for n, s in zip(spatial, stride)],
                        indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1)


def _positions(spatial: Sequence[int], stride: Sequence[int], batch: int, count: int,
               rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """``count`` (image, position) pairs: images spread evenly over the batch
    (every one when ``count`` >= the batch), positions from every combination
    of each axis' edge coordinates first (shuffled), then random."""
    edges = _edge_positions(spatial, stride)
    edges = edges[rng.permutation(len(edges))][:count]
    extra = count - len(edges)
    randoms = np.stack([rng.integers(0, n, size=extra) for n in spatial], axis=1) \
        if extra > 0 else np.empty((0, len(spatial)), dtype=np.int64)
    positions = np.concatenate([edges, randoms]).astype(np.int64)
    if count >= batch:
        images = np.arange(count, dtype=np.int64) % batch
    else:
        images = np.arange(count, dtype=np.int64) * (batch - 1) // max(count - 1, 1)
    return images, positions


def _sample_count(geom: DeconvGeometry, per_position_macs: int, spatial: Sequence[int],
                  stride: Sequence[int]) -> int:
    """The share's positions, but at least one per image and every edge
    combination (each phase at every border), at most MAX_POSITIONS."""
    budget = int(SAMPLE_SHARE * pass_macs(geom) // max(per_position_macs, 1))
    floor = max(geom.data_shape[0], len(_edge_positions(spatial, stride)))
    return max(1, min(MAX_POSITIONS, max(budget, floor)))


def _lines(length: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """Up to ``count`` indices of a channel axis: both ends, the edges of 8- and
    16-channel blocks, then random ones."""
    wanted = [0, length - 1]
    for block in (8, 16):
        wanted += [block - 1, block, length - block - 1, length - block]
    chosen = list(dict.fromkeys(i for i in wanted if 0 <= i < length))[:count]
    rest = np.ones(length, dtype=bool)
    rest[chosen] = False
    rest = np.flatnonzero(rest)
    more = rng.choice(rest, size=min(len(rest), count - len(chosen)), replace=False)
    return np.sort(np.concatenate([np.asarray(chosen, dtype=np.int64),
                                   more.astype(np.int64)]))


# -- comparing ----------------------------------------------------------------------
def _compare(what: str, got: np.ndarray, want: np.ndarray, allowed: np.ndarray,
             where: Callable[[int], Sequence[int]]) -> Optional[str]:
    """None if every ``got`` is within ``allowed`` of ``want``; ``where`` names
    an element (by its flat index in ``got``) by its indices into the result,
    asked only of the worst wrong one."""
    got = got.astype(np.float64)
    error = np.abs(got - want)
    # NaN or inf in got counts as wrong; where the inputs make the reference
    # non-finite there is nothing to compare.
    wrong = ~(error <= allowed) & np.isfinite(want)
    count = int(wrong.sum())
    if not count:
        return None
    worst = int(np.argmax(np.where(wrong, np.nan_to_num(error, nan=np.inf), -1.0)))
    return (f"{what} (sampled on the call's own inputs): {count} of {got.size} sampled "
            f"values wrong, max error {error.flat[worst]:g} at "
            f"{tuple(int(i) for i in where(worst))} (expected {want.flat[worst]:g}, got "
            f"{got.flat[worst]:g}, allowed {allowed.flat[worst]:.3g})")


def _bound(terms: int, norms: np.ndarray, extra: Optional[np.ndarray] = None) -> np.ndarray:
    """The allowed error of a float32 result and a float32 reference, both sums
    of ``terms`` products whose magnitudes sum to at most ``norms`` (plus
    ``extra``, one more term such as the bias, in the result only)."""
    gamma = _gamma(terms + 1)
    allowed = 2.0 * gamma * norms + 2.0 * (terms + 1) * _TINY
    if extra is not None:
        allowed = allowed + gamma * np.abs(extra)
    return allowed


#: What float32 squares can lose to underflow, per term (below the smallest
#: normal number; kernels may also flush such products to zero).
_TINY = 2.0 ** -126


def _square_sums(values: np.ndarray, subscripts: str) -> Tuple[np.ndarray, bool]:
    """The sums of squares along the summed axes of ``subscripts`` (einsum's,
    one operand written twice), in float64, and whether they were summed in
    float32 (fast; a float32 sum of n squares is at most gamma(n) low, n <
    2**20 here, and underflow can lose more): summed again in float64 where
    float32 squares overflow or that loss would matter."""
    squares = np.einsum(subscripts, values, values)
    terms = values.size // max(squares.size, 1)
    if np.isfinite(squares).all() and not (squares < terms * 2.0 ** -100).any():
        return squares.astype(np.float64), True
    # float64 squares of float32 values neither overflow nor underflow.
    return np.einsum(subscripts, values, values, dtype=np.float64), False


def _norms(values: np.ndarray, subscripts: str) -> np.ndarray:
    """Upper bounds on the Euclidean norms along the summed axes of
    ``subscripts``, in float64 (:func:`_square_sums` rounded up, plus what
    float32's underflow can lose)."""
    squares, in_float32 = _square_sums(values, subscripts)
    return _rooted(squares, in_float32, values.size // max(squares.size, 1))


def _rooted(squares: np.ndarray, in_float32: bool, terms: int) -> np.ndarray:
    """Upper bounds on the norms whose float64 squares, each a sum of
    ``terms`` squares (in float32 where ``in_float32``: :func:`_square_sums`),
    are ``squares``."""
    if in_float32:
        return np.sqrt(squares) * (1.0 + _gamma(1 << 20)) + math.sqrt(terms * _TINY)
    return np.sqrt(squares) * (1.0 + 1e-12)


#: A result whose sampled elements a check reads: a default-layout array, or a
#: function that reads the elements at an index (one integer array per axis,
#: broadcast together) where they lie, e.g. ``functools.partial(layout.take,
#: buffer)`` for a blocked result (no reorder of the whole tensor into fresh
#: memory: 4 MB on the 3-D layer of benchmarks/first_calls.py, 16 MB on its 1-D one).
Result = Union[np.ndarray, Callable[[Tuple[np.ndarray, ...]], np.ndarray]]


def _pixels(result: Result, images: np.ndarray, channels: int, flat: np.ndarray,
            spatial: Sequence[int]) -> np.ndarray:
    """Every channel of ``result`` (N, C, *spatial) at each sampled image and
    flat position: (S, C)."""
    if isinstance(result, np.ndarray):
        return result.reshape(-1, channels, math.prod(spatial))[images, :, flat]
    index = ((images[:, None], np.arange(channels)[None, :])
             + tuple(c[:, None] for c in np.unravel_index(flat, tuple(spatial))))
    return result(index)


def _flat_index(coordinates: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    index = np.zeros_like(coordinates[0])
    for c, n in zip(coordinates, shape):
        index = index * n + c
    return index


def _layer_sizes(geom: DeconvGeometry) -> Tuple[int, int, int, int, int, int]:
    """(groups, batch, in_channels, in_group, out_group, taps) of ``geom``."""
    param = geom.param
    groups = param.num_group
    batch, in_channels = geom.data_shape[:2]
    return (groups, batch, in_channels, in_channels // groups,
            param.num_filter // groups, math.prod(param.kernel))


def _tap_axes(kernel: Sequence[int]) -> List[np.ndarray]:
    """Every kernel tap's coordinate along each axis, the last axis fastest
    (the weight's order): one flat array per axis."""
    grids = np.meshgrid(*[np.arange(k) for k in kernel], indexing="ij")
    return [g.reshape(-1) for g in grids]


def _where(images: np.ndarray, channels: int, flat: np.ndarray,
           spatial: Sequence[int]) -> Callable[[int], Sequence[int]]:
    """The (image, channel, *position) of a sampled element, by its flat index
    in the samples: every channel of each sampled (image, flat position), in
    that order."""
    def at(index: int) -> Sequence[int]:
        sample, channel = divmod(index, channels)
        return (images[sample], channel, *np.unravel_index(flat[sample], spatial))
    return at


def _grid(*axes: np.ndarray) -> Callable[[int], Sequence[int]]:
    """The element of a block indexed by ``axes`` (each axis' indices into
    the result), by its flat index in the block."""
    shape = tuple(len(a) for a in axes)
    return lambda index: tuple(a[i] for a, i in zip(axes, np.unravel_index(index, shape)))


# -- forward ------------------------------------------------------------------------
#: Bytes of the weight moved tap-major at a time by _phase_products: a block
#: that stays in cache is read by every phase's products, where each phase's
#: taps gathered apart (a copy of its own) streamed the whole weight through
#: memory once more (DCGAN 512 -> 256: 1.8 ms against 3.6).
_WEIGHT_BLOCK_BYTES = 1 << 20


class _Phase(NamedTuple):
    """The sampled output positions of one phase: their rows in the sample,
    the taps that land on them, their input columns (G, S, taps, in_group;
    zero where a tap reads no pixel) and their products (G, S, out_group)."""
    rows: np.ndarray
    taps: np.ndarray
    cols: np.ndarray
    product: np.ndarray


def _phase_products(weight: np.ndarray, phase_list: Sequence[_Phase]
                    ) -> Tuple[np.ndarray, bool]:
    """Each phase's products (written into its ``product``) and the weight's
    sums of squares per tap and output channel, (G, taps, O) in float64, with
    whether some were summed in float32 (:func:`_square_sums`).  The weight
    (G, I, O, taps) is read once, a block of input channels at a time moved
    tap-major, (G, I_b, taps, O), into one reused buffer: each tap's slice of
    it is then a matrix BLAS reads in place.  The products sum over the
    blocks in float32: a sum in another order, within the same bound."""
    groups, rows, columns, taps = weight.shape
    step = max(1, _WEIGHT_BLOCK_BYTES // max(1, groups * taps * columns * weight.itemsize))
    buffer = aligned_empty((groups * min(step, rows) * taps * columns,), weight.dtype)
    squares = np.zeros((groups, taps, columns))
    in_float32 = False
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        block = buffer[:groups * (stop - start) * taps * columns].reshape(
            groups, stop - start, taps, columns)
        np.copyto(block, weight[:, start:stop].transpose(0, 1, 3, 2))
        block_squares, block_in_float32 = _square_sums(block, "gito,gito->gto")
        squares += block_squares
        in_float32 |= block_in_float32
        for phase in phase_list:
            for j, tap in enumerate(phase.taps):
                phase.product[...] += np.matmul(phase.cols[:, :, j, start:stop],
                                                block[:, :, tap, :])
    return squares, in_float32


def _forward_taps(geom: DeconvGeometry, positions: np.ndarray
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each sampled output position and each kernel tap: whether the tap
    lands on it (its phase), the input pixel it reads (flat), and whether that
    pixel exists (else it reads zero)."""
    param = geom.param
    lands, exists, coords = [], [], []
    for axis, (size, kernel) in enumerate(zip(geom.spatial_in, param.kernel)):
        taps = np.arange(kernel)
        reach = positions[:, axis:axis + 1] + geom.pad_l[axis] - taps * param.dilate[axis]
        on = reach % param.stride[axis] == 0
        source = reach // param.stride[axis]
        inside = on & (source >= 0) & (source < size)
        lands.append(on)
        exists.append(inside)
        coords.append(np.where(inside, source, 0))
    # Every tap: the product over axes.
    tap_axes = _tap_axes(param.kernel)
    land = np.ones((len(positions), len(tap_axes[0])), dtype=bool)
    inside = land.copy()
    pixel_axes = []
    for axis, taps in enumerate(tap_axes):
        land &= lands[axis][:, taps]
        inside &= exists[axis][:, taps]
        pixel_axes.append(coords[axis][:, taps])
    return land, _flat_index(pixel_axes, geom.spatial_in), inside


@_checking
def forward_result(geom: DeconvGeometry, data: np.ndarray, weight: np.ndarray,
                   bias: Optional[np.ndarray], out: Result,
                   seed: int = 0) -> Optional[str]:
    """None if sampled elements of ``out`` (every channel of a few positions of
    every image) equal ``Deconvolution(data, weight, bias)`` within both
    computations' rounding bound, else why not.  Plain float32 arrays
    (``out`` may be read in its own layout: :data:`Result`)."""
    param = geom.param
    groups, batch, in_channels, in_group, out_group, taps = _layer_sizes(geom)
    rng = np.random.default_rng(seed)
    landing = max(1, taps // math.prod(param.stride))
    count = _sample_count(geom, in_channels * out_group * landing, geom.spatial_out,
                          param.stride)
    images, positions = _positions(geom.spatial_out, param.stride, batch, count, rng)
    land, pixels, inside = _forward_taps(geom, positions)
    x = data.reshape(batch, in_channels, -1)
    w = weight.reshape(groups, in_group, out_group, taps)
    flat_out = _flat_index([positions[:, a] for a in range(positions.shape[1])],
                           geom.spatial_out)
    got = _pixels(out, images, param.num_filter, flat_out, geom.spatial_out).reshape(
        len(images), groups, out_group)
    want = np.empty(got.shape, dtype=np.float64)
    allowed = np.empty(got.shape, dtype=np.float64)
    # Positions of one phase share their taps: one product per phase.
    # (Which taps land depends only on the position modulo the stride.)
    residues = _flat_index([(positions[:, a] + geom.pad_l[a]) % param.stride[a]
                            for a in range(param.ndim)], param.stride)
    phase_list = []
    for phase in sorted(set(residues.tolist())):  # (np.unique imports numpy.ma: 25 ms)
        rows = np.flatnonzero(residues == phase)
        tap_list = np.flatnonzero(land[rows[0]])
        if not len(tap_list):  # no tap reaches these positions: the bias alone
            want[rows] = 0.0
            allowed[rows] = _TINY
            continue
        # Input columns (S, taps, C) -> (G, S, taps, in_group), zero where no pixel.
        cols = x[images[rows, None], :, pixels[rows][:, tap_list]]
        cols[~inside[rows][:, tap_list]] = 0  # (not a product: NaN * 0 is NaN)
        cols = np.ascontiguousarray(
            cols.reshape(len(rows), len(tap_list), groups, in_group).transpose(2, 0, 1, 3))
        phase_list.append(_Phase(rows, tap_list, cols,
                                 np.zeros((groups, len(rows), out_group), np.float32)))
    if phase_list:
        kernel_squares, in_float32 = _phase_products(w, phase_list)
    for rows, tap_list, cols, product in phase_list:
        terms = in_group * len(tap_list)
        kernel_norms = _rooted(kernel_squares[:, tap_list].sum(axis=1), in_float32, terms)
        norms = (_norms(cols.reshape(groups, len(rows), terms), "gsk,gsk->gs")[:, :, None]
                 * kernel_norms[:, None, :])
        want[rows] = product.transpose(1, 0, 2)
        allowed[rows] = _bound(terms, norms).transpose(1, 0, 2)
    if bias is not None:
        channel_bias = bias.reshape(groups, out_group).astype(np.float64)
        want += channel_bias
        allowed += _gamma(in_group * taps + 1) * np.abs(channel_bias)
    return _compare("forward", got, want, allowed,
                    _where(images, param.num_filter, flat_out, geom.spatial_out))


# -- backward data -----------------------------------------------------------------
@_checking
def backward_data_result(geom: DeconvGeometry, out_grad: np.ndarray, weight: np.ndarray,
                         data_grad: Result, seed: int = 0) -> Optional[str]:
    """None if sampled elements of ``data_grad`` (every channel of a few
    positions of every image) equal the gradient of ``out_grad`` within both
    computations' rounding bound, else why not.  Plain float32 arrays
    (``data_grad`` may be read in its own layout: :data:`Result`)."""
    param = geom.param
    groups, batch, in_channels, in_group, out_group, taps = _layer_sizes(geom)
    rng = np.random.default_rng(seed)
    ones = (1,) * len(geom.spatial_in)
    count = _sample_count(geom, in_channels * out_group * taps, geom.spatial_in, ones)
    images, positions = _positions(geom.spatial_in, ones, batch, count, rng)
    # The output pixel each tap of each sampled input pixel reaches.
    inside = np.ones((count, taps), dtype=bool)
    pixel_axes = []
    for axis, tap in enumerate(_tap_axes(param.kernel)):
        reach = (positions[:, axis:axis + 1] * param.stride[axis] - geom.pad_l[axis]
                 + tap[None, :] * param.dilate[axis])
        ok = (reach >= 0) & (reach < geom.spatial_out[axis])
        inside &= ok
        pixel_axes.append(np.where(ok, reach, 0))
    pixels = _flat_index(pixel_axes, geom.spatial_out)
    g = out_grad.reshape(batch, param.num_filter, -1)
    cols = g[images[:, None], :, pixels]  # (S, taps, C_out)
    cols[~inside] = 0  # (not a product: NaN * 0 is NaN)
    cols = np.ascontiguousarray(cols.reshape(count, taps, groups, out_group)
                                .transpose(2, 0, 3, 1)).reshape(groups, count,
                                                                 out_group * taps)
    w = weight.reshape(groups, in_group, out_group * taps)
    product = np.matmul(w, cols.transpose(0, 2, 1))  # (G, in_group, S)
    norms = (_norms(w, "gik,gik->gi")[:, :, None]
             * _norms(cols, "gsk,gsk->gs")[:, None, :]).astype(np.float64)
    want = product.transpose(2, 0, 1).reshape(count, in_channels).astype(np.float64)
    allowed = _bound(out_group * taps, norms).transpose(2, 0, 1).reshape(count, in_channels)
    flat_in = _flat_index([positions[:, a] for a in range(positions.shape[1])],
                          geom.spatial_in)
    got = _pixels(data_grad, images, in_channels, flat_in, geom.spatial_in)  # (S, C_in)
    return _compare("backward data", got, want, allowed,
                    _where(images, in_channels, flat_in, geom.spatial_in))


# -- backward weights --------------------------------------------------------------
#: The most bytes of the sampled columns' windows gathered for one product.
_COLUMN_TAPS_BYTES = 4 << 20
def _column_chunk(tap_bytes: int, taps: int) -> int:
    """How many taps' column windows (``tap_bytes`` each) one product takes."""
    return max(1, min(taps, _COLUMN_TAPS_BYTES // max(1, tap_bytes)))


#: The bias gradient's reference widens out_grad this many bytes at a time,
#: in one reused buffer (a whole big layer's would be fresh megabytes: on a
#: lazily backed VM, tens of milliseconds to touch first).
_ABS_CHUNK_BYTES = 1 << 20


def _channel_sums(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The float64 sums of ``values`` (N, C, P) and of their magnitudes, per
    channel C.  A chunk of rows at a time is widened to float64 in one reused
    buffer and summed by BLAS (a matrix-vector product with ones): NumPy's
    float64 reduction of float32 rows casts through small buffers, twice as
    slow (U-Net 512 -> 256 at batch 4: 6.6 ms against 3.5).  Any float64
    summation order is exact enough here (the bias check allows far more)."""
    batch, channels, pixels = values.shape
    rows = values.reshape(batch * channels, pixels)
    chunk = max(1, _ABS_CHUNK_BYTES // max(1, pixels * 8))
    wide = aligned_empty((min(chunk, len(rows)), pixels), np.float64)
    ones = np.ones(pixels)
    sums = np.empty(len(rows))
    abs_sums = np.empty(len(rows))
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        room = wide[:len(part)]
        np.copyto(room, part)
        np.matmul(room, ones, out=sums[start:start + len(part)])
        np.abs(room, out=room)
        np.matmul(room, ones, out=abs_sums[start:start + len(part)])
    return (sums.reshape(batch, channels).sum(axis=0),
            abs_sums.reshape(batch, channels).sum(axis=0))


def _box_sums(values: np.ndarray, taps: Sequence[Tap]) -> np.ndarray:
    """The sums of ``values`` (C, *grid) over each tap's box of the grid, (C,
    taps): one axis at a time from the first (whole rows of the axes after it
    added at once: the 3-D layer's 8 phases 0.9 ms against 1.6 from the
    last), each partial sum made once for all the taps whose boxes agree on
    the axes summed so far (a phase's taps are the combinations of a few
    boxes per axis)."""
    done: Dict[Tuple[Tuple[int, int], ...], np.ndarray] = {(): values}
    sums = np.empty((values.shape[0], len(taps)))
    for j, tap in enumerate(taps):
        key: Tuple[Tuple[int, int], ...] = ()
        for box in tap.grid:
            inner = key + ((box.start, box.stop),)
            if inner not in done:
                done[inner] = done[key][:, box.start:box.stop].sum(axis=1)
            key = inner
        sums[:, j] = done[key]
    return sums


@_checking
def backward_weights_result(geom: DeconvGeometry, data: np.ndarray, out_grad: np.ndarray,
                            weight_grad: Optional[np.ndarray],
                            bias_grad: Optional[np.ndarray],
                            seed: int = 0) -> Optional[str]:
    """None if sampled rows (input channels) and columns (output channels) of
    ``weight_grad``, over every tap, and all of ``bias_grad`` equal the
    gradients of ``out_grad`` within both computations' rounding bound, else
    why not.  Either gradient may be None (not computed).  Plain float32."""
    param = geom.param
    groups, batch, in_channels, in_group, out_group, taps = _layer_sizes(geom)
    pixels = math.prod(geom.spatial_in)
    terms = batch * pixels
    rng = np.random.default_rng(seed)
    if bias_grad is not None:
        want, norms = _channel_sums(out_grad.reshape(batch, param.num_filter, -1))
        summed = batch * math.prod(geom.spatial_out)  # the float64 sum: negligible error
        allowed = (_gamma(summed) * (1.0 + 1e-6)) * norms + summed * _TINY
        reason = _compare("backward bias", bias_grad.reshape(-1), want, allowed,
                          lambda channel: (channel,))
        if reason is not None:
            return reason
    if weight_grad is None:
        return None
    # Input channels first, (C_in, N * pixels): the columns' products are then
    # one GEMM each however few pixels an image has.  In a pooled block: a big
    # layer's data is megabytes, and NumPy's fresh blocks of 4 MiB and more
    # are advised onto huge pages (slow to touch first on a lazily backed VM).
    x = aligned_empty((in_channels, batch, pixels), data.dtype)
    np.copyto(x, data.reshape(batch, in_channels, pixels).transpose(1, 0, 2))
    x_norms = _norms(x.reshape(in_channels, terms), "ik,ik->i")
    x_groups = x.reshape(groups, in_group, terms)
    grad = weight_grad.reshape(in_channels, out_group, taps)
    lines = max(2, min(MAX_LINES, int(SAMPLE_SHARE * pass_macs(geom)
                                      // max(1, 2 * terms * out_group * taps))))
    rows = _lines(in_channels, lines, rng)
    columns = _lines(out_group, lines, rng)
    # Rows: every output channel of each sampled input channel's group;
    # columns: every input channel of each sampled output channel's group.
    row_cols = (rows // in_group)[:, None] * out_group + np.arange(out_group)[None, :]  # (R, O)
    col_channels = np.arange(groups)[:, None] * out_group + columns[None, :]  # (G, C)
    row_groups = {int(g): np.flatnonzero(rows // in_group == g) for g in rows // in_group}
    # A tap that reaches no output adds nothing: its references stay 0.
    want_rows = np.zeros((len(rows), out_group, taps))
    want_cols = np.zeros((in_channels, len(columns), taps))
    # Each output channel's squares under each tap's window.
    g_squares = np.zeros((param.num_filter, taps))
    images = out_grad.reshape((batch, param.num_filter) + geom.spatial_out)
    x_rows = np.ascontiguousarray(np.moveaxis(
        data.reshape((batch, in_channels) + geom.spatial_in)[:, rows], 1, -1))  # (N, *in, R)
    g_columns = images[:, col_channels.reshape(-1)]  # (N, G * C, *out)
    tap_phases = phases(geom)
    column_taps: List[Tuple[Tap, np.ndarray]] = []  # each tap, its phase's sampled columns
    # Each phase's grid of out_grad, channels first, (C_out, N, *grid): one
    # copy of out_grad in all, through one reused buffer.  Every tap of the
    # phase reads a box of it; sampled rows become one product per phase.
    grids = {phase: phase_grid(geom, phase) for phase in tap_phases}
    phase_buffer = aligned_empty((param.num_filter * batch
                                  * max(math.prod(g) for g in grids.values()),),
                                 out_grad.dtype)
    for phase, phase_taps in tap_phases.items():
        grid = grids[phase]
        grid_of = phase_buffer[:param.num_filter * batch * math.prod(grid)].reshape(
            (param.num_filter, batch) + grid)
        np.copyto(grid_of, np.swapaxes(images[(slice(None), slice(None))
                                              + on_grid(geom, phase)], 0, 1))
        # Each output channel's squares summed over the batch, per grid point.
        squares = _square_sums(grid_of.reshape(grid_of.shape[:2] + (-1,)),
                               "cnm,cnm->cm")[0].reshape((param.num_filter,) + grid)
        # Rows: out_grad's grid (C_out, N * grid) times each sampled input
        # channel shifted onto it by each tap, (N * grid, R, taps).
        shifted = np.zeros((batch,) + grid + (len(rows), len(phase_taps)), data.dtype)
        for j, tap in enumerate(phase_taps):
            shifted[(slice(None),) + tap.grid + (slice(None), j)] = \
                x_rows[(slice(None),) + tap.pixels]
        tap_index = np.array([tap.flat for tap in phase_taps])
        g_squares[:, tap_index] = _box_sums(squares, phase_taps)
        shifted = shifted.reshape(-1, len(rows), len(phase_taps))
        for group, which in row_groups.items():
            product = grid_of[group * out_group:(group + 1) * out_group].reshape(
                out_group, -1) @ shifted[:, which].reshape(-1, len(which) * len(phase_taps))
            want_rows[np.ix_(which, np.arange(out_group), tap_index)] = product.reshape(
                out_group, len(which), len(phase_taps)).transpose(1, 0, 2)
        # The sampled output channels' grid as (G, C, N, *grid), as the
        # columns' windows hold them: their products come after every phase.
        columns_grid = g_columns[(slice(None), slice(None)) + on_grid(geom, phase)]
        columns_grid = np.ascontiguousarray(np.moveaxis(
            columns_grid.reshape((batch, groups, len(columns)) + grid), (0, 1, 2), (2, 0, 1)))
        column_taps += [(tap, columns_grid) for tap in phase_taps]
    # Columns: each group's input channels (in_group, N * pixels) times the
    # sampled output channels' windows, (C * taps, N * pixels) transposed, the
    # taps of every phase together, a chunk of them at a time (a depthwise
    # layer's would be large): the data is read once a chunk, not once a
    # phase (U-Net 512 -> 256: 0.5 ms against 2.1), and each tap's window is
    # a block of its own, not every tap's-th element.
    chunk = _column_chunk(groups * terms * len(columns) * out_grad.itemsize, len(column_taps))
    for first in range(0, len(column_taps), chunk):
        some = column_taps[first:first + chunk]
        windows = np.zeros((groups, len(columns), len(some), batch) + geom.spatial_in,
                           out_grad.dtype)
        for j, (tap, columns_grid) in enumerate(some):
            windows[(slice(None), slice(None), j, slice(None)) + tap.pixels] = \
                columns_grid[(slice(None), slice(None), slice(None)) + tap.grid]
        product = np.matmul(x_groups, windows.reshape(groups, -1, terms).transpose(0, 2, 1))
        want_cols[:, :, [tap.flat for tap, _ in some]] = product.reshape(
            in_channels, len(columns), len(some))
    # Norms as _norms makes them: float32 squares summed over the batch are at
    # most gamma(N) low, plus what underflow can lose.
    g_norms = _rooted(g_squares, True, terms)
    allowed_rows = _bound(terms, x_norms[rows][:, None, None] * g_norms[row_cols])
    allowed_cols = _bound(terms, x_norms[:, None, None] * np.repeat(
        g_norms[col_channels], in_group, axis=0))
    reason = _compare("backward weights", grad[rows], want_rows, allowed_rows,
                      _grid(rows, np.arange(out_group), np.arange(taps)))
    if reason is not None:
        return reason
    return _compare("backward weights", grad[:, columns], want_cols, allowed_cols,
                    _grid(np.arange(in_channels), columns, np.arange(taps)))
