"""Checkpoints you can trust: atomic, complete, verified, and with a fallback.

- Atomic: written to a temp file in the same folder, flushed and fsynced, then ``os.replace``d over the final name, so
  a crash mid-write leaves the previous checkpoint intact (nanoGPT writes ``ckpt.pt`` in place and can lose both).
- Complete: model, optimizer, scheduler, GradScaler, step, epoch, position inside the epoch, best metric, config and
  every RNG state, so a resumed run is bit-identical to one that never stopped.
- Safe to load: only tensors and plain values, so ``torch.load(weights_only=True)`` works and a checkpoint cannot run
  code. A sha256 written beside each file catches a flipped byte, which ``torch.load`` would happily accept.
- Recoverable: loading walks back from the newest file to the newest one that verifies, warning about each it skips.
- No debris: a writer killed mid-save leaves its temp file behind; the next run removes it when it starts or resumes
  (:func:`remove_stale_temp_files`), and never one that a live writer is still writing.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl  # POSIX advisory locks: how a temp file's live writer is told apart from a dead one's
except ImportError:  # Windows
    fcntl = None

import numpy as np
import torch

LAST_PATTERN = re.compile(r"^step-(\d{6,})\.pt$")
TEMP_PATTERN = re.compile(r"^\..+\.pt(\.sha256)?\.[A-Za-z0-9_]{8}\.tmp$")  # atomic_save's: .step-000120.pt.k3v9_x0q.tmp
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


# --- atomic, verified files ------------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def atomic_save(obj, path: str | os.PathLike) -> Path:
    """``torch.save`` to a temp file in the same folder, fsync, then ``os.replace``: readers never see half a file.

    The sha256 file is written the same way, after the checkpoint, so a checkpoint without one is unverified (and
    still loadable), and a checkpoint with a mismatching one is known to be damaged.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _claimed_temp(path) as (f, tmp):  # same folder: same disk, so the rename is atomic
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        digest = sha256_of(tmp)
        _publish(f, tmp, path)
    _atomic_write_text(_checksum_path(path), digest + "\n")
    _fsync_dir(path.parent)
    return path


def _atomic_write_text(path: Path, text: str) -> None:
    with _claimed_temp(path) as (f, tmp):
        f.write(text.encode())
        f.flush()
        os.fsync(f.fileno())
        _publish(f, tmp, path)


def _publish(f, tmp: Path, path: Path) -> None:
    """Rename the finished temp file over ``path`` with its lock still held, so that its name never exists unlocked
    while its writer lives. (Windows cannot rename an open file, and has no lock to keep: close it first.)"""
    if fcntl is None:
        f.close()
    os.replace(tmp, path)


@contextmanager
def _claimed_temp(path: Path):
    """A new temp file ``.NAME.XXXXXXXX.tmp`` beside ``path``, opened for writing and exclusively locked by this
    process until the block ends (the kernel drops the lock when the process dies, SIGKILL included); deleted if the
    block raises."""
    while True:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        f = os.fdopen(fd, "wb")
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits only for a cleaner that got in first, and is deleting it
        if os.fstat(fd).st_nlink > 0:
            break
        f.close()  # a cleaner removed it between mkstemp and the lock: take another name
    try:
        yield f, Path(name)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    finally:
        f.close()


def remove_stale_temp_files(ckpt_dir, log=None) -> list[Path]:
    """Delete the temp files (``.step-000120.pt.XXXXXXXX.tmp``) that writers killed mid-save left in ``ckpt_dir``.

    Called where a run starts or resumes: :func:`latest_checkpoint` (lab 7's loop starts with it),
    :func:`load_latest_valid`, and the reference loop's ``fit``. Returns the deleted paths, sorted by name.

    Why it is safe while other writers are alive: every writer of this module holds an exclusive ``flock`` on its temp
    file from creating it until it has renamed it into place, and the kernel releases that lock the moment the writer
    dies, however it dies. A temp file is deleted only when this function gets the lock itself (so no writer holds
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


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file that is truncated, damaged or does not match the model it is loaded into."""


