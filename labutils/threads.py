"""How many threads torch's CPU kernels use: the cores that are free when a notebook starts.

Why: torch runs each operation on a team of threads (OpenMP), one per core by default, and the team meets at a
barrier when the operation ends. When another program keeps one of those cores busy, the thread that shares it runs
only in the scheduler's time slices, and every other thread waits for it at every barrier. On the 2-core machine this
lab was written on, one busy process beside a notebook made lab 5's training steps 23 times slower (about 8,500 down
to 365 samples/s), and made bf16 look slower than float32 (0.77x) only through that waiting; on one thread the same
steps ran at 4,800 samples/s (``python benchmarks/bench_cells.py 05_amp --cells 20,22 --load 1``, with and without
``OMP_NUM_THREADS=1``). So :func:`choose` counts the cores other work keeps busy (``/proc/stat`` read three times, 0.2 s
apart, while this process sleeps; the quieter interval counts) and uses the free ones, at least one.

What it cannot see: work that starts later (a second notebook started beside this one); ``torch.set_num_threads``
after the first cell changes the choice, and ``OMP_NUM_THREADS`` set before Jupyter starts replaces it. It never
gives more threads than the CPUs its cgroup's quota allows (:mod:`labutils.limits`): in a container or a JupyterHub
pod with a CPU limit on a large machine, torch's default counts the machine's cores. Where ``/proc/stat`` does not
exist (macOS, Windows) torch's own default stands, and the first cell says so.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .limits import read_limits

STAT = Path("/proc/stat")
SAMPLE_S = 0.2
SAMPLES = 2  # the quieter of two samples counts: load lasts, a spike (a browser redrawing) does not
BUSY_ENOUGH = 0.5  # a core counts as taken when other work used more than half of it during the sample


@dataclass(frozen=True)
class ThreadChoice:
    """The threads a run uses and why (what the first cell of every notebook prints)."""

    threads: int
    reason: str

    def __str__(self) -> str:
        return f"{self.threads} ({self.reason})"


def cpu_times(stat: str, cpus: set[int]) -> dict[int, tuple[int, int]]:
    """(busy, total) clock ticks of each core in ``cpus`` since boot, from the text of ``/proc/stat``; idle and
    iowait are the time a core had nothing to run."""
    times = {}
    for line in stat.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    return times


def busy_cores(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> float:
    """How many cores' worth of time other work used between two readings (0.0 to the number of cores)."""
    used = 0.0
    for cpu, (busy, total) in after.items():
        if cpu in before and total > before[cpu][1]:
            used += (busy - before[cpu][0]) / (total - before[cpu][1])
    return used


def free_threads(cores: int, busy: float, default: int) -> int:
    """The threads for ``cores`` of which other work keeps ``busy`` (in cores) running: one per core left free
    (a core counts as taken past half of it busy), never more than torch's ``default``, at least one."""
    taken = int(busy + (1 - BUSY_ENOUGH))
    return max(1, min(default, cores - taken))


def choose() -> ThreadChoice:
    """The threads this process should train with now (see the module's docstring); torch's default where it
    cannot tell."""
    default = torch.get_num_threads()
    if os.environ.get("OMP_NUM_THREADS"):
        return ThreadChoice(default, "OMP_NUM_THREADS")
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    try:
        readings = [cpu_times(STAT.read_text(), cpus)]
        for _ in range(SAMPLES):
            time.sleep(SAMPLE_S)
            readings.append(cpu_times(STAT.read_text(), cpus))
    except OSError:
        readings = [{}]
    after = readings[-1]
    if not after:
        return ThreadChoice(default, "torch's default; this system does not say how busy its cores are")
    busy = min(busy_cores(a, b) for a, b in zip(readings, readings[1:]))  # a moment's spike is not load
    free = free_threads(len(after), busy, default)
    quota = read_limits().cpus  # fewer than the cores where the cgroup's quota allows less (a container, a pod)
    if math.floor(quota) < free:
        return ThreadChoice(max(1, math.floor(quota)), f"this process may use {quota:g} CPU of {len(after)} cores "
                                                       "(its cgroup's quota): a thread past it waits for the quota")
    if free == default:
        return ThreadChoice(free, f"{len(after)} cores, {busy:.1f} of them busy with other work")
    return ThreadChoice(free, f"{len(after)} cores, {busy:.1f} busy with other work when this notebook started: a "
                              "thread that shares its core stalls the others; torch.set_num_threads(n) to change")
