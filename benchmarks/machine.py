"""This machine's fp32 peak: ``threads x GHz x FLOP/cycle``, and how it was found.

Two tiny loops, compiled with the system's C compiler when there is one and
run on every benchmark thread at once (so the figures are all-core ones, turbo
included; each thread's CPU time, not wall time, so that time slices taken by
other processes do not count; the fastest thread counts):

* the clock: a chain of dependent 1-cycle integer ``add`` instructions;
* fp32 FMA throughput: 12 independent AVX-512 ``vfmadd231ps`` chains (enough
  to fill two FMA pipes of latency 4).  Its GFLOP/s divided by the clock gives
  the FLOP/cycle of one core, rounded to a power of two.

Without a compiler the clock is ``cpu MHz`` from /proc/cpuinfo (in a VM often
the nominal clock, not the one the cores run at) and FLOP/cycle is 32 for
AVX-512 or AVX2+FMA, 8 otherwise.  Some virtual machines time the add chain
impossibly fast (a Firecracker VM on a Xeon: 21-24 GHz, while its FMA loop
and its convolutions agree on about 2 x 3.5 GHz x 64 FLOP/cycle): a clock
over MAX_PLAUSIBLE_GHZ is not used, and the FMA loop's own rate is the peak.
``--flops-per-cycle`` overrides the value.
For the record: 32 is one 512-bit (or two 256-bit) FMA per cycle, e.g. Zen 4;
Zen 5 server cores and Intel cores with two 512-bit FMA units do 64.
"""
from __future__ import annotations

import ctypes
import math
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

_LOOPS_SOURCE = r"""
#include <stdint.h>
void spin(uint64_t n) {  /* 100 dependent adds per iteration: 100 cycles */
  uint64_t x = 0;
  for (uint64_t i = 0; i < n; ++i)
    __asm__ volatile(".rept 100\n\tadd $1, %0\n\t.endr" : "+r"(x));
}
void fma_loop(uint64_t n) {  /* 12 independent 16-lane FMAs per iteration */
  __asm__ volatile(
    "vxorps %%zmm0, %%zmm0, %%zmm0\n\t"
    ".irp r,1,2,3,4,5,6,7,8,9,10,11,12\n\tvmovaps %%zmm0, %%zmm\\r\n\t.endr\n\t"
    "1:\n\t"
    ".irp r,1,2,3,4,5,6,7,8,9,10,11,12\n\tvfmadd231ps %%zmm13, %%zmm14, %%zmm\\r\n\t.endr\n\t"
    "dec %0\n\tjnz 1b\n\t"
    : "+r"(n) :: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                 "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "cc");
}
"""
_ADDS_PER_SPIN = 100
_FLOPS_PER_FMA_ITERATION = 12 * 16 * 2
#: No x86 core runs this fast: a faster "clock" is a broken CPU-time source.
MAX_PLAUSIBLE_GHZ = 7.0

@dataclass(frozen=True)
class Machine:
    cpu_model: str
    cpu_family: str
    cores: int
    threads: int
    isa: str
    cpuinfo_ghz: Optional[float]
    measured_ghz: Optional[float]
    ghz: float
    clock_source: str
    #: GFLOP/s of the FMA loop: fastest thread x threads (None: not measured).
    fma_loop_gflops: Optional[float]
    flops_per_cycle: int
    flops_per_cycle_source: str
    peak_gflops: float
    #: How peak_gflops was found: threads x GHz x FLOP/cycle, or the FMA loop.
    peak_source: str = "threads x GHz x FLOP/cycle"

    def describe(self) -> str:
        head = (f"{self.cpu_model} (family {self.cpu_family}), {self.cores} cores, "
                f"{self.threads} threads used\n")
        if self.peak_source != "threads x GHz x FLOP/cycle":
            return head + f"fp32 peak {self.peak_gflops:.1f} GFLOP/s ({self.peak_source})"
        fma = ("" if self.fma_loop_gflops is None else
               f"; the FMA loop itself reached {self.fma_loop_gflops:.0f} GFLOP/s")
        return (head + f"fp32 peak {self.peak_gflops:.1f} GFLOP/s = {self.threads} threads x "
                f"{self.ghz:.2f} GHz ({self.clock_source}) x {self.flops_per_cycle} "
                f"FLOP/cycle ({self.flops_per_cycle_source}){fma}")

    def as_dict(self) -> Dict[str, object]:
        return asdict(self)


def _cpuinfo() -> Dict[str, str]:
    fields: Dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_name() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it (else the platform's)."""
    return _cpuinfo().get("model name") or platform.processor() or "unknown"


def _compile_loops(scratch: str) -> Optional[ctypes.CDLL]:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or platform.machine() not in ("x86_64", "AMD64"):
        return None
    source, library = Path(scratch) / "loops.c", Path(scratch) / "loops.so"
    source.write_text(_LOOPS_SOURCE)
    built = subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(library),
                            str(source)], capture_output=True)
    if built.returncode != 0:
        return None
    loops = ctypes.CDLL(str(library))  # ctypes releases the GIL during calls
    for name in ("spin", "fma_loop"):
        getattr(loops, name).argtypes = [ctypes.c_uint64]
    return loops


