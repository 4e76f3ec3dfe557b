"""``grades.csv``: one row per student and notebook (a notebook the grader could not grade has an empty score, not 0:
its reason is in the student's JSON and the summary), the late columns only when the course has deadlines."""

from __future__ import annotations

from collections.abc import Iterator

from ..csvcells import csv_bytes
from ..record import ClassRecord
from .numbers import points

NAME = "grades.csv"
FIELDS = ("student", "notebook", "score", "max_score")
LATE_FIELDS = ("raw_score", "late_penalty", "hours_late", "submitted", "time_source")  # with deadlines only


def rows(record: ClassRecord) -> tuple[tuple[str, ...], list[dict]]:
    """The columns and the rows."""
    table = []
    for student in record.students:
        for nb in student.notebooks:
            row = {"student": student.student, "notebook": nb.notebook,
                   "score": "" if nb.status == "error" else points(nb.score),  # not graded: no score, never a 0
                   "max_score": points(nb.max_score)}
            if record.deadlines:
                late = nb.late
                row.update(raw_score=points(nb.raw_score), late_penalty=points(nb.late_penalty),
                           hours_late=late.hours_late if late else "", submitted=late.submitted if late else "",
                           time_source=late.source if late else "")
            table.append(row)
    return (FIELDS + LATE_FIELDS if record.deadlines else FIELDS), table


def files(record: ClassRecord) -> Iterator[tuple[str, bytes]]:
    yield NAME, csv_bytes(*rows(record))  # formulas neutralised
