"""A graded test's verdict as data: made where a property is judged (:func:`labutils.checks.properties.judge`) and
carried unchanged to every page that shows it (the grader's recheck, the task's scores, the gradebook, grades.csv,
the student's JSON, the feedback page, the class summary).

It lives beside the registry, not in :mod:`labutils.checks` (whose import loads torch), because the grader's own
processes read it and never import torch. Facts travel as fields, words only for people: why a test earned nothing
(``causes``), which graded test to fix first (``blocked_by``), the concept it checks (``concept``, from the
registry) are never read back out of ``message``. Rewording every message changes nothing but words
(tests/test_verdict_data.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# who decided: the lab's check (outside the kernel), the cell's own run in the kernel, a person
BY_CHECK, BY_NOTEBOOK, BY_HAND = "check", "notebook", "hand"


@dataclass
class Verdict:
    """One graded test (one notebook cell, ``grade_id``) decided.

    ``judged`` False: it earns nothing *yet*: a mistake upstream (``blocked_by``: the graded tests of the same
    notebook to fix first) or nothing it needs was observed; or a written answer not graded by hand yet.
    ``causes``: the check ids (``Failure.check``) that cost its points or saw nothing: the "why" the class summary
    groups by. ``exercise``, ``property_id`` and ``concept`` are the registry's (:mod:`labutils.exercises`); empty for a
    test the registry does not define (a written answer, an instructor's own assert)."""

    grade_id: str
    passed: bool
    judged: bool = True
    message: str = ""  # for the student: no program reads a fact from it
    points: float = 0.0
    max_points: float = 0.0
    blocked_by: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    exercise: str = ""
    property_id: str = ""
    concept: str = ""
    by: str = BY_CHECK  # check | notebook | hand


def verdict_of(exercise_id: str, property_id: str, passed: bool, message: str, **data) -> Verdict:
    """The verdict on a property of the registry: its grade id, points, concept filled in from there."""
    from . import exercises

    exercise = exercises.get(exercise_id)
    prop = exercise.property(property_id)
    return Verdict(grade_id=exercise.grade_id(prop.id), passed=passed, message=message,
                   points=prop.points if passed else 0.0, max_points=prop.points, exercise=exercise.id,
                   property_id=prop.id, concept=prop.title, **data)


def failed(exercise_id: str, property_id: str, message: str, cause: str) -> Verdict:
    """A property that could not be checked at all (``cause``: "signature", "exception", "tampered", "stopped"...):
    0 points, judged (the function is what it is)."""
    return verdict_of(exercise_id, property_id, False, message, causes=[cause])
