"""The autograd tape: training/recording modes and the recorded graph.

This is the core under :mod:`mxdeconv.autograd` (the public facade).  It knows
nothing of NDArray's class: it works on any array object with the tape's
attributes (``_node``, ``_grad``, ``_grad_req``), a ``_ones_like()`` method and
``+``, so the NDArray layer sits above it and can call it without an import
cycle.  Operators record themselves with :func:`record_op` and register their
backward with :func:`register_backward`.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from mxdeconv._core.errors import MXNetError

class _ThreadModes(threading.local):
    """Each thread's modes; class attributes are the defaults (MXNet: inference,
    not recording), which makes reading them as cheap as an attribute."""

    training = False
    recording = False


#: This thread's modes: read by the compiled hot path once per call (set them
#: through set_training / set_recording).
modes = _ThreadModes()
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
    return modes.training


def set_training(training: bool) -> bool:
    """Set training mode for this thread; returns the previous mode.

    >>> from mxdeconv import autograd
    >>> previous = autograd.set_training(True)
    >>> autograd.is_training(), previous
    (True, False)
    >>> _ = autograd.set_training(previous)
    """
    previous = is_training()
    modes.training = bool(training)
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
    return modes.recording


def set_recording(recording: bool) -> bool:
    """Switch recording on or off for this thread; returns the previous state.

    >>> from mxdeconv import autograd
    >>> previous = autograd.set_recording(True)
    >>> autograd.is_recording(), previous
    (True, False)
    >>> _ = autograd.set_recording(previous)
    """
    previous = is_recording()
    modes.recording = bool(recording)
    return previous


@contextlib.contextmanager
def _scope(recording: Optional[bool], training: Optional[bool]) -> Iterator[None]:
    old_recording = set_recording(recording) if recording is not None else is_recording()
    old_training = set_training(training) if training is not None else is_training()
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
    >>> autograd.has_backward("my_identity")
    True
    """
    def decorate(fn: Callable) -> Callable:
        _BACKWARD[op] = fn
        return fn
    return decorate


def has_backward(op: str) -> bool:
    """Whether operator ``op`` has a registered backward function.

    >>> from mxdeconv import autograd
    >>> autograd.has_backward("Deconvolution"), autograd.has_backward("no such op")
    (True, False)
    """
    return op in _BACKWARD


class _Node:
    """One recorded operator call: its inputs, their producers, what backward needs."""

    __slots__ = ("op", "inputs", "parents", "versions", "attrs", "output", "freed")

    def __init__(self, op: str, inputs: Tuple[Any, ...], parents: Tuple[Any, ...],
                 versions: Tuple[Optional[int], ...], attrs: Any, output: Any) -> None:
        self.op = op
        # inputs, parents and attrs: None once freed (free()).
        self.inputs: Any = inputs
        # The producers at record time: an array later overwritten by out=
        # (and so given a new node) still backpropagates into its old producer.
        self.parents: Any = parents
        # The inputs' versions at record time: a write through mxdeconv since
        # (out=, a gradient target) would make backward read other values.
        self.versions = versions
        self.attrs: Any = attrs
        self.output = weakref.ref(output)
        self.freed = False

    def check_inputs_unchanged(self) -> None:
        for position, (arr, version) in enumerate(zip(self.inputs, self.versions)):
            if arr is not None and arr._version != version:
                raise MXNetError(
                    f"{self.op}: input {position} (shape {arr.shape}) was written after "
                    "the operator was recorded (out=, req='add' or a gradient target), so "
                    "its backward would read the new values; write into another array, or "
                    "record again after writing")

    def free(self) -> None:
        output = self.output()
        if output is not None and output._node is self:
            output._node = None  # MXNet: a freed graph's arrays become constants
        self.inputs = self.parents = self.attrs = None
        self.freed = True


def _is_variable(arr: Any) -> bool:
    return arr._node is None and arr._grad is not None and arr._grad_req != "null"


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
    if not modes.recording or output is None:
        return output
    inputs = tuple(inputs)
    # One pass (this runs on every recorded call): each input's producer, and
    # whether any input needs a gradient (a result of the graph, or a variable).
    parents, versions = [], []
    needed = False
    for arr in inputs:
        node = None if arr is None else arr._node
        parents.append(node)
        versions.append(None if arr is None else arr._version)
        needed = needed or node is not None or (arr is not None and _is_variable(arr))
    if not needed:
        return output
    if op not in _BACKWARD:
        raise MXNetError(f"operator {op!r} has no registered backward")
    output._node = _Node(op, inputs, tuple(parents), tuple(versions), attrs, output)
    return output


