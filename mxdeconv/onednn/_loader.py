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
import sys
from pathlib import Path
from typing import Any, Optional


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
            return Path(dist.locate_file(entry)).resolve()
    return None


def load_extension() -> Any:
    """Import and return ``mxdeconv._ops``; raise ImportError saying why not."""
    library = _installed_libdnnl()
    if library is not None and library.exists():
        ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    from . import _ops
    return _ops


#: The extension module, or None when it failed to load (``ERROR`` says why:
#: reported by runtime_info(), explain() and the support check).
ops: Any = None
ERROR: Optional[str] = None
try:
    ops = load_extension()
except ImportError as error:
    ERROR = f"the oneDNN extension failed to load: {error}"
