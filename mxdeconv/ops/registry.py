"""Operator registry: each operator has implementations tried in order.

An implementation has a support check (MXNet's ``SupportMKLDNNDeconv``
analogue) that returns ``None`` when it can run a call, or the reason it
cannot.  Dispatch picks the first implementation that supports the call,
unless one is forced with :func:`use_impl`, or the oneDNN path is switched
off with :func:`set_onednn_enabled` / the environment variable
``MXDECONV_ONEDNN=0`` (``MXNET_MKLDNN_ENABLED=0`` is honoured too, with a
warning naming its cost).
:func:`last_impl` tells which implementation ran the last call of this thread.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional

from mxdeconv._core.env import env_word
from mxdeconv._core.errors import MXNetError

ONEDNN, NUMPY = "onednn", "numpy"
IMPLEMENTATIONS = (ONEDNN, NUMPY)


MKLDNN_WARNING = (
    "MXNET_MKLDNN_ENABLED=0 is honoured: every Deconvolution runs on mxdeconv's NumPy "
    "path, several times slower than oneDNN (4x on a DCGAN generator).  A port that "
    "kept this line from MXNet rarely means it; set MXDECONV_ONEDNN=0 to mean it "
    "(then no warning), or drop the line to run on oneDNN.")


def _env_enabled() -> bool:
    """The oneDNN switch from the environment (MXDECONV_ONEDNN, or MXNet's
    MXNET_MKLDNN_ENABLED); an unknown value warns and leaves it on.

    MXNet programs often set ``MXNET_MKLDNN_ENABLED=0`` to dodge one of MXNet's
    own oneDNN failures; carried into a port it silently costs the oneDNN path,
    so it warns (once: this runs once, at import) unless ``MXDECONV_ONEDNN=0``
    says the same thing in mxdeconv's words."""
    ours = env_word("MXDECONV_ONEDNN", "on")
    mxnet = env_word("MXNET_MKLDNN_ENABLED", "on")
    if mxnet == "off" and ours == "on":
        warnings.warn(MKLDNN_WARNING, UserWarning, stacklevel=2)
    return ours == "on" and mxnet == "on"


#: Whether dispatch may choose oneDNN: read by the compiled hot path once per
#: call (set it through set_onednn_enabled).
onednn_on = _env_enabled()
class _ThreadDispatch(threading.local):
    """Each thread's forced implementation and the one its last call ran."""

    forced: Optional[str] = None
    last: Optional[str] = None


#: This thread's dispatch switches (the forced implementation, the last one
#: run): read by the compiled hot path once per call.
dispatch = _ThreadDispatch()


@dataclass(frozen=True)
class Implementation:
    """One way to run an operator.

    ``supports(call)`` returns None or a reason string, from the call alone
    (dtype, shapes, what is loaded): cheap and without side effects.
    ``prepare(call)``, if any, is the costly step after it that may still
    refuse (the oneDNN planner: choosing and checking a plan, kept in
    ``call.plan``); dispatch runs it only for the implementation it is about
    to select.  ``forward`` and ``backward`` take the prepared call.
    """

    name: str
    supports: Callable[[Any], Optional[str]]
    forward: Callable[..., Any]
    backward: Callable[..., Any]
    prepare: Optional[Callable[[Any], Optional[str]]] = None


