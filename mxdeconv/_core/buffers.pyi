"""Type stubs for the compiled allocator and buffer pool (``mxdeconv/buffers.pyx``)."""
from typing import Any, Dict, Sequence

import numpy as np

#: Bytes: one cache line, one AVX-512 register.
ALIGNMENT: int
#: This machine's physical memory in bytes (``1 << 62`` where unknown).
PHYSICAL_MEMORY: int
#: Blocks from this many bytes on are pooled for reuse.
POOL_MIN_BYTES: int
#: Blocks up to this many bytes are pooled too, SMALL_IDLE_PER_SIZE of each size.
SMALL_MAX_BYTES: int
SMALL_IDLE_PER_SIZE: int
#: The default limit on idle pooled bytes (``MXDECONV_BUFFER_POOL_BYTES``).
DEFAULT_POOL_BYTES: int


class PooledBlock:
    """Owns one pooled block; freed, it goes back to the pool."""


def check_fits(what: str, nbytes: int) -> None: ...
def pool_info() -> Dict[str, int]: ...
def set_pool_limit(limit: int) -> int: ...
def empty_pool() -> None: ...
def aligned_bytes(nbytes: int) -> np.ndarray: ...
def aligned_empty(shape: Sequence[int], dtype: Any) -> np.ndarray: ...
