# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""The Deconvolution operator's public entries, compiled: ``Deconvolution``
and ``Deconvolution_backward`` (re-exported by ``ops.deconvolution`` and
``mxdeconv.nd``), and the prepared-call lookup they start with.

A call whose signature (its parameters, the shapes and dtypes of its arrays,
the mode, ``req``, the thread count, the dispatch switches and the tuner's
switch) was seen before in this thread finds its prepared call (``_exec``)
here, without a Python frame or CPython's keyword binding (about half a
microsecond of a tiny layer's call), checks only what can change between
calls (which arrays alias, their layouts) and runs its plan.  Any other call
goes on to the full path (``ops.full_path``: validation, dispatch, planning),
with the key the prepared call would have had; the full path keeps one there
for the next call.

The imports run one way: this module imports the full path, which imports
``_exec``; nothing below imports this module.  The full path is read as
``full_path.full_forward`` at call time (one attribute lookup, as before):
tests wrap it there to count the calls that take it.
"""
cimport cython
cimport numpy as cnp
from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM

from typing import Any, Optional, Sequence, Tuple, Union

from mxdeconv.onednn._ops cimport ThreadState, follow_load, thread_count, thread_state
from mxdeconv.onednn import planner
from mxdeconv.autograd import tape
from mxdeconv._core._ndbase cimport NDArrayBase
from mxdeconv.ndarray.ndarray import NDArray
from . import full_path, registry, validation
from ._exec cimport PreparedBackward, PreparedForward, Serving

cnp.import_array()


# ----------------------------------------------------------------------------
# Prepared-call keys and the checks a prepared call still makes
# ----------------------------------------------------------------------------
cdef class Miss:
    """No prepared call for this signature: ``key`` is where to keep one (None
    when the call cannot be keyed, e.g. list or float parameters, NumPy inputs)."""
    cdef readonly object key


cdef Miss miss(key):
    cdef Miss m = Miss.__new__(Miss)
    m.key = key
    return m


cdef long params_bools(dict params) except -2:
    """Whether the parameters can key a cache as they are (-1: no), and which of
    them are bools (a bit each).  A float equals an int (3.0 == 3) and a bool
    equals 0 or 1, yet only some of them are valid: exact ints, strs and None,
    and tuples of exact ints are keyed as they are; bools are marked, so True
    and 1 stay apart; anything else (floats, lists, NumPy scalars) is not keyed."""
    cdef long position = 0, bools = 0
    if len(params) >= 8 * sizeof(long) - 1:  # one bit each: more would shift past a long
        return -1
    for value in params.values():
        kind = type(value)
        if kind is tuple:
            for entry in <tuple>value:
                if type(entry) is not int:
                    return -1
        elif kind is bool:
            bools |= 1L << position
        elif not (kind is int or kind is str or value is None):
            return -1
        position += 1
    return bools


cdef inline bint usable(arr):
    """An NDArray whose default-layout buffer, if any, is C-contiguous (anything
    else goes to the full path, which copies or refuses it)."""
    if type(arr) is not NDArray:
        return False
    buffer, layout = (<NDArrayBase>arr)._state
    return layout is not None or cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>buffer)


cdef bint overlaps(NDArrayBase a, NDArrayBase b):
    """Whether two NDArrays' buffers may share memory (both are single blocks)."""
    if a is b:
        return True
    cdef cnp.ndarray x = a._state[0]
    cdef cnp.ndarray y = b._state[0]
    cdef char *x0 = <char *>cnp.PyArray_DATA(x)
    cdef char *y0 = <char *>cnp.PyArray_DATA(y)
    return x0 < y0 + cnp.PyArray_NBYTES(y) and y0 < x0 + cnp.PyArray_NBYTES(x)


cdef bint writable_target(target):
    """A target the fast path may write: an NDArray whose default-layout buffer
    is writeable and C-contiguous (anything else goes to the full checks)."""
    if type(target) is not NDArray:
        return False
    buffer, layout = (<NDArrayBase>target)._state
    return layout is not None or (cnp.PyArray_ISWRITEABLE(<cnp.ndarray>buffer)
                                  and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>buffer))


cdef LRU_KEY_FORWARD = "forward call"
cdef LRU_KEY_BACKWARD = "backward call"
# This thread's modes and dispatch switches (threading.local objects, read
# once per call, without a Python function call).
cdef object _modes = tape.modes
cdef object _dispatch = registry.dispatch


cdef inline long dtype_code(dt):
    """A dtype as an int for a cache key: its type number and byte order.
    Hashing a NumPy dtype rebuilds a tuple of its fields on every call (about
    50 ns, three times per key), where an int hashes to itself.  A native
    builtin dtype is its type number alone: a small int, which CPython keeps
    one object of, so the key lookup compares it by identity."""
    cdef int type_num = (<cnp.dtype>dt).type_num
    cdef char order = (<cnp.dtype>dt).byteorder
    if order == b'=' or order == b'|':
        return type_num
    return type_num + (<long>order << 16)


