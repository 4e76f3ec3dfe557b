"""One graded (student, notebook) as the instructor's files see it: the worker's typed
:class:`~autograder.channel.Result` with the time it took, kept in the journal and read by every writer (gradebook,
grades.csv, JSON, summary, formgrader) as it is, its cells as :class:`~autograder.channel.CellScore`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from labutils.messages import build

from autograder.channel import CellScore, Result


@dataclass
class TaskOutcome:
    student: str
    notebook: str
    status: str  # graded | missing | unreadable | error
    tests: list[CellScore] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    feedback: str | None = None
    timings: dict = field(default_factory=dict)  # kernel_s, recheck_s, total_s inside the worker
    autograded: str | None = None  # the notebook as graded (outputs, hidden tests): what formgrader shows

    @classmethod
    def from_result(cls, result: Result, seconds: float) -> TaskOutcome:
        notes = list(result.notes)
        if result.status != "graded":
            notes.append(f"could not be graded: {result.error}")
        return cls(student=result.student, notebook=result.notebook, status=result.status, tests=list(result.tests),
                   notes=notes, seconds=round(seconds, 1), feedback=result.feedback, timings=dict(result.timings),
                   autograded=result.autograded)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TaskOutcome:
        return cls(**dict(data, tests=[build(CellScore, t) for t in data.get("tests", [])]))

    @property
    def points(self) -> float:
        return sum(t.points for t in self.tests)

    @property
    def max_points(self) -> float:
        return sum(t.max_points for t in self.tests)

    def cells(self) -> dict[str, CellScore]:
        """Its graded cells by name; none when it was not graded (missing, unreadable, error)."""
        return {t.name: t for t in self.tests} if self.status == "graded" else {}
