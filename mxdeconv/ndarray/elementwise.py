"""MXNet's elementwise functions of two (or three) arrays: ``nd.add``,
``nd.subtract``, ..., ``nd.maximum``, ``nd.equal``, ..., the
``nd.broadcast_*`` and ``nd.elemwise_*`` families, ``nd.where``, and ``nd.relu``.

``nd.add(lhs, rhs)`` and its kind (MXNet's Python wrappers) take NDArrays or
numbers on either side, with broadcasting, and give a Python number for two
numbers; ``nd.broadcast_add(lhs, rhs)`` and its kind take two NDArrays;
``nd.elemwise_add`` and its kind two NDArrays of one shape.  All are the
NumPy ufunc, which NumPy hands to NDArray's ``__array_ufunc__``
(:mod:`mxdeconv.ndarray.numpy_protocols`: MXNet's dtype rules, comparisons
giving 0/1 in the operands' dtype), recorded by :mod:`mxdeconv.autograd` as
the operators ``+``, ``==``... are; either operand may also be a NumPy array
of the same dtype.  ``relu`` runs in NumPy on the default layout (a blocked
input is turned into the default layout first, in place).

>>> from mxdeconv import nd
>>> (nd.array([1.0, -2.0]) * 3 + 1).asnumpy()
array([ 4., -5.], dtype=float32)
>>> nd.maximum(nd.array([1.0, -2.0]), 0).asnumpy(), nd.add(1, 2)
(array([1., 0.], dtype=float32), 3)
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional, cast

import numpy as np

from . import numpy_protocols
from mxdeconv.autograd import tape
from mxdeconv._core.buffers import aligned_empty
from mxdeconv._core.errors import MXNetError
from .gradients import deliver as _deliver
from .ndarray import NDArray, as_ndarray
from .numpy_protocols import check_gradient, is_number, wrap
from .results import array_arg, check_name, into

__all__ = ["add", "divide", "equal", "greater", "greater_equal", "lesser", "lesser_equal",
           "maximum", "minimum", "modulo", "multiply", "not_equal", "power", "relu",
           "subtract", "true_divide", "where",
           # both operands NDArrays, with broadcasting
           "broadcast_add", "broadcast_div", "broadcast_equal", "broadcast_greater",
           "broadcast_greater_equal", "broadcast_lesser", "broadcast_lesser_equal",
           "broadcast_logical_and", "broadcast_logical_or", "broadcast_logical_xor",
           "broadcast_maximum", "broadcast_minimum", "broadcast_minus", "broadcast_mod",
           "broadcast_mul", "broadcast_not_equal", "broadcast_plus", "broadcast_power",
           "broadcast_sub",
           # both operands NDArrays of one shape
           "elemwise_add", "elemwise_div", "elemwise_mul", "elemwise_sub"]

Binary = Callable[..., Any]


def _plain(arr: NDArray) -> np.ndarray:
    return arr._plain()


def _binary(ufunc: np.ufunc, name: str, lhs: Any, rhs: Any) -> NDArray:
    if not isinstance(lhs, NDArray) and not isinstance(rhs, NDArray):
        if not isinstance(lhs, np.ndarray) and not isinstance(rhs, np.ndarray):
            raise TypeError(f"{name}: at least one operand must be an NDArray")
        # Two NumPy arrays: copied into NDArrays, so that the result is one too.
        lhs = as_ndarray(lhs, f"{name}: lhs") if isinstance(lhs, np.ndarray) else lhs
        rhs = as_ndarray(rhs, f"{name}: rhs") if isinstance(rhs, np.ndarray) else rhs
    return numpy_protocols.array_ufunc(ufunc, "__call__", (lhs, rhs), {})


# -- nd.add(lhs, rhs) and its kind: NDArrays or numbers --------------------------------
def _larger(lhs: Any, rhs: Any) -> Any:
    return lhs if lhs > rhs else rhs


def _smaller(lhs: Any, rhs: Any) -> Any:
    return lhs if lhs < rhs else rhs


def _as_01(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], int]:
    return lambda lhs, rhs: 1 if compare(lhs, rhs) else 0


def _number_or_array(function: str, ufunc: np.ufunc, on_numbers: Callable[[Any, Any], Any],
                     lhs: Any, rhs: Any) -> Any:
    """Two numbers: MXNet's Python result (``nd.add(1, 2)`` is 3); else the ufunc."""
    if is_number(lhs) and is_number(rhs):
        return on_numbers(lhs, rhs)
    return _binary(ufunc, function, lhs, rhs)


