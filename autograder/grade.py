"""``python -m autograder grade``: from a folder of submissions to a gradebook, grades, feedback and a summary.

Three steps, each a function:

1. :func:`plan`: ``nbgrader generate_assignment`` on ``solutions/loop_lab`` (in a scratch course) gives the gradebook
   every submission is graded against (test cells, their points, the instructor's source of every locked cell); the
   submissions become one :class:`~autograder.channel.Task` per (student, notebook) handed in.
2. run: an executor grades the tasks, each with :func:`autograder.run.task.grade_task` in its own course folder with its
   own copy of that gradebook, and hands back one :class:`~autograder.channel.Result` per task. Locally that is
   :class:`autograder.run.pool.LocalExecutor` (``-j`` worker processes, longest tasks first); any object with its
   ``start`` / ``run`` / ``close`` can take its place (a Dask cluster).
3. :func:`autograder.results.collect.collect`: this process alone writes the real gradebook (SQLite by default, any
   SQLAlchemy URL), builds the class record from it and writes every page (:mod:`autograder.results`).

A task that hangs past every limit has its worker killed and restarted; the student gets zero for that notebook with
the reason, the others are still graded, and the exit status says the run is incomplete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING

from labutils.atomic import write_atomically

from .channel import ExtraFile, Result, RunConfig, Task
from .layout import ASSIGNMENT
from .course.nbgrader_setup import database_url, prepare_tools, sqlite_url
from .layout import REPO_ROOT, grader_cache_dir, reference_dir
from .run.progress import Progress, fmt as _fmt
from .run import scratch
from .run.pool import LocalExecutor
from .sandbox.isolation import LAYERS
from .results import journal
from .results import handin
from .results.late import Deadlines
from .results.collect import collect
from .results.outcome import TaskOutcome
from .results.record import ClassRecord
from .untrusted import shown

if TYPE_CHECKING:
    from .course.submissions import Submission
# nbgrader, nbconvert and nbformat (report, release, submissions) are imported where they are used: seconds of
# imports that would otherwise run before the executor starts its zygote and workers


def _flag(flags: str, help: str, **argparse) -> dict:
    """A GradeOptions field's command-line flag (``"-j/--jobs"``), help text and argparse settings: cli.py generates
    ``grade``'s options from these, so a default and its help are written once."""
    return {"flags": flags.split("/"), "help": help, **argparse}


MIN_MEMORY_MB = 3000  # below this no kernel starts: importing torch alone maps ~4 GB of address space


@dataclass
class GradeOptions:
    jobs: int | None = field(default=None, metadata=_flag(
        "-j/--jobs", "notebooks graded at most at once (default: one per CPU of this machine's or container's CPU "
        "quota; fewer where its memory is short)", type=int, positive=True, metavar="N"))
    db_url: str | None = field(default=None, metadata=_flag(
        "--db", "gradebook SQLAlchemy URL (default: sqlite:///OUT/gradebook.db)", type=str, metavar="URL"))
    cell_timeout: int = field(default=120, metadata=_flag("--timeout-cell", "seconds per cell", type=int,
                                                          positive=True, metavar="SECONDS"))
    notebook_timeout: int = field(default=600, metadata=_flag(
        "--timeout-notebook", "seconds per notebook, and as much again for its hidden tests", type=int, positive=True,
        metavar="SECONDS"))
    memory_mb: int = field(default=6144, metadata=_flag(  # torch + ipykernel map ~4.7 GB before a cell runs
        "--memory-limit", "address-space limit per student process in MB (torch alone maps ~4 GB)", type=int,
        minimum=MIN_MEMORY_MB, why="importing torch alone maps ~4 GB of address space", metavar="MB"))
    student: str | None = field(default=None, metadata=_flag(
        "--student", "student id when SUBMISSIONS is a single .ipynb (default: its folder's name)", type=str,
        metavar="ID"))
    source: Path | None = field(default=None, metadata=_flag(
        "--source", "assignment source folder (default: ROOT/solutions/loop_lab)", type=Path, metavar="FOLDER"))
    keep_work: bool = field(default=False, metadata=_flag(
        "--keep-work", "keep the scratch folder (kernel logs) for debugging"))
    threads: int | None = None  # torch threads per kernel; default the CPU quota // jobs (1 on Dask: one per worker)
    regrade: list[str] | None = field(default=None, metadata=_flag(  # None: reuse; []: regrade all; or these ids
        "--regrade", "grade again what OUT already holds: every task, or only these students' (default: a re-run "
        "grades only what is new or changed)", nargs="*", metavar="STUDENT"))
    deadlines: Path | None = field(default=None, metadata=_flag(
        "--deadlines", "deadlines.toml: the assignment's and each notebook's deadline and the late-penalty policy "
        "(kept in OUT for re-runs and exports; docs/instructor.md)", type=Path, metavar="FILE"))
    extensions: Path | None = field(default=None, metadata=_flag(
        "--extensions", "extensions.csv: student,notebook,until rows moving a student's deadline", type=Path,
        metavar="FILE"))
    times: Path | None = field(default=None, metadata=_flag(
        "--times", "the hand-in times the late penalties use: the LMS's export of its submission times (Moodle's "
        "grading worksheet) or your own student,submitted CSV (docs/grading.md)", type=Path, metavar="FILE"))
    course_deadlines: Deadlines | None = None  # deadlines already read (Gradescope's): used instead of --deadlines
    require_isolation: bool = field(default=False, metadata=_flag(
        "--require-isolation", "refuse to grade when this machine does not allow every confinement layer ("
        + ", ".join(LAYERS) + ")"))


