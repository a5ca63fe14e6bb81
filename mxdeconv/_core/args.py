"""Integer, flag and number arguments, checked one way everywhere: Python's
and NumPy's integers are ints, a bool is not (``True`` is an int to Python,
never a count, an axis or an extent to MXNet); a flag is a bool or the
integer 0 or 1 (MXNet parses ``keepdims=1``); a number is a real number that
is not a bool."""
from __future__ import annotations

import math
import numbers
from typing import Any, Optional, Sequence, Tuple, overload

import numpy as np

from .errors import MXNetError

__all__ = ["bool_arg", "choice_arg", "finite_real_arg", "int_arg", "ints_arg", "is_int",
           "option_arg", "real_arg", "type_error"]


def is_int(value: Any) -> bool:
    """Whether ``value`` is a Python or NumPy integer, and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def int_arg(name: str, value: Any) -> int:
    """``value`` as a Python int, or TypeError naming ``name``, the value and its type."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    return int(value)


def ints_arg(name: str, value: Any) -> Tuple[int, ...]:
    """``value``, an int or a tuple or list of ints (MXNet's shape and axis
    arguments), as a tuple of Python ints; TypeError naming ``name`` otherwise."""
    entries = (value,) if isinstance(value, numbers.Integral) else value
    if isinstance(value, (str, bytes)) or not isinstance(entries, (tuple, list)):
        raise TypeError(f"{name} must be an int or a tuple of ints, got {value!r} of type "
                        f"{type(value).__name__}")
    if not all(is_int(entry) for entry in entries):
        raise TypeError(f"{name} entries must be ints, got {value!r}")
    return tuple(int(entry) for entry in entries)


def bool_arg(name: str, value: Any) -> bool:
    """``value`` (a bool, NumPy's bool, or the integer 0 or 1) as a bool, or
    TypeError naming ``name``, the value and its type."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}")


def real_arg(name: str, value: Any) -> float:
    """``value`` (a Python or NumPy real number, not a bool) as a float, or
    TypeError naming ``name``, the value and its type."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} of type "
                        f"{type(value).__name__}")
    return float(value)


def choice_arg(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices`` (MXNet's enum arguments: act_type,
    mode, ...); TypeError for a non-string, MXNetError in MXNet's words for
    another string, both naming ``name`` and the choices."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {tuple(choices)}, got {value!r} of type "
                        f"{type(value).__name__}")
    if value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise MXNetError(f"{name}: Invalid Input: {value!r}, valid values are: {{{valid}}}")
    return value


# The Gluon forms (layers, parameters, initializers, optimizers): the message
# names the argument, what it accepts and what it got, in one sentence.
def type_error(name: str, expected: str, value: Any) -> TypeError:
    """A TypeError saying ``name must be <expected>, got <value> of type <type>``."""
    return TypeError(f"{name} must be {expected}, got {value!r} of type {type(value).__name__}")


def finite_real_arg(name: str, value: Any, minimum: Optional[float] = None) -> float:
    """A finite real number (Python's or NumPy's; a bool is not one here), at
    least ``minimum`` when it is given."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise type_error(name, "a real number", value)
    value = float(value)
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f" >= {minimum:g}"
        raise MXNetError(f"{name} must be a finite real number{bound}, got {name}={value!r}")
    return value


@overload
def option_arg(name: str, value: Any, choices: Sequence[str]) -> str: ...
@overload
def option_arg(name: str, value: Any, choices: Sequence[Optional[str]]) -> Optional[str]: ...


def option_arg(name: str, value: Any, choices: Sequence[Optional[str]]) -> Optional[str]:
    """One of ``choices`` (strings, and None where None is one of them)."""
    if not (isinstance(value, str) or (value is None and None in choices)):
        raise type_error(name, f"one of {tuple(choices)}", value)
    if value not in choices:
        raise MXNetError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value
