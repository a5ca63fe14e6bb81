"""mxdeconv: MXNet-compatible Deconvolution on oneDNN v3, forward and backward.

>>> import mxdeconv
>>> mxdeconv.runtime_info()["onednn_version"]
'3.2.0'
"""
from __future__ import annotations

from typing import Any, Dict

from . import autograd, nd
from .autograd import is_training, predict_mode, set_training, train_mode
from .base import MXNetError
from .deconvolution import EXTENSION_ERROR, _ops, explain
from .ndarray import NDArray
from .registry import last_impl, onednn_enabled, set_onednn_enabled, use_impl

__version__ = "0.1.0"

__all__ = ["MXNetError", "NDArray", "autograd", "cache_info", "clear_cache", "explain",
           "get_num_threads", "is_training", "last_impl", "nd", "onednn_enabled",
           "predict_mode", "reorder_counts", "reset_reorder_counts", "runtime_info",
           "set_cache_capacity", "set_num_threads", "set_onednn_enabled",
           "set_training", "train_mode", "use_impl"]


def _extension():
    if _ops is None:
        raise MXNetError(EXTENSION_ERROR)
    return _ops


def runtime_info() -> Dict[str, Any]:
    """oneDNN version and ISA actually loaded, threads, and the cache bound."""
    ops = _extension()
    return {"onednn_version": ops.onednn_version(), "cpu_isa": ops.cpu_isa(),
            "num_threads": ops.get_num_threads(), "onednn_enabled": onednn_enabled(),
            "cache_capacity": ops.cache_info()["capacity"]}


def set_num_threads(count: int) -> None:
    """Run oneDNN with ``count`` OpenMP threads (default: ``OMP_NUM_THREADS``)."""
    _extension().set_num_threads(count)


def get_num_threads() -> int:
    return _extension().get_num_threads()


def cache_info() -> Dict[str, int]:
    """This thread's primitive cache: size, capacity, hits, misses, evictions."""
    return _extension().cache_info()


def set_cache_capacity(capacity: int) -> None:
    """Bound the primitive cache (default 1024, or MXDECONV_PRIMITIVE_CACHE_CAPACITY)."""
    _extension().set_cache_capacity(capacity)


def clear_cache() -> None:
    _extension().clear_cache()


def reorder_counts() -> Dict[str, int]:
    """Reorders run so far, by tensor: data, weights, bias, out_grad, out, to_default."""
    return _extension().reorder_counts()


def reset_reorder_counts() -> None:
    _extension().reset_reorder_counts()
