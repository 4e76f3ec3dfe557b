"""``python -m autograder export``: every student's total of the assignment (autograded and manual points together,
the late penalty taken), in the columns of nbgrader's CSV export, written through :mod:`..csvcells`.

nbgrader's own ``CsvExportPlugin`` joins the cells with commas unquoted: a name holding a comma shifts the columns,
and one starting with ``=`` is a formula in the instructor's spreadsheet. This writes the same rows safely.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from autograder.course.formgrader import EXPORT_NAME

from ..csvcells import write_csv
from ..record import ClassRecord

FIELDS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
          "late_submission_penalty", "score", "max_score")  # nbgrader's CsvExportPlugin's, in its order


def rows(record: ClassRecord) -> list[dict]:
    """One row per student, as nbgrader's export writes it (points as floats; its timestamp: when the last notebook
    came in); a student with a notebook the grader could not grade has no points yet, not 0."""
    return [{"assignment": record.assignment, "duedate": record.duedate or "",
             "timestamp": _as_nbgrader(s.handed_in_at), "student_id": s.student, "last_name": s.last_name,
             "first_name": s.first_name, "email": s.email, **_points(s), "max_score": float(s.max_score)}
            for s in record.students]


def _points(student) -> dict:
    if not student.graded:
        return dict.fromkeys(("raw_score", "late_submission_penalty", "score"), "")
    return {"raw_score": float(student.raw_score), "late_submission_penalty": float(student.late_penalty),
            "score": float(student.score)}


def _as_nbgrader(when: str | None) -> str:
    """An ISO time in UTC as nbgrader writes its (naive, UTC) timestamps."""
    return str(datetime.fromisoformat(when).replace(tzinfo=None)) if when else ""


def export_grades(course: Path, dest: Path | None = None) -> Path:
    """The CSV export of the course ``grade`` left in ``course`` (hand grades given since included) to ``dest``
    (default ``COURSE/nbgrader_export.csv``)."""
    record = ClassRecord.load(course)
    dest = Path(dest or Path(course) / EXPORT_NAME).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    return write_csv(dest, FIELDS, rows(record))
