"""What a grading run shows while it goes: a bar of students done on a terminal, one line per notebook in the log.

On a terminal, stderr shows a tqdm bar (students done / total, notebooks in the postfix) and nothing else until the
end; off a terminal (CI, a pipe, a file) there is no bar and each notebook's line goes to stderr as well. Either way
every line is in OUT/grading.log, and the run ends with its slowest notebooks.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from autograder.untrusted import shown

SLOWEST = 5  # notebooks listed at the end


def fmt(seconds: float) -> str:
    return f"{int(seconds // 60)}m{seconds % 60:04.1f}s"


class Progress:
    def __init__(self, tasks_per_student: dict[str, int], started: float, log_path: Path | None = None,
                 stream=None):
        self.stream = stream or sys.stderr
        self.started = started
        self.left = dict(tasks_per_student)
        self.total_tasks = sum(tasks_per_student.values())
        self.done_tasks = 0
        self.times: list[tuple[float, str]] = []
        self.log_path = log_path
        self.terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = None
        if self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=len(self.left), unit="student", file=self.stream, dynamic_ncols=True,
                            desc="grading", initial=self.students_done())
            self.bar.set_postfix_str(self._notebooks())

    def students_done(self) -> int:
        return sum(1 for v in self.left.values() if v == 0)

    def _notebooks(self) -> str:
        return f"{self.done_tasks}/{self.total_tasks} notebooks"

    def log(self, message: str, terminal: bool = True) -> None:
        """A line for the log, and for stderr unless a bar is showing there and ``terminal`` is False; whatever a
        student chose in it (names, notes) reaches neither raw: every control character is escaped."""
        message = shown(message, limit=None, keep_newlines=True)
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write(message + "\n")
        if not self.bar:
            print(message, file=self.stream, flush=True)
        elif terminal:
            self.bar.write(message, file=self.stream)

    def done(self, student: str, notebook: str, status: str, seconds: float) -> None:
        """One notebook graded: ``status`` is its score ("7/8") or why it has none."""
        before = self.students_done()
        self.done_tasks += 1
        self.left[student] -= 1
        self.times.append((seconds, f"{student}/{notebook}"))
        slowest = max(self.times)
        self.log(f"[{self.students_done()}/{len(self.left)} students, {self._notebooks()}, "
                 f"{fmt(time.monotonic() - self.started)}] {student}/{notebook}: {status} in {seconds:.1f} s "
                 f"(slowest: {slowest[1]} {slowest[0]:.1f} s)", terminal=False)
        if self.bar:
            self.bar.set_postfix_str(self._notebooks(), refresh=False)
            self.bar.update(self.students_done() - before) if self.students_done() > before else self.bar.refresh()

    def close(self) -> None:
        """The bar goes; the slowest notebooks are listed (later lines still reach the log and stderr)."""
        if self.bar:
            self.bar.close()
            self.bar = None
        if self.times:
            self.log("slowest notebooks: " + ", ".join(f"{name} {s:.1f} s" for s, name in
                                                      sorted(self.times, reverse=True)[:SLOWEST]))
