"""NDArray's operators and MXNet-style methods, written as calls of NumPy functions.

``x - y`` is ``np.subtract(x, y)`` and ``x.sum(axis=1)`` is
``np.sum(x, axis=(1,))``: NumPy hands the NDArray operands back to NDArray's
``__array_ufunc__`` / ``__array_function__``, which
:mod:`mxdeconv.ndarray.numpy_protocols` implements with MXNet 1.9.1's rules (dtypes,
result shapes, autograd); indexing goes to :mod:`mxdeconv.ndarray.indexing`.  This
module only turns MXNet's arguments (``reshape``'s special values,
``exclude=``, ``inplace=``) into NumPy's.  :class:`NDArrayMethods` is mixed into
NDArray (:mod:`mxdeconv.ndarray.ndarray`); the methods that hand NDArrays to those
modules (the protocols, indexing, ``astype``, ``copyto``, ``argmax``) are
theirs, set on NDArray when the package is imported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Tuple

import numpy as np

from mxdeconv._core.errors import MXNetError
from mxdeconv.semantics.shapes import infer_reshape, normalize_axis, reduce_axes

__all__ = ["NDArrayMethods"]


class NDArrayMethods:
    """The part of NDArray's API that NumPy computes (mixed into NDArray)."""

    __slots__ = ()
    # NDArray compares elementwise (x == y is an array), yet stays hashable by
    # identity, as MXNet's NDArray is (defining __eq__ would drop __hash__).
    __hash__ = object.__hash__

    if TYPE_CHECKING:  # NDArray's, declared for the type checker only
        @property
        def shape(self) -> Tuple[int, ...]: ...
        @property
        def ndim(self) -> int: ...
        @property
        def size(self) -> int: ...
        def asscalar(self) -> Any: ...
        def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray: ...
        def __getitem__(self, key: Any) -> Any: ...
        def _reshape_copy(self, shape: Any) -> Any: ...
        # The operators set on this class at the bottom of the module.
        def __add__(self, other: Any) -> Any: ...
        def __radd__(self, other: Any) -> Any: ...
        def __iadd__(self, other: Any) -> Any: ...
        def __sub__(self, other: Any) -> Any: ...
        def __rsub__(self, other: Any) -> Any: ...
        def __isub__(self, other: Any) -> Any: ...
        def __mul__(self, other: Any) -> Any: ...
        def __rmul__(self, other: Any) -> Any: ...
        def __imul__(self, other: Any) -> Any: ...
        def __truediv__(self, other: Any) -> Any: ...
        def __rtruediv__(self, other: Any) -> Any: ...
        def __itruediv__(self, other: Any) -> Any: ...
        def __mod__(self, other: Any) -> Any: ...
        def __rmod__(self, other: Any) -> Any: ...
        def __imod__(self, other: Any) -> Any: ...
        def __pow__(self, other: Any) -> Any: ...
        def __rpow__(self, other: Any) -> Any: ...
        def __floordiv__(self, other: Any) -> Any: ...
        def __rfloordiv__(self, other: Any) -> Any: ...
        def __eq__(self, other: Any) -> Any: ...  # elementwise, as MXNet's
        def __ne__(self, other: Any) -> Any: ...  # elementwise, as MXNet's
        def __lt__(self, other: Any) -> Any: ...
        def __le__(self, other: Any) -> Any: ...
        def __gt__(self, other: Any) -> Any: ...
        def __ge__(self, other: Any) -> Any: ...
        def __neg__(self) -> Any: ...
        def __abs__(self) -> Any: ...

    def __iter__(self) -> Iterator[Any]:
        # MXNet iterates over the first axis (x[i] for each i); a 0-d array
        # cannot be iterated, as in MXNet (which raises IndexError there).
        if not self.shape:
            raise TypeError("iteration over a 0-d NDArray")
        for index in range(self.shape[0]):
            yield self[index]

    def __bool__(self) -> bool:
        # MXNet's rule: empty is False, one element is its truth, more is an error.
        size = self.size
        if size == 0:
            return False
        if size == 1:
            return bool(self.asscalar())
        raise MXNetError(f"The truth value of an NDArray with multiple elements is ambiguous "
                         f"(shape {self.shape}): use (x != 0).sum() or x.asnumpy().any()")

    # -- shape ------------------------------------------------------------------
    def reshape(self, *shape: Any, **kwargs: Any) -> Any:
        """An array of another shape sharing this array's memory (MXNet's view).

        ``shape`` is a tuple or the dims as arguments, with MXNet's special
        values (``0`` copy a dim, ``-1`` infer it, ``-2`` copy the rest, ``-3``
        merge two dims, ``-4`` split one; ``reverse=True`` applies them from the
        right), see :func:`mxdeconv.semantics.shapes.infer_reshape`.  The result and this
        array share memory, so both are *exposed* (see :doc:`layouts`).

        >>> from mxdeconv import nd
        >>> x = nd.zeros((2, 3, 4))
        >>> x.reshape((0, -1)).shape, x.reshape(-3, 4).shape
        ((2, 12), (6, 4))
        >>> x.reshape(shape=(4, 6)).shape
        (4, 6)
        >>> y = x.reshape((-1,))
        >>> y[0] = 5
        >>> float(x[0, 0, 0].asscalar())
        5.0
        """
        unknown = sorted(set(kwargs) - {"shape", "reverse"})
        if unknown:
            raise TypeError(f"reshape: unknown keyword arguments {unknown}; it takes shape= "
                            "and reverse=")
        target: Any = shape
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            target = shape[0]
        elif not shape:
            if "shape" not in kwargs:
                raise TypeError("reshape: the new shape must be given")
            target = kwargs["shape"]
        elif "shape" in kwargs:
            raise TypeError("reshape: the new shape was given both as arguments and as shape=")
        reverse = kwargs.get("reverse", False)
        if not isinstance(reverse, (bool, np.bool_)):
            raise TypeError(f"reshape: reverse must be a bool, got {reverse!r}")
        return np.reshape(self, infer_reshape(self.shape, target, bool(reverse)))

    def flatten(self, inplace: bool = False) -> Any:
        """The array as 2-D ``(d0, d1*...*dk)``, MXNet's ``Flatten``: a copy, or a
        view sharing memory with ``inplace=True``.

        >>> from mxdeconv import nd
        >>> nd.zeros((2, 3, 4)).flatten().shape, nd.zeros((3,)).flatten().shape
        ((2, 12), (3, 1))
        """
        return self._reshaped(infer_reshape(self.shape, (0, -1)), inplace)

    def expand_dims(self, axis: int, inplace: bool = False) -> Any:
        """The array with a new axis of length 1 at ``axis`` (``-ndim-1 <= axis <= ndim``);
        a copy, or a view with ``inplace=True``.

        >>> from mxdeconv import nd
        >>> nd.zeros((2, 3)).expand_dims(1).shape
        (2, 1, 3)
        """
        position = normalize_axis("axis", axis, self.ndim + 1)
        return self._reshaped(self.shape[:position] + (1,) + self.shape[position:], inplace)

    def squeeze(self, axis: Any = None, inplace: bool = False) -> Any:
        """The array without axes of length 1 (all of them, or those in ``axis``);
        a copy, or a view with ``inplace=True``.

        >>> from mxdeconv import nd
        >>> x = nd.zeros((2, 1, 3, 1))
        >>> x.squeeze().shape, x.squeeze(1).shape
        ((2, 3), (2, 3, 1))
        """
        if axis is None:
            axes = tuple(a for a, extent in enumerate(self.shape) if extent == 1)
        else:
            axes = reduce_axes(self.shape, axis) or ()
            for a in axes:
                if self.shape[a] != 1:
                    raise MXNetError(f"squeeze: axis {a} has length {self.shape[a]}, not 1 "
                                     f"(shape {self.shape})")
        shape = tuple(extent for a, extent in enumerate(self.shape) if a not in axes)
        if not shape and self.ndim:
            shape = (1,)  # MXNet keeps one axis: its NDArray has no 0-d results
        return self._reshaped(shape, inplace)

    def _reshaped(self, shape: Any, inplace: bool) -> Any:
        """A view of another shape (``inplace=True``), or a reshaped copy that
        leaves this array unexposed."""
        if not isinstance(inplace, (bool, np.bool_)):
            raise TypeError(f"inplace must be a bool, got {inplace!r}")
        return np.reshape(self, shape) if inplace else self._reshape_copy(shape)

    @property
    def T(self) -> Any:
        """The array with its axes reversed: a copy, or the array itself when it has
        fewer than 2 dims (as in MXNet).

        >>> from mxdeconv import nd
        >>> nd.zeros((2, 3)).T.shape
        (3, 2)
        """
        return self if self.ndim < 2 else np.transpose(self)

    def transpose(self, *args: Any, axes: Any = None) -> Any:
        """A copy with the axes permuted (reversed when ``axes`` is None or
        empty), given as one tuple, as in MXNet: ``x.transpose(2, 0, 1)`` and
        negative axes raise there, and here.

        >>> from mxdeconv import nd
        >>> x = nd.zeros((2, 3, 4))
        >>> x.transpose().shape, x.transpose((1, 0, 2)).shape
        ((4, 3, 2), (3, 2, 4))
        >>> x.transpose(axes=(2, 0, 1)).shape
        (4, 2, 3)
        """
        if len(args) > 1 or (args and not (args[0] is None or isinstance(args[0], (tuple, list)))):
            raise TypeError(f"transpose: axes must be one tuple, as x.transpose(axes=(2, 0, 1)) "
                            f"(MXNet takes no separate axes), got {args!r}")
        if args:
            if axes is not None:
                raise TypeError("transpose: axes given both as arguments and as axes=")
            axes = args[0]
        if axes is not None and len(axes) == 0:
            axes = None
        if axes is not None and any(isinstance(a, int) and not 0 <= a < self.ndim
                                    for a in axes):
            raise MXNetError(f"transpose: axes={tuple(axes)!r} are out of range [0, {self.ndim}) "
                             "(MXNet takes no negative axes here)")
        return np.transpose(self, axes)

    # -- reductions -------------------------------------------------------------
    def sum(self, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Any:
        """The sum over ``axis`` (None or ``()``: all axes; ``exclude=True``: the
        axes not listed).  Reducing every axis gives shape ``(1,)`` (MXNet has no
        0-d results), or all ones with ``keepdims=True``.

        >>> from mxdeconv import nd
        >>> x = nd.array([[1, 2], [3, 4]])
        >>> x.sum().asnumpy(), x.sum(axis=0).asnumpy(), x.sum(1, keepdims=True).shape
        (array([10.], dtype=float32), array([4., 6.], dtype=float32), (2, 1))
        """
        return np.sum(self, axis=reduce_axes(self.shape, axis, exclude), keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Any:
        """The mean over ``axis`` (arguments as :meth:`sum`); integer arrays give
        the truncated integer mean, as in MXNet.

        >>> from mxdeconv import nd
        >>> nd.array([[1, 2], [3, 4]]).mean(axis=1).asnumpy()
        array([1.5, 3.5], dtype=float32)
        """
        return np.mean(self, axis=reduce_axes(self.shape, axis, exclude), keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Any:
        """The maximum over ``axis`` (arguments as :meth:`sum`).

        >>> from mxdeconv import nd
        >>> nd.array([[1, 5], [3, 4]]).max(axis=0).asnumpy()
        array([3., 5.], dtype=float32)
        """
        return np.max(self, axis=reduce_axes(self.shape, axis, exclude), keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Any:
        """The minimum over ``axis`` (arguments as :meth:`sum`).

        >>> from mxdeconv import nd
        >>> nd.array([[1, 5], [3, 4]]).min().asnumpy()
        array([1.], dtype=float32)
        """
        return np.min(self, axis=reduce_axes(self.shape, axis, exclude), keepdims=keepdims)

    def prod(self, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Any:
        """The product over ``axis`` (arguments as :meth:`sum`).

        >>> from mxdeconv import nd
        >>> nd.array([1, 2, 3]).prod().asnumpy()
        array([6.], dtype=float32)
        """
        return np.prod(self, axis=reduce_axes(self.shape, axis, exclude), keepdims=keepdims)

    def norm(self, ord: int = 2, axis: Any = None, keepdims: bool = False) -> Any:
        """The L2 (``ord=2``) or L1 (``ord=1``) norm of the values over ``axis``
        (None: all of them, as one vector), MXNet's ``norm``.

        >>> from mxdeconv import nd
        >>> nd.array([[3, 4], [6, 8]]).norm(axis=1).asnumpy()
        array([ 5., 10.], dtype=float32)
        """
        return np.linalg.norm(self, ord=ord, axis=reduce_axes(self.shape, axis),
                              keepdims=keepdims)

    # -- new arrays -------------------------------------------------------------
    def zeros_like(self) -> Any:
        """Zeros of this array's shape and dtype.

        >>> from mxdeconv import nd
        >>> nd.ones((2,), dtype="float64").zeros_like().asnumpy()
        array([0., 0.])
        """
        return np.zeros_like(self)

    def ones_like(self) -> Any:
        """Ones of this array's shape and dtype.

        >>> from mxdeconv import nd
        >>> nd.zeros((2,)).ones_like().asnumpy()
        array([1., 1.], dtype=float32)
        """
        return np.ones_like(self)

    def copy(self) -> Any:
        """A deep copy in the default layout (recorded by autograd, as MXNet's
        ``_copyto`` is).

        >>> from mxdeconv import nd
        >>> x = nd.ones((2,))
        >>> y = x.copy()
        >>> y is x, y.asnumpy()
        (False, array([1., 1.], dtype=float32))
        """
        return np.copy(self)


def _unary_method(ufunc: np.ufunc, name: str, example: str, result: str) -> Callable[[Any], Any]:
    def method(self: Any) -> Any:
        return ufunc(self)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"``np.{ufunc.__name__}`` of each element (MXNet's ``{name}``), in this "
                      f"array's dtype.\n\n>>> from mxdeconv import nd\n"
                      f">>> nd.array({example}).{name}().asnumpy()\n{result}\n")
    return method


# x.abs(), x.sqrt(), ...: MXNet's fluent methods, each one NumPy ufunc.
_ufunc: np.ufunc  # every loop below binds a ufunc of another type (to the type checker)
for _name, _ufunc, _example, _result in (
        ("abs", np.absolute, "[-1.5, 2.0]", "array([1.5, 2. ], dtype=float32)"),
        ("sign", np.sign, "[-1.5, 0.0, 2.0]", "array([-1.,  0.,  1.], dtype=float32)"),
        ("sqrt", np.sqrt, "[4.0, 9.0]", "array([2., 3.], dtype=float32)"),
        ("square", np.square, "[2.0, -3.0]", "array([4., 9.], dtype=float32)"),
        ("exp", np.exp, "[0.0]", "array([1.], dtype=float32)"),
        ("log", np.log, "[1.0]", "array([0.], dtype=float32)")):
    setattr(NDArrayMethods, _name, _unary_method(_ufunc, _name, _example, _result))


def _binary_methods(ufunc: np.ufunc, name: str, in_place: bool) -> None:
    """``__name__``, ``__rname__`` and, where MXNet has it, ``__iname__``."""
    def forward(self: Any, other: Any) -> Any:
        return ufunc(self, other)

    def reflected(self: Any, other: Any) -> Any:
        return ufunc(other, self)

    def in_place_method(self: Any, other: Any) -> Any:
        return ufunc(self, other, out=(self,))

    methods = [(f"__{name}__", forward), (f"__r{name}__", reflected)]
    if in_place:
        methods.append((f"__i{name}__", in_place_method))
    for method_name, method in methods:
        method.__name__ = method.__qualname__ = method_name
        setattr(NDArrayMethods, method_name, method)


# MXNet's operators: x + y is broadcast_add, x + 2 is _plus_scalar, x += y writes x.
# `//` is an mxdeconv extension (MXNet 1.9.1 has no floor division); MXNet has
# no in-place `**=` or `//=`, which Python then runs as `x = x ** y`.
for _name, _ufunc, _in_place in (
        ("add", np.add, True), ("sub", np.subtract, True), ("mul", np.multiply, True),
        ("truediv", np.true_divide, True), ("mod", np.remainder, True),
        ("pow", np.power, False), ("floordiv", np.floor_divide, False)):
    _binary_methods(_ufunc, _name, _in_place)


def _comparison(ufunc: np.ufunc, name: str) -> None:
    def method(self: Any, other: Any) -> Any:
        return ufunc(self, other)
    method.__name__ = method.__qualname__ = f"__{name}__"
    setattr(NDArrayMethods, method.__name__, method)


# Comparisons give 0/1 in the operands' dtype, as MXNet 1.x does (not booleans).
for _name, _ufunc in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                      ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal)):
    _comparison(_ufunc, _name)


def _unary_operator(ufunc: np.ufunc, name: str) -> None:
    def method(self: Any) -> Any:
        return ufunc(self)
    method.__name__ = method.__qualname__ = f"__{name}__"
    setattr(NDArrayMethods, method.__name__, method)


_unary_operator(np.negative, "neg")
_unary_operator(np.absolute, "abs")
del _name, _ufunc, _example, _result, _in_place