def verified_load(path: str | os.PathLike) -> dict:
    """Load with ``weights_only=True`` after checking the sha256 written beside the file (when there is one)."""
    path = Path(path)
    checksum = _checksum_path(path)
    if checksum.exists():
        expected = checksum.read_text().strip()
        if sha256_of(path) != expected:
            raise CorruptCheckpointError(f"{path.name}: sha256 does not match {checksum.name} (the file was damaged)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CorruptCheckpointError(f"{path.name}: cannot be read ({type(exc).__name__}: {exc})") from None


# --- the lab's checkpoint contents -----------------------------------------------------------------------------------


def save_checkpoint(path, model, optimizer, scheduler=None, scaler=None, step: int = 0, **extra) -> Path:
    """Write a complete checkpoint atomically, with lab 6's contract (``save_checkpoint(path, model, optimizer,
    scheduler, scaler, step)``). ``extra`` holds plain values (epoch, batch in epoch, best metric, config dict, ...)
    and is returned by :func:`restore_checkpoint`."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": int(step),
        "rng": capture_rng_state(),
        "torch_version": str(torch.__version__),
        "num_threads": torch.get_num_threads(),
        **extra,
    }
    return atomic_save(state, path)


def restore_checkpoint(path, *, model, optimizer, scheduler=None, scaler=None) -> dict:
    """Restore everything :func:`save_checkpoint` wrote, strictly; returns the whole checkpoint dict (``step`` and the
    extras). Named apart from lab 6's ``load_checkpoint``, which returns only the step.

    Raises :class:`CorruptCheckpointError` when the file is damaged or does not fit the objects given.
    """
    state = verified_load(path)
    _warn_if_environment_differs(state, Path(path).name)
    try:
        model.load_state_dict(state["model"], strict=True)
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(_require(state, "scheduler", path))
        if scaler is not None:
            scaler.load_state_dict(_require(state, "scaler", path))
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CorruptCheckpointError(f"{Path(path).name}: does not fit this run ({exc})") from None
    restore_rng_state(state["rng"])
    return state


def _require(state: dict, key: str, path) -> dict:
    if state.get(key) is None:
        raise CorruptCheckpointError(f"{Path(path).name}: holds no {key} state, but this run has a {key}")
    return state[key]


def _warn_if_environment_differs(state: dict, name: str) -> None:
    """Resuming is bit-exact only with the same torch build and thread count: say so instead of failing silently."""
    if state.get("torch_version") not in (None, torch.__version__):
        warnings.warn(f"{name} was written by torch {state['torch_version']}, this is {torch.__version__}: "
                      "the resumed run may not be bit-identical", stacklevel=3)
    if state.get("num_threads") not in (None, torch.get_num_threads()):
        warnings.warn(f"{name} was written with {state['num_threads']} threads, this run uses "
                      f"{torch.get_num_threads()}: the resumed run may not be bit-identical (torch.set_num_threads)",
                      stacklevel=3)


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
    """The newest "last" checkpoint by step, or None. A run resumes from here, so it first clears the temp files of
    writers that died mid-save (:func:`remove_stale_temp_files`)."""
    remove_stale_temp_files(ckpt_dir)
    found = list_checkpoints(ckpt_dir)
    return found[-1] if found else None


def rotate(ckpt_dir, keep_last: int) -> list[Path]:
    """Delete all but the newest ``keep_last`` "last" checkpoints; call only after the new one is in place."""
    removed = list_checkpoints(ckpt_dir)[:-keep_last]
    for path in removed:
        path.unlink(missing_ok=True)
        _checksum_path(path).unlink(missing_ok=True)
    return removed


def load_latest_valid(ckpt_dir, *, model, optimizer, scheduler=None, scaler=None, log=print) -> dict | None:
    """Load the newest checkpoint that verifies and fits, walking back past damaged ones with a warning each.

    Returns its dict, or None (after saying so) when there is none: the caller starts fresh. Temp files of writers
    that died mid-save are removed first (:func:`remove_stale_temp_files`).
    """
    remove_stale_temp_files(ckpt_dir, log=log)
    candidates = list_checkpoints(ckpt_dir)
    for path in reversed(candidates):
        try:
            state = restore_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler)
        except CorruptCheckpointError as exc:
            warnings.warn(f"skipping checkpoint {exc}; trying the previous one", stacklevel=2)
            continue
        log(f"resuming from {path} (step {state['step']})")
        return state
    where = f"{len(candidates)} damaged checkpoint(s) in {ckpt_dir}" if candidates else f"no checkpoint in {ckpt_dir}"
    log(f"starting fresh: {where}")
    return None
