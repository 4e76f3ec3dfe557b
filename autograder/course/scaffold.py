"""An exercise's graded cells, generated from the registry (labutils/exercises.py) so they are never typed by hand.

Per graded property: a heading ("Graded test 1 of 3: `train_one_epoch`, loop (1 point)") and a locked nbgrader test
cell whose visible part asks the check (``checks.assert_property``) and whose hidden part asks the grader
(``verify(notebook, function, property)``, removed from the release by nbgrader). ``python -m autograder cells ID``
prints them as a notebook to copy from; a test holds every solutions notebook to them. It lives on the instructor's
side: the handout carries no hidden-test markers.
"""

from __future__ import annotations

import json

from labutils import exercises


def graded_cells(exercise_id: str) -> list[dict]:
    """The exercise's graded cells as its ``solutions/`` notebook holds them (nbformat 4 cells)."""
    exercise = exercises.get(exercise_id)
    cells, n = [], len(exercise.properties)
    functions = ", ".join(f.name for f in exercise.functions)
    for k, prop in enumerate(exercise.properties, 1):
        grade_id = exercise.grade_id(prop.id)
        points = f"{prop.points:g} point{'' if prop.points == 1 else 's'}"
        cells.append({"cell_type": "markdown", "id": f"{grade_id}-heading", "metadata": {},
                      "source": f"### Graded test {k} of {n}: `{exercise.name}`, {prop.id.replace('_', ' ')} "
                                f"({points})"})
        cells.append({"cell_type": "code", "id": grade_id, "execution_count": None, "outputs": [], "metadata": {
            "nbgrader": {"grade": True, "grade_id": grade_id, "locked": True, "points": prop.points,
                         "schema_version": 3, "solution": False, "task": False}},
            "source": "\n".join([
                f'"""Check that {prop.title}"""',
                f'checks.assert_property("{exercise.id}", "{prop.id}", {functions})',
                "### BEGIN HIDDEN TESTS", "from autograder.hidden import verify",
                f'verify("{exercise.notebook}", "{exercise.functions[0].name}", "{prop.id}")',
                "### END HIDDEN TESTS"])})
    return cells


def as_notebook(exercise_id: str) -> str:
    """The graded cells as a notebook's JSON (open it in JupyterLab, copy the cells into the solutions notebook)."""
    return json.dumps({"cells": graded_cells(exercise_id), "metadata": {}, "nbformat": 4, "nbformat_minor": 5},
                      indent=1)
