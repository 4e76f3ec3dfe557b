"""Calling the student's function: check its signature, run it under a tracer, and turn what went wrong into words.

A student's exception is never re-raised: it becomes a :class:`Failure` that points at the line in their code. A check
leaves the caller as it found it (RNG streams, thread count, grad mode, warnings filters).

Every exercise's check (one module each) follows the same skeleton, written here once:

    report = new_report("evaluate", stages, fn)     # named from the registry; the contract's signatures checked
    if report.failures:                             # it cannot be called as the contract calls it
        return report
    with isolated():
        run = traced_call(fn, args, Tracer(...))    # the runner: what the call did, never its exception
    judge_call(report, "evaluate", fn, run, STAGES, view, stages)   # or call_failure() where there are no stages
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import random
import sysconfig
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..quoting import capped
from ..trace import OWN_CODE, Event, ReferenceCalled, TooManyEvents, Tracer
from . import evidence
from .error_facts import ObservedError, error_facts, exception_text
from .records import CallRecord, EvidenceError
from .report import CheckReport, Failure, run_stages
from .. import exercises


class SimulatedCrash(BaseException):
    """What check_resume's ``on_step`` raises to stop a run mid-epoch (a BaseException: ``except Exception`` in the
    student's loop must not swallow the crash)."""


@dataclass
class TracedCall:
    """What one call of a graded function did."""

    events: list[Event]
    result: object = None
    error: BaseException | None = None
    reference: str | None = None  # the lab function it handed its work to, if any
    crashed: bool = False  # our SimulatedCrash came out, as intended
    moves: list = field(default_factory=list)  # devices its code moved tensors to (a Tracer with devices=True)

    @property
    def complete(self) -> bool:
        return self.error is None and self.reference is None and not self.crashed

    @classmethod
    def from_record(cls, record: CallRecord, tracer: Tracer) -> "TracedCall":
        """The judge's TracedCall of a call, from the observer's record (its declared fields are checked as it is
        decoded; the trace and the moves, values of the value codec, here)."""
        if not all(isinstance(e, Event) for e in record.events) or \
                not all(isinstance(m, torch.device) for m in record.moves):
            raise EvidenceError("a call's record does not describe a run")
        tracer.events[:] = record.events
        tracer.moves[:] = record.moves
        error = None if record.error is None else ObservedError(record.error)
        return cls(tracer.events, result=record.result, error=error, reference=record.reference,
                   crashed=record.crashed, moves=tracer.moves)


def traced_call(fn, args, tracer: Tracer, kwargs=None, result=None) -> TracedCall:
    """Call ``fn`` under ``tracer``; ``result(value)``, when given, reads what the call returned into plain data
    right away (a generator the student returned is read here, once, where their code may run: the grader's judge
    sees only its record, never the generator). Calls that must run in a process of their own, so that nothing they
    keep in memory reaches the calls judged after them: :func:`labutils.checks.apart.traced_calls`."""
    kwargs = kwargs or {}
    role = evidence.ROLE
    if isinstance(role, evidence.Judge):  # the grader's judge: the observer made this call, its record stands in
        return TracedCall.from_record(role.record(args, kwargs), tracer)
    run = TracedCall(tracer.events, moves=tracer.moves)
    with tracer:
        try:
            run.result = fn(*args, **kwargs)
            if result is not None:
                run.result = result(run.result)
        except ReferenceCalled as exc:
            run.reference = exc.name
        except SimulatedCrash:
            run.crashed = True
        except (Exception, TooManyEvents) as exc:  # the student's bug: reported as a failure, never re-raised
            run.error = exc
    if run.reference is None:
        run.reference = next((e.info["name"] for e in run.events if e.kind == "reference"), None)
    if isinstance(role, evidence.Observer):
        role.after_call(CallRecord(events=run.events, result=run.result, reference=run.reference, crashed=run.crashed,
                                   moves=run.moves, error=None if run.error is None else error_facts(fn, run.error)),
                        args, kwargs)
    return run


