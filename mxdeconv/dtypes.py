"""The dtypes mxdeconv arrays hold, and which of them oneDNN computes.

bfloat16 comes from ml_dtypes (NumPy has none) and is optional.
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
#: dtype -> oneDNN's name for it, for the dtypes the oneDNN path computes
#: (float16 has no oneDNN kernels on CPUs without AVX-512 FP16: NumPy runs it).
ONEDNN_NAMES: Dict[np.dtype, str] = {np.dtype(np.float32): "float32"}
if BFLOAT16 is not None:
    ONEDNN_NAMES[BFLOAT16] = "bfloat16"


def is_float_dtype(dtype: np.dtype) -> bool:
    """NumPy's floats, and ml_dtypes' bfloat16 (whose NumPy kind is 'V')."""
    return dtype.kind == "f" or (BFLOAT16 is not None and dtype == BFLOAT16)
