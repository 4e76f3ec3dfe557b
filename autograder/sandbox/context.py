"""The notebook being graded, as the nbgrader plug-ins see it: set by :func:`autograder.run.task.grade_task` around one
notebook, read by the executor (:mod:`autograder.run.execute`) and the kernel launcher (:mod:`autograder.sandbox.kernels`).

nbgrader builds those plug-ins itself from class names, so they cannot be handed the task: they read it here.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from labutils.verdict import Verdict

from .policy import Policy


@dataclass
class TaskContext:
    """Everything the plug-ins need to know about the notebook being graded."""

    zygote: object  # autograder.sandbox.client.Zygote
    task_dir: Path
    kernel_env: dict
    policy: Policy  # shared by the kernel and the recheck; each adds its own folders
    threads: int = 1
    notebook_timeout: int = 300
    notes: list[str] = field(default_factory=list)  # for the student's JSON
    timings: dict[str, float] = field(default_factory=dict)
    fatal: str | None = None  # why the grader itself could not grade this notebook
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # grade_id -> the recheck's verdict on that test cell
    timed_out: set[int] = field(default_factory=set)  # the cells that ran out of time in the kernel
    stopped_at: int | None = None  # the cell where the kernel's run stopped (it died, or the notebook's time ran out)
    failed_in_kernel: set[str] = field(default_factory=set)  # graded cells with an error when the kernel ran them
    memory_short: bool = False  # the task's memory share is below an honest notebook's need: its OOM is the machine's
    kernel_pids: list[int] = field(default_factory=list)  # as the zygote forked them: each names its task cgroup


_CURRENT: TaskContext | None = None


def current() -> TaskContext:
    if _CURRENT is None:
        raise RuntimeError("no task is being graded: these plug-ins run inside autograder.run.task.grade_task")
    return _CURRENT


@contextmanager
def grading(ctx: TaskContext):
    """``ctx`` is the task being graded inside the ``with``."""
    global _CURRENT
    _CURRENT = ctx
    try:
        yield ctx
    finally:
        _CURRENT = None
