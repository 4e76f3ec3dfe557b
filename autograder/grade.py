"""``python -m autograder grade``: from a folder of submissions to a gradebook, grades, feedback and a summary.

1. ``nbgrader generate_assignment`` on ``solutions/loop_lab`` (in a scratch course) gives the gradebook every
   submission is graded against: test cells, their points and the instructor's source of every locked cell.
2. Each (student, notebook) is one task; ``-j`` worker processes (:mod:`autograder.worker`) take tasks longest-first,
   each in its own course folder with its own copy of that gradebook.
3. The parent alone writes the real gradebook (SQLite by default, any SQLAlchemy URL), then the reports
   (:mod:`autograder.report`).

A task that hangs past every limit has its worker killed and restarted; the student gets zero for that notebook with
the reason, the others are still graded, and the exit status says the run is incomplete.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import report
from .pool import SharedZygote, Worker, run_pool
from .handout import REPO_ROOT
from .course import ASSIGNMENT, prepare_tools, sqlite_url
from .release import generate_gradebook
from .submissions import Submission, discover

KERNEL_HEADROOM_MB = 1024  # a started ipykernel (threads, stacks) beyond the zygote's imports; measured ~0.7 GB


class GradingSetupError(RuntimeError):
    """The run cannot grade anyone as configured (a limit too small for torch, no zygote)."""


@dataclass
class GradeOptions:
    jobs: int = 2
    db_url: str | None = None  # default: sqlite:///OUT/gradebook.db
    cell_timeout: int = 120
    notebook_timeout: int = 600
    memory_mb: int = 6144  # torch + ipykernel map ~4.7 GB of address space before a cell runs
    student: str | None = None  # the student id when SUBMISSIONS is a single .ipynb
    source: Path | None = None  # the assignment's source folder; default solutions/loop_lab
    keep_work: bool = False
    threads: int | None = None  # torch threads per kernel; default cores // jobs


@dataclass
class TaskOutcome:
    student: str
    notebook: str
    status: str  # graded | missing | unreadable | error
    tests: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    feedback: str | None = None
    timings: dict = field(default_factory=dict)  # kernel_s, recheck_s, total_s inside the worker


@dataclass
class RunResult:
    out: Path
    students: list[str]
    notebooks: list[str]
    outcomes: dict[tuple[str, str], TaskOutcome]
    student_notes: dict[str, list[str]]
    complete: bool
    problems: list[str]
    seconds: float


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the instructor's gradebook ------------------------------------------------------------------------------------------


def fingerprint(paths: list[Path]) -> str:
    """A hash of every file's path, size, mtime and content under ``paths``: grading must leave it unchanged."""
    h = hashlib.sha256()
    for root in paths:
        if not root.exists():
            continue
        for path in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if path.is_file() and "__pycache__" not in path.parts:
                st = path.stat()
                h.update(f"{path}|{st.st_size}|{st.st_mtime_ns}|".encode())
                h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


# --- the run ---------------------------------------------------------------------------------------------------------------


