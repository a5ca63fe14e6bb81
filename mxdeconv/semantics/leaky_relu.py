"""MXNet 1.9.1's ``LeakyReLU`` activations (its ``act_type``) in NumPy.

The forward formulas and the derivatives are MXNet's own (``leaky_relu-inl.h``
and ``mshadow_op.h``), some read from the output y as MXNet reads them:

============  ======================================  ====================================
act_type      forward ``y = f(x)``                    derivative, from
============  ======================================  ====================================
``leaky``     ``x`` if ``x > 0`` else ``slope * x``   1 if ``x > 0`` else ``slope``, x
``prelu``     ``x`` if ``x > 0`` else ``gamma * x``   1 if ``x > 0`` else ``gamma``, x;
                                                      ``gamma``'s: ``min(x, 0)``
``elu``       ``x`` if ``x > 0`` else                 1 if ``y > 0`` else ``y + slope``, y
              ``slope * expm1(x)``
``selu``      ``λ x`` if ``x > 0`` else               ``λ`` if ``y > 0`` else ``y + λ α``, y
              ``λ α expm1(x)``
``gelu``      ``x Φ(x)``, ``Φ(x) = (1 + erf(x /       ``Φ(x) + x φ(x)`` (φ the normal
              √2)) / 2``                              density), x
============  ======================================  ====================================

with SELU's ``α = 1.6732632...`` and ``λ = 1.0507009...``.  One exception:
MXNet 1.9.1 computes selu's derivative below 0 as ``λ (y + α)``, which is not
the derivative of its forward (``λ α exp(x) = y + λ α``); this module gives
the true one.  ``rrelu``'s random
slopes belong to training; in inference it is ``leaky`` with the slope
``(lower_bound + upper_bound) / 2`` (see :func:`mxdeconv.nd.LeakyReLU`).  This
module knows arrays of numbers only, in the dtype they come in (the operator
widens 16-bit floats to float32 first).

>>> import numpy as np
>>> x = np.array([-1.0, 0.0, 2.0])
>>> forward(x, "leaky", 0.25).tolist(), forward(x, "elu", 1.0).round(4).tolist()
([-0.25, 0.0, 2.0], [-0.6321, 0.0, 2.0])
>>> derivative(x, forward(x, "leaky", 0.25), "leaky", 0.25).tolist()
[0.25, 0.25, 1.0]
"""
from __future__ import annotations

import math
from typing import Any, Union

import numpy as np

from mxdeconv._core.args import choice_arg

#: MXNet 1.9.1's act_type values, in the order its error message lists them.
ACT_TYPES = ("elu", "gelu", "leaky", "prelu", "rrelu", "selu")
#: SELU's constants (Klambauer et al.), as MXNet has them.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_LAMBDA = 1.0507009873554804934193349852946

Slope = Union[float, np.ndarray]
_erf = np.frompyfunc(math.erf, 1, 1)  # NumPy has no erf; math's is exact to double


def check_act_type(name: str, value: Any) -> str:
    """``value`` if it is one of :data:`ACT_TYPES` (see ``_core.args.choice_arg``)."""
    return choice_arg(name, value, ACT_TYPES)


def _phi(x: np.ndarray) -> np.ndarray:
    """The standard normal distribution function Φ(x), in x's dtype."""
    erf = np.asarray(_erf(x.astype(np.float64) / math.sqrt(2)))  # object dtype: math.erf's
    return ((1 + erf.astype(np.float64)) / 2).astype(x.dtype)


def forward(x: np.ndarray, act_type: str, slope: Slope) -> np.ndarray:
    """``act_type`` applied to ``x`` (``slope``: leaky's and elu's slope, or
    prelu's gamma shaped to broadcast against ``x``)."""
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE inf/NaN propagate
        if act_type in ("leaky", "prelu", "rrelu"):
            return np.where(x > 0, x, slope * x)
        if act_type == "elu":
            return np.where(x > 0, x, slope * np.expm1(x))
        if act_type == "selu":
            return SELU_LAMBDA * np.where(x > 0, x, SELU_ALPHA * np.expm1(x)).astype(x.dtype)
        if act_type == "gelu":
            return x * _phi(x)
    check_act_type("act_type", act_type)
    raise AssertionError(act_type)  # pragma: no cover - every name is handled


def derivative(x: np.ndarray, y: np.ndarray, act_type: str, slope: Slope) -> np.ndarray:
    """``f'`` for input ``x`` and output ``y = forward(x, ...)``, as MXNet
    computes it (from y where the table says so)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if act_type in ("leaky", "rrelu", "prelu"):
            return np.where(x > 0, 1, slope).astype(x.dtype)
        if act_type == "elu":
            return np.where(y > 0, 1, y + slope).astype(x.dtype)
        if act_type == "selu":
            return np.where(y > 0, SELU_LAMBDA, y + SELU_ALPHA * SELU_LAMBDA).astype(x.dtype)
        if act_type == "gelu":
            density = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
            return (_phi(x) + x * density).astype(x.dtype)
    check_act_type("act_type", act_type)
    raise AssertionError(act_type)  # pragma: no cover


def gamma_derivative(x: np.ndarray) -> np.ndarray:
    """prelu's output by gamma: ``x`` where ``x <= 0``, else 0."""
    return np.where(x > 0, 0, x).astype(x.dtype)
