"""The NDArray: buffer and layout, constructors, MXNet-style methods,
NumPy's array protocols, indexing, the nd functions and their gradients.
"""
from .ndarray import NDArray, array

__all__ = ["NDArray", "array"]
