"""CSV injection (issue 28): every CSV the grader writes (grades.csv, the export) holds no cell a spreadsheet reads as
a formula, through one helper (:mod:`autograder.results.csvcells`). Fast: no grading run."""

from __future__ import annotations

import csv
import io

import pytest

from autograder.results.csvcells import FORMULA_STARTS, csv_bytes, neutralise

pytestmark = pytest.mark.autograder

ATTACKS = ["=1+1", "+1+1", "-1+1", "@h3+1", "=cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", '=HYPERLINK("http://x","y")',
           "-x", "--remove-files", "@SUM(A1:A2)"]


def read(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


@pytest.mark.parametrize("cell", ATTACKS)
def test_a_formula_cell_is_written_as_text(cell):
    assert neutralise(cell) == "'" + cell
    (got,) = read(csv_bytes(["student"], [{"student": cell}]))[1:]
    assert got == ["'" + cell] and not got[0].startswith(FORMULA_STARTS)


@pytest.mark.parametrize("cell", ["alice", "1+1", "h3+1", "a=b", "", "0.5", "-0.5", "-3", "1e-05", 3, -2.5, None, "-"])
def test_data_is_left_as_it_is(cell):
    """Names, numbers (a negative score too) and a sign alone (Moodle's "-" for no grade) are data: unchanged."""
    assert neutralise(cell) == cell


def test_cells_with_commas_quotes_and_line_breaks_stay_one_cell():
    rows = [{"a": 'x,"y"\nz', "b": "=2"}]
    assert read(csv_bytes(["a", "b"], rows)) == [["a", "b"], ['x,"y"\nz', "'=2"]]


def test_grades_csv_and_the_export_are_written_through_the_helper():
    """One writer: grades.csv and the exports write CSV only through csvcells (no csv.writer of their own)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "autograder"
    writers = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if any(w in p.read_text() for w in ("csv.writer(", "csv.DictWriter(", "CsvExportPlugin(")))
    assert writers == ["results/csvcells.py"]


def test_the_export_neutralises_what_the_gradebook_holds(tmp_path):
    """A student whose name in the gradebook is a formula (added by hand in formgrader), and a comma in another
    field: the export's cells are text, its columns stay in place."""
    from autograder.results.csvcells import write_csv
    from autograder.results.record import ClassRecord, StudentRecord
    from autograder.results.writers.nbgrader_csv import FIELDS, rows

    record = ClassRecord("loop_lab", [], [StudentRecord("=cmd|' /C calc'!A0", [], first_name="+1+1",
                                                        last_name="Doe, Jr.", email="@h3+1"),
                                          StudentRecord("alice", [])])
    path = write_csv(tmp_path / "export.csv", FIELDS, rows(record))
    with open(path, newline="") as f:
        found = {r["student_id"]: r for r in csv.DictReader(f)}
    assert sorted(found) == ["'=cmd|' /C calc'!A0", "alice"]
    eve = found["'=cmd|' /C calc'!A0"]
    assert (eve["first_name"], eve["last_name"], eve["email"], eve["score"]) == ("'+1+1", "Doe, Jr.", "'@h3+1", "0.0")
    assert found["alice"]["max_score"] == "0.0" and found["alice"]["assignment"] == "loop_lab"
