"""MXNet's ``mx.context`` module: :class:`Context`, :func:`cpu`, :func:`gpu`,
:func:`current_context` and :func:`num_gpus`, so that ``mx.context.cpu()`` and
``mx.context.Context`` keep working in a port (``mx.cpu()`` is
:func:`mxdeconv.cpu`, the same function).  Only the CPU runs: a GPU context
can be made, as MXNet code makes them, but passing one to mxdeconv raises
:class:`~mxdeconv.MXNetError` (see :mod:`mxdeconv._core.context`).

>>> import mxdeconv as mx
>>> mx.context.cpu(), mx.context.current_context(), mx.context.num_gpus()
(cpu(0), cpu(0), 0)
>>> mx.context.Context("cpu", 0) == mx.cpu()
True
"""
from __future__ import annotations

from ._core.context import Context, cpu, current_context, gpu

__all__ = ["Context", "cpu", "current_context", "gpu", "num_gpus"]


def num_gpus() -> int:
    """The number of GPUs mxdeconv can use: none (MXNet's ``mx.context.num_gpus()``,
    which ports use to choose ``mx.cpu()``)."""
    return 0
