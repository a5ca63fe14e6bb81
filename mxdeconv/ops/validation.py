"""Validating a Deconvolution call: everything a user can get wrong, checked
before any buffer is written, so that an error leaves inputs and outputs
untouched.  The result is a :class:`Call` the implementations run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from mxdeconv.autograd import tape
from mxdeconv._core.errors import MXNetError
from mxdeconv._core.buffers import check_fits
from mxdeconv.ndarray.ndarray import NDArray, as_ndarray, array
from mxdeconv.semantics.attributes import (
    DeconvGeometry, _as_bool, check_shape, infer_geometry, parse_params)

REQS = ("write", "inplace", "add", "null")
FORWARD, BACKWARD = "forward", "backward"


@dataclass
class Call:
    """A validated Deconvolution call: which pass, on what, in which mode.

    ``accumulate`` (forward only): the result is added onto ``out=`` by the
    primitive itself.  ``act_type`` (forward only): an activation follows, as
    part of the call (DeconvolutionActivation).  ``plan`` is filled in by the
    oneDNN support check.
    """

    geom: DeconvGeometry
    data: NDArray
    weight: NDArray
    bias: Optional[NDArray]
    training: bool
    purpose: str = FORWARD
    accumulate: bool = False
    act_type: Optional[str] = None
    plan: Any = None

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype


def check_req(name: str, req: Any) -> str:
    if not isinstance(req, str):
        raise TypeError(f"{name} must be a string, one of {REQS}, got {req!r} "
                        f"of type {type(req).__name__}")
    if req not in REQS:
        raise MXNetError(f"{name} must be one of {REQS}, got {req!r}")
    # "inplace" is "write": a target that shares memory with an input is
    # detected (see _aliased) and written only after the computation.
    return "write" if req == "inplace" else req


def check_name(name: Any) -> None:
    """``name=``: MXNet's operators take a node name and ignore it imperatively."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string or None, got {name!r} "
                        f"of type {type(name).__name__}")


def check_array(name: str, arr: NDArray, shape: Sequence[int], dtype: np.dtype) -> None:
    check_shape(name, arr.shape, shape)
    if arr.dtype != dtype:
        raise MXNetError(f"{name} dtype mismatch: expected {dtype}, got {arr.dtype}")


def check_target(name: str, arr: Any, shape: Sequence[int], dtype: np.dtype) -> None:
    """An array a result is written into: an NDArray of the right shape and dtype
    whose memory can be written as one C-contiguous block."""
    if not isinstance(arr, NDArray):
        raise TypeError(f"{name} must be an NDArray, got {type(arr).__name__}")
    check_array(name, arr, shape, dtype)
    buffer, layout = arr._state
    if layout is None:
        if not buffer.flags.writeable:
            raise MXNetError(f"{name} must be writeable, got a read-only array")
        if not buffer.flags.c_contiguous:
            raise MXNetError(f"{name} must be C-contiguous, got strides "
                             f"{buffer.strides} for shape {arr.shape}")


def as_input(value: Any, name: str) -> NDArray:
    """An NDArray whose default-layout buffer is C-contiguous (copies otherwise)."""
    arr = as_ndarray(value, name)
    buffer, layout = arr._state
    if layout is None and not buffer.flags.c_contiguous:
        arr = array(buffer, dtype=buffer.dtype)
    return arr


def make_call(data: Any, weight: Any, bias: Any, params: dict,
              training: Optional[bool], purpose: str = FORWARD) -> Call:
    """Validate inputs and parameters; copies NumPy inputs (never aliases them)."""
    param = parse_params(params)
    training = tape.is_training() if training is None else _as_bool("train", training)
    data = as_input(data, "data")
    weight = as_input(weight, "weight")
    geom = infer_geometry(param, data.shape)
    check_array("weight", weight, geom.weight_shape, data.dtype)
    if param.no_bias:
        if bias is not None:
            raise MXNetError("bias was given but no_bias=True; pass no_bias=False to use it")
    else:
        if bias is None:
            raise MXNetError(f"no_bias=False needs a bias of shape {geom.bias_shape}")
        bias = as_input(bias, "bias")
        assert geom.bias_shape is not None  # no_bias=False: the geometry has a bias
        check_array("bias", bias, geom.bias_shape, data.dtype)
    check_fits(f"the output of shape {geom.out_shape}",
               math.prod(geom.out_shape) * data.dtype.itemsize)
    return Call(geom, data, weight, bias, training, purpose)


