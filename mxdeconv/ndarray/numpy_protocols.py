"""How NumPy computes on NDArrays: ``__array_ufunc__`` and ``__array_function__``
with MXNet 1.9.1's rules, recorded on the autograd tape.

NDArray's operators and methods are NumPy calls (:mod:`mxdeconv.ndarray.methods`);
NumPy hands them back here, and so do NumPy functions that user code calls on
NDArrays.  NumPy computes on the default-layout buffers (a blocked array is
turned plain first, in place) and the result is a new default-layout NDArray.
Where MXNet 1.9.1 differs from NumPy, MXNet wins:

* the result has the operands' dtype: operands of different dtypes raise
  (MXNet does not promote), a Python number is first cast to that dtype
  (``int32 / 2.5`` divides by 2), integer division truncates, comparisons
  give 0/1 in that dtype;
* ``x % 0`` and integer ``x / 0`` give 0 (MXNet: 0, or a crash);
* reducing every axis gives shape ``(1,)``, not a 0-d array;
* ``transpose`` copies, ``reshape`` shares memory (see :doc:`layouts`).

NumPy functions without an MXNet counterpart here run as before, on NumPy
views of the buffers, and return NumPy results.

>>> from mxdeconv import nd
>>> x = nd.array([7, -7, 5], dtype="int32")
>>> (x / 2).asnumpy(), (x % 3).asnumpy()
(array([ 3, -3,  2], dtype=int32), array([1, 2, 2], dtype=int32))
>>> np.exp(nd.zeros((2,))).asnumpy()
array([1., 1.], dtype=float32)
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.args import bool_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.buffers import aligned_empty
from mxdeconv._core.context import Context, context_arg
from mxdeconv._core.dtypes import is_ndarray_dtype
from .ndarray import NDArray, _check_dtype
from mxdeconv.semantics.shapes import normalize_axis, reduce_axes

__all__ = ["check_writable", "scalar", "wrap"]

_INPLACE_IN_RECORD = ("Inplace operations (+=, -=, x[:]=, etc) are not supported when "
                      "recording with autograd: the operand needs a gradient, which the write "
                      "would lose; write x = x + y instead")


# -- values in and out ---------------------------------------------------------------
def is_number(value: Any) -> bool:
    """A real Python or NumPy number (bools count, as in MXNet)."""
    return isinstance(value, (numbers.Real, np.bool_))


def scalar(name: str, value: Any, dtype: np.dtype) -> np.ndarray:
    """A number as a 0-d array of ``dtype``, cast as MXNet casts scalar operands:
    floats truncated for integer dtypes, overflow to inf for float dtypes; an
    integer that does not fit, or a float that does not fit an integer dtype,
    raises."""
    value = int(value) if isinstance(value, (bool, np.bool_)) else value
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        as_float = float(value) if not isinstance(value, numbers.Integral) else None
        if as_float is not None and not math.isfinite(as_float):
            raise MXNetError(f"{name} {value!r} does not fit in {dtype}")
        whole = int(value) if as_float is None else int(as_float)
        if not info.min <= whole <= info.max:
            raise MXNetError(f"{name} {_short(value)} does not fit in {dtype} "
                             f"({info.min} to {info.max})")
        return np.asarray(whole, dtype=dtype)
    try:
        if dtype.kind == "f" and abs(float(value)) <= _FLOAT_MAX.get(dtype, 0.0):
            return np.asarray(value, dtype=dtype)  # fits: no overflow to silence
        with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf, as MXNet
            return np.asarray(value, dtype=dtype)
    except (OverflowError, TypeError, ValueError):
        raise MXNetError(f"{name} {_short(value)} does not fit in {dtype}") from None


_FLOAT_MAX = {np.dtype(t): float(np.finfo(t).max) for t in (np.float16, np.float32, np.float64)}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def wrap(values: np.ndarray, dtype: Optional[np.dtype] = None) -> NDArray:
    """A new default-layout NDArray holding a copy of ``values`` (in ``dtype``)."""
    buffer = aligned_empty(values.shape, values.dtype if dtype is None else dtype)
    with np.errstate(all="ignore"):
        np.copyto(buffer, values, casting="unsafe")
    return NDArray(buffer)


def check_gradient(name: str, op: str, inputs: Sequence[Optional[NDArray]]) -> None:
    """Refuse, before computing, an operator without a gradient on arrays that
    need one while recording: its gradient would silently be missing."""
    if not tape.has_backward(op) and tape.would_record(inputs):
        raise MXNetError(f"{name}: no gradient is defined for this operator in mxdeconv, and an "
                         "input needs one inside autograd.record(); compute it outside "
                         "record(), under autograd.pause(), or on x.detach()")


def check_writable(name: str, target: NDArray, sources: Sequence[Any] = ()) -> np.ndarray:
    """Before writing ``target`` through mxdeconv: MXNet's autograd rules (no
    write into an array of the recorded graph; no in-place write of a value
    that needs a gradient while recording), then writable memory.  Returns the
    default-layout buffer to write (a blocked target is turned plain)."""
    tape.check_assignable(name, target)
    if tape.would_record([s for s in sources if isinstance(s, NDArray)]):
        raise MXNetError(f"{name}: {_INPLACE_IN_RECORD}")
    buffer = target._plain()
    if not buffer.flags.writeable:
        raise MXNetError(f"{name}: the array of shape {target.shape} is read-only (imported "
                         "through a read-only DLPack capsule); copy it with nd.array() first")
    return buffer


# -- ufuncs --------------------------------------------------------------------------
#: ufunc -> the op name recorded on the tape (MXNet's names where they differ).
_OP_NAMES = {np.add: "add", np.subtract: "subtract", np.multiply: "multiply",
             np.true_divide: "divide", np.floor_divide: "floor_divide", np.remainder: "mod",
             np.power: "power", np.negative: "negative", np.absolute: "abs",
             np.maximum: "maximum", np.minimum: "minimum", np.equal: "equal",
             np.not_equal: "not_equal", np.less: "lesser", np.less_equal: "lesser_equal",
             np.greater: "greater", np.greater_equal: "greater_equal"}


def _operands(name: str, inputs: Tuple[Any, ...]) -> Tuple[Tuple[Optional[NDArray], ...],
                                                            Tuple[np.ndarray, ...], np.dtype]:
    """(NDArray or None per operand, the operands' values, the operation's dtype)."""
    sides = ("lhs", "rhs") if len(inputs) == 2 else tuple(
        "data" if len(inputs) == 1 else f"operand {i}" for i in range(len(inputs)))
    dtype = None
    arrays: List[Optional[NDArray]] = []
    for side, value in zip(sides, inputs):
        if isinstance(value, NDArray):
            arrays.append(value)
            found = value.dtype
        elif isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
            # A NumPy scalar, as NumPy hands one over when it is the left
            # operand (np.float64(1.5) < x): a number to MXNet.
            arrays.append(None)
            continue
        elif isinstance(value, np.ndarray):
            if not is_ndarray_dtype(value.dtype):
                raise TypeError(f"{name}: {side} must be an array of a dtype NDArray holds, got "
                                f"a NumPy array of dtype {value.dtype}")
            arrays.append(None)
            found = value.dtype
        elif is_number(value):
            arrays.append(None)
            continue
        else:
            raise TypeError(f"{name}: {side} must be an NDArray or a number, got "
                            f"{type(value).__name__}")
        if dtype is None:
            dtype = found
        elif found != dtype:
            raise MXNetError(f"{name}: operands have different dtypes {dtype} and {found} "
                             "(MXNet does not promote dtypes: convert one with astype)")
    if dtype is None:
        raise TypeError(f"{name}: at least one operand must be an NDArray")
    _arithmetic_dtype(name, dtype)
    values = []
    for side, value, arr in zip(sides, inputs, arrays):
        if arr is not None:
            values.append(arr._plain())
        elif isinstance(value, np.ndarray) and value.ndim:
            values.append(value)
        else:
            number = value.item() if isinstance(value, np.ndarray) else value
            values.append(scalar(f"{name}: {side}", number, dtype))
    return tuple(arrays), tuple(values), dtype


def _broadcast(name: str, values: Tuple[np.ndarray, ...]) -> Tuple[int, ...]:
    """The operands' broadcast shape (the common cases without NumPy's helper,
    which costs a microsecond per call)."""
    shapes = {v.shape for v in values}
    if len(shapes) == 1:
        return values[0].shape
    if len(shapes) == 2 and () in shapes:
        return max(shapes, key=len)
    try:
        return np.broadcast_shapes(*(v.shape for v in values))
    except ValueError:
        raise MXNetError(f"{name}: operands could not be broadcast together with shapes "
                         f"{', '.join(str(v.shape) for v in values)}") from None


def _arithmetic_dtype(name: str, dtype: np.dtype) -> None:
    """Bool arrays (``nd.load`` returns them) take copies, indexing and astype,
    not arithmetic: MXNet's NDArray operators refuse them outside NumPy mode."""
    if dtype == np.bool_:
        raise TypeError(f"{name}: operands of dtype bool are not supported (MXNet's NDArray "
                        "operators take none); convert with astype('int32') or "
                        "astype('float32') first")


