"""The observer -> judge protocol of the grader's recheck (:mod:`labutils.checks.evidence`): the messages, each a
declared dataclass. Per hidden test a :class:`CheckBegin`, then an :class:`AfterCall` per call of a student function
(its :class:`CallRecord`, with :class:`~labutils.checks.error_facts.ErrorFacts` when it raised), then a
:class:`CheckEnd`. They cross as :mod:`labutils.checks.wire` writes them and come back as the same dataclasses, their
fields checked against their declared types.
"""

from __future__ import annotations

from dataclasses import dataclass

from .error_facts import ErrorFacts


class EvidenceError(Exception):
    """The observer's record cannot be read, or does not belong to the call the judge is at."""


@dataclass
class CallRecord:
    """What one call of a student's function did: :class:`labutils.checks.calling.TracedCall` as data."""

    events: list  # the trace (labutils.trace.Event), tensors included
    result: object  # what it returned, as the value codec carries it (an Opaque for a student's own object)
    reference: str | None  # the lab function it handed its work to, if any
    crashed: bool  # the check's SimulatedCrash came out, as intended
    moves: list  # the devices (torch.device) its code moved tensors to
    error: ErrorFacts | None


@dataclass
class AfterCall:
    """Sent after each call: the call, and what it left in everything it was handed."""

    run: CallRecord
    args: list  # per positional argument, its state (state.state_of; None: nothing a call can change)
    kwargs: dict  # the same per keyword argument (the check's callbacks)
    rng: dict  # the process's random streams (rng.rng_state)
    folders: list  # per scratch folder of the check, its files (state.folder_files; None: over 64 MB)


@dataclass
class CheckBegin:
    """Sent before each hidden test's check: the student's functions as the judge stands them in, or why not."""

    call: list[str]  # the literal arguments of the test's verify(...) call: notebook, function, property
    problem: str | None  # why the functions cannot be checked (not defined, not callable): the test fails so
    fresh: bool  # the check runs now (False: a report of the same functions already judges it)
    functions: list  # per contract function, [name, its signature as [name, kind, has a default] per parameter]


@dataclass
class CheckEnd:
    """Sent after each hidden test's check, however it ended."""

    call: list[str]
    tampered: list[str]  # the guarded functions the check saw patched (the test fails)
    error: str | None  # what stopped the check (a sys.exit in the student's function, a cell's alarm)


RECORDS = {cls.__name__: cls for cls in (CheckBegin, AfterCall, CheckEnd)}