# --- a check that fails inside itself ---------------------------------------------------------------------------------

_PYTHON = tuple(dict.fromkeys(os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "purelib", "platlib")))


def could_not_check(what: str):
    """Decorate a check: an exception raised by the check's own code is a bug of the check, never the student's
    failure. The check returns a report that says it "could not check" ``what`` (every property of it then earns 0
    points as *not judged*, with that message), naming the student's line when one of theirs was running, and the
    check's own place for the instructor. The student's exceptions never come here (traced_call keeps them), nor
    the grader judge's :class:`~labutils.checks.records.EvidenceError` (the recheck says what did not fit), nor an
    interrupt."""

    def decorate(check):
        @functools.wraps(check)
        def guarded(*args, **kwargs):
            try:
                return check(*args, **kwargs)
            except EvidenceError:
                raise
            except Exception as exc:  # noqa: BLE001: whatever it is, it is the check's
                return CheckReport(f"{what} ({check.__name__})", broken=broken_message(what, exc))

        return guarded

    return decorate


def broken_message(what: str, exc: BaseException) -> str:
    """"could not check train_one_epoch: the check failed inside itself (ZeroDivisionError at
    labutils/checks/train_run.py:151) while your line 9 (`...`) ran. ..." """
    check_at, student_at = None, None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.startswith(OWN_CODE):
            if os.sep + "labutils" + os.sep in code.co_filename:
                check_at = f"labutils{code.co_filename.rpartition(os.sep + 'labutils')[2]}:{tb.tb_lineno}"
        elif not code.co_filename.startswith(_PYTHON):
            line = linecache.getline(code.co_filename, tb.tb_lineno).strip()
            student_at = f"line {tb.tb_lineno - code.co_firstlineno + 1} of {code.co_name}" + (
                f" (`{capped(line, 200)}`)" if line else "")
        tb = tb.tb_next
    where = f" at {check_at}" if check_at else ""
    text = capped((exception_text(exc).strip().splitlines() or [""])[0], 200)
    running = f", while your code ran {student_at}" if student_at else ", while none of your code was running"
    return (f"could not check {what}: the check failed inside itself ({type(exc).__name__}{where}: {text}){running}. "
            "That is a bug of the check, not a mistake it found in your code; until it is fixed it cannot judge "
            "this, so it earns no points: tell your instructor.")


@contextmanager
def scratch():
    """A temporary folder for a check's files; under the grader's recheck, one the observer and judge keep alike."""
    with tempfile.TemporaryDirectory() as tmp:
        if evidence.ROLE is None:
            yield Path(tmp)
        else:
            with evidence.ROLE.folder(Path(tmp)) as folder:
                yield folder


@contextmanager
def isolated():
    """Checks leave the caller as they found it: RNG streams, thread count, grad mode and warnings filters."""
    py_state, np_state, threads = random.getstate(), np.random.get_state(), torch.get_num_threads()
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), torch.inference_mode(False), \
            torch.enable_grad():
        warnings.simplefilter("ignore")  # e.g. "lr_scheduler.step() before optimizer.step()": we say it better
        torch.set_num_threads(1)  # tiny tensors: threads only add overhead, and stall badly on a busy machine
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            random.setstate(py_state)
            np.random.set_state(np_state)


def exception_failure(name: str, fn, exc: BaseException, when: str = "") -> Failure:
    """'train_one_epoch raised KeyError at line 7 (`...`): ...' pointing into the student's code, not torch's."""
    facts = exc.facts if isinstance(exc, ObservedError) else error_facts(fn, exc)
    where = ""
    if facts.line is not None:
        where = f" at line {facts.line} of {name}" + (f" (`{facts.source}`)" if facts.source else "")
    return Failure("exception", f"{name}{when} raised {facts.type}{where}: {facts.text}")


def reference_failure(name: str, reference: str) -> Failure:
    return Failure("uses_reference", f"{name} called {reference}, the lab's own reference implementation: the "
                   f"exercise is to write this part yourself. Replace the call with your own code.")


