"""The backward of the operators NumPy computes on NDArrays (arithmetic,
reductions, shape changes, indexing, copies), as MXNet 1.9.1 defines them.

Each function is registered on the tape under the op name the forward
records (see :mod:`mxdeconv.ndarray.numpy_protocols` and :mod:`mxdeconv.ndarray.indexing`).
Gradients are computed in NumPy on default-layout buffers, summed back over
broadcast axes (:func:`reduce_to`) and written or added into their target
(:func:`deliver`).  Piecewise-constant operators (comparisons, ``sign``,
``floor``...) have zero gradients, as in MXNet.

>>> from mxdeconv import autograd, nd
>>> x = nd.array([1.0, 2.0, 3.0])
>>> x.attach_grad()
>>> with autograd.record():
...     y = (x[1:] ** 2 / 2).sum()
>>> y.backward()
>>> x.grad.asnumpy()
array([0., 2., 3.], dtype=float32)
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv.semantics import activations

from .ndarray import NDArray, write_values

__all__ = ["deliver", "reduce_to"]


def reduce_to(grad: np.ndarray, shape: Tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast result's gradient back to an operand's ``shape``."""
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(
        extra + i for i, extent in enumerate(shape) if extent == 1 and grad.shape[extra + i] != 1)
    # 16-bit floats are summed in float32, as the Deconvolution bias gradient is:
    # a bfloat16 running sum stops growing at 256 ones.
    wide = np.float32 if grad.dtype.kind == "V" or (
        grad.dtype.kind == "f" and grad.dtype.itemsize < 4) else None
    return grad.sum(axis=axes, keepdims=True, dtype=wide).astype(grad.dtype).reshape(shape)


def deliver(value: np.ndarray, req: str, target: Optional[NDArray],
            dtype: np.dtype) -> Optional[NDArray]:
    """A gradient by its req: None ("null"), written or added into ``target``,
    or a fresh copy in ``dtype`` (never a view of out_grad: gradients flowing
    to several inputs must not alias)."""
    if req == "null":
        return None
    return write_values(value, target, req == "add", dtype)


Backward = Callable[[Any, Tuple[Any, ...], Any, Tuple[str, ...], Tuple[Any, ...]],
                    Tuple[Any, ...]]


def _each_input(local: Callable[[int, np.ndarray, Sequence[np.ndarray]], np.ndarray],
                reduce: bool = True) -> Backward:
    """A backward that gives input ``i`` the gradient ``local(i, out_grad, values)``
    (``values``: each operand's values, recorded NDArray or constant), summed
    over the axes it was broadcast along."""
    def backward(out_grad: Any, inputs: Any, constants: Any, reqs: Any, targets: Any) -> Any:
        grad = out_grad._plain()
        values = [constants[i] if arr is None else arr._plain() for i, arr in enumerate(inputs)]
        results: List[Any] = []
        for i, (arr, req, target) in enumerate(zip(inputs, reqs, targets)):
            if arr is None or req == "null":
                results.append(None)
                continue
            with np.errstate(all="ignore"):  # inf/NaN where the math has them, as MXNet
                value = local(i, grad, values)
            if reduce:
                value = reduce_to(np.broadcast_to(value, grad.shape), arr.shape)
            results.append(deliver(value, req, target, arr.dtype))
        return tuple(results)
    return backward


def _register(op: str, local: Callable[..., np.ndarray], reduce: bool = True) -> None:
    tape.register_backward(op)(_each_input(local, reduce))


# -- elementwise -----------------------------------------------------------------------
def _other(i: int, v: Sequence[np.ndarray]) -> np.ndarray:
    return v[1 - i]


_register("add", lambda i, g, v: g)
_register("subtract", lambda i, g, v: g if i == 0 else -g)
_register("multiply", lambda i, g, v: g * _other(i, v))
_register("divide", lambda i, g, v: g / v[1] if i == 0 else -g * v[0] / (v[1] * v[1]))
_register("power", lambda i, g, v: g * v[1] * v[0] ** (v[1] - 1) if i == 0
          else g * v[0] ** v[1] * np.log(v[0]))
