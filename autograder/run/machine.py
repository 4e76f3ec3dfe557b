"""How a grading run uses what it may use: notebooks at once, torch threads each, memory per task.

Why: the limits are the cgroup's, not the host's (:mod:`labutils.limits` reads them). Gradescope's default container
has 768 MB and half a virtual CPU on a host with many of both; a pool sized by ``os.cpu_count()`` ran two notebooks at
once there, the OOM killer took the zygote, and honest work scored 0.

:func:`size_pool` turns the limits into how many notebooks are graded at once, how many torch threads each gets and,
under a memory limit, how much memory each task's cgroup may hold (:mod:`autograder.sandbox.isolation`), so that a
notebook that needs more than its share is stopped inside its own task, never the zygote or the grader by the
container's OOM killer. Without a memory limit the machine's free memory is other users' as much as ours: it is
reported, not budgeted against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labutils.limits import Limits

# Measured on the CPU build of torch (what setup.sh installs on Gradescope) with the honest submission of the nine
# notebooks: the task cgroups (a kernel, or a recheck's observer and judge) peaked at 181 MB, and a worker holds
# ~45 MB of its own beside its task (benchmarks/bench_grading.py --container; docs/measurements.md).
TASK_NEED_MB = 224  # a task's memory an honest notebook of this lab may need: the 181 MB measured, and a quarter more
WORKER_MB = 48  # a worker process's own memory beside its task
NOTEBOOK_MB = TASK_NEED_MB + WORKER_MB  # one notebook graded at a time

@dataclass(frozen=True)
class Sizing:
    """How a run uses the :class:`Limits` it was given."""

    jobs: int  # notebooks graded at once
    threads: int  # torch threads of each kernel
    task_memory_mb: int | None  # real memory of each task's cgroup; None: the run's --memory-limit alone
    short: bool  # a task's share is below what an honest notebook may need (TASK_NEED_MB)

    def describe(self, limits: Limits) -> str:
        task = f", {self.task_memory_mb} MB per notebook" if self.task_memory_mb else ""
        return (f"sized for {limits.describe()}: {self.jobs} notebook(s) at a time, {self.threads} torch "
                f"thread(s) each{task}")


# --- what the run does with them ---------------------------------------------------------------------------------------


def size_pool(limits: Limits, requested: int | None, tasks: int, threads: int | None = None,
              memory_mb: int | None = None) -> Sizing:
    """Notebooks at once: ``requested`` (None: one per CPU the quota allows, at least one), never more than the
    tasks, nor, under a memory limit, than :data:`NOTEBOOK_MB` shares of what the cgroup has free (one at a time when
    memory is short); each task's cgroup may then hold its share (at most ``memory_mb``, the run's per-process
    limit). Without a memory limit the machine's free memory at this moment is other users' as much as ours: the
    tasks keep ``memory_mb`` and the CPUs alone decide. Torch threads (unless ``threads`` is given): the CPUs shared
    among the notebooks asked for, not among those that fit now: a float's rounding, so a check's figures, must not
    depend on how many tasks a run had left or how much memory was free."""
    asked = requested or max(1, math.floor(limits.cpus))
    threads = threads or max(1, math.floor(limits.cpus / asked))
    jobs = max(1, min(asked, tasks or 1))
    task_memory = memory_mb
    if limits.memory_mb is not None:
        jobs = max(1, min(jobs, limits.free_mb // NOTEBOOK_MB))
        share = limits.free_mb // jobs - WORKER_MB
        task_memory = max(64, min(share, memory_mb or share))  # 64: a limit still, never "none" (0)
    return Sizing(jobs=jobs, threads=threads, task_memory_mb=task_memory,
                  short=task_memory is not None and task_memory < TASK_NEED_MB)
