"""Local grading: ``-j`` worker processes (:mod:`autograder.run.worker`, forks of the grader) fed (student, notebook)
tasks longest-first, and the one shared zygote they fork their kernels from. :class:`LocalExecutor` is the "run" step of
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
import traceback
from collections import deque
from pathlib import Path
from typing import Callable

from autograder import channel, process
from labutils.exercises import grading_cost
from labutils.limits import read_limits

from autograder.channel import Result, RunConfig, Task, WorkerReady
from autograder.sandbox.client import SharedZygote

from . import machine

KERNEL_HEADROOM_MB = 1024  # a started ipykernel (threads, stacks) beyond the zygote's imports; measured ~0.7 GB

OnResult = Callable[[Result, float], None]  # a task's result and the seconds it took, as the parent saw them


class GradingSetupError(RuntimeError):
    """The run cannot grade anyone as configured (a limit too small for torch, no zygote)."""


def cost(notebook: str) -> float:
    """Relative time to grade ``notebook`` (the exercise registry's, measured), so the slowest start first."""
    return grading_cost(notebook)


class Worker:
    """One grading process (:mod:`autograder.run.worker`), forked from the grader once the plan is made, and given
    the run's configuration."""

    def __init__(self, index: int, log_dir: Path, zygote: SharedZygote, run: RunConfig):
        self.index, self.zygote = index, zygote
        tasks_r, tasks_w = os.pipe()
        results_r, results_w = os.pipe()
        log = os.open(log_dir / f"worker-{index}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        sys.stdout.flush()  # what the grader printed is not printed again by the child
        sys.stderr.flush()
        grader = os.getpid()
        from . import worker  # its imports (nbgrader, nbconvert) are the plan's: made by now, not at start-up

        with zygote.attach() as conn:  # the worker's private line to the zygote: inherited, never named
            pid = process.fork_child(lambda: worker.serve(tasks_r, results_w, log, conn.fileno(), grader, log_dir))
        for fd in (tasks_r, results_w, log):
            os.close(fd)
        self.proc = process.ForkedChild(pid)
        self.tasks = os.fdopen(tasks_w, "wb")
        self.results = os.fdopen(results_r, "rb")
        self.reader = channel.LineReader(self.results.fileno())
        self.ready = False
        self.task: Task | None = None
        self.started = 0.0
        channel.send(self.tasks, run)

    def send(self, task: Task) -> None:
        self.task, self.started = task, time.monotonic()
        channel.send(self.tasks, task)

    def read(self) -> list | None:
        """The messages available now; None when the worker has exited."""
        return self.reader.read()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker, its zygote and every kernel below
        except OSError:
            pass
        self.proc.wait()
        for pipe in (self.tasks, self.results):
            try:
                pipe.close()
            except OSError:
                pass  # a task the worker died before reading

    def close(self) -> None:
        try:
            self.tasks.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


BANNER_ORDER = ("landlock", "rlimits", "cgroup", "scratch", "network", "pid", "user", "permissions")
BANNER_NAMES = {"landlock": "Landlock"}


def check_isolation(found: dict[str, str], required: bool, log) -> None:
    """Name the confinement layers verified here (``found``: layer -> "" when a probe observed it hold as student code
    would, else why not) and what each missing one exposes; refuse to grade when what holds cannot keep the hidden
    tests and the results out of reach, or without every layer when ``required`` (``--require-isolation``)."""
    from autograder.sandbox import closure, isolation

    gaps = isolation.missing(found, {closure.LAYER: closure.EXPOSES})
    if gaps and required:
        raise GradingSetupError("--require-isolation: " + "; ".join(gaps))
    refusal = closure.unprotected(found, os.geteuid())
    if refusal:
        raise GradingSetupError(refusal)
    verified = [BANNER_NAMES.get(layer, layer) for layer in BANNER_ORDER if found.get(layer) == ""]
    uid = isolation.student_ids()[0] if found.get("user") == "" else os.geteuid()
    log(f"student code confined: {', '.join(verified) or 'by nothing verified'} (each observed by a probe as student "
        f"code; it runs as uid {uid})" + "".join(f"\nWARNING: {gap}" for gap in gaps))


def _order(tasks: list[Task]) -> list[Task]:
    """Longest first (LPT): the last task to start should be a short one."""
    return sorted(tasks, key=lambda t: (-cost(t.notebook), t.student, t.notebook))


class Zygotes:
    """The run's shared zygote, and a fresh one in its place when it died (an OOM kill, a crash) or a retry asks for
    one. A zygote lent by the caller (:class:`LocalExecutor`'s ``zygote``) is never closed here; one started here is."""

    def __init__(self, work: Path, lent: SharedZygote | None, log):
        self.work, self.lent, self.log = work, lent, log
        self.current = lent or SharedZygote(work)

    def live(self) -> SharedZygote:
        """The shared zygote, started again first if it has died."""
        if not self.current.alive():
            self.log(f"WARNING: the zygote died ({self.current.death()}): starting a fresh one")
            self.fresh()
        return self.current

    def fresh(self) -> SharedZygote:
        """Close the current zygote (unless lent) and start another, waiting for its warm-up."""
        if self.current is not self.lent:
            self.current.close()
        self.current = SharedZygote(self.work)
        self.current.wait_ready()
        return self.current

    def close(self) -> None:
        if self.current is not self.lent:
            self.current.close()


class _NoZygote(RuntimeError):
    """A fresh zygote did not start: the tasks left are reported as not graded."""


def run_pool(tasks: list[Task], run: RunConfig, jobs: int, work: Path, zygotes: Zygotes, hard_limit: float,
             on_result: OnResult, log=print) -> None:
    """Grade ``tasks`` on ``jobs`` workers (no more than there are tasks), each replaced when it dies or hangs.

    A task the grader could not grade (status "error": a dead zygote, a worker killed, a broken pipe, a kernel that
    would not start) is graded once more on a fresh worker, in a fresh zygote (a new one whenever none of the other
    workers is busy, and always when the old one died); if it fails again it is reported as not graded, both
    reasons given."""
    pending = deque(_order(tasks))
    first_failure: dict[str, str] = {}  # task id -> why its first try could not grade it
    sel = selectors.DefaultSelector()
    if len(tasks) > jobs:  # a worker gets a second task: warm the feedback exporter once, here, for every worker
        from .feedback import warm_feedback

        try:
            warm_feedback()
        except Exception:
            traceback.print_exc()  # a courtesy: the pages render cold

    def spawn(i: int) -> Worker:
        w = Worker(i, work, zygotes.live(), run)
        sel.register(w.results, selectors.EVENT_READ, w)
        return w

    workers: list[Worker] = []
    for i in range(min(jobs, len(tasks))):
        workers.append(spawn(i))

    def report(task: Task, result: Result, seconds: float) -> bool:
        """Hand ``result`` on, or queue its task once more (True) when it is a first failure."""
        if result.status == "error" and task.id not in first_failure:
            first_failure[task.id] = result.error or "no reason given"
            log(f"{task.student}/{task.notebook}: could not be graded ({result.error}); trying once more in a "
                "fresh zygote")
            pending.appendleft(task)
            return True
        if task.id in first_failure:
            if result.status == "error":
                result.error = f"{result.error}; on the first try: {first_failure[task.id]}"
            else:
                result.notes.insert(0, f"graded on a second try: the first could not grade it "
                                       f"({first_failure[task.id]})")
        on_result(result, seconds)
        return False

    def retire(w: Worker, reason: str) -> bool:
        """Stop ``w``; its task, if any, is reported as not graded (or queued again: True)."""
        sel.unregister(w.results)
        retried = False
        if w.task is not None:
            task, w.task = w.task, None
            retried = report(task, Result.failed(task, reason), time.monotonic() - w.started)
        w.kill()
        return retried

    def replace(w: Worker, retried: bool) -> None:
        """A fresh worker in place of the retired ``w``; after a failure (``retried``), in a fresh zygote when no
        other worker is busy (they are replaced too: their servers were forks of the old one)."""
        if retried and not any(other.task for other in workers if other is not w):
            restart("a fresh zygote for the second try", skip=w)
        else:
            workers[workers.index(w)] = spawn(w.index)

    def restart(why: str, skip: Worker | None = None) -> None:
        """Every worker stopped (a busy one's task reported or queued again), a fresh zygote, new workers."""
        log(why)
        for other in workers:
            if other is not skip:
                retire(other, "the zygote it used died")
        if not pending:
            return  # nothing left to grade: no zygote to warm up
        try:
            zygotes.fresh()
        except RuntimeError as exc:  # it did not start: nothing more can be graded in this run
            raise _NoZygote(str(exc)) from None
        workers[:] = [spawn(other.index) for other in workers]

    try:
        while pending or any(w.task for w in workers):
            if not zygotes.current.alive():
                restart(f"WARNING: the zygote died ({zygotes.current.death()}): starting a fresh one")
            for w in list(workers):  # attached to a zygote that died since (a fresh one took its place)
                if w.zygote is not zygotes.current and not w.zygote.alive():
                    replace(w, retire(w, "the zygote it used died"))
            for w in workers:
                if w.ready and w.task is None and pending:
                    w.send(pending.popleft())
            for key, _ in sel.select(timeout=1.0):
                w = key.data
                if w not in workers:
                    continue  # replaced while this turn's events were read
                try:
                    messages = w.read()
                except channel.ChannelError as exc:
                    replace(w, retire(w, f"the grading process sent something that is not a message ({exc})"))
                    continue
                if messages is None:
                    replace(w, retire(w, "the grading process exited unexpectedly (see the worker log)"))
                    continue
                for msg in messages:
                    if isinstance(msg, WorkerReady):
                        w.ready = True
                    elif isinstance(msg, Result) and w.task is not None:
                        task, seconds = w.task, time.monotonic() - w.started
                        w.task = None
                        if report(task, msg, seconds):  # a fresh worker (and zygote) for the second try
                            retire(w, "")
                            replace(w, True)
                            break
            now = time.monotonic()
            for w in list(workers):
                if w.task is not None and now - w.started > hard_limit:
                    replace(w, retire(w, f"grading this notebook took longer than {hard_limit:.0f} s and was "
                                         "stopped"))
    except _NoZygote as exc:
        for w in workers:
            if w.task is not None:
                retire(w, str(exc))
        while pending:  # not graded, each with why (a task tried before: both reasons)
            task = pending.popleft()
            first = f"; on the first try: {first_failure[task.id]}" if task.id in first_failure else ""
            on_result(Result.failed(task, f"no zygote to grade it in ({exc}){first}"), 0.0)
    finally:
        for w in workers:
            try:
                sel.unregister(w.results)
            except (KeyError, ValueError):
                pass
            w.close()


class LocalExecutor:
    """Grades a run's tasks on this machine: worker processes and one shared zygote, as many at once as the machine
    it is given allows (:mod:`autograder.run.machine`: the cgroup's CPU quota and memory).

    The "run" step of :func:`autograder.grade.grade`: :meth:`start` (the zygote's and the workers' imports overlap
    the parent's set-up), :meth:`run` (every task, each result to ``on_result`` as it comes), :meth:`close`. Another
    executor (Dask) offers the same three methods.

    ``jobs``: notebooks at once (None: as many as the CPU quota and the memory allow; never more than the memory
    allows). ``zygote``: a warm one lent by a process that grades many times (it started it, waited for it and
    closes it; this run attaches its workers and leaves it running), so that no run pays its warm-up again (8.8 s of
    CPU on the AVX2 machine). Each worker still gets a server of its own, which kills what its kernels left when the
    worker goes.
    """

    def __init__(self, jobs: int | None = None, zygote: SharedZygote | None = None):
        self.jobs = jobs
        self.kept = zygote  # a warm zygote its owner started and closes, lent to this run (see above)
        self.zygotes: Zygotes | None = None

    @property
    def zygote(self) -> SharedZygote | None:
        """The zygote this run's workers use now."""
        return self.zygotes.current if self.zygotes else None

    def start(self, work: Path) -> None:
        """The zygote, whose imports (torch: seconds) overlap the parent's set-up. The workers are forked by
        :meth:`run`, once the plan is made and the number of tasks known: they inherit the imports the plan needed
        (a worker that made its own spent ~1.7 s of CPU on them), and a run of one notebook forks one whatever ``-j``
        says."""
        self.work = work
        self.zygotes = Zygotes(work, self.kept, print)

    def run(self, tasks: list[Task], run: RunConfig, on_result: OnResult, log=print) -> None:
        if not tasks:
            self.close()  # a run with nothing to grade (all reused): its warm-up would be CPU for nothing
            return
        self.zygotes.log = log
        info = self.zygotes.current.wait_ready()
        floor = info.vm_mb + KERNEL_HEADROOM_MB
        if run.memory_mb < floor:
            raise GradingSetupError(
                f"--memory-limit {run.memory_mb} MB is below what a kernel needs to start here: the imports "
                f"alone map {info.vm_mb} MB of address space; use at least {floor} MB")
        check_isolation({**info.isolation, "permissions": run.permissions}, run.require_isolation, log)
        log(f"kernels warm (torch, labutils and the data imported once, in {info.seconds:.1f} s)")
        limits = read_limits()  # now: what the zygote and this process hold is in use
        size = machine.size_pool(limits, self.jobs, len(tasks), run.threads or None, run.memory_mb)
        log(size.describe(limits) + (
            f"\nWARNING: {size.task_memory_mb} MB per notebook is below the {machine.TASK_NEED_MB} MB an honest "
            "notebook of this lab may need: a notebook stopped there for memory is reported as not graded; give "
            f"the grader at least {limits.memory_mb + machine.TASK_NEED_MB - size.task_memory_mb} MB"
            if size.short and limits.memory_mb else ""))
        run = dataclasses.replace(run, data_dirs=info.data_dirs, cache_dir=info.cache_dir, threads=size.threads,
                                  task_memory_mb=size.task_memory_mb, memory_short=size.short)
        hard_limit = 2 * run.notebook_timeout + 180  # kernel + recheck + start-up + feedback: then it is stuck
        run_pool(tasks, run, size.jobs, self.work, self.zygotes, hard_limit, on_result, log)
        self.close()  # the reports that follow have the zygote's memory to themselves

    def close(self) -> None:
        if self.zygotes is not None:
            self.zygotes.close()
        self.zygotes = None
