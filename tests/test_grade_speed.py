"""Grading stops at a notebook's last test cell: what comes after cannot change a score, and it is not run."""

from __future__ import annotations

import json

import nbformat
import pytest

from autograder.run.execute import SKIPPED, last_graded_code_cell, skip_after_last_test

from autograder_cases.toy import notebook

pytestmark = pytest.mark.autograder


def toy(body: str, before: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    """The toy assignment with its visible test only, and a markdown cell at the very end."""
    nb = notebook(body, answer=None, before=before, after=after, hidden=False)
    nb.cells.append(nbformat.v4.new_markdown_cell("The end."))
    return nb


def test_cells_after_the_last_test_are_marked_not_run():
    nb = toy("    return a + b\n", before=("x = 1",), after=("print('slow')", "", "raise RuntimeError"))
    last = last_graded_code_cell(nb)
    assert last == 3 and nb.cells[last].metadata["nbgrader"]["grade"]
    assert skip_after_last_test(nb, last) == 2  # the empty cell is not counted
    assert nb.cells[2].get("outputs") == []  # before the test: untouched
    assert [c.outputs[0]["text"] for c in nb.cells[4:7] if c.cell_type == "code" and c.source] == [SKIPPED] * 2
    assert last_graded_code_cell(nbformat.v4.new_notebook()) == -1


@pytest.mark.slow
def test_grading_stops_at_the_last_test_cell(tmp_path, autograder_cli):
    source = tmp_path / "source"
    source.mkdir()
    nbformat.write(toy("    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION\n"), source / "00_toy.ipynb")
    after = ("import time\ntime.sleep(40)", "print('ran after the test')", "raise RuntimeError('boom')")
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    nbformat.write(toy("    return a + b\n", after=after), tmp_path / "subs" / "ann" / "00_toy.ipynb")
    # a wrong solution still fails: only what comes after the last test is skipped
    (tmp_path / "subs" / "bob").mkdir(parents=True)
    nbformat.write(toy("    return a - b\n", after=after), tmp_path / "subs" / "bob" / "00_toy.ipynb")
    proc = autograder_cli("grade", tmp_path / "subs", "--out", tmp_path / "out", "--source", source, "--timeout-cell",
                          60, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ann = json.loads((tmp_path / "out" / "ann.json").read_text())
    bob = json.loads((tmp_path / "out" / "bob.json").read_text())
    assert (ann["score"], bob["score"]) == (1, 0)
    timings = ann["notebooks"]["00_toy"]["timings"]
    assert timings["cells_skipped"] == 3 and timings["kernel_s"] < 30, timings
    feedback = (tmp_path / "out" / "feedback" / "ann" / "00_toy.html").read_text()
    assert feedback.count("not run while grading") == 3 and "ran after the test\n" not in feedback
    assert not ann["notebooks"]["00_toy"]["notes"]  # skipping is not news for every student's notes


def test_the_recheck_does_not_run_a_cell_that_only_shows_a_check_again():
    """A visible check cell (``print(checks.check_evaluate(evaluate))``) is a whole run of the check whose report is
    thrown away: the recheck plans every other cell before the test, and the test's hidden checks."""
    from autograder.hidden.plan import plan

    shown = ("print(checks.check_normalize(add))", 'checks.show_trace(add, "amp")')
    kept = ("report = checks.check_normalize(add)", "print(checks.check_normalize(add)); x = 1", "x = 1")
    nb = toy("    return a + b\n", before=shown + kept)
    test = nb.cells[2 + len(shown) + len(kept)]
    sources = {"test_add": 'checks.assert_property("normalize_images", "shape_dtype")\n'
                           '### BEGIN HIDDEN TESTS\nverify("00_data_tour", "normalize_images", "shape_dtype")\n'
                           '### END HIDDEN TESTS'}
    the_plan = plan(nb.cells, sources, timed_out=set(), stopped_at=None)
    planned = [c.source for c in the_plan.cells if c.grade_id is None]
    assert planned == [nb.cells[1].source, *kept]
    assert the_plan.cells[-1].grade_id == "test_add" and test.metadata["nbgrader"]["grade_id"] == "test_add"
