"""How many CPUs this process can really run on: its affinity mask and its
cgroup's CPU quota, whichever is smaller.

GNU OpenMP sizes its default team from the affinity mask only: in a container
limited to one CPU by a quota (``docker run --cpus 1``, Kubernetes' CPU
limits) on a 16-core host it starts 16 threads, which the kernel then
throttles in turns, and every barrier waits for a thread that has used up the
period's quota.  This module reads what a container runtime sets, as joblib's
``loky.cpu_count()`` and Go's container-aware ``GOMAXPROCS`` do:

* cgroup v2 (``cgroup2`` mount): ``cpu.max`` ("max 100000" or "150000 100000")
  in the process's cgroup and each ancestor up to the mount's root;
* cgroup v1 (``cgroup`` mount with the ``cpu`` controller):
  ``cpu.cfs_quota_us`` (-1: none) over ``cpu.cfs_period_us``, likewise.

The quota is the smallest ratio over all those levels, rounded up, at least
1.  The process's cgroups come from ``/proc/self/cgroup``, their mounts from
``/proc/self/mountinfo``.  Anything unreadable or malformed counts as no
limit at that place (never an exception: this runs inside ``import
mxdeconv``).  Linux only; elsewhere ``os.cpu_count()`` is the answer.

The file-system roots are arguments, so that tests build a fake tree in a
temporary folder.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

__all__ = ["CpuLimits", "UsableCpus", "usable_cpus"]

#: Bounds on what is read: a cgroup file is a line; a mountinfo of a busy
#: host can run to thousands of mounts, and a hostile one is not our business.
_MAX_FILE_BYTES = 1 << 20
#: How many ancestors a walk climbs at most (a cycle cannot happen on a real
#: tree; the bound makes a fake or corrupt one harmless).
_MAX_DEPTH = 64


@dataclass(frozen=True)
class UsableCpus:
    """A CPU count and where it came from, in words for ``runtime_info()``,
    and the affinity mask read on the way (None: not read)."""

    count: int
    source: str
    mask: Optional[FrozenSet[int]] = field(default=None, compare=False)


@dataclass(frozen=True)
class _Mount:
    root: str          # the mount's root inside the cgroup hierarchy
    point: str         # where it is mounted
    version: int       # 1 or 2


def _read_text(path: Path) -> Optional[str]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_FILE_BYTES)
        return data.decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
            continue
        out.append(field[i])
        i += 1
    return "".join(out)


class CpuLimits:
    """Reads the limits of one process.

    ``proc`` is the process's ``/proc/<pid>`` folder (``/proc/self``); ``root``
    is prefixed to every mount point read from its mountinfo (``/`` on a real
    system, the fake tree's folder in tests); ``affinity`` is the affinity
    mask's CPU count, None to ask the system.
    """

    def __init__(self, proc: os.PathLike = Path("/proc/self"),
                 root: os.PathLike = Path("/"), affinity: Optional[int] = None) -> None:
        self.proc = Path(proc)
        self.root = Path(root)
        self._affinity = affinity

    # -- the affinity mask --------------------------------------------------
    def affinity(self) -> Tuple[int, str, Optional[FrozenSet[int]]]:
        """The affinity mask's count, its source, and the mask (None when the
        count is a test's or the system has no mask)."""
        if self._affinity is not None:
            return max(1, int(self._affinity)), "affinity mask", None
        getaffinity = getattr(os, "sched_getaffinity", None)
        if getaffinity is not None:
            try:
                mask = frozenset(getaffinity(0))
                return max(1, len(mask)), "affinity mask", mask
            except OSError:
                pass
        return max(1, os.cpu_count() or 1), "os.cpu_count()", None

    # -- the cgroup quota ---------------------------------------------------
    def _cgroups(self) -> Tuple[Optional[str], Optional[str]]:
        """The process's v2 cgroup path and its v1 ``cpu`` controller's path."""
        text = _read_text(self.proc / "cgroup")
        v2 = v1 = None
        for line in (text or "").splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3 or not parts[2].startswith("/"):
                continue
            hierarchy, controllers, path = parts
            if hierarchy == "0" and controllers == "":
                v2 = path
            elif "cpu" in controllers.split(","):
                v1 = path
        return v2, v1

    def _mounts(self) -> Dict[int, List[_Mount]]:
        """The cgroup mounts, by version (v1: only those with ``cpu``)."""
        found: Dict[int, List[_Mount]] = {1: [], 2: []}
        text = _read_text(self.proc / "mountinfo")
        for line in (text or "").splitlines():
            fields = line.split()
            try:
                dash = fields.index("-")
                root, point = _unescape(fields[3]), _unescape(fields[4])
                fstype, options = fields[dash + 1], fields[dash + 3]
            except (ValueError, IndexError):
                continue
            if fstype == "cgroup2":
                found[2].append(_Mount(root, point, 2))
            elif fstype == "cgroup" and "cpu" in options.split(","):
                found[1].append(_Mount(root, point, 1))
        return found

    def _directory(self, mount: _Mount, cgroup: str) -> Optional[Tuple[Path, Path]]:
        """(the process's cgroup folder, the mount's folder) on this mount.

        The path in /proc/self/cgroup is relative to the cgroup namespace's
        root; the mount's root field says which part of the hierarchy is
        mounted.  Where the mount's root is not an ancestor of the path (a
        container whose namespace hides it: root ``/..``), the mount point
        itself is the nearest cgroup the process can see.
        """
        top = self.root / mount.point.lstrip("/")
        cg = PurePosixPath(cgroup)
        mroot = PurePosixPath(mount.root)
        if mroot == PurePosixPath("/"):
            rel = cg.relative_to("/")
        elif cg == mroot or mroot in cg.parents:
            rel = cg.relative_to(mroot)
        else:
            return top, top
        if ".." in rel.parts:
            return top, top
        return top / rel, top

    @staticmethod
    def _ratio(folder: Path, version: int) -> Optional[Tuple[float, str]]:
        """quota/period at one level (None: no limit or unreadable)."""
        if version == 2:
            text = _read_text(folder / "cpu.max")
            if text is None:
                return None
            fields = text.split()
            if not fields or fields[0] == "max":
                return None
            try:
                quota = int(fields[0])
                period = int(fields[1]) if len(fields) > 1 else 100000
            except ValueError:
                return None
            words = f"cgroup v2 cpu.max {quota} {period}"
        else:
            quota_text = _read_text(folder / "cpu.cfs_quota_us")
            period_text = _read_text(folder / "cpu.cfs_period_us")
            if quota_text is None or period_text is None:
                return None
            try:
                quota, period = int(quota_text.strip()), int(period_text.strip())
            except ValueError:
                return None
            words = f"cgroup v1 cpu.cfs_quota_us/cpu.cfs_period_us {quota}/{period}"
        if quota <= 0 or period <= 0:   # -1 is "no limit"; 0 is not a valid quota
            return None
        return quota / period, f"{words} in {folder}"

    def _walk(self, start: Path, top: Path) -> Iterator[Path]:
        folder = start
        for _ in range(_MAX_DEPTH):
            yield folder
            if folder == top or top not in folder.parents:
                return
            folder = folder.parent

    def quota(self) -> Optional[Tuple[int, str]]:
        """The cgroup CPU quota as a CPU count and its source, None when none."""
        try:
            return self._quota()
        except Exception:   # noqa: BLE001 -- a strange system must not break the import
            return None

    def _quota(self) -> Optional[Tuple[int, str]]:
        v2, v1 = self._cgroups()
        mounts = self._mounts()
        best: Optional[Tuple[float, str]] = None
        for version, cgroup in ((2, v2), (1, v1)):
            if cgroup is None:
                continue
            for mount in mounts[version]:
                places = self._directory(mount, cgroup)
                if places is None:
                    continue
                for folder in self._walk(*places):
                    ratio = self._ratio(folder, version)
                    if ratio is not None and (best is None or ratio[0] < best[0]):
                        best = ratio
        if best is None:
            return None
        return max(1, math.ceil(best[0])), best[1]

    # -- both ---------------------------------------------------------------
    def usable(self) -> UsableCpus:
        """min(affinity mask, cgroup quota), saying which one decided."""
        count, what, mask = self.affinity()
        quota = self.quota()
        if quota is not None and quota[0] < count:
            return UsableCpus(quota[0], f"cgroup CPU quota ({quota[1]}; "
                                        f"{what}: {count} CPUs)", mask)
        return UsableCpus(count, f"{what} ({count} CPU{'s' if count != 1 else ''})", mask)


def usable_cpus() -> UsableCpus:
    """The CPUs this process can really run on (see the module's docstring)."""
    return CpuLimits().usable()
