"""The file a course's LMS imports: its own gradebook export (the roster) with the assignment's column filled.

Why this shape: Canvas and Moodle each import the CSV they export, matched on their own student identifiers, and
ignore or keep every other column. So the instructor downloads the roster from the LMS, and ``python -m autograder
export --format canvas|moodle --roster ROSTER.csv --out OUT`` writes the same file back with one column changed: each
student's total (autograded and hand-graded points, late penalty taken) from OUT's class record. Every other cell, row
and column stays as the LMS wrote it. The roster is matched to the submission folders by a key the instructor
chooses (:data:`FORMATS`: a login, an email, an id number, or a mapping file); a roster student with no submission
and a submission with no roster row are both listed (:class:`ExportReport`), never dropped silently.

Identity is exact and a clash is never guessed (issue 42): the key is matched as the LMS matches it
(:func:`autograder.course.identity.key`: case, Unicode compatibility forms, spacing), so two submissions one key
would match (``Vic.Tim@x`` and ``vic.tim@x``) fill no row until a mapping file names each, and two roster rows
holding one key are both left alone; each is reported (:attr:`ExportReport.ambiguous`). A roster cell is written
back as it was read: the CSV-injection guard applies to the cells the export writes, not to the identity it
matched on.

- Canvas (Grades > Export): ``Student, ID, SIS User ID, SIS Login ID, Section, <assignment> (<id>), ...`` with a
  ``Points Possible`` row under the header; Canvas matches rows on ``ID`` / ``SIS User ID`` / ``SIS Login ID`` and
  ignores its read-only columns (totals) on import.
- Moodle (Grade administration > Export > Plain text file): ``First name, Last name, ID number, Institution,
  Department, Email address, Assignment: <name> (Real), ...``; Moodle's CSV import maps a user by ``ID number`` or
  ``Email address`` and a column to the grade item.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import identity
from autograder.layout import ASSIGNMENT

from labutils.atomic import write_atomically

from ..csvcells import csv_lines, neutralise
from ..record import ClassRecord, StudentRecord

ASSIGNMENT_TITLE = "Loop Lab"  # the assignment's name in the LMS, as the column is found by default


class ExportError(ValueError):
    """The roster, the mapping or the options do not fit together; the message names the fix."""


@dataclass(frozen=True)
class LmsFormat:
    """How one LMS's gradebook CSV names its students."""

    name: str
    keys: dict[str, str]  # --match choice -> the roster column holding it
    default_key: str
    points_row: str | None = None  # the label of a non-student row under the header (Canvas's "Points Possible")


FORMATS = {
    "canvas": LmsFormat("canvas", {"login": "SIS Login ID", "sis-id": "SIS User ID", "canvas-id": "ID"}, "login",
                        points_row="Points Possible"),
    "moodle": LmsFormat("moodle", {"email": "Email address", "id-number": "ID number"}, "email"),
}


@dataclass
class ExportReport:
    """What an LMS export did: the scores written, by roster key, and what could not be matched."""

    dest: Path
    column: str
    written: dict[str, float] = field(default_factory=dict)  # submission id -> score written
    no_submission: list[str] = field(default_factory=list)  # roster keys with no graded submission
    no_roster_row: list[str] = field(default_factory=list)  # submission ids that are in no roster row
    ambiguous: list[str] = field(default_factory=list)  # clashing submissions or roster rows: nothing written for them
    notes: list[str] = field(default_factory=list)


@dataclass
class Roster:
    """An LMS's CSV as read: kept cell for cell so that writing it back changes only the assignment's column."""

    header: list[str]
    rows: list[list[str]]
    bom: bool  # the LMS wrote a UTF-8 byte-order mark (Excel needs it for UTF-8 names): written back the same

    def column(self, name: str) -> int:
        return self.header.index(name)


