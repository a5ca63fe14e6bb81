"""Load the oneDNN extension, making libdnnl.so.3 findable first.

The extension is linked against ``libdnnl.so.3`` from the ``onednn-cpu-gomp``
wheel, which installs it under the environment's ``<prefix>/lib``.  A regular
install finds it through the extension's ``$ORIGIN``-relative rpath; an
editable install keeps the extension in the source tree, out of the rpath's
reach, so the library is loaded here by its installed path, globally, before
the extension asks for it by soname.  No environment variable is needed.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import Any, MutableMapping, Optional, Tuple

from .gemm_setup import GemmSetup


def _installed_libdnnl() -> Optional[Path]:
    """Where the onednn-cpu-gomp wheel put libdnnl.so.3: ``<prefix>/lib``, else
    wherever its RECORD says (a ``--user`` install, say).  Reading the RECORD
    costs about 20 ms of import (importlib.metadata), so the usual place goes first."""
    usual = Path(sys.prefix) / "lib" / "libdnnl.so.3"
    if usual.is_file():
        return usual
    from importlib import metadata
    try:
        dist = metadata.distribution("onednn-cpu-gomp")
    except metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == "libdnnl.so.3":
            return Path(str(dist.locate_file(entry))).resolve()
    return None


#: GNU OpenMP's spin count when the user chose no wait policy (GOMP_SPINCOUNT
#: and OMP_WAIT_POLICY both unset).  libgomp's own default spins a waiting
#: thread 300000 times at every barrier and between parallel regions before
#: it sleeps: on a machine where other processes hold the cores, those spins
#: take the CPU from the thread everybody waits for (DCGAN 512 -> 256's
#: training step ran 3.6x slower beside one busy process; MXNet 1.9x).
#: Sleeping at once (OMP_WAIT_POLICY=passive) costs a quiet machine up to
#: 1.5x on small calls (batch 1), where waking a sleeping thread is a large
#: part of a call.  10000 spins kept the best (idle-moment) steps of
#: libgomp's default at batch 1, and on a shared 2-core machine they were
#: 1.4-2.9x faster than it, 1.1x (batch 32) to 2x (batch 1) passive's time;
#: 100000 kept much of the slowdown (docs/performance.rst, "Under load";
#: benchmarks/contended.py).  No idle machine was available to measure.
SPINCOUNT = "10000"
_WAIT_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def _gomp_loaded() -> Optional[bool]:
    """Whether GNU OpenMP is already in this process (None: unknown)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return b"libgomp" in maps.read()
    except OSError:
        return None


def _wait_policy(environ: MutableMapping[str, str]) -> Tuple[str, bool]:
    """(what GNU OpenMP's wait policy will be, in words; whether to set
    GOMP_SPINCOUNT for the load).  libgomp reads the variables once, when it
    is loaded: the first load in the process decides."""
    chosen = [f"{name}={environ[name]}" for name in _WAIT_VARIABLES if environ.get(name)]
    if chosen:
        return ", ".join(chosen) + " (the environment)", False
    if _gomp_loaded():
        return ("GNU OpenMP's default (it was loaded before mxdeconv: set GOMP_SPINCOUNT "
                "before the first import that loads it)"), False
    return f"GOMP_SPINCOUNT={SPINCOUNT} (mxdeconv's default)", True


def load_extension(environ: MutableMapping[str, str] = os.environ) -> Any:
    """Import and return ``mxdeconv._ops``; raise ImportError saying why not.
    Sets ``OPENMP_WAIT``."""
    global OPENMP_WAIT
    OPENMP_WAIT, set_spincount = _wait_policy(environ)
    if set_spincount:
        # Only for the load (libgomp's constructor reads it): child processes
        # keep the environment the user gave them.
        environ["GOMP_SPINCOUNT"] = SPINCOUNT
    try:
        library = _installed_libdnnl()
        if library is not None and library.exists():
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        from . import _ops
    finally:
        if set_spincount and environ.get("GOMP_SPINCOUNT") == SPINCOUNT:
            del environ["GOMP_SPINCOUNT"]
    return _ops


#: The extension module (``onednn._ops``), or None when it failed to load
#: (``ERROR`` says why: reported by runtime_info(), explain() and the support
#: check).
extension: Any = None
ERROR: Optional[str] = None
#: GNU OpenMP's wait policy in this process, in words (runtime_info()).
OPENMP_WAIT = "unknown"
#: The thread that makes oneDNN's GEMM kernels on an idle core (gemm_setup).
GEMM_SETUP: Optional[GemmSetup] = None
try:
    extension = load_extension()
except ImportError as error:
    ERROR = f"the oneDNN extension failed to load: {error}"
else:
    GEMM_SETUP = GemmSetup(extension.set_gemm_up)
    GEMM_SETUP.start(extension.get_num_threads())
