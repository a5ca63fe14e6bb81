"""NumPy's BLAS on one thread while a check's reference computes.

NumPy's OpenBLAS keeps its threads spinning after a call, as OpenMP keeps
oneDNN's: on a machine with as many cores as oneDNN's team, the two pools
took turns, and a generator's first training step (nine checks between
oneDNN calls) took twice as long.  One BLAS thread computes a check's
reference in a few milliseconds.  The limit is process-wide while it lasts,
as threadpoolctl's is.

OpenBLAS is found among the libraries the process has loaded (its
``*_set_num_threads`` entry points, by ctypes: well under a millisecond);
threadpoolctl (about 5-15 ms to scan the process on first use) is the
fallback for any other BLAS.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Any, Callable, ContextManager, Iterator, List, Optional, Tuple

#: OpenBLAS's thread-count entry points, as NumPy's wheels (scipy-openblas,
#: 64-bit integers) and other builds name them.
_NAMES = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
          ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
          ("openblas_get_num_threads", "openblas_set_num_threads"))

Control = Tuple[Callable[[], int], Callable[[int], None]]
_found: List[Any] = []  # [control or threadpoolctl controller or None], on first use


def _loaded_openblas() -> Optional[Control]:
    """(get, set) of an OpenBLAS this process has loaded, or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps
                     if "openblas" in line.lower() and len(line.split(None, 5)) == 6}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            # RTLD_NOLOAD: only a library already loaded (by NumPy), never a new one.
            library = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_LAZY)
        except OSError:
            continue
        for get_name, set_name in _NAMES:
            get, set_ = getattr(library, get_name, None), getattr(library, set_name, None)
            if get is not None and set_ is not None:
                get.restype, get.argtypes = ctypes.c_int, []
                set_.restype, set_.argtypes = None, [ctypes.c_int]
                return get, set_
    return None


def _control() -> Any:
    if not _found:
        control: Any = _loaded_openblas()
        if control is None:
            try:
                import threadpoolctl  # here, not at import
                control = threadpoolctl.ThreadpoolController()
            except Exception:  # noqa: BLE001 - only slower without it, never wrong
                control = None
        _found.append(control)
    return _found[0]


@contextlib.contextmanager
def _openblas_limit(control: Control) -> Iterator[None]:
    get, set_ = control
    previous = get()
    set_(1)
    try:
        yield
    finally:
        set_(previous)


def one_blas_thread() -> ContextManager[Any]:
    """NumPy's BLAS limited to one thread while the context lasts."""
    control = _control()
    if control is None:
        return contextlib.nullcontext()
    if isinstance(control, tuple):
        return _openblas_limit(control)
    return control.limit(limits=1, user_api="blas")