def read_roster(path: Path) -> Roster:
    """The LMS's CSV at ``path`` (UTF-8, with or without a byte-order mark)."""
    try:
        raw = Path(path).read_bytes()
        text = raw.decode("utf-8-sig")
    except OSError as exc:
        raise ExportError(f"{path}: cannot be read ({exc.strerror}): download the gradebook CSV from the LMS") from None
    except UnicodeDecodeError:
        raise ExportError(f"{path}: not UTF-8: export the gradebook from the LMS again as CSV (UTF-8)") from None
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        raise ExportError(f"{path} is empty: download the gradebook CSV from the LMS")
    return Roster(header=rows[0], rows=rows[1:], bom=raw.startswith(b"\xef\xbb\xbf"))


def _bare(header: str) -> str:
    """A column name without Moodle's ``Assignment: `` / `` (Real)`` and Canvas's `` (12345)``, lower case."""
    name = re.sub(r"^[A-Za-z ]+:\s*", "", header.strip())
    name = re.sub(r"\s*\((Real|Percentage|Letter|\d+)\)$", "", name)
    return name.strip().lower()


def find_column(roster: Roster, wanted: str | None) -> str:
    """The assignment's column: ``wanted`` exactly, else the one whose bare name is the assignment's title or id."""
    if wanted is not None:
        if wanted not in roster.header:
            raise ExportError(f"the roster has no column {wanted!r}; its columns: {', '.join(roster.header)}")
        return wanted
    names = {ASSIGNMENT_TITLE.lower(), ASSIGNMENT.lower()}
    found = [h for h in roster.header if _bare(h) in names]
    if len(found) != 1:
        why = "no column" if not found else f"{len(found)} columns ({', '.join(found)})"
        raise ExportError(f"{why} named like {ASSIGNMENT_TITLE!r} in the roster: create the assignment in the LMS "
                          "and export its gradebook again, or name the column with --column")
    return found[0]


def read_mapping(path: Path, roster: Roster) -> tuple[str, dict[str, str]]:
    """A mapping file ``submission,<roster column>``: (that roster column, {its value's key: submission id}); a
    submission or a value named twice is refused (the file is how the instructor says which is which)."""
    try:
        rows = list(csv.reader(io.StringIO(Path(path).read_text(encoding="utf-8-sig"), newline="")))
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportError(f"{path}: cannot be read ({exc})") from None
    if not rows or len(rows[0]) != 2 or rows[0][0] != "submission" or rows[0][1] not in roster.header:
        raise ExportError(f"{path}: its header must be submission,<a roster column> (e.g. submission,SIS User ID); "
                          f"the roster's columns: {', '.join(roster.header)}")
    mapping, lines = {}, {}
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise ExportError(f"{path} line {line}: two cells needed, a submission folder and its roster value")
        submission, value = row[0].strip(), identity.key(row[1])
        for name, seen in ((submission, lines.get(submission)), (value, lines.get(("value", value)))):
            if seen:
                raise ExportError(f"{path} lines {seen} and {line} both name {name!r} (roster values are matched "
                                  "as the LMS matches them: case and spacing ignored): one line per student")
        lines[submission], lines[("value", value)] = line, line
        mapping[value] = submission
    return rows[0][1], mapping


