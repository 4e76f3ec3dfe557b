"""Points only on evidence (issue 15): answers that do nothing earn nothing, partial answers earn what they do, and a
student who has read the checks earns nothing by cheating them (issue 43): each cheating answer earns exactly what
it really implements.

The corpus is in tests/stubs/. A check must also give a verdict, never crash, on whatever a stub returns.
"""

from __future__ import annotations

import functools

import pytest
import torch

from labutils import checks, exercises
from labutils.checks import properties

import mutants
import stubs


def _earned(stub) -> set[str]:
    report = stubs.run_check(stub)
    return {p for p, v in properties.verdicts(stub.exercise, report).items() if v.passed}


@pytest.mark.parametrize("stub", stubs.DO_NOTHING, ids=lambda s: s.name)
def test_a_do_nothing_answer_scores_zero_on_every_property(stub):
    report = stubs.run_check(stub)
    verdicts = properties.verdicts(stub.exercise, report)
    earned = {p: v.message for p, v in verdicts.items() if v.passed}
    assert earned == {}
    assert all(v.message.startswith("✗") for v in verdicts.values())  # never a green tick for it


@pytest.mark.parametrize("stub", stubs.PARTIAL, ids=lambda s: s.name)
def test_a_partial_answer_earns_exactly_what_it_implements(stub):
    assert _earned(stub) == set(stub.earns)


@pytest.mark.parametrize("cheat", stubs.CHEATS, ids=lambda c: c.name)
def test_a_cheating_answer_earns_exactly_what_it_really_does(cheat):
    exercise = exercises.get(cheat.exercise)
    report = getattr(checks, exercise.check_name)(*cheat.functions(), *exercise.check_args)
    earned = {p for p, v in properties.verdicts(cheat.exercise, report).items() if v.passed}
    assert earned == set(cheat.earns), str(report)


def test_a_load_that_restores_from_memory_earns_only_where_its_save_ran(monkeypatch):
    """The calls apart are what hold that answer back: in a kernel the grader runs, whose own verdict only takes
    points away, the calls are made in its process, and the load restores what the save kept in memory. The grader's
    recheck makes them apart (test_evidence), as a notebook does: there it earns only its save."""
    cheat = next(c for c in stubs.CHEATS if c.name == "checkpoint_load_from_memory")
    monkeypatch.setenv(exercises.GRADER_ENV, exercises.GRADED_OUTSIDE[exercises.GRADER_ENV])
    report = checks.check_checkpoint(*cheat.functions())
    earned = {p for p, v in properties.verdicts(cheat.exercise, report).items() if v.passed}
    assert earned == set(cheat.earns) | {"restore", "return_step", "scaler_none"}, str(report)


def test_the_numbers_a_failure_message_prints_fit_no_other_run():
    """Messages say the numbers the check expected (a student learns from them). They are that run's own: handed
    back by its first call, they pass it. Every run draws fresh data, and a check's second call other data again, so
    an evaluate that returns what a message printed earns nothing, in that run or the next."""
    import re

    from labutils.checks import world
    from mutants import correct
    from stubs import partial

    def evaluate(model, loader, device, numbers=(0.0, 0.0), then=None, calls=None):
        """Every batch through the model in eval mode, then ``numbers``; from its second call on, ``then``."""
        if calls is not None:
            calls.append(1)
            if len(calls) > 1:
                return then(model, loader, device)
        partial.evaluate_modes_but_constant_numbers(model, loader, device)
        return numbers

    def loss_and_accuracy(report):
        verdicts = properties.verdicts("evaluate", report)
        return verdicts["loss"].passed, verdicts["accuracy"].passed

    with world.seeded(1):
        printed = tuple(float(n) for n in re.findall(r"over the whole loader is ([0-9]+\.[0-9]+)",
                                                     str(checks.check_evaluate(evaluate))))
    assert len(printed) == 2, printed  # the loss, then the accuracy
    with world.seeded(1):  # the printed numbers are the first call's own (the check's tolerance holds them)
        report = checks.check_evaluate(functools.partial(evaluate, numbers=printed, then=correct.evaluate_canonical,
                                                         calls=[]))
    assert loss_and_accuracy(report) == (True, True), str(report)
    for seed in (1, 2):  # the run the message came from (its second call has other data), and the next run
        with world.seeded(seed):
            report = checks.check_evaluate(functools.partial(evaluate, numbers=printed))
        assert loss_and_accuracy(report) == (False, False), str(report)


