"""The instructor's journey: ``python -m autograder grade`` leaves an nbgrader course in OUT
(autograder/course/formgrader.py); in JupyterLab, nbgrader's formgrader opens it, the instructor scores a written answer by
hand; ``python -m autograder export`` includes those points; grading the class again (a late submission came in)
keeps them.

The course is a copy of the session's graded class (its nbgrader_config.py names the folder it sits in), so the
other tests' class is left as it was.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.course.formgrader import SERVER_ARGS

from .conftest import ENABLE
from .grading import ANSWER_ID, ASSIGNMENT, NOTEBOOK, copy_of, export, grade, submission

pytest.importorskip("playwright.sync_api", reason=ENABLE)

from playwright.sync_api import expect  # noqa: E402

from . import labpage  # noqa: E402

STUDENT = "bob"  # his written answer is weak: 1 of 2 points
MANUAL_POINTS = 1.0


def open_submission(page, server, student: str, code_score: str):
    """JupyterLab -> Nbgrader -> Formgrader -> Manual Grading -> loop_lab -> 01_baseline -> the student's
    submission; returns the frame the submission is shown in."""
    page.goto(server.url("lab"))
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Formgrader", exact=True).click()
    formgrader = page.frame_locator(".jp-MainAreaWidget iframe").first
    formgrader.get_by_role("link", name="Manual Grading").click()
    formgrader.get_by_role("link", name=ASSIGNMENT).click()
    formgrader.get_by_role("link", name=NOTEBOOK).click()
    link = formgrader.get_by_role("link", name=student, exact=True)
    # the submissions' rows, drawn once formgrader has fetched them: "table tbody tr a" alone also matched the
    # previous page's table, so "Show All Names" could be clicked before any row existed, reveal nothing, and leave
    # the student's name hidden (it failed that way in two full runs on a loaded machine)
    formgrader.locator("#main-table a.name-hidden").first.wait_for(timeout=60_000)
    if not link.is_visible():  # submissions are anonymous until asked
        formgrader.get_by_role("button", name="Show All Names").click()
    expect(formgrader.locator("tr", has=link)).to_contain_text(code_score)  # the autograded score the grade stored
    labpage.screenshot(page, "formgrader-1-submissions")
    link.click()
    return formgrader


@pytest.mark.browser
@pytest.mark.slow
def test_manual_grade_in_formgrader_is_exported_and_survives_regrading(graded_class, jupyter, page, tmp_path,
                                                                      autograder_cli):
    graded = copy_of(graded_class, tmp_path / "class")
    course = graded.out
    autograded, code_max = graded.autograded(STUDENT)
    code_score = f"{autograded:g} / {code_max:g}"  # formgrader's Code Score column
    server = jupyter(course, *SERVER_ARGS)  # as docs/instructor.md says; formgrader reads nbgrader_config.py there
    formgrader = open_submission(page, server, STUDENT, code_score)

    score = formgrader.locator(f"#{ANSWER_ID}")  # the written answer's score box
    score.scroll_into_view_if_needed()
    with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT") as saved:
        score.fill(f"{MANUAL_POINTS:g}")
        score.press("Tab")  # formgrader saves when the box loses focus
    assert saved.value.ok and saved.value.json()["manual_score"] == MANUAL_POINTS
    labpage.screenshot(page, "formgrader-2-scored")

    assert export(autograder_cli, course, tmp_path / "export-1.csv")[STUDENT] == autograded + MANUAL_POINTS

    late = graded.submissions / "carol"  # a late submission: the whole class is graded again
    late.mkdir()
    nbformat.write(submission("alice"), late / f"{NOTEBOOK}.ipynb")
    proc = grade(autograder_cli, graded.submissions, graded.out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = export(autograder_cli, course, tmp_path / "export-2.csv")
    assert exported[STUDENT] == autograded + MANUAL_POINTS, "grading again lost the manual grade"
    assert "carol" in exported

    formgrader = open_submission(page, server, STUDENT, code_score)  # what the instructor sees after the regrade
    expect(formgrader.locator(f"#{ANSWER_ID}")).to_have_value(f"{MANUAL_POINTS:g}")
    labpage.screenshot(page, "formgrader-3-after-regrading")