def _student_rows(roster: Roster, lms: LmsFormat) -> list[int]:
    """Indexes of the rows that are students (Canvas's Points Possible and posting rows are not)."""
    first = [(row[0].strip() if row else "") for row in roster.rows]
    return [i for i, label in enumerate(first) if not (lms.points_row and i < 3 and label in
                                                      (lms.points_row, "Manual Posting", "Auto Posting"))
            and any(cell.strip() for cell in roster.rows[i])]


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def fill(roster: Roster, lms: LmsFormat, totals: list[StudentRecord], *, match: str | None = None,
         mapping: Path | None = None, column: str | None = None, dest: Path) -> ExportReport:
    """The roster with ``column`` set to each matched student's score; the report of what matched."""
    target = find_column(roster, column)
    if mapping is not None:
        key_column, by_value = read_mapping(mapping, roster)
    else:
        key = match or lms.default_key
        if key not in lms.keys:
            raise ExportError(f"--match {key} is not one of {lms.name}'s: {', '.join(lms.keys)} (or --mapping FILE)")
        key_column, by_value = lms.keys[key], None
        if key_column not in roster.header:
            raise ExportError(f"the roster has no {key_column!r} column to match --match {key} on: export it from "
                              f"{lms.name} with that column, choose another --match, or give --mapping FILE")
    report = ExportReport(dest=dest, column=target)
    col, at = roster.column(key_column), roster.column(target)
    students = _student_rows(roster, lms)
    value = {i: roster.rows[i][col] if col < len(roster.rows[i]) else "" for i in students}
    held = identity.clashes((i, value[i]) for i in students if value[i].strip())
    report.ambiguous += [f"roster rows {' and '.join(str(i + 2) for i in rows)} hold one {key_column} "
                         f"{value[rows[0]]!r} (as {lms.name} matches it): neither is filled; remove the stale row "
                         "from the LMS's export, or match on another column (--match, --mapping)"
                         for rows in held.values()]
    clashing = {} if by_value is not None else identity.clashes((t.student, t.student) for t in totals)
    report.ambiguous += [f"submissions {' and '.join(map(repr, ids))} are one student to {lms.name}'s "
                         f"{key_column} (they differ only in case or spacing): neither is written; say which is which "
                         f"with --mapping FILE (submission,{key_column})" for ids in clashing.values()]
    by_id = {t.student: t for t in totals}
    by_key = {identity.key(t.student): t for t in totals} if by_value is None else \
        {k: by_id[sid] for k, sid in by_value.items() if sid in by_id}  # a mapping names each submission exactly
    withheld = {s for ids in clashing.values() for s in ids}
    for i in students:
        k = identity.key(value[i])
        total = by_key.get(k) if value[i].strip() else None
        if k in held or k in clashing:
            if total is not None:
                withheld.add(total.student)
            continue
        if total is None:
            report.no_submission.append(value[i] or f"row {i + 2} (no {key_column})")
            continue
        row = roster.rows[i]
        row.extend([""] * (at + 1 - len(row)))
        row[at] = neutralise(_fmt(total.score))
        report.written[total.student] = total.score
    report.no_roster_row = sorted(t.student for t in totals if t.student not in withheld and t.student not in report.written)
    _check_points(roster, lms, at, totals, report)
    write_atomically(dest, (b"\xef\xbb\xbf" if roster.bom else b"") +
                     csv_lines([roster.header, *roster.rows], as_read=True).encode("utf-8"))
    return report


def _check_points(roster: Roster, lms: LmsFormat, at: int, totals: list[StudentRecord], report: ExportReport) -> None:
    """Say so when the LMS's points possible for the column differ from the assignment's maximum."""
    if not lms.points_row or not totals:
        return
    for row in roster.rows[:3]:
        if row and row[0].strip() == lms.points_row and at < len(row) and row[at].strip():
            try:
                possible = float(row[at])
            except ValueError:
                return
            if possible != totals[0].max_score:
                report.notes.append(f"{report.column} is worth {row[at]} points in {lms.name} and the assignment "
                                    f"{_fmt(totals[0].max_score)}: scores are written in the assignment's points; "
                                    f"set the LMS's points possible to {_fmt(totals[0].max_score)}")


def export_lms(out: Path, fmt: str, roster: Path, dest: Path | None = None, *, match: str | None = None,
               mapping: Path | None = None, column: str | None = None) -> ExportReport:
    """``python -m autograder export --format canvas|moodle``: the roster filled from OUT (see the module)."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    table = read_roster(roster)
    dest = Path(dest or Path(out) / f"{fmt}_import.csv")
    return fill(table, FORMATS[fmt], ClassRecord.load(out).students, match=match, mapping=mapping, column=column, dest=dest)