def _truncating_divide(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Integer a / b rounded toward zero (C's, MXNet's), 0 where b is 0."""
    floor = np.floor_divide(a, b)  # 0 where b == 0
    inexact = np.remainder(a, b) != 0
    np.add(floor, inexact & ((a < 0) != (b < 0)), out=out, casting="unsafe")


def _remainder(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Python's modulo (the divisor's sign), 0 where b is 0 (MXNet's)."""
    np.remainder(a, b, out=out, casting="unsafe")
    np.copyto(out, 0, where=np.broadcast_to(b == 0, out.shape))


def _power(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    if a.dtype.kind in "iu" and (b < 0).any():
        # MXNet computes integer powers as C does: 2 ** -1 truncates to 0.
        np.power(a.astype(np.float64), b, out=out, casting="unsafe")
    else:
        np.power(a, b, out=out, casting="unsafe")


def _compute(ufunc: np.ufunc, values: Tuple[np.ndarray, ...], dtype: np.dtype,
             shape: Tuple[int, ...]) -> np.ndarray:
    buffer = aligned_empty(shape, dtype)
    with np.errstate(all="ignore"):  # MXNet is silent about inf, NaN and wrap-around
        if ufunc is np.true_divide and dtype.kind in "iu":
            _truncating_divide(values[0], values[1], out=buffer)
        elif ufunc is np.remainder:
            _remainder(values[0], values[1], out=buffer)
        elif ufunc is np.power:
            _power(values[0], values[1], out=buffer)
        else:
            ufunc(*values, out=buffer, casting="unsafe")
            if ufunc is np.sign and dtype.kind in "fV":  # MXNet: the sign of NaN is 0
                np.copyto(buffer, 0, where=np.isnan(buffer))
    return buffer


def array_ufunc(ufunc: np.ufunc, method: str, inputs: Tuple[Any, ...],
                kwargs: Dict[str, Any]) -> Any:
    """``NDArray.__array_ufunc__``: ``ufunc(*inputs)`` as MXNet computes it."""
    if method != "__call__" or ufunc.nout != 1 or ufunc.signature is not None:
        return _numpy_fallback(getattr(ufunc, method), inputs, kwargs,
                               f"np.{ufunc.__name__}.{method}" if method != "__call__"
                               else f"np.{ufunc.__name__}")
    op = _OP_NAMES.get(ufunc, ufunc.__name__)
    out = kwargs.pop("out", None)
    if kwargs:
        raise TypeError(f"{op}: NDArray operands take no keyword arguments besides out=, got "
                        f"{sorted(kwargs)}")
    arrays, values, dtype = _operands(op, inputs)
    shape = _broadcast(op, values)
    if out is not None:
        return _in_place(op, ufunc, out, arrays, values, dtype, shape)
    check_gradient(op, op, arrays)
    result = NDArray(_compute(ufunc, values, dtype, shape))
    constants = tuple(v if a is None else None for a, v in zip(arrays, values))
    return tape.record_op(op, result, arrays, constants)


def _in_place(op: str, ufunc: np.ufunc, out: Tuple[Any, ...],
              arrays: Tuple[Optional[NDArray], ...], values: Tuple[np.ndarray, ...],
              dtype: np.dtype, shape: Tuple[int, ...]) -> NDArray:
    """``x += y`` and ``np.add(x, y, out=x)``: computed, then written into ``out``."""
    target = out[0] if len(out) == 1 else None
    if not isinstance(target, NDArray):
        raise TypeError(f"{op}: out= must be one NDArray, got "
                        f"{', '.join(type(o).__name__ for o in out)}")
    name = f"{op}(out=)"
    tape.check_assignable(name, target)
    if tape.would_record(arrays):
        raise MXNetError(f"{name}: {_INPLACE_IN_RECORD}")
    if target.dtype != dtype:
        raise MXNetError(f"{name}: out= has dtype {target.dtype} but the result has dtype "
                         f"{dtype} (MXNet does not cast in place)")
    if target.shape != shape:
        raise MXNetError(f"{name}: Shape inconsistent: out= has shape {target.shape} but the "
                         f"result has shape {shape}")
    result = _compute(ufunc, values, dtype, shape)
    buffer = check_writable(name, target)
    np.copyto(buffer, result)
    target._bump()
    return target


def _numpy_fallback(func: Callable[..., Any], args: Any, kwargs: Dict[str, Any],
                    name: Optional[str] = None) -> Any:
    """A NumPy function with no MXNet counterpart here: NumPy runs it on views of
    the buffers (np.asarray: the arrays become exposed) and returns NumPy results,
    which autograd cannot follow: refused on arrays that need a gradient while
    recording."""
    def arrays(value: Any) -> Any:
        if isinstance(value, NDArray):
            yield value
        elif isinstance(value, (list, tuple)):
            for entry in value:
                yield from arrays(entry)

    name = name or f"np.{getattr(func, '__name__', func)}"
    check_gradient(name, f"numpy {name}", list(arrays((tuple(args), tuple(kwargs.values())))))

    def plain(value: Any) -> Any:
        if isinstance(value, NDArray):
            return np.asarray(value)
        if isinstance(value, (list, tuple)):
            return type(value)(plain(v) for v in value)
        return value
    return func(*plain(tuple(args)), **{k: plain(v) for k, v in kwargs.items()})


# -- array functions -----------------------------------------------------------------
_FUNCTIONS: Dict[Any, Callable[..., Any]] = {}


def _implements(*funcs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(impl: Callable[..., Any]) -> Callable[..., Any]:
        for func in funcs:
            if func is not None:
                _FUNCTIONS[func] = impl
        return impl
    return register


def array_function(func: Any, types: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """``NDArray.__array_function__``: MXNet's semantics for the NumPy functions
    NDArray's methods call, NumPy's own for the others."""
    impl = _FUNCTIONS.get(func)
    if impl is None:
        return _numpy_fallback(func, args, kwargs)
    if not all(issubclass(t, (NDArray, np.ndarray)) for t in types):
        return NotImplemented
    return impl(*args, **kwargs)


def _ndarray(name: str, value: Any) -> NDArray:
    if not isinstance(value, NDArray):
        raise TypeError(f"{name}: data must be an NDArray, got {type(value).__name__}")
    return value


def _no_extras(name: str, **given: Any) -> None:
    extras = sorted(k for k, v in given.items() if v is not None and v is not np._NoValue)
    if extras:
        raise TypeError(f"{name}: NDArray does not take {', '.join(extras)}")


def _axes(name: str, axis: Any, ndim: int) -> Optional[Tuple[int, ...]]:
    """NumPy's axis argument (None: all, an int or a tuple; ``()``: none),
    checked as MXNet checks axes (in range, no duplicates)."""
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)) and not axis:
        return ()
    return reduce_axes((0,) * ndim, axis, name=f"{name}: axis")


def _keepdims(name: str, keepdims: Any) -> bool:
    """A bool, or 0 or 1 as MXNet takes it (``keepdims=1``)."""
    return False if keepdims is np._NoValue else bool_arg(f"{name}: keepdims", keepdims)


def _reduced(name: str, op: str, arr: NDArray, result: np.ndarray, axes: Any,
             keepdims: bool, attrs: Any = None) -> NDArray:
    """Wrap a reduction's result in the input's dtype; every axis reduced gives (1,)."""
    if result.ndim == 0:
        result = result.reshape(1)
    out = wrap(result, arr.dtype)
    return tape.record_op(op, out, (arr,), (axes, keepdims, arr.shape) if attrs is None
                          else attrs)


def _reduction(op: str, compute: Callable[..., np.ndarray]) -> Callable[..., NDArray]:
    def impl(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
             keepdims: Any = False, **rest: Any) -> NDArray:
        arr = _ndarray(op, a)
        _no_extras(op, dtype=dtype, out=out, **rest)
        axes = _axes(op, axis, arr.ndim)
        keep = _keepdims(op, keepdims)
        _arithmetic_dtype(op, arr.dtype)
        check_gradient(op, op, (arr,))
        values = arr._plain()
        with np.errstate(all="ignore"):
            result = compute(values, axes, keep)
        return _reduced(op, op, arr, result, axes, keep)
    impl.__name__ = op
    return impl


def _accumulator(dtype: np.dtype) -> Any:
    """Sums of 16-bit floats are formed in float32 (a float16 running sum stops
    growing at 2048), of integers in int64."""
    if dtype.kind in "iu":
        return np.int64
    return np.float32 if dtype.itemsize < 4 else None


def _sum(values: np.ndarray, axes: Any, keep: bool) -> np.ndarray:
    return np.sum(values, axis=axes, keepdims=keep, dtype=_accumulator(values.dtype))


def _mean(values: np.ndarray, axes: Any, keep: bool) -> Any:  # an array or a NumPy scalar
    wide = np.float64 if values.dtype.kind in "iu" else _accumulator(values.dtype)
    return np.mean(values, axis=axes, keepdims=keep, dtype=wide)


def _prod(values: np.ndarray, axes: Any, keep: bool) -> np.ndarray:
    return np.prod(values, axis=axes, keepdims=keep, dtype=_accumulator(values.dtype))


def _extreme(which: Callable[..., np.ndarray], name: str) -> Callable[..., np.ndarray]:
    def compute(values: np.ndarray, axes: Any, keep: bool) -> np.ndarray:
        reduced = range(values.ndim) if axes is None else axes
        if any(values.shape[a] == 0 for a in reduced):
            raise MXNetError(f"{name}: cannot reduce an empty axis of shape {values.shape}")
        return which(values, axis=axes, keepdims=keep)
    return compute


_implements(np.sum)(_reduction("sum", _sum))
_implements(np.mean)(_reduction("mean", _mean))
_implements(np.prod)(_reduction("prod", _prod))
_implements(np.max, getattr(np, "amax", None))(_reduction("max", _extreme(np.max, "max")))
_implements(np.min, getattr(np, "amin", None))(_reduction("min", _extreme(np.min, "min")))


@_implements(np.linalg.norm)
def _norm(x: Any, ord: Any = None, axis: Any = None, keepdims: Any = False) -> NDArray:
    """MXNet's ``norm``: the L2 (ord None or 2) or L1 norm of the values over
    ``axis`` taken as one vector (never a matrix norm)."""
    arr = _ndarray("norm", x)
    if ord is None:
        ord = 2
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise TypeError(f"norm: ord must be 1 or 2, got {ord!r}")
    if ord not in (1, 2):
        raise MXNetError(f"norm: only ord=1 and ord=2 are supported (MXNet's norm), got {ord!r}")
    axes = _axes("norm", axis, arr.ndim)
    keep = _keepdims("norm", keepdims)
    _arithmetic_dtype("norm", arr.dtype)
    check_gradient("norm", "norm", (arr,))
    values = arr._plain()
    wide = np.float64 if values.dtype.kind in "iu" else _accumulator(values.dtype)
    with np.errstate(all="ignore"):
        if ord == 2:
            result = np.sqrt(np.sum(np.square(values, dtype=wide), axis=axes, keepdims=keep))
        else:
            result = np.sum(np.abs(values), axis=axes, keepdims=keep, dtype=wide)
    return _reduced("norm", "norm", arr, result, axes, keep,
                    (1 if ord == 1 else 2, axes, keep, arr.shape))


@_implements(np.reshape)
def _reshape(a: Any, newshape: Any = None, order: str = "C", *, shape: Any = None,
             copy: Any = None) -> NDArray:
    """An array of another shape sharing the memory (both become exposed)."""
    arr = _ndarray("reshape", a)
    if order != "C" or copy:
        raise MXNetError(f"reshape: only order='C' without copy is supported, got order="
                         f"{order!r}, copy={copy!r}")
    target = shape if newshape is None else newshape
    if target is None:
        raise TypeError("reshape: the new shape must be given")
    plain = arr._plain()
    try:
        plain.reshape(target)
    except ValueError as error:
        raise MXNetError(f"reshape: cannot reshape an array of shape {arr.shape} into "
                         f"{target!r}: {error}") from None
    except TypeError as error:
        raise TypeError(f"reshape: the new shape must be ints, got {target!r}: {error}") \
            from None
    return _shared(arr, lambda buffer: buffer.reshape(target), "reshape", arr.shape)


def reshape_copy(arr: NDArray, shape: Tuple[int, ...]) -> NDArray:
    """A reshaped copy (``flatten()``, ``expand_dims()``): recorded as a reshape,
    and ``arr`` stays unexposed."""
    check_gradient("reshape", "reshape", (arr,))
    return tape.record_op("reshape", wrap(arr._plain().reshape(shape)), (arr,), arr.shape)


def _shared(arr: NDArray, view_of: Callable[[np.ndarray], np.ndarray], op: str,
            attrs: Any) -> NDArray:
    """A new NDArray over ``view_of(buffer)``: both arrays are exposed, so that
    neither ever swaps its buffer for a blocked one (the view would go stale)."""
    check_gradient(op, op, (arr,))
    view = NDArray(view_of(arr._expose()))
    view._exposed = True
    return tape.record_op(op, view, (arr,), attrs)


@_implements(np.transpose)
def _transpose(a: Any, axes: Any = None) -> NDArray:
    """A transposed copy (MXNet's transpose copies)."""
    arr = _ndarray("transpose", a)
    ndim = arr.ndim
    if axes is None:
        perm = tuple(range(ndim))[::-1]
    else:
        if isinstance(axes, (str, bytes)) or not isinstance(axes, (tuple, list)):
            raise TypeError(f"transpose: axes must be a tuple of ints, got {axes!r}")
        perm = tuple(normalize_axis("transpose: axes entry", entry, ndim) for entry in axes)
        if sorted(perm) != list(range(ndim)):
            raise MXNetError(f"transpose: axes={tuple(axes)} is not a permutation of the "
                             f"{ndim} axes of shape {arr.shape}")
    check_gradient("transpose", "transpose", (arr,))
    out = wrap(np.transpose(arr._plain(), perm))
    return tape.record_op("transpose", out, (arr,), perm)


def _same_dtype(name: str, arrays: Sequence[NDArray]) -> np.dtype:
    dtypes = sorted({str(a.dtype) for a in arrays})
    if len(dtypes) > 1:
        raise MXNetError(f"{name}: arrays have different dtypes {dtypes} (MXNet does not "
                         "promote dtypes: convert them with astype)")
    return arrays[0].dtype


def _sequence(name: str, arrays: Any) -> Tuple[NDArray, ...]:
    if isinstance(arrays, NDArray) or not isinstance(arrays, (list, tuple)):
        raise TypeError(f"{name}: takes a sequence of NDArrays, got {type(arrays).__name__}")
    if not arrays:
        raise MXNetError(f"{name}: needs at least one array")
    for i, arr in enumerate(arrays):
        if not isinstance(arr, NDArray):
            hint = (f" (pass the arrays as separate arguments: nd.{name}(*arrays))"
                    if isinstance(arr, (list, tuple)) else "")
            raise TypeError(f"{name}: array {i} must be an NDArray, got "
                            f"{type(arr).__name__}{hint}")
    return tuple(arrays)


@_implements(np.concatenate)
def _concatenate(arrays: Any, axis: Any = 0, out: Any = None, **rest: Any) -> NDArray:
    """MXNet's ``concat``: the arrays joined along ``axis``."""
    arrays = _sequence("concat", arrays)
    _no_extras("concat", out=out, **rest)
    dtype = _same_dtype("concat", arrays)
    first = arrays[0].shape
    if not first:
        raise MXNetError("concat: cannot join 0-d arrays")
    dim = normalize_axis("concat: dim", axis, len(first))
    for arr in arrays[1:]:
        if arr.ndim != len(first) or any(a != b for i, (a, b) in enumerate(
                zip(arr.shape, first)) if i != dim):
            raise MXNetError(f"concat: shapes {', '.join(str(a.shape) for a in arrays)} differ "
                             f"outside dim {dim}")
    check_gradient("concat", "concat", arrays)
    out = NDArray(aligned_empty(first[:dim] + (sum(a.shape[dim] for a in arrays),)
                                + first[dim + 1:], dtype))
    np.concatenate([a._plain() for a in arrays], axis=dim, out=out._state[0])
    return tape.record_op("concat", out, arrays, (dim, tuple(a.shape[dim] for a in arrays)))


@_implements(np.stack)
def _stack(arrays: Any, axis: Any = 0, out: Any = None, **rest: Any) -> NDArray:
    """MXNet's ``stack``: the arrays joined along a new axis."""
    arrays = _sequence("stack", arrays)
    _no_extras("stack", out=out, **rest)
    dtype = _same_dtype("stack", arrays)
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays):
        raise MXNetError(f"stack: arrays must have one shape, got "
                         f"{', '.join(str(a.shape) for a in arrays)}")
    position = normalize_axis("stack: axis", axis, len(shape) + 1)
    check_gradient("stack", "stack", arrays)
    out = NDArray(aligned_empty(shape[:position] + (len(arrays),) + shape[position:], dtype))
    np.stack([a._plain() for a in arrays], axis=position, out=out._state[0])
    return tape.record_op("stack", out, arrays, position)


@_implements(np.copy)
def _copy(a: Any, order: str = "K", subok: bool = False) -> NDArray:
    """A deep copy (recorded: its gradient is the output's)."""
    arr = _ndarray("copy", a)
    check_gradient("copy", "copy", (arr,))
    return tape.record_op("copy", wrap(arr._plain()), (arr,), None)


def _like(name: str, fill: int) -> Callable[..., NDArray]:
    def impl(a: Any, dtype: Any = None, order: str = "K", subok: bool = True,
             shape: Any = None, **rest: Any) -> NDArray:
        arr = _ndarray(name, a)
        _no_extras(name, shape=shape, **rest)
        out = NDArray(aligned_empty(arr.shape, arr.dtype if dtype is None
                                    else _check_dtype(dtype)))
        out._state[0].fill(fill)
        return out
    impl.__name__ = name
    return impl


_implements(np.zeros_like)(_like("zeros_like", 0))
_implements(np.ones_like)(_like("ones_like", 1))


# -- NDArray methods with no NumPy function -------------------------------------------
def astype(arr: NDArray, dtype: Any, copy: bool = True) -> NDArray:
    """``arr.astype(dtype, copy)``: recorded like a copy (the gradient is cast back)."""
    dtype = _check_dtype(dtype)
    if not isinstance(copy, (bool, np.bool_)):
        raise TypeError(f"astype: copy must be a bool, got {copy!r}")
    if not copy and dtype == arr.dtype:
        return arr
    check_gradient("astype", "copy", (arr,))
    return tape.record_op("copy", wrap(arr._plain(), dtype), (arr,), None)


def copyto(arr: NDArray, other: Any) -> Any:
    """``arr.copyto(other)``: into an NDArray of the same shape (its dtype kept;
    recorded, as MXNet records ``_copyto``), or a new array on a context."""
    if isinstance(other, NDArray):
        if other is arr:
            warnings.warn("You are attempting to copy an array to itself", RuntimeWarning,
                          stacklevel=3)
            return False
        if other.shape != arr.shape:
            raise MXNetError(f"copyto: the target has shape {other.shape}, the source "
                             f"{arr.shape}")
        check_gradient("copyto", "copy", (arr,))
        buffer = check_writable("copyto", other)
        with np.errstate(all="ignore"):
            np.copyto(buffer, arr._plain(), casting="unsafe")
        other._bump()
        return tape.record_op("copy", other, (arr,), None)
    if isinstance(other, (Context, str)):
        context_arg("copyto: other", other)
        return np.copy(arr)
    raise TypeError(f"copyto: other must be an NDArray or a Context, got {other!r} of type "
                    f"{type(other).__name__}")


def as_in_context(arr: NDArray, context: Any) -> NDArray:
    """``arr.as_in_context(ctx)``: the array itself, on the only device there is."""
    context_arg("context", context)
    return arr


# -- NDArray's methods that hand the array to this module ------------------------------
def _array_ufunc_method(self: NDArray, ufunc: np.ufunc, method: str, *inputs: Any,
                        **kwargs: Any) -> Any:
    return array_ufunc(ufunc, method, inputs, kwargs)


def _array_function_method(self: NDArray, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    return array_function(func, types, args, kwargs)


def _astype_method(self: NDArray, dtype: Any, copy: bool = True) -> Any:
    """A copy converted to ``dtype`` (floats become integers by truncation);
    with ``copy=False`` the array itself when it already has that dtype.

    >>> from mxdeconv import nd
    >>> nd.array([1.7, -1.7]).astype("int32").asnumpy()
    array([ 1, -1], dtype=int32)
    >>> x = nd.ones((2,))
    >>> x.astype("float32", copy=False) is x
    True
    """
    return astype(self, dtype, copy)


def _copyto_method(self: NDArray, other: Any) -> Any:
    """Copy the values into ``other``: an NDArray of the same shape (any dtype;
    returned), or a context (a new array there is returned).

    >>> import mxdeconv
    >>> from mxdeconv import nd
    >>> target = nd.zeros((2,), dtype="int32")
    >>> nd.array([1.5, 2.5]).copyto(target).asnumpy()
    array([1, 2], dtype=int32)
    >>> nd.ones((2,)).copyto(mxdeconv.cpu()).shape
    (2,)
    """
    return copyto(self, other)


def _as_in_context_method(self: NDArray, context: Any) -> Any:
    """This array on ``context``: the array itself (only the CPU exists here;
    a GPU context raises).

    >>> import mxdeconv
    >>> from mxdeconv import nd
    >>> x = nd.ones((2,))
    >>> x.as_in_context(mxdeconv.cpu()) is x
    True
    """
    return as_in_context(self, context)


def _reshape_copy_method(self: NDArray, shape: Any) -> NDArray:
    return reshape_copy(self, shape)


def install() -> None:
    """Set NumPy's protocols, ``astype``, ``copyto``, ``as_in_context`` and
    ``_reshape_copy`` on NDArray.  The package's ``__init__`` calls this:
    :mod:`mxdeconv.ndarray.ndarray` defines NDArray without importing this
    module, which builds on it."""
    for name, method in (("__array_ufunc__", _array_ufunc_method),
                         ("__array_function__", _array_function_method),
                         ("astype", _astype_method), ("copyto", _copyto_method),
                         ("as_in_context", _as_in_context_method),
                         ("_reshape_copy", _reshape_copy_method)):
        method.__name__, method.__qualname__ = name, f"NDArray.{name}"
        setattr(NDArray, name, method)
