"""When each student handed in, and who wrote that time (issue 42): a late penalty is only as true as its time.

Every source, and who writes it:

- ``--times FILE``: the LMS's export of its submission times (Moodle's grading worksheet, column "Last modified
  (submission)"), or the instructor's own ``student,submitted`` file (:func:`read_times`). Written by the platform
  or the instructor; used by default.
- Gradescope's ``submission_metadata.json`` (``created_at``, the due date, the student's extension). Written by
  Gradescope; used on Gradescope (:func:`from_gradescope`).
- nbgrader's ``timestamp.txt``. Written on the student's side; used only if deadlines.toml lists it in
  ``student_times``.
- A notebook's file time (its mtime as handed in). Written by the student; likewise (``"file time"``).

``nbgrader submit`` runs on the student's side, as the student, and writes ``timestamp.txt`` into a folder the
student can write; any zip tool sets a file's time. So a student's own time is used only when the instructor opts
in, and then only if it is plausible (:class:`Window`): a complete line in nbgrader's format, in a time zone the
course knows (UTC or the course's own), after the release and not after the collection. Every student's report
names the source of their time (:attr:`HandIn.source`). A time that cannot be read or is implausible gives the
student one line (:attr:`HandIn.problem`: what was found, what was expected, the fix) and no penalty, and the run
says it is incomplete; it never falls back silently to another source, and never costs the notebook its score
(nbgrader's autograde no longer sees the file: :mod:`autograder.course.submissions`).

Parsing is bounded: a student's file is at most :data:`~autograder.course.submissions.TIMESTAMP_HEAD` bytes (a bigger
one is refused by its size, unread) and parsed once per student by a fixed pattern, no dateutil (whose parse is
quadratic: nbgrader's parse_utc took 0.11 CPU-s on 50 KB and 1.5 on 200 KB).
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.course import identity
from autograder.course.submissions import TIMESTAMP_FILE, TIMESTAMP_HEAD, HandedInFile
from autograder.untrusted import shown

from labutils.atomic import write_atomically

from . import late
from .late import (DEADLINES_NAME, EXTENSIONS_NAME, FILE_TIME, TIMES_NAME, Deadlines, Extension, HandIn,
                   LateConfigError, Lateness, assess, instructor_time, unknown_names)

if TYPE_CHECKING:
    from autograder.course.submissions import Submission

PLATFORM = "platform"  # the LMS, Gradescope or the instructor: the student cannot write it
STUDENT = "student"  # written on the student's side: believed only when the instructor opts in
NBGRADER_FORMAT = "2026-03-01 12:00:00.000000 UTC"  # what `nbgrader submit` writes (%Y-%m-%d %H:%M:%S.%f %Z)
TIMES_BYTES = 16 << 20  # a times file of a class of 2,000 is ~100 KB
METADATA_BYTES = 64 << 20  # submission_metadata.json holds every previous submission's results
STUDENT_COLUMNS = ("student", "Email address")  # ours; Moodle's grading worksheet
TIME_COLUMNS = ("submitted", "Last modified (submission)", "submitted_at")  # ours; Moodle's; Canvas's API field
NO_TIME = ("", "-")  # Moodle writes "-" for a student who has not submitted
MOODLE_TIME = ("%A, %d %B %Y, %I:%M %p", "%d %B %Y, %I:%M %p")  # Moodle's userdate() in English (Monday, 2 March...)
_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,6}))?)?"
                    r"(?: ?(Z|[+-]\d\d:?\d\d|[A-Za-z][A-Za-z0-9_/+-]{0,39}))?")
_UTC_NAMES = {"UTC", "GMT", "Z", "UCT", "+00:00", "+0000", "-00:00", "-0000"}


@dataclass(frozen=True)
class Window:
    """When a time written on the student's side can be true, and the zones it may be written in."""

    release: datetime
    collected: datetime
    zone: tzinfo  # the course's; UTC is always known


UNKNOWN_FIX = "no late penalty is applied until the instructor gives this hand-in time in the times file (--times)"


# --- the platform's times ------------------------------------------------------------------------------------------