def log(message: str) -> None:
    """A line for stderr, names and notes in it escaped (see :mod:`autograder.untrusted`)."""
    print(shown(message, limit=None, keep_newlines=True), file=sys.stderr, flush=True)


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


@dataclass
class Plan:
    """What a run will grade, and against what; made by :func:`plan`."""

    out: Path
    db_url: str  # the real gradebook
    notebooks: list[str]  # notebook ids of the assignment
    submissions: list[Submission]
    tasks: list[Task]
    decided: dict[tuple[str, str], TaskOutcome]  # (student, notebook) with nothing to run: missing or unreadable
    run: RunConfig  # the executor fills in where its zygote and data are
    timings: dict[str, float] = field(default_factory=dict)  # seconds of the parent's own steps
    refused: list[str] = field(default_factory=list)  # folders of SUBMISSIONS not graded, each with why
    deadlines: Deadlines | None = None  # None: no deadline, no penalty

    @property
    def students(self) -> list[str]:
        return [s.student for s in self.submissions]


def grade(submissions: Path, out: Path, options: GradeOptions | None = None, root: Path = REPO_ROOT,
          executor=None, private: tuple[Path, ...] = ()) -> ClassRecord:
    """Plan, run (``executor``, default :class:`LocalExecutor` with ``options.jobs``), collect. ``private``: folders
    besides OUT that student code must neither read nor write (Gradescope's results)."""
    from .course.submissions import require_existing

    opts = options or GradeOptions()
    started = time.monotonic()
    require_existing(submissions)
    out_lock = journal.lock_out(Path(out).resolve())  # one run per OUT; held until this process ends
    try:
        deadlines = opts.course_deadlines or handin.for_run(Path(out).resolve(), opts.deadlines, opts.extensions,
                                                          opts.times)  # a bad file stops us here
    except BaseException:
        out_lock.close()
        raise
    prepare_tools()
    source = Path(opts.source or root / "solutions" / ASSIGNMENT).resolve()
    umask = closed_to_students(root, source, Path(out).resolve(), private)
    work, alive = scratch.new_work_folder()
    from .sandbox import policy

    # Landlock makes writes outside a student's folder impossible; without it, detect them afterwards.
    protected = [] if policy.landlock_abi() else [source, root / "labutils", root / "autograder", root / "notebooks"]
    before = fingerprint(protected)
    executor = executor or LocalExecutor(opts.jobs)
    try:
        executor.start(work)  # warm-up first: its imports run while this process builds the gradebook
        version = assignment_version(root, source)
        kept, reuse_notes = journal.Journal(Path(out).resolve()), []
        the_plan = plan(submissions, out, opts, source, work, version, kept)
        the_plan.deadlines = deadlines
        the_plan.run.permissions = check_closed(root, source, the_plan.out, work, private)
        outcomes = dict(the_plan.decided)
        if opts.regrade is not None:
            kept.forget([t.id for t in the_plan.tasks if t.student in opts.regrade] if opts.regrade else None)
        the_plan.tasks, keys = kept.reuse(the_plan.tasks, run_key(opts, version), outcomes, reuse_notes.append)
        (the_plan.out / "grading.log").unlink(missing_ok=True)
        progress = Progress({s: sum(1 for t in the_plan.tasks if t.student == s) for s in the_plan.students},
                            started, the_plan.out / "grading.log")
        progress.log(f"grading {len(the_plan.submissions)} student(s) x {len(the_plan.notebooks)} notebook(s); "
                     f"gradebook {the_plan.db_url}")
        for note in reuse_notes:
            progress.log(note)

        def on_result(result: Result, seconds: float) -> None:
            kept_json = kept.record(result.id, keys[result.id], TaskOutcome.from_result(result, seconds).to_json())
            outcome = TaskOutcome.from_json(kept_json)  # as kept: its feedback and notebook are the journal's copies
            outcomes[(outcome.student, outcome.notebook)] = outcome
            progress.done(outcome.student, outcome.notebook, _status(outcome), outcome.seconds)

        t0 = time.monotonic()
        try:
            executor.run(the_plan.tasks, the_plan.run, on_result, log=lambda message: progress.log(
                f"{message}; {_fmt(time.monotonic() - started)} since the start"))
        finally:
            progress.close()
        the_plan.timings["run_s"] = time.monotonic() - t0
        problems = list(the_plan.refused)
        if fingerprint(protected) != before:
            problems.append("files under solutions/, labutils/, autograder/ or notebooks/ changed while grading: "
                            "a submission may have written outside its folder; check `git status` before trusting "
                            "these grades")
        t0 = time.monotonic()
        record = collect(the_plan, outcomes, problems, lambda: time.monotonic() - started, progress.log)
        the_plan.timings["collect_s"] = time.monotonic() - t0
        write_atomically(the_plan.out / "timings.json", (json.dumps(
            {k: round(v, 2) for k, v in the_plan.timings.items()}, indent=1) + "\n").encode())
        progress.log(f"done in {_fmt(record.run.seconds)}: {len(record.students)} student(s); grades in "
                     f"{the_plan.out / 'grades.csv'}" + ("" if record.complete else f"; {len(record.problems)} "
                     "problem(s):\n  " + "\n  ".join(map(shown, record.problems))))
        return record
    finally:
        executor.close()
        if not opts.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        else:
            scratch.keep(work)
            log(f"work folder kept: {work}")
        alive.close()
        out_lock.close()
        if umask is not None:
            os.umask(umask)


