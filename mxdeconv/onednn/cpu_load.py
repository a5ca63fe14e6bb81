"""How much of the CPUs other processes take: while the tuner times
candidates (:class:`ForeignLoad`), and while a program runs, to size the
OpenMP team to the CPUs it can really have (:class:`LoadFollower`).

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
#: How often (seconds of wall time, at a call) the follower looks at the load;
#: each look ends a window over which it decides.
LOOK_INTERVAL = 0.1
#: A longer gap between looks means the process was not calling: what others
#: did meanwhile says nothing about the cores its calls meet.
MAX_GAP = 0.5
#: A thread is dropped when the process's threads waited this long for a CPU
#: per second of a window (run-queue delay, plus the hypervisor's steal): the
#: others hold a core the team needs, and every barrier waits for the thread
#: that shares it.  Beside one busy process on 2 cores a team of 2 waited
#: about 0.5 s per second, a team of 1 under 0.1 (and a quiet team of 2 about
#: 0.1 beside low-priority work that soaks up idle time).
LOWER_WAIT = 0.3
#: ... in this many windows running (a probe's one window is enough): a
#: process started or a burst of the kernel's work can hold a core for a few
#: tens of milliseconds, a busy process holds it window after window.
LOWER_LOOKS = 2
#: A thread is added back when a window found this much of a CPU idle, or,
#: with no idle CPU in sight (a process of lower priority soaking up idle time
#: yields to the team), as a probe after PROBE_FIRST seconds at the smaller
#: size, the gap doubling up to PROBE_MAX after each probe the next window
#: refused (it waited LOWER_WAIT again).  Every raise is such a probe.
RAISE_IDLE = 0.9
PROBE_FIRST, PROBE_MAX = 0.5, 4.0


class CpuTimes:
    """Reads ``/proc/stat``: the idle and stolen seconds of the CPUs this
    process may run on (the per-CPU lines of its affinity mask, or the total
    line when the mask holds every CPU), and how many CPUs that is."""

    def __init__(self, cpus: Optional[Collection[int]] = None,
                 path: str = "/proc/stat") -> None:
        self.path = path
        self.cpus = None if cpus is None else frozenset(cpus)

    def read(self) -> Optional[Tuple[float, float, int]]:
        """(idle seconds, stolen seconds, CPUs counted) since boot; None when
        unreadable."""
        try:
            with open(self.path, "rb") as stat:
                text = stat.read(1 << 20)
        except OSError:
            return None
        mine, total, counted, online = [0, 0], None, 0, 0
        for line in text.split(b"\n"):
            if not line.startswith(b"cpu"):
                break                      # the cpu lines come first
            fields = line.split()
            try:
                idle, iowait, steal = int(fields[4]), int(fields[5]), int(fields[8])
                number = int(fields[0][3:]) if fields[0] != b"cpu" else None
            except (ValueError, IndexError):
                return None
            if number is None:
                total = [idle + iowait, steal]
                continue
            online += 1
            if self.cpus is not None and number in self.cpus:
                mine[0] += idle + iowait
                mine[1] += steal
                counted += 1
        if 0 < counted < online:
            return mine[0] / _TICKS, mine[1] / _TICKS, counted
        if total is None or online == 0:
            return None
        return total[0] / _TICKS, total[1] / _TICKS, online


def run_queue_seconds(tasks: str = "/proc/self/task") -> Optional[float]:
    """Seconds this process's threads spent runnable but waiting for a CPU,
    summed (``/proc/<pid>/task/<tid>/schedstat``'s second field); None where
    the kernel keeps no such count."""
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    total, read = 0, False
    for name in names:
        try:
            with open(f"{tasks}/{name}/schedstat", "rb") as schedstat:
                total += int(schedstat.read(256).split()[1])
            read = True
        except (OSError, ValueError, IndexError):
            continue                       # a thread that just ended, or no schedstat
    return total * 1e-9 if read else None


class LoadFollower:
    """Chooses the OpenMP team size from how long the process's threads wait
    for a CPU.

    :meth:`look` is called at most every :data:`LOOK_INTERVAL`, at the start
    of a call; each look ends a window.  The team shrinks when its threads
    waited :data:`LOWER_WAIT` per second in :data:`LOWER_LOOKS` windows
    running (others hold a core it needs), and
    grows when a window found :data:`RAISE_IDLE` of a CPU idle, or as a
    probe now and then (:data:`PROBE_FIRST`, :data:`PROBE_MAX`); a raise the
    next window refuses is undone.  Never past ``most`` (the default thread
    count) nor below 1.
    """

    def __init__(self, most: int, times: Optional[CpuTimes] = None,
                 waits: Callable[[], Optional[float]] = run_queue_seconds) -> None:
        self.most = max(1, int(most))
        self.team = self.most
        self.times = CpuTimes() if times is None else times
        self.waits = waits
        self._start: Optional[Tuple[float, float, float, float]] = None  # the window's
        self._last_look: Optional[float] = None
        self._probe_gap = PROBE_FIRST
        self._probe_at = 0.0
        self._probing = False
        self._waited_looks = 0

    def readable(self) -> bool:
        """Whether both counts can be read here (else the team stays whole)."""
        return self.times.read() is not None and self.waits() is not None

    def look(self, now: float) -> int:
        """The team size for the calls from ``now`` (monotonic seconds) on."""
        times, waited = self.times.read(), self.waits()
        if times is None or waited is None:
            return self.team
        idle, steal, _ = times
        last, self._last_look = self._last_look, now
        start, self._start = self._start, (now, waited, idle, steal)
        if start is None or last is None or not 0.0 < now - last <= MAX_GAP:
            return self.team
        wall = now - start[0]
        self._decide(now, ((waited - start[1]) + (steal - start[3])) / wall,
                     (idle - start[2]) / wall)
        return self.team

    def _decide(self, now: float, waiting: float, idle: float) -> None:
        self._waited_looks = self._waited_looks + 1 if waiting >= LOWER_WAIT else 0
        if self._probing and self._waited_looks:     # the probe refused: wait longer
            self._probe_gap = min(PROBE_MAX, 2 * self._probe_gap)
            self._lower(now, waiting)
            return
        if self._waited_looks >= LOWER_LOOKS:        # others hold a core the team needs
            self._lower(now, waiting)
            return
        if self._waited_looks:                       # once: a burst, perhaps
            return
        if self._probing:                          # accepted
            self._probing = False
            self._probe_gap = PROBE_FIRST
            self._probe_at = now + PROBE_FIRST
        if self.team >= self.most:
            return
        if idle >= RAISE_IDLE:
            self.team = min(self.most, self.team + int(idle - RAISE_IDLE) + 1)
            self._probing = True
        elif now >= self._probe_at:
            self.team += 1
            self._probing = True

    def _lower(self, now: float, waiting: float) -> None:
        self.team = max(1, self.team - max(1, round(waiting)))
        self._probing = False
        self._probe_at = now + self._probe_gap
