"""Calls made in a process of their own: a child forked for them, whose records (:mod:`labutils.checks.evidence`)
come back to the check, which goes on from what the calls left in the objects they were handed and on disk.

Why: a check that saves with the student's ``save_checkpoint`` and then loads with their ``load_checkpoint`` in the
same process cannot tell a load that read the file from one that restored what the save kept in a module's memory;
nor can a check of lab 7 tell a resumed run that trained from one that copied in the state the uninterrupted run
left in a global. A call made apart keeps nothing of the kind: the next call runs in a process where it never ran.

Under the grader's recheck the child's records are also what the observer sends the judge (the same bytes), so the
judge replays the calls as it replays any other. Where a fork is not safe (no ``os.fork``; macOS, whose system
libraries refuse to run in a forked child; CUDA already initialised, which a forked child cannot use) the calls are
made in this process, as before: a notebook on such a machine is judged with that weaker evidence. So is a kernel the
grader runs, whose own run of a check can only take a point away (a property that passes there is judged again by the
grader's recheck, a Linux process that never touches CUDA, which makes every call apart).
"""

from __future__ import annotations

import gc
import io
import os
import random
import signal
import sys

import torch

from .. import exercises
from . import evidence
from .calling import TracedCall, traced_call
from .error_facts import ErrorFacts, ObservedError
from .records import CallRecord
from .rng import set_rng_state
from .wire import receive, send


def possible() -> bool:
    """Whether calls are made in a forked child here: where a fork is safe, except in a kernel the grader runs (a
    property that passes there is judged again by its recheck, which makes them apart: a fork there buys nothing)."""
    if evidence.ROLE is None and exercises.graded_outside():
        return False
    return hasattr(os, "fork") and sys.platform.startswith("linux") and not torch.cuda.is_initialized()


def traced_calls(calls: list[tuple], apart: bool = False, rng: list | None = None) -> list[TracedCall]:
    """Each of ``calls`` (``(fn, args, tracer, kwargs, result)``, as :func:`labutils.checks.calling.traced_call`
    takes them), one after another; ``apart``: all of them in one process of their own where :func:`possible`, so
    nothing they keep in memory reaches the calls judged after them. ``rng``: the random streams each call starts
    from (:func:`labutils.checks.rng.rng_state`; None: as they are). The grader's judge replays them in order, as any
    calls (a record carries the streams a call left)."""
    starts = rng or [None] * len(calls)
    if isinstance(evidence.ROLE, evidence.Judge):
        return [traced_call(fn, args, tracer, kwargs, result=result) for fn, args, tracer, kwargs, result in calls]
    if apart and possible():
        return _calls_apart(calls, starts)
    runs = []
    for (fn, args, tracer, kwargs, result), start in zip(calls, starts):
        if start is not None:
            set_rng_state(start)
        runs.append(traced_call(fn, args, tracer, kwargs, result=result))
    return runs


def _calls_apart(calls: list[tuple], starts: list) -> list[TracedCall]:
    """Each of ``calls`` (``(fn, args, tracer, kwargs, result)``, as :func:`labutils.checks.calling.traced_call`
    takes them), one after another in one forked child; the :class:`TracedCall` each made, with its effects on its
    ``args``, ``kwargs`` and the random streams put into this process's own objects; ``starts``: the random streams
    each call starts from (None: as the last one left them). One child for all of them: a fork of a process holding
    torch costs more than most calls."""
    calls = [(fn, args, tracer, kwargs or {}, result) for fn, args, tracer, kwargs, result in calls]
    role = evidence.ROLE
    folders = list(role.folders) if role is not None else []
    records, record_w = os.pipe()
    python_random = random.getstate()  # Python reseeds its generator in a forked child: the calls' must be ours
    pid = os.fork()
    if pid == 0:  # the child: the calls, their records to the parent, and nothing else (never back into the check)
        try:
            gc.disable()  # a collection would touch every object the fork shares with the parent, copying its pages
            random.setstate(python_random)
            os.close(records)
            sys.stdout = sys.stderr = out = io.StringIO()  # a kernel's streams are its threads': not in a fork
            child = evidence.Observer(record_w)
            child.folders = folders
            evidence.ROLE = child
            for (fn, args, tracer, kwargs, result), start in zip(calls, starts):
                if start is not None:  # the random streams the call starts from
                    set_rng_state(start)
                traced_call(fn, args, tracer, kwargs, result=result)
            send(record_w, out.getvalue().encode("utf-8", "replace")[-20_000:])
        except BaseException:  # noqa: BLE001: the parent sees calls that left no record, and says so
            pass
        finally:
            os._exit(0)
    os.close(record_w)
    received, printed = [], None
    error: BaseException | None = None
    try:
        watch = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
        try:
            while len(received) < len(calls) and (data := receive(records, watch)) is not None:
                received.append(data)
            printed = receive(records, watch) if len(received) == len(calls) else None
        finally:
            if watch is not None:
                os.close(watch)
    except Exception as exc:  # a record cut short (the child died writing it), a cell's time limit raised here while
        error = exc  # the child ran: the call's, as in place
    finally:
        os.close(records)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
    if printed:
        print(printed.decode("utf-8", "replace"), end="")
    return [_take(call, data, error, role, folders) for call, data in
            zip(calls, received + [None] * (len(calls) - len(received)))]


def _take(call: tuple, data: bytes | None, error: BaseException | None, role, folders: list):
    """One call's :class:`TracedCall` from its record (put into this process's objects, and sent on to the grader's
    judge as it came), or, when its process ended before it made one, an error that says so."""
    fn, args, tracer, kwargs, _ = call
    if data is None:  # the call ended its process (sys.exit, os._exit, a crash) or was stopped: no record
        error = error or SystemExit("the call ended the process it ran in")
        facts = ErrorFacts(type=type(error).__name__, line=None, source="",
                           text=str(error).splitlines()[0][:300] if str(error) else "")
        run = TracedCall(tracer.events, error=ObservedError(facts), moves=tracer.moves)
        if isinstance(role, evidence.Observer):
            role.after_call(CallRecord(events=run.events, result=None, reference=None, crashed=False, moves=run.moves,
                                       error=facts), args, kwargs)
        return run
    recorded = evidence.replay(data, args, kwargs, folders, match_folders=False)  # same disk: only the objects
    if isinstance(role, evidence.Observer):
        send(role.fd, data)  # the judge replays the very record
    return TracedCall.from_record(recorded, tracer)
