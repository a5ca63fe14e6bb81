"""The NDArray: buffer and layout, constructors, MXNet-style methods,
NumPy's array protocols, indexing, the nd functions and their gradients.

:mod:`~mxdeconv.ndarray.ndarray` defines NDArray and never imports the modules
that build on it; this package puts it together: the protocols, indexing and
the reductions set their methods on NDArray (``install``), and
:mod:`~mxdeconv.ndarray.gradients` registers the backward of every operator
NumPy computes on NDArrays with the autograd tape when imported.
"""
from . import gradients  # noqa: F401  (registers each operator's backward with the tape)
from . import indexing, numpy_protocols, reductions
from .ndarray import NDArray, array

numpy_protocols.install()
indexing.install()
reductions.install()

__all__ = ["NDArray", "array"]
