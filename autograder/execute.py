"""nbgrader plug-ins: run a notebook in a sandboxed, pre-warmed kernel and re-run its hidden tests outside it.

- :class:`ZygoteKernelManager` starts each ipykernel as a fork of the zygote (:mod:`autograder.zygote`): torch and the
  data are already loaded, and the kernel confines itself (:mod:`autograder.sandbox`) before running a cell.
- :class:`SandboxedExecute` replaces nbgrader's ``Execute``: a per-cell and a per-notebook time limit, and a kernel
  that dies (``os._exit``, ``exit()``, the memory limit, a segfault) or will not stop fails the cell it was running
  and every later cell with a clear message instead of aborting the student's whole submission. Unexecuted test
  cells never count as passed. Then the hidden tests that passed inside the kernel are re-run in a fresh sandboxed
  process on pristine imports (:mod:`autograder.recheck`); a failure there is appended to the test cell as an error.
- :class:`RestoreCells` is nbgrader's ``OverwriteCells`` with deleted test cells put back (from the gradebook's source
  cells), robust to a student also deleting the cells around them.
- :class:`ScrubHiddenTests` keeps hidden-test code out of the feedback: a failed test shows its message only.

The worker sets :data:`CONTEXT` (where the task's files go, the zygote, the limits) before each notebook.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells
from traitlets import Integer

from . import sandbox

VERIFY_CALL = re.compile(r"""verify\(\s*["']([\w.-]+)["']\s*,\s*["'](\w+)["']\s*\)""")
HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)


@dataclass
class TaskContext:
    """Everything the plug-ins need to know about the notebook being graded; set by the worker."""

    zygote: object  # autograder.worker.Zygote
    task_dir: Path
    kernel_env: dict
    policy: dict  # sandbox.Policy fields shared by the kernel and the recheck
    threads: int = 1
    notebook_timeout: int = 300
    notes: list[str] = field(default_factory=list)  # for the student's JSON
    timings: dict = field(default_factory=dict)
    rechecks: list[dict] = field(default_factory=list)
    fatal: str | None = None  # why the grader itself could not grade this notebook


CONTEXT: TaskContext | None = None


def _context() -> TaskContext:
    if CONTEXT is None:
        raise RuntimeError("autograder.execute.CONTEXT is not set: these preprocessors run inside autograder.worker")
    return CONTEXT


# --- kernels forked from the zygote -----------------------------------------------------------------------------------


