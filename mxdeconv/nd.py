"""Imperative operators in MXNet's ``mx.nd`` style.

>>> import numpy as np
>>> from mxdeconv import nd
>>> x = nd.array(np.ones((1, 2, 3, 3)))
>>> w = nd.array(np.ones((2, 4, 3, 3)))
>>> y = nd.Deconvolution(x, w, kernel=(3, 3), stride=(2, 2), num_filter=4)
>>> y.shape
(1, 4, 7, 7)
"""
from __future__ import annotations

from .ops.activation import Activation
from .ndarray import random
from .ops.deconvolution import Deconvolution, Deconvolution_backward
from .ndarray.elementwise import add, multiply, relu
from .ndarray.ndarray import (
    NDArray, array, empty, from_dlpack, ones, to_dlpack_for_read, to_dlpack_for_write, zeros)
# NDArray basics (mxdeconv.ndarray.functions; nd.random is mxdeconv.ndarray.random).
from .ndarray.functions import arange, concat, full, ones_like, stack, waitall, zeros_like
from .io.ndarray_file import load, load_frombuffer, save

__all__ = ["Activation", "Deconvolution", "Deconvolution_backward", "NDArray", "add", "array",
           "empty", "from_dlpack", "load", "load_frombuffer", "multiply", "ones", "relu",
           "save", "to_dlpack_for_read", "to_dlpack_for_write", "zeros",
           # NDArray basics
           "arange", "concat", "full", "ones_like", "random", "stack", "waitall",
           "zeros_like"]
