"""``python -m autograder export``: every student's total of the assignment from the course's gradebook (autograded
and manual points together), in the columns of nbgrader's CSV export, written through :mod:`.csvcells`.

nbgrader's own ``CsvExportPlugin`` joins the cells with commas unquoted: a name holding a comma shifts the columns,
and one starting with ``=`` is a formula in the instructor's spreadsheet. This writes the same rows safely.
"""

from __future__ import annotations

from pathlib import Path

from autograder.course.formgrader import EXPORT_NAME, load_config

from .csvcells import write_csv

EXPORT_FIELDS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
                 "late_submission_penalty", "score", "max_score")  # nbgrader's CsvExportPlugin's, in its order


def export_rows(gb) -> list[dict]:
    """One row per (assignment, student) of the nbgrader ``Gradebook`` ``gb``; no submission scores 0."""
    from nbgrader.api import MissingEntry

    rows = []
    for assignment in gb.assignments:
        for student in gb.students:
            row = {"assignment": assignment.name, "duedate": assignment.duedate, "student_id": student.id,
                   "last_name": student.last_name, "first_name": student.first_name, "email": student.email,
                   "max_score": assignment.max_score, "timestamp": "", "raw_score": 0.0,
                   "late_submission_penalty": 0.0, "score": 0.0}
            try:
                sub = gb.find_submission(assignment.name, student.id)
            except MissingEntry:
                pass
            else:
                penalty = sub.late_submission_penalty or 0.0
                row.update(timestamp=sub.timestamp, raw_score=sub.score, late_submission_penalty=penalty,
                           score=max(0.0, sub.score - penalty))
            rows.append({k: "" if v is None else str(v) for k, v in row.items()})
    return rows


def export_grades(course: Path, dest: Path | None = None) -> Path:
    """The CSV export of the course's gradebook (one row per student and assignment: its score, autograded and
    manual points together, and its maximum) to ``dest`` (default ``COURSE/nbgrader_export.csv``)."""
    from nbgrader.api import Gradebook

    from autograder.course.nbgrader_setup import database_url, prepare_tools

    prepare_tools()
    config = load_config(course)
    dest = Path(dest or Path(course) / EXPORT_NAME).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with Gradebook(database_url(config.CourseDirectory.db_url), config.CourseDirectory.course_id) as gb:
        return write_csv(dest, EXPORT_FIELDS, export_rows(gb))
