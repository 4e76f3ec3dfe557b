"""What each student gets back: grades.csv (from the gradebook, so scores given by hand count), one JSON per student
and the styled feedback pages; then the class summary (:mod:`.summary`)."""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path

from labutils.atomic import write_atomically
from labutils.verdict import BY_HAND, BY_NOTEBOOK, Verdict

from autograder.course import sanitize
from autograder.layout import ASSIGNMENT

from .csvcells import write_csv
from .gradebook import read_rows
from .late import Lateness
from .record import NotebookGrade, NotebookRecord, StudentRecord, TestRecord
from .summary import write_summary

CSV_FIELDS = ("student", "notebook", "score", "max_score")
LATE_FIELDS = ("raw_score", "late_penalty", "hours_late", "submitted", "time_source")  # with deadlines only


def _num(x) -> float | int:
    x = float(x or 0.0)
    return int(x) if x.is_integer() else round(x, 4)


def student_record(result, student: str, test_max: dict, by_hand: dict | None = None,
                   penalties: dict | None = None) -> StudentRecord:
    """Everything one student gets back in machine-readable form; a score given by hand replaces the cell's, and a
    late penalty (``penalties``: the gradebook's points per (student, notebook)) is taken from the notebook's score."""
    tests, notebooks = [], {}
    for nb in result.notebooks:
        outcome = result.outcomes[(student, nb)]
        got = outcome.cells()
        reason = "; ".join(outcome.notes) or "not graded"
        nb_tests = [_test(nb, name, max_points, manual, got.get(name), (by_hand or {}).get((student, nb, name)),
                          reason) for (test_nb, name), (max_points, manual) in test_max.items() if test_nb == nb]
        tests += nb_tests
        raw = sum(t.points for t in nb_tests)
        penalty = (penalties or {}).get((student, nb), 0.0)
        late = (result.lateness or {}).get((student, nb))
        notebooks[nb] = NotebookRecord(
            status=outcome.status, score=_num(max(0.0, raw - penalty)), raw_score=_num(raw),
            late_penalty=_num(penalty), late=dataclasses.asdict(late) if late else None,
            max_score=_num(sum(t.max_points for t in nb_tests)), seconds=outcome.seconds, timings=outcome.timings,
            notes=outcome.notes, feedback=outcome.feedback)
    return StudentRecord(
        student=student, assignment=ASSIGNMENT, score=_num(sum(n.score for n in notebooks.values())),
        raw_score=_num(sum(t.points for t in tests)),
        late_penalty=_num(sum(n.late_penalty for n in notebooks.values())),
        max_score=_num(sum(t.max_points for t in tests)),
        graded=all(result.outcomes[(student, nb)].status != "error" for nb in result.notebooks),
        notes=result.student_notes.get(student, []), notebooks=notebooks, tests=tests)


def _test(nb: str, name: str, max_points: float, manual: bool, cell, hand: float | None, reason: str) -> TestRecord:
    """One graded test of the record: the cell's verdict (a score given by hand replaces it; a cell that was not
    graded gets one saying why)."""
    kind = "manual" if manual else "auto"
    if hand is not None:
        verdict = Verdict(grade_id=name, passed=hand >= max_points, points=hand, max_points=max_points, by=BY_HAND,
                          message=f"graded by hand: {hand:g} / {max_points:g}",
                          concept=cell.verdict.concept if cell else "")
        return TestRecord.of(nb, _rounded(verdict), kind, verdict.passed)
    if cell is None:
        verdict = Verdict(grade_id=name, passed=False, judged=False, max_points=max_points, message=reason,
                          by=BY_HAND if manual else BY_NOTEBOOK)
        return TestRecord.of(nb, _rounded(verdict), kind, False)
    verdict = dataclasses.replace(cell.verdict, max_points=max_points)
    if manual:
        to_grade = cell.needs_manual_grade
        verdict = dataclasses.replace(verdict, message="written answer: to be graded by hand" if to_grade else
                                      "no answer written", judged=not to_grade, by=BY_HAND if to_grade else BY_NOTEBOOK)
        return TestRecord.of(nb, _rounded(verdict), kind, None if to_grade else verdict.passed)
    return TestRecord.of(nb, _rounded(verdict), kind, verdict.passed)