def read_times(path: Path, zone: tzinfo) -> dict[str, HandIn]:
    """The hand-in times in the instructor's ``path`` by student id, exactly as written: the instructor's own
    ``student,submitted`` CSV (ISO 8601; no offset: ``zone``), or an LMS export holding one of :data:`TIME_COLUMNS`
    (Moodle's grading worksheet: "Email address" and "Last modified (submission)", in English, in ``zone``, the
    downloading user's timezone). :class:`LateConfigError` naming the line to fix."""
    try:
        raw = Path(path).read_bytes()[:TIMES_BYTES + 1]
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LateConfigError(f"{path}: cannot be read ({exc}): give a UTF-8 CSV with columns student,submitted") \
            from None
    if len(raw) > TIMES_BYTES:
        raise LateConfigError(f"{path}: more than {TIMES_BYTES >> 20} MB: a times file has one short row per student")
    header = rows[0] if rows else []
    scol = next((c for c in STUDENT_COLUMNS if c in header), None)
    tcol = next((c for c in TIME_COLUMNS if c in header), None)
    if scol is None or tcol is None:
        raise LateConfigError(f"{path}: no {'student' if scol is None else 'time'} column: the header needs one of "
                              f"{', '.join(map(repr, STUDENT_COLUMNS))} and one of {', '.join(map(repr, TIME_COLUMNS))}"
                              f" (found {', '.join(map(repr, header[:8]))})")
    s, t = header.index(scol), header.index(tcol)
    found: dict[str, tuple[int, HandIn]] = {}
    for line, row in enumerate(rows[1:], start=2):
        student = row[s].strip() if s < len(row) else ""
        if not student:
            continue  # a blank line, or a roster row without the column
        cell = row[t].strip() if t < len(row) else ""
        where = f"{Path(path).name} line {line}"
        source = f"times file ({tcol})"
        hand = HandIn(None, source, PLATFORM, f"{where} has no time for you ({cell!r}: no submission there); the "
                      "instructor can give it in that file") if cell in NO_TIME else \
            HandIn(_platform_time(cell, zone, where), source, PLATFORM)
        if student in found:
            raise LateConfigError(f"{path}: lines {found[student][0]} and {line} both give {student!r} a time: "
                                  "keep one")
        found[student] = (line, hand)
    for clash in identity.clashes((s, s) for s in found).values():
        raise LateConfigError(f"{path}: lines {' and '.join(str(found[s][0]) for s in clash)} name "
                              f"{' and '.join(map(repr, clash))}, one student to an LMS (they differ only in case or "
                              "spacing): write each student once, exactly as their folder is named")
    return {student: hand for student, (_, hand) in found.items()}


def _platform_time(cell: str, zone: tzinfo, where: str) -> datetime:
    """One time of a times file: ISO 8601 (Canvas's submitted_at, ours) or Moodle's English userdate, in UTC."""
    for form in MOODLE_TIME:
        try:
            return datetime.strptime(cell[:64], form).replace(tzinfo=zone).astimezone(timezone.utc)
        except ValueError:
            pass
    try:
        return instructor_time(cell, zone, where)
    except LateConfigError:
        raise LateConfigError(f"{where}: {cell[:64]!r} is not a time: write 2026-03-01T23:59 (or with an offset, "
                              "2026-03-01T23:59+01:00), or give Moodle's worksheet as downloaded in English "
                              "(Monday, 2 March 2026, 11:59 PM)") from None


def from_gradescope(metadata: Path, policy: Path | None, student: str) -> Deadlines:
    """The deadlines one Gradescope submission is graded against: the ``[penalty]`` of ``policy`` (the zip's
    deadlines.toml, the same file as ``grade --deadlines``), Gradescope's due date (the student's own where Gradescope
    holds an extension for them) and its submission time (``created_at``), all from ``submission_metadata.json``."""
    course = load(policy) if policy is not None else Deadlines()
    course.notebooks, course.student_times = {}, ()  # one due date and one time per Gradescope submission
    source = "Gradescope's submission time (submission_metadata.json created_at)"
    try:
        data = json.loads(Path(metadata).read_bytes()[:METADATA_BYTES])
        assignment = data["assignment"]
        course.deadline = _iso(assignment.get("due_date"))
        course.release = _iso(assignment.get("release_date"))
        own = [_iso(u["assignment"].get("due_date")) for u in data.get("users") or []
               if isinstance(u.get("assignment"), dict)]  # a student's extension, set in Gradescope
        if course.deadline is not None and any(d and d != course.deadline for d in own):
            course.extensions = [Extension(student, None, until=max(d for d in own if d))]
        course.times = {student: HandIn(_iso(data["created_at"]), source, PLATFORM)}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        course.times = {student: HandIn(None, source, PLATFORM, f"{Path(metadata).name} could not be read "
                                        f"({type(exc).__name__}: {shown(exc, 200)}); Gradescope writes it for every "
                                        "submission: rerun the autograder, or set the late penalty by hand")}
    return course


