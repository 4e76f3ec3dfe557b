"""Graded properties: one check run per exercise, judged once per property the lab teaches (labutils.exercises).

Points only on evidence. A check reports root causes only (a stage whose dependency failed is not run and is listed
in ``report.skipped``), and a stage that the run gave nothing to look at (no step, no forward, no file) says so
instead of passing (``report.unjudged``). So a property is judged like this:

- it fails when the report holds a failure whose id is one of the property's (``Property.checks``), with that
  failure's message;
- it fails, with the message, when the function could not be judged at all: a wrong signature, a call to the lab's
  own reference, or an exception that no stage explained (``GLOBAL``), or a failure no property owns;
- it fails as *not judged* (0 points, ✗) when one of its checks saw no evidence or was skipped: the message says
  what was missing or which mistake to fix first ("not judged: needs order right first"), and the verdict holds the
  graded tests to fix first as data (``Verdict.blocked_by``, from ``report.blocked``);
- it passes only when every one of its checks ran and found the right thing in what the student's run did;
- it is *not judged* (0 points) with the words "could not check" when the check failed inside itself
  (``report.broken``, :func:`labutils.checks.calling.could_not_check`): a bug of the check is never the student's.

A mistake should still cost only its own property: the stages are built so that as little as possible depends on an
earlier stage passing (a dependency that is real is declared in the stage table and in the registry's docs).

A run that never returned (a cell time limit interrupted it, or sys.exit) is remembered too: the next property cell
of the same functions fails at once instead of waiting for the time limit again.

A run is memoised on the identity of the student's function(s) and of the globals they name (a helper redefined in
another cell is a new object, so the next test runs the check again), so every property cell of one exercise reads one
check run: :func:`report_for` keeps the last report per exercise in ``cache`` (the grader's recheck passes a dict of
its own, since it restores every module attribute between checks) or in this module's kernel-side memo.
"""

from __future__ import annotations


from .. import exercises
from .report import CheckReport
from ..verdict import Verdict, verdict_of

GLOBAL = ("signature", "uses_reference", "exception")  # nothing else could be judged: every property fails
_MEMO: dict = {}  # in a kernel: exercise id -> (functions, report); the functions are kept so their ids stay unique


def report_for(exercise_id: str, fns: tuple, checks_module=None, cache: dict | None = None) -> CheckReport:
    """The exercise's check run on ``fns``, computed once per set of functions (by identity)."""
    memo = _MEMO if cache is None else cache
    key = ("looplab-property-report", exercise_id)
    seen = _seen(fns)
    hit = _hit(memo, key, seen)
    exercise = exercises.get(exercise_id)
    if hit is not None:
        if isinstance(hit[1], str):  # the run in an earlier test cell never returned: do not wait for it again
            raise AssertionError(f"the check of {exercise.name} did not return in the graded test above it ({hit[1]}"
                                 "): the function never finished there. Fix that first (run the check cell to see "
                                 "it), then every graded test of it is judged.")
        return hit[1]
    if checks_module is None:
        from labutils import checks as checks_module
    try:
        report = getattr(checks_module, exercise.check_name)(*fns, *exercise.check_args)
    except BaseException as exc:  # a cell time limit's interrupt (CellTimeoutError), sys.exit(): not a verdict
        if not isinstance(exc, Exception):
            never_returned(exercise_id, fns, type(exc).__name__, cache)
        raise
    memo[key] = (seen, report)
    return report


def never_returned(exercise_id: str, fns: tuple, stopped_by: str, cache: dict | None = None) -> None:
    """Remember that the check of ``fns`` did not return (``stopped_by``: the name of what stopped it), so the
    exercise's later graded tests say so instead of waiting for it again: in a kernel, and in the grader's judge,
    which learns it from the end of the check its observer sends."""
    what = "CellTimeoutError: interrupted" if stopped_by == "KeyboardInterrupt" else stopped_by
    (_MEMO if cache is None else cache)[("looplab-property-report", exercise_id)] = (_seen(fns), what)


def is_cached(exercise_id: str, fns: tuple, cache: dict | None = None) -> bool:
    """Whether :func:`report_for` would answer from memory, running none of the student's code (so the grader need
    not guard the call)."""
    return _hit(_MEMO if cache is None else cache, ("looplab-property-report", exercise_id), _seen(fns)) is not None


def _hit(memo: dict, key: tuple, seen: tuple):
    hit = memo.get(key)
    if hit is not None and len(hit[0]) == len(seen) and all(a is b for a, b in zip(hit[0], seen)):
        return hit
    return None


def forget(exercise_id: str, cache: dict | None = None) -> None:
    """Drop the exercise's memoised report (e.g. one computed while the function tampered with torch)."""
    (_MEMO if cache is None else cache).pop(("looplab-property-report", exercise_id), None)


def _seen(fns: tuple) -> tuple:
    """The functions and every global they name (a helper redefined in another cell is a new object): a report is
    reused only while all of them are the very same objects."""
    seen = list(fns)
    for fn in fns:
        names, env = getattr(getattr(fn, "__code__", None), "co_names", ()), getattr(fn, "__globals__", {})
        seen += [env[name] for name in names if name in env]
    return tuple(seen)


