"""The per-student HTML feedback ``python -m autograder grade`` writes (OUT/feedback/<student>/), opened in a browser
as a student opens the file they are sent: the check's message is on screen, the hidden tests are nowhere.
"""

from __future__ import annotations

import pytest

from .conftest import ENABLE
from .grading import BUGGY, hidden_test_lines

pytest.importorskip("playwright.sync_api", reason=ENABLE)

from playwright.sync_api import expect  # noqa: E402

from . import labpage  # noqa: E402

GRADED_TEST = "test_train_one_epoch"


@pytest.mark.browser
@pytest.mark.slow
def test_feedback_shows_the_check_message_and_no_hidden_tests(graded_class, page):
    """bob's feedback: the score summary, a click on the failing test, the zero_grad verdict in its output."""
    html = graded_class.feedback("bob")
    page.goto(html.as_uri())
    expect(page.locator("body")).to_contain_text("01_baseline (Score: 4.0 / 10.0)")
    labpage.screenshot(page, "feedback-1-summary")

    page.locator(f'a[href="#{GRADED_TEST}"]').click()  # the summary's link to the failing test
    cell = page.locator(f'[id="cell-id={GRADED_TEST}"]')
    expect(cell).to_contain_text("Score: 0.0 / 4.0")
    message = cell.get_by_text(BUGGY.expected_message)
    expect(message).to_be_visible()
    expect(message).to_be_in_viewport()
    labpage.screenshot(page, "feedback-2-failing-test")

    shown = page.locator("body").inner_text()
    source = html.read_text()
    hidden = hidden_test_lines()
    assert hidden, "the solutions have no hidden tests to look for"
    leaked = [line for line in hidden if line in source or line in shown]
    assert not leaked and "HIDDEN TESTS" not in source, f"hidden test code in the feedback: {leaked}"
    assert "Traceback" not in shown


@pytest.mark.browser
@pytest.mark.slow
def test_feedback_for_a_correct_submission(graded_class, page):
    """alice's feedback: every autograded test full marks; the written answer waits for a person (0 until then)."""
    page.goto(graded_class.feedback("alice").as_uri())
    expect(page.locator("body")).to_contain_text("01_baseline (Score: 8.0 / 10.0)")
    cell = page.locator(f'[id="cell-id={GRADED_TEST}"]')
    expect(cell).to_contain_text("Score: 4.0 / 4.0")
    assert "Error" not in cell.inner_text()
    labpage.screenshot(page, "feedback-3-correct")


@pytest.mark.browser
@pytest.mark.slow
def test_feedback_messages_fit_the_page(graded_class, page):
    """Every output in bob's failing test is readable without scrolling sideways, wrapped between words."""
    page.goto(graded_class.feedback("bob").as_uri())
    clipped = page.locator(f'[id="cell-id={GRADED_TEST}"] pre').evaluate_all(
        "els => els.filter(el => el.scrollWidth > el.clientWidth + 1).map(el => el.innerText.slice(0, 80))")
    assert not clipped, f"cut off at the right edge: {clipped}"
    breaks = page.locator(f'[id="cell-id={GRADED_TEST}"] pre').evaluate_all(
        "els => [...new Set(els.map(el => getComputedStyle(el).wordBreak))]")
    assert breaks == ["normal"], f"a <pre> breaks lines mid-word: word-break {breaks}"
