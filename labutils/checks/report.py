"""What a check says: a :class:`CheckReport` of :class:`Failure` s, stages that depend on each other, and the
student's trace printed beside the expected order.
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
import textwrap
from dataclasses import dataclass, field

import torch

from ..quoting import capped
from ..trace import Event, format_events

MESSAGE_CHARS = 4_000  # a whole message (the longest the checks write is ~600 characters); details: ten times that


@dataclass
class Failure:
    """One failed check: a short stable id (``"zero_grad"``), the optimizer step (or None) and a message for a
    student; ``details`` holds their trace beside the expected order when the order matters."""

    check: str
    message: str
    step: int | None = None
    details: str = ""

    def __post_init__(self) -> None:
        self.message = capped(self.message, MESSAGE_CHARS)  # the last cap: whatever a message quotes, it is bounded
        self.details = capped(self.details, 10 * MESSAGE_CHARS)

    def __str__(self) -> str:
        text = f"[{self.check}] {self.message}"
        return text + ("\n" + textwrap.indent(self.details, "    ") if self.details else "")


class NotJudged(str):
    """What a check returns when the run gave it nothing to judge (no step, no forward, no file): the reason, for the
    student. It is not a pass: a property earns its points only on evidence its check saw (``CheckReport.judged``).
    ``needs``: the checks whose mistake left it nothing to judge, as data (the words are only for the student)."""

    needs: tuple[str, ...] = ()

    def __new__(cls, reason: str = "", needs=()):
        self = super().__new__(cls, reason)
        self.needs = tuple(needs)
        return self


@dataclass
class CheckReport:
    """The verdict on one graded function. ``passed``, ``failures``, the ``trace`` of the (main) run, the checks
    that were ``skipped`` because one they depend on failed, the root checks behind each of those (``blocked``: check ->
    the checks to fix first, as data), the checks that saw evidence and found it right (``judged``), and why each
    other check was not judged (``unjudged``: check -> reason, words for the student)."""

    name: str
    checks: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    trace: list[Event] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    judged: list[str] = field(default_factory=list)
    unjudged: dict[str, str] = field(default_factory=dict)
    blocked: dict[str, list[str]] = field(default_factory=dict)
    broken: str | None = None  # the check failed inside itself (a bug of the check): what it could not do, and why
    later: dict | None = field(default=None, repr=False, compare=False)  # inside later_run: what it did not show

    @property
    def passed(self) -> bool:
        return not self.failures and not self.unjudged and self.broken is None

    def judge(self, check: str, failures: list[Failure] | NotJudged | None) -> bool:
        """Record one check's outcome: its failures, [] when it saw evidence and found it right, or a
        :class:`NotJudged` reason. True when it passed on evidence."""
        if isinstance(failures, str) or failures is None:
            if check in self.judged:  # an earlier run's evidence, and a later run shows nothing of it: later_run
                if self.later is not None:  # decides once the later run is over
                    self.later.setdefault(check, failures or "nothing it needs was observed")
                return False
            self.unjudged.setdefault(check, failures or "nothing it needs was observed")
            if getattr(failures, "needs", ()):
                self.blocked.setdefault(check, list(failures.needs))
            return False
        if failures:
            self.failures += failures
            if all(f.check != check for f in failures) and check not in self.judged:
                self.judged.append(check)  # it looked, and the mistake it found is another property's
            return False
        if check not in self.judged:
            self.judged.append(check)
        return True

    def passed_on_evidence(self, check: str) -> bool:
        return check in self.judged and check not in self.unjudged and all(f.check != check for f in self.failures)

    def __str__(self) -> str:
        if self.broken is not None:
            return f"✗ {self.name}: {self.broken}"
        if self.passed:
            return f"✓ {self.name} passed all {len(self.checks)} checks ({', '.join(self.checks)})"
        failed = list(dict.fromkeys(f.check for f in self.failures))
        lines = [f"✗ {self.name} failed: {', '.join(failed)}", ""] if failed else [f"✗ {self.name}: not judged", ""]
        lines += [str(f) + "\n" for f in self.failures]
        not_seen = {c: why for c, why in self.unjudged.items() if c not in self.skipped}
        lines += [f"[{c}] not judged: {why}" for c, why in not_seen.items()]
        if self.skipped:
            lines.append(f"Not checked until that is fixed: {', '.join(self.skipped)}.")
        return "\n".join(lines).rstrip()

    def __repr__(self) -> str:
        return str(self)  # a check cell ending in check_...(fn) shows the verdict, not a dataclass dump

    def assert_passed(self) -> "CheckReport":
        if not self.passed:
            raise AssertionError(str(self))
        return self


def run_stages(report: CheckReport, stages, ctx, applicable) -> None:
    """Run ``(name, fn, deps)`` stages in order; a stage whose dependency failed (or could not be judged) is skipped,
    and not judged: the root stages to fix first are kept in ``report.blocked`` (its reason names them, for people).

    ``fn(ctx)`` returns a list of failures ([] = passed on what it saw) or a :class:`NotJudged` reason (None: no
    reason given) when the run gave it nothing to judge.
    """
    roots: dict[str, list[str]] = {}  # a stage that did not pass -> the root stages behind it
    for name, fn, deps in stages:
        if name not in applicable:
            continue
        behind = list(dict.fromkeys(r for d in deps if d in roots for r in roots[d]))
        if behind:
            roots[name] = behind
            if name not in report.skipped:  # a second run (the varied arguments) skips it again
                report.skipped.append(name)
            report.judge(name, NotJudged(f"needs {', '.join(behind)} right first", needs=behind))
            continue
        if not report.judge(name, fn(ctx)) and not report.passed_on_evidence(name):
            roots[name] = [name]  # a mistake it found that another property owns does not block what follows


def beside(events, lo: int, hi: int, expected: list[str], mark: int | None, title: str, limit: int = 16) -> str:
    """The student's numbered events next to the expected order, the offending event marked with <--."""
    if hi - lo > limit:  # long windows (accumulation): keep the part around the offending event
        lo = hi - limit if mark is None else max(lo, min(mark - limit // 2, hi - limit))
        hi = lo + limit
    left = [line + ("  <--" if n == mark else "") for n, line in zip(range(lo, hi), format_events(events, lo, hi))]
    width = min(max(len(s) for s in left + [title]) + 3, 78)
    rows = [f"{title:<{width}}expected order"]
    rows += [f"{a[:width - 1]:<{width}}{b}" for a, b in itertools.zip_longest(left, expected, fillvalue="")]
    return "\n".join(rows)


def shown(value) -> str:
    """An argument as a student would write it: ``torch.device('cpu:0')``, not torch's ``device(type='cpu', ...)``."""
    return f"torch.device({str(value)!r})" if isinstance(value, torch.device) else repr(value)


def number_problem(value, what: str) -> str | None:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        return (f"{what} is a tensor: return a Python float with .item() (a tensor that requires grad also keeps "
                f"every batch's graph alive)")
    return f"{what} is {described(value)}, not a number"


def described(value) -> str:
    """A returned value as a student recognises it: small values as they are, big ones by their type."""
    if value is None or isinstance(value, (bool, numbers.Number, str)):
        return repr(value)[:60]
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)) and len(value) <= 3 and all(isinstance(v, numbers.Number) for v in value):
        return repr(value)
    return f"a {capped(type(value).__name__, 100)}" + (f" of length {len(value)}" if isinstance(value, (tuple, list))
                                                         else "")


