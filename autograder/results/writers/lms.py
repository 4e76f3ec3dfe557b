"""The file a course's LMS imports: its own gradebook export (the roster) with the assignment's column filled.

Why this shape: Canvas and Moodle each import the CSV they export, matched on their own student identifiers, and
ignore or keep every other column. So the instructor downloads the roster from the LMS, and ``python -m autograder
export --format canvas|moodle --roster ROSTER.csv --out OUT`` writes the same file back with one column changed: each
student's total (autograded and hand-graded points, late penalty taken) from OUT's class record. The roster is kept
as text (:mod:`autograder.results.roster`): every byte the export does not write comes back as the LMS wrote it
(quoting, byte-order mark, line ends, delimiter, blank lines), and only the cells written go through the
CSV-injection guard. The roster is matched to the submission folders by a key the instructor chooses
(:data:`FORMATS`: a login, an email, an id number, or a mapping file); a roster student with no submission and a
submission with no roster row are both listed (:class:`ExportReport`), never dropped silently.

Identity is exact and a clash is never guessed (issue 42): the key is matched as the LMS matches it
(:func:`autograder.course.identity.key`), so two submissions one key would match fill no row until a mapping file
names each, and two roster rows holding one key are both left alone; each is reported (:attr:`ExportReport.ambiguous`).

What each platform's code was read for (canvas-lms, moodle):

- Canvas (Grades > Export; ``lib/gradebook_exporter.rb``, ``lib/gradebook_importer.rb``): ``Student, ID, SIS User
  ID, SIS Login ID, Section, <assignment> (<id>), ...``. Not students to its importer: a row whose first cell holds
  ``Points Possible``, a row of nothing but ``Manual Posting``/``Muted`` and blanks (the exporter puts it under the
  header when an assignment is posted manually), a line of separators; its Test Student (the student view's, name
  ``Student, Test``, login 40 hex digits, a hash; listed last) is left alone and never reported missing. The importer
  compares scores at 2 decimals, as its exporter writes them: scores are written with 2.
- Moodle (Grade administration > Export > Plain text file; ``grade/export/txt``, ``grade/import/csv/classes/
  load_data.php``): ``First name, Last name, ID number, ..., Assignment: <name> (Real), ..., Last downloaded from
  this course``. A grade is kept to 5 decimals (``grade_grades.finalgrade`` is DECIMAL(10,5)). Without *Force
  import*, the import refuses a row whose grade was changed after that row's *Last downloaded* time, so a file built
  from a roster downloaded before the previous import was refused; the export writes its own time into the rows it
  fills (they are this export's grades), and leaves the other rows' times, which still guard them. The file holds
  no maximum grade: it is read from a ``(Percentage)`` column beside the ``(Real)`` one when the export has both.
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from autograder.course import identity
from autograder.layout import ASSIGNMENT

from labutils.atomic import write_atomically

from .. import roster as rostercsv
from ..csvcells import neutralise
from ..record import ClassRecord, StudentRecord
from ..roster import Roster

ASSIGNMENT_TITLE = "Loop Lab"  # the assignment's name in the LMS, as the column is found by default
POINTS_POSSIBLE = "Points Possible"  # Canvas's row of each assignment's points, under the header
POSTING_ROW = re.compile(r"\s*(Muted|Manual Posting.*)?\s*", re.IGNORECASE)  # gradebook_importer.rb's rule, a cell
TEST_STUDENT_LOGIN = re.compile(r"[0-9a-f]{40}")  # Canvas::Security.hmac_sha1("Test Student_<id>")
TIME_EXPORTED = "Last downloaded from this course"  # Moodle's gradeexport_txt 'timeexported' string (English)


class ExportError(ValueError):
    """The roster, the mapping or the options do not fit together; the message names the fix."""


@dataclass(frozen=True)
class LmsFormat:
    """How one LMS's gradebook CSV names its students and what its importer reads."""

    name: str
    keys: dict[str, str]  # --match choice -> the roster column holding it
    default_key: str
    delimiters: tuple[str, ...]  # what its importer can read, the one to pick on a tie first
    decimals: int  # the decimals it keeps of a score


