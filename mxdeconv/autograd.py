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

import contextlib
import threading
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .base import MXNetError

__all__ = ["backward", "is_recording", "is_training", "mark_variables", "pause",
           "predict_mode", "record", "register_backward", "set_recording",
           "set_training", "train_mode"]

_state = threading.local()
GRAD_REQS = ("write", "add", "null")

_NOT_IN_GRAPH = (
    "Cannot differentiate node because it is not in a computational graph. You need "
    "to set is_recording to true or use autograd.record() to save computational "
    "graphs for backward. If you want to differentiate the same graph twice, you "
    "need to pass retain_graph=True to backward.")


# -- modes ---------------------------------------------------------------------------
def is_training() -> bool:
    """Whether operators run in training mode in this thread.

    >>> from mxdeconv import autograd
    >>> autograd.is_training()
    False
    >>> with autograd.train_mode():
    ...     autograd.is_training()
    True
    """
    return getattr(_state, "training", False)


def set_training(training: bool) -> bool:
    """Set training mode for this thread; returns the previous mode.

    >>> from mxdeconv import autograd
    >>> previous = autograd.set_training(True)
    >>> autograd.is_training(), previous
    (True, False)
    >>> _ = autograd.set_training(previous)
    """
    previous = is_training()
    _state.training = bool(training)
    return previous


def is_recording() -> bool:
    """Whether operators are being recorded for backward in this thread.

    >>> from mxdeconv import autograd
    >>> autograd.is_recording()
    False
    >>> with autograd.record():
    ...     autograd.is_recording()
    True
    """
    return getattr(_state, "recording", False)


def set_recording(recording: bool) -> bool:
    """Switch recording on or off for this thread; returns the previous state.

    >>> from mxdeconv import autograd
    >>> previous = autograd.set_recording(True)
    >>> autograd.is_recording(), previous
    (True, False)
    >>> _ = autograd.set_recording(previous)
    """
    previous = is_recording()
    _state.recording = bool(recording)
    return previous


@contextlib.contextmanager
def _scope(recording: Optional[bool], training: Optional[bool]) -> Iterator[None]:
    old_recording = set_recording(recording) if recording is not None else None
    old_training = set_training(training) if training is not None else None
    try:
        yield
    finally:
        if training is not None:
            set_training(old_training)
        if recording is not None:
            set_recording(old_recording)


def train_mode() -> "contextlib.AbstractContextManager[None]":
    """Scope in training mode (``with autograd.train_mode(): ...``); recording is unchanged.

    >>> from mxdeconv import autograd
    >>> with autograd.train_mode():
    ...     autograd.is_training(), autograd.is_recording()
    (True, False)
    """
    return _scope(None, True)


def predict_mode() -> "contextlib.AbstractContextManager[None]":
    """Scope in inference mode; recording is unchanged.

    >>> from mxdeconv import autograd
    >>> with autograd.record():
    ...     with autograd.predict_mode():
    ...         autograd.is_training(), autograd.is_recording()
    (False, True)
    """
    return _scope(None, False)


def record(train_mode: bool = True) -> "contextlib.AbstractContextManager[None]":  # noqa: F811
    """Scope that records operators for :func:`backward`.

    Like MXNet it also switches training mode on, unless ``train_mode=False``
    (then the forward runs as inference: ``forward_inference`` primitives and
    weights kept in oneDNN's layout; the backward still works).

    >>> from mxdeconv import autograd
    >>> with autograd.record():
    ...     autograd.is_recording(), autograd.is_training()
    (True, True)
    >>> with autograd.record(train_mode=False):
    ...     autograd.is_recording(), autograd.is_training()
    (True, False)
    """
    return _scope(True, train_mode)


def pause(train_mode: bool = False) -> "contextlib.AbstractContextManager[None]":  # noqa: F811
    """Scope inside :func:`record` where operators are not recorded.

    Training mode is ``train_mode`` (default False: inference) inside.

    >>> from mxdeconv import autograd
    >>> with autograd.record():
    ...     with autograd.pause():
    ...         autograd.is_recording(), autograd.is_training()
    (False, False)
    """
    return _scope(False, train_mode)


# -- the tape ---------------------------------------------------------------------
#: op name -> backward function, see register_backward().
_BACKWARD: Dict[str, Callable[..., Tuple[Any, ...]]] = {}


