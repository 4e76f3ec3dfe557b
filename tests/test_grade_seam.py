"""grade()'s "run" step is swappable: any executor with start / run / close that hands back Result messages gets the
same gradebook, grades.csv and reports; this process alone writes them (what a Dask run relies on)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nbformat
import pytest

from autograder.channel import CellScore, Result, RunConfig, Task
from autograder.grade import GradeOptions, grade
from labutils.verdict import Verdict

from autograder_cases import toy

pytestmark = pytest.mark.autograder


def toy_notebook(body: str) -> nbformat.NotebookNode:
    """The toy assignment (tests/autograder_cases/toy.py) with its visible test only: 1 point."""
    return toy.notebook(body, answer=None, hidden=False)


class CannedExecutor:
    """Grades nothing: answers each task from a table, the way a remote executor's results come back."""

    def __init__(self, answers: dict[str, float | str]):
        self.answers, self.calls, self.seen = answers, [], []

    def start(self, work: Path) -> None:
        self.calls.append("start")

    def run(self, tasks: list[Task], run: RunConfig, on_result, log=print) -> None:
        self.calls.append("run")
        assert Path(run.template_db).exists() and run.cell_timeout == 30
        for task in tasks:
            self.seen.append((task.student, task.notebook, Path(task.path).name))
            answer = self.answers[task.student]
            if isinstance(answer, str):
                on_result(Result.failed(task, answer), 1.0)
                continue
            verdict = Verdict(grade_id="test_add", points=answer, max_points=1.0, passed=answer == 1.0,
                              message="" if answer else "wrong", by="notebook")
            score = CellScore(name="test_add", kind="auto", auto_score=answer, needs_manual_grade=False,
                              verdict=verdict)
            on_result(Result(id=task.id, student=task.student, notebook=task.notebook, tests=[score],
                             timings={"total_s": 1.0}), 1.0)

    def close(self) -> None:
        self.calls.append("close")


@pytest.mark.slow
def test_any_executor_feeds_the_same_collect_step(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    nbformat.write(toy_notebook(toy.SOLUTION), source / "00_toy.ipynb")
    for student in ("ann", "bob", "cy"):
        (tmp_path / "subs" / student).mkdir(parents=True)
        nbformat.write(toy_notebook(toy.CORRECT), tmp_path / "subs" / student / "00_toy.ipynb")
    (tmp_path / "subs" / "dee").mkdir()  # hands in nothing
    executor = CannedExecutor({"ann": 1.0, "bob": 0.0, "cy": "the worker died"})
    result = grade(tmp_path / "subs", tmp_path / "out", GradeOptions(source=source, cell_timeout=30),
                   executor=executor)
    assert executor.calls == ["start", "run", "close"]
    assert sorted(executor.seen) == [("ann", "00_toy", "00_toy.ipynb"), ("bob", "00_toy", "00_toy.ipynb"),
                                     ("cy", "00_toy", "00_toy.ipynb")]  # dee: nothing to run
    with open(tmp_path / "out" / "grades.csv") as f:
        rows = [(r["student"], r["score"]) for r in csv.DictReader(f)]
    assert rows == [("ann", "1"), ("bob", "0"), ("cy", ""), ("dee", "0")]  # cy's was not graded: no score, not 0
    from autograder.results.writers.nbgrader_csv import export_grades

    with open(export_grades(tmp_path / "out")) as f:  # the export read back from the record: cy has no total yet
        assert [(r["student_id"], r["score"]) for r in csv.DictReader(f)] == [
            ("ann", "1.0"), ("bob", "0.0"), ("cy", ""), ("dee", "0.0")]
    assert not result.complete and result.problems == ["cy/00_toy: not graded: could not be graded: the worker died"]
    cy = json.loads((tmp_path / "out" / "cy.json").read_text())
    assert cy["notebooks"]["00_toy"]["status"] == "error" and "the worker died" in cy["tests"][0]["message"]
    assert json.loads((tmp_path / "out" / "dee.json").read_text())["notebooks"]["00_toy"]["status"] == "missing"
    assert "slowest notebooks" in (tmp_path / "out" / "grading.log").read_text()
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp_path / 'out' / 'gradebook.db'}") as gb:
        assert gb.find_submission("loop_lab", "ann").score == 1.0


@pytest.mark.slow
def test_a_rerun_gives_the_gradebook_the_assignment_again_only_when_it_changed(tmp_path, monkeypatch):
    """A re-run on the same OUT (a late student, a resumed run) finds the gradebook holding this version of the
    assignment and leaves it; a changed source, or a gradebook emptied since, is given the assignment again."""
    from autograder.course import release

    source = tmp_path / "source"
    source.mkdir()
    nbformat.write(toy_notebook(toy.SOLUTION), source / "00_toy.ipynb")
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    nbformat.write(toy_notebook(toy.CORRECT), tmp_path / "subs" / "ann" / "00_toy.ipynb")
    monkeypatch.setenv("LOOPLAB_GRADER_CACHE", str(tmp_path / "cache"))
    given = []
    real = release.generate_gradebook
    monkeypatch.setattr(release, "generate_gradebook", lambda *a: given.append(a[2]) or real(*a))
    out, book = tmp_path / "out", f"sqlite:///{tmp_path / 'out' / 'gradebook.db'}"

    def run(regrade=None):
        grade(tmp_path / "subs", out, GradeOptions(source=source, cell_timeout=30, regrade=regrade),
              executor=CannedExecutor({"ann": 1.0}))
        return [url for url in given if url == book]

    assert run() == []  # a new gradebook: a copy of the template course's
    assert run(regrade=[]) == []  # the same assignment: left as it is, by a regrade too
    assert run() == []  # and after it
    nb = toy_notebook(toy.SOLUTION)
    nb.cells.append(nbformat.v4.new_markdown_cell("A note added to the assignment."))
    nbformat.write(nb, source / "00_toy.ipynb")
    assert run() == [book]  # changed: given again
    from nbgrader.api import Gradebook

    with Gradebook(book) as gb:
        gb.remove_assignment("loop_lab")  # emptied by hand since
    assert run() == [book, book]
    with open(out / "grades.csv") as f:
        assert [(r["student"], r["score"]) for r in csv.DictReader(f)] == [("ann", "1")]
    assert "sqlite" not in (out / ".journal" / "gradebook-assignment").read_text()  # a URL may hold a password


def test_a_lent_zygote_outlives_the_runs_that_borrow_it(tmp_path, monkeypatch):
    """LocalExecutor(zygote=...) grades on a warm zygote its owner keeps: a run (one with nothing to grade
    included) never closes it, and never starts one of its own; without one, the run starts and closes its own."""
    from autograder.run import pool

    started, closed = [], []

    class FakeZygote:
        def __init__(self, work=None):
            started.append(self)

        def close(self):
            closed.append(self)

    monkeypatch.setattr(pool, "SharedZygote", FakeZygote)
    lent = FakeZygote()
    for nothing_to_grade in (True, False):
        executor = pool.LocalExecutor(2, zygote=lent)
        executor.start(tmp_path)
        assert executor.zygote is lent
        if nothing_to_grade:
            executor.run([], None, on_result=None)
        executor.close()
    assert started == [lent] and not closed
    own = pool.LocalExecutor(2)
    own.start(tmp_path)
    own.run([], None, on_result=None)  # nothing to grade: its warm-up is stopped at once
    own.close()
    assert len(started) == 2 and closed == [started[1]]
