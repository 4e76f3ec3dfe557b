"""Two grading runs of the same class compared student by student: what may differ between runs left out (timings, and
the numbers in a message: every check run draws fresh data, so "grad norm 17.3" in one run is another number in the
next), and a failure that shows the differing tests whole (pytest's diff of a record cuts them); and class records made
by hand for the writers' tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

from labutils.verdict import Verdict

from autograder.results.record import ClassRecord, NotebookRecord, StudentRecord, TestFacts, TestRecord


_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[+-]?\d+)?")
_SPACES = re.compile(r" {2,}")


def comparable(out: Path, student: str) -> dict:
    """The student's JSON in ``out`` without what differs between two runs: its timings and the numbers its messages
    quote, with the runs of spaces that align a table around them (every fact, points included, stays: those are
    fields)."""
    record = json.loads((out / f"{student}.json").read_text())
    for nb in record["notebooks"].values():
        nb.pop("seconds", None)
        nb.pop("timings", None)
    for test in record["tests"]:
        test["message"] = _SPACES.sub("  ", _NUMBER.sub("#", test["message"]))
    return record


def assert_same_record(out: Path, reference: Path, student: str) -> None:
    """The student's JSON in ``out`` equals the reference's."""
    got, want = comparable(out, student), comparable(reference, student)
    differing = [(a, b) for a, b in zip(got["tests"], want["tests"]) if a != b]
    assert got == want, f"{student}: {len(differing)} test(s) differ:\n" + "\n".join(
        f"got      {a}\nexpected {b}" for a, b in differing[:3])


def test(notebook: str, name: str, points: float, max_points: float, *, written: bool = False, hidden: bool = False,
         passed: bool | None = None, to_grade: bool = False, judged_outside: bool = False,
         in_notebook: bool | None = None, **verdict) -> TestRecord:
    """One graded test of a made-up record (``passed`` default: full points; its concept the registry's;
    ``judged_outside``: its hidden part only calls verify(); ``in_notebook``: how the student's kernel ran it)."""
    from labutils import exercises

    facts = TestFacts(notebook, name, max_points, written, hidden, exercises.concept(notebook, name) or "",
                      judged_outside)
    passed = points >= max_points if passed is None else passed
    return TestRecord(facts, Verdict(grade_id=name, passed=passed, points=points, max_points=max_points,
                                     concept=facts.concept, **verdict), to_grade=to_grade, in_notebook=in_notebook)


def student(student_id: str, notebooks: dict[str, list[TestRecord]], *, penalty: float = 0.0, status="graded",
            notes: list[str] | None = None, notebook_notes: list[str] | None = None) -> StudentRecord:
    """A made-up student: each notebook's tests, the same late ``penalty`` (points) on each."""
    return StudentRecord(student_id, [NotebookRecord(nb, status, tests, late_penalty=penalty,
                                                     notes=list(notebook_notes or []))
                                      for nb, tests in notebooks.items()], list(notes or []))


def total(student_id: str, raw: float, max_score: float, penalty: float = 0.0) -> StudentRecord:
    """A made-up student with one notebook that earned ``raw`` of ``max_score``, less ``penalty``."""
    return student(student_id, {"00_toy": [test("00_toy", "test_all", raw, max_score)]}, penalty=penalty)


def class_record(students: list[StudentRecord], problems: list[str] | None = None) -> ClassRecord:
    """A made-up class record: its tests are its first student's."""
    from autograder.results.record import RunFacts

    facts = [t.facts for t in students[0].tests] if students else []
    return ClassRecord("loop_lab", facts, students, run=RunFacts(complete=not problems, problems=list(problems or []),
                                                                 seconds=1.0))