def given(values: dict) -> str:
    """How a failure of the run with varied arguments begins: "with epochs=3, device=torch.device('cpu:0'), "."""
    return "with " + ", ".join(f"{name}={shown(value)}" for name, value in values.items()) + ", "


@contextlib.contextmanager
def later_run(report: CheckReport, words: str = ""):
    """A later run of the same check (the varied arguments, another size): what ``report`` gains inside begins with
    ``words``, and a mistake the report already holds (the same id) is not said again: one mistake, said once."""
    before, seen = len(report.failures), set(report.unjudged)
    known = {f.check for f in report.failures}
    outer, report.later = report.later, {}
    try:
        yield
    finally:
        missing, report.later = report.later, outer
    # every call's evidence is judged: a later run that shows nothing of what an earlier one passed on takes that
    # pass back (a function that works once, then does nothing), unless it repeated a mistake already found, which
    # is what hid the evidence (a window of the wrong size has no clean step to judge the gradient on)
    if not any(f.check in known for f in report.failures[before:]):
        for check, why in missing.items():
            report.unjudged.setdefault(check, why)
    report.failures[before:] = [f for f in report.failures[before:] if f.check not in known]
    for failure in report.failures[before:]:
        failure.message = words + failure.message
    for check in set(report.unjudged) - seen:
        report.unjudged[check] = words + report.unjudged[check]


@contextlib.contextmanager
def as_given(report: CheckReport, values: dict):
    """The outcomes ``report`` gains inside are said as of the run with these argument ``values`` (the second run
    every check makes with the registry's varied arguments, whatever the first showed): :func:`later_run`; yields the
    words they begin with."""
    words = given(values)
    with later_run(report, words):
        yield words
