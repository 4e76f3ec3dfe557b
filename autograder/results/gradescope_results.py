"""Gradescope's ``results.json``, written from one student's record.

Gradescope reads ``/autograder/results/results.json``: a list of tests, each with ``name``, ``score``, ``max_score``,
``status``, ``output`` and ``visibility`` (``visible``, ``hidden``, ``after_due_date``, ``after_published``), plus a
top-level ``output`` and ``stdout_visibility``. Questions graded by hand are Gradescope's own "manual" questions,
added beside the autograder in its outline; they are not in ``results.json``. A late penalty (Gradescope applies
none itself) is taken from the autograded points as ``grade`` takes it from a notebook's, and said in ``output``;
``score`` then carries the total after it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .record import StudentRecord


@dataclass
class GradescopeTest:
    """One entry of results.json's ``tests`` (Gradescope's field names)."""

    name: str
    number: str
    score: float
    max_score: float
    status: str  # passed | failed
    output: str
    visibility: str  # visible | after_published (a hidden test)


@dataclass
class GradescopeResults:
    """results.json (Gradescope's field names; its ``score`` left out so that Gradescope sums the tests)."""

    tests: list[GradescopeTest]
    output: str
    execution_time: float
    stdout_visibility: str = "hidden"  # the grader's log (confinement, timings) is for the instructor
    extra_data: dict = field(default_factory=dict)
    score: float | None = None  # the tests' sum less a late penalty; None: Gradescope sums the tests

    def to_json(self) -> str:
        data = asdict(self)
        if data["score"] is None:
            del data["score"]
        return json.dumps(data, indent=1) + "\n"


def hidden_tests(source: Path) -> set[tuple[str, str]]:
    """(notebook, grade id) of every test cell holding hidden tests in the assignment's source."""
    import nbformat

    from autograder.course.cells import HIDDEN_REGION

    found = set()
    for path in sorted(Path(source).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and HIDDEN_REGION.search(cell.source):
                found.add((path.stem, meta["grade_id"]))
    return found


def to_results(record: StudentRecord, hidden: set[tuple[str, str]], seconds: float) -> GradescopeResults:
    """The student's record (``OUT/<student>.json``) as results.json: autograded tests only, the written answers
    left to Gradescope's manual questions."""
    tests, manual = [], []
    for i, t in enumerate(record.tests, start=1):
        if t.kind == "manual":
            manual.append(f"{t.notebook}: {t.name} ({t.max_points:g} points)")
            continue
        tests.append(GradescopeTest(
            name=f"{t.notebook}: {t.name}", number=str(i), score=t.points, max_score=t.max_points,
            status="passed" if t.passed else "failed", output=t.message or ("passed" if t.passed else ""),
            visibility="after_published" if (t.notebook, t.name) in hidden else "visible"))
    auto = sum(t.max_score for t in tests)
    lines = [f"Autograded by Loop Lab: {sum(t.score for t in tests):g} of {auto:g} points."]
    if manual:
        lines.append("Graded by hand on Gradescope: " + "; ".join(manual) + ".")
    taken, late_lines = _late_penalty(record, tests)
    lines += late_lines
    lines += [f"Note: {note}" for note in record.notes]
    lines += [f"{nb}: {'; '.join(n.notes)}" for nb, n in record.notebooks.items() if n.notes]
    return GradescopeResults(tests=tests, output="\n".join(lines), execution_time=round(seconds, 1),
                             score=round(sum(t.score for t in tests) - taken, 4) if taken else None)


def _late_penalty(record: StudentRecord, tests: list[GradescopeTest]) -> tuple[float, list[str]]:
    """(the points lateness takes from the autograded tests, the lines saying so): each notebook's share of its
    autograded points, as ``grade`` takes it from a notebook's points; the written answers are Gradescope's."""
    from .late import Lateness, penalty_points

    taken, lines = 0.0, []
    for nb, notebook in record.notebooks.items():
        if not notebook.late:
            continue
        late = Lateness(**notebook.late)
        mine = [t for t in tests if t.name.startswith(f"{nb}: ")]
        taken += penalty_points(late, sum(t.score for t in mine), sum(t.max_score for t in mine))
        if late.describe() not in lines:
            lines.append(late.describe())
    if taken:
        lines.append(f"Late penalty: {taken:g} of the autograded points (the written answers graded on Gradescope "
                     "are not included).")
    return round(taken, 4), lines