def _doc(function: str, what: str, call: str, result: Any, rule: str) -> str:
    """A docstring whose example shows ``result`` (literal values, printed as
    NumPy prints a float32 array)."""
    shown = repr(np.array(result, dtype=np.float32))
    return (f"{what} elementwise (MXNet's ``nd.{function}``), {rule}.\n\n"
            f">>> from mxdeconv import nd\n>>> nd.{function}({call}).asnumpy()\n{shown}\n")


#: name -> (ufunc, on two numbers, what it computes, nd.<name>(nd.array([1, 2, 3]), 2)).
_BINARY = {
    "add": (np.add, operator.add, "``lhs + rhs``", [3, 4, 5]),
    "subtract": (np.subtract, operator.sub, "``lhs - rhs``", [-1, 0, 1]),
    "multiply": (np.multiply, operator.mul, "``lhs * rhs``", [2, 4, 6]),
    "divide": (np.true_divide, operator.truediv, "``lhs / rhs`` (integer arrays truncate)",
               [0.5, 1, 1.5]),
    "true_divide": (np.true_divide, operator.truediv, "``lhs / rhs``, as :func:`divide`",
                    [0.5, 1, 1.5]),
    "modulo": (np.remainder, operator.mod, "``lhs % rhs`` (the sign of ``rhs``)", [1, 0, 1]),
    "maximum": (np.maximum, _larger, "The larger of ``lhs`` and ``rhs``", [2, 2, 3]),
    "minimum": (np.minimum, _smaller, "The smaller of ``lhs`` and ``rhs``", [1, 2, 2]),
    "equal": (np.equal, _as_01(operator.eq), "``lhs == rhs`` as 0/1", [0, 1, 0]),
    "not_equal": (np.not_equal, _as_01(operator.ne), "``lhs != rhs`` as 0/1", [1, 0, 1]),
    "greater": (np.greater, _as_01(operator.gt), "``lhs > rhs`` as 0/1", [0, 0, 1]),
    "greater_equal": (np.greater_equal, _as_01(operator.ge), "``lhs >= rhs`` as 0/1",
                      [0, 1, 1]),
    "lesser": (np.less, _as_01(operator.lt), "``lhs < rhs`` as 0/1", [1, 0, 0]),
    "lesser_equal": (np.less_equal, _as_01(operator.le), "``lhs <= rhs`` as 0/1", [1, 1, 0]),
}


def _binary_function(function: str) -> Binary:
    ufunc, on_numbers, what, result = _BINARY[function]

    def binary(lhs: Any, rhs: Any) -> Any:
        return _number_or_array(function, ufunc, on_numbers, lhs, rhs)
    binary.__name__ = binary.__qualname__ = function
    binary.__doc__ = _doc(function, what, "nd.array([1, 2, 3]), 2", result,
                          "with broadcasting; either side may be a number (two numbers give "
                          "a Python number)")
    return binary


add = _binary_function("add")
subtract = _binary_function("subtract")
multiply = _binary_function("multiply")
divide = _binary_function("divide")
true_divide = _binary_function("true_divide")
modulo = _binary_function("modulo")
maximum = _binary_function("maximum")
minimum = _binary_function("minimum")
equal = _binary_function("equal")
not_equal = _binary_function("not_equal")
greater = _binary_function("greater")
greater_equal = _binary_function("greater_equal")
lesser = _binary_function("lesser")
lesser_equal = _binary_function("lesser_equal")


def power(base: Any, exp: Any) -> Any:
    """``base ** exp`` elementwise (MXNet's ``nd.power``), with broadcasting;
    either side may be a number (two numbers give a Python number).

    >>> from mxdeconv import nd
    >>> nd.power(nd.array([1, 2, 3]), 2).asnumpy(), nd.power(2, nd.array([1, 2])).asnumpy()
    (array([1., 4., 9.], dtype=float32), array([2., 4.], dtype=float32))
    """
    return _number_or_array("power", np.power, operator.pow, base, exp)


