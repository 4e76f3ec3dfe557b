"""show_trace: print what a student's loop did on the check's tiny data, step by step, to see the order for yourself."""

from __future__ import annotations

from ..exercises import TRAIN_EXERCISES, get
from ..trace import format_events
from .calling import exception_failure, isolated
from .evaluate import run_evaluate
from .train_run import run_train, train_case
from .world import run_seed


def show_trace(fn, exercise: str = "baseline", steps: int | None = 2) -> None:
    """Print the numbered events of ``fn`` run on the check's tiny data: see what your loop does, in order.

    exercise: a train_one_epoch exercise ("baseline", "scheduler", "clipping", "accumulation", "amp") or "evaluate".
    steps: how many optimizer steps to show (None: all).
    """
    with isolated():
        if exercise == "evaluate":
            view = run_evaluate(fn, run_seed())
            events, run, title, ends = view.run.events, view.run, "evaluate", []
        elif exercise in TRAIN_EXERCISES:
            view = run_train(fn, train_case(exercise, run_seed()))
            events, run, title = view.events, view.run, f"train_one_epoch ({get(exercise).notebook})"
            ends = [view.span(k)[1] for k in range(1, len(view.steps) + 1)]  # where each step's events end
        else:
            raise ValueError(f"exercise={exercise!r} is unknown: use one of {', '.join(TRAIN_EXERCISES)}, evaluate")
    stop = ends[steps - 1] if steps and len(ends) > steps else len(events)
    print(f"{title}: {len(events)} events on the check's tiny data, in the order they happened")
    lines = format_events(events, 0, stop)
    for n, line in enumerate(lines):
        print(line)
        if n + 1 in ends and n + 1 < len(events):
            print(f"     {'-' * 40} end of step {ends.index(n + 1) + 1}")
    if stop < len(events):
        print(f"     ... {len(events) - stop} more events: show_trace(fn, {exercise!r}, steps=None) shows all")
    if run.error is not None:
        print(exception_failure(getattr(fn, "__name__", "the function"), fn, run.error).message)
    if run.reference is not None:
        print(f"it called {run.reference}, the lab's reference implementation")
