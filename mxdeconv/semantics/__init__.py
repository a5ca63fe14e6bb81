"""MXNet 1.9.1's semantics as plain functions on tuples and NumPy arrays.

Deconvolution's attributes and shape inference, its reference arithmetic
(im2col), the activation formulas and MXNet's shape arithmetic: what to
compute, with no NDArray and no oneDNN.  The NumPy path, the kernel check
and the NDArray methods all compute from here.
"""
