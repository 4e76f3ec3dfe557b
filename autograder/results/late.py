"""Deadlines, extensions and late penalties: when each notebook was due for each student, when it was handed in,
and what share of its points lateness costs.

Why here, and why this shape: nbgrader records a submission time (``timestamp.txt``) but ``grade`` knew no deadline,
so a late notebook scored like an early one and the instructor fixed it by hand after every regrade. The penalty is
therefore never folded into a score: it is kept apart as the share of the notebook's points it takes away
(:attr:`Lateness.fraction`), and each writer (gradebook, grades.csv, JSON, feedback, exports) derives the points from
the raw score it reads at that moment (:func:`penalty_points`). A regrade or a re-run recomputes it from the same
facts; nothing is ever subtracted twice.

The instructor writes small files (``docs/instructor.md``):

- ``deadlines.toml``: the assignment's deadline, per-notebook deadlines, the timezone of those written without an
  offset, the ``[penalty]`` policy (:class:`Policy`), and, only to believe hand-in times written on the students'
  side, ``student_times`` with the ``release`` they are checked against (:mod:`.handin`);
- ``extensions.csv``: ``student,notebook,until`` rows (notebook blank: every notebook; until: a date-time or ``+48h``
  / ``+2d`` after the deadline);
- the hand-in times (``--times``): the LMS's export of its submission times, or the instructor's own file
  (:func:`autograder.results.handin.read_times`). When each student handed in is :mod:`.handin`'s to say.

``grade --deadlines FILE [--extensions FILE] [--times FILE]`` copies them into OUT (:data:`DEADLINES_NAME`,
:data:`EXTENSIONS_NAME`, :data:`TIMES_NAME`) so that a re-run and every export use the same ones; each task's
:class:`Lateness` is kept in the class record (:mod:`.record`), from which every export recomputes the penalty.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from autograder.course.submissions import TIMESTAMP_FILE

DEADLINES_NAME = "deadlines.toml"
FILE_TIME = "file time"  # a notebook's file time, a hand-in time written on the student's side
STUDENT_SOURCES = (TIMESTAMP_FILE, FILE_TIME)  # deadlines.toml's student_times names these (autograder.results.handin)
EXTENSIONS_NAME = "extensions.csv"
TIMES_NAME = "times.csv"  # OUT's copy of --times
PER = {"none": None, "hour": 3600.0, "day": 86400.0}  # a started hour/day counts whole, as Canvas counts days


@dataclass(frozen=True)
class HandIn:
    """When one student (or one notebook) was handed in, by which source, written by whom; or why it is not known."""

    when: datetime | None  # UTC; None: not known
    source: str  # shown in grades.csv, the JSON and the feedback: "times file (submitted)", "timestamp.txt", ...
    writer: str  # autograder.results.handin's PLATFORM or STUDENT
    problem: str = ""  # one line when ``when`` is None: what was found, what was expected, the fix


class LateConfigError(ValueError):
    """A deadlines or extensions file that cannot be read as written; the message names the file and the fix."""


@dataclass(frozen=True)
class Policy:
    """What lateness costs, as a share of the notebook's points.

    Two limits, each as a platform means it: ``floor`` is Canvas's "lowest possible grade" (canvas-lms
    ``app/models/late_policy.rb``, ``points_deducted``: the deduction is at most the score's percent less the minimum,
    never below 0), so lateness never takes a score below ``floor`` percent of the notebook's points and a score
    already below it keeps what it earned; ``max_percent`` caps the penalty itself (at most that percent of the
    points, whatever the score). Past ``cutoff_hours`` the notebook scores 0, the floor notwithstanding."""

    per: str = "none"  # "none", "hour" or "day": the unit the penalty grows by
    percent: float = 0.0  # of the notebook's points, per started unit late
    floor: float = 0.0  # lateness never lowers a score below this percent of the notebook's points (Canvas's meaning)
    max_percent: float = 100.0  # the penalty stops growing at this percent of the notebook's points
    cutoff_hours: float | None = None  # later than this after the deadline: the notebook scores 0 (None: never)

    def cut_off(self, late_s: float) -> bool:
        return self.cutoff_hours is not None and late_s > self.cutoff_hours * 3600

    def fraction(self, late_s: float) -> float:
        """The share of the notebook's points lost for handing it in ``late_s`` seconds after its deadline, before
        the floor (which depends on the score: :func:`penalty_points`)."""
        if late_s <= 0:
            return 0.0
        if self.cut_off(late_s):
            return 1.0
        unit = PER[self.per]
        if unit is None:
            return 0.0
        lost = self.percent / 100 * math.ceil(late_s / unit)
        return round(min(lost, self.max_percent / 100), 6)

    def keeps(self, late_s: float) -> float:
        """The share of the notebook's points lateness never takes from a score that reached it: the floor, or
        nothing past the cutoff."""
        return 0.0 if late_s <= 0 or self.cut_off(late_s) else self.floor / 100


@dataclass(frozen=True)
class Extension:
    student: str
    notebook: str | None  # None: every notebook
    until: datetime | None = None  # a new deadline, or
    extra: timedelta | None = None  # this much after the usual one


@dataclass
class Deadlines:
    """The course's deadlines (``deadlines.toml``) and the students' extensions (``extensions.csv``)."""

    deadline: datetime | None = None  # every notebook's unless named in ``notebooks``
    notebooks: dict[str, datetime] = field(default_factory=dict)
    policy: Policy = Policy()
    extensions: list[Extension] = field(default_factory=list)
    zone: tzinfo = timezone.utc  # the course's timezone (deadlines.toml's ``timezone``)
    times: dict[str, HandIn] = field(default_factory=dict)  # the platform's hand-in times, by student id (--times)
    student_times: tuple[str, ...] = ()  # hand-in times written on the student's side that the instructor trusts
    release: datetime | None = None  # when the assignment was released: a trusted student time must be later
    collected: datetime | None = None  # when it was collected (None: when the run started): nor may it be later

    def due(self, student: str, notebook: str) -> tuple[datetime | None, bool]:
        """(when ``student``'s ``notebook`` is due, extensions applied; whether an extension moved it)."""
        due = self.notebooks.get(notebook, self.deadline)
        found = [e for e in self.extensions if e.student == student and e.notebook in (None, notebook)]
        if due is None or not found:
            return due, False
        ext = sorted(found, key=lambda e: e.notebook is None)[0]  # one naming the notebook beats a blanket one
        return (ext.until if ext.until is not None else due + ext.extra), True


@dataclass(frozen=True)
class Lateness:
    """One (student, notebook): when it was handed in, when it was due, and the share of its points lateness costs."""

    student: str
    notebook: str
    submitted: str | None  # ISO 8601, UTC; None: not known (``problem`` says why)
    source: str  # where the time comes from (autograder.results.handin), e.g. "times file" or "timestamp.txt"
    due: str | None  # ISO 8601, UTC, extension applied
    extended: bool
    hours_late: float
    fraction: float  # of the notebook's points
    writer: str = ""  # who wrote the time: "platform" (the LMS, Gradescope, the instructor) or "student"
    problem: str = ""  # why the hand-in time is not known: then no penalty, and the run is incomplete
    floor: float = 0.0  # the share of the notebook's points lateness never takes a score below (Policy.keeps)

    def describe(self) -> str:
        """One sentence for the student's JSON and feedback page, naming where their time comes from (facts stay
        in the fields); "" without a deadline."""
        if self.problem:
            return (f"Your hand-in time is not known: {self.problem}. No late penalty has been applied; your "
                    "instructor has been told.")
        if self.due is None:
            return ""
        ext = " (with your extension)" if self.extended else ""
        if self.hours_late <= 0:
            return f"Handed in {self.submitted} (time from {self.source}), before the deadline ({self.due}{ext})."
        floor = f", never below {self.floor * 100:g}% of them" if self.floor else ""
        cost = ("it scores 0" if self.fraction >= 1 and not self.floor else
                f"penalty: {self.fraction * 100:g}% of the notebook's points{floor}" if self.fraction else "no penalty")
        return f"Handed in {self.hours_late:g} h after the deadline ({self.due}{ext}; time from {self.source}): {cost}."


def penalty_points(late: Lateness | None, raw: float, max_score: float) -> float:
    """Points lateness takes from a notebook that earned ``raw`` of ``max_score``: never more than it earned, never
    below its floor (Canvas's ``points_deducted``: ``min(deduction, max(score - minimum, 0))``)."""
    if late is None or late.fraction <= 0:
        return 0.0
    return round(min(late.fraction * max_score, max(0.0, raw - late.floor * max_score)), 4)


# --- reading the instructor's files ------------------------------------------------------------------------------------

_DEADLINE_KEYS = {"timezone", "deadline", "notebooks", "penalty", "release", "collected", "student_times"}
_EXTRA = re.compile(r"^\+\s*(\d+(?:\.\d+)?)\s*([hd])$")


def instructor_time(text, zone: tzinfo, where: str) -> datetime:
    """A date-time as written by the instructor (ISO 8601; no offset: ``zone``), in UTC; :class:`LateConfigError`
    naming ``where`` and the fix."""
    if isinstance(text, datetime):
        value = text
    else:
        try:
            value = datetime.fromisoformat(str(text).strip()[:64])  # longer is no date-time; fromisoformat is linear
        except ValueError:
            raise LateConfigError(f"{where}: {text!r} is not a date-time: write it as 2026-03-01T23:59 "
                                  "(or with an offset, 2026-03-01T23:59+01:00)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(timezone.utc)


def _policy(table: dict, where: str) -> Policy:
    known = {f.name for f in dataclasses.fields(Policy)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise LateConfigError(f"{where} [penalty]: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
    policy = Policy(**table)
    if policy.per not in PER:
        raise LateConfigError(f"{where} [penalty]: per = {policy.per!r}; use one of {', '.join(PER)}")
    if not 0 <= policy.floor <= 100 or not 0 <= policy.max_percent <= 100 or policy.percent < 0:
        raise LateConfigError(f"{where} [penalty]: percent must be >= 0, floor and max_percent between 0 and 100")
    return policy


def read_deadlines(path: Path) -> tuple[Deadlines, ZoneInfo]:
    """``deadlines.toml`` (see the module's docstring) and its timezone (the extensions' too);
    :class:`LateConfigError` naming what to fix."""
    try:
        import tomllib  # Python 3.11+; imported here so that grading without deadlines runs on 3.10
    except ImportError:
        raise LateConfigError("deadlines files need Python 3.11 or later (tomllib)") from None
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LateConfigError(f"{path}: cannot be read as TOML ({exc}); see docs/instructor.md for its format") from None
    unknown = sorted(set(data) - _DEADLINE_KEYS)
    if unknown:
        raise LateConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; expected {', '.join(sorted(_DEADLINE_KEYS))}")
    try:
        zone = ZoneInfo(data.get("timezone", "UTC"))
    except (ZoneInfoNotFoundError, ValueError):
        raise LateConfigError(f"{path}: timezone {data.get('timezone')!r} is unknown; use a name such as "
                              "Europe/Berlin or UTC") from None
    try:
        policy = _policy(data.get("penalty", {}), str(path))
    except TypeError as exc:
        raise LateConfigError(f"{path} [penalty]: {exc}") from None
    when = {k: instructor_time(data[k], zone, f"{path} {k}") if k in data else None
            for k in ("deadline", "release", "collected")}
    return Deadlines(deadline=when["deadline"], notebooks={nb: instructor_time(v, zone, f"{path} [notebooks] {nb}")
                                                           for nb, v in data.get("notebooks", {}).items()},
                     policy=policy, zone=zone, release=when["release"], collected=when["collected"],
                     student_times=_student_times(data, when["release"], path)), zone


def _student_times(data: dict, release: datetime | None, path: Path) -> tuple[str, ...]:
    """deadlines.toml's ``student_times``: the hand-in times written on the students' side the instructor trusts."""
    kinds = data.get("student_times", [])
    if not isinstance(kinds, list) or not set(kinds) <= set(STUDENT_SOURCES) or len(set(kinds)) != len(kinds):
        raise LateConfigError(f"{path}: student_times = {kinds!r}; list some of {', '.join(map(repr, STUDENT_SOURCES))}"
                              ", in the order to try them (see docs/grading.md: the students write these times)")
    if kinds and release is None:
        raise LateConfigError(f"{path}: student_times needs release = <when the assignment was released>: a time "
                              "the student's side wrote is believed only between the release and the collection")
    return tuple(kinds)


def read_extensions(path: Path, zone: ZoneInfo) -> list[Extension]:
    """``extensions.csv``: ``student,notebook,until`` (see the module's docstring)."""
    try:
        rows = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8-sig"))))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LateConfigError(f"{path}: cannot be read ({exc})") from None
    if rows and not {"student", "until"} <= set(rows[0]):
        raise LateConfigError(f"{path}: the header must be student,notebook,until (found {','.join(rows[0])})")
    out = []
    for line, row in enumerate(rows, start=2):
        where = f"{path} line {line}"
        student, until = (row.get("student") or "").strip(), (row.get("until") or "").strip()
        if not student or not until:
            raise LateConfigError(f"{where}: a student and an until (a date-time, or +48h / +2d) are needed")
        extra = _EXTRA.match(until)
        notebook = (row.get("notebook") or "").strip() or None
        if extra:
            amount = float(extra.group(1))
            out.append(Extension(student, notebook, extra=timedelta(hours=amount * (24 if extra.group(2) == "d" else 1))))
        else:
            out.append(Extension(student, notebook, until=instructor_time(until, zone, where)))
    return out


# --- lateness ----------------------------------------------------------------------------------------------------


def assess(course: Deadlines, student: str, handed_in: dict[str, HandIn]) -> list[Lateness]:
    """Each notebook ``student`` handed in ({notebook: when, by :mod:`.handin`}) against its deadline; a notebook
    whose time is not known costs nothing and carries the reason."""
    out = []
    for nb, hand in sorted(handed_in.items()):
        due, extended = course.due(student, nb)
        late_s = (hand.when - due).total_seconds() if due is not None and hand.when is not None else 0.0
        out.append(Lateness(student=student, notebook=nb, submitted=hand.when.isoformat() if hand.when else None,
                            source=hand.source, due=due.isoformat() if due else None, extended=extended,
                            hours_late=round(max(0.0, late_s) / 3600, 2), fraction=course.policy.fraction(late_s),
                            writer=hand.writer, problem=hand.problem, floor=course.policy.keeps(late_s)))
    return out


def unknown_names(course: Deadlines, students: list[str], notebooks: list[str]) -> list[str]:
    """A line per name in the instructor's files that matches nothing graded (most often a typo, which would
    otherwise silently leave a student late or a notebook on the assignment's deadline)."""
    lines = [f"{DEADLINES_NAME} [notebooks] names {nb!r}, not a notebook of the assignment ({', '.join(notebooks)})"
             for nb in sorted(course.notebooks) if nb not in notebooks]
    lines += [f"{EXTENSIONS_NAME} names student {s!r}, who has no submission: check the spelling"
              for s in sorted({e.student for e in course.extensions} - set(students))]
    lines += [f"{EXTENSIONS_NAME} names notebook {nb!r} for {s!r}: not a notebook of the assignment"
              for s, nb in sorted({(e.student, e.notebook) for e in course.extensions if e.notebook})
              if nb not in notebooks]
    lines += [f"the times file gives a hand-in time for {s!r}, who has no submission here: check the spelling, or "
              "whether their folder is missing" for s in sorted(s for s, hand in course.times.items()
                                                                 if hand.when is not None and s not in students)]
    return lines
