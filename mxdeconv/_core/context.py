"""Device contexts as MXNet names them: ``cpu(0)`` is the only one that runs.

MXNet code passes ``ctx=mx.cpu()`` (or ``mx.gpu(0)``, or a list of contexts to
Gluon) all over; a port keeps those arguments.  mxdeconv accepts every CPU
form and refuses a GPU with a clear error rather than ignoring it.

>>> import mxdeconv
>>> mxdeconv.cpu()
cpu(0)
>>> context_arg("ctx", "cpu(0)") == mxdeconv.cpu()
True
"""
from __future__ import annotations

import re
from typing import Any

from .errors import MXNetError

_DEVICE_TYPES = ("cpu", "gpu", "cpu_pinned", "cpu_shared")
_TEXT = re.compile(r"\s*(cpu|gpu|cpu_pinned|cpu_shared)\s*(?:\(\s*(\d+)\s*\))?\s*\Z")


class Context:
    """A device: ``Context("cpu", 0)``; equal contexts compare equal and hash alike.

    >>> from mxdeconv import Context, cpu
    >>> Context("cpu", 0) == cpu()
    True
    >>> Context("gpu", 1)
    gpu(1)
    """

    __slots__ = ("device_type", "device_id")
    device_type: str
    device_id: int

    def __init__(self, device_type: Any = "cpu", device_id: int = 0) -> None:
        if isinstance(device_type, Context):
            device_type, device_id = device_type.device_type, device_type.device_id
        if device_type not in _DEVICE_TYPES:
            raise MXNetError(f"Context: device_type must be one of {', '.join(_DEVICE_TYPES)}, "
                             f"got {device_type!r}")
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise MXNetError(f"Context: device_id must be an int >= 0, got {device_id!r}")
        self.device_type = device_type
        self.device_id = device_id

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Context) and other.device_type == self.device_type
                and other.device_id == self.device_id)

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    # MXNet's `with mx.cpu(): ...` scopes a default context; only the CPU exists here.
    def __enter__(self) -> "Context":
        return context_arg("context", self)

    def __exit__(self, *exc: Any) -> None:
        return None


def cpu(device_id: int = 0) -> Context:
    """The CPU context (``mx.cpu()``); the id is kept, as MXNet keeps it.

    >>> import mxdeconv
    >>> mxdeconv.cpu(), mxdeconv.cpu(1).device_id
    (cpu(0), 1)
    """
    return Context("cpu", device_id)


def gpu(device_id: int = 0) -> Context:
    """A GPU context, as ``mx.gpu()`` makes one; passing it to mxdeconv raises.

    >>> import mxdeconv
    >>> mxdeconv.nd.zeros((2,), ctx=mxdeconv.gpu(0))  # doctest: +SKIP
    Traceback (most recent call last):
        ...
    mxdeconv._core.errors.MXNetError: ctx=gpu(0): mxdeconv runs on the CPU only; ...
    >>> mxdeconv.gpu(0).device_type
    'gpu'
    """
    return Context("gpu", device_id)


def current_context() -> Context:
    """The default context: always ``cpu(0)``.

    >>> import mxdeconv
    >>> mxdeconv.current_context()
    cpu(0)
    """
    return cpu(0)


def context_arg(name: str, value: Any) -> Context:
    """``value`` as a CPU context: None (the default), a Context, ``"cpu"`` /
    ``"cpu(0)"``, or a non-empty list/tuple of these (Gluon's list of devices;
    all must be the CPU).  A GPU raises MXNetError; other types TypeError."""
    if value is None:
        return current_context()
    if isinstance(value, (list, tuple)):
        if not value:
            raise MXNetError(f"{name} must name at least one context, got {value!r}")
        contexts = [context_arg(name, item) for item in value]
        return contexts[0]
    if isinstance(value, str):
        match = _TEXT.match(value)
        if match is None:
            raise MXNetError(f"{name} must be a context such as 'cpu(0)', got {value!r}")
        value = Context(match.group(1), int(match.group(2) or 0))
    if not isinstance(value, Context):
        raise TypeError(f"{name} must be a Context (mxdeconv.cpu()), a string such as "
                        f"'cpu(0)' or None, got {value!r} of type {type(value).__name__}")
    if value.device_type == "gpu":
        raise MXNetError(f"{name}={value!r}: mxdeconv runs on the CPU only; use "
                         "mxdeconv.cpu() (or drop the argument)")
    return value
