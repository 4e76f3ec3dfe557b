"""Per-lab pytest markers (``pytest -m lab04``), derived from the exercise registry (labutils/exercises.py).

A test gets the marker of every notebook its parameters name: a notebook id ("04_accumulation"), an exercise id
("accumulation"), or an object with an ``exercise`` attribute (a mutant corpus variant).
"""

from __future__ import annotations

from labutils import exercises


def pytest_configure(config):
    for notebook in exercises.NOTEBOOKS:
        marker = exercises.lab_marker(notebook.id)
        config.addinivalue_line("markers", f"{marker}: tests of {notebook.id} (its exercises and notebook)")


def _notebooks(value) -> set[str]:
    """The notebooks a test parameter names."""
    notebook_ids = {n.id for n in exercises.NOTEBOOKS}
    exercise_ids = {e.id: e.notebook for e in exercises.EXERCISES}
    value = getattr(value, "exercise", value)
    if isinstance(value, str):
        if value in notebook_ids:
            return {value}
        if value in exercise_ids:
            return {exercise_ids[value]}
    return set()


def pytest_collection_modifyitems(config, items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        names = set()
        for value in callspec.params.values():
            names |= _notebooks(value)
        for notebook in sorted(names):
            item.add_marker(exercises.lab_marker(notebook))
