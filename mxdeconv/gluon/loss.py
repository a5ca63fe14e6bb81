"""Losses of MXNet 1.9.1 Gluon (``gluon.loss``): blocks called on a prediction and
a label inside ``autograd.record()``, giving one loss per sample.

Every loss follows MXNet's ``Loss(weight, batch_axis)``: the elementwise loss is
multiplied by ``sample_weight`` (broadcast, when given) and by the scalar
``weight``, then averaged over every axis but ``batch_axis``.  They are written
with NDArray operators that :mod:`mxdeconv.autograd` records, so gradients flow
back into the prediction (and the label), matching MXNet's:

* :class:`L1Loss`: ``|label - pred|``;
* :class:`L2Loss`: ``weight / 2 * (label - pred) ** 2`` (MXNet's factor 1/2);
* :class:`SigmoidBinaryCrossEntropyLoss` (``SigmoidBCELoss``): on logits MXNet's
  stable form ``relu(x) - x * z + softrelu(-|x|)`` (with ``pos_weight``:
  ``x - x * z + (1 + (pos_weight - 1) * z) * (softrelu(-|x|) + relu(-x))``); on
  probabilities (``from_sigmoid=True``) ``-(z * log(p + 1e-12) + (1 - z) *
  log(1 - p + 1e-12))``;
* :class:`SoftmaxCrossEntropyLoss` (``SoftmaxCELoss``): ``-log_softmax(pred)``
  picked at the label (``sparse_label=True``: class indices, truncated to
  integers and clipped into range as MXNet's ``pick`` does) or summed against
  a label distribution.

``log_softmax`` is composed here as ``x - m - log(sum(exp(x - m)))`` with the
maximum ``m`` a constant, and ``pick`` as advanced indexing (recorded as
``take``), both with MXNet's gradients.

>>> from mxdeconv import autograd, gluon, nd
>>> loss_fn = gluon.loss.L2Loss()
>>> pred, label = nd.array([[1.0, 2.0], [3.0, 5.0]]), nd.array([[0.0, 1.0], [1.0, 1.0]])
>>> pred.attach_grad()
>>> with autograd.record():
...     loss = loss_fn(pred, label)
>>> loss.asnumpy()                       # mean over axis 1 of (label - pred) ** 2 / 2
array([0.5, 5. ], dtype=float32)
>>> loss.backward()
>>> pred.grad.asnumpy()                  # (pred - label) / 2
array([[0.5, 0.5],
       [1. , 2. ]], dtype=float32)
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

from mxdeconv import nd as _nd
from mxdeconv._core.args import is_int
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.ndarray import NDArray, array

from ._args import _bool_arg, _real_arg, _type_error
from .block import HybridBlock

__all__ = ["L1Loss", "L2Loss", "Loss", "SigmoidBCELoss", "SigmoidBinaryCrossEntropyLoss",
           "SoftmaxCELoss", "SoftmaxCrossEntropyLoss"]


def _int_arg(name: str, value: Any) -> int:
    if isinstance(value, bool) or not is_int(value):
        raise _type_error(name, "an int", value)
    return int(value)


def _axis(owner: str, name: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise MXNetError(f"{owner}: {name}={axis} is out of range for an input of {ndim} "
                         f"dimension(s)")
    return axis % ndim


def _input(owner: str, name: str, value: Any) -> NDArray:
    """An NDArray as it is; a NumPy array or nested list copied (float32 unless a
    NumPy array of floats says otherwise)."""
    if isinstance(value, NDArray):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return array(value, dtype=value.dtype)
    if isinstance(value, (np.ndarray, list, tuple)):
        return array(value)
    raise _type_error(f"{owner}: {name}", "an NDArray", value)


def _reshape_like(owner: str, label: NDArray, pred: NDArray) -> NDArray:
    """``label`` in ``pred``'s shape (MXNet's reshape: the same number of elements)."""
    if label.shape == pred.shape:
        return label
    if label.size != pred.size:
        raise MXNetError(f"{owner}: label of shape {label.shape} cannot be reshaped to pred's "
                         f"shape {pred.shape}: they must have the same number of elements")
    return label.reshape(pred.shape)


def _apply_weighting(loss: NDArray, weight: Optional[float] = None,
                     sample_weight: Any = None) -> NDArray:
    """``loss * sample_weight`` (broadcast) ``* weight``, as MXNet's helper."""
    if sample_weight is not None:
        loss = loss * sample_weight
    if weight is not None:
        loss = loss * weight
    return loss


