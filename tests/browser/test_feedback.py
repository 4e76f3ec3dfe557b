"""The per-student HTML feedback ``python -m autograder grade`` writes (OUT/feedback/<student>/), opened in a browser
as a student opens the file they are sent: the check's message is on screen, the hidden tests are nowhere.
"""

from __future__ import annotations

import pytest

from .conftest import ENABLE
from .grading import BUGGY, NOTEBOOK, hidden_test_lines

pytest.importorskip("playwright.sync_api", reason=ENABLE)

from playwright.sync_api import expect  # noqa: E402

from . import labpage  # noqa: E402



def headline(graded_class, student: str) -> str:
    """The feedback's score line for 01_baseline, with the points grade gave (written answer 0 until graded)."""
    tests = graded_class.tests(student)
    return f"{NOTEBOOK} (Score: {sum(t['points'] for t in tests):.1f} / {sum(t['max_points'] for t in tests):.1f})"


def zero_grad_test(graded_class) -> dict:
    """bob's failing test whose message names the zero_grad mistake."""
    failing = [t for t in graded_class.tests("bob") if t["passed"] is False and BUGGY.expected_message in t["message"]]
    assert failing, f"no failing test names the zero_grad mistake: {graded_class.tests('bob')}"
    return failing[0]


@pytest.mark.browser
@pytest.mark.slow
def test_feedback_shows_the_check_message_and_no_hidden_tests(graded_class, page):
    """bob's feedback: the score summary, a click on the failing test, the zero_grad verdict in its output."""
    html = graded_class.feedback("bob")
    test = zero_grad_test(graded_class)
    page.goto(html.as_uri())
    expect(page.locator("body")).to_contain_text(headline(graded_class, "bob"))
    labpage.screenshot(page, "feedback-1-summary")

    page.locator(f'a[href="#{test["name"]}"]').click()  # the summary's link to the failing test
    cell = page.locator(f'[id="cell-id={test["name"]}"]')
    expect(cell).to_contain_text(f"Score: 0.0 / {test['max_points']:.1f}")
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
    points, max_points = graded_class.autograded("alice")
    assert points == max_points > 0
    test = zero_grad_test(graded_class)
    page.goto(graded_class.feedback("alice").as_uri())
    expect(page.locator("body")).to_contain_text(headline(graded_class, "alice"))
    cell = page.locator(f'[id="cell-id={test["name"]}"]')
    expect(cell).to_contain_text(f"Score: {test['max_points']:.1f} / {test['max_points']:.1f}")
    assert "Error" not in cell.inner_text()
    labpage.screenshot(page, "feedback-3-correct")


@pytest.mark.browser
@pytest.mark.slow
def test_feedback_for_the_stubs_ticks_nothing(graded_class, page):
    """dan handed the release in as it is: every autograded test 0, each saying why, and no green tick anywhere."""
    auto = [t for t in graded_class.tests("dan") if t["kind"] == "auto"]
    assert auto and all(t["points"] == 0 and t["passed"] is False for t in auto), auto
    page.goto(graded_class.feedback("dan").as_uri())
    expect(page.locator("body")).to_contain_text(headline(graded_class, "dan"))
    cell = page.locator(f'[id="cell-id={auto[0]["name"]}"]')
    expect(cell).to_contain_text("NotImplementedError")
    cell.scroll_into_view_if_needed()
    labpage.screenshot(page, "feedback-4-stub")
    shown = page.locator("body").inner_text()
    assert "✓" not in shown and "Traceback" not in shown, "a tick or a traceback in the stub's feedback"


@pytest.mark.browser
@pytest.mark.slow
def test_feedback_messages_fit_the_page(graded_class, page):
    """Every output in bob's failing test is readable without scrolling sideways, wrapped between words."""
    page.goto(graded_class.feedback("bob").as_uri())
    cell = f'[id="cell-id={zero_grad_test(graded_class)["name"]}"]'
    clipped = page.locator(f'{cell} pre').evaluate_all(
        "els => els.filter(el => el.scrollWidth > el.clientWidth + 1).map(el => el.innerText.slice(0, 80))")
    assert not clipped, f"cut off at the right edge: {clipped}"
    breaks = page.locator(f'{cell} pre').evaluate_all(
        "els => [...new Set(els.map(el => getComputedStyle(el).wordBreak))]")
    assert breaks == ["normal"], f"a <pre> breaks lines mid-word: word-break {breaks}"
