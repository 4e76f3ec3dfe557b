"""LMS import files (autograder/results/writers/lms.py) against golden files: realistic Canvas and Moodle gradebook exports
(ids with leading zeros, names with commas and quotes, UTF-8 names, sections, a byte-order mark, a Points Possible
row, a test student) filled from known totals; every other cell stays as the LMS wrote it; the unmatched are listed."""

from __future__ import annotations

import csv
import io
import random
import re
from pathlib import Path

import pytest

from autograder.results import roster
from autograder.results.csvcells import neutralise
from autograder.results.writers import lms
from autograder.results.writers.lms import ExportError

from autograder_cases.records import total

GOLDEN = Path(__file__).parent / "golden" / "lms"
TOTALS = [total("extended", 1, 5, 0), total("late", 4.5, 5, 1),
          total("notime", 3, 5, 3), total("ontime", 5, 5, 0)]


def cells(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"), newline="")))


NOW = 1767225600  # 2026-01-01T00:00Z: the export's time, which Moodle's rows it fills get


def fill(fmt: str, roster: str, tmp_path: Path, totals=TOTALS, **kw) -> lms.ExportReport:
    return lms.fill(lms.read_roster(GOLDEN / roster, lms.FORMATS[fmt]), lms.FORMATS[fmt], totals,
                    dest=tmp_path / "out.csv", now=NOW, **kw)


def test_canvas_golden(tmp_path):
    report = fill("canvas", "canvas_roster.csv", tmp_path)
    assert (tmp_path / "out.csv").read_bytes() == (GOLDEN / "canvas_expected.csv").read_bytes()
    assert report.column == "Loop Lab (12345)"
    assert report.written == {"ontime": 5, "late": 3.5, "extended": 1}
    assert report.no_submission == ["dropped"]  # listed, its cells left alone; the Test Student is nobody's
    assert report.no_roster_row == ["notime"]
    assert report.notes == []  # Canvas's points possible (5.00) is the assignment's


def test_canvas_changes_only_the_assignment_column(tmp_path):
    fill("canvas", "canvas_roster.csv", tmp_path)
    before, after = cells(GOLDEN / "canvas_roster.csv"), cells(tmp_path / "out.csv")
    at = before[0].index("Loop Lab (12345)")
    assert len(before) == len(after) and before[0] == after[0]
    changed = {(i, j) for i, (a, b) in enumerate(zip(before, after)) for j in range(len(a)) if a[j] != b[j]}
    assert changed == {(2, at), (3, at), (4, at)}
    assert [row[2] for row in after[2:6]] == ["000123", "000456", "007890", "010001"]  # leading zeros kept
    assert after[5][at] == "2.00"  # a student with no submission keeps the grade the LMS had
    assert (tmp_path / "out.csv").read_bytes().startswith(b"\xef\xbb\xbf")  # the BOM the LMS wrote


def test_moodle_golden_by_email_and_by_mapping(tmp_path):
    by_email = [total("jane.doe@uni.example", 5, 5, 0), total("zoe@uni.example", 1, 5, 0),
                total("ghost@uni.example", 2, 5, 0)]
    report = fill("moodle", "moodle_roster.csv", tmp_path, by_email)  # email matched whatever its case
    assert (tmp_path / "out.csv").read_bytes() == (GOLDEN / "moodle_expected_email.csv").read_bytes()
    assert report.column == "Assignment: Loop Lab (Real)"
    assert report.no_submission == ["bob.obrien@uni.example", "jmueller@uni.example"]
    assert report.no_roster_row == ["ghost@uni.example"]
    report = fill("moodle", "moodle_roster.csv", tmp_path, mapping=GOLDEN / "moodle_mapping.csv")
    assert (tmp_path / "out.csv").read_bytes() == (GOLDEN / "moodle_expected_mapping.csv").read_bytes()
    assert report.written == {"ontime": 5, "late": 3.5, "extended": 1}
    assert report.no_submission == ["010001"] and report.no_roster_row == ["notime"]


@pytest.mark.parametrize("kwargs, says", [
    ({"column": "Homework"}, "no column 'Homework'"),
    ({"match": "email"}, "--match email is not one of canvas's"),
    ({"match": "sis-id", "column": "Quiz 1 (12346)"}, None),
])
def test_canvas_bad_options_say_what_to_fix(tmp_path, kwargs, says):
    if says is None:
        assert fill("canvas", "canvas_roster.csv", tmp_path, **kwargs).written == {}  # sis ids are not folders
        return
    with pytest.raises(ExportError, match=says):
        fill("canvas", "canvas_roster.csv", tmp_path, **kwargs)


def test_roster_without_the_assignment_or_key_column(tmp_path):
    roster = tmp_path / "r.csv"
    roster.write_text("Student,ID,SIS Login ID,Quiz 1 (1)\nA,1,a,3\n")
    with pytest.raises(ExportError, match="named like 'Loop Lab'.*--column"):
        lms.fill(lms.read_roster(roster, lms.FORMATS["canvas"]), lms.FORMATS["canvas"], TOTALS, dest=tmp_path / "o.csv")
    roster.write_text("First name,Assignment: Loop Lab (Real)\nA,-\n")
    with pytest.raises(ExportError, match="no 'Email address' column"):
        lms.fill(lms.read_roster(roster, lms.FORMATS["moodle"]), lms.FORMATS["moodle"], TOTALS, dest=tmp_path / "o.csv")
    bad = tmp_path / "map.csv"
    bad.write_text("folder,student number\nx,1\n")
    with pytest.raises(ExportError, match="header must be submission,<a roster column>"):
        fill("moodle", "moodle_roster.csv", tmp_path, mapping=bad)


def test_unknown_format_and_missing_roster_say_what_to_fix(tmp_path):
    with pytest.raises(ExportError, match="unknown format 'blackboard': use one of canvas, moodle"):
        lms.export_lms(tmp_path, "blackboard", GOLDEN / "canvas_roster.csv")
    with pytest.raises(ExportError, match="cannot be read.*download the gradebook CSV"):
        lms.read_roster(tmp_path / "nope.csv", lms.FORMATS["canvas"])


MOODLE_HEADER = "First name,Last name,ID number,Email address,Assignment: Loop Lab (Real)\n"


def moodle(tmp_path: Path, rows: str, totals, **kw) -> tuple[lms.ExportReport, dict[str, str]]:
    """Fill a Moodle roster of ``rows``; the report and {ID number: the grade cell written}."""
    (tmp_path / "roster.csv").write_text(MOODLE_HEADER + rows)
    report = lms.fill(lms.read_roster(tmp_path / "roster.csv", lms.FORMATS["moodle"]), lms.FORMATS["moodle"], totals,
                      dest=tmp_path / "out.csv", now=NOW, **kw)
    return report, {r[2]: r[4] for r in cells(tmp_path / "out.csv")[1:]}


def test_submissions_one_key_apart_fill_no_row_until_a_mapping_says_which(tmp_path):
    """Issue 42: folders `Vic.Tim@x` and `vic.tim@x` are two submissions (an old gradebook can hold both) and one
    student to Moodle's email match; the later one silently took both rows. Now neither row is filled and both are
    named, until a mapping file pairs each submission with its row."""
    totals = [total("Vic.Tim@x.example", 5, 5, 0), total("vic.tim@x.example", 1, 5, 0),
              total("ann@x.example", 4, 5, 0)]
    rows = "V,T,0001,vic.tim@x.example,-\nW,T,0002,victor.tim@x.example,-\nA,N,0003,ann@x.example,-\n"
    report, grades = moodle(tmp_path, rows, totals)
    assert grades == {"0001": "-", "0002": "-", "0003": "4"}  # no grade on a wrong row
    assert report.ambiguous == ["submissions 'Vic.Tim@x.example' and 'vic.tim@x.example' are one student to moodle's "
                                "Email address (they differ only in case or spacing): neither is written; say which "
                                "is which with --mapping FILE (submission,Email address)"]
    assert report.no_roster_row == [] and report.no_submission == ["victor.tim@x.example"]
    (tmp_path / "map.csv").write_text("submission,ID number\nVic.Tim@x.example,0002\nvic.tim@x.example,0001\n"
                                      "ann@x.example,0003\n")
    report, grades = moodle(tmp_path, rows, totals, mapping=tmp_path / "map.csv")
    assert grades == {"0001": "1", "0002": "5", "0003": "4"} and report.ambiguous == []


@pytest.mark.parametrize("twin", ["ann@x.example", "Ann@X.example", "ann@x.example ", "\uff41nn@x.example"],
                         ids=["exact", "case", "space", "nfkc"])
def test_a_roster_key_held_by_two_rows_fills_neither(tmp_path, twin):
    """Two roster rows whose keys Moodle takes for one (the same, by case, by a trailing space, a full-width letter):
    both got the grade; now neither, and the report names the rows."""
    report, grades = moodle(tmp_path, f"A,N,0003,ann@x.example,-\nA,N,0004,{twin},-\n",
                            [total("ann@x.example", 4, 5, 0)])
    assert grades == {"0003": "-", "0004": "-"}
    assert report.ambiguous == ["roster rows 2 and 3 hold one Email address 'ann@x.example' (as moodle matches it): "
                                "neither is filled; remove the stale row from the LMS's export, or match on another "
                                "column (--match, --mapping)"]
    assert report.no_roster_row == [] and report.written == {}


def test_the_export_never_changes_a_cell_it_matches_on(tmp_path):
    """The CSV-injection guard rewrote `-minus@x` in the identity column to `'-minus@x`, which Moodle no longer
    matches: the roster's own cells come back as they were, the guard applies to the cells written."""
    report, grades = moodle(tmp_path, "M,=1+1,0005,-minus@x.example,-\n", [total("-minus@x.example", 3, 5, 0)])
    assert cells(tmp_path / "out.csv")[1] == ["M", "=1+1", "0005", "-minus@x.example", "3"]
    assert report.written == {"-minus@x.example": 3}


def test_a_mapping_naming_one_student_twice_is_refused(tmp_path):
    (tmp_path / "map.csv").write_text("submission,ID number\nann,0003\nbob,0003 \n")
    with pytest.raises(ExportError, match="lines 2 and 3 both name '0003'"):
        moodle(tmp_path, "A,N,0003,ann@x.example,-\n", TOTALS, mapping=tmp_path / "map.csv")
    (tmp_path / "map.csv").write_text("submission,ID number\nann,0003\nann,0004\n")
    with pytest.raises(ExportError, match="lines 2 and 3 both name 'ann'"):
        moodle(tmp_path, "A,N,0003,ann@x.example,-\n", TOTALS, mapping=tmp_path / "map.csv")


@pytest.mark.parametrize("lines, candidates, delimiter", [
    (["a;b;c", "1;2;3"], (",", ";"), ";"),
    (["a,b;c", "1,2;3"], (",", ";"), ","),  # a tie: the comma, as Canvas decides
    (['"Doe, Jane";x;y', '"Roe, Rick";z;w'], (",", ";"), ";"),  # commas inside quotes split nothing
    (["a;b;c", "1;2"], (",", ";"), ","),  # `;` splits the lines unevenly: not it
    (["a\tb,c\td", "1\t2,3\t4"], (",", ";", "\t", ":"), "\t"),  # Moodle's tab
    (['"Assignment: Loop Lab (Real)":"ID number"', '3:"000123"'], (",", ";", "\t", ":"), ":"),
])
def test_the_delimiter_is_found_as_canvas_finds_it(lines, candidates, delimiter):
    """canvas-lms gradebook_importer.rb identify_delimiter: the candidate that splits the first three lines into the
    same number of fields, the most fields winning, the comma on a tie; Moodle's export adds tab and colon."""
    assert roster.detect("\n".join(lines) + "\n", candidates) == delimiter


def test_the_cells_written_are_guarded_and_the_rest_kept(tmp_path):
    """The CSV-injection guard applies to what the export writes, through the same splice (a cell it writes that
    needs quotes gets them in the file's delimiter); every other byte is the roster's."""
    (tmp_path / "r.csv").write_bytes(b"a;b\n-1 late day used;x\n")
    table = roster.read(tmp_path / "r.csv", (",", ";"))
    assert table.with_cells({(0, 1): neutralise("=1;2")}) == b"a;b\n-1 late day used;\"'=1;2\"\n"
    assert table.with_cells({(0, 3): "4"}) == b"a;b\n-1 late day used;x;;4\n"  # a short row grows to the column


@pytest.mark.parametrize("score, canvas, moodle", [(10 / 3, "3.33", "3.33333"), (2.675, "2.68", "2.675"),
                                                   (4.0, "4", "4"), (0.000004, "0", "0"), (36.999996, "37", "37")])
def test_scores_keep_the_precision_the_lms_keeps(score, canvas, moodle):
    """Canvas compares and shows 2 decimals (gradebook_importer.rb, gradebook_exporter.rb); Moodle's grades are
    DECIMAL(10,5): the score is rounded half up to those, not to 2 everywhere."""
    assert (lms.score_text(score, 2), lms.score_text(score, 5)) == (canvas, moodle)


@pytest.mark.parametrize("name, login, sis_id, special", [
    ("Student, Test", "", "", True),
    ("Prüfer, Test", "da39a3ee5e6b4b0d3255bfef95601890afd80709", "", True),  # a translated name: its hashed login
    ("Student, Test", "tstudent", "S123", False),  # a real student of that name has an SIS id
])
def test_canvas_test_student_is_nobodys(tmp_path, name, login, sis_id, special):
    (tmp_path / "r.csv").write_text(f"Student,ID,SIS User ID,SIS Login ID,Section,Loop Lab (1)\n"
                                    f'"{name}",9,{sis_id},{login},A,\n')
    report = lms.fill(lms.read_roster(tmp_path / "r.csv", lms.FORMATS["canvas"]), lms.FORMATS["canvas"], TOTALS,
                      dest=tmp_path / "o.csv")
    assert report.no_submission == ([] if special else [login])


MOODLE_MAX = ("Email address,Assignment: Loop Lab (Real),Assignment: Loop Lab (Percentage),"
              "Last downloaded from this course\n")


@pytest.mark.parametrize("rows, says", [
    ("a@x,4.00,80.00 %,1\nb@x,-,-,1\n", None),  # 4 is 80% of 5: the assignment's maximum
    ("a@x,4.00,40.00 %,1\n", "is out of 10 points in Moodle .* set the grade item's maximum grade to 5"),
    ("a@x,1,20 %,1\nb@x,4.00,50.00 %,1\n", "could not check .* disagree"),  # 5 and 8: a minimum grade?
    ("a@x,-,-,1\n", "could not check .* no row has a grade in both"),
])
def test_moodle_maximum_is_checked_where_the_roster_shows_it(tmp_path, rows, says):
    """Moodle's import refuses a grade above the grade item's maximum; its export names no maximum, but a
    Percentage column beside the Real one gives it (the cells' rounding counted)."""
    (tmp_path / "r.csv").write_text(MOODLE_MAX + rows)
    report = lms.fill(lms.read_roster(tmp_path / "r.csv", lms.FORMATS["moodle"]), lms.FORMATS["moodle"],
                      [total("a@x", 3, 5)], dest=tmp_path / "o.csv", now=NOW)
    assert (report.notes == []) if says is None else re.search(says, " ".join(report.notes)), report.notes


def test_moodle_roster_without_the_points_column_is_refused(tmp_path):
    (tmp_path / "r.csv").write_text("Email address,Assignment: Loop Lab (Percentage)\na@x,80.00 %\n")
    with pytest.raises(ExportError, match="percentage or letter, and Moodle imports points.*Real"):
        lms.fill(lms.read_roster(tmp_path / "r.csv", lms.FORMATS["moodle"]), lms.FORMATS["moodle"], TOTALS,
                 dest=tmp_path / "o.csv")


def moodle_refuses(data: bytes, graded_at: dict[str, int], now: int) -> list[str]:
    """Moodle's import without Force import (grade/import/csv/classes/load_data.php, prepare_import_grade_data):
    the students whose row it refuses, each row's grade going to the assignment's grade item: a Last downloaded
    time that is not an integer, in the future or over a year old, or earlier than the student's grade was last
    graded."""
    refused = []
    for row in csv.DictReader(io.StringIO(data.decode("utf-8-sig"), newline="")):
        exported, email = row[lms.TIME_EXPORTED], row["Email address"]
        if not exported.isdigit() or not now - 365 * 86400 <= int(exported) <= now or \
                int(exported) < graded_at.get(email, 0):
            refused.append(email)
    return refused


def test_moodle_reimport_of_a_file_from_an_old_roster_needs_no_force_import(tmp_path):
    """A roster downloaded once, exported, imported; then regraded and exported again from the same roster: Moodle
    refused the second import for every student graded by the first (their row's download time is older than their
    grade) until Force import was ticked. The rows the export fills carry its own time, so the second import goes
    through, and a grade changed in Moodle after the export is still protected."""
    (tmp_path / "r.csv").write_text(f"First name,Email address,Assignment: Loop Lab (Real),{lms.TIME_EXPORTED}\n"
                                    "A,a@x,-,1764000000\nB,b@x,-,1764000000\nC,c@x,-,1764000000\n")
    table = lms.read_roster(tmp_path / "r.csv", lms.FORMATS["moodle"])
    totals = [total("a@x", 3, 5), total("b@x", 4, 5)]
    first = 1764000000 + 3600
    lms.fill(table, lms.FORMATS["moodle"], totals, dest=tmp_path / "1.csv", now=first)
    assert moodle_refuses((tmp_path / "1.csv").read_bytes(), {}, now=first + 60) == []
    graded = {"a@x": first + 60, "b@x": first + 60}  # the first import graded them
    second = first + 86400
    lms.fill(table, lms.FORMATS["moodle"], totals, dest=tmp_path / "2.csv", now=second)
    lms.fill(table, lms.FORMATS["moodle"], totals, dest=tmp_path / "as_read.csv", now=1764000000)
    assert moodle_refuses((tmp_path / "as_read.csv").read_bytes(), graded, now=second + 60) == ["a@x", "b@x"]
    assert moodle_refuses((tmp_path / "2.csv").read_bytes(), graded, now=second + 60) == []
    assert moodle_refuses((tmp_path / "2.csv").read_bytes(), graded | {"b@x": second + 30}, second + 60) == ["b@x"]


def test_an_excused_canvas_student_keeps_the_excuse(tmp_path):
    """Canvas's EX is the instructor's decision: a score written over it would un-excuse the student on import."""
    (tmp_path / "r.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section,Loop Lab (1)\n"
                                    "A,1,S1,ontime,A,EX\nB,2,S2,late,A,\n")
    report = lms.fill(lms.read_roster(tmp_path / "r.csv", lms.FORMATS["canvas"]), lms.FORMATS["canvas"], TOTALS,
                      dest=tmp_path / "o.csv")
    assert (tmp_path / "o.csv").read_text() == ("Student,ID,SIS User ID,SIS Login ID,Section,Loop Lab (1)\n"
                                                "A,1,S1,ontime,A,EX\nB,2,S2,late,A,3.5\n")
    assert report.written == {"late": 3.5} and report.no_roster_row == ["extended", "notime"]
    assert report.notes == ["ontime is excused in canvas (EX, row 2): left as it is; to give the grade, remove the "
                            "excuse in Canvas and export the gradebook again"]


def test_a_student_with_a_notebook_not_graded_gets_no_total(tmp_path):
    """A notebook the grader could not grade (its zygote died twice) would count as 0 in the total: nothing is
    written for that student, the cell stays as the LMS had it, and the report says why."""
    from autograder.results.record import NotebookRecord

    broken = total("late", 4.5, 5, 1)
    broken.notebooks.append(NotebookRecord("01_baseline", "error"))
    (tmp_path / "r.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section,Loop Lab (1)\n"
                                    "A,1,S1,ontime,A,\nB,2,S2,late,A,2\n")
    report = lms.fill(lms.read_roster(tmp_path / "r.csv", lms.FORMATS["canvas"]), lms.FORMATS["canvas"],
                      [TOTALS[3], broken], dest=tmp_path / "o.csv")
    assert (tmp_path / "o.csv").read_text().endswith("A,1,S1,ontime,A,5\nB,2,S2,late,A,2\n")
    assert report.written == {"ontime": 5} and report.no_roster_row == []
    assert report.not_graded == ["late: 01_baseline could not be graded (see their JSON): nothing written; grade "
                                 "again, then export"]


def test_the_roster_reader_agrees_with_pythons_csv_and_writes_back_every_byte():
    """The roster kept as text is read as Python's csv module reads it (the oracle: random texts of quotes,
    delimiters, CR/LF/CRLF, blanks) and written back byte for byte; replacing one cell changes that cell only. A
    quoted cell never closed is refused (csv would swallow the rest of the file into it)."""
    rng = random.Random(44)
    pieces = ["a", "b", ",", ";", '"', "\n", "\r\n", "\r", " ", "é", "\t"]
    for _ in range(1500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        delimiter = rng.choice([",", ";", "\t"])
        try:
            records = roster.split(text, delimiter)
        except roster.RosterError as exc:
            assert "never closed" in str(exc)
            continue
        want = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
        assert [r.values for r in records] == want, repr(text)
        table = roster.Roster(text, False, delimiter, records)
        assert table.with_cells({}) == text.encode()
        cells = [(r, c) for r, rec in enumerate(records[1:]) for c in range(len(rec.fields))]
        if cells:
            r, c = rng.choice(cells)
            want[r + 1][c] = 'new "x"' + delimiter
            assert list(csv.reader(io.StringIO(table.with_cells({(r, c): want[r + 1][c]}).decode(), newline=""),
                                   delimiter=delimiter)) == want, repr(text)


def test_canvas_special_rows_anywhere_are_not_students(tmp_path):
    """Canvas's importer spec (gradebook_importer_spec.rb): a Points Possible row sorted among the students, a Muted
    line and a Manual Posting line (its anonymous, translated form too) are no students: nothing listed as missing,
    the points possible still read."""
    (tmp_path / "r.csv").write_text("Student,ID,SIS User ID,SIS Login ID,Section,Loop Lab (1)\n"
                                    '"Blend, Bill",6,S6,ontime,My Course,-\nPoints Possible,,,,,4\n'
                                    ", ,,,,Muted\n, ,,,,Manual Posting (scores cachés aux instructeurs)\n"
                                    '"Farner, Todd",4,S4,late,My Course,-\n')
    report = lms.fill(lms.read_roster(tmp_path / "r.csv", lms.FORMATS["canvas"]), lms.FORMATS["canvas"], TOTALS,
                      dest=tmp_path / "o.csv")
    assert (report.written, report.no_submission) == ({"ontime": 5, "late": 3.5}, [])
    assert report.notes == ["Loop Lab (1) is worth 4 points in canvas and the assignment 5: scores are written in "
                            "the assignment's points; set the LMS's points possible to 5"]
