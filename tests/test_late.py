"""Deadlines, extensions and late penalties (autograder/results/late.py) over a matrix of times, policies and
extensions; the instructor's files read strictly, a mistake named with its fix."""

from __future__ import annotations

import math
import os
from datetime import datetime, timedelta, timezone

import pytest

import forked_graders
from autograder.results import handin, late
from autograder.results.handin import HandIn
from autograder.results.late import Deadlines, Extension, LateConfigError, Policy

UTC = timezone.utc
DUE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
H = 3600


@pytest.mark.parametrize("policy, late_s, fraction", [
    (Policy(), 50 * H, 0.0),  # no policy: late, but no penalty
    (Policy("hour", 5), 0, 0.0),
    (Policy("hour", 5), -10 * H, 0.0),  # early
    (Policy("hour", 5), 1, 0.05),  # a second late is a started hour
    (Policy("hour", 5), 3 * H, 0.15),
    (Policy("hour", 5, max_percent=20), 10 * H, 0.2),  # stops at max_percent
    (Policy("hour", 5, floor=80), 10 * H, 0.5),  # the floor depends on the score: penalty_points applies it
    (Policy("day", 10), 26 * H, 0.2),  # a started day counts whole
    (Policy("day", 10, max_percent=50), 30 * 24 * H, 0.5),
    (Policy("day", 10, max_percent=50, cutoff_hours=168), 168 * H, 0.5),  # at the cutoff: not yet
    (Policy("day", 10, max_percent=50, cutoff_hours=168), 168 * H + 1, 1.0),  # past it: zero
    (Policy("day", 10), 30 * 24 * H, 1.0),  # all of it, without a cap
    (Policy("none", cutoff_hours=24), 23 * H, 0.0),  # zero after a cutoff, nothing before
    (Policy("none", cutoff_hours=24), 25 * H, 1.0),
])
def test_policy_fraction(policy, late_s, fraction):
    assert policy.fraction(late_s) == pytest.approx(fraction)


@pytest.mark.parametrize("extensions, student, notebook, due, extended", [
    ([], "a", "01", DUE, False),
    ([Extension("a", None, extra=timedelta(hours=48))], "a", "01", DUE + timedelta(hours=48), True),
    ([Extension("a", None, extra=timedelta(hours=48))], "b", "01", DUE, False),  # someone else's
    ([Extension("a", "02", extra=timedelta(days=1))], "a", "01", DUE, False),  # another notebook's
    ([Extension("a", None, extra=timedelta(days=3)), Extension("a", "01", until=DUE + timedelta(hours=1))],
     "a", "01", DUE + timedelta(hours=1), True),  # the one naming the notebook wins
])
def test_due_with_extensions(extensions, student, notebook, due, extended):
    assert Deadlines(deadline=DUE, extensions=extensions).due(student, notebook) == (due, extended)


def test_notebook_deadline_beats_the_assignments():
    course = Deadlines(deadline=DUE, notebooks={"02": DUE + timedelta(days=7)})
    assert course.due("a", "02")[0] == DUE + timedelta(days=7) and course.due("a", "01")[0] == DUE


def test_assess_and_penalty_points_matrix():
    course = Deadlines(deadline=DUE, policy=Policy("day", 10, floor=50, cutoff_hours=168),
                       extensions=[Extension("ext", None, extra=timedelta(hours=48))])
    times = {"00": HandIn(DUE + timedelta(hours=26), "times file (submitted)", handin.PLATFORM)}
    got = {s: late.assess(course, s, times)[0] for s in ("on", "ext")}
    assert (got["on"].hours_late, got["on"].fraction, got["on"].extended) == (26.0, 0.2, False)
    assert (got["ext"].hours_late, got["ext"].fraction, got["ext"].extended) == (0.0, 0.0, True)
    assert late.penalty_points(got["on"], raw=5, max_score=5) == 1.0  # a share of the notebook's points
    assert late.penalty_points(got["on"], raw=3, max_score=5) == 0.5  # but never below the floor: 2.5 of 5
    assert late.penalty_points(got["on"], raw=0.5, max_score=5) == 0.0  # below it already: not lowered
    assert late.penalty_points(None, raw=3, max_score=5) == 0.0
    assert "penalty: 20% of the notebook's points, never below 50% of them" in got["on"].describe()
    assert "26 h after the deadline" in got["on"].describe() and "time from times file" in got["on"].describe()
    assert got["ext"].describe().startswith("Handed in 2026-03-02T14:00:00+00:00 (time from times file (submitted)),"
                                            " before the deadline")  # every report names the source of its time
    unknown = late.assess(course, "x", {"00": HandIn(None, "timestamp.txt", handin.STUDENT, "it holds 'NaN'")})[0]
    assert (unknown.fraction, unknown.submitted, unknown.problem) == (0.0, None, "it holds 'NaN'")
    assert unknown.describe().startswith("Your hand-in time is not known: it holds 'NaN'. No late penalty")


