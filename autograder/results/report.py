"""What each student gets back: grades.csv (from the gradebook, so scores given by hand count), one JSON per student
and the styled feedback pages; then the class summary (:mod:`.summary`)."""

from __future__ import annotations

import json
from pathlib import Path

from autograder.layout import ASSIGNMENT

from .csvcells import write_csv
from .gradebook import read_rows
from .journal import write_atomically
from .summary import write_summary

CSV_FIELDS = ("student", "notebook", "score", "max_score")


def _num(x) -> float | int:
    x = float(x or 0.0)
    return int(x) if x.is_integer() else round(x, 4)


def student_record(result, student: str, test_max: dict, by_hand: dict | None = None) -> dict:
    """Everything one student gets back in machine-readable form; a score given by hand replaces the cell's."""
    tests, notebooks = [], {}
    for nb in result.notebooks:
        outcome = result.outcomes[(student, nb)]
        got = outcome.cells()
        reason = "; ".join(outcome.notes) or "not graded"
        for (test_nb, name), (max_points, manual) in test_max.items():
            if test_nb != nb:
                continue
            t = got.get(name)
            to_grade = bool(t and t.needs_manual_grade)
            hand = (by_hand or {}).get((student, nb, name))
            if hand is not None:
                tests.append({"notebook": nb, "name": name, "kind": "manual" if manual else "auto",
                              "points": _num(hand), "max_points": _num(max_points), "passed": hand >= max_points,
                              "message": f"graded by hand: {hand:g} / {max_points:g}"})
                continue
            if manual:
                message = ("written answer: to be graded by hand" if to_grade else
                           "no answer written" if t else reason)
            else:
                message = (t.message if t else reason) or ""
            tests.append({
                "notebook": nb,
                "name": name,
                "kind": "manual" if manual else "auto",
                "points": _num(t.points) if t else 0,
                "max_points": _num(max_points),
                "passed": None if to_grade else bool(t and t.passed),  # None: not decided until graded by hand
                "message": message,
            })
        nb_tests = [t for t in tests if t["notebook"] == nb]
        notebooks[nb] = {
            "status": outcome.status,
            "score": _num(sum(t["points"] for t in nb_tests)),
            "max_score": _num(sum(t["max_points"] for t in nb_tests)),
            "seconds": outcome.seconds,
            "timings": outcome.timings,
            "notes": outcome.notes,
            "feedback": outcome.feedback,
        }
    return {
        "student": student,
        "assignment": ASSIGNMENT,
        "score": _num(sum(t["points"] for t in tests)),
        "max_score": _num(sum(t["max_points"] for t in tests)),
        "graded": all(result.outcomes[(student, nb)].status != "error" for nb in result.notebooks),
        "notes": result.student_notes.get(student, []),
        "notebooks": notebooks,
        "tests": tests,
    }


# A check's verdict is one long line (what went wrong, then the fix): wrapped between words (Bootstrap breaks
# a <pre> anywhere, mid-word), its end stays on the page
FEEDBACK_CSS = ('<style id="looplab-feedback">'
                'pre { white-space: pre-wrap; word-break: normal; overflow-wrap: anywhere; }</style>')


def style_feedback(path: Path) -> None:
    """Add :data:`FEEDBACK_CSS` to one feedback page (once)."""
    html = path.read_text(encoding="utf-8")
    if 'id="looplab-feedback"' not in html and "</head>" in html:
        write_atomically(path, html.replace("</head>", FEEDBACK_CSS + "\n</head>", 1).encode("utf-8"))


def write_all(result, db_url: str) -> None:
    out = result.out
    for outcome in result.outcomes.values():
        if outcome.feedback and Path(outcome.feedback).is_relative_to(out) and Path(outcome.feedback).exists():
            style_feedback(Path(outcome.feedback))
    rows, test_max, by_hand = read_rows(db_url, result.students, result.notebooks)
    rows = [dict(row, score=_num(row["score"]), max_score=_num(row["max_score"])) for row in rows]
    write_csv(out / "grades.csv", CSV_FIELDS, rows)  # formulas neutralised; a reader never sees half a file
    records = [student_record(result, s, test_max, by_hand) for s in result.students]
    for rec in records:
        write_atomically(out / f"{rec['student']}.json", (json.dumps(rec, indent=1) + "\n").encode())
    write_summary(out, records, test_max, result)


