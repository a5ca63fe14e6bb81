"""MXNet's ``Activation`` and ``LeakyReLU`` operators on NDArrays
(``nd.Activation``, ``nd.LeakyReLU``), recorded by autograd.

The arithmetic is :mod:`mxdeconv.semantics.activations`'s and
:mod:`mxdeconv.semantics.leaky_relu`'s, in NumPy on the default layout (a
blocked input is turned into the default layout first, in place).  The
gradients are MXNet's: from the output for relu, sigmoid, tanh and softrelu,
from the input for softsign (and as the LeakyReLU table says); the output is
recomputed from the recorded input, which gives exactly the forward's values.

>>> from mxdeconv import nd
>>> nd.Activation(nd.array([-1.0, 0.0, 1.0]), act_type="softsign").asnumpy()
array([-0.5,  0. ,  0.5], dtype=float32)
>>> nd.LeakyReLU(nd.array([-1.0, 0.0, 1.0]), slope=0.1).asnumpy()
array([-0.1,  0. ,  1. ], dtype=float32)
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from mxdeconv.semantics import activations, leaky_relu
from mxdeconv.autograd import tape
from mxdeconv._core.args import real_arg
from mxdeconv._core.buffers import aligned_empty
from mxdeconv._core.errors import MXNetError
from mxdeconv.ndarray.gradients import deliver
from mxdeconv.ndarray.ndarray import NDArray, as_ndarray
from mxdeconv.ndarray.numpy_protocols import check_gradient, wrap
from mxdeconv.ndarray.results import check_name, into
from .validation import check_target

__all__ = ["Activation", "LeakyReLU"]


def Activation(data: Any, act_type: str, out: Optional[NDArray] = None,
               name: Optional[str] = None) -> NDArray:
    """Applies an activation function elementwise (MXNet's ``nd.Activation``).

    Args:
        data: an NDArray or a NumPy array (copied) of floats.
        act_type: ``"relu"``, ``"sigmoid"``, ``"softrelu"`` (``log(1 + exp(x))``),
            ``"softsign"`` (``x / (1 + |x|)``) or ``"tanh"``.
        out: an NDArray of ``data``'s shape and dtype to write the result into
            (it may be ``data`` itself, outside :func:`mxdeconv.autograd.record`).
        name: accepted for MXNet compatibility; ignored.

    16-bit floats are computed in float32.  Recorded by autograd.

    >>> from mxdeconv import nd
    >>> nd.Activation(nd.array([-1.0, 0.0, 2.0]), act_type="relu").asnumpy()
    array([0., 0., 2.], dtype=float32)
    >>> nd.Activation(nd.array([0.0, 30.0]), act_type="softrelu").asnumpy()
    array([ 0.6931472, 30.       ], dtype=float32)
    """
    act_type = activations.check_act_type("act_type", act_type)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string or None, got {name!r} of type "
                        f"{type(name).__name__}")
    arr = as_ndarray(data, "Activation: data")
    values = arr._plain()
    if out is None:
        result = NDArray(activations.forward(values, act_type,
                                            aligned_empty(values.shape, values.dtype)))
    else:
        check_target("out", out, arr.shape, arr.dtype)
        tape.check_assignable("out", out)
        tape.check_not_in_place("out", out, out is arr or np.may_share_memory(
            out._state[0], arr._state[0]), (arr,))
        activations.forward(values, act_type, out._plain())
        out._bump()
        result = out
    return tape.record_op("Activation", result, (arr,), act_type)


@tape.register_backward("Activation")
def _activation_backward(out_grad: Any, inputs: Any, act_type: str, reqs: Any,
                         targets: Any) -> tuple:
    (arr,), (req,), (target,) = inputs, reqs, targets
    if req == "null":
        return (None,)
    x = arr._plain()
    values = activations.forward(x, act_type) if act_type in activations.GRADIENT_FROM_OUTPUT \
        else x
    grad = activations.gradient(out_grad._plain(), values, act_type, arr.dtype)
    return (deliver(grad, req, target, grad.dtype),)


# -- LeakyReLU ---------------------------------------------------------------------
def LeakyReLU(data: Any, gamma: Optional[NDArray] = None, act_type: str = "leaky",
              slope: float = 0.25, lower_bound: float = 0.125, upper_bound: float = 0.334,
              out: Optional[NDArray] = None, name: Optional[str] = None) -> NDArray:
    """MXNet's ``nd.LeakyReLU``: a leaky rectifier or one of its relatives,
    elementwise (formulas and gradients: :mod:`mxdeconv.semantics.leaky_relu`).

    Args:
        data: an NDArray or a NumPy array (copied) of floats.
        gamma: ``prelu``'s learned slopes, an NDArray of ``data``'s dtype with
            one value, or one per channel (axis 1; axis 0 of 1-D data);
            recorded, so that it gets a gradient.  Only ``prelu`` takes it.
        act_type: ``"leaky"`` (``x`` or ``slope * x``), ``"prelu"``,
            ``"elu"`` (``slope * expm1(x)`` below 0), ``"selu"``, ``"gelu"``
            (``x Φ(x)``, with erf), or ``"rrelu"``: outside training, leaky
            with the slope ``(lower_bound + upper_bound) / 2``, as MXNet's
            inference; in training mode (inside ``autograd.record()``) it
            raises, as its random slopes are not implemented.
        slope: the slope of ``leaky`` and ``elu``.
        out: an NDArray of ``data``'s shape and dtype to write the result into.
        name: accepted for MXNet compatibility; ignored.

    16-bit floats are computed in float32.  Recorded by autograd.

    >>> from mxdeconv import nd
    >>> x = nd.array([-2.0, 0.0, 1.0])
    >>> nd.LeakyReLU(x).asnumpy()
    array([-0.5,  0. ,  1. ], dtype=float32)
    >>> nd.LeakyReLU(x, act_type="elu", slope=1.0).asnumpy()
    array([-0.86466473,  0.        ,  1.        ], dtype=float32)
    >>> nd.LeakyReLU(nd.array([[-1.0, -1.0]]), nd.array([0.1, 0.5]), act_type="prelu").asnumpy()
    array([[-0.1, -0.5]], dtype=float32)
    """
    act_type = leaky_relu.check_act_type("LeakyReLU: act_type", act_type)
    check_name("LeakyReLU", name)
    slope = real_arg("LeakyReLU: slope", slope)
    lower = real_arg("LeakyReLU: lower_bound", lower_bound)
    upper = real_arg("LeakyReLU: upper_bound", upper_bound)
    arr = as_ndarray(data, "LeakyReLU: data")
    slopes = _gamma(arr, gamma) if act_type == "prelu" else None
    if act_type != "prelu" and gamma is not None:
        raise MXNetError(f"LeakyReLU: gamma is prelu's input; act_type={act_type!r} takes none")
    if act_type == "rrelu":
        if tape.is_training():
            raise MXNetError("LeakyReLU: act_type='rrelu' in training mode draws random slopes, "
                             "which mxdeconv does not implement; outside training (predict "
                             "mode, autograd.record(train_mode=False)) it is leaky with the "
                             "mean slope")
        slope = (lower + upper) / 2
    inputs = (arr, slopes)
    check_gradient("LeakyReLU", "LeakyReLU", inputs)
    attrs = (act_type, slope)
    y = leaky_relu.forward(_widened(arr), act_type, _slope_values(inputs, attrs))
    result = tape.record_op("LeakyReLU", wrap(y, arr.dtype), inputs, attrs)
    return into("LeakyReLU", result, out, inputs)


def _gamma(arr: NDArray, gamma: Any) -> NDArray:
    """prelu's gamma, checked against ``arr``."""
    if gamma is None:
        raise MXNetError("LeakyReLU: act_type='prelu' needs gamma (an NDArray of slopes)")
    if not isinstance(gamma, NDArray):
        raise TypeError(f"LeakyReLU: gamma must be an NDArray, got {type(gamma).__name__}")
    if gamma.dtype != arr.dtype:
        raise MXNetError(f"LeakyReLU: gamma has dtype {gamma.dtype} but data {arr.dtype}")
    channels = arr.shape[1] if arr.ndim >= 2 else arr.shape[0] if arr.ndim else 1
    if gamma.ndim != 1 or gamma.shape[0] not in (1, channels):
        raise MXNetError(f"LeakyReLU: Cannot broadcast gamma to data: gamma has shape "
                         f"{gamma.shape}, data {arr.shape} (gamma takes 1 or {channels} values, "
                         "one per channel)")
    return gamma


def _widened(arr: NDArray) -> np.ndarray:
    values = arr._plain()
    return values.astype(np.float32, copy=False) if values.dtype.itemsize < 4 else values


def _slope_values(inputs: Tuple[NDArray, Optional[NDArray]], attrs: Tuple[str, float]) -> Any:
    """The slope, or prelu's gamma shaped to broadcast along the channel axis."""
    arr, gamma = inputs
    if gamma is None:
        return attrs[1]
    values = _widened(gamma)
    if values.shape[0] > 1 and arr.ndim >= 2:
        return values.reshape((1, -1) + (1,) * (arr.ndim - 2))
    return values if arr.ndim == 1 else values[0]


@tape.register_backward("LeakyReLU")
def _leaky_relu_backward(out_grad: Any, inputs: Any, attrs: Tuple[str, float], reqs: Any,
                         targets: Any) -> tuple:
    arr, gamma = inputs
    act_type = attrs[0]
    x = _widened(arr)
    slopes = _slope_values(inputs, attrs)
    g = out_grad._plain().astype(x.dtype, copy=False)
    grads: List[Optional[NDArray]] = [None, None]
    with np.errstate(over="ignore", invalid="ignore"):
        if reqs[0] != "null":
            y = leaky_relu.forward(x, act_type, slopes)
            grads[0] = deliver(g * leaky_relu.derivative(x, y, act_type, slopes), reqs[0],
                               targets[0], arr.dtype)
        if gamma is not None and reqs[1] != "null":
            by_gamma = g * leaky_relu.gamma_derivative(x)
            if gamma.shape[0] == 1:
                value = by_gamma.reshape(-1).sum(keepdims=True)
            elif arr.ndim == 1:
                value = by_gamma
            else:  # summed over every axis but the channels
                value = by_gamma.sum(axis=(0,) + tuple(range(2, arr.ndim)))
            grads[1] = deliver(value, reqs[1], targets[1], gamma.dtype)
    return tuple(grads)