def canvas_points_deducted(score: float, possible: float, late_s: float, policy: Policy) -> float:
    """Canvas's deduction, line for line (canvas-lms app/models/late_policy.rb, LatePolicy#points_deducted)."""
    intervals_late = math.ceil(late_s / late.PER[policy.per])
    raw_score_percent = score * 100.0 / possible
    maximum_deduct = max(raw_score_percent - policy.floor, 0.0)
    late_percent_deduct = policy.percent * intervals_late
    return possible * min(late_percent_deduct, maximum_deduct) / 100


@pytest.mark.parametrize("floor", [0, 30, 50, 80, 100])
@pytest.mark.parametrize("per, percent", [("day", 10), ("hour", 2.5), ("day", 35)])
def test_floor_is_canvas_lowest_possible_grade(floor, per, percent):
    """`floor` means Canvas's "lowest possible grade": lateness never takes a score below floor percent of the
    points, and a score already below it keeps what it earned (it used to take the penalty down to the floor from
    full marks, whatever the score: 3/5 at 20% and floor 50 scored 2, where Canvas gives 2.5). Canvas's own
    formula is the oracle, over scores, lateness and floors."""
    policy = Policy(per, percent, floor=floor)
    for late_s in (1, 5 * H, 26 * H, 9 * 24 * H):
        lateness = late.assess(Deadlines(deadline=DUE, policy=policy), "s",
                               {"00": HandIn(DUE + timedelta(seconds=late_s), "times file", handin.PLATFORM)})[0]
        for raw in (0, 0.4, 1.5, 2.5, 3, 4.25, 5):
            canvas = canvas_points_deducted(raw, 5, late_s, policy)
            assert late.penalty_points(lateness, raw, 5) == pytest.approx(canvas, abs=1e-4), (raw, late_s)


def test_max_percent_caps_the_penalty_and_the_cutoff_beats_the_floor():
    """`max_percent` is the other meaning, kept by name: the penalty stops at that share of the points, whatever
    the score; with a floor both hold; past the cutoff the notebook scores 0, floor or not."""
    def cost(policy: Policy, late_s: float, raw: float) -> float:
        hand = HandIn(DUE + timedelta(seconds=late_s), "times file", handin.PLATFORM)
        return late.penalty_points(late.assess(Deadlines(deadline=DUE, policy=policy), "s", {"00": hand})[0], raw, 10)
    capped = Policy("day", 20, max_percent=30)
    assert [cost(capped, 5 * 24 * H, raw) for raw in (10, 6, 2)] == [3.0, 3.0, 2.0]  # 100% late, 30% taken
    both = Policy("day", 20, floor=50, max_percent=30, cutoff_hours=240)
    assert [cost(both, 5 * 24 * H, raw) for raw in (10, 6, 2)] == [3.0, 1.0, 0.0]
    assert [cost(both, 241 * H, raw) for raw in (10, 6, 2)] == [10.0, 6.0, 2.0]  # past the cutoff: 0


def test_read_deadlines_and_extensions(tmp_path):
    path = tmp_path / "deadlines.toml"
    path.write_text('timezone = "Europe/Berlin"\ndeadline = "2026-03-01T23:59"\n[notebooks]\n'
                    '"02_scheduler" = "2026-03-08T23:59+00:00"\n[penalty]\nper = "hour"\npercent = 2\nfloor = 60\n')
    ext = tmp_path / "extensions.csv"
    ext.write_text("student,notebook,until\nalice,,+2d\nbob,02_scheduler,2026-03-10T12:00\n")
    course = handin.load(path, ext)
    assert course.deadline == datetime(2026, 3, 1, 22, 59, tzinfo=UTC)  # Berlin is UTC+1 in March
    assert course.notebooks["02_scheduler"] == datetime(2026, 3, 8, 23, 59, tzinfo=UTC)
    assert course.policy == Policy("hour", 2, 60)
    assert course.due("alice", "01")[0] == datetime(2026, 3, 3, 22, 59, tzinfo=UTC)
    assert course.due("bob", "02_scheduler")[0] == datetime(2026, 3, 10, 11, 0, tzinfo=UTC)


