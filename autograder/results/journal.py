"""Every finished task kept on disk the moment it finishes, so a killed run loses only the tasks in flight and the
next run on the same OUT grades only what is missing or changed.

Why: a class of 300 is an hour of grading; an OOM kill, a closed laptop lid or a cluster pre-emption used to lose all
of it, and one late submission meant grading everyone again.

- :class:`Journal` is ``OUT/.journal/``: one ``<task id>.json`` per finished task (its outcome, as the run's
  collector reads it) and its feedback page beside it, each written to a temporary file, flushed to disk and moved
  into place with ``os.replace`` (a reader sees the old file or the new one, never half of one).
- A task's :func:`task_key` hashes what decides its grade: the student's notebook and data files, the assignment's
  source, the grader's code and the grading options. An entry is reused only when its key is the task's key and it
  was graded (a task the grader failed on is always tried again).
- :func:`lock_out` makes one run at a time write to an OUT: a second is refused with the first's pid. The lock is an
  ``flock``, which the kernel drops when its holder dies, however it dies: no stale lock to remove by hand.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import signal
from pathlib import Path

from labutils.atomic import write_atomically

from .outcome import TaskOutcome

JOURNAL = ".journal"
LOCK = ".grading.lock"
GRADEBOOK = "gradebook-assignment"  # which assignment version the gradebook was given (not .json: tasks are)
FILES = {"feedback": ".html", "autograded": ".ipynb"}  # an outcome's files, kept beside it


class OutLocked(RuntimeError):
    """Another grading run is writing to this OUT."""


def lock_out(out: Path):
    """Hold OUT's lock for this process's lifetime (the returned file); :class:`OutLocked` when a run holds it."""
    out.mkdir(parents=True, exist_ok=True)
    f = open(out / LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise OutLocked(f"another grading run ({holder}) is writing to {out}: wait for it to finish, or grade "
                        "into another --out") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}")
    f.flush()
    return f


KILL_AT = "AUTOGRADER_KILL_AT"


def kill_point(name: str) -> None:
    """Die here, by SIGKILL, when the environment names this point (``AUTOGRADER_KILL_AT=gradebook``): how the
    tests show a run killed during the gradebook write or the summary is finished by the next one. Those moments
    last milliseconds, too short to aim a kill at from outside; an OOM killer or a pre-emption hits them anyway."""
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def content_hash(h, path: Path) -> None:
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def folder_hash(root: Path) -> str:
    """Relative path and content of every file under ``root`` (mtimes left out: a copy is the same source)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and ".ipynb_checkpoints" not in p.parts):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        content_hash(h, path)
    return h.hexdigest()


def task_key(run_key: str, notebook: Path, extra_files: list[tuple[str, Path]]) -> str:
    """What decides one task's grade: the run's key (source, grader, options) and the student's own files."""
    h = hashlib.sha256(run_key.encode() + b"\0")
    content_hash(h, notebook)
    for name, path in sorted(extra_files):
        h.update(b"\0" + name.encode() + b"\0")
        content_hash(h, path)
    return h.hexdigest()


class Journal:
    """The finished tasks of OUT (see the module's docstring)."""

    def __init__(self, out: Path):
        self.folder = out / JOURNAL
        self.folder.mkdir(parents=True, exist_ok=True)

    def _entry(self, task_id: str) -> Path:
        return self.folder / f"{task_id}.json"

    def record(self, task_id: str, key: str, outcome: dict) -> dict:
        """Keep ``outcome`` (its feedback page and graded notebook copied beside it); the outcome as kept."""
        outcome = dict(outcome)
        for field, suffix in FILES.items():
            if outcome.get(field) and Path(outcome[field]).is_file():
                kept = self.folder / f"{task_id}{suffix}"
                write_atomically(kept, Path(outcome[field]).read_bytes())
                outcome[field] = str(kept)
        write_atomically(self._entry(task_id), json.dumps({"key": key, "outcome": outcome}).encode())
        return outcome

    def reusable(self, task_id: str, key: str) -> tuple[dict | None, str]:
        """(the kept outcome, "") when it can stand for this task; else (None, why it is graded again)."""
        try:
            entry = json.loads(self._entry(task_id).read_text())
        except FileNotFoundError:
            return None, "new"
        except (OSError, ValueError) as exc:
            return None, f"unreadable journal entry ({type(exc).__name__})"
        outcome = entry.get("outcome") or {}
        if entry.get("key") != key:
            return None, "changed"
        if outcome.get("status") != "graded":
            return None, "not graded last time"
        if any(outcome.get(field) and not Path(outcome[field]).is_file() for field in FILES):
            return None, "a file it kept is missing"
        return outcome, ""

    def reuse(self, tasks: list, run_key: str, outcomes: dict, say) -> tuple[list, dict[str, str]]:
        """Take every task graded before whose files and grader are unchanged (``run_key``: what decides every
        task's grade besides its files) into ``outcomes``; (the tasks left to grade, each task's key)."""
        keys, todo, why = {}, [], {}
        for task in tasks:
            keys[task.id] = task_key(run_key, Path(task.path), [(e.name, Path(e.path)) for e in task.extra_files])
            outcome, reason = self.reusable(task.id, keys[task.id])
            if outcome is None:
                todo.append(task)
                why[reason] = why.get(reason, 0) + 1
            else:
                outcomes[(task.student, task.notebook)] = TaskOutcome.from_json(outcome)
        if len(tasks) > len(todo):
            say(f"{len(tasks) - len(todo)} task(s) reused from {self.folder} (graded before, nothing changed); "
                f"{len(todo)} to grade" + (f" ({', '.join(f'{n} {r}' for r, n in sorted(why.items()))})" if todo else ""))
        return todo, keys

    def gradebook_holds(self, db_url: str, version: list[str]) -> bool:
        """Did a run on this OUT give the gradebook at ``db_url`` this ``version`` of the assignment?"""
        try:
            return json.loads((self.folder / GRADEBOOK).read_text()) == _gradebook_record(db_url, version)
        except (OSError, ValueError):
            return False

    def gradebook_given(self, db_url: str, version: list[str]) -> None:
        """The gradebook at ``db_url`` holds this ``version`` of the assignment now."""
        write_atomically(self.folder / GRADEBOOK, json.dumps(_gradebook_record(db_url, version)).encode())

    def forget(self, task_ids: list[str] | None = None) -> None:
        """Drop the kept outcomes of ``task_ids`` (all when None): ``--regrade``."""
        if task_ids is None:  # every task's files; what the gradebook was given stays true
            for path in self.folder.iterdir():
                if path.name != GRADEBOOK:
                    path.unlink(missing_ok=True)
            return
        for task_id in task_ids:
            self._entry(task_id).unlink(missing_ok=True)


def _gradebook_record(db_url: str, version: list[str]) -> dict:
    # the URL hashed: it may hold the database's password, which has no business in OUT
    return {"db": hashlib.sha256(db_url.encode()).hexdigest(), "version": version}
