"""The plan of a notebook's recheck, and its verdicts read back: which graded cells carry hidden checks (their
``verify(...)`` calls, read from the gradebook's copy of the cell, never from the submission), which of the
student's cells the recheck re-runs before them, and, from the recheck's reply, one outcome per hidden check: the
judge's :class:`~labutils.verdict.Verdict`, unchanged.

The notebook runner (:mod:`autograder.run.execute`) only runs the notebook; it asks for this plan, sends it to the
zygote and puts the failures under their test cells.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field

from nbgrader import utils

from labutils import exercises, verdict
from labutils.verdict import Verdict

from autograder.channel import CheckLine, RecheckCell

from . import verifier

SHOWN = frozenset({e.check_name for e in exercises.EXERCISES} | {"show_trace"})  # what a visible check cell calls


def has_error(cell) -> bool:
    return any(o.get("output_type") == "error" for o in cell.get("outputs", []))


@dataclass
class RecheckOutcome:
    """One hidden test as the judge outside the kernel decided it: its :class:`CheckLine`'s verdict, unchanged, or a
    failed one when the reply does not answer it."""

    grade_id: str  # the test cell
    call: list[str]
    verdict: Verdict


@dataclass
class RecheckPlan:
    targets: dict[int, tuple[str, list]]  # cell index -> (grade_id, its verify calls)
    cells: list[RecheckCell]  # what the recheck runs, in order: the student's cells, then each target's checks
    failed_in_kernel: set[int] = field(default_factory=set)  # targets whose cell failed in the kernel: judged for
    # their verdict's data (what to fix first), never for points (the kernel's failure stands)

    def outcomes(self, lines: list[CheckLine], why_missing: str) -> list[tuple[int, RecheckOutcome]]:
        """(cell index, outcome) for every hidden check planned; one the reply does not answer failed, ``why``."""
        answered: dict[str, dict[tuple, CheckLine]] = {}
        for line in lines:
            answered.setdefault(line.grade_id, {})[tuple(line.call)] = line
        outcomes = []
        for index, (grade_id, calls) in self.targets.items():
            got = answered.get(grade_id, {})
            for call in calls:
                item = got.get(tuple(call))
                judged = item.verdict if item is not None else verdict.failed(
                    verifier.contract(call[0], call[1]).id, call[2], f"{verifier.describe(call)} {why_missing}",
                    "stopped")
                judged = dataclasses.replace(judged, passed=judged.passed is True)  # only a real True passes
                outcomes.append((index, RecheckOutcome(grade_id=grade_id, call=list(call), verdict=judged)))
        return outcomes


def plan(cells, sources: dict[str, str], timed_out: set[int], stopped_at: int | None) -> RecheckPlan | None:
    """The recheck of a notebook whose ``cells`` ran (``timed_out``: cells stopped by the cell time limit;
    ``stopped_at``: the first cell not run); None when no graded cell that ran has a hidden check.
    ``sources``: grade_id -> the gradebook's source of that cell.

    A graded cell that failed in the kernel is judged too (only its points stand as the kernel left them): its
    verdict says, as data, what it is blocked by. One that ran out of time, or whose function did not return in an
    earlier cell, is not: it would only run out of time again."""
    targets, failed_in_kernel, stuck = {}, set(), set()
    for index, cell in enumerate(cells):
        if cell.cell_type != "code" or not utils.is_grade(cell):
            continue
        grade_id = cell.metadata.nbgrader.get("grade_id")
        calls = verifier.verify_calls(sources.get(grade_id, ""))
        exercises_of = {verifier.contract(c[0], c[1]).id for c in calls}
        if index in timed_out or not_run(cell):
            stuck |= exercises_of
        elif calls and not exercises_of & stuck and (stopped_at is None or index < stopped_at):
            targets[index] = (grade_id, calls)
            if has_error(cell):
                failed_in_kernel.add(index)
    if not targets:
        return None
    planned = []
    for index, cell in enumerate(cells[: max(targets) + 1]):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if index in targets:
            grade_id, calls = targets[index]
            planned.append(RecheckCell(index=index, grade_id=grade_id, checks=[list(c) for c in calls]))
        elif utils.is_grade(cell):
            continue  # the instructor's tests: not re-run, only their hidden checks (above)
        elif only_shows_a_check(cell.source):
            continue  # the hidden tests run that check again, on their own
        else:
            skip = index in timed_out or (stopped_at is not None and index >= stopped_at)
            planned.append(RecheckCell(index=index, source=cell.source, run=not skip))
    return RecheckPlan(targets, planned, failed_in_kernel)


def not_run(cell) -> bool:
    """Whether a test cell never ran to its end in the kernel: the kernel died, stopped, or the time ran out."""
    return any(o.get("output_type") == "error" and o.get("ename") in ("NotRun", "KernelDied", "CellTimeoutError")
               for o in cell.get("outputs", []))


def only_shows_a_check(source: str) -> bool:
    """Whether a cell does nothing but show a check's verdict, ``print(checks.check_evaluate(evaluate))`` or
    ``checks.show_trace(fn, "amp")``, with names and constants for arguments: it binds no name and its report is
    thrown away, so the recheck skips it. Re-running it was a whole extra run of the check, a third of the recheck's
    time. A cell that also does anything else runs."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return False
    call = tree.body[0].value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print" \
            and len(call.args) == 1 and not call.keywords:
        call = call.args[0]
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "checks" and call.func.attr in SHOWN
            and all(isinstance(a, (ast.Name, ast.Constant)) for a in [*call.args, *(k.value for k in call.keywords)]))