class Operator:
    """An operator name and its implementations in order of preference."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.implementations: List[Implementation] = []

    def register(self, implementation: Implementation) -> None:
        self.implementations.append(implementation)

    @staticmethod
    def _prepared(impl: Implementation, call: Any) -> Optional[str]:
        """None if ``impl`` can run ``call`` (now prepared), else why not."""
        reason = impl.supports(call)
        if reason is None and impl.prepare is not None:
            reason = impl.prepare(call)
        return reason

    def _refusal(self, impl: Implementation, call: Any) -> Optional[str]:
        """As :meth:`_prepared`, and the oneDNN path only while it is enabled."""
        if impl.name == ONEDNN and not onednn_on:
            return "the oneDNN path is disabled (set_onednn_enabled(False) or MXDECONV_ONEDNN=0)"
        return self._prepared(impl, call)

    def reasons(self, call: Any) -> Dict[str, Optional[str]]:
        """For each implementation, None if it would run ``call``, else why not
        (each one prepared: for :meth:`explain`, not for dispatch)."""
        return {impl.name: self._refusal(impl, call) for impl in self.implementations}

    def select(self, call: Any) -> Implementation:
        """The first implementation that can run ``call``, prepared; records it
        for :func:`last_impl`.  Those after it are not asked."""
        forced = dispatch.forced
        if forced is not None:
            return self._forced(forced, call)
        refusals = {}
        for impl in self.implementations:
            reason = self._refusal(impl, call)
            if reason is None:
                dispatch.last = impl.name
                return impl
            refusals[impl.name] = reason
        raise MXNetError(f"{self.name}: no implementation supports this call: {refusals}")

    def _forced(self, name: str, call: Any) -> Implementation:
        for impl in self.implementations:
            if impl.name == name:
                reason = self._prepared(impl, call)  # forced: even while switched off
                if reason is not None:
                    raise MXNetError(f"{self.name}: implementation {name!r} was forced "
                                     f"but cannot run this call: {reason}")
                dispatch.last = impl.name
                return impl
        raise MXNetError(f"{self.name}: no implementation named {name!r}; "
                         f"known: {[i.name for i in self.implementations]}")

    def explain(self, call: Any) -> str:
        """Which implementation would run ``call``, and why the others would not."""
        reasons = self.reasons(call)
        chosen = next((n for n, r in reasons.items() if r is None), None)
        lines = [f"{self.name}: {chosen or 'nothing'} would run"]
        lines += [f"  {name}: {'supported' if reason is None else reason}"
                  for name, reason in reasons.items()]
        return "\n".join(lines)


_operators: Dict[str, Operator] = {}


def operator(name: str) -> Operator:
    """The registered operator ``name`` (created empty on first use)."""
    if name not in _operators:
        _operators[name] = Operator(name)
    return _operators[name]


def last_impl() -> Optional[str]:
    """Name of the implementation that ran the last operator call in this thread.

    >>> import numpy as np, mxdeconv
    >>> from mxdeconv import nd
    >>> y = nd.Deconvolution(np.ones((1, 2, 3, 3)), np.ones((2, 1, 2, 2)),
    ...                      kernel=(2, 2), num_filter=1)
    >>> mxdeconv.last_impl()
    'numpy'
    """
    return dispatch.last


@contextlib.contextmanager
def use_impl(name: str) -> Iterator[None]:
    """Force implementation ``name`` ("onednn" or "numpy") inside the scope.

    A call the forced implementation cannot run raises :class:`MXNetError`.

    >>> import numpy as np, mxdeconv
    >>> from mxdeconv import nd
    >>> x, w = nd.ones((1, 2, 3, 3)), nd.ones((2, 1, 2, 2))
    >>> with mxdeconv.use_impl("numpy"):
    ...     y = nd.Deconvolution(x, w, kernel=(2, 2), num_filter=1)
    >>> mxdeconv.last_impl()
    'numpy'
    """
    if not isinstance(name, str):
        raise TypeError(f"use_impl: name must be a string, one of {IMPLEMENTATIONS}, got "
                        f"{name!r} of type {type(name).__name__}")
    if name not in IMPLEMENTATIONS:
        raise MXNetError(f"use_impl: no implementation named {name!r}; known: "
                         f"{IMPLEMENTATIONS}")
    previous = dispatch.forced
    dispatch.forced = name
    try:
        yield
    finally:
        dispatch.forced = previous


def set_onednn_enabled(enabled: bool) -> bool:
    """Switch the oneDNN path on or off for every thread; returns the old value.

    >>> import mxdeconv
    >>> previous = mxdeconv.set_onednn_enabled(False)
    >>> mxdeconv.onednn_enabled()
    False
    >>> _ = mxdeconv.set_onednn_enabled(previous)
    """
    global onednn_on
    if not (isinstance(enabled, bool) or type(enabled).__name__ == "bool_"
            or isinstance(enabled, int) and enabled in (0, 1)):
        raise TypeError(f"set_onednn_enabled: enabled must be a bool, got {enabled!r} "
                        f"of type {type(enabled).__name__}")
    previous, onednn_on = onednn_on, bool(enabled)
    return previous


def onednn_enabled() -> bool:
    """Whether dispatch may choose the oneDNN path (see :func:`set_onednn_enabled`).

    >>> import mxdeconv
    >>> isinstance(mxdeconv.onednn_enabled(), bool)
    True
    """
    return onednn_on