cdef tuple flat_key(tuple head, dict params):
    """``head`` followed by each parameter's name and value, in one flat tuple:
    a dict lookup compares a nested tuple through one more call per level."""
    cdef Py_ssize_t size = len(head), i, position = 0
    cdef PyObject *name
    cdef PyObject *value
    cdef tuple key = PyTuple_New(size + 2 * len(params))
    for i in range(size):
        item = <object>PyTuple_GET_ITEM(head, i)
        Py_INCREF(item)
        PyTuple_SET_ITEM(key, i, item)
    i = size
    while PyDict_Next(params, &position, &name, &value):
        Py_INCREF(<object>name)
        PyTuple_SET_ITEM(key, i, <object>name)
        Py_INCREF(<object>value)
        PyTuple_SET_ITEM(key, i + 1, <object>value)
        i += 2
    return key


cdef inline object shape_code(NDArrayBase arr):
    return None if arr is None else arr._shape


cdef inline object dtype_code_of(NDArrayBase arr):
    return None if arr is None else dtype_code(arr._dtype)


cdef inline bint expired(Serving serving):
    """Count one call on a limited prepared call; True when it has run out (or
    a layer settled: the calls paid ahead and not served are refunded, so
    that the planner does not run a unit they did not pay for)."""
    if serving.calls_left < 0:
        return False
    if serving.calls_left == 0:
        return True
    if serving.generation != planner.settlements:
        planner.unserved(serving.paid_by, serving.calls_left)
        serving.calls_left = 0
        return True
    serving.calls_left -= 1
    return False


# ----------------------------------------------------------------------------
# The entries
# ----------------------------------------------------------------------------
@cython.annotation_typing(False)  # the annotations document; they type nothing
def Deconvolution(data: Any, weight: Any, bias: Any = None, out: Optional[NDArray] = None,
                  req: str = "write", train: Optional[bool] = None,
                  name: Optional[str] = None, **params: Any) -> Optional[NDArray]:
    """Transposed convolution with MXNet 1.9.1's ``Deconvolution`` semantics.

    Args:
        data: ``(N, C_in, *spatial)`` NDArray or NumPy array (NumPy is copied).
        weight: ``(C_in, num_filter // num_group, *kernel)``.
        bias: ``(num_filter,)`` when ``no_bias=False``, else None.
        out: optional NDArray of the output shape to write (or add) into.
        req: ``"write"``, ``"inplace"`` (same as write), ``"add"`` (accumulate
            into ``out``) or ``"null"`` (compute nothing, return ``out``).
        train: training mode for this call; None follows
            :func:`mxdeconv.autograd.is_training`.
        name: accepted and ignored, as by MXNet's imperative operators (a str or None).
        **params: MXNet's ``kernel``, ``stride``, ``dilate``, ``pad``, ``adj``,
            ``target_shape``, ``num_filter``, ``num_group``, ``no_bias``,
            ``layout``, ``workspace``, ``cudnn_tune``, ``cudnn_off`` (the last three
            ignored); each also as MXNet's text (``kernel="(3, 3)"``,
            ``no_bias="true"``, see :doc:`semantics`).

    Output size per spatial dim: ``stride*(in-1) + dilate*(k-1) + 1 - 2*pad + adj``
    (``pad``/``adj`` inferred from ``target_shape`` when it is set).  The result
    may hold a oneDNN blocked layout (see ``NDArray.layout``); reading it
    turns it to the default layout.

    Inside :func:`mxdeconv.autograd.record` the call is recorded for
    ``backward()`` when an input needs a gradient (with ``out=`` and
    ``req="add"`` only the new term is differentiated: the previous contents
    of ``out`` count as a constant).

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> y = nd.Deconvolution(np.ones((1, 1, 2)), np.ones((1, 1, 2)), kernel=(2,),
    ...                      stride=(2,), num_filter=1)
    >>> y.asnumpy()
    array([[[1., 1., 1., 1.]]])
    """
    # A repeated call runs its prepared call; any other goes on to the full path.
    if name is not None and type(name) is not str:
        validation.check_name(name)
    result = prepared_forward(data, weight, bias, out, req, train, params, None)
    if type(result) is Miss:
        return full_path.full_forward((<Miss>result).key, data, weight, bias, out, req,
                                      train, params)
    return result


