"""Files that appear whole or not at all: written beside their final name, flushed to disk, then renamed over it.

Why one module: the journal of a grading run, the handout zip, a notebook's numbers for ``make lab`` and the
decompressed dataset are all read by something that may start while they are written, or after a crash in the middle
of writing them. ``os.replace`` within one folder is atomic, so a reader sees the old file or the new one, never half.
(Lab 6 teaches the same recipe for checkpoints, so lab 6's check refuses a save that hands its write to this module:
its exercise's ``forbidden`` in :mod:`labutils.exercises`; the reference's checkpoints,
``labutils/reference/checkpoint.py``, keep a writer of their own, which also locks its temp files so that a crash's
leftovers can be recognised and removed.)
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_file(path: str | os.PathLike):
    """A binary file to write ``path``'s new content into; on a clean exit it replaces ``path`` (temp file in the
    same folder, fsync, rename, fsync the folder), on an error it is removed and ``path`` is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_folder(path.parent)


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """``path`` holds ``data`` or what it held before, never a part."""
    with atomic_file(path) as f:
        f.write(data)


def _sync_folder(folder: Path) -> None:
    """The rename itself reaches the disk (a power cut after it must not bring the old name back)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
