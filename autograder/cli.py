"""python -m autograder: release the notebooks, grade a folder of submissions, build the student handout.

Exit status: 0 when everything asked for was done (for ``grade``: every submission graded), 1 when a run finished but
is incomplete, 2 for a usage error (a missing folder, a bad option).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path

from .layout import REPO_ROOT
from .untrusted import shown


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def _at_least(minimum: int, why: str):
    def parse(text: str):
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text} is too small: use at least {minimum} ({why})")
        return value

    return parse


def add_grade_options(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`~autograder.grade.GradeOptions` field that has one, with its default and help from there."""
    import dataclasses

    from .grade import GradeOptions

    for option in dataclasses.fields(GradeOptions):
        meta = option.metadata
        if "flags" not in meta:
            continue
        kwargs = {"dest": option.name, "help": meta["help"], "default": option.default, "metavar": meta.get("metavar")}
        if meta.get("nargs"):
            kwargs["nargs"] = meta["nargs"]
        elif meta.get("type") is None:  # a switch
            kwargs["action"] = "store_true"
            del kwargs["metavar"]
        else:
            kwargs["type"] = (_positive(meta["type"]) if meta.get("positive") else
                              _at_least(meta["minimum"], meta["why"]) if "minimum" in meta else meta["type"])
            if option.default is not None:
                kwargs["help"] += " (default: %(default)s)"
        parser.add_argument(*meta["flags"], **kwargs)


