"""The student's journey in JupyterLab: the handout unzipped, ``jupyter lab notebooks/`` as its README says (from
this venv, with the handout's labutils and Jupyter setting: see student.py), lab 1 worked in a real browser.
"""

from __future__ import annotations

import pytest

from labutils import checks

from .conftest import ENABLE
from .student import start_command, student_env

pytest.importorskip("playwright.sync_api", reason=ENABLE)

from playwright.sync_api import expect  # noqa: E402

from . import labpage  # noqa: E402

import mutants

VARIANTS = {v.name: v for v in mutants.VARIANTS}
CORRECT = VARIANTS["baseline_canonical"]
BUGGY = VARIANTS["zero_grad_before_step"]  # zero_grad() between backward() and step()
CORRECT_EVALUATE = VARIANTS["evaluate_canonical"]
NOTEBOOK = "01_baseline.ipynb"
ANSWER = ("With zero_grad() between backward() and step(), the step sees gradients of zero: the weights barely move "
          "(only weight decay acts) and the model does not learn. Without zero_grad() at all, backward() adds each "
          "batch's gradient to the last ones, so every step follows the sum of all gradients so far and training "
          "diverges or crawls.")


def open_lab_1(jupyter, handout, page):
    server = jupyter(handout, *start_command(handout), env=student_env(handout))
    labpage.open_notebook(page, server.url(f"lab/tree/{NOTEBOOK}"))
    return server


@pytest.mark.browser
@pytest.mark.slow
def test_check_cell_verdicts_in_jupyterlab(handout, jupyter, page):
    """Run the notebook as released, down to the check: ✗, nothing ticked. Type a correct train_one_epoch: ✓. Then
    zero_grad() between backward() and step(): the verdict names that mistake, without a traceback."""
    server = open_lab_1(jupyter, handout, page)
    labpage.screenshot(page, "student-1-opened")
    exercise = labpage.cell_index(page, r'raise NotImplementedError\("Lab 1: train_one_epoch"\)')
    check = labpage.cell_index(page, r"print\(checks\.check_train_one_epoch\(")

    labpage.run_cells(page, 0, check)  # the stub as released: nothing written yet
    shown = labpage.wait_output(page, check, "✗ train_one_epoch")
    labpage.screenshot(page, "student-2-stub-check")
    assert "✓" not in shown and "Traceback" not in shown, f"the stub's check ticks something: {shown[:600]}"
    assert "NotImplementedError" in shown

    labpage.set_source(page, exercise, mutants.source(CORRECT))
    labpage.screenshot(page, "student-3-typed-correct")
    labpage.run_cells(page, exercise, check)
    expected = str(checks.check_train_one_epoch(CORRECT.function, "baseline"))  # the same check, run here
    shown = labpage.wait_output(page, check, expected.splitlines()[0])
    labpage.screenshot(page, "student-4-check-passed")
    assert shown.strip() == expected

    labpage.set_source(page, exercise, mutants.source(BUGGY))
    labpage.run_cells(page, exercise, check)
    shown = labpage.wait_output(page, check, BUGGY.expected_message)
    labpage.screenshot(page, "student-5-check-names-the-bug")
    assert shown.startswith("✗ train_one_epoch") and "Traceback" not in shown
    assert "zero_grad" in shown.splitlines()[0]
    assert not labpage.stderr_outputs(page), "warnings in the student's outputs"
    assert "without encryption" not in server.log()  # the kernel got CurveZMQ keys (the handout's Jupyter setting)


@pytest.mark.browser
@pytest.mark.slow
def test_nbgrader_validate_passes_for_a_correct_notebook(handout, jupyter, page):
    """Both functions written correctly and the question answered, then nbgrader's Validate button (it saves
    first, then runs the notebook in grading mode): success."""
    open_lab_1(jupyter, handout, page)
    for pattern, variant in ((r'NotImplementedError\("Lab 1: train_one_epoch"\)', CORRECT),
                             (r'NotImplementedError\("Lab 1: evaluate"\)', CORRECT_EVALUATE)):
        labpage.set_source(page, labpage.cell_index(page, pattern), mutants.source(variant))
    labpage.set_markdown(page, labpage.cell_index(page, r"^YOUR ANSWER HERE"), ANSWER)
    page.locator(".jp-NotebookPanel:visible .validate-button").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=100_000)
    labpage.screenshot(page, "student-6-validate")
    expect(dialog).to_contain_text("Success! Your notebook passes all the tests.", timeout=1000)