@pytest.mark.parametrize("toml, says", [
    ('dedline = "2026-03-01T12:00"\n', "unknown key.*dedline"),
    ('deadline = "March 1st"\n', "not a date-time: write it as 2026-03-01T23:59"),
    ('deadline = "2026-03-01T12:00"\n[penalty]\nper = "week"\n', "per = 'week'; use one of none, hour, day"),
    ('deadline = "2026-03-01T12:00"\n[penalty]\npercent = 5\nfloors = 3\n', "unknown key.*floors"),
    ('timezone = "Mars/Olympus"\n', "timezone 'Mars/Olympus' is unknown"),
    ('deadline = 2026-03-01T12:00\n[penalty\n', "cannot be read as TOML"),
])
def test_bad_deadlines_file(tmp_path, toml, says):
    path = tmp_path / "deadlines.toml"
    path.write_text(toml)
    with pytest.raises(LateConfigError, match=says):
        handin.load(path)


@pytest.mark.parametrize("csv_text, says", [
    ("name,until\nalice,+2d\n", "header must be student,notebook,until"),
    ("student,notebook,until\nalice,,\n", "line 2: a student and an until"),
    ("student,notebook,until\nalice,,next week\n", "line 2: 'next week' is not a date-time"),
])
def test_bad_extensions_file(tmp_path, csv_text, says):
    (tmp_path / "d.toml").write_text('deadline = "2026-03-01T12:00"\n')
    (tmp_path / "e.csv").write_text(csv_text)
    with pytest.raises(LateConfigError, match=says):
        handin.load(tmp_path / "d.toml", tmp_path / "e.csv")


