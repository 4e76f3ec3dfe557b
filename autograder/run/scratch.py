"""The run's scratch folder (task courses, kernel HOMEs, logs), and the removal of those whose run died.

Why: a run killed with SIGKILL cannot clean up after itself; its folder (a copy of every submission, gradebooks,
kernel logs) would stay in the temporary directory forever. Each run holds an ``flock`` on a file in its folder for
its whole life; the kernel drops it when the run dies, so the next run can tell a dead run's folder from a live
one's (two runs at once on one machine are fine) and removes only the dead.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path

PREFIX = "looplab-grade-"
OWNER = ".owner"
KEPT = ".kept"  # --keep-work: left for the instructor to read, never removed by a later run
YOUNG_S = 600  # a folder without its owner file this young may be a run still starting: left alone


def new_work_folder() -> tuple[Path, object]:
    """(a fresh scratch folder, the open file whose lock marks it alive: keep it open); dead runs' folders go first."""
    remove_dead_runs(Path(tempfile.gettempdir()))
    work = passable_folder(Path(tempfile.mkdtemp(prefix=PREFIX)))
    owner = open(work / OWNER, "w")
    fcntl.flock(owner, fcntl.LOCK_EX)
    return work, owner


def passable_folder(path: Path) -> Path:
    """``path``, made (0711) if missing: student code, under another uid, may pass through it to its own task's
    folders and files (handed to it), and list nothing in it. The run's work folder, the kernels' connection files'
    folder (jupyter would make it 0700)."""
    path.mkdir(mode=0o711, parents=True, exist_ok=True)
    os.chmod(path, 0o711)
    return path


def remove_dead_runs(tmp: Path) -> list[Path]:
    """Remove the scratch folders under ``tmp`` whose run is gone; the folders removed."""
    removed = []
    for folder in tmp.glob(PREFIX + "*"):
        if folder.is_symlink() or not folder.is_dir() or (folder / KEPT).exists():
            continue
        if _owner_alive(folder):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def keep(work: Path) -> None:
    """Mark ``work`` as kept (``--keep-work``)."""
    (work / KEPT).touch()


def _owner_alive(folder: Path) -> bool:
    try:
        with open(folder / OWNER) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True  # locked: its run is alive
            return False
    except FileNotFoundError:
        try:
            return time.time() - folder.stat().st_mtime < YOUNG_S
        except FileNotFoundError:
            return True  # gone already
    except OSError:
        return True