FORMATS = {
    "canvas": LmsFormat("canvas", {"login": "SIS Login ID", "sis-id": "SIS User ID", "canvas-id": "ID"}, "login",
                        (",", ";"), 2),
    "moodle": LmsFormat("moodle", {"email": "Email address", "id-number": "ID number"}, "email",
                        (",", ";", "\t", ":"), 5),
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
    not_graded: list[str] = field(default_factory=list)  # students with a notebook not graded: nothing written
    notes: list[str] = field(default_factory=list)


def read_roster(path: Path, lms: LmsFormat) -> Roster:
    """The LMS's CSV at ``path``, split on the delimiter its importer would find (:mod:`..roster`)."""
    try:
        return rostercsv.read(path, lms.delimiters)
    except rostercsv.RosterError as exc:
        raise ExportError(str(exc)) from None


def _bare(header: str) -> str:
    """A column name without Moodle's ``Assignment: `` / `` (Real)`` and Canvas's `` (12345)``, lower case."""
    name = re.sub(r"^[A-Za-z ]+:\s*", "", header.strip())
    name = re.sub(r"\s*\((Real|Percentage|Letter|\d+)\)$", "", name)
    return name.strip().lower()


def find_column(roster: Roster, lms: LmsFormat, wanted: str | None) -> str:
    """The assignment's column: ``wanted`` exactly, else the one whose bare name is the assignment's title or id
    (Moodle's ``(Real)`` one where its export also shows the grade as a percentage or letter)."""
    if wanted is not None:
        if wanted not in roster.header:
            raise ExportError(f"the roster has no column {wanted!r}; its columns: {', '.join(roster.header)}")
        return wanted
    names = {ASSIGNMENT_TITLE.lower(), ASSIGNMENT.lower()}
    found = [h for h in roster.header if _bare(h) in names]
    if lms.name == "moodle":
        found = [h for h in found if h.endswith("(Real)")] or found
    if len(found) != 1:
        why = "no column" if not found else f"{len(found)} columns ({', '.join(found)})"
        raise ExportError(f"{why} named like {ASSIGNMENT_TITLE!r} in the roster (read as "
                          f"{rostercsv.NAMES[roster.delimiter]}-separated): create the assignment in the LMS and "
                          "export its gradebook again, or name the column with --column")
    if lms.name == "moodle" and not found[0].endswith("(Real)"):
        raise ExportError(f"{found[0]!r} is a grade shown as a percentage or letter, and Moodle imports points: "
                          "export the gradebook with the Real grade display type (or name a column with --column)")
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


def student_rows(roster: Roster, lms: LmsFormat) -> list[int]:
    """Indexes of the rows that are students: Moodle's import skips a line of one field or none; Canvas's also its
    points-possible and posting rows, and its Test Student is nobody's (see the module)."""
    return [i for i, row in enumerate(roster.rows) if len(row) > 1 and any(cell.strip() for cell in row)
            and not (lms.name == "canvas" and _canvas_special(roster.header, row))]


def _canvas_special(header: list[str], row: list[str]) -> bool:
    if POINTS_POSSIBLE in row[0] or all(POSTING_ROW.fullmatch(cell) for cell in row):
        return True
    cell = dict(zip(header, row))
    name = cell.get("Student", f"{cell.get('LastName', '')}, {cell.get('FirstName', '')}").strip()
    login = cell.get("SIS Login ID", "").strip()
    test_student = name == "Student, Test" or bool(TEST_STUDENT_LOGIN.fullmatch(login))
    return test_student and not cell.get("SIS User ID", "").strip()


def score_text(x: float, decimals: int) -> str:
    """``x`` rounded half up to ``decimals`` places, without trailing zeros (``3.5``, ``4``, ``2.68``)."""
    text = format(Decimal(repr(x)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _key_column(roster: Roster, lms: LmsFormat, match: str | None, mapping: Path | None
                ) -> tuple[str, dict[str, str] | None]:
    """The roster column students are matched on, and the mapping file's {value key: submission id} if one is given."""
    if mapping is not None:
        return read_mapping(mapping, roster)
    key = match or lms.default_key
    if key not in lms.keys:
        raise ExportError(f"--match {key} is not one of {lms.name}'s: {', '.join(lms.keys)} (or --mapping FILE)")
    if lms.keys[key] not in roster.header:
        raise ExportError(f"the roster has no {lms.keys[key]!r} column to match --match {key} on (read as "
                          f"{rostercsv.NAMES[roster.delimiter]}-separated): export it from {lms.name} with that "
                          "column, choose another --match, or give --mapping FILE")
    return lms.keys[key], None


def fill(roster: Roster, lms: LmsFormat, totals: list[StudentRecord], *, match: str | None = None,
         mapping: Path | None = None, column: str | None = None, dest: Path, now: float | None = None) -> ExportReport:
    """The roster with ``column`` set to each matched student's score, written to ``dest``; the report of what
    matched. ``now``: the export's time, for Moodle's *Last downloaded* cells (default: the clock)."""
    target = find_column(roster, lms, column)
    key_column, by_value = _key_column(roster, lms, match, mapping)
    report = ExportReport(dest=dest, column=target)
    at = roster.column(target)
    scores = _graded(_unexcused(roster, lms, at, _match(roster, lms, key_column, by_value, totals, report), report),
                     report)
    cells = {(i, at): neutralise(score_text(s.score, lms.decimals)) for i, s in scores.items()}
    if totals:
        (_canvas_points if lms.name == "canvas" else _moodle_points)(roster, at, totals[0].max_score, report)
    if lms.name == "moodle" and TIME_EXPORTED in roster.header:
        cells |= {(i, roster.column(TIME_EXPORTED)): str(int(time.time() if now is None else now)) for i in scores}
    write_atomically(dest, roster.with_cells(cells))
    return report


def _match(roster: Roster, lms: LmsFormat, key_column: str, by_value: dict[str, str] | None,
           totals: list[StudentRecord], report: ExportReport) -> dict[int, StudentRecord]:
    """{roster row: its student's record} for every row matched without a clash; the rest into ``report``."""
    col, students = roster.column(key_column), student_rows(roster, lms)
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
    withheld, matched = {s for ids in clashing.values() for s in ids}, {}
    for i in students:
        k = identity.key(value[i])
        total = by_key.get(k) if value[i].strip() else None
        if k in held or k in clashing:
            withheld |= {total.student} if total is not None else set()
        elif total is None:
            report.no_submission.append(value[i] or f"row {i + 2} (no {key_column})")
        else:
            matched[i] = total
            report.written[total.student] = total.score
    reached = withheld | set(report.written)
    report.no_roster_row = sorted(t.student for t in totals if t.student not in reached)
    return matched


def _graded(scores: dict[int, StudentRecord], report: ExportReport) -> dict[int, StudentRecord]:
    """``scores`` less the students with a notebook the grader could not grade: their total would count it as 0, so
    nothing is written for them until it is graded (said, and the export's status says so)."""
    for i, student in list(scores.items()):
        failed = [n.notebook for n in student.notebooks if n.status == "error"]
        if failed:
            del scores[i], report.written[student.student]
            report.not_graded.append(f"{student.student}: {', '.join(failed)} could not be graded (see their JSON): "
                                     "nothing written; grade again, then export")
    return scores


def _unexcused(roster: Roster, lms: LmsFormat, at: int, scores: dict[int, StudentRecord], report: ExportReport
               ) -> dict[int, StudentRecord]:
    """``scores`` less the students Canvas has excused (``EX``, any case, as its importer reads it): an excuse is the
    instructor's decision in Canvas, which a grade written over it would undo on import; said, not written."""
    if lms.name != "canvas":
        return scores
    excused = {i for i in scores if at < len(roster.rows[i]) and roster.rows[i][at].strip().upper() == "EX"}
    for i in sorted(excused):
        student = scores[i].student
        del report.written[student]
        report.notes.append(f"{student} is excused in canvas (EX, row {i + 2}): left as it is; to give the grade, "
                            "remove the excuse in Canvas and export the gradebook again")
    return {i: s for i, s in scores.items() if i not in excused}


def _canvas_points(roster: Roster, at: int, max_score: float, report: ExportReport) -> None:
    """Say so when Canvas's points possible for the column differ from the assignment's maximum."""
    row = next((r for r in roster.rows if r and POINTS_POSSIBLE in r[0]), None)
    possible = _canvas_number(row[at]) if row is not None and at < len(row) else None
    if possible is not None and not math.isclose(possible, max_score, abs_tol=0.005):
        report.notes.append(f"{report.column} is worth {row[at]} points in canvas and the assignment "
                            f"{score_text(max_score, 2)}: scores are written in the assignment's points; set the "
                            f"LMS's points possible to {score_text(max_score, 2)}")


def _canvas_number(text: str) -> float | None:
    """A number as Canvas's importer reads it (its ``decimal_comma_to_period``: the last ``,`` or ``.`` is the
    decimal point, the others group thousands)."""
    text = text.strip()
    if not re.fullmatch(r"-?[0-9.,]+", text):
        return None
    *whole, last = re.split(r"[,.]", text)
    return float(f"{''.join(whole)}.{last}" if whole else last)


def _moodle_points(roster: Roster, at: int, max_score: float, report: ExportReport) -> None:
    """Check the grade item's maximum where the roster shows it (a ``(Percentage)`` column beside the ``(Real)``):
    Moodle refuses an import with a grade above it."""
    column, most = report.column, score_text(max_score, 5)
    twin = re.sub(r"\(Real\)$", "(Percentage)", column)
    if twin == column or twin not in roster.header:
        report.notes.append(f"Moodle's export does not say {column}'s maximum grade: check that it is {most} in "
                            "Moodle (its import refuses a grade above it), or export the Percentage display type "
                            "too and this export checks it")
        return
    p = roster.column(twin)
    bounds = [b for row in roster.rows if (b := _implied_maximum(row, at, p))]
    low, high = max((b[0] for b in bounds), default=0.0), min((b[1] for b in bounds), default=math.inf)
    if not bounds or low > high:
        report.notes.append(f"could not check {column}'s maximum grade in Moodle: " + (
            "no row has a grade in both it and its Percentage column" if not bounds else
            "its Real and Percentage cells disagree (a minimum grade other than 0?)") + f"; check that it is {most}")
    elif not low <= max_score <= high:
        report.notes.append(f"{column} is out of {score_text((low + high) / 2, 2)} points in Moodle (its Real and "
                            f"Percentage cells) and the assignment {most}: Moodle refuses a grade above its maximum; "
                            f"set the grade item's maximum grade to {most}")
    if max_score > 100:
        report.notes.append("Moodle's import refuses a grade above 100 unless Site administration > Grades > "
                            "General settings allows unlimited grades (unlimitedgrades, gradepointmax)")


def _implied_maximum(row: list[str], real_at: int, percent_at: int) -> tuple[float, float] | None:
    """The range of maximum grades a row's Real and Percentage cells allow, their rounding counted (minimum 0)."""
    cells = [row[i].replace("%", "").strip() if i < len(row) else "" for i in (real_at, percent_at)]
    if not all(re.fullmatch(r"\d+([.,]\d+)?", c) for c in cells):
        return None  # "-": no grade
    (real, real_err), (percent, percent_err) = [(float(c.replace(",", ".")), _half_unit(c)) for c in cells]
    if real <= 0 or percent - percent_err <= 0:
        return None
    return (real - real_err) * 100 / (percent + percent_err), (real + real_err) * 100 / (percent - percent_err)


def _half_unit(number: str) -> float:
    """Half a unit of the last decimal written: how far the rounded cell may be from the grade."""
    decimals = len(re.split(r"[.,]", number)[1]) if re.search(r"[.,]", number) else 0
    return 0.5 * 10 ** -decimals


def export_lms(out: Path, fmt: str, roster: Path, dest: Path | None = None, *, match: str | None = None,
               mapping: Path | None = None, column: str | None = None) -> ExportReport:
    """``python -m autograder export --format canvas|moodle``: the roster filled from OUT (see the module)."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    table = read_roster(roster, FORMATS[fmt])
    dest = Path(dest or Path(out) / f"{fmt}_import.csv")
    return fill(table, FORMATS[fmt], ClassRecord.load(out).students, match=match, mapping=mapping, column=column, dest=dest)
