"""What one student gets back, typed: the record every writer reads (the student's JSON, the class summary,
Gradescope's results.json, any future exporter), turned into JSON only at the file (``OUT/<student>.json``) and back
right after. Each test carries its cell's verdict (:class:`labutils.verdict.Verdict`) as fields: no writer learns a
fact from a message."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from labutils.verdict import BY_CHECK, Verdict


@dataclass
class NotebookGrade:
    """One (student, notebook) as the gradebook holds it now (hand-graded points included): a row of grades.csv and
    what the LMS exports add up."""

    student: str
    notebook: str
    score: float  # after the late penalty
    max_score: float
    raw_score: float
    late_penalty: float


@dataclass
class TestRecord:
    """One graded test of the student: its points and its verdict's data (``passed`` None: a written answer not yet
    graded by hand)."""

    notebook: str
    name: str  # grade_id
    kind: str  # auto | manual
    points: float
    max_points: float
    passed: bool | None
    message: str  # for the student
    judged: bool = True
    blocked_by: list[str] = field(default_factory=list)  # the graded tests to fix first
    causes: list[str] = field(default_factory=list)  # the check ids that cost its points
    concept: str = ""  # the registry's, "" for a test it does not define
    by: str = BY_CHECK  # check | notebook | hand

    @classmethod
    def of(cls, notebook: str, verdict: Verdict, kind: str, passed: bool | None) -> TestRecord:
        return cls(notebook=notebook, name=verdict.grade_id, kind=kind, points=verdict.points,
                   max_points=verdict.max_points, passed=passed, message=verdict.message, judged=verdict.judged,
                   blocked_by=list(verdict.blocked_by), causes=list(verdict.causes), concept=verdict.concept,
                   by=verdict.by)

    @property
    def root_cause(self) -> str:
        """The graded test whose mistake cost this one its points: the first it is blocked by, else itself."""
        return self.blocked_by[0] if self.blocked_by else self.name


@dataclass
class NotebookRecord:
    status: str  # graded | missing | unreadable | error
    score: float = 0.0  # after the late penalty
    raw_score: float = 0.0
    late_penalty: float = 0.0
    late: dict | None = None  # autograder.results.late.Lateness as its fields, with deadlines only
    max_score: float = 0.0
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    feedback: str | None = None  # the HTML feedback page

    @property
    def handed_in(self) -> bool:
        return self.status not in ("missing", "unreadable")


@dataclass
class StudentRecord:
    student: str
    notebooks: dict[str, NotebookRecord]
    tests: list[TestRecord]
    assignment: str = ""
    score: float = 0.0  # after the late penalties
    raw_score: float = 0.0
    late_penalty: float = 0.0
    max_score: float = 0.0
    graded: bool = True  # no notebook of it is in error
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        order = ("student", "assignment", "score", "raw_score", "late_penalty", "max_score", "graded", "notes")
        return json.dumps({**{k: data[k] for k in order}, **data}, indent=1) + "\n"  # the file's order, as before

    @classmethod
    def from_json(cls, text: str) -> StudentRecord:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(TestRecord)}
        return cls(**dict(data, notebooks={nb: NotebookRecord(**n) for nb, n in data["notebooks"].items()},
                          tests=[TestRecord(**{k: v for k, v in t.items() if k in known}) for t in data["tests"]]))