class Loss(HybridBlock):
    """The base class: ``weight`` (None or a number) scales the loss, and the
    result is averaged over every axis but ``batch_axis``.  A subclass defines
    ``hybrid_forward(F, pred, label, ...)``, with ``F`` the :mod:`mxdeconv.nd` module,
    as in MXNet.

    >>> from mxdeconv import gluon, nd
    >>> class Diff(gluon.loss.Loss):
    ...     def __init__(self, **kwargs):
    ...         super().__init__(weight=None, batch_axis=0, **kwargs)
    ...     def hybrid_forward(self, F, pred, label):
    ...         return (pred - label).mean(axis=self._batch_axis, exclude=True)
    >>> Diff()(nd.ones((2, 3)), nd.zeros((2, 3))).asnumpy()
    array([1., 1.], dtype=float32)
    """

    def __init__(self, weight: Optional[float], batch_axis: int, prefix: Optional[str] = None,
                 params: Any = None) -> None:
        owner = type(self).__name__
        if params is not None:
            raise MXNetError(f"{owner}: sharing parameters through params= is not supported "
                             f"(a loss has none): params must be None, got {params!r:.80}")
        if prefix is not None and not isinstance(prefix, str):
            raise _type_error("prefix", "a string or None", prefix)
        self._weight = None if weight is None else _real_arg("weight", weight)
        self._batch_axis = _int_arg("batch_axis", batch_axis)
        super().__init__(prefix)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_axis={self._batch_axis}, w={self._weight})"

    def __call__(self, pred: Any, *args: Any, **kwargs: Any) -> NDArray:
        return self.forward(pred, *args, **kwargs)

    # MXNet's Loss names its first input ``pred`` (HybridBlock's is ``x``).
    def forward(self, pred: Any, *args: Any, **kwargs: Any) -> NDArray:  # type: ignore[override]
        """``hybrid_forward(nd, pred, *args)``."""
        return self.hybrid_forward(_nd, pred, *args, **kwargs)

    def hybrid_forward(self, F: Any, pred: Any, *args: Any,  # type: ignore[override]
                       **kwargs: Any) -> NDArray:
        raise NotImplementedError(f"{type(self).__name__} defines no hybrid_forward")

    def _batch_mean(self, loss: NDArray) -> NDArray:
        _axis(type(self).__name__, "batch_axis", self._batch_axis, loss.ndim)
        return loss.mean(axis=self._batch_axis, exclude=True)

    def _inputs(self, pred: Any, label: Any, reshape: bool = True) -> Tuple[NDArray, NDArray]:
        owner = type(self).__name__
        pred, label = _input(owner, "pred", pred), _input(owner, "label", label)
        return pred, _reshape_like(owner, label, pred) if reshape else label

    def _optional(self, name: str, value: Any) -> Any:
        return None if value is None else _input(type(self).__name__, name, value)


class L2Loss(Loss):
    """Half the squared error, averaged over all but ``batch_axis``:
    ``weight / 2 * (label - pred) ** 2`` (``weight`` default 1; ``label`` may have
    another shape with as many elements).  Call it as
    ``loss(pred, label, sample_weight=None)``.

    >>> from mxdeconv import gluon, nd
    >>> gluon.loss.L2Loss()(nd.array([[1.0, 3.0]]), nd.array([[0.0, 0.0]])).asnumpy()
    array([2.5], dtype=float32)
    """

    def __init__(self, weight: float = 1., batch_axis: int = 0, **kwargs: Any) -> None:
        if weight is None:  # MXNet computes weight / 2 and fails on None
            raise _type_error("weight", "a number", weight)
        super().__init__(weight, batch_axis, **kwargs)

    def hybrid_forward(self, F: Any, pred: Any, label: Any,
                       sample_weight: Any = None) -> NDArray:
        pred, label = self._inputs(pred, label)
        loss = np.square(label - pred)
        assert self._weight is not None  # __init__ refused None
        loss = _apply_weighting(loss, self._weight / 2, self._optional("sample_weight",
                                                                       sample_weight))
        return self._batch_mean(loss)


