"""Grade one (student, notebook): :func:`grade_task` turns a :class:`~autograder.channel.Task` into a
:class:`~autograder.channel.Result`, whatever runs it (a local worker process, a Dask worker).

Each task gets its own course folder with a copy of the instructor's gradebook (so tasks never share a SQLite file
and a student's notebook never sees the real gradebook), runs nbgrader's Autograde with the plug-ins of
:mod:`autograder.run.execute` (kernels forked from ``zygote``, sandboxed), reads the scores back, writes the HTML
feedback, and kills whatever the student's code left running.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import time
import traceback
from pathlib import Path

from labutils import exercises
from labutils.verdict import BY_HAND, BY_NOTEBOOK, Verdict

from autograder import layout, process
from autograder.course import display
from autograder.sandbox import context

from . import execute, recheck
from .feedback import generate_feedback
from autograder.channel import CellScore, Result, RunConfig, Task
from autograder.layout import ASSIGNMENT
from autograder.course.cells import NormalizeMetadata, RestoreCells, in_cell_order
from autograder.course.nbgrader_setup import nbgrader_config, run_converter, sqlite_url
from autograder.sandbox.client import Zygote, ZygoteError, base_policy, kernel_env

RENDER_S = 30.0  # for the feedback page of one notebook (0.3-0.6 s measured; nbconvert took 105 s on hostile math)


def grade_task(task: Task, run: RunConfig, zygote: Zygote) -> Result:
    """Autograde one student's notebook; its scores, messages, notes and timings. Never raises for a problem of the
    submission; a problem of the grader is a Result with status "error" and the reason."""
    started = time.monotonic()
    scratch_gradebooks_skip_fsync(run.work_dir)
    task_dir = layout.task_dir(run.work_dir, task.id)
    course = _course_folder(task, run, task_dir)
    setup_s = time.monotonic() - started
    home, tmp = task_dir / "home", task_dir / "tmp"
    policy = base_policy(run)
    policy = dataclasses.replace(policy, write_dirs=[*policy.write_dirs, str(home), str(tmp)],
                                 own_paths=[str(home), str(tmp)])
    ctx = context.TaskContext(zygote=zygote, task_dir=task_dir, kernel_env=kernel_env(home, tmp, run), policy=policy,
                              threads=run.threads, notebook_timeout=run.notebook_timeout,
                              memory_short=run.memory_short)
    ctx.timings["setup_s"] = round(setup_s, 2)
    result = Result(id=task.id, student=task.student, notebook=task.notebook, notes=ctx.notes)
    errors = _ErrorLog()
    logging.getLogger().addHandler(errors)
    try:
        with context.grading(ctx):
            t0 = time.monotonic()
            _autograde(course, task.student, run)
            ctx.timings["autograde_s"] = round(time.monotonic() - t0, 2)
        t0 = time.monotonic()
        result.tests = read_scores(course, task.student, task.notebook, ctx.verdicts, ctx.failed_in_kernel)
        ctx.timings["scores_s"] = round(time.monotonic() - t0, 2)
        result.autograded = str(layout.autograded_notebook(course, task.student, task.notebook))
        result.feedback = _feedback_or_note(course, task, ctx)
    except Exception as exc:
        detail = errors.messages[-1] if errors.messages else ""
        result.status = "error"
        result.error = ctx.fatal or (f"{type(exc).__name__}: {exc}" + (f" ({detail.splitlines()[-1]})" if detail else ""))
        result.traceback = traceback.format_exc() + "\n".join(errors.messages[-5:])
    finally:
        logging.getLogger().removeHandler(errors)
        try:
            killed = zygote.killall()
            if killed:
                result.notes.append(f"{killed} process(es) left running by the notebook were stopped")
        except ZygoteError as exc:
            result.notes.append(f"grader: {exc}")
    result.timings = dict(ctx.timings, total_s=round(time.monotonic() - started, 2))
    return result


def _course_folder(task: Task, run: RunConfig, task_dir: Path) -> Path:
    """A private nbgrader course: the submission (and its data files), the template gradebook, HOME and TMPDIR."""
    shutil.rmtree(task_dir, ignore_errors=True)
    course = layout.task_course(run.work_dir, task.id)
    submitted = layout.submitted_folder(course, task.student)
    submitted.mkdir(parents=True)
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copyfile(task.path, submitted / f"{task.notebook}.ipynb")
    for extra in task.extra_files:
        target = submitted / extra.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(extra.path, target)
    shutil.copyfile(run.template_db, course / "gradebook.db")
    (task_dir / "home").mkdir()
    (task_dir / "tmp").mkdir()
    return course


_SCRATCH: set[str] = set()


def scratch_gradebooks_skip_fsync(work_dir: str) -> None:
    """SQLite gradebooks under ``work_dir`` (each task's throwaway copy) commit without fsync: nbgrader commits
    ~40 times per notebook, each an fsync (~6 ms). A crash loses only that task, which is graded again anyway."""
    if not _SCRATCH:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        event.listen(Engine, "connect", _skip_fsync)
    _SCRATCH.add(str(Path(work_dir).resolve()) + "/")


def _skip_fsync(dbapi_connection, connection_record) -> None:
    import sqlite3

    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    files = [row[2] for row in dbapi_connection.execute("PRAGMA database_list") if row[1] == "main"]
    if files and any(files[0].startswith(prefix) for prefix in _SCRATCH):
        dbapi_connection.execute("PRAGMA synchronous=OFF")


class _ErrorLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _autograde(course: Path, student: str, run: RunConfig) -> None:
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds,
                                        IgnorePattern, LimitOutput, OverwriteKernelspec, SaveAutoGrades)

    c = nbgrader_config(course, student=student)
    c.Autograde.sanitize_preprocessors = [
        NormalizeMetadata, ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreCells,
        CheckCellMetadata,
    ]
    c.Autograde.autograde_preprocessors = [
        execute.SandboxedExecute, recheck.HiddenRecheck, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
        SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
    ]
    c.SandboxedExecute.timeout = c.HiddenRecheck.cell_timeout = run.cell_timeout
    c.SandboxedExecute.notebook_timeout = c.HiddenRecheck.notebook_timeout = run.notebook_timeout
    c.SandboxedExecute.startup_timeout = 120
    run_converter(Autograde, c)


def _feedback_or_note(course: Path, task: Task, ctx: context.TaskContext) -> str | None:
    """The HTML feedback's path; feedback is a courtesy: the grade stands without it (a note says why).

    The autograded notebook is first replaced by its display copy (:mod:`autograder.course.display`): what the
    feedback page, the journal and formgrader show. Its plain form is written here, in linear time, so a raw
    notebook never leaves the task; rendering its markdown and writing the page then run in a child with
    :data:`RENDER_S` to finish (nbconvert's markdown is quadratic on some text); if it does not, the page is written
    from the plain copy, with a note."""
    graded = layout.autograded_notebook(course, task.student, task.notebook)
    if not graded.exists():
        return None
    raw = course.parent / "autograded-raw.ipynb"  # the notebook as graded (outside the course nbgrader reads)
    os.replace(graded, raw)
    t0 = time.monotonic()
    try:
        display.write_display_copy(raw, graded, render=False)
    except Exception as exc:
        ctx.notes.append(f"feedback could not be written: {type(exc).__name__}: {exc}")
        return None
    html = course / "feedback" / task.student / ASSIGNMENT / f"{task.notebook}.html"

    def rendered():
        display.write_display_copy(raw, graded, render=True)
        generate_feedback(course, task)

    outcome = process.within(RENDER_S, rendered)
    if outcome != "done":
        ctx.notes.append(f"feedback: rendering the written answers and outputs {outcome} "
                         f"({RENDER_S:g} s allowed): they are shown as typed")
        display.write_display_copy(raw, graded, render=False, note=display.TIMED_OUT)  # linear, like the first
        outcome = process.within(RENDER_S, lambda: generate_feedback(course, task))
    ctx.timings["feedback_s"] = round(time.monotonic() - t0, 2)
    if outcome != "done":
        ctx.notes.append(f"feedback could not be written: generating the page {outcome} ({RENDER_S:g} s allowed)")
        html.unlink(missing_ok=True)
        return None
    return str(html) if html.exists() else None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failure_message(outputs: list) -> str:
    """A test cell's errors as a student should read them: the check's message, or the failing line if it has none."""
    errors = [o for o in outputs if o.get("output_type") == "error"]
    if any(o.get("ename") == "CellTimeoutError" for o in errors):
        errors = [o for o in errors if o.get("ename") != "KeyboardInterrupt"]  # the interrupt is how it stopped
    parts = []
    for o in errors:
        text = str(o.get("evalue") or "").strip()
        if not text:
            lines = [_ANSI.sub("", l) for l in o.get("traceback", [])]
            failing = [l for chunk in lines for l in chunk.splitlines() if l.lstrip().startswith("---->")]
            line = re.sub(r"^\s*\d+\s*", "", failing[-1].split("---->", 1)[1]) if failing else ""
            text = f"failed at: {line.strip()}" if line.strip() else "(no message)"
        parts.append(f"{o.get('ename')}: {text}")
    return "\n".join(parts)


def read_scores(course: Path, student: str, notebook: str, verdicts: dict | None = None,
                failed_in_kernel: set[str] | None = None) -> list[CellScore]:
    """Every graded cell of the notebook in cell order: its score, and its verdict (``verdicts``: the recheck's, by
    grade id; a cell it did not judge gets one from its score and outputs); whether it passed when the kernel ran it
    (``failed_in_kernel``: the cells that did not; None: not known)."""
    import nbformat
    from nbgrader.api import Gradebook

    autograded = layout.autograded_notebook(course, student, notebook)
    messages: dict[str, str] = {}
    if autograded.exists():
        nb = nbformat.read(autograded, as_version=4)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id and cell.cell_type == "code":
                messages[grade_id] = failure_message(cell.get("outputs", []))
    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        source_nb = gb.find_notebook(notebook, ASSIGNMENT)
        written = {c.name for c in source_nb.solution_cells}  # graded and answered by the student: graded by hand
        submission = gb.find_submission_notebook(notebook, ASSIGNMENT, student)
        tests = []
        for grade in submission.grades:
            kind = "manual" if grade.name in written else "auto"
            points, max_points = float(grade.score or 0.0), float(grade.max_score)
            scored = Verdict(grade_id=grade.name, points=points, max_points=max_points,
                             passed=points >= max_points and not grade.needs_manual_grade,
                             message=messages.get(grade.name, ""), concept=exercises.concept(notebook, grade.name) or "",
                             by=BY_HAND if grade.needs_manual_grade else BY_NOTEBOOK,
                             judged=not grade.needs_manual_grade)
            ran = None if kind == "manual" or failed_in_kernel is None else grade.name not in failed_in_kernel
            tests.append(CellScore(name=grade.name, kind=kind, auto_score=grade.auto_score,
                                   needs_manual_grade=bool(grade.needs_manual_grade),
                                   verdict=cell_verdict(scored, (verdicts or {}).get(grade.name)), in_notebook=ran))
        return in_cell_order(tests, source_nb)


def cell_verdict(scored: Verdict, judged: Verdict | None) -> Verdict:
    """A graded cell's verdict: the judge's (``judged``), with the points nbgrader gave the cell and the text its
    outputs show the student (``scored``: the same words as the feedback page); the cell's own when no check judged
    it, or when it failed in the kernel although the judge passed it (the kernel's failure stands)."""
    if judged is None or judged.passed and not scored.passed:
        return scored if judged is None else dataclasses.replace(
            scored, exercise=judged.exercise, property_id=judged.property_id, concept=judged.concept)
    return dataclasses.replace(judged, points=scored.points, max_points=scored.max_points, message=scored.message)
