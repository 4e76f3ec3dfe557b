"""What a check says: a :class:`CheckReport` of :class:`Failure` s, stages that depend on each other, and the
student's trace printed beside the expected order.
"""

from __future__ import annotations

import itertools
import textwrap
from dataclasses import dataclass, field

from ..trace import Event, format_events


@dataclass
class Failure:
    """One failed check: a short stable id (``"zero_grad"``), the optimizer step (or None) and a message for a
    student; ``details`` holds their trace beside the expected order when the order matters."""

    check: str
    message: str
    step: int | None = None
    details: str = ""

    def __str__(self) -> str:
        text = f"[{self.check}] {self.message}"
        return text + ("\n" + textwrap.indent(self.details, "    ") if self.details else "")


@dataclass
class CheckReport:
    """The verdict on one graded function. ``passed``, ``failures``, the ``trace`` of the (main) run, and the checks
    that were ``skipped`` because one they depend on failed."""

    name: str
    checks: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    trace: list[Event] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        if self.passed:
            return f"✓ {self.name} passed all {len(self.checks)} checks ({', '.join(self.checks)})"
        failed = list(dict.fromkeys(f.check for f in self.failures))
        lines = [f"✗ {self.name} failed: {', '.join(failed)}", ""]
        lines += [str(f) + "\n" for f in self.failures]
        if self.skipped:
            lines.append(f"Not checked until that is fixed: {', '.join(self.skipped)}.")
        return "\n".join(lines).rstrip()

    def __repr__(self) -> str:
        return str(self)  # a check cell ending in check_...(fn) shows the verdict, not a dataclass dump

    def assert_passed(self) -> "CheckReport":
        if not self.passed:
            raise AssertionError(str(self))
        return self


def _run_stages(report: CheckReport, stages, ctx, applicable) -> None:
    """Run ``(name, fn, deps)`` stages in order; a stage whose dependency failed (or could not run) is skipped.

    ``fn(ctx)`` returns a list of failures ([] = passed) or None when it cannot judge (e.g. the run crashed first).
    """
    blocked: set[str] = set()
    for name, fn, deps in stages:
        if name not in applicable:
            continue
        if blocked & set(deps):
            blocked.add(name)
            report.skipped.append(name)
            continue
        failures = fn(ctx)
        if failures is None or failures:
            blocked.add(name)
            report.failures += failures or []


def _beside(events, lo: int, hi: int, expected: list[str], mark: int | None, title: str, limit: int = 16) -> str:
    """The student's numbered events next to the expected order, the offending event marked with <--."""
    if hi - lo > limit:  # long windows (accumulation): keep the part around the offending event
        lo = hi - limit if mark is None else max(lo, min(mark - limit // 2, hi - limit))
        hi = lo + limit
    left = [line + ("  <--" if n == mark else "") for n, line in zip(range(lo, hi), format_events(events, lo, hi))]
    width = min(max(len(s) for s in left + [title]) + 3, 78)
    rows = [f"{title:<{width}}expected order"]
    rows += [f"{a[:width - 1]:<{width}}{b}" for a, b in itertools.zip_longest(left, expected, fillvalue="")]
    return "\n".join(rows)
