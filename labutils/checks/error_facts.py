"""What a student's function raised, as facts: the type, the line of their function it was raised at, that line's
code and the first line of its text, never the exception object.

Why facts: a message needs no more, and under the grader's recheck the exception is raised in the observer, a process
that runs student code, while the judge writes the message: only these facts cross (:mod:`labutils.checks.records`),
and :class:`ObservedError` carries them on the judge's side where the check expects an exception.
"""

from __future__ import annotations

import inspect
import linecache
from dataclasses import dataclass

from ..quoting import capped


@dataclass
class ErrorFacts:
    """An exception a student's function raised, as the judge may know it: the facts a message needs, never the
    object (capped: :func:`labutils.quoting.capped`)."""

    type: str  # its class name
    line: int | None  # the line of the student's function it was raised at, counted from the ``def`` (1)
    source: str  # that line's code
    text: str  # the first line of its message


def error_facts(fn, exc: BaseException) -> ErrorFacts:
    """Where the student's code raised ``exc`` (the line in their function, not torch's) and what it said."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    line, tb = None, exc.__traceback__
    while tb is not None:
        if code is not None and tb.tb_frame.f_code.co_filename == code.co_filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    source = linecache.getline(code.co_filename, line).strip() if line is not None else ""
    return ErrorFacts(type=capped(type(exc).__name__, 100),
                      line=None if line is None else line - code.co_firstlineno + 1, source=capped(source),
                      text=capped((exception_text(exc).strip().splitlines() or [""])[0]))


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or what it raised instead: a student's ``__str__`` may itself raise."""
    try:
        return str(exc)
    except Exception as inner:
        return f"(its text could not be read: {type(inner).__name__})"


class ObservedError(Exception):
    """An exception the student's function raised in the grader's observer process, as the judge knows it: the
    facts a message needs (type, line, source, text), never the object."""

    def __init__(self, facts: ErrorFacts):
        super().__init__(facts.text)
        self.facts = facts
