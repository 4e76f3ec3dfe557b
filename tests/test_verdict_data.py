"""A verdict is data from the check to every page that shows it (issue 32): rewording every message a check writes
changes nothing but words, and every writer reads the typed student record.

The class is the browser tests' tiny one (tests/browser/grading.py, graded once per test session), lab 1 only:
``bob`` calls ``zero_grad()`` between ``backward()`` and ``step()`` (his gradient test is "not judged" until his steps
are right: the class summary counts it under the steps), ``dan`` hands in the release's stubs, ``alice`` and
``mallory`` are right. It is graded a second time with :data:`REWORD` on the grader's path, which replaces the text
of every Failure, every NotJudged reason and every verdict with gibberish, a new one each time (so no two messages
are ever equal).
"""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest

import forked_graders
from browser.grading import NOTEBOOK, REPO, SESSION_CLASS, grade

pytestmark = [pytest.mark.autograder, pytest.mark.slow]
GIBBERISH = "zzq"  # what every reworded message begins with

REWORD = '''\
"""Loaded by every Python process of the grading run (PYTHONPATH): every message a check writes is reworded."""
import dataclasses
import itertools

from labutils.checks import properties, report

_count = itertools.count()


def gibberish():
    return f"zzq{next(_count)} blorp"  # a new text every time: no component may group or parse them


_init = report.Failure.__post_init__


def _reworded_init(self):
    _init(self)
    self.message = gibberish()


def _reason(failures):
    try:
        return report.NotJudged(gibberish(), needs=failures.needs)
    except (TypeError, AttributeError):  # a NotJudged that carries no data
        return report.NotJudged(gibberish())


_record = report.CheckReport.judge


def _reworded_record(self, check, failures):
    return _record(self, check, _reason(failures) if isinstance(failures, str) else failures)


_judge = properties.judge


def _reworded_judge(*args, **kwargs):
    verdict = _judge(*args, **kwargs)
    if isinstance(verdict, tuple):  # a verdict that is only (passed, message)
        return verdict[0], gibberish()
    return dataclasses.replace(verdict, message=gibberish())


report.Failure.__post_init__ = _reworded_init
report.CheckReport.judge = _reworded_record
properties.judge = _reworded_judge
'''


@pytest.fixture(scope="module")
def graded(tmp_path_factory, tiny_class) -> dict[str, Path]:
    """The session's tiny class as graded (tests/conftest.py), and the same submissions graded again reworded."""
    tmp = tmp_path_factory.mktemp("verdicts")
    (tmp / "reword").mkdir()
    (tmp / "reword" / "sitecustomize.py").write_text(REWORD)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([str(tmp / "reword"), str(REPO)]))  # this checkout's code
        proc = grade(forked_graders.run_real, tiny_class.submissions, tmp / "reworded")  # its zygote reworded too
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {"plain": tiny_class.out, "reworded": tmp / "reworded"}


