"""The grading processes: ``-j`` workers (:mod:`autograder.worker`) fed (student, notebook) tasks longest-first,
and the one shared zygote they fork their kernels from.

A worker that dies, or whose task runs past the hard limit, is killed with everything below it and replaced; its
task is reported as not graded and the others go on.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

# Rough relative cost of grading each notebook, so the slowest start first (measured; unknown ones count 1).
NOTEBOOK_COST = {"08_stretch": 4.0, "07_crash_resume": 3.0, "05_amp": 2.5, "00_data_tour": 1.5, "04_accumulation": 1.3,
                 "06_checkpointing": 1.2, "02_scheduler": 1.1, "01_baseline": 1.0, "03_clipping": 1.0}


class Worker:
    """One ``python -m autograder.worker`` process; started early (its imports overlap the parent's set-up) and given
    the run's configuration when it is known."""

    def __init__(self, index: int, log_dir: Path, cfg: dict | None = None):
        self.index = index
        self.log = open(log_dir / f"worker-{index}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, start_new_session=True, cwd=str(log_dir),
        )
        self.ready = False
        if cfg is not None:
            self.configure(cfg)
        self.task: dict | None = None
        self.started = 0.0
        self.buffer = b""

    def configure(self, cfg: dict) -> None:
        self.proc.stdin.write((json.dumps(cfg) + "\n").encode())
        self.proc.stdin.flush()

    def send(self, task: dict) -> None:
        self.task, self.started = task, time.monotonic()
        self.proc.stdin.write((json.dumps(task) + "\n").encode())
        self.proc.stdin.flush()

    def read_lines(self) -> list[dict] | None:
        """Complete JSON lines available now; None when the worker has exited."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker, its zygote and every kernel below
        except OSError:
            pass
        self.proc.wait()
        self.log.close()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _order(tasks: list[dict]) -> list[dict]:
    """Longest first (LPT): the last task to start should be a short one."""
    return sorted(tasks, key=lambda t: (-NOTEBOOK_COST.get(t["notebook"], 1.0), t["student"], t["notebook"]))


class SharedZygote:
    """The run's one warm zygote (:mod:`autograder.zygote`); each worker connects and gets a fork of it."""

    def __init__(self, work: Path):
        self.socket = str(work / "zygote.sock")
        self.log = open(work / "zygote.log", "ab")
        env = dict(os.environ, HOME=str(work / "zygote-home"), MPLCONFIGDIR=str(work / "zygote-home" / "mpl"),
                   MPLBACKEND="module://matplotlib_inline.backend_inline", LAB_MODE="grade",
                   MALLOC_ARENA_MAX="2")  # fewer 64 MB malloc arenas per thread: the memory limit measures data
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from autograder.zygote import main; main(['--socket', {self.socket!r}])"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, env=env, start_new_session=True,
        )
        self.info: dict | None = None

    def wait_ready(self, timeout: float = 600) -> dict:
        import select

        if self.info is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else b""
            if not line:
                raise RuntimeError(f"the zygote did not start (see {self.log.name})")
            self.info = json.loads(line)
        return self.info

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.log.close()


def run_pool(tasks: list[dict], cfg: dict, workers: list[Worker], work: Path, hard_limit: float,
             on_result) -> None:
    pending = deque(_order(tasks))
    sel = selectors.DefaultSelector()

    def spawn(i: int) -> Worker:
        w = Worker(i, work, cfg)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        return w

    for w in workers:
        w.configure(cfg)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)

    def retire(w: Worker, reason: str | None) -> None:
        sel.unregister(w.proc.stdout)
        if w.task is not None:
            on_result({"id": w.task["id"], "student": w.task["student"], "notebook": w.task["notebook"],
                       "status": "error", "error": reason, "notes": []}, time.monotonic() - w.started)
            w.task = None
        w.kill()

    try:
        while pending or any(w.task for w in workers):
            for w in workers:
                if w.ready and w.task is None and pending:
                    w.send(pending.popleft())
            for key, _ in sel.select(timeout=1.0):
                w = key.data
                lines = w.read_lines()
                if lines is None:
                    retire(w, "the grading process exited unexpectedly (see the worker log)")
                    workers[workers.index(w)] = spawn(w.index)
                    continue
                for msg in lines:
                    if msg.get("ready"):
                        w.ready = True
                    elif w.task is not None:
                        on_result(msg, time.monotonic() - w.started)
                        w.task = None
            now = time.monotonic()
            for i, w in enumerate(workers):
                if w.task is not None and now - w.started > hard_limit:
                    retire(w, f"grading this notebook took longer than {hard_limit:.0f} s and was stopped")
                    workers[i] = spawn(w.index)
    finally:
        for w in workers:
            try:
                sel.unregister(w.proc.stdout)
            except (KeyError, ValueError):
                pass
            w.close()