def _per_thread_rates(loop: Callable[[int], None], iterations: int, work: float,
                      threads: int) -> List[float]:
    """Run ``loop(iterations)`` on ``threads`` threads at once; work/second of each."""
    loop(iterations // 10)  # wake the cores up
    rates: List[float] = []

    def one_thread() -> None:
        best = float("inf")
        for _ in range(3):
            # This thread's CPU time, not wall time: time slices lost to other
            # processes must not count as slow cycles.
            start = time.thread_time()
            loop(iterations)
            best = min(best, time.thread_time() - start)
        rates.append(iterations * work / best)

    workers = [threading.Thread(target=one_thread) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return rates


def _measure(threads: int, avx512: bool) -> Tuple[Optional[float], Optional[List[float]]]:
    """(all-core GHz, per-thread FMA GFLOP/s), each None when it cannot be measured."""
    with tempfile.TemporaryDirectory(prefix="mxdeconv-bench-clock-") as scratch:
        loops = _compile_loops(scratch)
        if loops is None:
            return None, None
        # The fastest thread: another process sharing a core slows a thread down,
        # never speeds it up, and the clock is a property of the cores.
        clock = max(_per_thread_rates(loops.spin, 2_000_000, _ADDS_PER_SPIN, threads)) / 1e9
        fma = None
        if avx512:
            fma = [r / 1e9 for r in _per_thread_rates(loops.fma_loop, 5_000_000,
                                                      _FLOPS_PER_FMA_ITERATION, threads)]
    return clock, fma


def detect(threads: int, flops_per_cycle: Optional[int] = None,
           measure: bool = True) -> Machine:
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    isa = ("AVX-512" if "avx512f" in flags else "AVX2+FMA" if "fma" in flags
           else "SSE/other")
    cpuinfo_ghz = float(info["cpu MHz"]) / 1000 if "cpu MHz" in info else None
    measured, fma = _measure(threads, isa == "AVX-512") if measure else (None, None)
    implausible = measured is not None and measured > MAX_PLAUSIBLE_GHZ
    if implausible:
        measured = None
    if measured is not None:
        ghz, clock_source = measured, "measured: dependent-add loop, thread CPU time"
    elif cpuinfo_ghz is not None:
        ghz, clock_source = cpuinfo_ghz, "/proc/cpuinfo 'cpu MHz'"
    else:
        ghz, clock_source = 1.0, "unknown clock, 1 GHz assumed"
    if flops_per_cycle:
        fpc, fpc_source = flops_per_cycle, "--flops-per-cycle"
    elif fma and measured and 12 <= max(fma) / measured <= 80:
        per_cycle = max(fma) / measured
        fpc = 2 ** round(math.log2(per_cycle))  # 16, 32 or 64 on AVX-512 cores
        fpc_source = f"measured: AVX-512 FMA loop, {per_cycle:.1f} per cycle"
    else:  # no measurement, or an implausible one (a disturbed run)
        zen5 = info.get("vendor_id") == "AuthenticAMD" and int(info.get("cpu family", 0)) >= 26
        fpc = 64 if isa == "AVX-512" and zen5 else 32 if isa != "SSE/other" else 8
        fpc_source = f"assumed for {isa}{' on Zen 5' if zen5 and isa == 'AVX-512' else ''}"
    peak, peak_source = threads * ghz * fpc, "threads x GHz x FLOP/cycle"
    if implausible and fma and not flops_per_cycle:
        peak = max(fma) * threads
        peak_source = (f"measured: the AVX-512 FMA loop, fastest thread x {threads}; the "
                       f"add chain's clock was implausible, over {MAX_PLAUSIBLE_GHZ:g} GHz")
    return Machine(cpu_model=info.get("model name", platform.processor() or "unknown"),
                   cpu_family=info.get("cpu family", "?"),
                   cores=len(os.sched_getaffinity(0)), threads=threads, isa=isa,
                   cpuinfo_ghz=cpuinfo_ghz, measured_ghz=measured, ghz=ghz,
                   clock_source=clock_source,
                   fma_loop_gflops=None if fma is None else max(fma) * threads,
                   flops_per_cycle=fpc, flops_per_cycle_source=fpc_source,
                   peak_gflops=peak, peak_source=peak_source)


def _own_process_tree() -> List[int]:
    """This process and its descendants (the MXNet worker), from /proc."""
    parents: Dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    tree, frontier = [os.getpid()], [os.getpid()]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class ForeignLoad:
    """How much CPU other processes (or the hypervisor) took while a case was measured.

    The cores are shared with whatever else runs on the machine; OpenMP code
    with one thread per core collapses when a core is taken away (each barrier
    waits for the scheduler), so timings taken then are not worth much.
    ``share()`` is the busy CPU time of everything outside this process tree,
    plus steal time, as a fraction of all cores over the interval; Linux only
    (None elsewhere).
    """

    def __init__(self) -> None:
        self._start = self._snapshot()

    @staticmethod
    def _snapshot() -> Optional[Tuple[float, float, float, float]]:
        try:
            ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0]
                     .split()[1:9]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
        busy = (user + nice + system + irq + softirq) / hz
        own = sum(_cpu_seconds(pid) for pid in _own_process_tree())
        return time.perf_counter(), busy, own, steal / hz

    def share(self) -> Optional[Dict[str, float]]:
        end = self._snapshot()
        if self._start is None or end is None:
            return None
        wall = (end[0] - self._start[0]) * (os.cpu_count() or 1)
        if wall <= 0:
            return None
        others = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return {"other_processes": max(0.0, others / wall),
                "steal": max(0.0, (end[3] - self._start[3]) / wall)}
