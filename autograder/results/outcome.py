"""One graded (student, notebook) as the instructor's files see it: the worker's typed
:class:`~autograder.channel.Result` with the time it took, kept in the journal and read by every writer (gradebook,
grades.csv, JSON, summary, formgrader) as it is, its cells as :class:`~autograder.channel.CellScore` by name.

Only a graded task has cells: a task the grader failed on may have read some scores before it failed, and those are
left out where the outcome is made, so no reader can count them."""

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
    cells: dict[str, CellScore] = field(default_factory=dict)  # its graded cells by name; none unless graded
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
        cells = {t.name: t for t in result.tests} if result.status == "graded" else {}
        return cls(student=result.student, notebook=result.notebook, status=result.status, cells=cells, notes=notes,
                   seconds=round(seconds, 1), feedback=result.feedback, timings=dict(result.timings),
                   autograded=result.autograded)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> TaskOutcome:
        return cls(**dict(data, cells={name: build(CellScore, t) for name, t in data.get("cells", {}).items()}))

    @property
    def points(self) -> float:
        return sum(t.points for t in self.cells.values())

    @property
    def max_points(self) -> float:
        return sum(t.max_points for t in self.cells.values())
