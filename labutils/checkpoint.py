"""The ungraded helpers around checkpoints: what lab 6 asks students to build on, never lab 6's answer.

- RNG state: :func:`capture_rng_state` and :func:`restore_rng_state` turn every generator a step may draw from into
  tensors and plain values and back, so a checkpoint holding them loads with ``torch.load(weights_only=True)``.
- Checksums: :func:`sha256_of`, and :func:`checksum_path`, where a writer may put one beside its file.
- Names and listing: zero-padded ``step-000120.pt`` names that sort by step, :func:`latest_checkpoint` (by the step in
  the name, never by file time) and :func:`rotate`.
- No debris: a writer killed mid-save leaves its temp file behind; :func:`remove_stale_temp_files` removes it when a
  run starts or resumes, and never one that a live writer is still writing.
- :func:`compare_states`: the proof that a resumed run is the run that never stopped.

Writing and restoring a complete checkpoint (lab 6's exercise) is not here: the instructor's version is
``labutils/reference/checkpoint.py``, which the handout leaves out, and lab 7 builds on the student's own.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from pathlib import Path

try:
    import fcntl  # POSIX advisory locks: how a temp file's live writer is told apart from a dead one's
except ImportError:  # Windows
    fcntl = None

import numpy as np
import torch

LAST_PATTERN = re.compile(r"^step-(\d+)\.pt$")  # step-000120.pt as last_name writes it; step-120.pt is read too
TEMP_PATTERN = re.compile(r"^\..+\.pt(\.sha256)?\.[A-Za-z0-9_]{8}\.tmp$")  # mkstemp's: .step-000120.pt.k3v9_x0q.tmp
BEST_NAME = "best.pt"


# --- RNG state -------------------------------------------------------------------------------------------------------


def set_seed(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) at once: a run is reproducible only if every RNG is seeded."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def capture_rng_state() -> dict:
    """Every RNG a training step may draw from, as tensors and plain values (so ``weights_only`` loading works)."""
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state = {
        "python": _python_state_to_tensor(random.getstate()),
        "numpy": {
            "kind": np_kind,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Inverse of :func:`capture_rng_state`."""
    random.setstate(_python_state_from_tensor(state["python"]))
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["gauss"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _python_state_to_tensor(state: tuple) -> torch.Tensor:
    version, internal, gauss = state
    if gauss is not None:  # only random.gauss sets it; the lab never draws from it
        raise ValueError("python RNG has a cached gauss value; this checkpoint format does not store it")
    return torch.tensor([version, *internal], dtype=torch.int64)


def _python_state_from_tensor(t: torch.Tensor) -> tuple:
    values = t.tolist()
    return values[0], tuple(values[1:]), None


# --- checksums -------------------------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checksum_path(path: Path) -> Path:
    """Where the sha256 of ``path`` is written: ``step-000120.pt.sha256``."""
    return path.with_name(path.name + ".sha256")


# --- temp files of writers that died mid-save -----------------------------------------------------------------------


def remove_stale_temp_files(ckpt_dir, log=None) -> list[Path]:
    """Delete the temp files (``.step-000120.pt.XXXXXXXX.tmp``) that writers killed mid-save left in ``ckpt_dir``.

    Called where a run starts or resumes: :func:`latest_checkpoint` (lab 7's loop starts with it),
    the reference's ``load_latest_valid``, and the reference loop's ``fit``. Returns the deleted paths, sorted by name.

    Why it is safe while other writers are alive: the reference's writer (``atomic_save``) holds an exclusive
    ``flock`` on its temp file from creating it until it has renamed it into place, and the kernel releases that lock
    the moment the writer dies, however it dies. A temp file is deleted only when this function gets the lock itself (so no writer holds
    it) and the name still points at the file it locked (so no writer finished and renamed it meanwhile). A writer
    that loses the race between creating its file and locking it sees the file gone and takes another name. Age or
    step numbers would not do: a live writer's file can be older than a finished checkpoint (two runs sharing one
    folder, a slow disk), and a dead writer's file can be newer than every checkpoint (it died writing the newest).
    Files of other patterns (a student's fixed ``.step-000120.pt.tmp``, which holds no lock) are never touched.
    Where ``fcntl`` is missing (Windows) nothing is deleted, since a live writer could not be recognised.
    """
    folder = Path(ckpt_dir)
    if fcntl is None or not folder.is_dir():
        return []
    removed = sorted(p for p in folder.iterdir() if TEMP_PATTERN.match(p.name) and _remove_if_unowned(p))
    if removed and log is not None:
        log(f"removed {len(removed)} temp file(s) left by writers that died mid-save in {folder}")
    return removed


def _remove_if_unowned(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False  # its writer finished and renamed it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer holds it
        try:
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                return False  # the name now points at another file
        except FileNotFoundError:
            return False  # renamed into place after we opened it: it is a checkpoint now
        path.unlink()
        return True
    finally:
        os.close(fd)


# --- comparing two states --------------------------------------------------------------------------------------------


def compare_states(a, b, where: str = "") -> list[str]:
    """Every place where two nested states (dicts, lists, tensors, numbers) differ, as paths like ``model.fc.weight``.

    Tensors must match in dtype, shape and every bit; two NaN numbers count as equal. ``[]`` means identical: the
    proof that a resumed run is the run that never stopped.
    """
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return [] if a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) else [where or "<root>"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where} (keys differ)"]
        return [d for k in a for d in compare_states(a[k], b[k], f"{where}.{k}" if where else str(k))]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where} (lengths differ)"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in compare_states(x, y, f"{where}[{i}]")]
    return [] if a == b or (a != a and b != b) else [where or "<root>"]


# --- rotation and recovery -------------------------------------------------------------------------------------------


def last_name(step: int) -> str:
    return f"step-{step:06d}.pt"  # zero-padded: names sort by step


def list_checkpoints(ckpt_dir) -> list[Path]:
    """The "last" checkpoints in ``ckpt_dir``, oldest first."""
    folder = Path(ckpt_dir)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := LAST_PATTERN.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(ckpt_dir) -> Path | None:
    """The newest "last" checkpoint by the step number in its name (padded or not), or None. A run resumes from here,
    so it first clears the temp files of writers that died mid-save (:func:`remove_stale_temp_files`)."""
    remove_stale_temp_files(ckpt_dir)
    found = list_checkpoints(ckpt_dir)
    return found[-1] if found else None


def rotate(ckpt_dir, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` "last" checkpoints; call only after the new one is in place."""
    removed = list_checkpoints(ckpt_dir)[:-keep_last]
    for path in removed:
        path.unlink(missing_ok=True)
        checksum_path(path).unlink(missing_ok=True)
    return removed