def test_grade_with_a_malformed_extensions_file_exits_2_before_grading(tmp_path):
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "d.toml").write_text('deadline = "2026-03-01T12:00"\n')
    (tmp_path / "e.csv").write_text("student,notebook,until\nalice,,soon\n")
    proc = forked_graders.run_real("grade", tmp_path / "subs", "--out", tmp_path / "out", "--deadlines",
                                   tmp_path / "d.toml", "--extensions", tmp_path / "e.csv", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in proc.stderr
    assert "e.csv line 2: 'soon' is not a date-time" in proc.stderr
    assert not (tmp_path / "out" / "grades.csv").exists()


def test_unknown_names_in_the_instructors_files_are_warned():
    course = Deadlines(deadline=DUE, notebooks={"O8_stretch": DUE, "01": DUE},
                       extensions=[Extension("bobb", None, extra=timedelta(hours=1)),
                                   Extension("alice", "99_nope", extra=timedelta(hours=1))])
    assert late.unknown_names(course, ["alice", "bob"], ["01", "08_stretch"]) == [
        "deadlines.toml [notebooks] names 'O8_stretch', not a notebook of the assignment (01, 08_stretch)",
        "extensions.csv names student 'bobb', who has no submission: check the spelling",
        "extensions.csv names notebook '99_nope' for 'alice': not a notebook of the assignment"]


# --- who wrote the hand-in time (issue 42): forged, implausible and malformed times of each kind ------------------------

RELEASE = datetime(2026, 2, 15, tzinfo=UTC)
NOW = datetime(2026, 3, 10, tzinfo=UTC)  # the run: the collection, unless deadlines.toml says when it was
LATE_61H = "2026-03-04 01:00:00.000000 UTC"  # nbgrader's format: 61 h late, three started days, 30%


def trusting(*kinds, **kw) -> Deadlines:
    """The course of the attacks: due March 1 12:00 UTC, 10% a started day; the students' own times believed only
    when ``kinds`` name them."""
    return Deadlines(deadline=DUE, policy=Policy("day", 10), release=RELEASE, student_times=kinds, **kw)


def intake(tmp_path, stamp=None, mtime=None):
    """One student's folder through the real intake (autograder.course.submissions): a notebook, nbgrader's
    timestamp.txt when ``stamp`` is given (bytes, a str, or "folder"), the notebook's file time when given."""
    import nbformat

    from autograder.course.submissions import discover

    folder = tmp_path / "subs" / "eve"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    if stamp == "folder":
        (folder / "timestamp.txt").mkdir()
        (folder / "timestamp.txt" / "x").write_text(LATE_61H)
    elif stamp is not None:
        (folder / "timestamp.txt").write_bytes(stamp if isinstance(stamp, bytes) else stamp.encode())
    if mtime is not None:
        os.utime(folder / "00.ipynb", (mtime, mtime))
    return discover(tmp_path / "subs", ["00"], intake=tmp_path / "intake").submissions[0]


def lateness(course: Deadlines, sub) -> late.Lateness:
    return late.assess(course, sub.student, handin.handed_in(course, sub, NOW))[0]


@pytest.mark.parametrize("stamp, fraction, says", [
    (LATE_61H, 0.3, None),  # honest: the penalty due
    ("\ufeff" + LATE_61H, 0.3, None),  # a byte-order mark an editor added: still the time
    ("2026-03-04 02:00:00.000000 CET", 0.3, None),  # the course's own zone (Europe/Berlin), as nbgrader writes it
    ("2026-03-04T02:00:00+01:00", 0.3, None),  # or as its offset
    ("0001-01-01 00:00:00.000000 UTC", None, "before the assignment was released"),  # year 1
    ("2026-02-01 10:00:00.000000 UTC", None, "before the assignment was released"),  # before the release
    ("2027-01-01 10:00:00.000000 UTC", None, "after the submissions were collected"),
    ("2026-03-04 15:00:00.000000 +14:00", None, "time zone '+14:00' is not this course's"),
    ("2026-03-01 11:00:00.000000 PST", None, "time zone 'PST' is not this course's"),  # was read as UTC: on time
    ("2026-03-04 01:00:00.000000", None, "no time zone"),
    (LATE_61H + "\x00\x00garbage", None, "which is not a date and time"),  # trailing NUL garbage
    ("NaN", None, "holds 'NaN', which is not a date and time"),
    ("9999-12-31 23:59:59.999999 -14:00", None, "time zone '-14:00' is not this course's"),  # overflow
    ("2026-13-45 25:00:00.000000 UTC", None, "month must be in 1..12"),
    (b"\xff\xfe2\x000\x00", None, "which is not a date and time"),  # UTF-16: not UTF-8 text
    ("", None, "which is not a date and time"),
    ("folder", None, "timestamp.txt is a folder, not a file"),
])
def test_a_students_own_timestamp_is_believed_only_when_plausible(tmp_path, stamp, fraction, says):
    """Opted in (student_times = ["timestamp.txt"]): the time is used if it is one line in nbgrader's format, in UTC
    or the course's zone, between the release and the collection; otherwise the student gets one line saying what was
    found, what was expected and the fix, and no penalty: never a silent fallback to another time."""
    from zoneinfo import ZoneInfo

    got = lateness(trusting("timestamp.txt", "file time", zone=ZoneInfo("Europe/Berlin")),
                   intake(tmp_path, stamp, mtime=(DUE + timedelta(hours=1)).timestamp()))
    assert (got.source, got.writer) == ("timestamp.txt", "student")  # the file time is not tried instead
    if fraction is not None:
        assert (got.fraction, got.hours_late, got.problem) == (fraction, 61.0, "")
        return
    assert (got.fraction, got.submitted) == (0.0, None) and says in got.problem, got.problem
    expected = "released (2026-02-15" if "released" in says else "collected (2026-03-10" if "collected" in says \
        else "nbgrader writes one line such as '2026-03-01 12:00:00.000000 UTC'"
    assert expected in got.problem  # what was expected
    assert got.problem.endswith("the instructor gives this hand-in time in the times file (--times)")  # the fix
    assert "\n" not in got.describe() and "\x00" not in got.describe()


def test_by_default_only_the_platforms_time_counts(tmp_path):
    """A forged timestamp.txt (on time) and a forged file time change nothing: the LMS's time is used; without one,
    and without the instructor opting in, the student's own files are not read and the student is told."""
    sub = intake(tmp_path, "2026-03-01 10:00:00.000000 UTC", mtime=(DUE - timedelta(hours=5)).timestamp())
    platform = {"eve": HandIn(DUE + timedelta(hours=61), "times file (submitted)", handin.PLATFORM)}
    got = lateness(trusting(times=platform), sub)
    assert (got.fraction, got.source, got.writer) == (0.3, "times file (submitted)", "platform")
    assert lateness(trusting("timestamp.txt", times=platform), sub).fraction == 0.3  # the platform's comes first
    nothing = lateness(trusting(), sub)
    assert (nothing.fraction, nothing.submitted) == (0.0, None)
    assert nothing.problem.startswith("no hand-in time for 'eve': no source of times;")
    assert lateness(trusting(times={"bob": platform["eve"]}), sub).problem.startswith(
        "no hand-in time for 'eve': the times file has no row for them;")


@pytest.mark.parametrize("mtime, fraction, says", [
    ((DUE + timedelta(hours=61)).timestamp(), 0.3, None),
    (0.0, None, "file time is 1970-01-01T00:00:00+00:00, before the assignment was released"),
    ((NOW + timedelta(days=30)).timestamp(), None, "after the submissions were collected"),
])
def test_file_times_with_no_timestamp_are_the_students_too(tmp_path, mtime, fraction, says):
    """No timestamp.txt: the notebook's file time, which any zip tool sets, is used only when the instructor lists
    "file time" too, and only when plausible; without that, the student gets the line, not a silent file time."""
    sub = intake(tmp_path, mtime=mtime)
    assert lateness(trusting("timestamp.txt"), sub).problem.startswith(
        "no hand-in time for 'eve': no timestamp.txt was handed in;")
    got = lateness(trusting("timestamp.txt", "file time"), sub)
    assert got.source == "file time" and got.writer == "student"
    if fraction is not None:
        assert (got.fraction, got.problem) == (fraction, "")
    else:
        assert got.fraction == 0.0 and says in got.problem, got.problem


def test_a_50_mb_timestamp_costs_the_class_under_a_second(tmp_path):
    """The intake reads its first bytes and its size; it is refused by its size, never parsed (dateutil's parse is
    quadratic: 0.11 CPU-s on 50 KB, 1.5 on 200 KB) nor copied beside the notebooks."""
    import time

    folder = tmp_path / "subs" / "eve"
    folder.mkdir(parents=True)
    with open(folder / "timestamp.txt", "wb") as f:
        f.write(b"2026-03-04 " + b"1" * (50 << 20))
    t0 = time.process_time()
    got = lateness(trusting("timestamp.txt"), intake(tmp_path, stamp=None))
    assert time.process_time() - t0 < 1.0
    assert got.problem.startswith("timestamp.txt is 52,428,811 bytes (not read): nbgrader writes one line")
    assert not list((tmp_path / "intake").rglob("timestamp.txt"))  # not taken in as a data file
    from pathlib import Path

    from autograder.course.submissions import TIMESTAMP_HEAD

    docs = Path(__file__).resolve().parents[1] / "docs"
    for page in ("security.md", "grading.md"):  # the pages state the code's bound
        assert f"at most {TIMESTAMP_HEAD} bytes" in " ".join((docs / page).read_text().split()), page


def test_the_times_file_moodles_worksheet_and_its_mistakes(tmp_path):
    """--times: the instructor's own student,submitted file or Moodle's grading worksheet (its English dates in the
    course's zone, '-' for no submission); a line that is not a time, or two lines for one student (exactly, or as
    an LMS matches: case, spacing), stops the run with the line to fix."""
    from zoneinfo import ZoneInfo

    ours = tmp_path / "times.csv"
    ours.write_text("student,submitted\neve,2026-03-04T02:00\nbob,2026-03-04T01:00:00Z\n")
    got = handin.read_times(ours, ZoneInfo("Europe/Berlin"))
    assert got["eve"].when == got["bob"].when == datetime(2026, 3, 4, 1, tzinfo=UTC)
    assert (got["eve"].source, got["eve"].writer) == ("times file (submitted)", "platform")
    moodle = tmp_path / "worksheet.csv"
    moodle.write_text("Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed,"
                      "Last modified (submission),Last modified (grade),Feedback comments\n"
                      'Participant 11,Eve E,eve@uni.example,Submitted,,5.00,Yes,"Wednesday, 4 March 2026, 2:00 AM",-,\n'
                      "Participant 12,Bob B,bob@uni.example,No submission,,5.00,Yes,-,-,\n")
    got = handin.read_times(moodle, ZoneInfo("Europe/Berlin"))
    assert got["eve@uni.example"].when == datetime(2026, 3, 4, 1, tzinfo=UTC)
    assert got["bob@uni.example"].when is None and "line 3 has no time for you ('-'" in got["bob@uni.example"].problem
    for text, says in [("student,submitted\neve,soon\n", "line 2: 'soon' is not a time"),
                       ("student,submitted\neve,2026-03-04T02:00\neve,2026-03-04T03:00\n", "lines 2 and 3 both give"),
                       ("student,submitted\nVic.Tim,2026-03-04T02:00\nvic.tim ,2026-03-04T03:00\n",
                        "lines 2 and 3 name 'Vic.Tim' and 'vic.tim', one student to an LMS"),
                       ("name,when\neve,2026-03-04T02:00\n", "no student column")]:
        ours.write_text(text)
        with pytest.raises(LateConfigError, match=says):
            handin.read_times(ours, UTC)


def test_deadlines_without_a_time_source_or_trusting_without_a_release_are_refused(tmp_path):
    (tmp_path / "d.toml").write_text('deadline = "2026-03-01T12:00"\n')
    with pytest.raises(LateConfigError, match="deadlines need the hand-in times to meet them: give --times FILE"):
        handin.for_run(tmp_path / "out", tmp_path / "d.toml", None)
    (tmp_path / "d.toml").write_text('deadline = "2026-03-01T12:00"\nstudent_times = ["timestamp.txt"]\n')
    with pytest.raises(LateConfigError, match="student_times needs release"):
        handin.load(tmp_path / "d.toml")
    (tmp_path / "d.toml").write_text('deadline = "2026-03-01T12:00"\nrelease = "2026-02-01T00:00"\n'
                                     'student_times = ["timestamp"]\n')
    with pytest.raises(LateConfigError, match="list some of 'timestamp.txt', 'file time'"):
        handin.load(tmp_path / "d.toml")


GRADESCOPE_METADATA = {  # Gradescope's documented submission_metadata.json, with a student's own extension
    "id": 123456, "created_at": "2026-03-04T02:00:00.000000+01:00",
    "assignment": {"due_date": "2026-03-01T13:00:00.000000+01:00", "group_size": None, "group_submission": False,
                   "id": 25828, "course_id": 1234, "late_due_date": "2026-03-08T13:00:00.000000+01:00",
                   "release_date": "2026-02-15T00:00:00.000000+01:00", "title": "Loop Lab", "total_points": "51.0"},
    "submission_method": "upload",
    "users": [{"email": "eve@uni.example", "id": 1234, "name": "Eve E"}],
    "previous_submissions": [],
}


@pytest.mark.parametrize("created_at, extension, fraction", [
    ("2026-03-04T02:00:00.000000+01:00", None, 0.3),  # 61 h late
    ("2026-03-01T12:59:00.000000+01:00", None, 0.0),
    ("2026-03-04T02:00:00.000000+01:00", "2026-03-03T13:00:00.000000+01:00", 0.1),  # 13 h after the extension
])
def test_gradescope_metadata_gives_the_penalties_grade_deadlines_gives(tmp_path, created_at, extension, fraction):
    """One policy file: a submission_metadata.json (its created_at, due date and the student's extension) gives the
    penalty that `grade --deadlines` gives the same times through a times file and extensions.csv."""
    import json

    (tmp_path / "d.toml").write_text('deadline = "2026-03-01T12:00"\n[penalty]\nper = "day"\npercent = 10\n')
    data = json.loads(json.dumps(GRADESCOPE_METADATA))
    data["created_at"] = created_at
    if extension:
        data["users"][0]["assignment"] = {"due_date": extension, "late_due_date": None,
                                          "release_date": "2026-02-15T00:00:00.000000+01:00"}
    (tmp_path / "metadata.json").write_text(json.dumps(data))
    on_gradescope = handin.from_gradescope(tmp_path / "metadata.json", tmp_path / "d.toml", "student")
    (tmp_path / "times.csv").write_text(f"student,submitted\nstudent,{created_at}\n")
    (tmp_path / "ext.csv").write_text(f"student,notebook,until\nstudent,,{extension}\n" if extension else
                                      "student,notebook,until\n")
    with_grade = handin.for_run(tmp_path / "out", tmp_path / "d.toml", tmp_path / "ext.csv", tmp_path / "times.csv")
    sub = intake(tmp_path)
    sub.student = "student"
    got = [lateness(course, sub) for course in (on_gradescope, with_grade)]
    assert got[0].fraction == got[1].fraction == fraction
    assert got[0].hours_late == got[1].hours_late and got[0].source.startswith("Gradescope's submission time")
    (tmp_path / "metadata.json").write_text('{"created_at": "yesterday"')  # cut short: the student is told
    broken = lateness(handin.from_gradescope(tmp_path / "metadata.json", tmp_path / "d.toml", "student"), sub)
    assert broken.fraction == 0.0 and broken.problem.startswith("metadata.json could not be read (JSONDecodeError")
