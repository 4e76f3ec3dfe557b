"""Simulated crashes, and the step log that survives them.

A real crash (power cut, OOM kill, pre-emption) gives the program no chance to clean up: no ``finally``, no
``atexit``, no buffered output flushed. ``os._exit(1)`` is the faithful imitation, which is why the lab uses it
instead of raising an exception. Because it would also kill a notebook's kernel, :func:`run_forked` runs the doomed
training in a child process (forked, or spawned on a CUDA machine).
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


def _child(fn, args, kwargs) -> None:
    """The child's side: one thread, then the training."""
    import torch

    torch.set_num_threads(1)
    fn(*args, **kwargs)


def _run_pickled(payload: bytes) -> None:
    """A spawned child's target: the function and its arguments arrive by value (see :func:`start`)."""
    import cloudpickle

    _child(*cloudpickle.loads(payload))


def start_method() -> str:
    """``fork`` where it is safe, ``spawn`` on a machine with CUDA: a forked child cannot use CUDA once its parent
    has touched it, and asking ``torch.cuda.is_available()`` already does (it initialises the driver)."""
    import torch

    return "spawn" if torch.cuda.is_available() else "fork"


def start(fn, *args, **kwargs) -> multiprocessing.Process:
    """Start ``fn(*args, **kwargs)`` in a child process and return it (``join()`` it; its ``exitcode`` is 0 when
    ``fn`` returned normally).

    Fork where it is safe: a function defined in a notebook cell cannot be pickled by name for a fresh interpreter,
    but a forked child already has it. On a CUDA machine (:func:`start_method`) the child is spawned instead and
    gets ``fn`` and its arguments by value through cloudpickle (tensors on the GPU included). Either child trains on
    one thread: torch's OpenMP pool does not survive a fork (a child that uses more than one thread after its parent
    ran a parallel op hangs at the first barrier). Compare such a run only with runs that also used one thread: the
    thread count changes float reduction order.
    """
    method = start_method()
    if method == "spawn":
        import cloudpickle  # installed with distributed (requirements.txt); only a CUDA machine needs it

        target, arguments = _run_pickled, (cloudpickle.dumps((fn, args, kwargs)),)
    else:
        target, arguments = _child, (fn, args, kwargs)
    process = multiprocessing.get_context(method).Process(target=target, args=arguments)
    process.start()
    return process


def run_forked(fn, *args, **kwargs) -> int:
    """Run ``fn(*args, **kwargs)`` in a child process (:func:`start`) and return its exit code."""
    started = time.perf_counter()
    process = start(fn, *args, **kwargs)
    process.join()
    artifacts.add_seconds("subprocesses", time.perf_counter() - started)
    return process.exitcode
