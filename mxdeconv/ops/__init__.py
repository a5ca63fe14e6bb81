"""Operators on NDArrays: Deconvolution (validation, dispatch to oneDNN or
the NumPy path, outputs, the compiled hot path) and Activation.
"""
