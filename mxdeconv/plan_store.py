"""Tuned plan choices kept on disk, so a layer is tuned once per machine.

One JSON file in the user's cache directory (``platformdirs``), or in
``$MXDECONV_CACHE_DIR`` (an empty value keeps choices in memory only).  Entries
are keyed by oneDNN version, ISA, thread count, pass, dtype, mode and
geometry, so a new library or CPU never reads an old choice.  Writers merge
under a lock file (``filelock``) and replace the file atomically, so concurrent
processes never corrupt it; a file that cannot be read or parsed is ignored
with one warning, never a crash.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, Optional

import filelock
import platformdirs

ENV = "MXDECONV_CACHE_DIR"
#: 2: candidates timed on written memory (format 1 timed them on untouched,
#: zero-mapped pages, which favoured plans that read big inputs).
FORMAT = 2
#: Entries kept at most (the oldest go first): a bound, not a working limit.
MAX_ENTRIES = 20000
_LOCK_SECONDS = 10.0


def default_path() -> Optional[Path]:
    """The file in use: ``$MXDECONV_CACHE_DIR/plans.json``, else the user cache."""
    directory = os.environ.get(ENV)
    if directory is None:
        directory = platformdirs.user_cache_dir("mxdeconv", appauthor=False)
    elif not directory.strip():
        return None
    return Path(directory) / f"plans-v{FORMAT}.json"


class PlanStore:
    """The on-disk map of tuned choices, read once per process, merged on write."""

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path
        self._entries: Optional[Dict[str, Dict[str, Any]]] = None
        self._lock = threading.Lock()
        self._warned = False

    def _warn(self, what: str, error: BaseException) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"mxdeconv plan cache {self.path}: {what} ({type(error).__name__}: "
                          f"{error}); layers are tuned again and kept in memory",
                          RuntimeWarning, stacklevel=4)

    def _read(self) -> Dict[str, Dict[str, Any]]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(document, dict) or document.get("format") != FORMAT:
                raise ValueError(f"not a format-{FORMAT} plan cache")
            entries = document["entries"]
            if not isinstance(entries, dict) or not all(
                    isinstance(k, str) and isinstance(v, dict) for k, v in entries.items()):
                raise ValueError("malformed entries")
            return entries
        except (OSError, ValueError, KeyError, UnicodeDecodeError) as error:
            self._warn("ignored a file that cannot be read", error)
            return {}

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        with self._lock:
            if self._entries is None:
                self._entries = self._read()
            return self._entries.get(key)

    def put(self, key: str, entry: Dict[str, Any]) -> None:
        with self._lock:
            if self._entries is None:
                self._entries = self._read()
            self._entries[key] = entry
            if self.path is None:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with filelock.FileLock(str(self.path) + ".lock", timeout=_LOCK_SECONDS):
                    merged = self._read()      # what other processes wrote meanwhile
                    merged[key] = entry
                    while len(merged) > MAX_ENTRIES:
                        merged.pop(next(iter(merged)))
                    handle, temporary = tempfile.mkstemp(dir=self.path.parent,
                                                         prefix=".plans-", suffix=".json")
                    try:
                        with os.fdopen(handle, "w", encoding="utf-8") as stream:
                            json.dump({"format": FORMAT, "entries": merged}, stream)
                        os.replace(temporary, self.path)
                    finally:
                        if os.path.exists(temporary):
                            os.unlink(temporary)
                    self._entries = merged
            except (OSError, filelock.Timeout) as error:
                self._warn("could not be written", error)

    def clear(self) -> None:
        """Forget what was read (the next get reads the file again)."""
        with self._lock:
            self._entries = None
