"""Tuned plan choices kept on disk, so a layer is tuned once per machine.

One JSON file in the user's cache directory (``platformdirs``), or in
``$MXDECONV_CACHE_DIR`` (``~`` expanded; an empty value keeps choices in
memory only), located on first use, not at import.  Entries are keyed by
oneDNN version, ISA, thread count, pass, dtype, mode and geometry, so a new
library or CPU never reads an old choice.  Writers merge under a lock file
(``filelock``) and replace the file atomically, so concurrent processes never
corrupt it.

Whose verdicts are trusted (docs/reliability.rst, "The plan cache's trust
model"): an entry's ``verdict`` (the kernel check's, naming what it was
checked on) is taken as it is only when the entry was read from a file that
nobody but this user (or root) can have written, or was put by this process;
every other entry is *unvouched*: the planner checks its plan again before
use, and a writer strips the verdict of every unvouched entry it carries into
a new file, so no verdict is laundered from a file others can write into one
they cannot.

The file is untrusted input: only a regular file of at most
:data:`MAX_BYTES` is read (a FIFO or a device is refused without blocking);
a file that does not parse as a format-2 plan cache is ignored and replaced on
the next write.  Any failure to locate, read or write the file (or a lock held
past :data:`LOCK_SECONDS`) leaves the process on choices kept in memory, with
one warning: never a crash, a hang or a failing call.  This module checks the
document's shape; the planner checks every field of an entry before use.
"""
from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import stat
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Set, Tuple, Union

from mxdeconv._core.files import replace_atomically


ENV = "MXDECONV_CACHE_DIR"
#: The file's format, in its name (plans-v2.json); its history: docs/changelog.rst.
FORMAT = 2
#: Entries kept at most (the oldest go first): a bound, not a working limit
#: (a layer takes a few: one per pass and mode), which also bounds how long a
#: writer holds the lock (each write re-reads and rewrites the whole file:
#: about 0.3 s at 5,000 real entries of about 2 KB).
MAX_ENTRIES = 5000
#: The largest file read (and written): a bound on the memory and time a
#: hostile file can cost, far above MAX_ENTRIES real entries (about 1-3 KB each).
MAX_BYTES = 64 << 20
#: How long a writer waits for another process's lock before it gives up
#: writing for the rest of the process: well above a full cache's write, so
#: only a stuck holder costs it, once.
LOCK_SECONDS = 5.0
#: Temporary files of this format's writers: created only under the lock, so
#: one found while holding the lock was left by a killed writer.
_TEMPORARY_PREFIX, _TEMPORARY_SUFFIX = f".plans-v{FORMAT}-", ".json"
#: Opening never waits (a FIFO without a writer) nor adopts a terminal.
_OPEN_FLAGS = (getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0))

#: The field of an entry that holds the kernel check's verdict: written only
#: for entries this process can vouch for (see the module's docstring).
VERDICT = "verdict"

Entries = Dict[str, Dict[str, Any]]
Where = Union[Path, str, None, Callable[[], Optional[Path]]]


class _Unusable(Exception):
    """The file (or its lock) cannot serve as the plan cache: memory only."""


def default_path() -> Optional[Path]:
    """The file to use: ``$MXDECONV_CACHE_DIR/plans-v2.json`` (``~`` expanded,
    relative to the current directory), else in the user cache directory;
    None when ``MXDECONV_CACHE_DIR`` is set empty.  Raises what platformdirs
    raises when it cannot find a home directory, and ValueError when ``~``
    cannot be expanded."""
    directory = os.environ.get(ENV)
    if directory is None:
        import platformdirs   # here, not at import: about 10 ms, for a cache not yet used
        directory = platformdirs.user_cache_dir("mxdeconv", appauthor=False)
    elif not directory.strip():
        return None
    expanded = os.path.expanduser(directory)
    if expanded.startswith("~"):  # no home directory: never a folder named '~'
        raise ValueError(f"cannot expand {directory!r}: no such home directory")
    return Path(os.path.abspath(expanded)) / f"plans-v{FORMAT}.json"


