"""Settings from the environment, read once at import.

Junk in the environment must never make ``import mxdeconv`` fail: an unknown
value warns (a ``RuntimeWarning`` naming the variable, the value and what is
used instead) and the default applies.
"""
from __future__ import annotations

import os
import warnings
from typing import Optional, Sequence

__all__ = ["FALSE_WORDS", "TRUE_WORDS", "env_int", "env_word"]

FALSE_WORDS = ("0", "false", "off", "no")
TRUE_WORDS = ("1", "true", "on", "yes")


def env_word(name: str, default: str, extra: Sequence[str] = ()) -> str:
    """``$name`` as "on", "off" or one of ``extra`` (lower case), ``default``
    when it is unset or empty, and with a warning when it is anything else."""
    value = os.environ.get(name)
    word = "" if value is None else value.strip().lower()
    if word in TRUE_WORDS:
        return "on"
    if word in FALSE_WORDS:
        return "off"
    if word in extra:
        return word
    if word:
        accepted = "/".join(TRUE_WORDS + FALSE_WORDS + tuple(extra))
        warnings.warn(f"{name}={value!r} is not one of {accepted}; using {default!r}",
                      RuntimeWarning, stacklevel=3)
    return default


def env_int(name: str, default: int, low: int, high: int,
            what: Optional[str] = None) -> int:
    """``$name`` as an integer in [low, high], ``default`` when it is unset or
    empty, and with a warning when it is anything else (``what`` names the
    unit in the warning: "a byte count", ...)."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if not low <= number <= high:
        warnings.warn(f"{name}={value!r} is not {what or 'an integer'} in [{low}, {high}]; "
                      f"using {default}", RuntimeWarning, stacklevel=3)
        return default
    return number
