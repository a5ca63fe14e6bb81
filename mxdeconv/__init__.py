"""mxdeconv: MXNet-compatible Deconvolution on oneDNN v3, forward and backward.

>>> import mxdeconv
>>> mxdeconv.runtime_info()["onednn_version"]
'3.2.0'
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import sys as _sys

# The extension first: loading it starts the thread that makes oneDNN's GEMM
# kernels (onednn.gemm_setup), which then runs beside the rest of the import
# instead of beside a first call made right after it.
from .onednn import _loader as _extension_loader  # noqa: F401
from . import autograd, context, gluon, initializer, nd
from . import initializer as init  # MXNet: mx.init is mx.initializer, the same module
from .gluon import lr_scheduler, optimizer  # MXNet's mx.lr_scheduler and mx.optimizer
from ._core import buffers
from .onednn import planner
from .ndarray import random
from .autograd import is_training, predict_mode, set_training, train_mode
from .onednn._loader import ERROR as EXTENSION_ERROR
from .onednn._loader import OPENMP_WAIT as _OPENMP_WAIT
from .onednn._loader import extension as _ops
from ._core.errors import Float16OverflowWarning, KernelDefectWarning, MXNetError
from ._core.context import Context, cpu, current_context, gpu
from .ops.deconvolution import explain
from .ndarray.ndarray import NDArray
from .ops.registry import last_impl, onednn_enabled, set_onednn_enabled, use_impl

__version__ = "0.1.0"

# `import mxdeconv.init` / `from mxdeconv.init import Normal` find the same module.
_sys.modules[__name__ + ".init"] = initializer

__all__ = ["Context", "Float16OverflowWarning", "KernelDefectWarning", "MXNetError",
           "NDArray", "autograd", "cache_info", "buffer_pool_info", "clear_cache", "context",
           "cpu", "current_context", "deterministic_enabled", "empty_buffer_pool", "explain",
           "finish_tuning", "gluon", "gpu", "get_num_threads", "init", "initializer",
           "is_training", "last_impl", "lr_scheduler", "nd", "onednn_enabled",
           "optimizer",
           "plan_cache_path", "predict_mode", "random", "reorder_counts", "reset_reorder_counts",
           "runtime_info", "set_buffer_pool_limit", "set_cache_capacity", "set_deterministic",
           "set_num_threads", "set_onednn_enabled",
           "set_training", "set_tuning", "train_mode", "tuning_enabled", "use_impl"]


def _extension() -> Any:
    if _ops is None:
        raise MXNetError(EXTENSION_ERROR)
    return _ops


def runtime_info() -> Dict[str, Any]:
    """oneDNN version and ISA actually loaded, threads (and where the count
    came from: ``set_num_threads``, ``OMP_NUM_THREADS``, else the affinity
    mask or the cgroup CPU quota, whichever is smaller), the cache bound, and
    GNU OpenMP's wait policy (``openmp_wait``: mxdeconv's ``GOMP_SPINCOUNT``
    default, the environment's, or GNU OpenMP's own when it was loaded first).

    >>> import mxdeconv
    >>> sorted(mxdeconv.runtime_info())  # doctest: +NORMALIZE_WHITESPACE
    ['cache_capacity', 'cpu_isa', 'num_threads', 'num_threads_source', 'onednn_enabled',
     'onednn_version', 'openmp_wait']
    """
    ops = _extension()
    return {"onednn_version": ops.onednn_version(), "cpu_isa": ops.cpu_isa(),
            "num_threads": ops.get_num_threads(),
            "num_threads_source": ops.num_threads_source(), "onednn_enabled": onednn_enabled(),
            "cache_capacity": ops.cache_info()["capacity"], "openmp_wait": _OPENMP_WAIT}


def set_num_threads(count: int) -> None:
    """Run oneDNN with ``count`` OpenMP threads (default: ``OMP_NUM_THREADS``,
    else the CPUs the process can really run on: its affinity mask and its
    cgroup's CPU quota, whichever is smaller; see :doc:`reliability`).

    >>> import mxdeconv
    >>> previous = mxdeconv.get_num_threads()
    >>> mxdeconv.set_num_threads(1)
    >>> mxdeconv.get_num_threads()
    1
    >>> mxdeconv.set_num_threads(previous)
    """
    _extension().set_num_threads(count)


def get_num_threads() -> int:
    """The number of threads oneDNN's primitives run with.

    >>> import mxdeconv
    >>> mxdeconv.get_num_threads() >= 1
    True
    """
    return _extension().get_num_threads()


def cache_info() -> Dict[str, int]:
    """This thread's primitive cache: size, capacity, hits, misses, evictions.

    >>> import mxdeconv
    >>> sorted(mxdeconv.cache_info())
    ['capacity', 'evictions', 'hits', 'misses', 'size']
    """
    return _extension().cache_info()


def set_cache_capacity(capacity: int) -> None:
    """Bound the primitive cache (default 1024, or MXDECONV_PRIMITIVE_CACHE_CAPACITY).

    >>> import mxdeconv
    >>> previous = mxdeconv.cache_info()["capacity"]
    >>> mxdeconv.set_cache_capacity(16)
    >>> mxdeconv.cache_info()["capacity"]
    16
    >>> mxdeconv.set_cache_capacity(previous)
    """
    _extension().set_cache_capacity(capacity)


def clear_cache() -> None:
    """Empty this thread's primitive cache (the hit and miss counters are kept).

    >>> import mxdeconv
    >>> mxdeconv.clear_cache()
    >>> mxdeconv.cache_info()["size"]
    0
    """
    _extension().clear_cache()


def reorder_counts() -> Dict[str, int]:
    """Reorders run so far, by tensor: data, weights, bias, out_grad, out, to_default.

    >>> import mxdeconv
    >>> mxdeconv.reset_reorder_counts()
    >>> sum(mxdeconv.reorder_counts().values())
    0
    """
    return _extension().reorder_counts()


def reset_reorder_counts() -> None:
    """Set every count of :func:`reorder_counts` back to zero.

    >>> import mxdeconv
    >>> mxdeconv.reset_reorder_counts()
    >>> mxdeconv.reorder_counts().get("to_default", 0)
    0
    """
    _extension().reset_reorder_counts()


def set_tuning(enabled: bool) -> bool:
    """Time each new layer's candidate plans on its later calls and keep the
    fastest correct one (True, the default), or keep oneDNN's first correct
    choice (False, as ``MXDECONV_TUNE=0`` does at import); returns the
    previous setting.  Either way a layer's first call runs the first correct
    plan right away.

    >>> import mxdeconv
    >>> previous = mxdeconv.set_tuning(False)
    >>> mxdeconv.tuning_enabled()
    False
    >>> _ = mxdeconv.set_tuning(previous)
    """
    return planner.set_tuning(enabled)


def finish_tuning() -> int:
    """Tune every layer pass that is still being tuned on its calls to the
    end, now, and return how many there were: for a server or a benchmark,
    run each layer once (forward, and backward if it trains), then call this
    before serving.  The tuned choices are kept on disk like any other.

    >>> import mxdeconv
    >>> mxdeconv.finish_tuning() >= 0
    True
    """
    return planner.finish_tuning()


def tuning_enabled() -> bool:
    """Whether new plans are tuned (see :func:`set_tuning`).

    >>> import mxdeconv
    >>> isinstance(mxdeconv.tuning_enabled(), bool)
    True
    """
    return planner.tuning()


def set_deterministic(enabled: bool) -> bool:
    """Deterministic mode (True; also ``MXDECONV_DETERMINISTIC=1`` at import):
    each layer pass runs the first plan, in oneDNN's order, that passes the
    kernel check before its first call, and keeps it for the process (no
    tuning, no provisional first call), so the same inputs give bitwise the
    same results on every call, thread and process of this machine at one
    thread count (docs/planner.rst says what it costs).  Returns the old value.

    >>> import mxdeconv
    >>> previous = mxdeconv.set_deterministic(True)
    >>> mxdeconv.deterministic_enabled(), mxdeconv.tuning_enabled()
    (True, False)
    >>> _ = mxdeconv.set_deterministic(previous)
    """
    return planner.set_deterministic(enabled)


def deterministic_enabled() -> bool:
    """Whether deterministic mode is on (see :func:`set_deterministic`).

    >>> import mxdeconv
    >>> isinstance(mxdeconv.deterministic_enabled(), bool)
    True
    """
    return planner.deterministic()


def plan_cache_path() -> Optional[str]:
    """The file that keeps tuned choices across processes
    (``$MXDECONV_CACHE_DIR/plans-v2.json``, ``~`` expanded, else the user's
    cache directory, as the environment says on the first call that needs it),
    or None when choices are kept in memory only: ``MXDECONV_CACHE_DIR`` set
    empty, no cache directory found (no home directory), or the file could not
    be read or written earlier in this process (which warned once).
    Delete the file to tune every layer again.

    >>> import mxdeconv
    >>> path = mxdeconv.plan_cache_path()
    >>> path is None or path.endswith(".json")
    True
    """
    return planner.store_path()


def buffer_pool_info() -> Dict[str, int]:
    """The pool of result buffers (>= 1 MiB, and <= 64 KiB): idle blocks and
    bytes (``idle_small_blocks`` of them small), the limit on idle bytes, and
    how many large allocations it served (reused) or left to the system
    (fresh).  Reusing a large block saves the page faults a fresh one costs on
    every call of a big layer; reusing a small one saves a malloc on every call
    of a small layer.

    >>> import mxdeconv
    >>> sorted(mxdeconv.buffer_pool_info())  # doctest: +NORMALIZE_WHITESPACE
    ['fresh', 'idle_blocks', 'idle_bytes', 'idle_small_blocks', 'limit_bytes',
     'min_block_bytes', 'reused', 'small_max_bytes']
    """
    return buffers.pool_info()


def set_buffer_pool_limit(limit: int) -> int:
    """Keep at most ``limit`` idle bytes of large buffers for reuse (default
    1 GiB, or ``MXDECONV_BUFFER_POOL_BYTES``; 0 turns pooling off); returns the
    previous limit.  Idle blocks over a lower limit are freed at once.

    >>> import mxdeconv
    >>> previous = mxdeconv.set_buffer_pool_limit(0)
    >>> mxdeconv.buffer_pool_info()["idle_bytes"]
    0
    >>> _ = mxdeconv.set_buffer_pool_limit(previous)
    """
    return buffers.set_pool_limit(limit)


def empty_buffer_pool() -> None:
    """Give every idle pooled block back to the system (as after a big model's
    last call); blocks still in use are untouched.

    >>> import mxdeconv
    >>> mxdeconv.empty_buffer_pool()
    >>> mxdeconv.buffer_pool_info()["idle_blocks"]
    0
    """
    buffers.empty_pool()
