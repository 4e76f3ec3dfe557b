"""Local grading: ``-j`` worker processes (:mod:`autograder.run.worker`) fed (student, notebook) tasks longest-first,
and the one shared zygote they fork their kernels from. :class:`LocalExecutor` is the "run" step of
:func:`autograder.grade.grade` on this machine.

A worker that dies, or whose task runs past the hard limit, is killed with everything below it and replaced; its
task is reported as not graded and the others go on.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Callable

from autograder import channel
from labutils.exercises import grading_cost

from autograder.channel import Result, RunConfig, Task, WorkerReady
from autograder.sandbox.client import SharedZygote

KERNEL_HEADROOM_MB = 1024  # a started ipykernel (threads, stacks) beyond the zygote's imports; measured ~0.7 GB

OnResult = Callable[[Result, float], None]  # a task's result and the seconds it took, as the parent saw them


class GradingSetupError(RuntimeError):
    """The run cannot grade anyone as configured (a limit too small for torch, no zygote)."""


def cost(notebook: str) -> float:
    """Relative time to grade ``notebook`` (the exercise registry's, measured), so the slowest start first."""
    return grading_cost(notebook)


class Worker:
    """One ``python -m autograder.run.worker`` process; started early (its imports overlap the parent's set-up) and given
    the run's configuration when it is known."""

    def __init__(self, index: int, log_dir: Path, zygote: SharedZygote, run: RunConfig | None = None):
        self.index = index
        self.log = open(log_dir / f"worker-{index}.log", "ab")
        with zygote.attach() as conn:  # the worker's private line to the zygote: inherited, never named
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autograder.run.worker", "--zygote-fd", str(conn.fileno()),
                 "--parent", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True,
                cwd=str(log_dir), pass_fds=(conn.fileno(),),
            )
        self.reader = channel.LineReader(self.proc.stdout.fileno())
        self.ready = False
        if run is not None:
            self.configure(run)
        self.task: Task | None = None
        self.started = 0.0

    def configure(self, run: RunConfig) -> None:
        channel.send(self.proc.stdin, run)

    def send(self, task: Task) -> None:
        self.task, self.started = task, time.monotonic()
        channel.send(self.proc.stdin, task)

    def read(self) -> list | None:
        """The messages available now; None when the worker has exited."""
        return self.reader.read()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker, its zygote and every kernel below
        except OSError:
            pass
        self.proc.wait()
        self.log.close()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def check_isolation(found: dict[str, str], required: bool, log) -> None:
    """Say which confinement layers student code gets here, and which not (what that exposes); refuse to grade
    without all of them when ``required`` (``--require-isolation``)."""
    from autograder.sandbox import isolation

    gaps = isolation.missing(found)
    if gaps and required:
        raise GradingSetupError("--require-isolation: " + "; ".join(gaps))
    applied = [layer for layer, why in found.items() if not why]
    log(f"student code confined: Landlock, rlimits{''.join(', ' + layer for layer in applied)}"
        + "".join(f"\nWARNING: {gap}" for gap in gaps))


def _order(tasks: list[Task]) -> list[Task]:
    """Longest first (LPT): the last task to start should be a short one."""
    return sorted(tasks, key=lambda t: (-cost(t.notebook), t.student, t.notebook))


def run_pool(tasks: list[Task], run: RunConfig, workers: list[Worker], work: Path, zygote: SharedZygote,
             hard_limit: float, on_result: OnResult) -> None:
    pending = deque(_order(tasks))
    sel = selectors.DefaultSelector()

    def spawn(i: int) -> Worker:
        w = Worker(i, work, zygote, run)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    for w in workers:
        w.configure(run)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)

    def retire(w: Worker, reason: str) -> None:
        sel.unregister(w.proc.stdout)
        if w.task is not None:
            on_result(Result.failed(w.task, reason), time.monotonic() - w.started)
            w.task = None
        w.kill()

    try:
        while pending or any(w.task for w in workers):
            for w in workers:
                if w.ready and w.task is None and pending:
                    w.send(pending.popleft())
            for key, _ in sel.select(timeout=1.0):
                w = key.data
                try:
                    messages = w.read()
                except channel.ChannelError as exc:
                    retire(w, f"the grading process sent something that is not a message ({exc})")
                    workers[workers.index(w)] = spawn(w.index)
                    continue
                if messages is None:
                    retire(w, "the grading process exited unexpectedly (see the worker log)")
                    workers[workers.index(w)] = spawn(w.index)
                    continue
                for msg in messages:
                    if isinstance(msg, WorkerReady):
                        w.ready = True
                    elif isinstance(msg, Result) and w.task is not None:
                        on_result(msg, time.monotonic() - w.started)
                        w.task = None
            now = time.monotonic()
            for i, w in enumerate(workers):
                if w.task is not None and now - w.started > hard_limit:
                    retire(w, f"grading this notebook took longer than {hard_limit:.0f} s and was stopped")
                    workers[i] = spawn(w.index)
    finally:
        for w in workers:
            try:
                sel.unregister(w.proc.stdout)
            except (KeyError, ValueError):
                pass
            w.close()


class LocalExecutor:
    """Grades a run's tasks on this machine: ``jobs`` worker processes and one shared zygote.

    The "run" step of :func:`autograder.grade.grade`: :meth:`start` (the zygote's and the workers' imports overlap
    the parent's set-up), :meth:`run` (every task, each result to ``on_result`` as it comes), :meth:`close`. Another
    executor (Dask) offers the same three methods.
    """

    def __init__(self, jobs: int):
        self.jobs = jobs
        self.zygote: SharedZygote | None = None
        self.workers: list[Worker] = []

    def start(self, work: Path) -> None:
        """The zygote and one worker, whose imports overlap the parent's set-up; the other workers are started by
        :meth:`run`, once the number of tasks is known (a worker's imports cost ~2 s of CPU: a run of one notebook
        needs one worker whatever ``-j`` says)."""
        self.work = work
        self.zygote = SharedZygote(work)
        self.workers = [Worker(0, work, self.zygote)]

    def run(self, tasks: list[Task], run: RunConfig, on_result: OnResult, log=print) -> None:
        if not tasks:
            return
        self.workers += [Worker(i, self.work, self.zygote) for i in range(len(self.workers), min(self.jobs,
                                                                                                  len(tasks)))]
        info = self.zygote.wait_ready()
        floor = info.vm_mb + KERNEL_HEADROOM_MB
        if run.memory_mb < floor:
            raise GradingSetupError(
                f"--memory-limit {run.memory_mb} MB is below what a kernel needs to start here: the imports "
                f"alone map {info.vm_mb} MB of address space; use at least {floor} MB")
        check_isolation(info.isolation, run.require_isolation, log)
        log(f"kernels warm (torch, labutils and the data imported once, in {info.seconds:.1f} s)")
        run = dataclasses.replace(run, data_dirs=info.data_dirs, cache_dir=info.cache_dir)
        hard_limit = 2 * run.notebook_timeout + 180  # kernel + recheck + start-up + feedback: then it is stuck
        run_pool(tasks, run, self.workers, self.work, self.zygote, hard_limit, on_result)

    def close(self) -> None:
        for w in self.workers:
            if w.proc.poll() is None:
                w.close()
        if self.zygote is not None:
            self.zygote.close()
