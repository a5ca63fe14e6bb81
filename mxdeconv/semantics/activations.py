"""MXNet 1.9.1's activation functions (``Activation``'s ``act_type``) in NumPy.

The forward formulas and the gradients are MXNet's own (``mshadow_op.h``):

============  ==================================  ======================================
act_type      forward ``y = f(x)``                gradient, from
============  ==================================  ======================================
``relu``      ``max(x, 0)``                       ``y > 0`` (0 at 0), from y
``sigmoid``   ``1 / (1 + exp(-x))``               ``y * (1 - y)``, from y
``tanh``      ``tanh(x)``                         ``1 - y * y``, from y
``softrelu``  ``x`` if ``x > 20`` else            ``-expm1(-y)``, from y
              ``log1p(exp(x))``
``softsign``  ``x / (1 + |x|)``                   ``1 / (1 + |x|)**2``, from x
============  ==================================  ======================================

``softrelu`` is ``log(1 + exp(x))`` computed without overflow: ``exp`` only
sees ``x <= 20``, and above 20 ``log1p(exp(x))`` equals ``x`` to float32
precision (MXNet's threshold).  16-bit floats are computed in float32 and
rounded once.  This module knows arrays of numbers only; the operator on
NDArrays is :func:`mxdeconv.nd.Activation`, and Gluon's transposed
convolutions fuse these into the deconvolution (:mod:`mxdeconv.gluon`).

>>> import numpy as np
>>> y = forward(np.array([-1.0, 0.0, 25.0]), "softrelu")
>>> y.tolist()
[0.31326168751822286, 0.6931471805599453, 25.0]
>>> gradient(np.ones(3), y, "softrelu").round(4).tolist()    # sigmoid(x), from y
[0.2689, 0.5, 1.0]
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from mxdeconv._core.args import choice_arg

#: MXNet 1.9.1's act_type values, in the order its error message lists them.
ACT_TYPES = ("relu", "sigmoid", "softrelu", "softsign", "tanh")
#: Those whose gradient MXNet computes from the output y; softsign's needs x.
GRADIENT_FROM_OUTPUT = ("relu", "sigmoid", "softrelu", "tanh")
#: Above this, softrelu(x) is x (MXNet: log1p(exp(x)) == x in float32 there).
SOFTRELU_THRESHOLD = 20.0


def check_act_type(name: str, value: Any) -> str:
    """``value`` if it is one of :data:`ACT_TYPES` (see ``_core.args.choice_arg``)."""
    return choice_arg(name, value, ACT_TYPES)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """16-bit floats (float16, bfloat16) are computed in float32."""
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def forward(values: np.ndarray, act_type: str,
            out: Optional[np.ndarray] = None) -> np.ndarray:
    """``act_type`` applied to ``values``: into ``out`` (an array of their shape,
    which may be ``values`` itself), else into a new array of their dtype."""
    x = values.astype(_compute_dtype(values.dtype), copy=False)
    direct = out is not None and out.dtype == x.dtype and not np.may_share_memory(out, x)
    y = out if out is not None and direct else np.empty(x.shape, x.dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE inf/NaN propagate
        if act_type == "relu":
            np.maximum(x, 0, out=y)
        elif act_type == "sigmoid":
            np.negative(x, out=y)
            np.exp(y, out=y)
            y += 1
            np.reciprocal(y, out=y)
        elif act_type == "tanh":
            np.tanh(x, out=y)
        elif act_type == "softrelu":
            np.minimum(x, SOFTRELU_THRESHOLD, out=y)
            np.exp(y, out=y)
            np.log1p(y, out=y)
            np.copyto(y, x, where=x > SOFTRELU_THRESHOLD)
        elif act_type == "softsign":
            np.abs(x, out=y)
            y += 1
            np.divide(x, y, out=y)
        else:
            check_act_type("act_type", act_type)
            raise AssertionError(act_type)  # pragma: no cover - every name is handled
    if out is None:
        return y.astype(values.dtype, copy=False)
    if not direct:
        np.copyto(out, y, casting="unsafe")
    return out


def derivative(values: np.ndarray, act_type: str,
               out: Optional[np.ndarray] = None) -> np.ndarray:
    """``f'`` from ``values``: the output y for :data:`GRADIENT_FROM_OUTPUT`, the
    input x for softsign (MXNet's ``*_grad`` functions), into ``out`` or a new
    array of the compute dtype."""
    v = values.astype(_compute_dtype(values.dtype), copy=False)
    d = np.empty(v.shape, v.dtype) if out is None else out
    with np.errstate(over="ignore", invalid="ignore"):
        if act_type == "relu":  # 1 above 0, 0 at 0 and below, NaN at NaN (as MXNet)
            np.greater(v, 0, out=d)  # (np.sign and np.heaviside branch: 30x slower)
            nan = np.isnan(v)
            if nan.any():
                np.copyto(d, v, where=nan)
        elif act_type == "sigmoid":
            np.subtract(1, v, out=d)
            d *= v
        elif act_type == "tanh":
            np.multiply(v, v, out=d)
            np.subtract(1, d, out=d)
        elif act_type == "softrelu":
            np.negative(v, out=d)
            np.expm1(d, out=d)
            np.negative(d, out=d)
        elif act_type == "softsign":
            np.abs(v, out=d)
            d += 1
            d *= d
            np.reciprocal(d, out=d)
        else:
            check_act_type("act_type", act_type)
            raise AssertionError(act_type)  # pragma: no cover
    return d


def gradient(out_grad: np.ndarray, values: np.ndarray, act_type: str,
             dtype: Optional[np.dtype] = None) -> np.ndarray:
    """``out_grad * f'`` (MXNet's order: the derivative first, then the
    product), as a new array of ``dtype`` (default: ``out_grad``'s)."""
    d = derivative(values, act_type)
    d *= out_grad.astype(d.dtype, copy=False)
    return d.astype(out_grad.dtype if dtype is None else dtype, copy=False)
