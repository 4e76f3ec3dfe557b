"""An LMS's gradebook CSV kept as the LMS wrote it, so that the file the export writes differs only in its own cells.

Why not the csv module: reading cells and writing them again re-encodes every cell in Python's dialect (its quoting,
``\\r\\n`` line ends, a trailing newline, a comma), so a roster downloaded with ``;`` or tabs, LF line ends or quotes
around every cell came back changed in every line, and Canvas shows each changed cell as a change to import. Here
the text is kept: each record is a list of fields, each field a span of the text with its value, and
:meth:`Roster.with_cells` replaces the spans of the fields the export writes, nothing else (a byte-order mark, blank
lines, line ends, quotes and a missing last newline included).

The delimiter is found as Canvas's importer finds it (canvas-lms ``lib/gradebook_importer.rb``,
``identify_delimiter``: each candidate splits the first three lines; one that splits them all into the same number of
fields scores that number; the highest score wins, a comma on a tie). Canvas tries ``;`` and ``,``; Moodle's export
also writes tab and colon (``lib/csvlib.class.php``, ``csv_import_reader::get_delimiter_list``), and its import form
asks which one the file uses. The written cells keep the file's delimiter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

BOM = "\ufeff"
LINE_END = re.compile(r"\r\n|\r|\n")
NAMES = {",": "comma", ";": "semicolon", "\t": "tab", ":": "colon"}


class RosterError(ValueError):
    """The roster cannot be read as CSV; the message names the row and the fix."""


class Field(NamedTuple):  # a tuple: a roster has hundreds of thousands of them
    start: int  # its span in the text, quotes included
    end: int
    value: str
    quoted: bool


@dataclass(frozen=True)
class Record:
    fields: tuple[Field, ...]  # () for a blank line
    end: int  # where its last field ends (its line end, if any, follows)

    @property
    def values(self) -> list[str]:
        return [f.value for f in self.fields]


def split(text: str, delimiter: str, *, strict: bool = False, limit: int | None = None) -> list[Record]:
    """The records of ``text`` (at most ``limit``). A quoted field runs to its closing quote (``""`` is a quote), line
    ends included; ``strict`` (for telling delimiters apart, as Ruby's CSV does): a quote inside an unquoted field or
    text after a closing quote is an error, which is otherwise kept in the value, as Python's csv keeps it."""
    plain = re.compile(f"[^{re.escape(delimiter)}\r\n]*")
    records, i = [], 0
    while i < len(text) and (limit is None or len(records) < limit):
        fields = []
        while fields or not LINE_END.match(text, i):  # a line end first: a blank line, no field
            if text.startswith('"', i):
                fields.append(_quoted(text, i, plain, strict, len(records) + 1))
            else:
                end = plain.match(text, i).end()
                if strict and '"' in text[i:end]:
                    raise RosterError(f"row {len(records) + 1}: a quote inside an unquoted cell")
                fields.append(Field(i, end, text[i:end], False))
            i = fields[-1].end  # at a delimiter, a line end or the end of the text
            if not text.startswith(delimiter, i):
                break
            i += 1
        records.append(Record(tuple(fields), i))
        ending = LINE_END.match(text, i)
        i = ending.end() if ending else i
    return records


def _quoted(text: str, start: int, plain: re.Pattern, strict: bool, row: int) -> Field:
    parts, i = [], start + 1
    while True:
        close = text.find('"', i)
        if close < 0:
            raise RosterError(f"row {row}: a quoted cell is never closed: download the gradebook CSV again")
        parts.append(text[i:close])
        if not text.startswith('""', close):
            break
        parts.append('"')
        i = close + 2
    tail = plain.match(text, close + 1).end()
    if strict and tail > close + 1:
        raise RosterError(f"row {row}: text after a closing quote")
    return Field(start, tail, "".join(parts) + text[close + 1:tail], True)


def detect(text: str, candidates: tuple[str, ...]) -> str:
    """The delimiter among ``candidates`` that splits the first three records into the most fields, the same number in
    each (Canvas's rule); the first candidate on a tie or when none does."""
    best, most = candidates[0], 0
    for delimiter in candidates:
        try:
            counts = {len(r.fields) for r in split(text, delimiter, strict=True, limit=3)}
        except RosterError:
            continue
        if len(counts) == 1 and (count := counts.pop()) > most:
            best, most = delimiter, count
    return best


@dataclass
class Roster:
    """An LMS's CSV as read: its values for matching, its text for writing it back."""

    text: str  # without the byte-order mark
    bom: bool  # the LMS wrote a UTF-8 byte-order mark (Excel needs it for UTF-8 names): written back the same
    delimiter: str
    records: list[Record]

    @cached_property
    def header(self) -> list[str]:
        return self.records[0].values

    @cached_property
    def rows(self) -> list[list[str]]:
        """Every record under the header, blank ones as []: ``rows[i]`` is the file's row ``i + 2``."""
        return [r.values for r in self.records[1:]]

    def column(self, name: str) -> int:
        return self.header.index(name)

    def with_cells(self, cells: dict[tuple[int, int], str]) -> bytes:
        """The file with cell (row index in :attr:`rows`, column) set to each text, every other byte as read; a row
        shorter than the column gets empty cells up to it."""
        by_record: dict[int, dict[int, str]] = {}
        for (row, col), value in cells.items():
            by_record.setdefault(row + 1, {})[col] = value
        out, at = [BOM if self.bom else ""], 0
        for r, changes in sorted(by_record.items()):
            record = self.records[r]
            for field_at, field in enumerate(record.fields):
                if field_at in changes:
                    out += [self.text[at:field.start], self.encode(changes[field_at], field.quoted)]
                    at = field.end
            tail = [self.encode(changes.get(c, ""), False) for c in range(len(record.fields), max(changes) + 1)]
            lead = self.delimiter if tail and record.fields else ""
            out += [self.text[at:record.end], lead + self.delimiter.join(tail)]
            at = record.end
        out.append(self.text[at:])
        return "".join(out).encode("utf-8")

    def encode(self, value: str, quoted: bool) -> str:
        """``value`` as a field of this file: quoted if the field was, or if it must be."""
        if quoted or any(c in value for c in (self.delimiter, '"', "\r", "\n")):
            return '"' + value.replace('"', '""') + '"'
        return value


def read(path: Path, delimiters: tuple[str, ...]) -> Roster:
    """The CSV at ``path`` (UTF-8, with or without a byte-order mark), split on the delimiter :func:`detect` finds."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise RosterError(f"{path}: cannot be read ({exc.strerror}): download the gradebook CSV from the LMS") from None
    except UnicodeDecodeError:
        raise RosterError(f"{path}: not UTF-8: export the gradebook from the LMS again as CSV (UTF-8)") from None
    bom = text.startswith(BOM)
    text = text[1:] if bom else text
    delimiter = detect(text, delimiters)
    try:
        records = split(text, delimiter)
    except RosterError as exc:
        raise RosterError(f"{path} {exc}") from None
    if not records or not records[0].fields:
        raise RosterError(f"{path} is empty or starts with a blank line: download the gradebook CSV from the LMS")
    return Roster(text, bom, delimiter, records)
