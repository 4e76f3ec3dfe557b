"""Observe in one process, judge in another: what a check saw of a student's run, as data that cannot run code.

Why: under the grader, a hidden test must not be judged in a process that runs student code, since such code can
read anything there (the check's state, the result channel) and write a verdict of its own. So the grader's recheck
(:mod:`autograder.hidden.recheck`) runs every check twice, in lockstep:

- the **observer**, where the notebook's cells ran, calls the student's function as usual; after each call
  (:func:`labutils.checks.calling.traced_call`) it sends what the call left behind: the traced events, the return value,
  the error, the state of every object it was handed (model, optimizer, scheduler, scaler, the check's callbacks)
  and the files in the check's scratch folders;
- the **judge**, a process no student code ever ran in, runs the very same check on the same seeded objects, but in
  place of each call it takes the observer's record, puts it into its own objects and folders, and goes on with its
  own analysis: PyTorch's reference gradients, the comparisons, the verdict.

A forger in the observer can only send records; the judge recomputes everything from them, so forged evidence must
be the evidence of a correct loop (a loop's numbers, step by step), not a "passed".

This module is the two roles and the one current role (:data:`ROLE`, set by :func:`playing`). What they exchange is
declared in :mod:`labutils.checks.records` and written by :mod:`labutils.checks.wire` (the value codec, framing on a
pipe); what a call left behind is read and put back by :mod:`labutils.checks.state` (objects, folders) and
:mod:`labutils.checks.rng` (the random streams); an exception crosses as :mod:`labutils.checks.error_facts`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from .records import AfterCall, CallRecord, CheckBegin, CheckEnd, EvidenceError
from .rng import rng_state, set_rng_state
from .state import folder_files, make_folder_match, parameter_refs, restore_state, state_of
from .wire import decode, encode, receive, send


class ObserverStopped(EvidenceError):
    """The observer exited (a cell or the student's function exited or crashed) before sending what the judge needs."""


CONSTANTS: dict[str, object] = {}  # a check's sentinel objects by name (resumable's NO_LOSS): they travel as names


class Role:
    """What :func:`labutils.checks.calling.traced_call` does around a call under the grader's recheck; else None."""

    def __init__(self, fd: int):
        self.fd = fd
        self.folders: list[Path] = []  # the check's scratch folders alive now, in the order they were made

    def paths(self) -> dict[str, str]:
        """Folder paths and the tokens that stand for them in records (the two processes' folders differ)."""
        return {str(f): f"\x00folder{i}\x00" for i, f in enumerate(self.folders)}

    @contextlib.contextmanager
    def folder(self, path: Path):
        self.folders.append(path)
        try:
            yield path
        finally:
            self.folders.remove(path)


class Observer(Role):
    """In the process that runs student code: send a record of each call."""

    def after_call(self, run: CallRecord, args: tuple, kwargs: dict) -> None:
        record = AfterCall(run=run, args=[state_of(a) for a in args], rng=rng_state(),
                           kwargs={k: state_of(v) for k, v in kwargs.items()},
                           folders=[folder_files(f) for f in self.folders])
        send(self.fd, encode(record, {id(t): list(ref) for ref, t in parameter_refs(args).items()}, self.paths(),
                             CONSTANTS))

    def message(self, record: CheckBegin | CheckEnd) -> None:
        send(self.fd, encode(record))


class Judge(Role):
    """In the process that judges: take each call's record in place of the call. ``observer``: its pidfd, so that
    its end is seen even while a process it forked holds the pipe open."""

    def __init__(self, fd: int, observer: int | None = None):
        super().__init__(fd)
        self.observer = observer
        self.pending: bytes | None = None  # a message read ahead of its turn: the end of a check, kept for it

    def _next(self) -> bytes | None:
        data, self.pending = self.pending, None
        return data if data is not None else receive(self.fd, self.observer)

    def record(self, args: tuple, kwargs: dict) -> CallRecord:
        data = self._next()
        if data is None:
            raise ObserverStopped("the observer stopped before this call")
        try:
            return replay(data, args, kwargs, self.folders)
        except _CheckEnded:  # its check ended before this call: the end is for later
            self.pending = data
            raise EvidenceError("the observer's check ended before this call") from None

    def message(self) -> CheckBegin | CheckEnd | None:
        """The next begin or end of a check (None: the observer stopped); a call's record here is an error."""
        data = self._next()
        record = None if data is None else decode(data)
        if record is not None and not isinstance(record, (CheckBegin, CheckEnd)):
            raise EvidenceError("the observer sent something other than the begin or end of a check here")
        return record


class _CheckEnded(EvidenceError):
    """A check's end where a call's record was due."""


def replay(data: bytes, args: tuple, kwargs: dict, folders: list, match_folders: bool = True) -> CallRecord:
    """The call whose record ``data`` is (:meth:`Observer.after_call`'s, made in another process), put into this
    process's own ``args``, ``kwargs``, random streams and scratch ``folders`` (those a process forked from this
    one already shares: ``match_folders`` False); its :class:`CallRecord`."""
    tokens = {f"\x00folder{i}\x00": str(f) for i, f in enumerate(folders)}
    items = decode(data, parameter_refs(args), tokens, CONSTANTS)
    if isinstance(items, CheckEnd):
        raise _CheckEnded("a check's end")
    if not isinstance(items, AfterCall):
        raise EvidenceError("the observer sent something other than a call's record here")
    if len(items.args) != len(args) or set(items.kwargs) != set(kwargs) or len(items.folders) != len(folders):
        raise EvidenceError("the observer's call was not this one")
    for value, state in [*zip(args, items.args), *((kwargs[k], s) for k, s in items.kwargs.items())]:
        try:
            restore_state(value, state)
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as exc:
            raise EvidenceError(f"the state of a {type(value).__name__} after the call: {exc}") from None
    try:
        set_rng_state(items.rng)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise EvidenceError(f"the random state after the call: {exc}") from None
    for folder, files in zip(folders, items.folders):
        if not isinstance(files, dict):
            raise EvidenceError("the run left more than 64 MB in its folder")
        if match_folders:
            make_folder_match(folder, files)
    return items.run


ROLE: Role | None = None


@contextlib.contextmanager
def playing(role: Role):
    """Calls made inside are observed (:class:`Observer`) or replayed (:class:`Judge`)."""
    global ROLE
    ROLE = role
    try:
        yield role
    finally:
        ROLE = None
