# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True
"""The oneDNN path: the only module of mxdeconv that calls oneDNN.

It describes deconvolutions to oneDNN (one descriptor helper), enumerates the
candidate implementations and layouts oneDNN offers for a geometry (the
planner (``onednn.planner``) checks each before use), runs the chosen primitives
with the GIL released, and moves arrays between the default layout and the
layouts primitives prefer.

Every oneDNN handle lives in a small owning class (``MemoryDesc``,
``PrimitiveDesc``, ``Attr``, ``Primitive``) whose ``__dealloc__`` frees it,
and every oneDNN status is checked: a refusal raises ``MXNetError`` naming
oneDNN's status.
"""
import dataclasses
import heapq
import math
import os
import threading
import warnings

import numpy as np
cimport numpy as cnp
from cpython.object cimport PyObject
from cython.parallel cimport prange
from libc.string cimport memcmp, memcpy, memset
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from ._dnnl cimport *
from mxdeconv._core.args import int_arg
from mxdeconv._core.cpus import usable_cpus
from mxdeconv._core.env import env_int, env_word
from mxdeconv.onednn import cpu_load as _cpu_load
from mxdeconv._core.errors import MXNetError, OneDNNMemoryError
from mxdeconv.semantics.subgrid import subgrid_of
from mxdeconv._core.buffers cimport aligned_array, aligned_bytes

cnp.import_array()


# ----------------------------------------------------------------------------
# Status checks, engine
# ----------------------------------------------------------------------------
cdef inline int check(dnnl_status_t status, what) except -1:
    """Raise for a failed status: OneDNNMemoryError (a MemoryError) when oneDNN
    ran out of memory, MXNetError for any other refusal."""
    if status == dnnl_success:
        return 0
    message = f"oneDNN {what} failed: {dnnl_status2str(status).decode()}"
    if status == dnnl_out_of_memory:
        raise OneDNNMemoryError(message)
    raise MXNetError(message)


cdef dnnl_engine_t _engine = NULL


cdef dnnl_engine_t engine() except NULL:
    global _engine
    if _engine == NULL:
        check(dnnl_engine_create(&_engine, dnnl_cpu, 0), "engine creation")
    return _engine


# The rest of the module, one section a file: textual includes, so still one
# module, in dependency order (a file's cdef names come from itself, the files
# above it, or _ops.pxd).
include "_lru.pxi"
include "_runtime.pxi"
include "_info.pxi"
include "_memory.pxi"
include "_handles.pxi"
include "_cache.pxi"
include "_reorder.pxi"
include "_descriptors.pxi"
include "_bias_loops.pxi"
include "_gemm.pxi"
include "_plans.pxi"
include "_subgrid.pxi"
include "_timing.pxi"
