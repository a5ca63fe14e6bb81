"""Integer, flag and number arguments, checked one way everywhere: Python's
and NumPy's integers are ints, a bool is not (``True`` is an int to Python,
never a count, an axis or an extent to MXNet); a flag is a bool or the
integer 0 or 1 (MXNet parses ``keepdims=1``); a number is a real number that
is not a bool."""
from __future__ import annotations

import numbers
from typing import Any, Sequence, Tuple

import numpy as np

from .errors import MXNetError

__all__ = ["bool_arg", "choice_arg", "int_arg", "ints_arg", "is_int", "real_arg"]


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
