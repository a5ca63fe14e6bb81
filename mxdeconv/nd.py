"""Imperative operators in MXNet's ``mx.nd`` style.

>>> import numpy as np
>>> from mxdeconv import nd
>>> x = nd.array(np.ones((1, 2, 3, 3)))
>>> w = nd.array(np.ones((2, 4, 3, 3)))
>>> y = nd.Deconvolution(x, w, kernel=(3, 3), stride=(2, 2), num_filter=4)
>>> y.shape
(1, 4, 7, 7)
>>> nd.mean(nd.square(y - 1)).shape          # MXNet's most common loss line
(1,)
"""
from __future__ import annotations

from .ops.activation import Activation, LeakyReLU
from .ops.batchnorm import BatchNorm
from .ndarray import random
from .ops.deconvolution import Deconvolution, Deconvolution_backward
from .ndarray.ndarray import (
    NDArray, array, empty, from_dlpack, ones, to_dlpack_for_read, to_dlpack_for_write, zeros)
# NDArray basics (mxdeconv.ndarray.functions; nd.random is mxdeconv.ndarray.random).
from .ndarray.functions import (
    Cast, arange, cast, concat, full, one_hot, ones_like, stack, waitall, zeros_like)
# The function forms of NDArray's methods and operators, and their kin.
from .ndarray.elementwise import (
    add, broadcast_add, broadcast_div, broadcast_equal, broadcast_greater,
    broadcast_greater_equal, broadcast_lesser, broadcast_lesser_equal, broadcast_logical_and,
    broadcast_logical_or, broadcast_logical_xor, broadcast_maximum, broadcast_minimum,
    broadcast_minus, broadcast_mod, broadcast_mul, broadcast_not_equal, broadcast_plus,
    broadcast_power, broadcast_sub, divide, elemwise_add, elemwise_div, elemwise_mul,
    elemwise_sub, equal, greater, greater_equal, lesser, lesser_equal, maximum, minimum, modulo,
    multiply, not_equal, power, relu, subtract, true_divide, where)
from .ndarray.linalg import dot
from .ndarray.reductions import argmax, argmin, max, mean, min, norm, pick, prod, sum
from .ndarray.shaping import (
    Flatten, broadcast_like, broadcast_to, expand_dims, flatten, reshape, squeeze, tile,
    transpose)
from .ndarray.softmax import log_softmax, softmax
from .ndarray.unary import (
    abs, ceil, clip, cos, exp, expm1, fix, floor, log, log10, log1p, log2, negative,
    reciprocal, rint, round, rsqrt, sigmoid, sign, sin, smooth_l1, sqrt, square, tan, tanh,
    trunc)
from .io.ndarray_file import load, load_frombuffer, save

__all__ = ["Activation", "BatchNorm", "Deconvolution", "Deconvolution_backward", "NDArray", "array",
           "empty", "from_dlpack", "load", "load_frombuffer", "ones", "save",
           "to_dlpack_for_read", "to_dlpack_for_write", "zeros",
           # NDArray basics
           "Cast", "arange", "cast", "concat", "full", "one_hot", "ones_like", "random", "stack",
           "waitall", "zeros_like",
           # elementwise, one input
           "LeakyReLU", "abs", "ceil", "clip", "cos", "exp", "expm1", "fix", "floor", "log",
           "log10", "log1p", "log2", "negative", "reciprocal", "relu", "rint", "round", "rsqrt",
           "sigmoid", "sign", "sin", "smooth_l1", "sqrt", "square", "tan", "tanh", "trunc",
           # elementwise, two or three inputs
           "add", "divide", "equal", "greater", "greater_equal", "lesser", "lesser_equal",
           "maximum", "minimum", "modulo", "multiply", "not_equal", "power", "subtract",
           "true_divide", "where",
           "broadcast_add", "broadcast_div", "broadcast_equal", "broadcast_greater",
           "broadcast_greater_equal", "broadcast_lesser", "broadcast_lesser_equal",
           "broadcast_logical_and", "broadcast_logical_or", "broadcast_logical_xor",
           "broadcast_maximum", "broadcast_minimum", "broadcast_minus", "broadcast_mod",
           "broadcast_mul", "broadcast_not_equal", "broadcast_plus", "broadcast_power",
           "broadcast_sub", "elemwise_add", "elemwise_div", "elemwise_mul", "elemwise_sub",
           # reductions, products, softmax
           "argmax", "argmin", "dot", "log_softmax", "max", "mean", "min", "norm", "pick",
           "prod", "softmax", "sum",
           # shapes
           "Flatten", "broadcast_like", "broadcast_to", "expand_dims", "flatten", "reshape",
           "squeeze", "tile", "transpose"]
