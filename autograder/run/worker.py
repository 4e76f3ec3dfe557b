"""One local grading process: takes tasks and grades each with :func:`autograder.run.task.grade_task`.

Forked from the grader by :mod:`autograder.run.pool`, one per ``-j``, once the run's plan is made: it inherits what
the grader imported to make that plan (nbgrader, nbconvert, nbformat: ~1.7 s of CPU that a worker started from the
command line spent again, each) and, before anything else, leaves the grader's state behind (:func:`_own_process`).
Over :mod:`autograder.channel`: the first message on its task pipe is the run's :class:`~autograder.channel.RunConfig`,
then one :class:`~autograder.channel.Task` per line; back on its result pipe, :class:`~autograder.channel.WorkerReady`
once its zygote answers, then one :class:`~autograder.channel.Result` per task (everything else goes to its log).
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import os
import sys
import traceback
from pathlib import Path

from autograder import channel
from autograder.channel import Result, RunConfig, Task, WorkerReady
from autograder.sandbox.client import connect
from autograder.sandbox.policy import die_with_parent
from .scratch import passable_folder
from .task import grade_task

NAME = "looplab-worker"  # its name in ps -o comm and /proc/PID/comm (its command line is the grader's)
_PR_SET_NAME = 15
_FIRST_FREE_FD = 10


def _own_process(tasks: int, results: int, log: int, zygote: int, grader: int) -> tuple[int, int, int]:
    """Make this fork of the grader a worker of its own: a session of its own (the pool kills it with everything
    below it), dead with the grader, its log as stdout and stderr, and no file of the grader's left open (another
    worker's pipe held here would keep that worker from seeing its end). The grader's objects are frozen, never
    collected here: one that owned a file descriptor closed here must not close a reused number later.
    Returns (tasks, results, zygote), moved to the descriptors 3, 4 and 5."""
    gc.freeze()
    os.setsid()
    die_with_parent(grader)
    ctypes.CDLL(None).prctl(_PR_SET_NAME, NAME.encode(), 0, 0, 0)
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, _FIRST_FREE_FD) for fd in (log, tasks, results, zygote)]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for target, fd in ((1, moved[0]), (2, moved[0]), (3, moved[1]), (4, moved[2]), (5, moved[3])):
        os.dup2(fd, target)
    os.closerange(6, os.sysconf("SC_OPEN_MAX"))
    return 3, 4, 5


def serve(tasks_fd: int, results_fd: int, log_fd: int, zygote_fd: int, grader: int, log_dir: Path) -> None:
    """The worker's life, in the forked child: its tasks until the grader closes the pipe."""
    tasks_fd, results_fd, zygote_fd = _own_process(tasks_fd, results_fd, log_fd, zygote_fd, grader)
    os.chdir(log_dir)
    sys.stdout = sys.stderr
    results = os.fdopen(results_fd, "wb")
    requests = os.fdopen(tasks_fd, "rb")
    try:
        run = channel.receive(requests, RunConfig)
    except EOFError:
        return  # the parent had nothing for us
    os.environ["JUPYTER_RUNTIME_DIR"] = str(passable_folder(Path(run.work_dir) / f"runtime-{os.getpid()}"))
    zygote = connect(run, zygote_fd)
    channel.send(results, WorkerReady(zygote_s=round(zygote.startup_s, 2)))
    for line in requests:
        task = channel.decode(line, Task)
        try:
            result = grade_task(task, run, zygote)
        except Exception as exc:
            result = Result.failed(task, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        channel.send(results, result)
        if not zygote.alive():
            break  # its line to the zygote is gone for good: the pool starts a fresh worker (and zygote), never a
            #        second zygote here beside the shared one (a second copy of torch where memory may be short)
    zygote.close()
