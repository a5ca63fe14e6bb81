"""Training/inference mode and a minimal autograd tape, in MXNet's style.

The *training mode* chooses oneDNN's propagation kind (``forward_training`` or
``forward_inference``) and the weight-layout policy: in inference a weight is
reordered once into the primitive's preferred layout and kept so; in training
it stays in the default layout for optimizer code.  Like MXNet, the default
outside any scope is inference, and :func:`record` turns training on.

The *tape* records operators run inside ``with autograd.record():`` whose
inputs need a gradient (a variable marked with :meth:`NDArray.attach_grad`
or the result of another recorded operator), then
:meth:`NDArray.backward` / :func:`backward` walks it in reverse:

>>> import numpy as np
>>> from mxdeconv import autograd, nd
>>> x = nd.array([[[1.0, 2.0]]])
>>> w = nd.array([[[1.0, 1.0]]])
>>> x.attach_grad()
>>> with autograd.record():
...     y = nd.Deconvolution(x, w, kernel=(2,), num_filter=1)
>>> y.backward()
>>> x.grad.asnumpy()
array([[[2., 2.]]], dtype=float32)

Each variable's ``grad_req`` decides what backward does with its gradient:
``"write"`` overwrites ``.grad``, ``"add"`` accumulates into it across
backward calls, ``"null"`` leaves it alone.  Contributions reaching one
variable along several paths of one graph are summed, as in MXNet.  Unless
``retain_graph=True``, backward frees the graph it walked: its arrays become
constants, and a second backward through them raises :class:`MXNetError`.
"""
from __future__ import annotations

from typing import Any, Sequence, Union

from . import tape
from mxdeconv._core.errors import MXNetError
# Every NDArray is an NDArrayBase (its compiled fields): the facade checks its
# arguments without importing the NDArray package, which sits above it.
from mxdeconv._core._ndbase import NDArrayBase
from .tape import (
    GRAD_REQS, check_assignable, has_backward, is_recording, is_training, pause, predict_mode,
    record, record_op, register_backward, set_recording, set_training, train_mode)

__all__ = ["backward", "check_assignable", "has_backward", "is_recording", "is_training",
           "mark_variables",
           "pause", "predict_mode", "record", "record_op", "register_backward",
           "set_recording", "set_training", "train_mode"]


def mark_variables(variables: Union[Any, Sequence[Any]], gradients: Union[Any, Sequence[Any]],
                   grad_reqs: Union[str, Sequence[str]] = "write") -> None:
    """Mark NDArrays as variables whose gradients backward writes into ``gradients``.

    :meth:`NDArray.attach_grad` is this with a fresh zero gradient.

    >>> from mxdeconv import autograd, nd
    >>> x, gx = nd.ones((2,)), nd.zeros((2,))
    >>> autograd.mark_variables(x, gx, "add")
    >>> x.grad is gx
    True
    """
    if isinstance(variables, NDArrayBase):
        variables, gradients = [variables], [gradients]
    variables, gradients = list(variables), list(gradients)
    reqs = [grad_reqs] * len(variables) if isinstance(grad_reqs, str) else list(grad_reqs)
    if not len(variables) == len(gradients) == len(reqs):
        raise MXNetError(f"mark_variables: {len(variables)} variables, {len(gradients)} "
                         f"gradients and {len(reqs)} grad_reqs do not match")
    for var, grad, req in zip(variables, gradients, reqs):
        if req not in GRAD_REQS:
            raise MXNetError(f"grad_req must be one of {GRAD_REQS}, got {req!r}")
        if not isinstance(var, NDArrayBase) or not isinstance(grad, NDArrayBase):
            raise TypeError("mark_variables takes NDArrays")
        if grad._shape != var._shape or grad._dtype != var._dtype:
            raise MXNetError(f"gradient of shape {grad._shape} and dtype {grad._dtype} for a "
                             f"variable of shape {var._shape} and dtype {var._dtype}")
        buffer, layout = grad._state
        if layout is None and not (buffer.flags.writeable and buffer.flags.c_contiguous):
            raise MXNetError("mark_variables: gradients must be writeable and C-contiguous "
                             f"(backward writes them), got a read-only or strided array of "
                             f"shape {grad._shape}")
    for var, grad, req in zip(variables, gradients, reqs):
        tape.set_variable(var, grad, req)


def backward(heads: Union[Any, Sequence[Any]], head_grads: Any = None,
             retain_graph: bool = False, train_mode: bool = True) -> None:  # noqa: F811
    """Backpropagate from ``heads`` into the ``.grad`` of every variable they reach.

    Args:
        heads: an NDArray or a list of them, results of recorded operators.
        head_grads: their gradients (same shapes); None, or None entries,
            mean ones (the gradient of ``head.sum()``).
        retain_graph: keep the graph for another backward.
        train_mode: training mode while the backward operators run.

    >>> import numpy as np
    >>> from mxdeconv import autograd, nd
    >>> x = nd.array([1.0, -2.0, 3.0])
    >>> x.attach_grad()
    >>> with autograd.record():
    ...     y = nd.relu(x) * x
    >>> autograd.backward([y], [nd.array([1.0, 1.0, 10.0])])
    >>> x.grad.asnumpy()
    array([ 2.,  0., 60.], dtype=float32)
    """
    if isinstance(heads, NDArrayBase):
        heads = [heads]
        head_grads = [head_grads]
    heads = list(heads)
    head_grads = [None] * len(heads) if head_grads is None else list(head_grads)
    if len(head_grads) != len(heads):
        raise MXNetError(f"{len(heads)} heads but {len(head_grads)} head_grads")
    for head in heads:
        if not isinstance(head, NDArrayBase):
            raise TypeError(f"heads must be NDArrays, got {type(head).__name__}")
    tape.backward(heads, head_grads, retain_graph=retain_graph, train_mode=train_mode)

