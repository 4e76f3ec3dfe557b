"""Issue 28: nothing a student wrote runs in the instructor's browser. The session's class holds ``mallory``, whose
written answer, cell outputs and function output carry every attack of :mod:`.hostile`; Chromium opens each page
that shows them: her feedback page (from disk, and served), ``summary.html``, formgrader's view of her submission,
and her notebooks in JupyterLab, from the course's server started as docs/instructor.md says.

A test fails if any payload runs (each logs ``hostile.MARK``), if any request leaves for a host that is not this
machine, if a payload is live markup in the page, or if any grade, file or configuration of the course changed; the
written answer must stay readable.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from urllib.parse import urlparse

import pytest

from autograder.course.formgrader import SERVER_ARGS

from .conftest import ENABLE
from .grading import HOSTILE, NOTEBOOK, copy_of
from .hostile import ANSWER_TEXT, MARK

pytest.importorskip("playwright.sync_api", reason=ENABLE)

from playwright.sync_api import expect  # noqa: E402

from . import labpage  # noqa: E402
from .test_formgrader import open_submission  # noqa: E402

LOCAL = {"127.0.0.1", "localhost", "", None}  # None: file://
PAGE_MS = 60_000  # formgrader renders a submission on the server: slow on a loaded 2-core machine
SETTLE_MS = 1500  # for an image's onerror, an SVG's onload, a srcdoc frame to have fired
LIVE_MARKUP = f"""() => [...document.querySelectorAll('*')].flatMap(el =>
    [...el.attributes].filter(a => a.value.includes('{MARK}')).map(a => el.tagName + ' ' + a.name)
    .concat(el.tagName === 'SCRIPT' && el.textContent.includes('{MARK}') ? ['SCRIPT'] : []))"""


class Watch:
    """What the browser did on the context's pages: payloads that ran, requests to other hosts, dialogs.

    A request is counted when it reaches the network stack (Playwright's routing), so one a Content-Security-Policy
    blocked is not; each is aborted (nothing may leave, and this machine has no network to leave on anyway)."""

    def __init__(self, page):
        self.ran: list[str] = []
        self.remote: list[str] = []
        context = page.context
        context.on("console", lambda message: MARK in message.text and self.ran.append(message.text))
        page.on("dialog", self._dialog)
        context.route("**/*", self._route)

    def _dialog(self, dialog):
        self.ran.append(f"a dialog: {dialog.message}")
        dialog.dismiss()

    def _route(self, route):
        if urlparse(route.request.url).hostname in LOCAL:
            route.continue_()
        else:
            self.remote.append(route.request.url)
            route.abort()

    def check(self, page, where: str, live: list[str] = ()) -> None:
        page.wait_for_timeout(SETTLE_MS)
        live = [*live, *(f"{frame.url[:60]}: {x}" for frame in page.frames for x in _live(frame))]
        assert not self.ran, f"{where}: a student's script ran: {self.ran}"
        assert not self.remote, f"{where}: requests left for other hosts: {self.remote}"
        assert not live, f"{where}: live markup from a student: {live}"


def _live(frame) -> list[str]:
    try:
        return frame.evaluate(LIVE_MARKUP)
    except Exception:  # a frame that navigated away or closed while being read (JupyterLab's own)
        return []


def read_through(page, text: str) -> tuple[bool, list[str]]:
    """Scroll JupyterLab's open notebook from top to bottom (it draws only the cells in view), reading the live
    markup of each screenful: whether ``text`` was shown in a rendered markdown cell, and the live markup found."""
    outer = page.locator(".jp-NotebookPanel:visible .jp-WindowedPanel-outer")
    page.locator(".jp-NotebookPanel:visible .jp-Cell").first.wait_for()
    seen, live, still = False, [], 0
    for _ in range(400):
        page.wait_for_timeout(200)  # the cells scrolled into view are drawn
        if page.locator(".jp-Dialog").count():  # "Error Starting Kernel": this server starts none
            page.locator(".jp-Dialog .jp-mod-accept").first.click()
        seen = seen or page.locator(".jp-NotebookPanel:visible .jp-RenderedMarkdown", has_text=text).count() > 0
        live += [x for frame in page.frames for x in _live(frame) if x not in live]
        moved = outer.evaluate("el => { const top = el.scrollTop; el.scrollTop += el.clientHeight * 0.7; "
                               "return el.scrollTop !== top; }")
        still = 0 if moved else still + 1
        if still == 5:  # at the bottom, and no cell drawn since made it longer
            return seen, live
    raise AssertionError("the notebook did not reach its end while scrolling")


@pytest.fixture
def watch(page):
    return Watch(page)


def snapshot(course: Path) -> dict[str, str]:
    """Every file of the course (path -> sha256), the gradebook but for its grades and comments (read apart)."""
    return {str(p.relative_to(course)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(course.rglob("*")) if p.is_file() and not p.name.startswith("gradebook.db")}


def grades(course: Path) -> list[tuple]:
    """Every score and comment in the course's gradebook."""
    with sqlite3.connect(course / "gradebook.db") as db:
        return (sorted(db.execute("SELECT id, auto_score, manual_score, extra_credit, needs_manual_grade "
                                  "FROM grade").fetchall())
                + sorted(db.execute("SELECT id, auto_comment, manual_comment FROM comment").fetchall()))


@pytest.mark.browser
@pytest.mark.slow
def test_hostile_feedback_and_summary_from_disk_run_nothing(graded_class, page, watch):
    """mallory's feedback page and the class's summary.html, opened as files: nothing runs, nothing is fetched; her
    answer is there to read, and the control students' pages are still whole."""
    feedback = graded_class.feedback(HOSTILE)
    page.goto(feedback.as_uri())
    watch.check(page, "feedback from disk")
    expect(page.locator("body")).to_contain_text(ANSWER_TEXT)
    labpage.screenshot(page, "hostile-1-feedback")
    assert "Content-Security-Policy" in feedback.read_text()

    page.goto((graded_class.out / "summary.html").as_uri())
    expect(page.locator("h1")).to_contain_text("Loop Lab grades")
    watch.check(page, "summary.html")
    alice = graded_class.autograded("alice")
    assert alice[0] == alice[1] > 0, "the correct control student lost points in a class with an attacker"


@pytest.mark.browser
@pytest.mark.slow
def test_hostile_submission_in_formgrader_and_jupyterlab_changes_nothing(graded_class, jupyter, page, watch,
                                                                         tmp_path):
    """The course served as docs/instructor.md says: formgrader's view of mallory's submission, her feedback served
    by that server, her autograded and submitted notebooks in JupyterLab. Nothing runs or leaves, and afterwards
    every file, grade and comment of the course is as it was."""
    course = copy_of(graded_class, tmp_path / "class").out
    files, scores = snapshot(course), grades(course)
    server = jupyter(course, *SERVER_ARGS)
    points, max_points = graded_class.autograded(HOSTILE)

    formgrader = open_submission(page, server, HOSTILE, f"{points:g} / {max_points:g}")
    formgrader.locator("#notebook-container").first.wait_for(timeout=PAGE_MS)  # rendered on the server: slow
    watch.check(page, "formgrader")
    expect(formgrader.locator("body")).to_contain_text(ANSWER_TEXT)
    labpage.screenshot(page, "hostile-2-formgrader")

    page.goto(server.url(f"files/feedback/{HOSTILE}/{NOTEBOOK}.html"))
    watch.check(page, "feedback served")
    expect(page.locator("body")).to_contain_text(ANSWER_TEXT)

    for folder in ("autograded", "submitted"):
        page.goto(server.url(f"lab/tree/{folder}/{HOSTILE}/loop_lab/{NOTEBOOK}.ipynb?reset"))  # this tab alone
        seen, live = read_through(page, ANSWER_TEXT)
        labpage.screenshot(page, f"hostile-3-jupyterlab-{folder}")
        watch.check(page, f"JupyterLab, {folder} notebook", live)
        assert seen, f"mallory's answer was not shown in JupyterLab ({folder})"

    assert grades(course) == scores, "a grade or comment changed while the pages were open"
    assert snapshot(course) == files, "a file of the course changed while the pages were open"