def register_backward(op: str) -> Callable[[Callable], Callable]:
    """Decorator registering the backward function of operator ``op``.

    The function is called as ``fn(out_grad, inputs, attrs, reqs, targets)``:
    ``inputs`` are the recorded input NDArrays (None where an optional input
    was absent), ``attrs`` what the operator recorded, and for each input a
    req (``"null"``: not needed, ``"write"``, ``"add"``) and a target NDArray
    (None: return a fresh array) to write or add the gradient into.  It
    returns one gradient NDArray (or None) per input.

    >>> from mxdeconv import autograd
    >>> @autograd.register_backward("my_identity")
    ... def _identity_backward(out_grad, inputs, attrs, reqs, targets):
    ...     return (out_grad,)
    >>> "my_identity" in autograd._BACKWARD
    True
    """
    def decorate(fn: Callable) -> Callable:
        _BACKWARD[op] = fn
        return fn
    return decorate


class _Node:
    """One recorded operator call: its inputs, their producers, what backward needs."""

    __slots__ = ("op", "inputs", "parents", "attrs", "output", "freed")

    def __init__(self, op: str, inputs: Tuple[Any, ...], attrs: Any, output: Any) -> None:
        self.op = op
        self.inputs = inputs
        # The producers at record time: an array later overwritten by out=
        # (and so given a new node) still backpropagates into its old producer.
        self.parents = tuple(None if a is None else a._node for a in inputs)
        self.attrs = attrs
        self.output = weakref.ref(output)
        self.freed = False

    def free(self) -> None:
        output = self.output()
        if output is not None and output._node is self:
            output._node = None  # MXNet: a freed graph's arrays become constants
        self.inputs = self.parents = self.attrs = None
        self.freed = True


def _is_variable(arr: Any) -> bool:
    return arr._node is None and arr._grad is not None and arr._grad_req != "null"


def _needs_grad(arr: Any) -> bool:
    return arr is not None and (arr._node is not None or _is_variable(arr))


def record_op(op: str, output: Any, inputs: Sequence[Any], attrs: Any = None) -> Any:
    """Record ``output = op(*inputs)`` on the tape when recording; returns ``output``.

    Operators call this on their result.  Nothing is recorded outside
    :func:`record`, or when no input needs a gradient (as in MXNet, whose
    backward then says the result is not in a computational graph).

    >>> from mxdeconv import autograd, nd
    >>> x = nd.ones((2,))
    >>> x.attach_grad()
    >>> with autograd.record():
    ...     y = nd.relu(x)
    >>> y._node.op
    'relu'
    """
    if not getattr(_state, "recording", False) or output is None:
        return output
    inputs = tuple(inputs)
    if not any(_needs_grad(a) for a in inputs):
        return output
    if op not in _BACKWARD:
        raise MXNetError(f"operator {op!r} has no registered backward")
    output._node = _Node(op, inputs, attrs, output)
    return output


_ASSIGNING_IN_GRAPH = (
    "Assigning to NDArrays that are already in a computational graph will cause "
    "undefined behavior when evaluating gradients. Please call backward first to clear "
    "the graph or do this out side of a record section. Also note that you cannot use "
    "inplace operations like +=, *=, relu(x, out=x), y[idx]=x, etc inside a record "
    "section.")


def check_assignable(name: str, target: Any) -> None:
    """Refuse, while recording, to write into an array of the graph (``out=``):
    its recorded value would change under the tape.  MXNet raises the same.

    >>> from mxdeconv import autograd, nd
    >>> x = nd.ones((2,))
    >>> x.attach_grad()
    >>> with autograd.record():
    ...     autograd.check_assignable("out", x)
    Traceback (most recent call last):
    ...
    mxdeconv.base.MXNetError: out: Assigning to NDArrays that are already in a computational graph ...
    """
    if is_recording() and (target._node is not None or _is_variable(target)):
        raise MXNetError(f"{name}: {_ASSIGNING_IN_GRAPH}")


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
    from .ndarray import NDArray
    if isinstance(variables, NDArray):
        variables, gradients = [variables], [gradients]
    variables, gradients = list(variables), list(gradients)
    reqs = [grad_reqs] * len(variables) if isinstance(grad_reqs, str) else list(grad_reqs)
    if not len(variables) == len(gradients) == len(reqs):
        raise MXNetError(f"mark_variables: {len(variables)} variables, {len(gradients)} "
                         f"gradients and {len(reqs)} grad_reqs do not match")
    for var, grad, req in zip(variables, gradients, reqs):
        if req not in GRAD_REQS:
            raise MXNetError(f"grad_req must be one of {GRAD_REQS}, got {req!r}")
        if not isinstance(var, NDArray) or not isinstance(grad, NDArray):
            raise TypeError("mark_variables takes NDArrays")
        if grad.shape != var.shape or grad.dtype != var.dtype:
            raise MXNetError(f"gradient of shape {grad.shape} and dtype {grad.dtype} for a "
                             f"variable of shape {var.shape} and dtype {var.dtype}")
    for var, grad, req in zip(variables, gradients, reqs):
        var._grad, var._grad_req, var._node = grad, req, None


