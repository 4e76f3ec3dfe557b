"""Points only on evidence (issue 15): answers that do nothing earn nothing, partial answers earn what they do.

The corpus is in tests/stubs/. A check must also give a verdict, never crash, on whatever a stub returns.
"""

from __future__ import annotations

import pytest

from labutils import exercises
from labutils.checks import properties

try:
    import stubs
except ImportError:  # run from the repository root as a package
    from tests import stubs


def _earned(stub) -> set[str]:
    report = stubs.run_check(stub)
    return {p for p, (passed, _) in properties.verdicts(stub.exercise, report).items() if passed}


@pytest.mark.parametrize("stub", stubs.DO_NOTHING, ids=lambda s: s.name)
def test_a_do_nothing_answer_scores_zero_on_every_property(stub):
    report = stubs.run_check(stub)
    verdicts = properties.verdicts(stub.exercise, report)
    earned = {p: message for p, (passed, message) in verdicts.items() if passed}
    assert earned == {}
    assert all(message.startswith("✗") for _, message in verdicts.values())  # never a green tick for it


@pytest.mark.parametrize("stub", stubs.PARTIAL, ids=lambda s: s.name)
def test_a_partial_answer_earns_exactly_what_it_implements(stub):
    assert _earned(stub) == set(stub.earns)


def test_every_exercise_has_do_nothing_stubs():
    assert {s.exercise for s in stubs.DO_NOTHING} == {e.id for e in exercises.EXERCISES}


def test_the_do_nothing_answers_earn_no_point_of_the_autograded_ones():
    """The issue's measure: do-nothing answers once earned 22.5 of the 37 autograded points."""
    points = {e.id: {p.id: p.points for p in e.properties} for e in exercises.EXERCISES}
    earned = sum(points[s.exercise][p] for s in stubs.DO_NOTHING for p in _earned(s))
    assert earned == 0