def _rounded(verdict: Verdict) -> Verdict:
    return dataclasses.replace(verdict, points=_num(verdict.points), max_points=_num(verdict.max_points))


# A check's verdict is one long line (what went wrong, then the fix): wrapped between words (Bootstrap breaks
# a <pre> anywhere, mid-word), its end stays on the page
FEEDBACK_CSS = ('<style id="looplab-feedback">'
                'pre { white-space: pre-wrap; word-break: normal; overflow-wrap: anywhere; }</style>')


def style_feedback(path: Path) -> None:
    """Give one feedback page (once) its Content-Security-Policy, so nothing on it runs or fetches anything, opened
    from disk or served (:data:`autograder.course.sanitize.PAGE_CSP`), and :data:`FEEDBACK_CSS`."""
    html = sanitize.with_page_csp(path.read_text(encoding="utf-8"))
    if 'id="looplab-feedback"' not in html:
        html = html.replace("</head>", FEEDBACK_CSS + "\n</head>", 1)
    write_atomically(path, html.encode("utf-8"))


def late_line(path: Path, late: Lateness | None, penalty: float) -> None:
    """Put the notebook's lateness and penalty at the top of its feedback page (replaced, never added twice)."""
    page = before = path.read_text(encoding="utf-8")
    start, end = '<p id="looplab-late"', "</p><!--looplab-late-->"
    if start in page:
        page = page[:page.index(start)] + page[page.index(end) + len(end):]
    text = late.describe() if late else ""
    if text and "<body" in page:
        at = page.index(">", page.index("<body")) + 1
        line = (f'{start} style="font-weight:bold">{html.escape(text)} Points taken: {penalty:g}.'
                f'{end}')
        page = page[:at] + line + page[at:]
    if page != before:
        write_atomically(path, page.encode("utf-8"))


def grade_rows(rows: list[NotebookGrade], lateness: dict | None) -> tuple[tuple[str, ...], list[dict]]:
    """grades.csv's columns and rows: the late columns only when the course has deadlines."""
    table = []
    for r in rows:
        row = {"student": r.student, "notebook": r.notebook, "score": _num(r.score), "max_score": _num(r.max_score)}
        if lateness is not None:
            late = lateness.get((r.student, r.notebook))
            row.update(raw_score=_num(r.raw_score), late_penalty=_num(r.late_penalty),
                       hours_late=late.hours_late if late else "", submitted=late.submitted if late else "",
                       time_source=late.source if late else "")
        table.append(row)
    return (CSV_FIELDS if lateness is None else CSV_FIELDS + LATE_FIELDS), table


def write_all(result, db_url: str) -> None:
    out = result.out
    rows, test_max, by_hand = read_rows(db_url, result.students, result.notebooks)
    penalties = {(r.student, r.notebook): r.late_penalty for r in rows}
    for outcome in result.outcomes.values():
        if outcome.feedback and Path(outcome.feedback).is_relative_to(out) and Path(outcome.feedback).exists():
            style_feedback(Path(outcome.feedback))
            key = (outcome.student, outcome.notebook)
            late_line(Path(outcome.feedback), (result.lateness or {}).get(key), penalties.get(key, 0.0))
    fields, table = grade_rows(rows, result.lateness)
    write_csv(out / "grades.csv", fields, table)  # formulas neutralised; a reader never sees half a file
    records = [student_record(result, s, test_max, by_hand, penalties) for s in result.students]
    for rec in records:
        write_atomically(out / f"{rec.student}.json", rec.to_json().encode())
    write_summary(out, records, test_max, result)