@cython.annotation_typing(False)
def Deconvolution_backward(out_grad: Any, data: Any, weight: Any, bias: Any = None,
                           req: Union[str, Sequence[str]] = "write",
                           grads: Optional[Sequence[Optional[NDArray]]] = None,
                           train: Optional[bool] = True, name: Optional[str] = None,
                           **params: Any) -> Tuple[Optional[NDArray], ...]:
    """Gradients of :func:`Deconvolution`: ``(data_grad, weight_grad, bias_grad)``.

    Args:
        out_grad: gradient of the loss with respect to the output.
        data, weight, bias: the forward inputs (bias only tells its shape).
        req: one string or three, for data, weight and bias: ``"write"``,
            ``"inplace"``, ``"add"`` (accumulate into the array in ``grads``)
            or ``"null"`` (not computed; None returned).
        grads: three NDArrays or Nones to write the gradients into; required
            where req is ``"add"``.
        name: accepted and ignored (a str or None).
        **params: the forward's parameters.

    ``bias_grad`` is None when ``no_bias`` is True.  Weight gradients come
    back in the default layout (optimizer code reads plain memory).

    >>> import numpy as np
    >>> from mxdeconv import nd
    >>> dx, dw, db = nd.Deconvolution_backward(np.ones((1, 1, 4)), np.ones((1, 1, 2)),
    ...     np.ones((1, 1, 2)), np.zeros(1), kernel=(2,), stride=(2,), num_filter=1,
    ...     no_bias=False)
    >>> dx.asnumpy(), db.asnumpy()
    (array([[[2., 2.]]]), array([4.]))
    """
    if name is not None and type(name) is not str:
        validation.check_name(name)
    result = prepared_backward(out_grad, data, weight, bias, req, grads, train, params)
    if type(result) is Miss:
        return full_path.full_backward((<Miss>result).key, out_grad, data, weight, bias,
                                       req, grads, train, params)
    return result


def forward(data, weight, bias, out, req, train, dict params, act_type=None):
    """A Deconvolution forward (followed by the activation ``act_type``, if not
    None) through its prepared call, or a Miss saying where to keep one once
    the full path has validated and planned the signature."""
    return prepared_forward(data, weight, bias, out, req, train, params, act_type)


cdef object prepared_forward(data, weight, bias, out, req, train, dict params, act_type):
    if type(req) is not str or (train is not None and type(train) is not bool):
        return miss(None)
    if not (usable(data) and usable(weight) and (bias is None or usable(bias))):
        return miss(None)
    if out is not None and not writable_target(out):
        return miss(None)
    cdef long bools = params_bools(params)
    if bools < 0:
        return miss(None)
    follow_load()       # the team may shrink or grow with the machine's load
    cdef ThreadState state = thread_state()
    cdef NDArrayBase d = data, w = weight
    key = flat_key((LRU_KEY_FORWARD, bools, d._shape, dtype_code(d._dtype), w._shape,
                    dtype_code(w._dtype), shape_code(bias), dtype_code_of(bias),
                    shape_code(out), dtype_code_of(out), req,
                    _modes.training if train is None else train, thread_count(state),
                    _dispatch.forced, registry.onednn_on, planner.tuning_on, act_type),
                   params)
    prepared = state.cache.get(key)
    if prepared is None or expired((<PreparedForward>prepared).serving):
        return miss(key)
    if out is not None:
        if (overlaps(out, data) or overlaps(out, weight)
                or (bias is not None and overlaps(out, bias))):
            return miss(None)   # out= aliasing an input: the full path computes first
        tape.check_assignable("out", out)
    return (<PreparedForward>prepared).execute(data, weight, bias, out, params)


cdef object prepared_backward(out_grad, data, weight, bias, req, grads, train, dict params):
    if train is not None and type(train) is not bool:
        return miss(None)
    if type(req) is str:
        reqs = (req, req, req)
    elif type(req) is tuple or type(req) is list:
        reqs = tuple(req)
        for r in reqs:
            if type(r) is not str:
                return miss(None)
    else:
        return miss(None)
    if grads is None:
        targets = (None, None, None)
    elif type(grads) is tuple or type(grads) is list:
        targets = tuple(grads)
    else:
        return miss(None)
    if not (usable(out_grad) and usable(data) and usable(weight)
            and (bias is None or usable(bias))) or len(targets) != 3:
        return miss(None)
    cdef long bools = params_bools(params)
    if bools < 0:
        return miss(None)
    target_sigs = []
    for target in targets:
        if target is None:
            target_sigs.append(None)
        elif not writable_target(target):
            return miss(None)
        else:
            target_sigs.append(((<NDArrayBase>target)._shape,
                                dtype_code((<NDArrayBase>target)._dtype)))
    follow_load()       # the team may shrink or grow with the machine's load
    cdef ThreadState state = thread_state()
    cdef NDArrayBase g = out_grad, d = data, w = weight
    key = flat_key((LRU_KEY_BACKWARD, bools, g._shape, dtype_code(g._dtype), d._shape,
                    dtype_code(d._dtype), w._shape, dtype_code(w._dtype), shape_code(bias),
                    dtype_code_of(bias), reqs, tuple(target_sigs),
                    _modes.training if train is None else train, thread_count(state),
                    _dispatch.forced, registry.onednn_on, planner.tuning_on),
                   params)
    prepared = state.cache.get(key)
    if prepared is None or expired((<PreparedBackward>prepared).serving):
        return miss(key)
    inputs = (out_grad, data, weight)
    for i in range(3):
        target = targets[i]
        if target is None:
            continue
        for other in inputs:
            if overlaps(target, other):
                return miss(None)   # the full path writes such targets last
        for j in range(3):
            if j != i and targets[j] is not None and overlaps(target, targets[j]):
                return miss(None)
    return (<PreparedBackward>prepared).execute(out_grad, data, weight, targets)