def grade_options(args: argparse.Namespace, **extra):
    """The GradeOptions the parsed ``args`` ask for."""
    import dataclasses

    from .grade import GradeOptions

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(GradeOptions) if "flags" in f.metadata}
    return GradeOptions(**given, **extra)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the Loop Lab repository (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub.add_parser("release", help="regenerate notebooks/ (the student version) from solutions/")

    g = sub.add_parser("grade", help="autograde submissions into a gradebook, grades.csv, feedback and a summary")
    g.add_argument("submissions", type=Path, help="folder with one sub-folder per student (or nbgrader's "
                   "submitted/<student>/loop_lab/), or a single .ipynb for one student")
    g.add_argument("--out", type=Path, required=True, help="where grades.csv, <student>.json, feedback/ and "
                   "summary.md/.png go")
    add_grade_options(g)
    g.add_argument("--scheduler", metavar="ADDRESS", help="grade on a Dask cluster: its scheduler, e.g. "
                   "tcp://HOST:8786 (workers started with --nthreads 1; -j is then unused). Default: this machine")

    e = sub.add_parser("export", help="write every student's total (autograded and hand-graded points) from the "
                       "nbgrader course grade left in OUT, with nbgrader's CSV export")
    e.add_argument("--out", type=Path, required=True, help="the folder `grade --out` wrote (the course)")
    e.add_argument("--to", type=Path, help="the CSV to write (default: OUT/nbgrader_export.csv, "
                   "OUT/canvas_import.csv, OUT/moodle_import.csv)")
    e.add_argument("--format", default="nbgrader", help="nbgrader (nbgrader's CSV), canvas or moodle (the LMS's "
                   "gradebook CSV given as --roster, with the assignment's column filled; default: %(default)s)")
    e.add_argument("--roster", type=Path, help="canvas/moodle: the gradebook CSV exported from the LMS")
    e.add_argument("--match", help="canvas/moodle: the roster column that names the submission folders: "
                   "canvas: login (SIS Login ID, default), sis-id, canvas-id; moodle: email (default), id-number")
    e.add_argument("--mapping", type=Path, help="canvas/moodle: a CSV 'submission,<roster column>' pairing each "
                   "submission folder with a roster value, instead of --match")
    e.add_argument("--column", help="canvas/moodle: the roster's column to fill (default: the one named like "
                   "'Loop Lab')")

    c = sub.add_parser("cells", help="print an exercise's graded cells (headings and test cells, hidden part included) "
                       "as a notebook, to copy into its solutions/ notebook")
    c.add_argument("exercise", help="its id in labutils/exercises.py, e.g. scheduler")

    gs = sub.add_parser("gradescope", help="build the zip a Gradescope 'Autograder' assignment takes (setup.sh, "
                        "run_autograder, the grader, the assignment's source, the data)")
    gs.add_argument("--out", type=Path, required=True, help="the zip to write, e.g. autograder.zip")
    gs.add_argument("--source", type=Path, help="assignment source folder (default: ROOT/solutions/loop_lab)")
    gs.add_argument("--no-data", action="store_true", help="leave the dataset out (the container then downloads it)")
    gs.add_argument("--deadlines", type=Path, metavar="FILE", help="deadlines.toml whose [penalty] policy "
                    "run_autograder applies to Gradescope's submission time and due date (submission_metadata.json)")
    gr = sub.add_parser("gradescope-run", help="what run_autograder runs inside Gradescope: grade ROOT/submission, "
                        "write ROOT/results/results.json")
    gr.add_argument("--root", dest="gradescope_root", type=Path, help="Gradescope's folder (default: "
                    "$GRADESCOPE_ROOT or /autograder)")
    gr.add_argument("--source", type=Path, help="assignment source folder (default: ROOT/solutions/loop_lab)")

    h = sub.add_parser("handout", help="zip what students receive: notebooks/, labutils without the reference loop")
    h.add_argument("--out", type=Path, required=True, help="the zip to write, e.g. dist/loop_lab.zip")
    return parser


def _executor(args, zygote):
    """Where ``grade`` runs its tasks: a Dask cluster with ``--scheduler``, else local processes (None: grade's own
    :class:`~autograder.run.pool.LocalExecutor`, or one that borrows the warm ``zygote`` given to :func:`main`)."""
    if args.scheduler:
        from .run.distributed import DaskExecutor

        return DaskExecutor(args.scheduler)
    if zygote is None:
        return None
    from .run.pool import LocalExecutor

    return LocalExecutor(args.jobs, zygote)


class _UsageError(Exception):
    """What the user asked for cannot be done as asked: said in one line, exit status 2."""


@contextlib.contextmanager
def _usage_errors(*kinds: type[Exception]):
    """Errors of ``kinds`` raised inside are the user's to fix (a missing folder, an unknown exercise)."""
    try:
        yield
    except kinds as exc:
        raise _UsageError(str(exc)) from exc


def _release(args) -> int:
    from .course.release import release

    paths = release(args.root)
    for path in paths:
        print(path)
    print(f"released {len(paths)} notebook(s)", file=sys.stderr)
    return 0


def _grade(args, zygote=None) -> int:
    from .course.submissions import SubmissionsError
    from .grade import grade
    from .results.journal import OutLocked
    from .results.late import LateConfigError
    from .run.pool import GradingSetupError

    options = grade_options(args, threads=1 if args.scheduler else None)  # one torch thread per Dask worker
    with _usage_errors(SubmissionsError, FileNotFoundError, GradingSetupError, OutLocked, LateConfigError):
        result = grade(args.submissions, args.out, options, root=args.root, executor=_executor(args, zygote))
    return 0 if result.complete else 1


def _export(args) -> int:
    from .results.writers.lms import ExportError
    from .results.writers.nbgrader_csv import export_grades

    if args.format != "nbgrader":
        return _export_lms(args)
    if args.roster or args.match or args.mapping or args.column:
        raise _UsageError("--roster, --match, --mapping and --column go with --format canvas or moodle")
    with _usage_errors(FileNotFoundError, ExportError):
        dest = export_grades(args.out, args.to)  # from the current scores: a hand grade given since grading counts
    print(f"wrote {dest}", file=sys.stderr)
    return 0


def _export_lms(args) -> int:
    """An LMS import file; exit 1 when a graded submission's grade would not reach the LMS (no roster row, or an
    identity that clashes with another's)."""
    from .results.writers.lms import ExportError, export_lms

    if args.roster is None:
        raise _UsageError(f"--format {args.format} needs --roster: the gradebook CSV exported from the LMS")
    with _usage_errors(FileNotFoundError, ExportError):
        report = export_lms(args.out, args.format, args.roster, args.to, match=args.match, mapping=args.mapping,
                            column=args.column)
    print(f"wrote {report.dest}: {len(report.written)} score(s) in column {shown(report.column)}", file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    if report.no_submission:
        print(f"{len(report.no_submission)} roster student(s) with no graded submission (cell left as it was): "
              + ", ".join(map(shown, report.no_submission)), file=sys.stderr)
    if report.no_roster_row:
        print(f"{len(report.no_roster_row)} graded submission(s) with no roster row (not in the file): "
              + ", ".join(map(shown, report.no_roster_row)) + "; match them with --mapping FILE", file=sys.stderr)
    for line in report.ambiguous:  # identities one key apart: nothing written for them until the instructor says
        print(f"not written: {shown(line)}", file=sys.stderr)
    for line in report.not_graded:  # a total would count an ungraded notebook as 0
        print(f"not written: {shown(line)}", file=sys.stderr)
    return 1 if report.no_roster_row or report.ambiguous or report.not_graded else 0


def _cells(args) -> int:
    from .course.scaffold import as_notebook

    with _usage_errors(ValueError):
        print(as_notebook(args.exercise))
    return 0


def _handout(args) -> int:
    from .course.handout import build_handout

    with _usage_errors(FileNotFoundError):
        names = build_handout(args.out, args.root)
    print(f"wrote {args.out} ({len(names)} files)", file=sys.stderr)
    return 0


def _gradescope(args) -> int:
    from .course.gradescope_zip import build_zip
    from .results.handin import load
    from .results.late import LateConfigError

    with _usage_errors(FileNotFoundError, LateConfigError):
        if args.deadlines is not None:
            load(args.deadlines)  # a LateConfigError now, not on every submission
        names = build_zip(args.out, args.root, args.source, data=not args.no_data, deadlines=args.deadlines)
    data = "with" if any(n.startswith("data/") for n in names) else "without"
    print(f"wrote {args.out} ({len(names)} files, {data} the dataset): upload it as the autograder of a Gradescope "
          "'Programming Assignment'", file=sys.stderr)
    return 0


def _gradescope_run(args) -> int:
    from .gradescope import layout_from_env, run

    return run(layout_from_env(args.gradescope_root), args.source)


_COMMANDS = {"release": _release, "grade": _grade, "export": _export, "cells": _cells, "handout": _handout,
             "gradescope": _gradescope, "gradescope-run": _gradescope_run}


def main(argv: list[str] | None = None, zygote=None) -> int:
    """The command line. ``zygote``: a warm :class:`~autograder.sandbox.client.SharedZygote` for ``grade`` to borrow
    rather than start its own, from a process that runs the command many times (it starts and closes it)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    command = _COMMANDS[args.command]
    try:
        return command(args, zygote) if command is _grade else command(args)
    except _UsageError as exc:
        print(f"error: {shown(exc, limit=None, keep_newlines=True)}", file=sys.stderr)  # it may name a folder
        return 2
