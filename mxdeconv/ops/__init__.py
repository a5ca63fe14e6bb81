"""Operators on NDArrays: Deconvolution (its compiled entries and prepared
calls; the full path: validation, dispatch to oneDNN or the NumPy path),
Activation and BatchNorm.
"""
