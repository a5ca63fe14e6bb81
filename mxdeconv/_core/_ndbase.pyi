"""Type stubs for an NDArray's compiled base class (``mxdeconv/_ndbase.pyx``)."""
from typing import Any, Optional, Tuple

import numpy as np


class NDArrayBase:
    """An NDArray's state; see :class:`mxdeconv.ndarray.ndarray.NDArray`."""

    _state: Tuple[np.ndarray, Any]
    _shape: Tuple[int, ...]
    _dtype: np.dtype
    _grad: Optional[Any]
    _grad_req: str
    _node: Optional[Any]
    _derived: Optional[dict]
    _version: int
    _exposed: bool
