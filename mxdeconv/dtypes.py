"""The dtypes mxdeconv arrays hold, and which of them oneDNN computes.

Operators such as Deconvolution take the floating-point dtypes (``SUPPORTED``);
NDArrays may also hold MXNet's integer dtypes (``INTEGER``), for labels,
indices and ``astype`` round trips.  bfloat16 comes from ml_dtypes (NumPy has
none) and is optional.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

try:
    import ml_dtypes
    BFLOAT16: Optional[np.dtype] = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BFLOAT16 = None

SUPPORTED: tuple = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64)) + (
    (BFLOAT16,) if BFLOAT16 is not None else ())
#: MXNet 1.9.1's integer dtypes (its ``bool`` is left out: its NDArray
#: operators do not take it outside NumPy mode).
INTEGER: tuple = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.int32, np.int64))
#: Every dtype an NDArray may hold.
NDARRAY_DTYPES: tuple = SUPPORTED + INTEGER
#: dtype -> oneDNN's name for it, for the dtypes the oneDNN path computes
#: (float16 has no oneDNN kernels on CPUs without AVX-512 FP16: NumPy runs it).
ONEDNN_NAMES: Dict[np.dtype, str] = {np.dtype(np.float32): "float32"}
if BFLOAT16 is not None:
    ONEDNN_NAMES[BFLOAT16] = "bfloat16"


def is_float_dtype(dtype: np.dtype) -> bool:
    """NumPy's floats, and ml_dtypes' bfloat16 (whose NumPy kind is 'V')."""
    return dtype.kind == "f" or (BFLOAT16 is not None and dtype == BFLOAT16)