class ForkedKernelProcess:
    """Popen-like handle on a kernel the zygote forked (not our child: we poll with signal 0, the zygote reaps)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"kernel {self.pid} still running")
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)  # the kernel leads its own session: this reaches what it started too
        except OSError:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ZygoteProvisioner(LocalProvisioner):
    """Launches the kernel by asking the zygote to fork one, confined to the task's folder."""

    async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
        ctx = _context()
        argv = cmd[cmd.index("-f"):] if "-f" in cmd else cmd[1:]
        conn_file = argv[argv.index("-f") + 1] if "-f" in argv else None
        policy = dict(ctx.policy)
        policy["bind_ports"] = [int(self.connection_info[k]) for k in
                                ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")]
        policy["read_files"] = [*policy.get("read_files", []), *([conn_file] if conn_file else [])]
        cwd = str(kwargs.get("cwd") or ctx.task_dir)
        policy["write_dirs"] = [*policy.get("write_dirs", []), cwd]
        reply = ctx.zygote.request({
            "op": "kernel", "argv": argv, "cwd": cwd, "env": ctx.kernel_env, "policy": policy,
            "log": str(ctx.task_dir / "kernel.log"), "threads": ctx.threads,
        })
        if "pid" not in reply:
            raise RuntimeError(f"the zygote could not start a kernel: {reply}")
        self.process = ForkedKernelProcess(reply["pid"])
        self.pid = self.pgid = reply["pid"]
        self.cwd = cwd
        return self.connection_info


class ZygoteKernelManager(AsyncKernelManager):
    async def _async_pre_start_kernel(self, **kw):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or str(uuid.uuid4())
            self.provisioner = ZygoteProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        return await super()._async_pre_start_kernel(**kw)


# --- execution ---------------------------------------------------------------------------------------------------------


class KernelStartError(RuntimeError):
    """The kernel died before running any cell: a problem of the grading set-up, not of the submission."""


def _error(ename: str, message: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


def has_error(cell: NotebookNode) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


class SandboxedExecute(Execute):
    """nbgrader's Execute, hardened: see the module docstring."""

    notebook_timeout = Integer(300, help="seconds for the whole notebook (the recheck gets as much again)").tag(
        config=True
    )
    output_limit = Integer(2_000_000, help="characters of output kept per cell; the rest is dropped").tag(config=True)

    def __init__(self, **kw):
        kw["kernel_manager_class"] = ZygoteKernelManager
        kw.setdefault("shutdown_kernel", "immediate")  # a finished (or stuck) kernel is killed, not asked nicely
        super().__init__(**kw)

    def preprocess(self, nb, resources, km=None):
        from nbclient.client import NotebookClient

        ctx = _context()
        self._output_used: dict[int, int] = {}
        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        cell_limit = self._cell_limit = self.timeout
        started = time.monotonic()
        deadline = started + self.notebook_timeout
        stop_reason, stopped_at, timed_out, started_cells = None, None, set(), 0
        try:
            with self.setup_kernel():
                info = self.wait_for_reply(self.kc.kernel_info())
                if info is not None and "language_info" in info["content"]:
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                for index, cell in enumerate(self.nb.cells):
                    if cell.cell_type != "code" or not cell.source.strip():
                        continue
                    left = deadline - time.monotonic()
                    if left < 1:
                        stop_reason = f"not run: the notebook used up its {self.notebook_timeout} s time limit"
                        stopped_at = index
                        break
                    self.timeout = int(max(1, min(cell_limit, left)))
                    started_cells += 1
                    try:
                        self.preprocess_cell(cell, resources, index)
                    except DeadKernelError:
                        why = self._death_reason()
                        cell.outputs.append(_error("KernelDied", f"the kernel died while running this cell: {why}"))
                        stop_reason = f"not run: the kernel died in code cell {self._code_number(index)} ({why})"
                        stopped_at = index + 1
                        break
                    except CellTimeoutError:
                        cell.outputs.append(_error(
                            "CellTimeoutError",
                            f"this cell ran past its {self.timeout} s limit and did not stop when interrupted",
                        ))
                        stop_reason = (f"not run: code cell {self._code_number(index)} ran past its time limit and "
                                       "would not stop")
                        stopped_at = index + 1
                        break
                    if any(o.get("ename") == "CellTimeoutError" for o in cell.outputs):
                        timed_out.add(index)
                        for o in cell.outputs:
                            if o.get("ename") == "CellTimeoutError":
                                o["evalue"] = f"this cell ran past its {self.timeout} s limit and was interrupted"
                                o["traceback"] = [f"CellTimeoutError: {o['evalue']}"]
                    if utils.is_grade(cell):
                        _stderr_is_not_failure(cell)
        except Exception as exc:  # the client broke mid-way: the rest of the notebook is not gradable
            if not started_cells:  # no student code ran yet: the grader (limits, environment) is at fault
                ctx.fatal = (f"the kernel did not start ({type(exc).__name__}: {exc}); is --memory-limit "
                             f"({ctx.policy.get('memory_mb')} MB) too small?")
                raise KernelStartError(ctx.fatal) from exc
            stop_reason = f"not run: the notebook could not be executed ({type(exc).__name__}: {exc})"
            stopped_at = 0 if stopped_at is None else stopped_at
        ctx.timings["kernel_s"] = round(time.monotonic() - started, 2)
        if stop_reason is not None:
            ctx.notes.append(stop_reason.replace("not run: ", ""))
            for cell in self.nb.cells[stopped_at:]:
                if cell.cell_type == "code" and cell.source.strip() and not has_error(cell):
                    cell.outputs = [*cell.get("outputs", []), _error("NotRun", stop_reason)]
        self._recheck(resources, timed_out, stopped_at)
        return self.nb, self.resources

    def output(self, outs, msg, display_id, cell_index):
        """Keep at most ``output_limit`` characters of a cell's output (errors always): a cell printing in a loop
        must not fill the grader's memory before its time limit stops it."""
        if msg.get("msg_type") == "error":
            return super().output(outs, msg, display_id, cell_index)
        content = msg.get("content", {})
        size = len(content.get("text", "")) + sum(len(str(v)) for v in content.get("data", {}).values())
        used = self._output_used.get(cell_index, 0)
        self._output_used[cell_index] = used + size
        if used + size <= self.output_limit:
            return super().output(outs, msg, display_id, cell_index)
        if used <= self.output_limit:  # the first message over the limit: say so, once
            outs.append(NotebookNode(output_type="stream", name="stdout",
                                     text=f"\n... output cut by the grader after {self.output_limit:,} characters\n"))
        return None

    def _death_reason(self) -> str:
        ctx = _context()
        log = ctx.task_dir / "kernel.log"
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
        if any(s in tail for s in ("MemoryError", "Cannot allocate memory", "bad_alloc", "DefaultCPUAllocator")):
            return f"it ran out of memory: the grading limit is {ctx.policy.get('memory_mb')} MB"
        return "the process exited: os._exit(), exit(), quit(), a crash, or the memory or CPU limit"

    def _code_number(self, index: int) -> int:
        """1-based position of cell ``index`` among the notebook's code cells, as a student would count them."""
        return sum(1 for c in self.nb.cells[: index + 1] if c.cell_type == "code")

    # --- hidden tests outside the kernel -------------------------------------------------------------------------------

    def _recheck(self, resources, timed_out: set[int], stopped_at: int | None) -> None:
        ctx = _context()
        sources = _gradebook_sources(resources)
        targets = {}
        for index, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or not utils.is_grade(cell):
                continue
            grade_id = cell.metadata.nbgrader.get("grade_id")
            calls = VERIFY_CALL.findall(sources.get(grade_id, ""))
            if calls and not has_error(cell):
                targets[index] = (grade_id, calls)
        if not targets:
            return
        last = max(targets)
        cells = []
        for index, cell in enumerate(self.nb.cells[: last + 1]):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            if index in targets:
                grade_id, calls = targets[index]
                cells.append({"index": index, "grade_id": grade_id, "checks": [list(c) for c in calls]})
            elif utils.is_grade(cell):
                continue  # the instructor's tests: not re-run, only their hidden checks (above)
            else:
                skip = index in timed_out or (stopped_at is not None and index >= stopped_at)
                cells.append({"index": index, "source": cell.source, "run": not skip})
        work = ctx.task_dir / "recheck"
        for sub in ("cwd", "home", "tmp"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        spec_path = work / "spec.json"
        spec_path.write_text(json.dumps({"cells": cells, "cell_timeout": self.timeout_cell_limit()}))
        env = dict(ctx.kernel_env, HOME=str(work / "home"), TMPDIR=str(work / "tmp"), MPLBACKEND="Agg")
        policy = dict(ctx.policy)
        policy["write_dirs"] = [str(work / "cwd"), str(work / "home"), str(work / "tmp")]
        policy["read_files"] = [*policy.get("read_files", []), str(spec_path)]
        started = time.monotonic()
        reply = ctx.zygote.request({
            "op": "recheck", "spec": str(spec_path), "cwd": str(work / "cwd"), "env": env, "policy": policy,
            "log": str(work / "recheck.log"), "timeout": self.notebook_timeout, "threads": ctx.threads,
        }, timeout=self.notebook_timeout + 30)
        ctx.timings["recheck_s"] = round(time.monotonic() - started, 2)
        results: dict[str, list[dict]] = {}
        for line in reply.get("lines", []):
            try:
                item = json.loads(line)
                results.setdefault(str(item["grade_id"]), []).append(item)
            except (ValueError, KeyError, TypeError):
                continue  # not a result line: ignore (and the test stays unconfirmed below)
        status = reply.get("status")
        for index, (grade_id, calls) in targets.items():
            got = {r.get("function"): r for r in results.get(grade_id, [])}
            for _, function_name in calls:
                item = got.get(function_name)
                if item is None:
                    why = (f"did not finish within {self.notebook_timeout} s" if status == "timeout"
                           else "stopped before it finished (the re-run of the notebook's cells exited or crashed)")
                    message = f"the hidden test of {function_name} {why}"
                elif item.get("passed") is True:
                    ctx.rechecks.append({"grade_id": grade_id, "function": function_name, "passed": True})
                    continue
                else:
                    message = str(item.get("message", "hidden test failed"))
                ctx.rechecks.append({"grade_id": grade_id, "function": function_name, "passed": False,
                                     "message": message})
                self.nb.cells[index].outputs.append(_error("AssertionError", message))

    def timeout_cell_limit(self) -> int:
        return int(getattr(self, "_cell_limit", None) or self.timeout or 60)


def _stderr_is_not_failure(cell: NotebookNode) -> None:
    """nbgrader scores a test cell 0 if it printed to stderr; a warning is not a failed test, so show it as output."""
    for output in cell.outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            output["name"] = "stdout"
            output["text"] = "".join("[stderr] " + line for line in output["text"].splitlines(True))


def _gradebook_sources(resources) -> dict[str, str]:
    """grade_id -> source of every source cell of this notebook, from the gradebook (never from the submission)."""
    nbg = resources["nbgrader"]
    with Gradebook(nbg["db_url"]) as gb:
        try:
            notebook = gb.find_notebook(nbg["notebook"], nbg["assignment"])
        except MissingEntry:
            return {}
        return {cell.name: cell.source for cell in notebook.source_cells}


# --- sanitising and feedback ---------------------------------------------------------------------------------------------


class NormalizeMetadata(NbGraderPreprocessor):
    """First of all: every cell's nbgrader metadata becomes the gradebook's for its grade_id; metadata a student
    invented, broke or duplicated is dropped. nbgrader refuses a notebook whose metadata does not validate, which
    would cost the student the whole notebook for a slip of the editor."""

    def preprocess(self, nb, resources):
        canonical = _canonical_metadata(resources)
        seen = set()
        for cell in nb.cells:
            meta = cell.get("metadata")
            if not isinstance(meta, dict) or "nbgrader" not in meta:
                continue
            nbg = meta["nbgrader"]
            grade_id = nbg.get("grade_id") if isinstance(nbg, dict) else None
            if not isinstance(grade_id, str) or grade_id not in canonical or grade_id in seen:
                del meta["nbgrader"]
                continue
            seen.add(grade_id)
            meta["nbgrader"] = NotebookNode(dict(canonical[grade_id]))
        return nb, resources


def _canonical_metadata(resources) -> dict[str, dict]:
    nbg = resources["nbgrader"]
    with Gradebook(nbg["db_url"]) as gb:
        try:
            notebook = gb.find_notebook(nbg["notebook"], nbg["assignment"])
        except MissingEntry:
            return {}
        grades = {c.name: c.max_score for c in notebook.grade_cells}
        tasks = {c.name: c.max_score for c in notebook.task_cells}
        solutions = {c.name for c in notebook.solution_cells}
        out = {}
        for cell in notebook.source_cells:
            meta = {"grade": cell.name in grades, "grade_id": cell.name, "locked": bool(cell.locked),
                    "schema_version": 3, "solution": cell.name in solutions, "task": cell.name in tasks}
            if cell.name in grades or cell.name in tasks:
                meta["points"] = float(grades.get(cell.name, tasks.get(cell.name)))
            out[cell.name] = meta
        return out


class RestoreCells(OverwriteCells):
    """OverwriteCells that also puts back deleted test cells, after the nearest earlier cell that survived."""

    add_missing_cells = True

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        source_cells = source_nb.source_cells
        order = [cell.name for cell in source_cells]
        max_scores = {cell.name: cell.max_score for cell in source_nb.grade_cells}
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for position, source_cell in enumerate(source_cells):
            name = source_cell.name
            if name not in max_scores or name in _present_ids(nb):
                continue
            self.log.warning("Missing test cell %s: putting back the instructor's version", name)
            cell = self.missing_cell_transform(source_cell, max_scores[name], is_solution=name in solution_ids)
            present = _present_ids(nb)
            insert_at = 0
            for earlier in reversed(order[:position]):
                if earlier in present:
                    insert_at = present[earlier] + 1
                    break
            nb.cells.insert(insert_at, cell)
        return nb, resources


def _present_ids(nb) -> dict[str, int]:
    return {cell.metadata["nbgrader"]["grade_id"]: i for i, cell in enumerate(nb.cells)
            if cell.metadata.get("nbgrader", {}).get("grade_id")}


class ScrubHiddenTests(NbGraderPreprocessor):
    """Feedback shows a failed test's message, not the hidden test's code or a traceback into grader code."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell):
            cell.source = HIDDEN_REGION.sub("# (hidden tests ran here)\n", cell.source)
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