def _iso(text) -> datetime | None:
    """A time as Gradescope writes it (ISO 8601 with an offset), in UTC; None for null; ValueError otherwise."""
    if text is None:
        return None
    value = datetime.fromisoformat(str(text)[:64])
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset")
    return value.astimezone(timezone.utc)


# --- the student's own times ------------------------------------------------------------------------------------------


def from_timestamp(file: HandedInFile, window: Window) -> HandIn:
    """nbgrader's timestamp.txt as handed in, if it is one plausible time; else why not."""
    def refused(found: str) -> HandIn:
        return HandIn(None, TIMESTAMP_FILE, STUDENT, f"{TIMESTAMP_FILE} {found}: nbgrader writes one line such as "
                      f"'{NBGRADER_FORMAT}'; {UNKNOWN_FIX}")

    if file.problem:
        return refused(file.problem)
    if file.size > TIMESTAMP_HEAD:
        return refused(f"is {file.size:,} bytes (not read)")
    text = file.head.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "backslashreplace").rstrip(" \t\r\n")
    match = _STAMP.fullmatch(text)
    if match is None:
        return refused(f"holds {shown(repr(text), 80)}, which is not a date and time")
    try:
        when = _stamped(match, window.zone)
    except (ValueError, OverflowError) as exc:
        return refused(f"holds {shown(repr(text), 80)}: {exc}")
    return _plausible(when, TIMESTAMP_FILE, window, f"{TIMESTAMP_FILE} says {text!r}")


def _stamped(match: re.Match, zone: tzinfo) -> datetime:
    """The matched time in UTC, if its zone is one the course knows (UTC, or the course's own by name,
    abbreviation or offset); ValueError naming the zone otherwise."""
    y, mo, d, h, mi, sec, frac, name = match.groups()
    local = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec or 0), int((frac or "0").ljust(6, "0")))
    if name is None:
        raise ValueError("no time zone (nbgrader writes one)")
    if name.upper() in _UTC_NAMES:
        return local.replace(tzinfo=timezone.utc)
    ours = local.replace(tzinfo=zone)
    offset = ours.utcoffset()
    spelled = {str(getattr(zone, "key", "")), ours.tzname() or "", _offset(offset)}
    if name in spelled or name.replace(":", "") == _offset(offset).replace(":", ""):
        return ours.astimezone(timezone.utc)
    raise ValueError(f"time zone {name!r} is not this course's (UTC, or {getattr(zone, 'key', zone)}: "
                     f"{ours.tzname()} then)")


