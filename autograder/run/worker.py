"""One local grading process: takes tasks and grades each with :func:`autograder.run.task.grade_task`.

Started by :mod:`autograder.run.pool`, one per ``-j``. Over :mod:`autograder.channel`: the first message on stdin is the
run's :class:`~autograder.channel.RunConfig`, then one :class:`~autograder.channel.Task` per line; back on the
original stdout, :class:`~autograder.channel.WorkerReady` once its zygote answers, then one
:class:`~autograder.channel.Result` per task (everything else goes to stderr, which the pool keeps as a log).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

from autograder import channel
from autograder.channel import Result, RunConfig, Task, WorkerReady
from autograder.course.nbgrader_setup import prepare_tools
from autograder.sandbox.client import connect
from autograder.sandbox.policy import die_with_parent
from .scratch import passable_folder


def _number(flag: str) -> int | None:
    """The pool's ``FLAG N``: ``--zygote-fd`` (the socket to the run's shared zygote) and ``--parent`` (the grader)."""
    args = sys.argv[1:]
    return int(args[args.index(flag) + 1]) if flag in args else None


def main() -> None:
    die_with_parent(_number("--parent"))  # a grader killed with SIGKILL takes its workers along
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    prepare_tools()
    from .task import grade_task, warm_feedback  # nbgrader and nbconvert: imported while the parent prepares

    requests = os.fdopen(os.dup(0), "rb")
    try:
        run = channel.receive(requests, RunConfig)
    except EOFError:
        return  # the parent had nothing for us
    os.environ["JUPYTER_RUNTIME_DIR"] = str(passable_folder(Path(run.work_dir) / f"runtime-{os.getpid()}"))
    zygote = connect(run, _number("--zygote-fd"))
    channel.send(results, WorkerReady(zygote_s=round(zygote.startup_s, 2)))
    for graded, line in enumerate(requests):
        task = channel.decode(line, Task)
        if graded == 1:  # a worker with more than one task: every later feedback page renders warm
            try:
                warm_feedback()
            except Exception:
                traceback.print_exc()  # a courtesy: the pages render cold
        if not zygote.alive():
            zygote.close()
            zygote = connect(run)  # the shared zygote's line is gone for good: a private one
        try:
            result = grade_task(task, run, zygote)
        except Exception as exc:
            result = Result.failed(task, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        channel.send(results, result)
    zygote.close()


if __name__ == "__main__":
    main()
