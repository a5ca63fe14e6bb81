"""Training/inference mode, in MXNet's style.

The mode chooses oneDNN's propagation kind (``forward_training`` or
``forward_inference``) and the weight-layout policy: in inference a weight is
reordered once into the primitive's preferred layout and kept so; in training
it stays in the default layout for optimizer code.  Like MXNet, the default
outside any scope is inference.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_state = threading.local()


def is_training() -> bool:
    """Whether operators run in training mode in this thread.

    >>> from mxdeconv import autograd
    >>> autograd.is_training()
    False
    """
    return getattr(_state, "training", False)


def set_training(training: bool) -> bool:
    """Set training mode for this thread; returns the previous mode."""
    previous = is_training()
    _state.training = bool(training)
    return previous


@contextlib.contextmanager
def _mode(training: bool) -> Iterator[None]:
    previous = set_training(training)
    try:
        yield
    finally:
        set_training(previous)


def train_mode() -> "contextlib.AbstractContextManager[None]":
    """Scope in training mode (``with autograd.train_mode(): ...``)."""
    return _mode(True)


def predict_mode() -> "contextlib.AbstractContextManager[None]":
    """Scope in inference mode."""
    return _mode(False)
