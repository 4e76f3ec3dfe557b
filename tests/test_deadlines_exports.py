"""A small class graded with deadlines, then graded by hand, exported and graded again, end to end on the one-notebook
toy assignment (tests/autograder_cases/toy.py): the late penalty is in grades.csv, the JSON, the feedback page and
every export (nbgrader, Canvas, Moodle), follows a hand grade, and is recomputed, never doubled, on a re-run that
reuses the journal and on a regrade with new extensions. The hand-in times come from every kind of source (issue 42):
the platform's times file, and the students' own timestamp.txt and file times, trusted here by deadlines.toml; a
forged timestamp.txt loses to the platform's time, and a malformed one costs its student the penalty's certainty,
never the notebook's score."""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder_cases import build, toy

pytestmark = [pytest.mark.autograder, pytest.mark.slow]
DEADLINES = ('deadline = "2026-03-01T12:00"\nrelease = "2026-02-01T00:00"\nstudent_times = ["timestamp.txt", "file time"]\n'
             '[penalty]\nper = "day"\npercent = 10\nfloor = 50\ncutoff_hours = 168\n')
MARCH_9 = 1773100000  # 2026-03-09T23:46:40Z: past the cutoff


@pytest.fixture(scope="module")
def course(tmp_path_factory, autograder_cli):
    tmp = tmp_path_factory.mktemp("deadlines")
    toy.write_source(tmp / "source")
    toy.write_student(tmp / "subs", "ontime", timestamp="2026-03-01 10:00:00.000000 UTC")
    toy.write_student(tmp / "subs", "late", timestamp="2026-03-01 10:00:00.000000 UTC")  # forged: on time
    (tmp / "times.csv").write_text("student,submitted\nlate,2026-03-02T14:00:00Z\n")  # the LMS's: 26 h, 2 days, 20%
    toy.write_student(tmp / "subs", "extended", body=toy.ONE_MISTAKE, timestamp="2026-03-02 14:00:00.000000 UTC")
    toy.write_student(tmp / "subs", "notime", mtime=MARCH_9)  # no timestamp.txt: its file's time
    toy.write_student(tmp / "subs", "nanstamp", timestamp="NaN")  # nbgrader scored this notebook 0
    (tmp / "deadlines.toml").write_text(DEADLINES)
    (tmp / "extensions.csv").write_text("student,notebook,until\nextended,,+48h\n")
    grade = ("grade", tmp / "subs", "--out", tmp / "out", "--source", tmp / "source", "-j", 2)
    proc = autograder_cli(*grade, "--deadlines", tmp / "deadlines.toml", "--extensions", tmp / "extensions.csv",
                          "--times", tmp / "times.csv")
    assert proc.returncode == 1, proc.stderr[-3000:]  # incomplete: nanstamp's hand-in time is not known
    assert ("nanstamp: hand-in time not known, no late penalty applied: timestamp.txt holds 'NaN', which is not a "
            "date and time") in proc.stderr
    return {"tmp": tmp, "out": tmp / "out", "grade": grade}


def rows(out: Path) -> dict[str, dict]:
    return {r["student"]: r for r in build.read_csv(out / "grades.csv")}


def test_penalty_in_grades_csv_json_and_feedback(course):
    out = course["out"]
    got = {s: (r["score"], r["raw_score"], r["late_penalty"], r["hours_late"], r["time_source"])
           for s, r in rows(out).items()}
    assert got == {"ontime": ("3", "3", "0", "0.0", "timestamp.txt"),
                   "late": ("2.5", "3", "0.5", "26.0", "times file (submitted)"),  # 20% of 5, floor 2.5
                   "extended": ("1", "1", "0", "0.0", "timestamp.txt"),  # late, but within the extension
                   "notime": ("0", "3", "3", "203.78", "file time"),  # past the cutoff
                   "nanstamp": ("3", "3", "0", "0.0", "timestamp.txt")}  # graded; its time not known: no penalty
    unknown = build.read_json(out / "nanstamp.json")["notebooks"][toy.NOTEBOOK]["late"]
    assert (unknown["submitted"], unknown["writer"]) == (None, "student") and "'NaN'" in unknown["problem"]
    assert "Your hand-in time is not known: timestamp.txt holds" in \
        (out / "feedback" / "nanstamp" / f"{toy.NOTEBOOK}.html").read_text()
    assert "nanstamp: hand-in time not known" in (out / "summary.md").read_text()
    record = build.read_json(out / "late.json")  # the student named "late": OUT's own files do not clash with it
    nb = record["notebooks"][toy.NOTEBOOK]
    assert (record["score"], record["raw_score"], record["late_penalty"]) == (2.5, 3, 0.5)  # Canvas's floor
    assert (nb["score"], nb["late"]["fraction"], nb["late"]["due"]) == (2.5, 0.2, "2026-03-01T12:00:00+00:00")
    assert build.read_json(out / "extended.json")["notebooks"][toy.NOTEBOOK]["late"]["extended"] is True
    page = (out / "feedback" / "late" / f"{toy.NOTEBOOK}.html").read_text()
    assert page.count('id="looplab-late"') == 1 and "26 h after the deadline" in page and "Points taken: 0.5." in page
    assert "time from times file (submitted)" in page  # every student's report names the source of their time
    assert "(time from timestamp.txt), before the deadline" in \
        (out / "feedback" / "ontime" / f"{toy.NOTEBOOK}.html").read_text()
    assert not list((out / "submitted").rglob("timestamp.txt"))  # the student's file is not nbgrader's to read


