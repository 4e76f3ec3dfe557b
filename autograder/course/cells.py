"""nbgrader preprocessors that make a submission gradable and its feedback clean.

- :class:`NormalizeMetadata`: nbgrader metadata comes from the gradebook, never from the submission.
- :class:`RestoreCells`: nbgrader's ``OverwriteCells`` (locked cells get the instructor's source back), which also
  puts back deleted test cells, robust to a student deleting the cells around them too.
- :class:`ScrubHiddenTests`: feedback shows a failed test's message, not the hidden test's code.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells

HIDDEN_REGION = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)


class NormalizeMetadata(NbGraderPreprocessor):
    """First of all: every cell's nbgrader metadata becomes the gradebook's for its grade_id; metadata a student
    invented, broke or duplicated is dropped. nbgrader refuses a notebook whose metadata does not validate, which
    would cost the student the whole notebook for a slip of the editor."""

    def preprocess(self, nb, resources):
        canonical = _canonical_metadata(resources)
        seen = set()
        for cell in nb.cells:
            meta = cell.get("metadata")
            if not isinstance(meta, dict) or "nbgrader" not in meta:
                continue
            nbg = meta["nbgrader"]
            grade_id = nbg.get("grade_id") if isinstance(nbg, dict) else None
            if not isinstance(grade_id, str) or grade_id not in canonical or grade_id in seen:
                del meta["nbgrader"]
                continue
            seen.add(grade_id)
            meta["nbgrader"] = NotebookNode(dict(canonical[grade_id]))
        return nb, resources


@contextmanager
def gradebook_notebook(resources):
    """The instructor's version of the notebook being graded, from the gradebook (never from the submission); None
    when the gradebook does not know it. Use its cells inside the ``with``: the session closes after it."""
    nbg = resources["nbgrader"]
    with Gradebook(nbg["db_url"]) as gb:
        try:
            yield gb.find_notebook(nbg["notebook"], nbg["assignment"])
        except MissingEntry:
            yield None


def in_cell_order(items, notebook) -> list:
    """``items`` with a ``name`` (grade cells, cell scores) in the order their cells stand in the gradebook's copy
    of ``notebook``; any name it does not hold goes last."""
    order = {cell.name: i for i, cell in enumerate(notebook.source_cells)}
    return sorted(items, key=lambda item: order.get(item.name, len(order)))


def _canonical_metadata(resources) -> dict[str, dict]:
    with gradebook_notebook(resources) as notebook:
        if notebook is None:
            return {}
        grades = {c.name: c.max_score for c in notebook.grade_cells}
        tasks = {c.name: c.max_score for c in notebook.task_cells}
        solutions = {c.name for c in notebook.solution_cells}
        out = {}
        for cell in notebook.source_cells:
            meta = {"grade": cell.name in grades, "grade_id": cell.name, "locked": bool(cell.locked),
                    "schema_version": 3, "solution": cell.name in solutions, "task": cell.name in tasks}
            if cell.name in grades or cell.name in tasks:
                meta["points"] = float(grades.get(cell.name, tasks.get(cell.name)))
            out[cell.name] = meta
        return out


class RestoreCells(OverwriteCells):
    """OverwriteCells that also puts back deleted test cells, after the nearest earlier cell that survived."""

    add_missing_cells = True

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        source_cells = source_nb.source_cells
        order = [cell.name for cell in source_cells]
        max_scores = {cell.name: cell.max_score for cell in source_nb.grade_cells}
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for position, source_cell in enumerate(source_cells):
            name = source_cell.name
            if name not in max_scores or name in _present_ids(nb):
                continue
            self.log.warning("Missing test cell %s: putting back the instructor's version", name)
            cell = self.missing_cell_transform(source_cell, max_scores[name], is_solution=name in solution_ids)
            present = _present_ids(nb)
            insert_at = 0
            for earlier in reversed(order[:position]):
                if earlier in present:
                    insert_at = present[earlier] + 1
                    break
            nb.cells.insert(insert_at, cell)
        return nb, resources


def _present_ids(nb) -> dict[str, int]:
    return {cell.metadata["nbgrader"]["grade_id"]: i for i, cell in enumerate(nb.cells)
            if cell.metadata.get("nbgrader", {}).get("grade_id")}


class ScrubHiddenTests(NbGraderPreprocessor):
    """Feedback shows a failed test's message, not the hidden test's code or a traceback into grader code."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell):
            cell.source = HIDDEN_REGION.sub("# (hidden tests ran here)\n", cell.source)
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
