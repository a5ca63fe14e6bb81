"""The dtypes mxdeconv arrays hold, and which of them oneDNN computes.

Operators such as Deconvolution take the floating-point dtypes (float16,
float32, float64 and bfloat16); NDArrays may also hold MXNet's integer dtypes
(``INTEGER``), for labels, indices and ``astype`` round trips.

bfloat16 comes from ml_dtypes (NumPy has none), which is optional and slow to
import (about a second, most of ``import mxdeconv`` when it was imported
eagerly).  So it is imported on first use only: where a caller names
``"bfloat16"`` (:func:`as_dtype`) or asks for the type (:func:`bfloat16`).
Recognising a bfloat16 array (:func:`is_bfloat16`) never imports it: such an
array exists only once its maker imported ml_dtypes.
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Any, List, Optional

import numpy as np

#: NumPy's floating-point dtypes the operators take (bfloat16 comes on top).
FLOATS: tuple = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64))
#: MXNet 1.9.1's integer dtypes (its ``bool`` is left out: its NDArray
#: operators do not take it outside NumPy mode).
INTEGER: tuple = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.int32, np.int64))
BFLOAT16_NAME = "bfloat16"

_bfloat16: Optional[np.dtype] = None
_bfloat16_looked_up = False


def bfloat16() -> Optional[np.dtype]:
    """ml_dtypes' bfloat16 as a NumPy dtype (ml_dtypes imported on the first
    call), or None when ml_dtypes is not installed."""
    global _bfloat16, _bfloat16_looked_up
    if not _bfloat16_looked_up:
        try:
            import ml_dtypes
            _bfloat16 = np.dtype(ml_dtypes.bfloat16)
        except ImportError:
            _bfloat16 = None
        _bfloat16_looked_up = True
    return _bfloat16


_installed: Optional[bool] = None


def bfloat16_available() -> bool:
    """Whether ml_dtypes is installed (looked up once, without importing it)."""
    global _installed
    if _installed is None:
        _installed = ("ml_dtypes" in sys.modules
                      or importlib.util.find_spec("ml_dtypes") is not None)
    return _installed


def is_bfloat16(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16; never imports ml_dtypes."""
    if dtype.kind != "V":
        return False
    module = sys.modules.get("ml_dtypes")
    return module is not None and dtype == module.bfloat16


def as_dtype(value: Any) -> np.dtype:
    """``np.dtype(value)``, where the text ``"bfloat16"`` names ml_dtypes' type
    (NumPy reads that name only once ml_dtypes is imported)."""
    if isinstance(value, str) and value == BFLOAT16_NAME:
        found = bfloat16()
        if found is not None:
            return found
    return np.dtype(value)


def is_float_dtype(dtype: np.dtype) -> bool:
    """NumPy's floats, and ml_dtypes' bfloat16 (whose NumPy kind is 'V')."""
    return dtype.kind == "f" or is_bfloat16(dtype)


def is_operator_dtype(dtype: np.dtype) -> bool:
    """A dtype the operators (Deconvolution, Gluon parameters) compute in."""
    return dtype in FLOATS or is_bfloat16(dtype)


def is_ndarray_dtype(dtype: np.dtype) -> bool:
    """A dtype an NDArray may hold."""
    return dtype in FLOATS or dtype in INTEGER or is_bfloat16(dtype)


def operator_dtype_names() -> List[str]:
    """The operators' dtypes, for messages (bfloat16 where ml_dtypes is installed)."""
    return [str(d) for d in FLOATS] + ([BFLOAT16_NAME] if bfloat16_available() else [])


def ndarray_dtype_names() -> List[str]:
    """The dtypes an NDArray may hold, for messages."""
    return operator_dtype_names() + [str(d) for d in INTEGER]


def onednn_name(dtype: np.dtype) -> Optional[str]:
    """oneDNN's name for ``dtype`` where the oneDNN path computes it, else None
    (float16 has no oneDNN kernels on CPUs without AVX-512 FP16: NumPy runs it)."""
    if dtype == np.float32:
        return "float32"
    return BFLOAT16_NAME if is_bfloat16(dtype) else None


def onednn_dtype_names() -> List[str]:
    """The dtypes the oneDNN path computes, for messages."""
    return ["float32"] + ([BFLOAT16_NAME] if bfloat16_available() else [])