def judge(exercise_id: str, property_id: str, report: CheckReport) -> Verdict:
    """The :class:`Verdict` of one graded property, read from the exercise's report (the rule is in the docstring)."""
    exercise = exercises.get(exercise_id)
    prop = exercise.property(property_id)
    if report.broken is not None:  # a bug of the check: nothing was judged, nothing is the student's fault
        return _verdict(exercise, prop, False, f"✗ {exercise.grade_id(prop.id)}: not judged, so no points yet: "
                        f"{report.broken}", judged=False, causes=["check_error"])
    owned = {c for p in exercise.properties for c in p.checks}
    failures = [f for f in report.failures if f.check in prop.checks]
    if not failures:  # a failure no property owns is treated as global: it never goes unpunished
        failures = [f for f in report.failures if f.check in GLOBAL or f.check not in owned]
    if failures:
        return _verdict(exercise, prop, False, f"✗ {exercise.grade_id(prop.id)}: {prop.title}: no.\n\n"
                        + "\n\n".join(map(str, failures)), causes=list(dict.fromkeys(f.check for f in failures)))
    judged_by = [c for c in prop.checks if c in report.checks or c in report.judged or c in report.unjudged]
    unseen = [c for c in judged_by if not report.passed_on_evidence(c)]
    if unseen or not judged_by:
        return _not_judged(exercise, prop, report, unseen)
    return _verdict(exercise, prop, True, f"✓ {exercise.grade_id(prop.id)}: {prop.title}.")


def _verdict(exercise, prop, passed: bool, message: str, **data) -> Verdict:
    return verdict_of(exercise.id, prop.id, passed, message, **data)


def _not_judged(exercise, prop, report: CheckReport, unseen: list[str]) -> Verdict:
    """Why a property earns nothing yet: what its checks could not observe, and which graded tests to fix first (from
    the report's ``blocked``, else the registry's declared dependencies that failed)."""
    reasons = [f"{c}: {report.unjudged.get(c, 'nothing it needs was observed')}" for c in unseen] or \
        ["the check observed nothing this property needs"]
    roots = [r for c in unseen for r in report.blocked.get(c, ())]
    waits_on = list(dict.fromkeys(p.id for r in roots for p in exercise.owner(r) if p.id != prop.id))
    if not waits_on:  # nothing in the report names it: the registry's declared dependencies that failed
        waits_on = [n for n in prop.needs if not judge(exercise.id, n, report).passed]
    first = [exercise.grade_id(p) for p in _failed_at_the_root(exercise, report, waits_on, {prop.id})]
    fix = f" Fix {', '.join(first)} first; then this is checked too." if first else ""
    return _verdict(exercise, prop, False, f"✗ {exercise.grade_id(prop.id)}: not judged, so no points yet: "
                    + "; ".join(reasons) + "." + fix, judged=False, blocked_by=first, causes=unseen)


def _failed_at_the_root(exercise, report: CheckReport, waits_on: list[str], seen: set[str]) -> list[str]:
    """The properties to fix first: each one waited on that failed on evidence, and in place of one that is itself
    only not judged, what that one waits on. A student told to fix a test that says "not judged" would have to
    follow the chain; the message names its end."""
    first = []
    for property_id in waits_on:
        if property_id in seen:
            continue
        seen.add(property_id)
        verdict = judge(exercise.id, property_id, report)
        below = [p.id for p in exercise.properties if exercise.grade_id(p.id) in verdict.blocked_by]
        first += (None if verdict.judged else _failed_at_the_root(exercise, report, below, seen)) or [property_id]
    return list(dict.fromkeys(first))


def verdicts(exercise_id: str, report: CheckReport) -> dict[str, Verdict]:
    """Every property of the exercise: property id -> its :class:`Verdict`."""
    return {p.id: judge(exercise_id, p.id, report) for p in exercises.get(exercise_id).properties}


def assert_property(exercise_id: str, property_id: str, *fns) -> None:
    """The visible part of a graded property cell: judge one property of ``fns`` (one check run shared by the
    exercise's cells), print the verdict, raise AssertionError when it fails.

    It runs under the grader too (one memoised run per exercise, as the single graded cell did before): a function
    that hangs, exits or has the wrong signature then fails right there with its own message, and the grader's
    re-check outside the kernel (authoritative) re-judges only the cells that passed."""
    exercises.get(exercise_id).property(property_id)  # an unknown property fails loudly
    report = report_for(exercise_id, fns)
    try:
        verdict = judge(exercise_id, property_id, report)
    except Exception as exc:  # not a CheckReport: the notebook replaced labutils.checks
        if exercises.graded_outside():
            print("judged by the grader outside this notebook")  # on pristine modules: the patch gains nothing
            return
        raise AssertionError(f"the check returned {type(report).__name__}, not a CheckReport ({exc}): was "
                             "labutils.checks replaced in this notebook? Restart the kernel and run all.") from None
    if not verdict.passed:
        raise AssertionError(verdict.message)  # the student's text; the grader judges again outside the kernel
    print(verdict.message)