class L1Loss(Loss):
    """The absolute error ``|label - pred|``, averaged over all but ``batch_axis``.
    Call it as ``loss(pred, label, sample_weight=None)``.

    >>> from mxdeconv import gluon, nd
    >>> gluon.loss.L1Loss()(nd.array([[1.0, -3.0]]), nd.array([[0.0, 0.0]])).asnumpy()
    array([2.], dtype=float32)
    """

    def __init__(self, weight: Optional[float] = None, batch_axis: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)

    def hybrid_forward(self, F: Any, pred: Any, label: Any,
                       sample_weight: Any = None) -> NDArray:
        pred, label = self._inputs(pred, label)
        loss = np.abs(label - pred)
        loss = _apply_weighting(loss, self._weight, self._optional("sample_weight",
                                                                   sample_weight))
        return self._batch_mean(loss)


class SigmoidBinaryCrossEntropyLoss(Loss):
    """Binary cross-entropy of logits (or, with ``from_sigmoid=True``, of
    probabilities) against labels in ``[0, 1]``, averaged over all but
    ``batch_axis``; see the module for MXNet's numerically stable form.  Call it
    as ``loss(pred, label, sample_weight=None, pos_weight=None)``: ``pos_weight``
    (broadcast against ``label``, e.g. shape ``(1, classes)``) weighs the
    positive examples.

    >>> from mxdeconv import gluon, nd
    >>> bce = gluon.loss.SigmoidBinaryCrossEntropyLoss()
    >>> bce(nd.array([[0.0, 100.0]]), nd.array([[1.0, 1.0]])).asnumpy()  # (log 2 + 0) / 2
    array([0.3465736], dtype=float32)
    """

    def __init__(self, from_sigmoid: bool = False, weight: Optional[float] = None,
                 batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._from_sigmoid = _bool_arg("from_sigmoid", from_sigmoid)

    def hybrid_forward(self, F: Any, pred: Any, label: Any, sample_weight: Any = None,
                       pos_weight: Any = None) -> NDArray:
        pred, label = self._inputs(pred, label)
        pos_weight = self._optional("pos_weight", pos_weight)
        if not self._from_sigmoid:
            softplus = _nd.Activation(-np.abs(pred), act_type="softrelu")  # log(1 + e^-|x|)
            if pos_weight is None:
                loss = _nd.relu(pred) - pred * label + softplus
            else:
                log_weight = 1 + (pos_weight - 1) * label
                loss = pred - pred * label + log_weight * (softplus + _nd.relu(-pred))
        else:
            eps = 1e-12
            positive = np.log(pred + eps) * label
            if pos_weight is not None:
                positive = positive * pos_weight
            loss = -(positive + np.log(1. - pred + eps) * (1. - label))
        loss = _apply_weighting(loss, self._weight, self._optional("sample_weight",
                                                                   sample_weight))
        return self._batch_mean(loss)


SigmoidBCELoss = SigmoidBinaryCrossEntropyLoss


class SoftmaxCrossEntropyLoss(Loss):
    """Softmax cross-entropy along ``axis`` (default the last), averaged over all
    but ``batch_axis``.  ``sparse_label=True``: ``label`` holds class indices, of
    pred's shape without ``axis``; ``False``: a distribution of pred's shape.
    ``from_logits=True``: ``pred`` is already a log-probability (``log_softmax``).
    Call it as ``loss(pred, label, sample_weight=None)``.

    >>> from mxdeconv import gluon, nd
    >>> ce = gluon.loss.SoftmaxCrossEntropyLoss()
    >>> ce(nd.array([[0.0, 0.0], [0.0, 100.0]]), nd.array([0, 1])).asnumpy()  # log 2, 0
    array([0.6931472, 0.       ], dtype=float32)
    """

    def __init__(self, axis: int = -1, sparse_label: bool = True, from_logits: bool = False,
                 weight: Optional[float] = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._axis = _int_arg("axis", axis)
        self._sparse_label = _bool_arg("sparse_label", sparse_label)
        self._from_logits = _bool_arg("from_logits", from_logits)

    def hybrid_forward(self, F: Any, pred: Any, label: Any,
                       sample_weight: Any = None) -> NDArray:
        owner = type(self).__name__
        pred, label = self._inputs(pred, label, reshape=not self._sparse_label)
        axis = _axis(owner, "axis", self._axis, pred.ndim)
        if not self._from_logits:
            pred = _nd.log_softmax(pred, axis=axis)
        if self._sparse_label:
            loss = -_nd.pick(pred, label, axis=axis, keepdims=True)
        else:
            loss = -(pred * label).sum(axis=axis, keepdims=True)
        loss = _apply_weighting(loss, self._weight, self._optional("sample_weight",
                                                                   sample_weight))
        return self._batch_mean(loss)


SoftmaxCELoss = SoftmaxCrossEntropyLoss
