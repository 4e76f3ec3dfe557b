"""Gradescope's ``results.json``, written from one student's record.

Gradescope reads ``/autograder/results/results.json`` (its "Autograder Specifications"): a ``score`` (required when a
test has none; it overrides the tests' total), a list of tests, each with ``name``, ``score``, ``max_score``,
``status``, ``output`` and ``visibility`` (``visible``, ``hidden``, ``after_due_date``, ``after_published``; a test
without a score is an informational check), a top-level ``output``, the formats of those texts and
``stdout_visibility``. While a test is hidden, Gradescope hides the student's total. Questions graded by hand are
Gradescope's own "manual" questions, added beside the autograder in its outline; they are not in ``results.json``. A
late penalty (Gradescope applies none itself) is taken from the autograded points as ``grade`` takes it from a
notebook's, and said in ``output``; ``score`` is the total after it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ..record import ClassRecord
from .numbers import points


@dataclass
class GradescopeTest:
    """One entry of results.json's ``tests`` (Gradescope's field names). A test without ``score`` is an
    informational check: Gradescope shows its status and output and adds nothing to the total."""

    name: str
    number: str
    status: str  # passed | failed
    output: str
    visibility: str  # visible | after_published (a hidden test)
    score: float | None = None
    max_score: float | None = None


@dataclass
class GradescopeResults:
    """results.json (Gradescope's field names). ``score`` is always given (the spec requires it when there is no
    test); text formats everywhere: names and messages hold what students wrote, never rendered as HTML."""

    tests: list[GradescopeTest]
    output: str
    execution_time: float
    score: float = 0.0
    visibility: str | None = None  # the tests' default (each test says its own)
    stdout_visibility: str = "hidden"  # the grader's log (confinement, timings) is for the instructor
    output_format: str = "text"
    test_output_format: str = "text"
    test_name_format: str = "text"
    extra_data: dict = field(default_factory=dict)

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if v is not None}
        data["tests"] = [{k: v for k, v in test.items() if v is not None} for test in data["tests"]]
        return json.dumps(data, indent=1) + "\n"


def to_results(record: ClassRecord, student: str, seconds: float) -> GradescopeResults:
    """One student's grades as results.json: autograded tests only, the written answers left to Gradescope's manual
    questions.

    What a student sees at once: every test without a hidden part, with its points and the check's message; for a
    test with one, what their own notebook shows (the cell's run in the kernel: its check's verdict, as an
    informational check with no points) where the hidden part is judged outside the kernel
    (:attr:`~autograder.results.gradebook.TestFacts.judged_outside`); the test itself, its points and the hidden
    verdict, once the grades are published. The visible summary names only points the student can see. A notebook
    the grader could not grade is no test at all, but one visible failed check saying the grade is incomplete, and
    why."""
    tests: list[GradescopeTest] = []
    manual, now, later = [], [0.0, 0.0], 0.0
    mine = record.student(student)
    incomplete = [n for n in mine.notebooks if n.status == "error"]
    for t in (t for n in mine.notebooks if n.status != "error" for t in n.tests):
        if t.kind == "manual":
            manual.append(f"{t.notebook}: {t.name} ({t.max_points:g} points)")
            continue
        name, status = f"{t.notebook}: {t.name}", "passed" if t.passed else "failed"
        output = t.verdict.message or ("passed" if t.passed else "")
        if not t.facts.hidden:
            tests.append(GradescopeTest(name, "", status, output, "visible", points(t.points), points(t.max_points)))
            now = [now[0] + t.points, now[1] + t.max_points]
            continue
        if t.facts.judged_outside and t.in_notebook is not None:
            tests.append(GradescopeTest(
                f"{name}: the check your notebook runs", "", "passed" if t.in_notebook else "failed",
                "passed in your notebook; the hidden tests' verdict and the points are shown once the grades are "
                "published" if t.in_notebook else output, "visible"))
        tests.append(GradescopeTest(name, "", status, output, "after_published", points(t.points),
                                    points(t.max_points)))
        later += t.max_points
    for n in incomplete:
        tests.append(GradescopeTest(
            f"Grade incomplete: {n.notebook} could not be graded", "", "failed",
            f"The autograder could not grade {n.notebook} ({'; '.join(n.notes) or 'no reason given'}). It is not "
            f"scored: this grade is incomplete and leaves out its {n.max_score:g} points. Submit again, or ask your "
            "instructor to grade it again.", "visible"))
    for number, test in enumerate(tests, start=1):
        test.number = str(number)
    lines = ["Autograded by Loop Lab."]
    if incomplete:
        lines.append(f"GRADE INCOMPLETE: {', '.join(n.notebook for n in incomplete)} could not be graded (see the "
                     "failed check).")
    if now[1]:
        lines.append(f"Tests shown now: {now[0]:g} of {now[1]:g} points.")
    if later:
        lines.append(f"Tests with hidden parts ({later:g} points): what your notebook's checks show is listed now, "
                     "their points once the grades are published.")
    if manual:
        lines.append("Graded by hand on Gradescope: " + "; ".join(manual) + ".")
    taken = sum(n.autograded_penalty for n in mine.notebooks)
    lines += list(dict.fromkeys(n.late.describe() for n in mine.notebooks if n.late and n.late.describe()))
    if taken:  # a penalty capped at the points earned would tell the hidden ones: then its points come later
        uncapped = sum(round(n.late.fraction * sum(t.max_points for t in n.tests if not t.facts.written), 4)
                       for n in mine.notebooks if n.late)
        lines.append(f"Late penalty: {points(taken):g} of the autograded points (the written answers graded on "
                     "Gradescope are not included)." if not later or abs(taken - uncapped) < 1e-6 else
                     "Late penalty: taken from the autograded points, in points once the grades are published (the "
                     "written answers graded on Gradescope are not included).")
    lines += [f"Note: {note}" for note in mine.notes]
    lines += [f"{n.notebook}: {'; '.join(n.notes)}" for n in mine.notebooks if n.notes and n.status != "error"]
    return GradescopeResults(tests=tests, output="\n".join(lines), execution_time=round(seconds, 1),
                             score=points(mine.autograded_score))


def not_graded(why: str, seconds: float) -> GradescopeResults:
    """results.json for a submission that was not graded at all: no test, a score of 0 and ``why``, shown."""
    return GradescopeResults(tests=[], output=why, execution_time=round(seconds, 1), score=0, visibility="visible")