# -- nd.broadcast_add(lhs, rhs) and nd.elemwise_add(lhs, rhs): two NDArrays ------------
#: op -> (ufunc, what it computes,
#:        nd.broadcast_<op>(nd.array([[0], [4]]), nd.array([2, 4]))).
_BROADCAST = {
    "add": (np.add, "``lhs + rhs``", [[2, 4], [6, 8]]),
    "sub": (np.subtract, "``lhs - rhs``", [[-2, -4], [2, 0]]),
    "mul": (np.multiply, "``lhs * rhs``", [[0, 0], [8, 16]]),
    "div": (np.true_divide, "``lhs / rhs`` (integers truncate)", [[0, 0], [2, 1]]),
    "mod": (np.remainder, "``lhs % rhs`` (the sign of ``rhs``)", [[0, 0], [0, 0]]),
    "power": (np.power, "``lhs ** rhs``", [[0, 0], [16, 256]]),
    "maximum": (np.maximum, "The larger of ``lhs`` and ``rhs``", [[2, 4], [4, 4]]),
    "minimum": (np.minimum, "The smaller of ``lhs`` and ``rhs``", [[0, 0], [2, 4]]),
    "equal": (np.equal, "``lhs == rhs`` as 0/1", [[0, 0], [0, 1]]),
    "not_equal": (np.not_equal, "``lhs != rhs`` as 0/1", [[1, 1], [1, 0]]),
    "greater": (np.greater, "``lhs > rhs`` as 0/1", [[0, 0], [1, 0]]),
    "greater_equal": (np.greater_equal, "``lhs >= rhs`` as 0/1", [[0, 0], [1, 1]]),
    "lesser": (np.less, "``lhs < rhs`` as 0/1", [[1, 1], [0, 0]]),
    "lesser_equal": (np.less_equal, "``lhs <= rhs`` as 0/1", [[1, 1], [0, 1]]),
    "logical_and": (np.logical_and, "``lhs and rhs`` as 0/1 (nonzero is true)",
                    [[0, 0], [1, 1]]),
    "logical_or": (np.logical_or, "``lhs or rhs`` as 0/1 (nonzero is true)", [[1, 1], [1, 1]]),
    "logical_xor": (np.logical_xor, "``lhs xor rhs`` as 0/1 (nonzero is true)",
                    [[1, 1], [0, 0]]),
}
#: op -> (ufunc, what it computes, nd.elemwise_<op>(nd.array([1, 2]), nd.array([4, 8]))).
_ELEMWISE = {
    "add": (np.add, "``lhs + rhs``", [5, 10]),
    "sub": (np.subtract, "``lhs - rhs``", [-3, -6]),
    "mul": (np.multiply, "``lhs * rhs``", [4, 16]),
    "div": (np.true_divide, "``lhs / rhs`` (integers truncate)", [0.25, 0.25]),
}


def _arrays_function(prefix: str, op: str) -> Binary:
    function = f"{prefix}_{op}"
    same_shape = prefix == "elemwise"
    ufunc, what, result = (_ELEMWISE if same_shape else _BROADCAST)[op]

    def binary(lhs: NDArray, rhs: NDArray, out: Optional[NDArray] = None,
               name: Optional[str] = None) -> NDArray:
        left = array_arg(function, lhs, "lhs")
        right = array_arg(function, rhs, "rhs")
        check_name(function, name)
        if same_shape and left.shape != right.shape:
            raise MXNetError(f"{function}: lhs has shape {left.shape} and rhs {right.shape}; "
                             f"{function} takes one shape (broadcast_{op} broadcasts)")
        return into(function, cast(NDArray, ufunc(left, right)), out,  # __array_ufunc__'s
                    (left, right))
    binary.__name__ = binary.__qualname__ = function
    binary.__doc__ = _doc(function, what, "nd.array([1, 2]), nd.array([4, 8])" if same_shape
                          else "nd.array([[0], [4]]), nd.array([2, 4])", result,
                          "of two NDArrays of one shape" if same_shape else
                          "of two NDArrays, with broadcasting")
    return binary