def _me() -> Optional[int]:
    """This process's effective user id (None where there are no owners:
    then no file is private)."""
    geteuid = getattr(os, "geteuid", None)
    return None if geteuid is None else geteuid()


def _owned_by_me_or_root(info: os.stat_result) -> bool:
    return info.st_uid in (0, _me())


def _private(info: os.stat_result) -> bool:
    """Owned by this user, writable by nobody else, and one name only (another
    hard link could sit in a folder others can write)."""
    return (info.st_uid == _me() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            and info.st_nlink == 1)


def _safe_folders(folder: str) -> bool:
    """Whether nobody but this user (or root) can rename or replace anything
    in ``folder`` and its ancestors, as OpenSSH's StrictModes asks of a key's
    path: ``folder`` itself is this user's and writable by nobody else; each
    ancestor is this user's or root's and writable by nobody else, or sticky
    (/tmp: others cannot rename what they do not own there)."""
    try:
        info = os.stat(folder)
    except OSError:
        return False
    if not (info.st_uid == _me() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        return False
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return True
        folder = parent
        try:
            info = os.stat(folder)
        except OSError:
            return False
        if not _owned_by_me_or_root(info):
            return False
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return False


def _read_bounded(path: Path) -> Optional[Tuple[bytes, bool]]:
    """The bytes of ``path`` and whether only this user can have written them;
    None when there is no such file.  Raises _Unusable for anything but a
    regular file of at most MAX_BYTES, OSError when it cannot be opened or read.

    Private means: the file, found through its real path (links resolved),
    is this user's, writable by nobody else and has one name; its folder and
    every folder above it pass :func:`_safe_folders`; and after those checks
    the real path still names the file that was opened (nothing replaced it
    in between).  O_NONBLOCK: opening a FIFO never waits for a writer (it is
    then refused by its type)."""
    real = os.path.realpath(path)
    try:
        descriptor = os.open(real, os.O_RDONLY | _OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None  # nothing kept yet
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise _Unusable("not a regular file")
        if info.st_size > MAX_BYTES:
            raise _Unusable(f"larger than {MAX_BYTES} bytes")
        private = _me() is not None and _private(info) and _safe_folders(os.path.dirname(real)) \
            and _same_file(real, info)
        chunks, size = [], 0
        while size <= MAX_BYTES:  # st_size can lie (procfs) or grow meanwhile
            chunk = os.read(descriptor, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            raise _Unusable(f"larger than {MAX_BYTES} bytes")
        return b"".join(chunks), private
    finally:
        os.close(descriptor)


def _same_file(path: str, info: os.stat_result) -> bool:
    try:
        now = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino)


def _parse(data: bytes) -> Entries:
    """The entries of a format-2 document; ValueError when it is not one.
    The bytes are untrusted: every error the parser can raise on them
    (deep nesting, huge numbers, bad encodings, memory) is a ValueError."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError, MemoryError) as error:
        raise ValueError(f"not JSON ({type(error).__name__}: {error})"[:300]) from None
    if not isinstance(document, dict) or type(document.get("format")) is not int \
            or document["format"] != FORMAT:
        raise ValueError(f"not a format-{FORMAT} plan cache")
    entries = document.get("entries")
    if not isinstance(entries, dict) or not all(
            isinstance(key, str) and isinstance(value, dict) for key, value in entries.items()):
        raise ValueError("malformed entries")
    return entries


def _unvouched(entry: Dict[str, Any]) -> Dict[str, Any]:
    """``entry`` without a verdict: what a writer keeps of an entry it cannot
    vouch for (its plan is checked again by whoever uses it)."""
    if VERDICT not in entry:
        return entry
    return {field: value for field, value in entry.items() if field != VERDICT}


def trimmed(entries: Entries, limit: int) -> Entries:
    """The newest ``limit`` entries (insertion order), in linear time."""
    excess = len(entries) - limit
    if excess <= 0:
        return entries
    return dict(itertools.islice(entries.items(), excess, None))


def _serialized(entries: Entries, limit_bytes: int = MAX_BYTES) -> str:
    """The document of ``entries``, the oldest dropped while it exceeds
    ``limit_bytes`` (a reader refuses a larger file)."""
    text = _document(entries)
    if len(text) <= limit_bytes:  # ASCII (ensure_ascii): characters are bytes
        return text
    # Rare (entries far larger than the planner writes): keep the newest that fit.
    budget, keep = limit_bytes - len(_document({})), 0
    for key, value in reversed(entries.items()):
        budget -= len(_document_entry(key, value))
        if budget < 0:
            break
        keep += 1
    return _document(trimmed(entries, keep))


def _document(entries: Entries) -> str:
    return json.dumps({"format": FORMAT, "entries": entries}, separators=(",", ":"))


def _document_entry(key: str, value: Dict[str, Any]) -> str:
    """An entry as it appears in the document, with its separating comma."""
    return json.dumps({key: value}, separators=(",", ":"))[1:-1] + ","


#: Earlier versions' writers of this format (same lock file) named their
#: temporary files ``.plans-XXXXXXXX.json``: mkstemp's random letters, digits
#: and underscores, never a '-' (another format's ``.plans-vN-...`` has one).
_LEGACY_TEMPORARY = re.compile(r"\.plans-[A-Za-z0-9_]+\.json")


def _remove_stale_temporaries(directory: Path) -> None:
    """Delete this format's temporary files, also those earlier versions left:
    call only while holding the lock (no writer of this format is mid-write)."""
    stale = list(directory.glob(f"{_TEMPORARY_PREFIX}*{_TEMPORARY_SUFFIX}"))
    stale += [found for found in directory.glob(".plans-*.json")
              if _LEGACY_TEMPORARY.fullmatch(found.name)]
    for path in stale:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _check_lock_file(path: Path) -> None:
    """Open (or create) the lock file once: filelock retries a lock file it
    cannot open until its timeout, and a directory such as /proc/self never
    lets it."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _Unusable("the lock file is not a regular file")
    finally:
        os.close(descriptor)


class PlanStore:
    """The on-disk map of tuned choices, read once per process, merged on write.

    ``path`` may be the file, None (memory only) or a function returning
    either (such as :func:`default_path`), called on first use; a function
    that raises leaves the store in memory, with one warning.
    """

    def __init__(self, path: Where) -> None:
        self._where = path
        self._path: Optional[Path] = None
        self._located = False
        self._entries: Optional[Entries] = None
        self._lock = threading.Lock()
        self._warned = False
        self._on_disk = True  # False after a failure: memory only from then on
        self._vouched: Set[str] = set()  # keys whose entries' verdicts are trusted
        self._deferred: Entries = {}  # put with defer=True, not yet written
        self._at_exit = False

    @property
    def path(self) -> Optional[Path]:
        """The file read and written, None when kept in memory only."""
        with self._lock:
            return self._file()

    def _warn(self, what: str, error: BaseException,
               then: str = "layers are tuned again and kept in memory") -> None:
        """One warning per process; never an error (``-W error`` turns warnings
        into exceptions, and a cache that cannot be used must not fail a call)."""
        if not self._warned:
            self._warned = True
            where = "" if self._path is None else f" {self._path}"
            why = error if isinstance(error, _Unusable) else f"{type(error).__name__}: {error}"
            try:
                warnings.warn(f"mxdeconv plan cache{where}: {what} ({why}); {then}",
                              RuntimeWarning, stacklevel=5)
            except Exception:  # noqa: BLE001 - a warning filter set to "error"
                pass

    def _file(self) -> Optional[Path]:
        """The file, located on the first call (under self._lock)."""
        if not self._located:
            self._located = True
            try:
                where = self._where() if callable(self._where) else self._where
                self._path = None if where is None else Path(where)
            except Exception as error:  # noqa: BLE001 - never fail a call
                # platformdirs or ~ without a home directory, say.
                self._warn("no cache directory", error)
        return self._path if self._on_disk else None

    def _give_up(self, what: str, error: BaseException) -> None:
        self._on_disk = False
        self._warn(what, error)

    def _read(self, path: Path) -> Tuple[Entries, bool]:
        """What the file holds ({} when absent or invalid: then replaced on the
        next write), and whether only this user can have written it; raises
        _Unusable or OSError when it cannot be read."""
        read = _read_bounded(path)
        if read is None:
            return {}, False
        data, private = read
        try:
            return _parse(data), private
        except ValueError as error:
            self._warn("ignored a file that is not a valid plan cache", error,
                       "layers are tuned again, and the file is replaced on the next write")
            return {}, False

    def _loaded(self) -> Entries:
        """The entries of this process, read from the file on first use."""
        if self._entries is None:
            self._entries, self._vouched = {}, set()
            path = self._file()
            if path is not None:
                try:
                    self._entries, private = self._read(path)
                except Exception as error:  # noqa: BLE001 - never fail a call
                    self._give_up("cannot be read", error)
                else:
                    self._vouched = set(self._entries) if private else set()
        return self._entries

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        """The entry kept for ``key``, None if none (unchecked: untrusted)."""
        with self._lock:
            return self._loaded().get(key)

    def vouched(self, key: str) -> bool:
        """Whether the verdict of ``key``'s entry can be taken as it is: the entry
        was read from a file only this user can have written (this user's, with
        one name, writable by nobody else, in folders nobody else can change),
        or put by this process.  Any other entry's plan must be checked again."""
        with self._lock:
            self._loaded()
            return key in self._vouched

    def put(self, key: str, entry: Dict[str, Any], defer: bool = False) -> None:
        """Keep ``entry`` (this process's own verdict: vouched for) in memory
        and, unless an earlier failure stopped it, merge it into the file: now,
        or with ``defer`` at the next write or at exit (one write for many
        entries: each write takes the lock, rewrites the file and flushes it
        to the disk)."""
        with self._lock:
            self._loaded()[key] = entry
            self._vouched.add(key)
            self._deferred[key] = entry
            if defer:
                if not self._at_exit:
                    self._at_exit = True
                    atexit.register(self.flush)
                return
            self._flush()

    def flush(self) -> None:
        """Write the deferred entries now."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        entries, self._deferred = self._deferred, {}
        path = self._file()
        if path is None or not entries:
            return
        try:
            self._entries = self._write(path, entries)
        except Exception as error:  # noqa: BLE001 - never fail a call
            # OSError, filelock.Timeout, _Unusable; NotImplementedError
            # where the file system has no flock (filelock 3.x), ...
            self._give_up("could not be written", error)

    def _write(self, path: Path, entries: Entries) -> Entries:
        """Merge ``entries`` (this process's) into what the file holds now,
        under the lock; the result.  An entry of the file that this process
        cannot vouch for keeps its place but loses its verdict."""
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = path.with_name(path.name + ".lock")
        _check_lock_file(lock_path)
        import filelock   # here, not at import: most processes never write
        with filelock.FileLock(str(lock_path), timeout=LOCK_SECONDS):
            _remove_stale_temporaries(path.parent)
            merged, private = self._read(path)  # what other processes wrote meanwhile
            known = self._entries or {}
            # Entries of the file that this process vouches for: all of a
            # private file's; of any other, those that are what it vouched for.
            vouched = set(merged) if private else {
                key for key, entry in merged.items()
                if key in self._vouched and known.get(key) == entry}
            for key, entry in entries.items():
                merged.pop(key, None)      # re-inserted last: the newest entries
                merged[key] = entry
                vouched.add(key)
            merged = {key: entry if key in vouched else _unvouched(entry)
                      for key, entry in trimmed(merged, MAX_ENTRIES).items()}
            replace_atomically(str(path), [_serialized(merged).encode("utf-8")],
                               _TEMPORARY_PREFIX, _TEMPORARY_SUFFIX, private=True)
        self._vouched = vouched & set(merged)
        return merged

    def clear(self) -> None:
        """Forget what was read (the next get reads the file again)."""
        with self._lock:
            self._entries = None
            self._vouched = set()
