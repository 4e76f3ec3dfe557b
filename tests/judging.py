"""A check judged as the grader's recheck judges it: a forked observer runs the student's functions and sends what
it saw; the judge, in this process, replays those records and never runs a line of them."""

from __future__ import annotations

import contextlib
import os
import traceback

import torch

from labutils import checks, exercises
from labutils.checks import evidence, properties, wire
from autograder.hidden.recheck import Observed, signature_facts


def judged_apart(exercise_id: str, fns: tuple, observer_body=None) -> properties.CheckReport:
    """The exercise's report judged in this process from what a forked observer saw of ``fns`` (as the recheck does);
    ``observer_body(fd)`` replaces the honest observer (a forger)."""
    exercise = exercises.get(exercise_id)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            if observer_body is not None:
                observer_body(w)
            else:
                with evidence.playing(evidence.Observer(w)):
                    properties.report_for(exercise.id, tuple(fns), checks, {})
        except BaseException:
            traceback.print_exc()
        os._exit(0)
    os.close(w)
    stand_ins = tuple(Observed(f.name, signature_facts(fn)) for f, fn in zip(exercise.functions, fns))
    try:
        with evidence.playing(evidence.Judge(r)):
            return properties.report_for(exercise.id, stand_ins, checks, {})
    finally:
        while wire.receive(r) is not None:  # what the judge did not use: the observer must not block on it
            pass
        os.close(r)
        os.waitpid(pid, 0)


@contextlib.contextmanager
def one_thread():
    """A fork after torch's thread pool started can deadlock the child: tests that fork, as the zygote does, run in a
    process that keeps to one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