def _fmt(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


def grade(submissions: Path, out: Path, options: GradeOptions | None = None, root: Path = REPO_ROOT) -> RunResult:
    opts = options or GradeOptions()
    started = time.monotonic()
    prepare_tools()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    source = Path(opts.source or root / "solutions" / ASSIGNMENT).resolve()
    work = Path(tempfile.mkdtemp(prefix="looplab-grade-"))
    from . import sandbox

    # Landlock makes writes outside a student's folder impossible; without it, detect them afterwards.
    protected = [] if sandbox.landlock_abi() else [source, root / "labutils", root / "autograder", root / "notebooks"]
    before = fingerprint(protected)
    # Warm-up first: the zygote's imports and the workers' imports run while this process builds the gradebook.
    zygote = SharedZygote(work)
    workers = [Worker(i, work) for i in range(opts.jobs)]
    try:
        template_db = work / "template" / "gradebook.db"
        notebooks = generate_gradebook(source, work / "template", sqlite_url(template_db))
        db_url = opts.db_url or sqlite_url(out / "gradebook.db")
        generate_gradebook(source, work / "instructor", db_url)
        subs = discover(Path(submissions).resolve(), notebooks, student=opts.student)
        log(f"grading {len(subs)} student(s) x {len(notebooks)} notebook(s) with {opts.jobs} process(es); "
            f"gradebook {db_url}")
        outcomes, tasks = _plan(subs, notebooks)
        progress = _Progress(subs, tasks, started)

        def on_result(msg: dict, seconds: float) -> None:
            outcome = _outcome_from(msg, seconds)
            outcomes[(outcome.student, outcome.notebook)] = outcome
            progress.done(outcome)

        if tasks:
            info = zygote.wait_ready()
            floor = info.get("vm_mb", 0) + KERNEL_HEADROOM_MB
            if opts.memory_mb < floor:
                raise GradingSetupError(
                    f"--memory-limit {opts.memory_mb} MB is below what a kernel needs to start here: the imports "
                    f"alone map {info.get('vm_mb')} MB of address space; use at least {floor} MB")
            log(f"kernels warm after {_fmt(time.monotonic() - started)} (torch, labutils and the data imported "
                f"once, in {info.get('seconds', 0):.1f} s)")
            cfg = {
                "data_dirs": info["data_dirs"], "cache_dir": info["cache_dir"], "zygote_socket": zygote.socket,
                "template_db": str(template_db), "work_dir": str(work), "cell_timeout": opts.cell_timeout,
                "notebook_timeout": opts.notebook_timeout, "memory_mb": opts.memory_mb,
                "threads": opts.threads or max(1, (os.cpu_count() or 1) // max(1, opts.jobs)),
            }
            hard_limit = 2 * opts.notebook_timeout + 180  # kernel + recheck + start-up + feedback: then it is stuck
            run_pool(tasks, cfg, workers[: len(tasks)], work, hard_limit, on_result)
        problems = []
        if fingerprint(protected) != before:
            problems.append("files under solutions/, labutils/, autograder/ or notebooks/ changed while grading: "
                            "a submission may have written outside its folder; check `git status` before trusting "
                            "these grades")
        report.store_in_gradebook(db_url, [s.student for s in subs], notebooks, outcomes)
        feedback_dir = out / "feedback"
        for outcome in outcomes.values():
            if outcome.feedback and Path(outcome.feedback).exists():
                target = feedback_dir / outcome.student / f"{outcome.notebook}.html"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(outcome.feedback, target)
                outcome.feedback = str(target)
        for o in outcomes.values():
            if o.status == "error":
                problems.append(f"{o.student}/{o.notebook}: not graded: {'; '.join(o.notes)}")
        result = RunResult(out=out, students=[s.student for s in subs], notebooks=notebooks, outcomes=outcomes,
                           student_notes={s.student: s.notes for s in subs}, complete=not problems,
                           problems=problems, seconds=time.monotonic() - started)
        report.write_all(result, db_url)
        log(f"done in {_fmt(result.seconds)}: {len(subs)} student(s); grades in {out / 'grades.csv'}"
            + ("" if result.complete else f"; {len(problems)} problem(s):\n  " + "\n  ".join(problems)))
        return result
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.close()
        zygote.close()
        if not opts.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"work folder kept: {work}")


def _plan(subs: list[Submission], notebooks: list[str]) -> tuple[dict, list[dict]]:
    outcomes: dict[tuple[str, str], TaskOutcome] = {}
    tasks = []
    for sub in subs:
        for nb in notebooks:
            if nb in sub.notebooks:
                tasks.append({"id": f"{sub.student}--{nb}", "student": sub.student, "notebook": nb,
                              "path": str(sub.notebooks[nb]), "extra_files": sub.extra_files})
            elif nb in sub.unreadable:
                outcomes[(sub.student, nb)] = TaskOutcome(sub.student, nb, "unreadable",
                                                          notes=[f"{sub.unreadable[nb]}: scored 0, not run"])
            else:
                outcomes[(sub.student, nb)] = TaskOutcome(sub.student, nb, "missing",
                                                          notes=[f"{nb}.ipynb was not submitted: scored 0"])
    return outcomes, tasks


def _outcome_from(msg: dict, seconds: float) -> TaskOutcome:
    notes = list(msg.get("notes") or [])
    if msg.get("status") != "graded":
        notes.append(f"could not be graded: {msg.get('error')}")
    return TaskOutcome(student=msg["student"], notebook=msg["notebook"], status=msg.get("status", "error"),
                       tests=msg.get("tests") or [], notes=notes, seconds=round(seconds, 1),
                       feedback=msg.get("feedback"), timings=msg.get("timings") or {})


class _Progress:
    def __init__(self, subs: list[Submission], tasks: list[dict], started: float):
        self.started = started
        self.total_tasks = len(tasks)
        self.left = {s.student: sum(1 for t in tasks if t["student"] == s.student) for s in subs}
        self.total_students = len(subs)
        self.done_tasks = 0
        self.slowest: tuple[float, str] = (0.0, "")

    def done(self, outcome: TaskOutcome) -> None:
        self.done_tasks += 1
        self.left[outcome.student] -= 1
        name = f"{outcome.student}/{outcome.notebook}"
        self.slowest = max(self.slowest, (outcome.seconds, name))
        students_done = sum(1 for v in self.left.values() if v == 0)
        score = sum(t["points"] for t in outcome.tests)
        max_score = sum(t["max_points"] for t in outcome.tests)
        status = f"{score:g}/{max_score:g}" if outcome.status == "graded" else outcome.status.upper()
        log(f"[{students_done}/{self.total_students} students, {self.done_tasks}/{self.total_tasks} notebooks, "
            f"{_fmt(time.monotonic() - self.started)}] {name}: {status} in {outcome.seconds:.1f} s "
            f"(slowest: {self.slowest[1]} {self.slowest[0]:.1f} s)")