_register("mod", lambda i, g, v: g if i == 0 else -g * np.floor(v[0] / v[1]))
_register("maximum", lambda i, g, v: g * (v[0] >= v[1] if i == 0 else v[0] < v[1]))
_register("minimum", lambda i, g, v: g * (v[0] <= v[1] if i == 0 else v[0] > v[1]))
_register("negative", lambda i, g, v: -g)
_register("abs", lambda i, g, v: g * np.sign(v[0]))
_register("exp", lambda i, g, v: g * np.exp(v[0]))
_register("log", lambda i, g, v: g / v[0])
_register("sqrt", lambda i, g, v: g / (2 * np.sqrt(v[0])))
_register("square", lambda i, g, v: 2 * v[0] * g)
_register("tanh", lambda i, g, v: g * (1 - np.tanh(v[0]) ** 2))
_register("sin", lambda i, g, v: g * np.cos(v[0]))
_register("cos", lambda i, g, v: -g * np.sin(v[0]))
_register("tan", lambda i, g, v: g * (1 + np.tan(v[0]) ** 2))  # MXNet's: from the output
_register("expm1", lambda i, g, v: g * np.exp(v[0]))
_register("log1p", lambda i, g, v: g / (1 + v[0]))
_register("log2", lambda i, g, v: g / (v[0] * np.log(2)))
_register("log10", lambda i, g, v: g / (v[0] * np.log(10)))
_register("reciprocal", lambda i, g, v: -g / (v[0] * v[0]))
_register("rsqrt", lambda i, g, v: -0.5 * g / (v[0] * np.sqrt(v[0])))
# MXNet's sigmoid gradient, y * (1 - y), from the output (recomputed exactly).
_register("sigmoid", lambda i, g, v: activations.gradient(
    g, activations.forward(v[0], "sigmoid"), "sigmoid"))
# Piecewise constant: zero gradients (MXNet's MakeZeroGradNodes); argmax and
# argmin too (MXNet gives them zero gradients rather than none).
for _op in ("equal", "not_equal", "lesser", "lesser_equal", "greater", "greater_equal",
            "sign", "floor", "ceil", "rint", "round", "trunc", "floor_divide", "isnan",
            "isinf", "isfinite", "logical_and", "logical_or", "logical_xor", "logical_not"):
    _register(_op, lambda i, g, v: np.zeros_like(g))
for _op in ("argmax", "argmin"):
    _register(_op, lambda i, g, v: np.zeros(v[i].shape, g.dtype), reduce=False)


def _where_mask(condition: np.ndarray, ndim: int) -> np.ndarray:
    """``condition != 0``, a 1-D condition (one per row) shaped to broadcast."""
    mask = condition != 0
    return mask.reshape(mask.shape + (1,) * (ndim - mask.ndim)) if mask.ndim == 1 else mask


# where(condition, x, y): the condition gets a zero gradient, as in MXNet.
_register("where", lambda i, g, v: np.zeros(v[0].shape, g.dtype) if i == 0
          else g * (_where_mask(v[0], g.ndim) == (i == 1)), reduce=False)


# -- reductions: attrs = (axes or None, keepdims, input shape) --------------------------
def _expanded(grad: np.ndarray, axes: Any, keepdims: bool,
              shape: Tuple[int, ...]) -> np.ndarray:
    """A reduction's out_grad, broadcast back over the reduced axes of ``shape``."""
    axes = tuple(range(len(shape))) if axes is None else axes
    if not keepdims:
        grad = grad.reshape(tuple(1 if i in axes else n for i, n in enumerate(shape)))
    return np.broadcast_to(grad, shape)


def _reduction(local: Callable[[np.ndarray, np.ndarray, Any, Tuple[int, ...]], np.ndarray]
               ) -> Backward:
    def backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
        (arr,), (req,), (target,) = inputs, reqs, targets
        if req == "null":
            return (None,)
        axes, keepdims, shape = attrs
        grad = _expanded(out_grad._plain(), axes, keepdims, shape)
        with np.errstate(all="ignore"):
            value = local(grad, arr._plain(), axes, shape)
        return (deliver(value, req, target, arr.dtype),)
    return backward


def _count(axes: Any, shape: Tuple[int, ...]) -> int:
    return int(np.prod([shape[a] for a in (range(len(shape)) if axes is None else axes)]))