def closed_to_students(root: Path, source: Path, out: Path, private: tuple[Path, ...]) -> int | None:
    """A root grader (whose student code runs as another uid): close what existed before the run to other users,
    and create the rest closed (:data:`closure.UMASK`, for this process and all it starts); the umask it replaced,
    or None when it is not root (student code runs as its own uid: permissions cannot keep it out)."""
    from .sandbox import closure

    if os.geteuid() != 0:
        return None
    closure.close([source, reference_dir(root), out, grader_cache_dir(), *private])
    return os.umask(closure.UMASK)


def check_closed(root: Path, source: Path, out: Path, work: Path, private: tuple[Path, ...]) -> str:
    """:func:`autograder.sandbox.closure.check` on this run's secrets (the hidden tests and solutions wherever they
    are: the source, the template course, OUT's gradebook; the reference; the results; the cache) and on what
    student code must not change (the grader's code, its venv, the source, the results)."""
    from .sandbox import closure

    secrets = [source, reference_dir(root), out, work / "template", grader_cache_dir(), *private]
    return closure.check(secrets, [root / "autograder", root / "labutils", *closure.venv_folders(), source, out,
                                   *private])


def assignment_version(root: Path, source: Path) -> list[str]:
    """What the template course is made from: the assignment's source, the grader's code and nbgrader's version."""
    import nbgrader

    from .layout import code_version

    return [journal.folder_hash(source), code_version(root), nbgrader.__version__]


