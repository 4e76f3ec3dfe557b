"""Round trips (issue 44): a Canvas and a Moodle gradebook export, as each platform writes them (both delimiters, a
byte-order mark, CRLF and LF, quoted and bare cells, a missing last newline), with the instructor's notes, formulas,
other assignments and the platform's special rows, come back from the export changed in the graded column of the
matched rows only (and, for Moodle, those rows' *Last downloaded* time): a byte diff against the roster with those
cells replaced, built here from the same pieces, and a cell diff through Python's csv module, which shares no code
with the export's reader. Pure functions on files: no grading run."""

from __future__ import annotations

import csv
import io

import pytest

from autograder.results.writers import lms

from autograder_cases.records import total

NOW = 1767225600  # the export's time
THEN = "1764000000"  # when the roster was downloaded
TOTALS = [total("ontime", 5, 5), total("late", 10 / 3, 5), total("extended", 1, 5), total("notime", 3, 5)]


def q(cell: str) -> str:
    """A cell quoted as the LMS quotes it."""
    return '"' + cell.replace('"', '""') + '"'


CANVAS_HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Notes", "Loop Lab (4242)",
                 "Quiz 1 (4243)", "Current Score", "Unposted Current Score", "Final Score", "Unposted Final Score"]


def canvas_semicolon() -> list[list[str]]:
    """Canvas in a locale with decimal commas: `;`, a posting row, points possible, notes (one a formula, one over
    two lines), the Test Student (a hashed login), a line of separators."""
    return [CANVAS_HEADER,
            ["", "", "", "", "", "", "Manual Posting", "", "", "", "", ""],
            ["    Points Possible", "", "", "", "", "", "5,00", "10,00", "(read only)", "(read only)", "(read only)",
             "(read only)"],
            [q("Doe, Jane"), "1001", "000123", "ontime", "Section A", "-1 late day used", "", "8,00", "80,00",
             "80,00", "80,00", "80,00"],
            [q("O'Brien, Robert \"Bob\""), "1002", "000456", "late", q("Section B; Tue"),
             q('=HYPERLINK("http://x.example";"x")'), q("2,50"), "7,00", "70,00", "70,00", "70,00", "70,00"],
            ["Zoë Ångström", "1003", "007890", "extended", "Section A", q("+1 extension\r\n(asked by mail)"), "",
             "", "0,00", "0,00", "0,00", "0,00"],
            [q("Müller, Jürgen"), "1004", "010001", "dropped", "Section B", "@tutor", "2,00", "9,00", "90,00",
             "90,00", "90,00", "90,00"],
            [q("Student, Test"), "1005", "", "da39a3ee5e6b4b0d3255bfef95601890afd80709", "Section A", "", "", "", "",
             "", "", ""],
            [""] * 12]


def canvas_comma() -> list[list[str]]:
    """Canvas's file as a spreadsheet saves it: every cell quoted, `,`, a short Test Student row."""
    rows = [CANVAS_HEADER,
            ["    Points Possible", "", "", "", "", "", "5.00", "10.00", "(read only)", "(read only)", "(read only)",
             "(read only)"],
            ["Doe, Jane", "1001", "000123", "ontime", "A", "-1 late day used", "", "8.00", "80", "80", "80", "80"],
            ["Late, Ly", "1002", "000456", "late", "B", "=1+1", "", "", "0", "0", "0", "0"],
            ["Ext, Ended", "1003", "007890", "extended", "B", "", "4.00", "", "0", "0", "0", "0"],
            ["Müller, Jürgen", "1004", "010001", "dropped", "B", "@tutor", "2.00", "9.00", "90", "90", "90", "90"],
            ["Student, Test", "1005"]]
    return [[q(c) for c in row] for row in rows]


MOODLE_HEADER = ["First name", "Last name", "ID number", "Institution", "Department", "Email address",
                 "Assignment: Loop Lab (Real)", "Assignment: Loop Lab (Percentage)", "Assignment: Loop Lab (Feedback)",
                 "Quiz: Week 1 (Real)", "Last downloaded from this course"]


def moodle_tab() -> list[list[str]]:
    """Moodle's plain text export with tabs (PHP's fputcsv quotes a cell holding a space), the grade as points and
    as a percentage, feedback (a formula, a line break), another grade item, its download time."""
    return [[q(h) if " " in h else h for h in MOODLE_HEADER],
            ["Jane", q("Doe, Jr."), "000123", q("Uni Example"), "CS", "ontime@uni.example", "3.00", q("60.00 %"),
             q("-1 late day used"), "8.00", THEN],
            ["Robert", q("O'Brien \"Bob\""), "000456", q("Uni Example"), "Maths", "late@uni.example", "-", "-",
             q("=1+1"), "7.00", THEN],
            ["Zoë", "Ångström", "007890", q("Uni Example"), "Physics", "extended@uni.example", "-", "-",
             q("see me\nafter class"), "-", THEN],
            ["Jürgen", "Müller", "010001", q("Uni Example"), "Physics", "dropped@uni.example", "4.00", q("80.00 %"),
             "", "9.00", THEN]]


