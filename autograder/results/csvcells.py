"""Every CSV the grader writes goes through here: a cell a spreadsheet would read as a formula is written as text.

A student names their folder (and so their id) and writes the text of their messages; an instructor opens grades.csv
or the export in Excel, LibreOffice or Google Sheets, where ``=HYPERLINK(...)``, ``+1+1``, ``@SUM(...)`` or
``=cmd|' /C calc'!A0`` in a cell is a formula that runs (CSV injection). OWASP's guidance: a cell starting with
``= + - @``, tab or carriage return gets a leading ``'`` (which spreadsheets show as text and do not display), and the
cell is quoted (the csv module quotes a cell holding a quote, a comma or a line break). Numbers stay numbers.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from labutils.atomic import write_atomically

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as the start of a formula (OWASP)
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")  # a plain number such as -0.5 is data, not a formula


def neutralise(value: object) -> object:
    """``value`` as a CSV cell no spreadsheet reads as a formula: a string starting with :data:`FORMULA_STARTS`
    (other than a plain number, or the sign alone: Moodle's "-" for no grade) gets a leading ``'``; anything else is
    returned unchanged."""
    if isinstance(value, str) and len(value) > 1 and value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_lines(rows: Iterable[Iterable[object]], *, as_read: bool = False) -> str:
    """The CSV text of ``rows`` (lists of cells, a header among them or not), every cell through :func:`neutralise`
    and None written as empty (csv's default dialect: \\r\\n line ends, quoting where a cell needs it).
    ``as_read``: the cells are another program's, read from its file (an LMS's roster) and written back for it to
    read again: they are left as they are (a changed identity cell such as ``-minus@x`` would no longer match its
    student); the caller neutralises the cells it writes itself."""
    table = io.StringIO(newline="")
    csv.writer(table, lineterminator="\r\n").writerows(
        ["" if cell is None else cell if as_read else neutralise(cell) for cell in row] for row in rows)
    return table.getvalue()


def csv_bytes(fields: Iterable[str], rows: Iterable[Mapping[str, object]]) -> bytes:
    """A whole CSV file (a header, then ``rows`` as dicts keyed by ``fields``), every cell through
    :func:`neutralise`; bytes, for :func:`labutils.atomic.write_atomically`."""
    fields = list(fields)
    return csv_lines([fields, *([row.get(f, "") for f in fields] for row in rows)]).encode("utf-8")


def write_csv(path: Path, fields: Iterable[str], rows: Iterable[Mapping[str, object]]) -> Path:
    """Write :func:`csv_bytes` to ``path`` atomically (a reader never sees half a file)."""
    write_atomically(Path(path), csv_bytes(fields, rows))
    return Path(path)
