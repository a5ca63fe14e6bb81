"""Writing a file so that readers see the old one or the new one, never half."""
from __future__ import annotations

import os
import tempfile
import uuid
from typing import Iterable

__all__ = ["replace_atomically"]


def replace_atomically(path: str, chunks: Iterable[bytes], prefix: str = "",
                       suffix: str = ".tmp", private: bool = False) -> None:
    """Write ``chunks`` to a new file beside ``path`` (named ``prefix``, random
    letters, ``suffix``), flush it to the disk, then rename it over ``path``:
    a reader sees the old file or the new one, and a failure (raised as it
    came) leaves ``path`` as it was and no temporary behind.

    ``private``: the file is created mode 0600 (the plan cache: trusted only
    when no one else can have written it); otherwise 0666 less the umask, as
    ``open(path, "wb")`` would create it."""
    folder, base = os.path.split(os.path.abspath(path))
    if private:
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    else:
        temporary = os.path.join(folder, f"{prefix or '.' + base + '.'}{uuid.uuid4().hex[:12]}"
                                         f"{suffix}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            for chunk in chunks:
                stream.write(chunk)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