def moodle_comma() -> list[list[str]]:
    """Moodle's export with commas and one display type, saved with a byte-order mark and CRLF."""
    return [MOODLE_HEADER[:7] + MOODLE_HEADER[8:],
            ["Jane", q("Doe, Jr."), "000123", "Uni Example", "CS", "ontime@uni.example", "-", "-1 late day used",
             "8.00", THEN],
            ["Robert", "O'Brien", "000456", "Uni Example", "Maths", "late@uni.example", "-", "=1+1", "7.00", THEN],
            ["Zoë", "Ångström", "007890", "Uni Example", "Physics", "extended@uni.example", "-", "", "-", THEN],
            []]  # a blank line at the end


CASES = {  # name: (format, rows, delimiter, line end, BOM, last newline, {row: {column: the cell written}})
    "canvas-semicolon-bom-crlf": ("canvas", canvas_semicolon, ";", "\r\n", True, True,
                                  {3: {6: "5"}, 4: {6: q("3.33")}, 5: {6: "1"}}),
    "canvas-comma-quoted-lf": ("canvas", canvas_comma, ",", "\n", False, False,
                               {2: {6: q("5")}, 3: {6: q("3.33")}, 4: {6: q("1")}}),
    "moodle-tab-lf": ("moodle", moodle_tab, "\t", "\n", False, True,
                      {1: {6: "5", 10: str(NOW)}, 2: {6: "3.33333", 10: str(NOW)}, 3: {6: "1", 10: str(NOW)}}),
    "moodle-comma-bom-crlf": ("moodle", moodle_comma, ",", "\r\n", True, True,
                              {1: {6: "5", 9: str(NOW)}, 2: {6: "3.33333", 9: str(NOW)}, 3: {6: "1", 9: str(NOW)}}),
}


def file_bytes(rows: list[list[str]], delimiter: str, end: str, bom: bool, last_end: bool) -> bytes:
    text = end.join(delimiter.join(row) for row in rows) + (end if last_end else "")
    return (("\ufeff" if bom else "") + text).encode("utf-8")


def grid(data: bytes, delimiter: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""), delimiter=delimiter))


@pytest.mark.parametrize("case", CASES)
def test_the_roster_comes_back_changed_only_in_the_graded_cells(tmp_path, case):
    fmt, rows, delimiter, end, bom, last_end, written = CASES[case]
    roster = rows()
    (tmp_path / "roster.csv").write_bytes(file_bytes(roster, delimiter, end, bom, last_end))
    (tmp_path / "map.csv").write_text("submission,Email address\nontime,ontime@uni.example\nlate,late@uni.example\n"
                                      "extended,extended@uni.example\n")
    mapping = tmp_path / "map.csv" if fmt == "moodle" else None
    report = lms.fill(lms.read_roster(tmp_path / "roster.csv", lms.FORMATS[fmt]), lms.FORMATS[fmt], TOTALS,
                      mapping=mapping, dest=tmp_path / "out.csv", now=NOW)
    expected = [list(row) for row in roster]
    for r, changes in written.items():
        for c, cell in changes.items():
            expected[r][c] = cell
    out = (tmp_path / "out.csv").read_bytes()
    assert out == file_bytes(expected, delimiter, end, bom, last_end)  # the byte diff: nothing else moved
    before, after = grid(file_bytes(roster, delimiter, end, bom, last_end), delimiter), grid(out, delimiter)
    changed = {(r, c) for r, (a, b) in enumerate(zip(before, after, strict=True))
               for c, (x, y) in enumerate(zip(a, b, strict=True)) if x != y}
    assert changed == {(r, c) for r, changes in written.items() for c in changes}
    assert b"-1 late day used" in out and b"'-1" not in out and b"'=" not in out  # the instructor's text as written
    assert report.no_submission == {"canvas": ["dropped"], "moodle-tab-lf": ["dropped@uni.example"]}.get(
        fmt if fmt == "canvas" else case, [])  # Canvas's special rows and Test Student are not students
    assert (report.no_roster_row, report.ambiguous) == (["notime"], [])
    if fmt == "canvas":  # the points-possible row, read with decimal commas too, agrees with the assignment's 5
        assert report.notes == []


def test_a_semicolon_roster_used_to_be_refused_with_a_misleading_message(tmp_path):
    """The same file the comma reader refused ("no column named like 'Loop Lab'") is read on `;`, as Canvas reads it."""
    (tmp_path / "r.csv").write_bytes(file_bytes(canvas_semicolon(), ";", "\r\n", True, True))
    roster = lms.read_roster(tmp_path / "r.csv", lms.FORMATS["canvas"])
    assert (roster.delimiter, lms.find_column(roster, lms.FORMATS["canvas"], None)) == (";", "Loop Lab (4242)")