def _offset(delta: timedelta | None) -> str:
    minutes = int((delta or timedelta()).total_seconds() // 60)
    return f"{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def from_file_time(mtime: float, notebook: str, window: Window) -> HandIn:
    """A notebook's file time as handed in, if plausible; else why not."""
    try:
        when = datetime.fromtimestamp(mtime, timezone.utc)
    except (ValueError, OverflowError, OSError) as exc:
        return HandIn(None, FILE_TIME, STUDENT, f"{notebook}.ipynb's file time ({mtime!r}) is no date ({exc}); "
                      f"{UNKNOWN_FIX}")
    return _plausible(when, FILE_TIME, window, f"{notebook}.ipynb's file time is {when.isoformat()}")


def _plausible(when: datetime, source: str, window: Window, said: str) -> HandIn:
    if when < window.release:
        return HandIn(None, source, STUDENT, f"{said}, before the assignment was released "
                      f"({window.release.isoformat()}); {UNKNOWN_FIX}")
    if when > window.collected:
        return HandIn(None, source, STUDENT, f"{said}, after the submissions were collected "
                      f"({window.collected.isoformat()}); {UNKNOWN_FIX}")
    return HandIn(when, source, STUDENT)


# --- one student -------------------------------------------------------------------------------------------------


def handed_in(course: Deadlines, sub: Submission, now: datetime) -> dict[str, HandIn]:
    """When each notebook ``sub`` handed in was handed in: the platform's time for the student if it has one, else
    the first of the student-side sources the instructor trusts that the student has (checked, never passed over
    for the next when it is wrong), else why no time is known. ``now``: the collection, unless deadlines.toml says."""
    notebooks = sorted(sub.notebooks)
    platform = course.times.get(sub.student)
    if platform is not None and platform.when is not None:
        return dict.fromkeys(notebooks, platform)
    if course.student_times and course.release is not None:
        window = Window(course.release, course.collected or now, course.zone)
        for kind in course.student_times:
            if kind == TIMESTAMP_FILE and sub.timestamp is not None:
                return dict.fromkeys(notebooks, from_timestamp(sub.timestamp, window))
            if kind == FILE_TIME and sub.file_times:
                return {nb: from_file_time(sub.file_times[nb], nb, window) for nb in notebooks}
    if platform is not None:
        return dict.fromkeys(notebooks, platform)  # the times file's own reason (its row has no time)
    looked = (["the times file has no row for them"] if course.times else []) + \
        [f"no {kind} was handed in" for kind in course.student_times]
    return dict.fromkeys(notebooks, HandIn(None, "none", PLATFORM, f"no hand-in time for {sub.student!r}: "
                                           f"{', '.join(looked) or 'no source of times'}; {UNKNOWN_FIX}"))


def assess_class(course: Deadlines | None, submissions: list[Submission], notebooks: list[str], now: datetime,
                 say) -> dict[tuple[str, str], Lateness] | None:
    """Each handed-in notebook's lateness, by (student, notebook), each student's time read once (None: the course
    has no deadline); a name in the instructor's files that matches nothing graded is said. ``now``: the run's
    start, standing for the collection."""
    if course is None:
        return None
    for note in unknown_names(course, [s.student for s in submissions], notebooks):
        say(f"WARNING: {note}")
    found = {}
    for sub in submissions:
        found.update({(x.student, x.notebook): x for x in assess(course, sub.student, handed_in(course, sub, now))})
    return found


# --- the course's files, as a run applies them -----------------------------------------------------------------------


def load(deadlines: Path | None, extensions: Path | None = None, times: Path | None = None) -> Deadlines | None:
    """The course's deadlines with their extensions and the platform's hand-in times; None when there is no
    deadlines file (no deadline at all)."""
    if deadlines is None:
        if extensions is not None or times is not None:
            raise LateConfigError("--extensions and --times need --deadlines (they move or meet a deadline)")
        return None
    found, zone = late.read_deadlines(deadlines)
    if extensions is not None:
        found.extensions = late.read_extensions(extensions, zone)
    if times is not None:
        found.times = read_times(times, zone)
    return found


def for_run(out: Path, deadlines: Path | None, extensions: Path | None, times: Path | None = None) -> Deadlines | None:
    """The deadlines a ``grade`` run into ``out`` applies: the files given (checked, then copied into OUT, replacing
    its copies), else OUT's copies from an earlier run, else none. Read before anything is graded, so a malformed
    file, or deadlines with no hand-in time to meet them, stops the run at once."""
    out = Path(out)
    given = {EXTENSIONS_NAME: extensions, TIMES_NAME: times}
    if deadlines is None and extensions is None and times is None:
        kept = out / DEADLINES_NAME
        if not kept.exists():
            return None
        given = {name: out / name if (out / name).exists() else None for name in given}
        found = load(kept, given[EXTENSIONS_NAME], given[TIMES_NAME])
    else:
        found = load(deadlines, extensions, times)
        out.mkdir(parents=True, exist_ok=True)
        write_atomically(out / DEADLINES_NAME, Path(deadlines).read_bytes())
        for name, path in given.items():
            if path is None:
                (out / name).unlink(missing_ok=True)
            else:
                write_atomically(out / name, Path(path).read_bytes())
    if not found.times and not found.student_times:
        raise LateConfigError("deadlines need the hand-in times to meet them: give --times FILE (the LMS's export of "
                              "its submission times, or your own student,submitted file), or, to believe the times "
                              "the students' side writes (nbgrader's timestamp.txt, file times), add student_times "
                              "and release to deadlines.toml (docs/grading.md)")
    return found
