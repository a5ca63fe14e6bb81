"""Integer arguments, checked one way everywhere: Python's and NumPy's
integers are ints, a bool is not (``True`` is an int to Python, never a
count, an axis or an extent to MXNet)."""
from __future__ import annotations

import numbers
from typing import Any, Tuple

__all__ = ["int_arg", "ints_arg", "is_int"]


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
