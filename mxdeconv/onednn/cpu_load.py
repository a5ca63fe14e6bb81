"""How much of the CPUs other processes took while the tuner timed candidates.

Tuning is a measurement: a candidate timed while another process (or the
hypervisor, as steal time) holds a core runs slower than it is, and OpenMP
code with one thread per core collapses when a core is taken away (each
barrier waits for the scheduler), so a choice made then can be 25-40% slower
than the one a quiet machine makes (docs/planner.rst).  The planner keeps
such a choice for its process only and tunes again in the next.

Linux only: elsewhere (no ``/proc/stat``) nothing is known, and every tuning
counts as quiet; so it does with ``MXDECONV_LOAD_WATCH=0`` (a machine that is
always busy, where every process would tune again; the test suite, whose
choices must not depend on what else the machine runs).
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional, Tuple

from mxdeconv._core.env import env_word

#: Above this share of all CPUs taken by other processes (and steal) over the
#: tuner's units, a tuning counts as made under load.  Timings are steady
#: while others take a few percent: a second process's interpreter startup,
#: a shell, the kernel's own work.
LOADED_SHARE = 0.10
#: Below this many CPU seconds measured the share is unknown: /proc/stat counts
#: in clock ticks (10 ms), so a short tuning's share is mostly rounding.
MIN_CPU_SECONDS = 0.5

#: Whether tuning watches the load (MXDECONV_LOAD_WATCH, on by default).
watching = env_word("MXDECONV_LOAD_WATCH", "on") == "on"

Reading = Tuple[float, float, float]   # (wall seconds, others' CPU seconds, all CPUs)

try:
    _TICKS = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):  # not POSIX: /proc/stat is absent anyway
    _TICKS = 100


def _busy_and_steal_seconds() -> Optional[float]:
    """CPU seconds all processes spent busy, plus steal, since boot (None:
    unknown).  The first line of /proc/stat: user nice system idle iowait irq
    softirq steal, in clock ticks."""
    try:
        with open("/proc/stat", "rb") as stat:
            fields = stat.readline().split()[1:9]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields)
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / _TICKS


def _reading() -> Optional[Reading]:
    """Now: the wall clock, the CPU seconds of everything but this process
    (all its threads: the OpenMP team the tuner times included), the CPUs."""
    busy = _busy_and_steal_seconds()
    if busy is None:
        return None
    return time.perf_counter(), busy - time.process_time(), float(os.cpu_count() or 1)


class ForeignLoad:
    """Sums, over the intervals between :meth:`begin` and :meth:`end`, the
    CPU time other processes took and the CPU time there was."""

    def __init__(self, read: Callable[[], Optional[Reading]] = _reading) -> None:
        self._read = read
        self._start: Optional[Reading] = None
        self.others_seconds = 0.0
        self.cpu_seconds = 0.0

    def begin(self) -> None:
        self._start = self._read()

    def end(self) -> None:
        start, self._start = self._start, None
        now = self._read() if start is not None else None
        if start is None or now is None:
            return
        self.others_seconds += max(0.0, now[1] - start[1])
        self.cpu_seconds += max(0.0, (now[0] - start[0]) * now[2])

    def share(self) -> Optional[float]:
        """Other processes' share of all CPUs over the intervals (None: unknown)."""
        if self.cpu_seconds < MIN_CPU_SECONDS:
            return None
        return min(1.0, self.others_seconds / self.cpu_seconds)

    def loaded(self) -> bool:
        """Whether the share is known and over LOADED_SHARE (never, unwatched)."""
        share = self.share()
        return watching and share is not None and share > LOADED_SHARE