def _grades(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as f:
        return list(csv.DictReader(f))


def _tables(out: Path) -> list[tuple[str, ...]]:
    """Every row of summary.md's tables with the message's words left out (the count of students sharing it kept)."""
    rows = []
    for line in (out / "summary.md").read_text().splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            shared = re.search(r"\((\d+)x\)$", cells[-1])
            rows.append((*cells[:-1], shared.group(1)) if shared else tuple(cells))
    return rows


def _concepts(out: Path) -> list[tuple[str, str, str]]:
    text = (out / "summary.md").read_text()
    table = text.split("## Concepts missed", 1)[1] if "## Concepts missed" in text else ""
    return [tuple(c.strip() for c in line.strip("|").split("|")[:3]) for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| notebook")]


def _tests(out: Path, student: str) -> list[dict]:
    record = json.loads((out / f"{student}.json").read_text())
    return [{k: v for k, v in t.items() if k != "message"} for t in record["tests"]]


def test_rewording_every_message_changes_no_grade_count_or_root_cause(graded):
    plain, reworded = graded["plain"], graded["reworded"]
    bob = {t["name"]: t for t in json.loads((reworded / "bob.json").read_text())["tests"]}
    assert GIBBERISH in bob["test_train_one_epoch_gradient"]["message"]  # the rewording reached the checks
    assert GIBBERISH in bob["test_train_one_epoch_steps"]["message"]
    assert "Fix test_" not in (reworded / "bob.json").read_text()
    assert _grades(reworded) == _grades(plain)
    # the root causes: bob's gradient is counted under his steps, the mistake to teach again, not under its own
    # concept (dan's stubs fail both on their own)
    from labutils import exercises

    steps = exercises.concept(NOTEBOOK, "test_train_one_epoch_steps")
    gradient = exercises.concept(NOTEBOOK, "test_train_one_epoch_gradient")
    for concepts in (_concepts(plain), _concepts(reworded)):
        assert (NOTEBOOK, steps, "2") in concepts and (NOTEBOOK, gradient, "1") in concepts, concepts
    assert _concepts(reworded) == _concepts(plain)
    assert _tables(reworded) == _tables(plain)  # every count of the summary, the messages' words left out
    for student in SESSION_CLASS:
        assert _tests(reworded, student) == _tests(plain, student)
    assert not bob["test_train_one_epoch_gradient"]["judged"]
    assert bob["test_train_one_epoch_gradient"]["blocked_by"] == ["test_train_one_epoch_steps"]


# --- every writer reads the typed record ------------------------------------------------------------------------------


def _record():
    """A student whose values no message states: the gradient test is blocked by the steps (its message says
    otherwise), the steps cost 0.25 of 1 point; the gradient test holds hidden tests."""
    from autograder_cases import records

    tests = [records.test(NOTEBOOK, "test_train_one_epoch_steps", 0.75, 1, message="blorp", causes=["zero_grad"]),
             records.test(NOTEBOOK, "test_train_one_epoch_gradient", 0, 1, hidden=True, judged=False,
                          message="Fix test_train_one_epoch_mean_loss first",
                          blocked_by=["test_train_one_epoch_steps"], causes=["gradient"]),
             records.test(NOTEBOOK, "answer_zero_grad_order", 0, 2, written=True, to_grade=True, judged=False,
                          message="", by="hand")]
    return records.class_record([records.student("quinn", {NOTEBOOK: tests}, notes=["a note"])])


def test_every_writer_reads_the_typed_class_record(tmp_path):
    """The student JSON, the class summary and Gradescope's results.json are functions of the ClassRecord (not of a
    dict read back by key, nor of another writer's file), and what they show comes from its fields: a root cause no
    message names, points no message says, a hidden test no source notebook was read for."""
    import typing

    from autograder.results.record import ClassRecord
    from autograder.results.writers import gradescope, student_json, summary

    for writer in (summary.files, student_json.files, gradescope.to_results):
        assert typing.get_type_hints(writer)["record"] is ClassRecord
    record = _record()
    on_disk = json.loads(dict(student_json.files(record))["quinn.json"])
    assert list(on_disk)[:8] == ["student", "assignment", "score", "raw_score", "late_penalty", "max_score",
                                 "graded", "notes"]  # the student JSON's format, fields added at the end only
    assert (on_disk["score"], on_disk["raw_score"], on_disk["max_score"]) == (0.75, 0.75, 4)
    assert on_disk["tests"][1]["blocked_by"] == ["test_train_one_epoch_steps"]
    assert on_disk["tests"][2]["passed"] is None  # a written answer waiting for a person

    text = dict(summary.files(record))[summary.SUMMARY_MD].decode()
    from labutils import exercises

    steps = exercises.concept(NOTEBOOK, "test_train_one_epoch_steps")
    assert f"| {NOTEBOOK} | {steps} | 1 |" in text  # the blocked test counted under what blocks it
    assert exercises.concept(NOTEBOOK, "test_train_one_epoch_gradient") not in text
    assert exercises.concept(NOTEBOOK, "test_train_one_epoch_mean_loss") not in text  # its message names it: unread
    assert "1 answer(s) to grade by hand, 0 graded" in text

    results = gradescope.to_results(record, "quinn", 2.0)
    assert [(t.score, t.max_score, t.status, t.visibility) for t in results.tests] == [
        (0.75, 1, "failed", "visible"), (0, 1, "failed", "after_published")]
    assert "Graded by hand on Gradescope: 01_baseline: answer_zero_grad_order (2 points)" in results.output
    assert "Note: a note" in results.output


# --- the recheck judges every test cell that ran, for its verdict's data -------------------------------------------


def test_the_recheck_plans_every_test_that_ran_and_hands_back_the_judges_verdict():
    """A test cell that failed in the kernel is judged outside it too (its verdict says what to fix first; its points
    stay the kernel's), one that ran out of time is not, nor a later test of the same function (it would only run
    out of time again); each outcome is the CheckLine's verdict unchanged, and only a real True passes."""
    import nbformat

    from autograder.channel import CheckLine
    from autograder.hidden.plan import plan
    from labutils.verdict import Verdict

    def test_cell(grade_id, ename=None):
        cell = nbformat.v4.new_code_cell("pass", metadata={"nbgrader": {"grade": True, "grade_id": grade_id,
                                                                        "points": 1, "locked": True}})
        cell.outputs = [nbformat.v4.new_output("error", ename=ename, evalue="", traceback=[])] if ename else []
        return cell

    def hidden(prop, function="train_one_epoch"):
        return f'### BEGIN HIDDEN TESTS\nverify("01_baseline", "{function}", "{prop}")\n### END HIDDEN TESTS'

    cells = [nbformat.v4.new_code_cell("def train_one_epoch(): pass"), test_cell("steps"),
             test_cell("gradient", "AssertionError"), test_cell("eval_mode", "CellTimeoutError"),
             test_cell("no_grad", "AssertionError")]
    sources = {"steps": hidden("steps"), "gradient": hidden("gradient"), "eval_mode": hidden("eval_mode", "evaluate"),
               "no_grad": hidden("no_grad", "evaluate")}
    the_plan = plan(cells, sources, timed_out={3}, stopped_at=None)
    assert sorted(the_plan.targets) == [1, 2] and the_plan.failed_in_kernel == {2}
    blocked = Verdict(grade_id="test_train_one_epoch_gradient", passed=False, judged=False,
                      blocked_by=["test_train_one_epoch_steps"], causes=["gradient"], concept="the gradient")
    forged = Verdict(grade_id="test_train_one_epoch_steps", passed="yes")  # a truthy non-bool: not a pass
    lines = [CheckLine(grade_id="gradient", call=["01_baseline", "train_one_epoch", "gradient"], verdict=blocked,
                       seconds=0.1),
             CheckLine(grade_id="steps", call=["01_baseline", "train_one_epoch", "steps"], verdict=forged, seconds=0.1)]
    outcomes = dict(the_plan.outcomes(lines, "did not finish"))
    assert outcomes[2].verdict == blocked and outcomes[1].verdict.passed is False
