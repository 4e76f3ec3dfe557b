"""Simulated crashes, and the step log that survives them.

A real crash (power cut, OOM kill, pre-emption) gives the program no chance to clean up: no ``finally``, no
``atexit``, no buffered output flushed. ``os._exit(1)`` is the faithful imitation, which is why the lab uses it
instead of raising an exception. Because it would also kill a notebook's kernel, :func:`run_forked` runs the doomed
training in a forked child process.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

from . import artifacts


def exit_at_step(crash_at_step: int):
    """A step callback ``(step, loss=None)`` that ends the process with ``os._exit(1)`` once ``step`` is reached."""

    def on_step(step: int, loss: float | None = None) -> None:
        if step >= crash_at_step:
            os._exit(1)

    return on_step


class StepRecorder:
    """Step callback ``(step, loss)`` that appends one JSON line per optimizer step to ``path``, flushed and fsynced
    so that the lines written before an ``os._exit`` are on disk; exits at ``crash_at_step`` when given."""

    def __init__(self, path, crash_at_step: int | None = None):
        self.path, self.crash_at_step = Path(path), crash_at_step
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, step: int, loss: float | None = None) -> None:
        line = json.dumps({"step": int(step), "loss": None if loss is None else float(loss),
                           "pid": os.getpid(), "time": time.time()})
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.crash_at_step is not None and step >= self.crash_at_step:
            os._exit(1)


def read_step_log(path) -> list[dict]:
    """The records written by :class:`StepRecorder`, each with ``run`` = 1, 2, ... in order of the writing process."""
    runs: dict[int, int] = {}
    records = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue  # a crash can cut a run short, never a line (each is one small write)
        record = json.loads(line)
        record["run"] = runs.setdefault(record["pid"], len(runs) + 1)
        records.append(record)
    return records


def run_forked(fn, *args, **kwargs) -> int:
    """Run ``fn(*args, **kwargs)`` in a forked child and return its exit code (0 when ``fn`` returns normally).

    Fork, not spawn: a function defined in a notebook cell cannot be pickled for a fresh interpreter, but a forked
    child already has it. The child trains on one thread: torch's OpenMP pool does not survive a fork (a child that
    uses more than one thread after its parent ran a parallel op hangs at the first barrier). Compare such a run only
    with runs that also used one thread: the thread count changes float reduction order.
    """
    import torch

    def child() -> None:
        torch.set_num_threads(1)
        fn(*args, **kwargs)

    started = time.perf_counter()
    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    artifacts.add_seconds("subprocesses", time.perf_counter() - started)
    return process.exitcode
