"""A call made in a process of its own: a child forked for it, whose record (:mod:`labutils.checks.evidence`) comes
back to the check, which goes on from what the call left in the objects it was handed and on disk.

Why: a check that saves with the student's ``save_checkpoint`` and then loads with their ``load_checkpoint`` in the
same process cannot tell a load that read the file from one that restored what the save kept in a module's memory;
nor can a check of lab 7 tell a resumed run that trained from one that copied in the state the uninterrupted run
left in a global. A call made apart keeps nothing of the kind: the next call runs in a process where it never ran.

Under the grader's recheck the child's record is also what the observer sends the judge (the same bytes), so the
judge replays the call as it replays any other. Where a fork is not safe (no ``os.fork``; macOS, whose system
libraries refuse to run in a forked child; CUDA already initialised, which a forked child cannot use) the call is
made in this process, as before: a notebook on such a machine is judged with that weaker evidence, the grader (a
Linux process that never touches CUDA) never.
"""

from __future__ import annotations

import gc
import io
import os
import random
import signal
import sys

import torch

from . import evidence
from ..trace import Tracer


def possible() -> bool:
    """Whether a call can be made in a forked child here."""
    return hasattr(os, "fork") and sys.platform.startswith("linux") and not torch.cuda.is_initialized()


def call_apart(fn, args, tracer: Tracer, kwargs: dict, result=None):
    """``traced_call(fn, args, tracer, kwargs)`` made in a forked child; the :class:`TracedCall` it made, with its
    effects on ``args``, ``kwargs`` and the random streams put into this process's own objects."""
    from .calling import ObservedError, TracedCall, _recorded, traced_call

    role = evidence.ROLE
    folders = list(role.folders) if role is not None else []
    records, record_w = os.pipe()
    python_random = random.getstate()  # Python reseeds its generator in a forked child: the call's must be ours
    pid = os.fork()
    if pid == 0:  # the child: the call, its record to the parent, and nothing else (never back into the check)
        try:
            gc.disable()  # a collection would touch every object the fork shares with the parent, copying its pages
            random.setstate(python_random)
            os.close(records)
            sys.stdout = sys.stderr = out = io.StringIO()  # a kernel's streams are its threads': not in a fork
            child = evidence.Observer(record_w)
            child.folders = folders
            evidence.ROLE = child
            traced_call(fn, args, tracer, kwargs, result=result)
            evidence.send(record_w, out.getvalue().encode("utf-8", "replace")[-20_000:])
        except BaseException:  # noqa: BLE001: the parent sees a call that left no record, and says so
            pass
        finally:
            os._exit(0)
    os.close(record_w)
    data = printed = None
    error: BaseException | None = None
    try:
        watch = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
        try:
            data = evidence.receive(records, watch)
            printed = evidence.receive(records, watch) if data is not None else None
        finally:
            if watch is not None:
                os.close(watch)
    except evidence.EvidenceError as exc:  # a record cut short: the child died in the middle of writing it
        error = exc
    except Exception as exc:  # a cell's time limit, raised here while the child ran: the call's, as in place
        error = exc
    finally:
        os.close(records)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
    if printed:
        print(printed.decode("utf-8", "replace"), end="")
    if data is None:  # the call ended its process (sys.exit, os._exit, a crash) or was stopped: no record
        error = error or SystemExit("the call ended the process it ran in")
        facts = evidence.ErrorFacts(type=type(error).__name__, line=None, source="",
                                    text=str(error).splitlines()[0][:300] if str(error) else "")
        run = TracedCall(tracer.events, error=ObservedError(facts), moves=tracer.moves)
        if isinstance(role, evidence.Observer):
            role.after_call(evidence.CallRecord(events=run.events, result=None, reference=None, crashed=False,
                                                moves=run.moves, error=facts), args, kwargs)
        return run
    recorded = evidence.replay(data, args, kwargs, folders, match_folders=False)  # same disk: only the objects
    if isinstance(role, evidence.Observer):
        evidence.send(role.fd, data)  # the judge replays the very record
    return _recorded(recorded, tracer)