def transfer_output(source: Any, target: Any) -> Any:
    """Make ``target`` the recorded result of the operator call that produced
    ``source``, whose values were just written into ``target`` (MXNet's
    ``out=``: the array written is the graph's result); returns ``target``.
    Nothing changes when ``source`` was not recorded.

    >>> from mxdeconv import autograd, nd
    >>> from mxdeconv.autograd import tape
    >>> x = nd.ones((2,))
    >>> x.attach_grad()
    >>> out = nd.zeros((2,))
    >>> with autograd.record():
    ...     y = x * 3
    ...     out[:] = y.detach()   # the values, as out= writes them
    ...     z = tape.transfer_output(y, out)
    >>> z is out, y._node is None
    (True, True)
    >>> out.backward()
    >>> x.grad.asnumpy()
    array([3., 3.], dtype=float32)
    """
    node = source._node
    if node is not None and source is not target:
        target._node = node
        node.output = weakref.ref(target)
        source._node = None
    return target


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
    mxdeconv._core.errors.MXNetError: out: Assigning to NDArrays that are already in a ...
    """
    if is_recording() and (target._node is not None or _is_variable(target)):
        raise MXNetError(f"{name}: {_ASSIGNING_IN_GRAPH}")


def would_record(inputs: Sequence[Any]) -> bool:
    """Whether an operator on ``inputs`` called now would be recorded."""
    return modes.recording and any(
        arr is not None and (arr._node is not None or _is_variable(arr)) for arr in inputs)


def check_not_in_place(name: str, target: Any, aliased: bool, inputs: Sequence[Any]) -> None:
    """Refuse a recorded call writing ``target`` over one of its own inputs
    (``relu(x, out=x)``): its backward would read the result as the input."""
    if aliased and would_record(inputs):
        raise MXNetError(f"{name}: {_ASSIGNING_IN_GRAPH}")


def set_variable(var: Any, grad: Any, req: str) -> None:
    """Make ``var`` a variable whose gradient backward puts in ``grad`` (checked by
    the caller: :func:`mxdeconv.autograd.mark_variables`, ``attach_grad``)."""
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
    with _scope(False, None):
        return first + second


def backward(heads: Sequence[Any], head_grads: Sequence[Any], retain_graph: bool = False,
             train_mode: bool = True) -> None:
    """Backpropagate from ``heads`` (arrays of one type) into the ``.grad`` of every
    variable they reach; a None head gradient means ones.  The public entry
    point, with the full argument checks, is :func:`mxdeconv.autograd.backward`.
    """
    if len(head_grads) != len(heads):
        raise MXNetError(f"{len(heads)} heads but {len(head_grads)} head_grads")
    for head in heads:
        if head._node is None or head._node.freed:
            raise MXNetError(_NOT_IN_GRAPH)

    # Every check before the first gradient is written: nothing half done.
    for head, grad in zip(heads, head_grads):
        if grad is None:
            continue
        if not isinstance(grad, type(head)):
            raise TypeError(f"head_grads must be NDArrays or None, got {type(grad).__name__}")
        if grad.shape != head.shape:
            raise MXNetError(f"head_grad shape {grad.shape} does not match its head's "
                             f"shape {head.shape}")
        if grad.dtype != head.dtype:
            raise MXNetError(f"head_grad dtype {grad.dtype} does not match its head's "
                             f"dtype {head.dtype}")
    order = _topological(heads)
    for node in order:
        node.check_inputs_unchanged()

    grads: Dict[int, Any] = {}  # id(node) -> gradient of that node's output
    for head, grad in zip(heads, head_grads):
        grad = head._ones_like() if grad is None else grad
        key = id(head._node)
        grads[key] = grad if key not in grads else _sum(grads[key], grad)

    written = set()  # variables that received a gradient in this backward
    variables = []   # the same, in order: marked fresh once the backward is done
    with _scope(False, train_mode):
        for node in reversed(order):
            out_grad = grads.pop(id(node), None)
            if out_grad is None:
                continue
            reqs: List[str] = []
            targets: List[Any] = []
            for arr, parent in zip(node.inputs, node.parents):
                if arr is None:
                    reqs.append("null")
                    targets.append(None)
                elif parent is not None:
                    reqs.append("null" if parent.freed else "write")
                    targets.append(None)
                elif arr._grad is not None and arr._grad_req != "null":  # a variable
                    seen = id(arr) in written
                    if not seen:
                        written.add(id(arr))
                        variables.append(arr)
                    reqs.append("add" if seen or arr._grad_req == "add" else "write")
                    targets.append(arr._grad)
                else:
                    reqs.append("null")
                    targets.append(None)
            if any(r != "null" for r in reqs):
                results = _BACKWARD[node.op](out_grad, node.inputs, node.attrs,
                                             tuple(reqs), tuple(targets))
                for parent, req, result in zip(node.parents, reqs, results):
                    if parent is None or req == "null" or result is None:
                        continue
                    key = id(parent)
                    grads[key] = result if key not in grads else _sum(grads[key], result)
    for arr in variables:
        set_fresh_grad(arr, True)
    if not retain_graph:
        for node in order:
            node.free()


# -- fresh gradients -------------------------------------------------------------------
#: id(variable) -> weak reference to it, for the variables whose gradient a backward
#: wrote since the last set_fresh_grad(arr, False): MXNet's ``_fresh_grad`` flag,
#: which gluon.Trainer reads to refuse a stale gradient.  An entry goes away with
#: its array (the weak reference's callback).
_fresh: Dict[int, Any] = {}


def fresh_grad(arr: Any) -> bool:
    """Whether a backward wrote (or added to) ``arr``'s gradient since the last
    ``set_fresh_grad(arr, False)`` (MXNet's ``NDArray._fresh_grad``).

    >>> from mxdeconv import autograd, nd
    >>> x = nd.ones((2,))
    >>> x.attach_grad()
    >>> autograd.tape.fresh_grad(x)
    False
    >>> with autograd.record():
    ...     y = x * 2
    >>> y.backward()
    >>> autograd.tape.fresh_grad(x)
    True
    """
    ref = _fresh.get(id(arr))
    return ref is not None and ref() is arr


def set_fresh_grad(arr: Any, fresh: bool) -> None:
    """Mark ``arr``'s gradient fresh (as a backward does) or stale (as a Trainer's
    update does)."""
    key = id(arr)
    if not fresh:
        ref = _fresh.get(key)
        if ref is not None and ref() is arr:
            del _fresh[key]
        return

    def forget(ref: Any, key: int = key) -> None:
        if _fresh.get(key) is ref:
            del _fresh[key]
    _fresh[key] = weakref.ref(arr, forget)


