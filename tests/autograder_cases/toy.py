"""A one-notebook assignment that grades in seconds: the deadline, export and Gradescope tests grade it instead of
the lab's nine notebooks. ``00_toy``: ``add`` with a visible test (1 point), a hidden test (2 points), and a written
answer graded by hand (2 points). The grader's own tests build variants of it (extra cells before or after the test,
no hidden test, no written answer) with :func:`notebook`."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat

NOTEBOOK = "00_toy"
SOLUTION = "    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION\n"
CORRECT, STUB, ONE_MISTAKE = "    return a + b\n", "    raise NotImplementedError('add')\n", "    return a - b if a > 5 else a + b\n"
MAX = {"test_add": 1, "test_add_hidden": 2, "answer": 2}


def _meta(gid: str, **kw) -> dict:
    return {"nbgrader": {"grade": False, "grade_id": gid, "locked": False, "schema_version": 3, "solution": False,
                         "task": False, **kw}}


def notebook(body: str, answer: str | None = "YOUR ANSWER HERE", before: tuple[str, ...] = (),
             after: tuple[str, ...] = (), hidden: bool = True) -> nbformat.NotebookNode:
    """The toy notebook with ``body`` as add's body: code cells ``before`` and ``after`` its visible test, its hidden
    test when ``hidden``, and ``answer`` as the written answer (None: no written answer)."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Toy"),
        nbformat.v4.new_code_cell("def add(a, b):\n" + body, metadata=_meta("add", solution=True)),
        *[nbformat.v4.new_code_cell(source) for source in before],
        nbformat.v4.new_code_cell('"""Check add on small numbers"""\nassert add(1, 2) == 3',
                                  metadata=_meta("test_add", grade=True, locked=True, points=1)),
        *[nbformat.v4.new_code_cell(source) for source in after],
    ]
    if hidden:
        nb.cells.append(nbformat.v4.new_code_cell(
            '"""Check add on larger numbers"""\n### BEGIN HIDDEN TESTS\n'
            'assert add(7, 3) == 10, "add(7, 3) should be 10"\n### END HIDDEN TESTS\n',
            metadata=_meta("test_add_hidden", grade=True, locked=True, points=2)))
    if answer is not None:
        nb.cells.append(nbformat.v4.new_markdown_cell(answer, metadata=_meta("answer", grade=True, solution=True,
                                                                             points=2)))
    return nb


def write_source(folder: Path) -> Path:
    """The assignment's source folder (``--source``)."""
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook(SOLUTION, "### BEGIN SOLUTION\nAddition.\n### END SOLUTION"), folder / f"{NOTEBOOK}.ipynb")
    return folder


def write_student(subs: Path, student: str, body: str = CORRECT, timestamp: str | None = None,
                  mtime: float | None = None) -> Path:
    """``subs/<student>/00_toy.ipynb`` (with nbgrader's timestamp.txt when given; its file time when given)."""
    folder = subs / student
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{NOTEBOOK}.ipynb"
    nbformat.write(notebook(body, "Because addition."), path)
    if timestamp is not None:
        (folder / "timestamp.txt").write_text(timestamp)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def give_by_hand(db_url: str, student: str, points: float) -> None:
    """What an instructor does in formgrader: score ``student``'s written answer by hand."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        grade = gb.find_grade("answer", NOTEBOOK, "loop_lab", student)
        grade.manual_score = points
        grade.needs_manual_grade = False
        gb.db.commit()