def canvas_roster(path: Path) -> Path:
    path.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Loop Lab (4242)\n"
                    "    Points Possible,,,,,5.00\n"
                    '"Time, On",1,0001,ontime,A,\n"Late, Ly",2,0002,late,A,\n"Ext, Ended",3,0003,extended,B,\n'
                    "Nobody,4,0004,dropped,B,\n")
    return path


def test_hand_grade_reaches_every_export_with_the_penalty(course, autograder_cli):
    out, tmp = course["out"], course["tmp"]
    toy.give_by_hand(f"sqlite:///{out / 'gradebook.db'}", "late", 2)  # formgrader: raw 3 -> 5
    proc = autograder_cli("export", "--out", out, "--format", "canvas", "--roster", canvas_roster(tmp / "canvas.csv"))
    assert proc.returncode == 1, proc.stderr  # notime has no roster row: listed, and the status says so
    assert "2 graded submission(s) with no roster row" in proc.stderr and "nanstamp, notime" in proc.stderr
    assert "1 roster student(s) with no graded submission" in proc.stderr and "dropped" in proc.stderr
    filled = {r["SIS Login ID"]: r["Loop Lab (4242)"] for r in build.read_csv(out / "canvas_import.csv")}
    assert filled == {"": "5.00", "ontime": "3", "late": "4", "extended": "1", "dropped": ""}  # 5 - 1: not doubled
    assert build.read_csv(out / "canvas_import.csv")[2]["SIS User ID"] == "0002"  # leading zeros kept
    (tmp / "moodle.csv").write_text("First name,Last name,ID number,Email address,Assignment: Loop Lab (Real)\n"
                                    "L,Ly,0002,l@x.example,-\nN,T,0009,n@x.example,-\n")
    (tmp / "map.csv").write_text("submission,ID number\nlate,0002\nnotime,0009\n")
    proc = autograder_cli("export", "--out", out, "--format", "moodle", "--roster", tmp / "moodle.csv", "--mapping",
                          tmp / "map.csv", "--to", tmp / "moodle_import.csv")
    assert "no roster row" in proc.stderr and "extended" in proc.stderr
    assert [r["Assignment: Loop Lab (Real)"] for r in build.read_csv(tmp / "moodle_import.csv")] == ["4", "0"]
    assert autograder_cli("export", "--out", out).returncode == 0
    nbgrader = {r["student_id"]: r for r in build.read_csv(out / "nbgrader_export.csv")}
    assert (nbgrader["late"]["raw_score"], nbgrader["late"]["late_submission_penalty"], nbgrader["late"]["score"]) \
        == ("5.0", "1.0", "4.0")
    assert nbgrader["notime"]["score"] == "0.0" and nbgrader["late"]["timestamp"] == "2026-03-02 14:00:00"
    assert {r["duedate"] for r in nbgrader.values()} == {"2026-03-01 12:00:00"}  # deadlines.toml's, in UTC


def test_rerun_and_regrade_recompute_never_double(course, autograder_cli):
    out, tmp = course["out"], course["tmp"]
    proc = autograder_cli(*course["grade"])  # no flags: OUT's deadlines and extensions, every task from the journal
    assert proc.returncode == 1 and "5 task(s) reused" in proc.stderr, proc.stderr[-2000:]  # nanstamp's time
    late = rows(out)["late"]
    assert (late["score"], late["raw_score"], late["late_penalty"]) == ("4", "5", "1")  # the hand grade counts once
    autograder_cli("export", "--out", out, "--format", "canvas", "--roster", canvas_roster(tmp / "canvas.csv"))
    exported = {r["SIS Login ID"]: r["Loop Lab (4242)"] for r in build.read_csv(out / "canvas_import.csv")[1:]}
    assert {s: r["score"] for s, r in rows(out).items() if s in exported} == \
        {s: v for s, v in exported.items() if v}  # every score the LMS gets is grades.csv's
    (tmp / "ext2.csv").write_text("student,notebook,until\nextended,,+48h\nlate,00_toy,2026-03-03T00:00\n")
    (tmp / "ext2.csv").write_text((tmp / "ext2.csv").read_text() + "lat,,+1d\n")  # a typo: warned, not fatal
    proc = autograder_cli(*course["grade"], "--deadlines", tmp / "deadlines.toml", "--extensions", tmp / "ext2.csv",
                          "--regrade", "late", "--times", tmp / "times.csv")
    assert proc.returncode == 1, proc.stderr[-2000:]  # nanstamp's time, as before
    assert "WARNING: extensions.csv names student 'lat', who has no submission" in proc.stderr
    got = rows(out)
    assert (got["late"]["score"], got["late"]["late_penalty"]) == ("5", "0")  # extended: no penalty now
    assert (got["notime"]["score"], got["notime"]["late_penalty"]) == ("0", "3")
    assert build.read_json(out / "late.json")["notebooks"][toy.NOTEBOOK]["late"]["extended"] is True
    page = (out / "feedback" / "late" / f"{toy.NOTEBOOK}.html").read_text()
    assert page.count('id="looplab-late"') == 1 and "before the deadline (2026-03-03T00:00:00+00:00 (with your " \
        "extension))" in page