def _extreme_grad(which: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def local(grad: np.ndarray, x: np.ndarray, axes: Any, shape: Tuple[int, ...]) -> np.ndarray:
        # Every element equal to the extreme gets the gradient (MXNet's ties).
        return grad * (x == which(x, axis=axes, keepdims=True))
    return local


def _prod_grad(grad: np.ndarray, x: np.ndarray, axes: Any, shape: Tuple[int, ...]
               ) -> np.ndarray:
    """The product of the other elements, without dividing by a zero."""
    zero = x == 0
    nonzero = np.where(zero, 1, x)
    others = np.prod(nonzero, axis=axes, keepdims=True)
    zeros = np.sum(zero, axis=axes, keepdims=True)
    return grad * np.where(zeros == 0, others / nonzero, np.where((zeros == 1) & zero, others, 0))


tape.register_backward("sum")(_reduction(lambda grad, x, axes, shape: grad))
tape.register_backward("mean")(_reduction(lambda grad, x, axes, shape:
                                          grad / max(_count(axes, shape), 1)))
tape.register_backward("max")(_reduction(_extreme_grad(np.max)))
tape.register_backward("min")(_reduction(_extreme_grad(np.min)))
tape.register_backward("prod")(_reduction(_prod_grad))


@tape.register_backward("norm")
def _norm_backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
    (arr,), (req,), (target,) = inputs, reqs, targets
    if req == "null":
        return (None,)
    order, axes, keepdims, shape = attrs
    grad = _expanded(out_grad._plain(), axes, keepdims, shape)
    x = arr._plain()
    with np.errstate(all="ignore"):
        if order == 1:
            value = grad * np.sign(x)
        else:
            norm = np.sqrt(np.sum(np.square(x, dtype=np.float64), axis=axes, keepdims=True))
            value = grad * np.where(norm == 0, 0, x / norm)  # 0 at the origin, not NaN
    return (deliver(value, req, target, arr.dtype),)


# -- shapes, copies, joins ---------------------------------------------------------------
def _single(local: Callable[[np.ndarray, Any, NDArray], np.ndarray]) -> Backward:
    def backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
        (arr,), (req,), (target,) = inputs, reqs, targets
        if req == "null":
            return (None,)
        return (deliver(local(out_grad._plain(), attrs, arr), req, target, arr.dtype),)
    return backward


def _clip_grad(g: np.ndarray, bounds: Tuple[np.ndarray, np.ndarray], arr: NDArray) -> np.ndarray:
    low, high = bounds
    x = arr._plain()
    return g * ~((x > high) | (x < low))  # MXNet's: the bounds themselves pass


def _smooth_l1_grad(g: np.ndarray, sigma2: float, arr: NDArray) -> np.ndarray:
    x = arr._plain()
    with np.errstate(all="ignore"):
        inverse = 1 / np.float64(sigma2)
        return g * np.where(np.abs(x) <= inverse, sigma2 * x, np.sign(x))


tape.register_backward("clip")(_single(_clip_grad))
tape.register_backward("smooth_l1")(_single(_smooth_l1_grad))
tape.register_backward("reshape")(_single(lambda g, in_shape, arr: g.reshape(in_shape)))
tape.register_backward("transpose")(_single(lambda g, perm, arr:
                                            np.transpose(g, np.argsort(perm))))
tape.register_backward("copy")(_single(lambda g, attrs, arr: g))


def _tile_grad(g: np.ndarray, attrs: Tuple[Tuple[int, ...], Tuple[int, ...]],
               arr: NDArray) -> np.ndarray:
    """The tiles' gradients summed: each output axis of length ``r * s`` split
    into (``r`` repeats, ``s`` source positions), the repeats summed."""
    shape, reps = attrs
    split = tuple(n for pair in zip(reps, shape) for n in pair)
    return g.reshape(split).sum(axis=tuple(range(0, len(split), 2))).reshape(arr.shape)


tape.register_backward("tile")(_single(_tile_grad))


@tape.register_backward("broadcast_to")
@tape.register_backward("broadcast_like")
def _broadcast_backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
    """The first input's gradient summed back to its shape; broadcast_like's
    ``rhs`` (only its shape was read) gets zeros, as in MXNet."""
    grad = out_grad._plain()
    return tuple(None if req == "null" else deliver(
        reduce_to(grad, arr.shape) if i == 0 else np.zeros(arr.shape, grad.dtype), req, target,
        arr.dtype) for i, (arr, req, target) in enumerate(zip(inputs, reqs, targets)))


@tape.register_backward("concat")
def _concat_backward(out_grad: Any, inputs: Any, attrs: Any, reqs: Any, targets: Any) -> Any:
    dim, sizes = attrs
    parts = np.split(out_grad._plain(), np.cumsum(sizes)[:-1], axis=dim)
    return tuple(None if req == "null" else deliver(part, req, target, arr.dtype)
                 for part, arr, req, target in zip(parts, inputs, reqs, targets))


@tape.register_backward("stack")
def _stack_backward(out_grad: Any, inputs: Any, axis: Any, reqs: Any, targets: Any) -> Any:
    grad = out_grad._plain()
    return tuple(None if req == "null" else deliver(np.take(grad, i, axis=axis), req, target,
                                                    arr.dtype)
                 for i, (arr, req, target) in enumerate(zip(inputs, reqs, targets)))


# -- indexing: attrs = (NumPy key, input shape, NumPy's result shape) -------------------
def _scatter(advanced: bool) -> Backward:
    def local(grad: np.ndarray, attrs: Any, arr: Any) -> np.ndarray:
        key, shape, indexed_shape = attrs
        full = np.zeros(shape, dtype=grad.dtype)
        if advanced:  # repeated indices add up
            np.add.at(full, key, grad.reshape(indexed_shape))
        else:
            full[key] = grad.reshape(indexed_shape)
        return full
    return _single(local)


tape.register_backward("slice")(_scatter(False))
tape.register_backward("take")(_scatter(True))
