"""``OUT/feedback/<student>/<notebook>.html``: the feedback page of each graded notebook, written once, final.

The worker renders the page with nbgrader (the check's messages, never a hidden test; :mod:`autograder.run.task`)
and the journal keeps that rendering as the task's input to this writer (:attr:`NotebookRecord.page`). Here alone it
becomes the page a student is sent: a Content-Security-Policy so nothing on it runs or fetches anything, opened from
disk or served (:data:`autograder.course.sanitize.PAGE_CSP`), a style that wraps the checks' long lines, and, with
deadlines, the notebook's lateness and penalty at the top.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

from autograder.course import sanitize

from ..record import ClassRecord, NotebookRecord

# A check's verdict is one long line (what went wrong, then the fix): wrapped between words (Bootstrap breaks
# a <pre> anywhere, mid-word), its end stays on the page
FEEDBACK_CSS = ('<style id="looplab-feedback">'
                'pre { white-space: pre-wrap; word-break: normal; overflow-wrap: anywhere; }</style>')


def page_name(student: str, notebook: str) -> str:
    """Where a notebook's page is, relative to OUT."""
    return f"feedback/{student}/{notebook}.html"


def has_page(nb: NotebookRecord) -> bool:
    """Did the worker render a page for this notebook (a notebook not graded has none)?"""
    return bool(nb.page) and Path(nb.page).is_file()


def files(record: ClassRecord) -> Iterator[tuple[str, bytes]]:
    for student in record.students:
        for nb in student.notebooks:
            if has_page(nb):
                yield page_name(student.student, nb.notebook), page(nb).encode("utf-8")


def page(nb: NotebookRecord) -> str:
    """The final page of one notebook, from the worker's rendering."""
    text = sanitize.with_page_csp(Path(nb.page).read_text(encoding="utf-8"))
    return _with_late_line(text.replace("</head>", FEEDBACK_CSS + "\n</head>", 1), nb)


def _with_late_line(text: str, nb: NotebookRecord) -> str:
    """The notebook's lateness and the points it cost, first in the page's body."""
    said = nb.late.describe() if nb.late else ""
    if not said or "<body" not in text:
        return text
    at = text.index(">", text.index("<body")) + 1
    line = f'<p id="looplab-late" style="font-weight:bold">{html.escape(said)} Points taken: {nb.late_penalty:g}.</p>'
    return text[:at] + line + text[at:]
