"""The class record: every fact the grader's pages show, built once when the gradebook is final.

Why one record: grades.csv, the students' JSON, the feedback pages, the summary, Gradescope's results.json, the
Canvas and Moodle files and nbgrader's CSV each used to assemble the class again, from the gradebook, the outcomes
or another writer's file, and computed a score after its penalty its own way. Now :meth:`ClassRecord.build` reads the
gradebook once, after its scores and penalties are stored, and every writer (:mod:`.writers`) is a function of the
record. The gradebook stays the source of truth for points (hand grades given in formgrader count);
:meth:`ClassRecord.load` is the same record after grading, its points read again from the gradebook, for an export.

What is said once: a test's facts (its points, whether it is a written answer, whether it holds hidden tests, its
concept: :class:`TestFacts`, one per graded cell of the assignment); a notebook's raw score, penalty and maximum
(:class:`NotebookRecord`, the score after the penalty computed only in :attr:`NotebookRecord.score`); each test of a
student holding its :class:`~labutils.verdict.Verdict` (:class:`TestRecord`). The record crosses a process boundary
only as ``OUT/.record.json`` (the typed codec of :mod:`labutils.messages`), so an export after hand grading reads
the same facts the run wrote.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from labutils.atomic import write_atomically
from labutils.messages import build as from_fields, to_json as to_message
from labutils.verdict import BY_HAND, BY_NOTEBOOK, Verdict

from autograder.layout import ASSIGNMENT

from .gradebook import ClassBook, TestFacts, course_url, store_penalties
from .late import Lateness, penalty_points
from .outcome import TaskOutcome

RECORD_NAME = ".record.json"  # a dot: no student id starts with one, and OUT/<student>.json are the students'


@dataclass
class TestRecord:
    """One graded test of one student: its facts and its verdict (points: the gradebook's)."""

    facts: TestFacts
    verdict: Verdict
    to_grade: bool = False  # a written answer waiting for a person: neither passed nor failed yet
    in_notebook: bool | None = None  # passed when the kernel ran it, before the hidden tests' recheck (None: unknown)

    @property
    def notebook(self) -> str:
        return self.facts.notebook

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def kind(self) -> str:
        return "manual" if self.facts.written else "auto"

    @property
    def points(self) -> float:
        return self.verdict.points

    @property
    def max_points(self) -> float:
        return self.facts.max_points

    @property
    def passed(self) -> bool | None:
        return None if self.to_grade else self.verdict.passed

    @property
    def root_cause(self) -> str:
        """The graded test whose mistake cost this one its points: the first it is blocked by, else itself."""
        return self.verdict.blocked_by[0] if self.verdict.blocked_by else self.name


@dataclass
class NotebookRecord:
    """One (student, notebook): how it went, its tests, and its points as the gradebook holds them."""

    notebook: str
    status: str  # graded | missing | unreadable | error
    tests: list[TestRecord] = field(default_factory=list)
    late_penalty: float = 0.0  # points, as stored in the gradebook from its lateness and raw score
    late: Lateness | None = None  # with deadlines only
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    page: str | None = None  # the feedback page the worker rendered (the journal's copy): the feedback writer's input

    @property
    def raw_score(self) -> float:
        return sum(t.points for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_points for t in self.tests)

    @property
    def score(self) -> float:
        """The notebook's points after its late penalty: the one place this is computed."""
        return max(0.0, self.raw_score - self.late_penalty)

    @property
    def handed_in(self) -> bool:
        return self.status not in ("missing", "unreadable")

    @property
    def autograded_penalty(self) -> float:
        """The points lateness takes from the autograded tests alone, for a platform that grades the written
        answers itself (Gradescope's manual questions): the same share of those points."""
        auto = [t for t in self.tests if not t.facts.written]
        return penalty_points(self.late, sum(t.points for t in auto), sum(t.max_points for t in auto))


@dataclass
class StudentRecord:
    """Everything one student gets back."""

    student: str
    notebooks: list[NotebookRecord]
    notes: list[str] = field(default_factory=list)
    first_name: str = ""  # as the gradebook knows them (nbgrader's CSV export shows them)
    last_name: str = ""
    email: str = ""

    @property
    def tests(self) -> list[TestRecord]:
        return [t for n in self.notebooks for t in n.tests]

    @property
    def score(self) -> float:
        return sum(n.score for n in self.notebooks)

    @property
    def raw_score(self) -> float:
        return sum(n.raw_score for n in self.notebooks)

    @property
    def late_penalty(self) -> float:
        return sum(n.late_penalty for n in self.notebooks)

    @property
    def max_score(self) -> float:
        return sum(n.max_score for n in self.notebooks)

    @property
    def autograded_score(self) -> float:
        """The autograded tests' points after :attr:`NotebookRecord.autograded_penalty`."""
        return sum(max(0.0, sum(t.points for t in n.tests if not t.facts.written) - n.autograded_penalty)
                   for n in self.notebooks)

    @property
    def graded(self) -> bool:
        """No notebook of it is in error (could not be graded)."""
        return all(n.status != "error" for n in self.notebooks)

    @property
    def handed_in_at(self) -> str | None:
        """When the last notebook came in (ISO 8601, UTC), where the course has deadlines."""
        times = [n.late.submitted for n in self.notebooks if n.late and n.late.submitted]
        return max(times) if times else None

    def notebook(self, notebook_id: str) -> NotebookRecord:
        return next(n for n in self.notebooks if n.notebook == notebook_id)


@dataclass
class RunFacts:
    """What the grading run that built the record knows of itself (not saved: an export has no run)."""

    complete: bool = True
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class ClassRecord:
    """The class's grades of the assignment: the one object every writer reads."""

    assignment: str
    tests: list[TestFacts]  # the assignment's graded tests, notebook by notebook in cell order
    students: list[StudentRecord]
    deadlines: bool = False  # the course has deadlines: late columns, late lines
    duedate: str | None = None  # the assignment's, as the gradebook holds it
    run: RunFacts = field(default_factory=RunFacts)

    @property
    def complete(self) -> bool:
        return self.run.complete

    @property
    def problems(self) -> list[str]:
        return self.run.problems

    @property
    def notebooks(self) -> list[str]:
        return list(dict.fromkeys(t.notebook for t in self.tests))

    @property
    def max_score(self) -> float:
        return sum(t.max_points for t in self.tests)

    def student(self, student_id: str) -> StudentRecord:
        return next(s for s in self.students if s.student == student_id)

    @classmethod
    def build(cls, book: ClassBook, outcomes: dict[tuple[str, str], TaskOutcome], students: list[str],
              lateness: dict[tuple[str, str], Lateness] | None, notes: dict[str, list[str]],
              run: RunFacts) -> ClassRecord:
        """The record of a grading run, from what the gradebook holds once its scores and penalties are stored
        (``book``: :func:`.gradebook.store`)."""
        records = []
        for student in students:
            entries = [_notebook(nb, [t for t in book.tests if t.notebook == nb], outcomes[(student, nb)],
                                 book.entries[student][nb], (lateness or {}).get((student, nb)))
                       for nb in book.notebooks]
            person = book.people.get(student, ("", "", ""))
            records.append(StudentRecord(student, entries, list(notes.get(student, [])), *person))
        return cls(ASSIGNMENT, book.tests, records, deadlines=lateness is not None, duedate=book.duedate, run=run)

    @classmethod
    def load(cls, out: Path) -> ClassRecord:
        """The record the last ``grade`` into ``out`` saved, with the gradebook's points now (a hand grade given
        since counts, and the late penalties are recomputed from it): what every export reads."""
        path = Path(out) / RECORD_NAME
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist: grade into {out} first (python -m autograder grade "
                                    f"SUBMISSIONS --out {out})")
        saved = from_fields(ClassRecord, json.loads(path.read_text(encoding="utf-8")))
        students = [s.student for s in saved.students]
        lateness = {(s.student, n.notebook): n.late for s in saved.students for n in s.notebooks if n.late}
        book = store_penalties(course_url(out), students, saved.notebooks, lateness if saved.deadlines else None)
        for s in saved.students:
            for n in s.notebooks:
                _with_points(n, book.entries[s.student][n.notebook])
        return saved

    def save(self, out: Path) -> None:
        """``OUT/.record.json``: this record for :meth:`load` (its run's facts left out)."""
        body = to_message(dataclasses.replace(self, run=RunFacts()))["body"]
        write_atomically(Path(out) / RECORD_NAME, (json.dumps(body) + "\n").encode())


def _notebook(notebook: str, facts: list[TestFacts], outcome: TaskOutcome, entry, late: Lateness | None
              ) -> NotebookRecord:
    """One student's notebook: each test's verdict from the task's cell (or why there is none), the gradebook's
    points in it."""
    cells = outcome.cells
    reason = "; ".join(outcome.notes) or "not graded"
    tests = [_test(f, cells.get(f.name), reason) for f in facts]
    record = NotebookRecord(notebook, outcome.status, tests, late=late, seconds=outcome.seconds,
                            timings=outcome.timings, notes=list(outcome.notes), page=outcome.feedback)
    return _with_points(record, entry)


def _test(facts: TestFacts, cell, reason: str) -> TestRecord:
    """A test's verdict as the task decided it (points set from the gradebook afterwards)."""
    if cell is None:
        verdict = Verdict(grade_id=facts.name, passed=False, judged=False, max_points=facts.max_points, message=reason,
                          by=BY_HAND if facts.written else BY_NOTEBOOK, concept=facts.concept)
        return TestRecord(facts, verdict)
    verdict = dataclasses.replace(cell.verdict, max_points=facts.max_points)
    if facts.written:
        to_grade = cell.needs_manual_grade
        verdict = dataclasses.replace(verdict, message="written answer: to be graded by hand" if to_grade else
                                      "no answer written", judged=not to_grade, by=BY_HAND if to_grade else BY_NOTEBOOK)
        return TestRecord(facts, verdict, to_grade=to_grade)
    return TestRecord(facts, verdict, in_notebook=cell.in_notebook)


def _with_points(record: NotebookRecord, entry) -> NotebookRecord:
    """``record`` with the gradebook's points: each test's score (a score given by hand replaces the verdict's,
    and says so) and the late penalty stored."""
    for i, test in enumerate(record.tests):
        hand = entry.by_hand.get(test.name)
        if hand is not None:
            verdict = Verdict(grade_id=test.name, passed=hand >= test.max_points, points=hand,
                              max_points=test.max_points, by=BY_HAND, concept=test.facts.concept,
                              message=f"graded by hand: {hand:g} / {test.max_points:g}")
            record.tests[i] = TestRecord(test.facts, verdict)
        else:
            record.tests[i] = dataclasses.replace(
                test, verdict=dataclasses.replace(test.verdict, points=entry.auto.get(test.name, 0.0)))
    record.late_penalty = entry.penalty
    return record