broadcast_add = _arrays_function("broadcast", "add")
broadcast_sub = _arrays_function("broadcast", "sub")
broadcast_mul = _arrays_function("broadcast", "mul")
broadcast_div = _arrays_function("broadcast", "div")
broadcast_mod = _arrays_function("broadcast", "mod")
broadcast_power = _arrays_function("broadcast", "power")
broadcast_maximum = _arrays_function("broadcast", "maximum")
broadcast_minimum = _arrays_function("broadcast", "minimum")
broadcast_equal = _arrays_function("broadcast", "equal")
broadcast_not_equal = _arrays_function("broadcast", "not_equal")
broadcast_greater = _arrays_function("broadcast", "greater")
broadcast_greater_equal = _arrays_function("broadcast", "greater_equal")
broadcast_lesser = _arrays_function("broadcast", "lesser")
broadcast_lesser_equal = _arrays_function("broadcast", "lesser_equal")
broadcast_logical_and = _arrays_function("broadcast", "logical_and")
broadcast_logical_or = _arrays_function("broadcast", "logical_or")
broadcast_logical_xor = _arrays_function("broadcast", "logical_xor")
#: MXNet's other names for :func:`broadcast_add` and :func:`broadcast_sub`.
broadcast_plus = broadcast_add
broadcast_minus = broadcast_sub
elemwise_add = _arrays_function("elemwise", "add")
elemwise_sub = _arrays_function("elemwise", "sub")
elemwise_mul = _arrays_function("elemwise", "mul")
elemwise_div = _arrays_function("elemwise", "div")


# -- where, relu ------------------------------------------------------------------------
def where(condition: NDArray, x: NDArray, y: NDArray, out: Optional[NDArray] = None,
          name: Optional[str] = None) -> NDArray:
    """``x`` where ``condition`` is nonzero, else ``y`` (MXNet's ``nd.where``).
    ``x`` and ``y`` have one shape and dtype; ``condition`` has their shape, or
    is 1-D with one value per row (``x.shape[0]``), in any dtype.  The
    gradient goes to ``x`` or ``y`` by the condition; ``condition`` gets zeros.

    >>> from mxdeconv import nd
    >>> x, y = nd.array([[1, 2], [3, 4]]), nd.zeros((2, 2))
    >>> nd.where(nd.array([[1, 0], [0, 1]]), x, y).asnumpy()
    array([[1., 0.],
           [0., 4.]], dtype=float32)
    >>> nd.where(nd.array([0, 1]), x, y).asnumpy()
    array([[0., 0.],
           [3., 4.]], dtype=float32)
    """
    cond = array_arg("where", condition, "condition")
    left, right = array_arg("where", x, "x"), array_arg("where", y, "y")
    check_name("where", name)
    if left.shape != right.shape:
        raise MXNetError(f"where: x has shape {left.shape} and y {right.shape}; they must match")
    if left.dtype != right.dtype:
        raise MXNetError(f"where: x has dtype {left.dtype} and y {right.dtype} (MXNet does not "
                         "promote dtypes: convert one with astype)")
    rows = cond.ndim == 1 and left.ndim >= 1 and cond.shape[0] == left.shape[0]
    if cond.shape != left.shape and not rows:
        raise MXNetError(f"where: condition has shape {cond.shape}; it must be x's shape "
                         f"{left.shape}, or 1-D of x.shape[0]")
    check_gradient("where", "where", (cond, left, right))
    mask = cond._plain() != 0
    if mask.shape != left.shape:
        mask = mask.reshape(mask.shape + (1,) * (left.ndim - 1))
    result = wrap(np.where(mask, left._plain(), right._plain()))
    inputs = (cond, left, right)
    return into("where", tape.record_op("where", result, inputs, None), out, inputs)


def relu(data: Any, out: Optional[NDArray] = None, name: Optional[str] = None) -> NDArray:
    """``max(data, 0)`` elementwise (MXNet's ``nd.relu``); the gradient is 0 at 0.

    >>> from mxdeconv import nd
    >>> nd.relu(nd.array([-1.0, 0.0, 2.0])).asnumpy()
    array([0., 0., 2.], dtype=float32)
    """
    arr = as_ndarray(data, "relu: data")
    check_name("relu", name)
    values = _plain(arr)
    buffer = aligned_empty(values.shape, values.dtype)
    np.maximum(values, 0, out=buffer)
    return into("relu", tape.record_op("relu", NDArray(buffer), (arr,), None), out, (arr,))


# -- backward ---------------------------------------------------------------------
@tape.register_backward("relu")
def _relu_backward(out_grad: Any, inputs: Any, constants: Any, reqs: Any, targets: Any) -> Any:
    (arr,), (req,), (target,) = inputs, reqs, targets
    if req == "null":
        return (None,)
    grad = _plain(out_grad) * (_plain(arr) > 0)
    return (_deliver(grad, req, target, arr.dtype),)
