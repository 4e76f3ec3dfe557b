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

from ..record import ClassRecord
from .numbers import points


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


def to_results(record: ClassRecord, student: str, seconds: float) -> GradescopeResults:
    """One student's grades as results.json: autograded tests only, the written answers left to Gradescope's manual
    questions, a test holding hidden tests shown after publication."""
    tests, manual = [], []
    student_record = record.student(student)
    for i, t in enumerate(student_record.tests, start=1):
        if t.kind == "manual":
            manual.append(f"{t.notebook}: {t.name} ({t.max_points:g} points)")
            continue
        tests.append(GradescopeTest(
            name=f"{t.notebook}: {t.name}", number=str(i), score=t.points, max_score=t.max_points,
            status="passed" if t.passed else "failed", output=t.verdict.message or ("passed" if t.passed else ""),
            visibility="after_published" if t.facts.hidden else "visible"))
    auto = sum(t.max_score for t in tests)
    lines = [f"Autograded by Loop Lab: {sum(t.score for t in tests):g} of {auto:g} points."]
    if manual:
        lines.append("Graded by hand on Gradescope: " + "; ".join(manual) + ".")
    taken = sum(n.autograded_penalty for n in student_record.notebooks)
    lines += list(dict.fromkeys(n.late.describe() for n in student_record.notebooks if n.late and n.late.describe()))
    if taken:
        lines.append(f"Late penalty: {points(taken):g} of the autograded points (the written answers graded on "
                     "Gradescope are not included).")
    lines += [f"Note: {note}" for note in student_record.notes]
    lines += [f"{n.notebook}: {'; '.join(n.notes)}" for n in student_record.notebooks if n.notes]
    return GradescopeResults(tests=tests, output="\n".join(lines), execution_time=round(seconds, 1),
                             score=points(student_record.autograded_score) if taken else None)
