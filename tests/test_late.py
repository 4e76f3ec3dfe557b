"""Deadlines, extensions and late penalties (autograder/results/late.py) over a matrix of times, policies and
extensions; the instructor's files read strictly, a mistake named with its fix."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import forked_graders
from autograder.results import late
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
    (Policy("hour", 5, floor=80), 10 * H, 0.2),  # stops at the floor
    (Policy("day", 10), 26 * H, 0.2),  # a started day counts whole
    (Policy("day", 10, floor=50), 30 * 24 * H, 0.5),
    (Policy("day", 10, floor=50, cutoff_hours=168), 168 * H, 0.5),  # at the cutoff: not yet
    (Policy("day", 10, floor=50, cutoff_hours=168), 168 * H + 1, 1.0),  # past it: zero
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
    times = {"00": (DUE + timedelta(hours=26), late.FROM_TIMESTAMP)}
    got = {s: late.assess(course, s, times)[0] for s in ("on", "ext")}
    assert (got["on"].hours_late, got["on"].fraction, got["on"].extended) == (26.0, 0.2, False)
    assert (got["ext"].hours_late, got["ext"].fraction, got["ext"].extended) == (0.0, 0.0, True)
    assert late.penalty_points(got["on"], raw=3, max_score=5) == 1.0  # a share of the notebook's points
    assert late.penalty_points(got["on"], raw=0.5, max_score=5) == 0.5  # never more than it earned
    assert late.penalty_points(None, raw=3, max_score=5) == 0.0
    assert "26 h after the deadline" in got["on"].describe() and got["ext"].describe() == ""


def test_handed_in_timestamp_or_file_times(tmp_path):
    stamp = tmp_path / "timestamp.txt"
    stamp.write_text("2026-03-02 14:00:00.000000 UTC\n")  # nbgrader's format
    mtime = DUE.timestamp() + 5 * H
    assert late.handed_in(str(stamp), {"00": mtime}) == {
        "00": (datetime(2026, 3, 2, 14, tzinfo=UTC), late.FROM_TIMESTAMP)}
    stamp.write_text("not a time")  # unreadable: the file's own time, and said so
    assert late.handed_in(str(stamp), {"00": mtime}) == {"00": (DUE + timedelta(hours=5), late.FROM_FILE_TIME)}
    assert late.handed_in(None, {"00": mtime})["00"][1] == "file time (no timestamp.txt)"


def test_read_deadlines_and_extensions(tmp_path):
    path = tmp_path / "deadlines.toml"
    path.write_text('timezone = "Europe/Berlin"\ndeadline = "2026-03-01T23:59"\n[notebooks]\n'
                    '"02_scheduler" = "2026-03-08T23:59+00:00"\n[penalty]\nper = "hour"\npercent = 2\nfloor = 60\n')
    ext = tmp_path / "extensions.csv"
    ext.write_text("student,notebook,until\nalice,,+2d\nbob,02_scheduler,2026-03-10T12:00\n")
    course = late.load(path, ext)
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
        late.load(path)


@pytest.mark.parametrize("csv_text, says", [
    ("name,until\nalice,+2d\n", "header must be student,notebook,until"),
    ("student,notebook,until\nalice,,\n", "line 2: a student and an until"),
    ("student,notebook,until\nalice,,next week\n", "line 2: 'next week' is not a date-time"),
])
def test_bad_extensions_file(tmp_path, csv_text, says):
    (tmp_path / "d.toml").write_text('deadline = "2026-03-01T12:00"\n')
    (tmp_path / "e.csv").write_text(csv_text)
    with pytest.raises(LateConfigError, match=says):
        late.load(tmp_path / "d.toml", tmp_path / "e.csv")


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
