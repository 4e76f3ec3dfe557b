"""Run a notebook in a sandboxed, pre-warmed kernel (its hidden tests are re-run outside it next:
:mod:`autograder.run.recheck`).

- :class:`SandboxedExecute` replaces nbgrader's ``Execute``: a per-cell and a per-notebook time limit, and a kernel
  that dies (``os._exit``, ``exit()``, the memory limit, a segfault) or will not stop fails the cell it was running
  and every later cell with a clear message instead of aborting the student's whole submission. Unexecuted test
  cells never count as passed. Which cells timed out and where the run stopped is kept in the task's context for
  the recheck. Its kernels are forks of the zygote (:mod:`autograder.sandbox.kernels`).
- The preprocessors that clean a submission before it runs are in :mod:`autograder.course.cells`.

:func:`autograder.run.task.grade_task` sets the task's context (:mod:`autograder.sandbox.context`: where its files go, the
zygote, the limits) around each notebook.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import Execute
from traitlets import Integer

from autograder.hidden.plan import has_error
from autograder.sandbox.context import current as _context
from autograder.sandbox.kernels import KERNEL_START_TRIES, ZygoteKernelManager
from autograder.untrusted import shown

from .budget import CHARGED, OutputBudget, message_chars


# --- execution ---------------------------------------------------------------------------------------------------------


class KernelStartError(RuntimeError):
    """The kernel died before running any cell: a problem of the grading set-up, not of the submission."""


class MemoryShortError(RuntimeError):
    """The kernel or the recheck was stopped at its task's memory limit on a machine whose share per notebook is below
    what an honest notebook may need (:data:`autograder.run.machine.TASK_NEED_MB`): the machine's doing, not
    evidence about the work, so the notebook is not graded rather than given a 0."""


def _task_limit(ctx) -> int:
    """The real memory a task may hold (its cgroup's limit), in MB."""
    return ctx.policy.task_memory_mb or ctx.policy.memory_mb


def _memory_short(ctx, what: str) -> MemoryShortError:
    from .machine import TASK_NEED_MB

    ctx.fatal = (f"{what} was stopped at this machine's memory limit of {_task_limit(ctx)} MB per notebook, "
                 f"less than the {TASK_NEED_MB} MB an honest notebook of this lab may need: give the grader more "
                 "memory")
    return MemoryShortError(ctx.fatal)


def _error(ename: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


def _last_error(ctx) -> str:
    """The last error line of the task's kernel log, as ``"; it said: ..."`` (or "")."""
    try:
        lines = (ctx.task_dir / "kernel.log").read_text(errors="replace").splitlines()
    except OSError:
        return ""
    said = [line.strip() for line in lines if re.match(r"\s*\w*(Error|Exception)\b", line)]
    return f"; it said: {said[-1][:300]}" if said else ""


@dataclass
class _Run:
    """One execution of the notebook: where it stands, and why it stopped early (``stop_reason``, at ``stopped_at``)."""

    started: float
    last_test: int
    cell_limit: int
    started_cells: int = 0
    timed_out: set[int] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=lambda: {"cells_s": 0.0, "tests_s": 0.0})
    stop_reason: str | None = None
    stopped_at: int | None = None
    oom_killed: bool = False  # the kernel died at its task's memory limit

    def stop(self, reason: str, at: int) -> None:
        self.stop_reason, self.stopped_at = reason, at


class SandboxedExecute(Execute):
    """nbgrader's Execute, hardened: see the module docstring."""

    notebook_timeout = Integer(300, help="seconds for the whole notebook (the recheck gets as much again)").tag(
        config=True
    )
    output_limit = Integer(2_000_000, help="characters of output kept per cell; the rest is dropped").tag(config=True)
    notebook_output_limit = Integer(5_000_000, help="characters of output kept for the whole notebook, errors and "
                                    "tracebacks included (the lab's notebooks with every output are under 2 MB)").tag(
        config=True)

    def __init__(self, **kw):
        kw["kernel_manager_class"] = ZygoteKernelManager
        kw.setdefault("shutdown_kernel", "immediate")  # a finished (or stuck) kernel is killed, not asked nicely
        super().__init__(**kw)

    def preprocess(self, nb, resources, km=None):
        """Run the notebook; a kernel that died before any cell ran (a problem of this machine, not of the
        submission) is started again, and only after :data:`KERNEL_START_TRIES` such deaths is the notebook not
        graded, with the kernel's last words."""
        for attempt in range(1, KERNEL_START_TRIES + 1):
            try:
                return self._run_notebook(nb, resources, km)
            except KernelStartError as exc:
                if attempt == KERNEL_START_TRIES:
                    raise
                print(f"kernel start, try {attempt} of {KERNEL_START_TRIES}: {shown(exc)}; trying again",
                      file=sys.stderr)
                _context().fatal = None

    def _run_notebook(self, nb, resources, km=None):
        from nbclient.client import NotebookClient

        ctx = _context()
        self.budget = OutputBudget(self.output_limit, self.notebook_output_limit)
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        run = _Run(started=time.monotonic(), last_test=last_graded_code_cell(self.nb), cell_limit=self.timeout)
        try:
            with self.setup_kernel():
                info = self.wait_for_reply(self.kc.kernel_info())
                ctx.timings["kernel_start_s"] = round(time.monotonic() - run.started, 2)
                if info is not None and "language_info" in info["content"]:
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                self._run_cells(resources, run)
        except Exception as exc:  # the client broke mid-way: the rest of the notebook is not gradable
            if not run.started_cells:  # no student code ran yet: the grader (limits, environment) is at fault
                ctx.fatal = (f"the kernel did not start ({type(exc).__name__}: {exc}{_last_error(ctx)}); is "
                             f"--memory-limit ({ctx.policy.memory_mb} MB) too small?")
                raise KernelStartError(ctx.fatal) from exc
            run.stop(f"not run: the notebook could not be executed ({type(exc).__name__}: {exc})",
                     0 if run.stopped_at is None else run.stopped_at)
        if run.oom_killed and ctx.memory_short:
            raise _memory_short(ctx, "the kernel")
        self._account(ctx, run)
        return self.nb, self.resources

    def _run_cells(self, resources, run: _Run) -> None:
        """Each code cell up to the last test, each within its limit and what is left of the notebook's."""
        deadline = run.started + self.notebook_timeout
        for index, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            if index > run.last_test:
                return  # nothing graded runs after the last test cell: see skip_after_last_test
            left = deadline - time.monotonic()
            if left < 1:
                return run.stop(f"not run: the notebook used up its {self.notebook_timeout} s time limit", index)
            self.timeout = int(max(1, min(run.cell_limit, left)))
            run.started_cells += 1
            cell_started = time.monotonic()
            stop = self._run_cell(cell, resources, index, run)
            if stop is not None:
                return run.stop(stop, index + 1)
            run.seconds["tests_s" if utils.is_grade(cell) else "cells_s"] += time.monotonic() - cell_started
            if utils.is_grade(cell):
                _stderr_is_not_failure(cell)

    def _run_cell(self, cell, resources, index: int, run: _Run) -> str | None:
        """One cell; why the notebook stops here (the kernel died, or the cell would not stop), or None."""
        try:
            self.preprocess_cell(cell, resources, index)
        except DeadKernelError:
            why, run.oom_killed = self._death_reason()
            cell.outputs.append(_error("KernelDied", f"the kernel died while running this cell: {why}"))
            return f"not run: the kernel died in code cell {self._code_number(index)} ({why})"
        except CellTimeoutError:
            cell.outputs.append(_error(
                "CellTimeoutError", f"this cell ran past its {self.timeout} s limit and did not stop when interrupted"))
            return f"not run: code cell {self._code_number(index)} ran past its time limit and would not stop"
        if any(o.get("ename") == "CellTimeoutError" for o in cell.outputs):  # interrupted in time: the run goes on
            run.timed_out.add(index)
            for o in cell.outputs:
                if o.get("ename") == "CellTimeoutError":
                    o["evalue"] = f"this cell ran past its {self.timeout} s limit and was interrupted"
                    o["traceback"] = [f"CellTimeoutError: {o['evalue']}"]
        return None

    def _account(self, ctx, run: _Run) -> None:
        """The run's timings and notes in the task's context; the cells it did not reach say why."""
        ctx.timings["kernel_s"] = round(time.monotonic() - run.started, 2)
        ctx.timings.update({k: round(v, 2) for k, v in run.seconds.items()})
        skipped = skip_after_last_test(self.nb, run.last_test)
        if skipped:
            ctx.timings["cells_skipped"] = skipped
        if self.budget.notebook_spent:
            ctx.notes.append(f"output beyond the notebook's {self.notebook_output_limit:,} characters was dropped")
        if run.stop_reason is not None:
            ctx.notes.append(run.stop_reason.replace("not run: ", ""))
            for cell in self.nb.cells[run.stopped_at:run.last_test + 1]:  # those after it say why they were skipped
                if cell.cell_type == "code" and cell.source.strip() and not has_error(cell):
                    cell.outputs = [*cell.get("outputs", []), _error("NotRun", run.stop_reason)]
        ctx.timed_out, ctx.stopped_at = run.timed_out, run.stopped_at  # what the recheck leaves out (.recheck)
        ctx.failed_in_kernel = {cell.metadata["nbgrader"]["grade_id"] for cell in self.nb.cells
                                if cell.cell_type == "code" and utils.is_grade(cell) and has_error(cell)}

    def process_message(self, msg, cell, cell_index):
        """Charge every output, error and widget message to the notebook's :class:`~.budget.OutputBudget` before
        nbclient keeps it: a cell printing in a loop, or a notebook raising huge exceptions, must not fill the
        grader's memory and OUT before its time limit stops it. An error is cut, never dropped."""
        kind = msg.get("msg_type")
        content = msg.get("content", {})
        if kind == "error":
            self.budget.trim_error(content, cell_index)
        elif kind == "clear_output":
            self.budget.cleared(cell_index)
        elif kind in CHARGED and not self.budget.take(cell_index, message_chars(msg)):
            if self.budget.first_cut(cell_index):  # said once per cell
                cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=(
                    f"\n... output cut by the grader: more than {self.output_limit:,} characters in this cell or "
                    f"{self.notebook_output_limit:,} in the notebook\n")))
            return None
        return super().process_message(msg, cell, cell_index)

    def on_cell_executed(self, **kwargs):
        """nbgrader appends the execute reply's error when no error output has its name (a timeout): it is cut and
        charged like every other, and one already recorded (under its cut name) is not appended twice."""
        reply, cell = kwargs.get("execute_reply"), kwargs["cell"]
        content = (reply or {}).get("content", {})
        if content.get("status") == "error":
            if self.budget.is_recorded(content, cell.outputs):
                content["ename"] = next(o.ename for o in cell.outputs if o.get("output_type") == "error"
                                        and self.budget.is_recorded(content, [o]))
            else:
                self.budget.trim_error(content, kwargs["cell_index"])
        return super().on_cell_executed(**kwargs)

    def _death_reason(self) -> tuple[str, bool]:
        """Why the kernel died, and whether the OOM killer took it at its task's memory limit."""
        from autograder.sandbox import isolation

        ctx = _context()
        if ctx.kernel_pids and isolation.oom_killed(f"task-{ctx.kernel_pids[-1]}"):
            return f"it ran out of memory: a notebook may hold {_task_limit(ctx)} MB here", True
        log = ctx.task_dir / "kernel.log"
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        if any(s in tail for s in ("MemoryError", "Cannot allocate memory", "bad_alloc", "DefaultCPUAllocator")):
            return f"it ran out of memory: the grading limit is {ctx.policy.memory_mb} MB", False
        return "the process exited: os._exit(), exit(), quit(), a crash, or the memory or CPU limit", False

    def _code_number(self, index: int) -> int:
        """1-based position of cell ``index`` among the notebook's code cells, as a student would count them."""
        return sum(1 for c in self.nb.cells[: index + 1] if c.cell_type == "code")



SKIPPED = "[grader] not run while grading: no grade depends on a cell after the last test\n"  # short: formgrader cuts


def last_graded_code_cell(nb) -> int:
    """Index of the notebook's last graded code cell; -1 when it has none."""
    graded = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and utils.is_grade(cell)]
    return max(graded, default=-1)


def skip_after_last_test(nb, last_test: int) -> int:
    """Mark the code cells after ``last_test`` as not run by the grader (a stream output saying why); how many.

    Grading stops at the last test cell: the cells after it (throughput measurements, crash demonstrations, long
    comparisons) cannot change any score, and they were most of the grading time of labs 5, 7 and 8.
    """
    skipped = 0
    for cell in nb.cells[last_test + 1:]:
        if cell.cell_type == "code" and cell.source.strip() and not cell.get("outputs"):
            cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=SKIPPED)]
            skipped += 1
    return skipped


def _stderr_is_not_failure(cell: NotebookNode) -> None:
    """nbgrader scores a test cell 0 if it printed to stderr; a warning is not a failed test, so show it as output."""
    for output in cell.outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            output["name"] = "stdout"
            output["text"] = "".join("[stderr] " + line for line in output["text"].splitlines(True))
