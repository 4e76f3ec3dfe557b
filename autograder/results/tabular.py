"""Every CSV the grader writes (grades.csv, the LMS import files) goes through :func:`csv_cell`, one cell at a time.

Why one function: a cell may hold text a student or an LMS chose (a name, an id); the shared spreadsheet-formula
guard of issue 28 is pointed at from here, once, instead of at each writer.
"""

from __future__ import annotations

import csv
import io


def csv_cell(value) -> str:
    """One cell as written: numbers and text as they are, None as empty."""
    return "" if value is None else str(value)


def csv_lines(rows: list[list]) -> str:
    """The CSV text of ``rows`` (lists of cells), with csv's default dialect (\\r\\n line ends, minimal quoting)."""
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerows([[csv_cell(v) for v in row] for row in rows])
    return table.getvalue()


def csv_text(fields: tuple[str, ...] | list[str], rows: list[dict]) -> str:
    """The CSV text of dict ``rows`` under the header ``fields``."""
    return csv_lines([list(fields), *([row.get(f) for f in fields] for row in rows)])
