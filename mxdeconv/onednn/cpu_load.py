"""How much of the CPUs other processes take: while the tuner times
candidates (:class:`ForeignLoad`), and while a program runs, to size the
OpenMP team to the CPUs left free (:class:`LoadFollower`).

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
from typing import Callable, Collection, Optional, Tuple

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
    CPU time other processes took and the CPU time there was.

    With ``team`` (the OpenMP team the tuner times), what others take of the
    CPUs the team leaves free does not count: a team of 1 beside a process
    that holds the other core of 2 (the team that follows the load) has a
    core of its own, and times as on a quiet machine.
    """

    def __init__(self, read: Callable[[], Optional[Reading]] = _reading,
                 team: Optional[int] = None) -> None:
        self._read = read
        self._start: Optional[Reading] = None
        self.team = team
        self.others_seconds = 0.0
        self.cpu_seconds = 0.0
        self.wall_seconds = 0.0

    def begin(self) -> None:
        self._start = self._read()

    def end(self) -> None:
        start, self._start = self._start, None
        now = self._read() if start is not None else None
        if start is None or now is None:
            return
        wall = max(0.0, now[0] - start[0])
        self.others_seconds += max(0.0, now[1] - start[1])
        self.cpu_seconds += wall * now[2]
        self.wall_seconds += wall

    def share(self) -> Optional[float]:
        """Other processes' share of the CPUs (of the team's, with a team) over
        the intervals (None: unknown)."""
        if self.cpu_seconds < MIN_CPU_SECONDS:
            return None
        if self.team is None or self.wall_seconds <= 0.0:
            return min(1.0, self.others_seconds / self.cpu_seconds)
        cpus = self.cpu_seconds / self.wall_seconds
        spare = max(0.0, cpus - self.team) * self.wall_seconds
        team = min(float(self.team), cpus) * self.wall_seconds
        return min(1.0, max(0.0, self.others_seconds - spare) / team)

    def loaded(self) -> bool:
        """Whether the share is known and over LOADED_SHARE (never, unwatched)."""
        share = self.share()
        return watching and share is not None and share > LOADED_SHARE


# ---------------------------------------------------------------------------
# The team size that follows the load
# ---------------------------------------------------------------------------
#: How often (seconds of wall time, at a call) the follower looks at the load.
LOOK_INTERVAL = 0.1
#: A longer gap between looks means the process was not calling: what others
#: did meanwhile says nothing about the cores its calls meet.
MAX_GAP = 0.5
#: /proc/stat counts each CPU's time in clock ticks (10 ms): a window of W
#: seconds on C CPUs reads others' CPUs to about C * 0.01 / W, so a decision
#: waits for a window of LOOK_INTERVAL per 2 CPUs (0.2 CPU at most).
SECONDS_PER_CPU = LOOK_INTERVAL / 2
#: A thread is dropped when the CPUs left free fall this far below the team:
#: beside one busy process on 2 cores a team of 2 ran a DCGAN training step
#: 1.4x slower than a team of 1, whose thread has a core of its own (every
#: barrier waits for the thread that shares one); at half a core taken, 2
#: threads still win.
LOWER_MARGIN = 0.6
#: A thread is added back when the free CPUs exceed the team by this much:
#: as soon as a lowering (a team too small wastes a free core as surely as one
#: too big waits at barriers), a margin wider than a window's rounding apart.
RAISE_MARGIN = 0.7


class CpuTimes:
    """Reads ``/proc/stat``: the busy seconds of the CPUs this process may run
    on (the per-CPU lines of its affinity mask, or the total line when the
    mask holds every CPU), and how many CPUs that is.

    Busy is user, system, interrupts and steal (a vCPU the hypervisor gave to
    another guest is not free).  Niced processes' time counts only when this
    process is niced too: otherwise they yield the core to it.
    """

    def __init__(self, cpus: Optional[Collection[int]] = None,
                 path: str = "/proc/stat", niced: Optional[bool] = None) -> None:
        self.path = path
        self.cpus = None if cpus is None else frozenset(cpus)
        if niced is None:
            try:
                niced = os.getpriority(os.PRIO_PROCESS, 0) > 0
            except (AttributeError, OSError):
                niced = False
        self.niced = niced

    def read(self) -> Optional[Tuple[float, int]]:
        """(busy seconds since boot, CPUs counted); None when unreadable."""
        try:
            with open(self.path, "rb") as stat:
                text = stat.read(1 << 20)
        except OSError:
            return None
        busy, counted, total, online = 0, 0, None, 0
        for line in text.split(b"\n"):
            if not line.startswith(b"cpu"):
                break                      # the cpu lines come first
            fields = line.split()
            try:
                user, nice, system, _idle, _iowait, irq, softirq, steal = (
                    int(f) for f in fields[1:9])
                number = int(fields[0][3:]) if fields[0] != b"cpu" else None
            except ValueError:
                return None
            ticks = user + system + irq + softirq + steal + (nice if self.niced else 0)
            if number is None:
                total = ticks
                continue
            online += 1
            if self.cpus is not None and number in self.cpus:
                busy += ticks
                counted += 1
        if 0 < counted < online:
            return busy / _TICKS, counted
        if total is None or online == 0:
            return None
        return total / _TICKS, online


class LoadFollower:
    """Chooses the OpenMP team size from the CPUs other processes leave free.

    :meth:`look` is called at most every :data:`LOOK_INTERVAL`, at the start
    of a call.  Over a window of calls (:data:`SECONDS_PER_CPU` per CPU, at
    least two CPUs' worth), the others' CPU time is the busy time of this
    process's CPUs minus its own.  The team shrinks when the free CPUs fall
    :data:`LOWER_MARGIN` below it and grows when they are :data:`RAISE_MARGIN`
    above it, never past ``most`` (the default thread count) nor below 1.
    """

    def __init__(self, most: int, times: Optional[CpuTimes] = None,
                 own_seconds: Callable[[], float] = time.process_time) -> None:
        self.most = max(1, int(most))
        self.team = self.most
        self.times = CpuTimes() if times is None else times
        self.own_seconds = own_seconds
        self._start: Optional[Tuple[float, float, float]] = None  # the window's
        self._last_look: Optional[float] = None

    def look(self, now: float) -> int:
        """The team size for the calls from ``now`` (monotonic seconds) on."""
        reading = self.times.read()
        if reading is None:
            return self.team
        busy, cpus = reading
        own = self.own_seconds()
        last, self._last_look = self._last_look, now
        if self._start is None or last is None or not 0.0 < now - last <= MAX_GAP:
            self._start = (now, busy, own)
            return self.team
        start = self._start
        wall = now - start[0]
        if wall < SECONDS_PER_CPU * max(2, cpus) - 1e-6:   # (float rounding)
            return self.team
        self._start = (now, busy, own)
        others = max(0.0, (busy - start[1]) - (own - start[2])) / wall
        self._decide(cpus - others)
        return self.team

    def _decide(self, free: float) -> None:
        if free < self.team - LOWER_MARGIN:
            self.team = max(1, min(self.team - 1, int(free + LOWER_MARGIN)))
        elif free > self.team + RAISE_MARGIN:
            self.team = min(self.most, int(free - RAISE_MARGIN) + 1)