def run_key(opts: GradeOptions, version: list[str]) -> str:
    """What decides every task's grade besides the student's files: the assignment's ``version``
    (:func:`assignment_version`) and the options that change a verdict (time and memory limits)."""
    return json.dumps([*version, opts.cell_timeout, opts.notebook_timeout, opts.memory_mb])


def plan(submissions: Path, out: Path, opts: GradeOptions, source: Path, work: Path, version: list[str],
         kept: journal.Journal) -> Plan:
    """The gradebooks (a template for the tasks, the real one for the results), the submissions, the tasks.
    ``version``: what the template is made from (:func:`assignment_version`); ``kept``: OUT's journal, which says
    which version the real gradebook holds."""
    from .course.release import generate_gradebook, template_course
    from .course.submissions import discover

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    template_db = work / "template" / "gradebook.db"
    t0 = time.monotonic()
    notebooks = template_course(source, work / "template", json.dumps(version))
    t1 = time.monotonic()
    db_url = database_url(opts.db_url or sqlite_url(out / "gradebook.db"))
    new_file = _new_sqlite_file(db_url)
    if new_file is not None:  # the same generate_assignment as the template's: copy it (saves seconds of CPU)
        new_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template_db, new_file)
    elif not _gradebook_current(kept, db_url, version, notebooks):
        generate_gradebook(source, work / "instructor", db_url)  # another database, or one holding grades: in place
    kept.gradebook_given(db_url, version)
    t2 = time.monotonic()
    found = discover(Path(submissions).resolve(), notebooks, student=opts.student, intake=work / "handed-in")
    subs = found.submissions
    decided: dict[tuple[str, str], TaskOutcome] = {}
    tasks = []
    for sub in subs:
        for nb in notebooks:
            if nb in sub.notebooks:
                tasks.append(Task(id=f"{sub.student}--{nb}", student=sub.student, notebook=nb,
                                  path=str(sub.notebooks[nb]),
                                  extra_files=[ExtraFile(name=e["name"], path=e["path"]) for e in sub.extra_files]))
            elif nb in sub.unreadable:
                decided[(sub.student, nb)] = TaskOutcome(sub.student, nb, "unreadable",
                                                         notes=[f"{sub.unreadable[nb]}: scored 0, not run"])
            else:
                decided[(sub.student, nb)] = TaskOutcome(sub.student, nb, "missing",
                                                         notes=[f"{nb}.ipynb was not submitted: scored 0"])
    run = RunConfig(template_db=str(template_db), work_dir=str(work), cell_timeout=opts.cell_timeout,
                    notebook_timeout=opts.notebook_timeout, memory_mb=opts.memory_mb,
                    threads=opts.threads or 0,  # 0: the executor's, from the machine it runs on
                    require_isolation=opts.require_isolation)
    timings = {"template_gradebook_s": t1 - t0, "gradebook_s": t2 - t1, "discover_s": time.monotonic() - t2}
    return Plan(out=out, db_url=db_url, notebooks=notebooks, submissions=subs, tasks=tasks, decided=decided, run=run,
                timings=timings, refused=found.refused)


def _gradebook_current(kept: journal.Journal, db_url: str, version: list[str], notebooks: list[str]) -> bool:
    """Does the gradebook hold this version of the assignment already (a re-run on the same OUT, nothing changed)?
    Giving it again is nbgrader's converter over every notebook: 1.4-2 s of CPU in every re-run."""
    from .course.release import gradebook_notebooks

    if not kept.gradebook_holds(db_url, version):
        return False
    try:
        return gradebook_notebooks(db_url) == notebooks
    except Exception:  # the assignment is not there (an emptied or replaced database): given again
        return False


def _status(outcome: TaskOutcome) -> str:
    if outcome.status != "graded":
        return outcome.status.upper()
    return f"{outcome.points:g}/{outcome.max_points:g}"


def _new_sqlite_file(db_url: str) -> Path | None:
    """The file of a SQLite ``db_url`` that does not exist yet; None for anything else."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    path = Path(url.database)
    return None if path.exists() else path
