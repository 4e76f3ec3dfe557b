"""What the cheating answers earn (issue 43): each answer of ``tests/stubs/cheating.py`` judged by its check, then
graded through ``python -m autograder grade`` (one student per answer, pasted into a solution notebook), beside what
it really implements.

    .venv/bin/python benchmarks/bench_cheating.py [--out FOLDER] [--no-grader] [--only NAME ...]

Prints a markdown table (answer, root cause, what it really earns, what the check gave, what the grader gave) and the
points the answers earned beyond what they implement. Exits non-zero when any answer earns more, or less, than that.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the corpus lives with the tests

import nbformat  # noqa: E402

from labutils import checks, exercises  # noqa: E402
from labutils.checks import properties  # noqa: E402

from autograder_cases import build  # noqa: E402
from stubs import cheating  # noqa: E402


def at_check_level(cheat) -> set[str]:
    exercise = exercises.get(cheat.exercise)
    report = getattr(checks, exercise.check_name)(*cheat.functions(), *exercise.check_args)
    return {p for p, v in properties.verdicts(cheat.exercise, report).items() if v.passed}


def student(cheat) -> str:
    return "cheat-" + cheat.name.replace("_", "-")


def through_the_grader(cheats, out: Path) -> dict[str, set[str]]:
    """Every answer in a solution notebook of its own student, graded in one run; student -> properties passed."""
    solutions = REPO / "solutions" / "loop_lab"
    sol = {p.stem: nbformat.read(p, as_version=4) for p in sorted(solutions.glob("*.ipynb"))}
    for cheat in cheats:
        exercise = exercises.get(cheat.exercise)
        nb = build.with_function(sol[exercise.notebook], tuple(f.name for f in exercise.functions), cheat.source,
                                 cheating.IMPORTS)
        folder = out / "submissions" / student(cheat)
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{exercise.notebook}.ipynb")
    subprocess.run([sys.executable, "-m", "autograder", "grade", str(out / "submissions"), "--out", str(out / "out"),
                    "-j", "2"], check=True, cwd=REPO)
    passed = {}
    for cheat in cheats:
        exercise = exercises.get(cheat.exercise)
        record = json.loads((out / "out" / f"{student(cheat)}.json").read_text())
        ids = {exercise.grade_id(p.id): p.id for p in exercise.properties}
        passed[cheat.name] = {ids[t["name"]] for t in record["tests"]
                              if t["notebook"] == exercise.notebook and t["name"] in ids and t["passed"]}
    return passed


def _cell(exercise, got: set[str] | None, earns: frozenset) -> str:
    if got is None:
        return "-"
    points = sum(exercise.property(p).points for p in got)
    more, less = sorted(got - earns), sorted(earns - got)
    return f"{points:g}" + (f" (+{', '.join(more)})" if more else "") + (f" (-{', '.join(less)})" if less else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="where the graded class goes (default: a temporary folder)")
    parser.add_argument("--no-grader", action="store_true", help="the check level only")
    parser.add_argument("--only", nargs="*", default=(), help="these answers only")
    args = parser.parse_args(argv)
    cheats = [c for c in cheating.CHEATS if not args.only or c.name in args.only]
    checked = {c.name: at_check_level(c) for c in cheats}
    graded: dict[str, set[str]] = {}
    if not args.no_grader:
        with tempfile.TemporaryDirectory(prefix="looplab-cheating-") as tmp:
            graded = through_the_grader(cheats, args.out or Path(tmp))
    print("| answer | root cause | really earns | check | grader |\n|---|---|---|---|---|")
    unearned = {"check": 0.0, "grader": 0.0}
    wrong = 0
    for c in cheats:
        exercise = exercises.get(c.exercise)
        print(f"| {c.name} | {c.cause} | {sum(exercise.property(p).points for p in c.earns):g}/{exercise.points:g} | "
              f"{_cell(exercise, checked[c.name], c.earns)} | {_cell(exercise, graded.get(c.name), c.earns)} |")
        for where, got in (("check", checked[c.name]), ("grader", graded.get(c.name))):
            if got is not None:
                unearned[where] += sum(exercise.property(p).points for p in got - c.earns)
                wrong += got != c.earns
    print(f"\npoints earned beyond what the answers implement: check {unearned['check']:g}, grader "
          f"{unearned['grader']:g} (of {sum(exercises.get(c.exercise).points for c in cheats):g} at stake)")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