def test_every_root_cause_of_issue_43_has_a_cheating_answer():
    causes = {"structure", "memory", "predictable", "dummy", "later_calls", "patched", "word"}
    assert {c.cause for c in stubs.CHEATS} == causes
    assert {c.exercise for c in stubs.CHEATS} >= {"normalize", "baseline", "evaluate", "amp", "checkpoint", "resume",
                                                 "param_groups"}


def test_every_exercise_has_do_nothing_stubs():
    assert {s.exercise for s in stubs.DO_NOTHING} == {e.id for e in exercises.EXERCISES}


def test_the_do_nothing_answers_earn_no_point_of_the_autograded_ones():
    """The issue's measure: do-nothing answers once earned 22.5 of the 37 autograded points."""
    points = {e.id: {p.id: p.points for p in e.properties} for e in exercises.EXERCISES}
    earned = sum(points[s.exercise][p] for s in stubs.DO_NOTHING for p in _earned(s))
    assert earned == 0


# --- odd return values: a working loop that hands back something else --------------------------------------------------

ODD_VALUES = {"None": (None, "None"), "tensor": (torch.tensor([0.5, 0.25]), "tensor"),
              "short tuple": ((0.0,), "(0.0,)"), "long tuple": ((0.0, 0.0, 0.0), "(0.0, 0.0, 0.0)"),
              "string": ("0.0", "'0.0'"), "empty list": ([], "[]"), "dict": ({"loss": 0.0}, "dict")}


def _returning(function, value):
    """``function`` run as written (its side effects observed), ``value`` handed back instead of its result."""
    @functools.wraps(function)
    def odd(*args, **kwargs):
        function(*args, **kwargs)
        return value
    return odd


def _odd_variants():
    for variant in (v for v in mutants.CORRECT if v.name.endswith("_canonical")):
        for label, (value, shown) in ODD_VALUES.items():  
            *kept, last = variant.functions  # checkpoint: load is the one whose return value is read
            yield pytest.param(variant.exercise, (*kept, _returning(last, value)), shown,
                               id=f"{variant.exercise}-returns-{label.replace(' ', '-')}")


@pytest.mark.parametrize("exercise, functions, shown", list(_odd_variants()))
def test_an_odd_return_value_gets_a_verdict_naming_it(exercise, functions, shown):
    """A check never crashes on what a student's function returns: it fails the property that owns the value,
    with a message that says what came back."""
    exercise_ = exercises.get(exercise)
    report = getattr(__import__("labutils.checks", fromlist=["x"]), exercise_.check_name)(*functions, *exercise_.check_args)
    verdicts = properties.verdicts(exercise, report)
    failed = {p: v.message for p, v in verdicts.items() if not v.passed}
    assert failed, f"{exercise} returning {shown} passed every property"
    assert any(shown in message for message in failed.values()), failed


# --- the class summary: a test left unjudged is counted under what to fix first ---------------------------------------


def test_the_class_summary_counts_not_judged_under_its_root_cause():
    """A student whose steps are wrong also loses gradient and mean_loss as "not judged": the summary's concept
    row is the steps' (the mistake to teach again), not three concepts."""
    from autograder.results.record import NotebookRecord, StudentRecord, TestFacts, TestRecord
    from autograder.results.writers import summary

    variant = next(v for v in mutants.BUGGY if v.name == "forward_under_no_grad")
    exercise = exercises.get(variant.exercise)
    verdicts = properties.verdicts(variant.exercise, mutants.run_check(variant))
    tests = [TestRecord(TestFacts(exercise.notebook, v.grade_id, v.max_points, False, False, v.concept), v)
             for v in verdicts.values()]
    record = StudentRecord("ann", [NotebookRecord(exercise.notebook, "graded", tests)])
    missed = summary._missed_by_root_cause([record])
    assert missed == {(exercise.notebook, exercise.grade_id("steps")): {"ann"}}