def _topological(heads: Sequence[Any]) -> List[_Node]:
    """Nodes reachable from ``heads``, each after every node that produced one of
    its inputs (post-order of an iterative depth-first search)."""
    order: List[_Node] = []
    seen = set()
    stack: List[Tuple[_Node, bool]] = [(h._node, False) for h in heads]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for parent in node.parents:
            if parent is not None and not parent.freed and id(parent) not in seen:
                stack.append((parent, False))
    return order


def _sum(first: Any, second: Any) -> Any:
    from .elementwise import add
    with _scope(False, None):
        return add(first, second)


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
    from .ndarray import NDArray, ones
    if isinstance(heads, NDArray):
        heads = [heads]
        head_grads = [head_grads]
    heads = list(heads)
    head_grads = [None] * len(heads) if head_grads is None else list(head_grads)
    if len(head_grads) != len(heads):
        raise MXNetError(f"{len(heads)} heads but {len(head_grads)} head_grads")
    for head in heads:
        if not isinstance(head, NDArray):
            raise TypeError(f"heads must be NDArrays, got {type(head).__name__}")
        if head._node is None or head._node.freed:
            raise MXNetError(_NOT_IN_GRAPH)

    grads: Dict[int, Any] = {}  # id(node) -> gradient of that node's output
    for head, grad in zip(heads, head_grads):
        if grad is None:
            grad = ones(head.shape, head.dtype)
        elif not isinstance(grad, NDArray):
            raise TypeError(f"head_grads must be NDArrays or None, got {type(grad).__name__}")
        elif grad.shape != head.shape:
            raise MXNetError(f"head_grad shape {grad.shape} does not match its head's "
                             f"shape {head.shape}")
        key = id(head._node)
        grads[key] = grad if key not in grads else _sum(grads[key], grad)

    order = _topological(heads)
    written = set()  # variables that received a gradient in this backward
    with _scope(False, train_mode):
        for node in reversed(order):
            out_grad = grads.pop(id(node), None)
            if out_grad is None:
                continue
            reqs, targets = [], []
            for arr, parent in zip(node.inputs, node.parents):
                if arr is None:
                    reqs.append("null"); targets.append(None)
                elif parent is not None:
                    reqs.append("null" if parent.freed else "write"); targets.append(None)
                elif arr._grad is not None and arr._grad_req != "null":  # a variable
                    seen = id(arr) in written
                    written.add(id(arr))
                    reqs.append("add" if seen or arr._grad_req == "add" else "write")
                    targets.append(arr._grad)
                else:
                    reqs.append("null"); targets.append(None)
            if any(r != "null" for r in reqs):
                results = _BACKWARD[node.op](out_grad, node.inputs, node.attrs,
                                             tuple(reqs), tuple(targets))
                for parent, req, result in zip(node.parents, reqs, results):
                    if parent is None or req == "null" or result is None:
                        continue
                    key = id(parent)
                    grads[key] = result if key not in grads else _sum(grads[key], result)
    if not retain_graph:
        for node in order:
            node.free()


@register_backward("Deconvolution")
def _deconvolution_backward(out_grad: Any, inputs: Tuple[Any, ...], params: Any,
                            reqs: Tuple[str, ...], targets: Tuple[Any, ...]) -> Tuple[Any, ...]:
    from .deconvolution import deconvolution_backward
    data, weight, bias = inputs
    return deconvolution_backward(out_grad, data, weight, bias, req=reqs,
                                  grads=targets, **params)
