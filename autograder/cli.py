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
    e.add_argument("--to", type=Path, help="the CSV to write (default: OUT/nbgrader_export.csv)")

    c = sub.add_parser("cells", help="print an exercise's graded cells (headings and test cells, hidden part included) "
                       "as a notebook, to copy into its solutions/ notebook")
    c.add_argument("exercise", help="its id in labutils/exercises.py, e.g. scheduler")

    h = sub.add_parser("handout", help="zip what students receive: notebooks/, labutils without the reference loop")
    h.add_argument("--out", type=Path, required=True, help="the zip to write, e.g. dist/loop_lab.zip")
    return parser


def _executor(args):
    """Where ``grade`` runs its tasks: a Dask cluster with ``--scheduler``, else (None) local processes."""
    if not args.scheduler:
        return None
    from .run.distributed import DaskExecutor

    return DaskExecutor(args.scheduler)


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


def _grade(args) -> int:
    from .course.submissions import SubmissionsError
    from .grade import grade
    from .results.journal import OutLocked
    from .run.pool import GradingSetupError

    options = grade_options(args, threads=1 if args.scheduler else None)  # one torch thread per Dask worker
    with _usage_errors(SubmissionsError, FileNotFoundError, GradingSetupError, OutLocked):
        result = grade(args.submissions, args.out, options, root=args.root, executor=_executor(args))
    return 0 if result.complete else 1


def _export(args) -> int:
    from .results.export import export_grades

    with _usage_errors(FileNotFoundError):
        dest = export_grades(args.out, args.to)
    print(f"wrote {dest}", file=sys.stderr)
    return 0


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


_COMMANDS = {"release": _release, "grade": _grade, "export": _export, "cells": _cells, "handout": _handout}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _COMMANDS[args.command](args)
    except _UsageError as exc:
        print(f"error: {shown(exc, limit=None, keep_newlines=True)}", file=sys.stderr)  # it may name a folder
        return 2
