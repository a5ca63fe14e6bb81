"""Random NDArrays with MXNet's signatures (``mx.nd.random`` / ``mx.random``).

Samples come from NumPy's global generator, the one Gluon's initializers draw
from too, so :func:`seed` makes a whole script reproducible, as
``mx.random.seed`` does.  The numbers differ from MXNet's (another
generator); the distributions, shapes, dtypes and argument checks are MXNet's.

>>> from mxdeconv import nd
>>> import mxdeconv
>>> mxdeconv.random.seed(42)
>>> a = nd.random.uniform(-1, 1, shape=(2, 3))
>>> mxdeconv.random.seed(42)
>>> bool((nd.random.uniform(-1, 1, shape=(2, 3)) == a).prod().asscalar())
True
>>> a.shape, a.dtype
((2, 3), dtype('float32'))
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import numpy as np

from mxdeconv._core.args import int_arg
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.context import context_arg
from mxdeconv._core.dtypes import as_dtype
from .ndarray import NDArray, _shape_arg
from .numpy_protocols import check_gradient, check_writable, is_number, wrap

__all__ = ["normal", "seed", "uniform"]

_DTYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def seed(seed_state: int, ctx: Any = "all") -> None:
    """Seed the generator behind :func:`uniform`, :func:`normal` and Gluon's
    initializers (NumPy's global one); ``ctx`` is MXNet's ``"all"`` or a CPU context.

    >>> import mxdeconv
    >>> mxdeconv.random.seed(7)
    >>> first = mxdeconv.nd.random.normal(shape=(3,)).asnumpy()
    >>> mxdeconv.random.seed(7)
    >>> bool((mxdeconv.nd.random.normal(shape=(3,)).asnumpy() == first).all())
    True
    """
    seed_state = int_arg("seed: seed_state", seed_state)
    if not 0 <= seed_state < 2**32:
        raise MXNetError(f"seed: seed_state must be in [0, 2**32), got {seed_state}")
    if not (isinstance(ctx, str) and ctx == "all"):
        context_arg("seed: ctx", ctx)
    np.random.seed(int(seed_state))


def _sample(name: str, draw: Callable[..., Any], params: Tuple[Any, Any],
            names: Tuple[str, str], check: Callable[[np.ndarray, np.ndarray], Optional[str]],
            shape: Any, dtype: Any, ctx: Any, out: Optional[NDArray]) -> NDArray:
    if ctx is not None:
        context_arg(f"{name}: ctx", ctx)
    if out is not None and not isinstance(out, NDArray):
        raise TypeError(f"{name}: out must be an NDArray, got {type(out).__name__}")
    if dtype is None:
        dtype = out.dtype if out is not None else np.dtype(np.float32)
    try:
        dtype = as_dtype(dtype)
    except TypeError as error:
        raise TypeError(f"{name}: dtype must name a dtype, got {dtype!r}: {error}") from None
    if dtype not in _DTYPES:
        raise MXNetError(f"{name}: Invalid Input: dtype {str(dtype)!r}, valid values are "
                         "float16, float32, float64")
    first, second = params
    if is_number(first) and is_number(second):
        low, high = np.asarray(float(first)), np.asarray(float(second))
        if shape is None:
            shape = out.shape if out is not None else (1,)
        size = _shape_arg(shape)
        batch: Tuple[int, ...] = ()
    elif isinstance(first, NDArray) and isinstance(second, NDArray):
        if first.shape != second.shape:
            raise MXNetError(f"{name}: {names[0]} and {names[1]} must have one shape, got "
                             f"{first.shape} and {second.shape}")
        check_gradient(name, f"random.{name}", (first, second))
        batch = first.shape
        size = batch + (() if shape is None else _shape_arg(shape))
        extra = (np.newaxis,) * (len(size) - len(batch))
        low = first._plain().astype(np.float64)[(Ellipsis,) + extra]
        high = second._plain().astype(np.float64)[(Ellipsis,) + extra]
    else:
        raise TypeError(f"{name}: {names[0]} and {names[1]} must both be numbers or both "
                        f"NDArrays, got {type(first).__name__} and {type(second).__name__}")
    problem = check(low, high)
    if problem:
        raise MXNetError(f"{name}: {problem}")
    if out is not None:
        if out.shape != size or out.dtype != dtype:
            raise MXNetError(f"{name}: out= has shape {out.shape} and dtype {out.dtype}, the "
                             f"samples shape {size} and dtype {dtype}")
        buffer = check_writable(f"{name}(out=)", out)
        buffer[...] = draw(low, high, size)
        out._bump()
        return out
    return wrap(draw(low, high, size), dtype)


def uniform(low: Any = 0, high: Any = 1, shape: Any = None, dtype: Any = None,
            ctx: Any = None, out: Optional[NDArray] = None) -> NDArray:
    """Samples from the uniform distribution on ``[low, high)``.

    ``low``/``high`` are numbers (result shape ``shape``, default ``(1,)``) or
    NDArrays of one shape (result ``low.shape + shape``: samples per pair).
    ``dtype`` is float16, float32 (default) or float64; ``out`` receives them.

    >>> from mxdeconv import nd
    >>> x = nd.random.uniform(0, 1, shape=(2, 2), dtype="float64")
    >>> x.shape, x.dtype, bool(((x >= 0) * (x < 1)).prod().asscalar())
    ((2, 2), dtype('float64'), True)
    >>> nd.random.uniform(nd.zeros((3,)), nd.ones((3,)), shape=2).shape
    (3, 2)
    """
    def check(a: np.ndarray, b: np.ndarray) -> Optional[str]:
        if (a > b).any():
            return f"low must be less or equal to high, got low={_show(a)}, high={_show(b)}"
        return None
    return _sample("uniform", lambda a, b, size: np.random.uniform(a, b, size),
                   (low, high), ("low", "high"), check, shape, dtype, ctx, out)


def normal(loc: Any = 0, scale: Any = 1, shape: Any = None, dtype: Any = None,
           ctx: Any = None, out: Optional[NDArray] = None) -> NDArray:
    """Samples from the normal distribution of mean ``loc`` and standard deviation
    ``scale`` (> 0, as MXNet requires); arguments as :func:`uniform`.

    >>> from mxdeconv import nd
    >>> nd.random.normal(0, 1, shape=(1000,)).shape
    (1000,)
    """
    def check(a: np.ndarray, b: np.ndarray) -> Optional[str]:
        if not (b > 0).all():
            return f"scale must be positive, got scale={_show(b)}"
        return None
    return _sample("normal", lambda a, b, size: np.random.normal(a, b, size),
                   (loc, scale), ("loc", "scale"), check, shape, dtype, ctx, out)


def _show(values: np.ndarray) -> str:
    return repr(values.item()) if values.size == 1 else f"an array of shape {values.shape}"
