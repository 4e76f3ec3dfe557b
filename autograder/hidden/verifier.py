"""Hidden tests: the instructor-only side of every graded test cell.

A hidden test cell only calls ``verify("01_baseline", "train_one_epoch", "gradient")`` (one graded property); the logic lives here, in the autograder
package installed where grading runs, never in the assignment folder (nbgrader copies every file of the source
folder into the student release).

Two ways it runs:

- Inside a notebook (an instructor executing ``solutions/``, or a plain ``nbgrader autograde``): the check runs right
  there on the notebook's function. Quick, but it trusts the kernel.
- Under ``python -m autograder grade`` (``LOOPLAB_HIDDEN_TESTS=external`` in the kernel): the call here only notes
  that the grader will decide. The grader re-runs the check outside the student's kernel, in a fresh process that
  re-executes only the notebook's non-test cells on pristine imports and restores torch/labutils before the check
  (:mod:`autograder.hidden.recheck`); a student who monkeypatches the checks, labutils or torch in the notebook gains nothing.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys

from labutils import exercises
from labutils.verdict import Verdict, failed



def contract(notebook_id: str, function_name: str) -> exercises.Exercise:
    """The exercise whose hidden test ``verify(notebook_id, function_name)`` runs (ValueError when there is none)."""
    return exercises.find(notebook_id, function_name)


def signature_problem(fn, expected: exercises.Function) -> str | None:
    """Why ``fn`` cannot be called the way the contract calls it, or None."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin or C function: let the check call it
    try:
        sig.bind(*expected.params, **{k: None for k in expected.keywords})
    except TypeError as exc:
        return (f"{expected.name} has the wrong signature: it is {expected.name}{sig}, the contract is "
                f"{expected.call} ({exc})")
    return None


def find_functions(notebook_id: str, function_name: str, namespace: dict) -> tuple[list, str | None]:
    """The contract's functions from ``namespace``, or the reason they cannot be checked."""
    fns = []
    for expected in contract(notebook_id, function_name).functions:
        fn = namespace.get(expected.name)
        if fn is None:
            return [], (f"{expected.name} is not defined: the cell that defines {expected.name}() must run without "
                        f"errors and keep the name {expected.name} (contract: {expected.call})")
        if not callable(fn):
            return [], f"{expected.name} is a {type(fn).__name__}, not a function (contract: {expected.call})"
        problem = signature_problem(fn, expected)
        if problem:
            return [], problem
        fns.append(fn)
    return fns, None


VerifyCall = tuple  # the literal arguments of one ``verify(...)`` call: (notebook_id, function_name, property_id)


def verify_calls(source: str) -> list[VerifyCall]:
    """The literal arguments of every ``verify(...)`` call in a test cell's source, in order (the grader reads the
    gradebook's copy of the cell, never the student's)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "verify":
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if len(args) == len(node.args) == 3 and not node.keywords:
                calls.append(tuple(args))
    return sorted(calls, key=lambda call: source.find(call[1]))


def judged_outside(cell_source: str) -> bool:
    """Does the test cell's hidden part (its ``### BEGIN HIDDEN TESTS`` regions) hold nothing but ``verify(...)``
    calls and their import? Under the grader those only note what the recheck judges, so the cell's run in the kernel
    is its visible part alone: what the student's own notebook shows."""
    from autograder.course.cells import HIDDEN_REGION

    regions = ["\n".join(region.splitlines()[1:-1]) for region in HIDDEN_REGION.findall(cell_source)]
    return bool(regions) and all(_only_verify_calls(code) for code in regions)


def _only_verify_calls(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    calls = len(verify_calls(code))
    plain = [node for node in tree.body if not (
        isinstance(node, ast.ImportFrom) and node.module == "autograder.hidden"
        and [a.name for a in node.names] == ["verify"])]
    return calls > 0 and len(plain) == calls and all(
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) for node in plain)


def describe(call: VerifyCall) -> str:
    """How a message names the hidden test of ``call``."""
    return f"the hidden test {contract(call[0], call[1]).grade_id(call[2])} of {call[1]}"


def run_check(call: VerifyCall, namespace: dict, checks_module=None, cache: dict | None = None,
              guard: bool = True) -> Verdict:
    """The :class:`~labutils.verdict.Verdict` of the hidden test ``call`` on the functions found in
    ``namespace``.

    ``call`` is (notebook_id, function_name, property_id): one graded property (labutils.checks.properties: one check
    run shared by all of them, the rule for a mistake upstream). ``cache``: a dict the caller keeps between calls (the grader's recheck keeps one per notebook); without
    one, the kernel-side memo of labutils.checks.properties is used. ``guard=False``: no student code runs in this
    process (the recheck's judge), so there is nothing to watch for patches.
    """
    from labutils.checks import properties

    notebook_id, function_name, property_id = call
    spec = contract(notebook_id, function_name)
    spec.property(property_id)  # an unknown property fails loudly
    fns, problem = find_functions(notebook_id, function_name, namespace)
    if problem:
        return failed(spec.id, property_id, problem, "signature")
    if checks_module is None:
        from labutils import checks as checks_module

    snapshot = None
    # the grader's recheck: a report made while torch was patched is dropped. A report already in the cache was
    # guarded when it was made, and answering from it runs no student code: no snapshot (0.2 s each) for it.
    if guard and cache is not None and not properties.is_cached(spec.id, tuple(fns), cache):
        from .snapshot import Snapshot

        snapshot = Snapshot()
    try:
        report = properties.report_for(spec.id, tuple(fns), checks_module, cache)
    except Exception as exc:  # the check could not run (labutils' checks say so in their report; this is the rest)
        return dataclasses.replace(failed(spec.id, property_id, f"could not check {function_name}: "
                                          f"{type(exc).__name__}: {exc}", "check_error"), judged=False)
    changed = snapshot.tampered() if snapshot is not None else []
    if changed:  # every property test sharing this report fails the same way, not only the first
        properties.forget(spec.id, cache)
        return failed(spec.id, property_id, tampered_message(function_name, changed), "tampered")
    verdict = properties.judge(spec.id, property_id, report)
    # only the real boolean counts (a student-made object is never "truthy enough")
    return dataclasses.replace(verdict, passed=verdict.passed is True)


def verify(notebook_id: str, function_name: str, property_id: str) -> None:
    """Hidden test of ``function_name`` (one graded property of it, when given) in the calling notebook; raises
    AssertionError with the verdict on failure."""
    spec = contract(notebook_id, function_name)  # unknown ids fail loudly, in any mode
    call = (notebook_id, function_name, property_id)
    spec.property(property_id)
    if exercises.graded_outside():
        return  # the grader's recheck judges it outside the kernel and adds its verdict under the cell if it fails
    namespace = sys._getframe(1).f_globals
    verdict = run_check(call, namespace)
    if not verdict.passed:
        raise AssertionError(verdict.message)


def tampered_message(function_name: str, changed) -> str:
    """What a student reads when their function patched a module its check uses (in place or in the recheck)."""
    return (f"{function_name} changed {', '.join(sorted(map(str, changed))[:5])} while it was being checked; "
            "functions that modify torch or labutils are not accepted.")