def check_signature(report: CheckReport, fn, exercise: str, name: str | None = None) -> bool:
    """Can ``fn`` be called the way the contract calls it? Says which parameter is missing when it cannot."""
    contract = exercises.function(exercise, name)
    name, params, keywords, wanted = contract.name, contract.params, contract.keywords, contract.call
    if not callable(fn):
        kind = capped(type(fn).__name__, 100)
        report.failures.append(Failure("signature", f"{name} is a {kind}, not a function: define "
                                                    f"def {wanted}:"))
        return False
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # a builtin or C function: just call it
    theirs = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    try:
        sig.bind(*params, **{k: None for k in keywords})
    except TypeError:
        missing = [p for p in params + tuple(keywords) if p not in sig.parameters]
        if not missing or len(missing) == len(params + tuple(keywords)):
            missing = list(params[len(theirs):]) or list(keywords)
        what = f"is missing {', '.join(missing)}" if missing else "takes different parameters"
        report.failures.append(Failure("signature", f"{name}({', '.join(sig.parameters)}) {what}: the "
                                                    f"{exercises.get(exercise).notebook} contract is {wanted}. Use "
                                                    "that exact parameter list, in that order."))
        return False
    if sorted(theirs[: len(params)]) == sorted(params) and theirs[: len(params)] != list(params):
        report.failures.append(Failure("signature", f"{name}({', '.join(theirs)}) has the contract's parameters in "
                                                    f"a different order: callers pass them as {wanted}."))
        return False
    return True


def new_report(exercise: str, checks: list[str], *fns, where: str | None = None) -> CheckReport:
    """The report of ``exercise``'s check, named after its functions and notebook (``where`` instead: a loop another
    notebook reuses), judging ``signature`` and ``uses_reference`` before ``checks``; each of ``fns`` (the contract's
    functions, in the registry's order) is checked to be callable as the contract calls it, so a report that already
    has failures is one whose functions cannot be called."""
    exercise_ = exercises.get(exercise)
    report = CheckReport(f"{' / '.join(f.name for f in exercise_.functions)} ({where or exercise_.notebook})",
                         ["signature", "uses_reference", *checks])
    for fn, function in zip(fns, exercise_.functions):
        check_signature(report, fn, exercise, function.name)
    return report


def call_failure(name: str, fn, run: TracedCall, when: str = "") -> Failure | None:
    """Why nothing ``run`` did can be judged, or None: it handed its work to the lab's reference, or it raised."""
    if run.reference is not None:
        return reference_failure(name, run.reference)
    return None if run.error is None else exception_failure(name, fn, run.error, when)


def judge_call(report: CheckReport, name: str, fn, run: TracedCall | list[tuple[TracedCall, str]], stages, ctx,
               applicable, then=None) -> None:
    """Judge ``stages`` on ``ctx`` (what the call ``run`` did), unless it handed its work to the lab's reference;
    ``then(report)``: what else is judged before the exception is weighed (a run with other arguments). The exception
    it raised is its failure only when nothing was found: otherwise the root cause was in what ran before the crash,
    and the crash is said as its consequence.

    ``run`` may also be several calls the stages judge together, ``[(call, when), ...]`` in the order they ran (lab
    7's runs): the first that handed its work to the reference is said alone, and the first exception, with its
    ``when``, only when nothing was found (which finding it would follow is not known)."""
    runs = run if isinstance(run, list) else [(run, "")]
    handed = next((call for call, _ in runs if call.reference is not None), None)
    if handed is not None:
        report.failures.append(reference_failure(name, handed.reference))
        return
    before = len(report.failures)
    run_stages(report, stages, ctx, applicable)
    if then is not None:
        then(report)
    raised, when = next(((call, when) for call, when in runs if call.error is not None), (None, ""))
    if raised is None:
        return
    error = exception_failure(name, fn, raised.error, when)
    if len(report.failures) == before:
        report.failures.append(error)
    elif not isinstance(run, list):
        report.failures[before].details += f"\n(after this, {error.message[0].lower()}{error.message[1:]})"

