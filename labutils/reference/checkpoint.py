"""The instructor's checkpoints: atomic, complete, verified, and with a fallback. Lab 6's answer, so not handed out.

- Atomic: written to a temp file in the same folder, flushed and fsynced, then ``os.replace``d over the final name, so
  a crash mid-write leaves the previous checkpoint intact (nanoGPT writes ``ckpt.pt`` in place and can lose both).
- Complete: model, optimizer, scheduler, GradScaler, step, epoch, position inside the epoch, best metric, config and
  every RNG state, so a resumed run is bit-identical to one that never stopped.
- Safe to load: only tensors and plain values, so ``torch.load(weights_only=True)`` works and a checkpoint cannot run
  code. A sha256 written beside each file catches a flipped byte, which ``torch.load`` would happily accept.
- Recoverable: loading walks back from the newest file to the newest one that verifies, warning about each it skips.
- No debris: every writer holds an exclusive ``flock`` on its temp file until it is renamed into place, which is how
  :func:`labutils.checkpoint.remove_stale_temp_files` tells a dead writer's leftovers from a live writer's file.

The reference loop (``fit``) saves and resumes with these. Students write their own ``save_checkpoint`` and
``load_checkpoint`` in lab 6 and paste them into lab 7; the ungraded helpers they use are in :mod:`labutils.checkpoint`.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl  # the writer's lock that remove_stale_temp_files looks for
except ImportError:  # Windows
    fcntl = None

import torch

from ..checkpoint import capture_rng_state, checksum_path, list_checkpoints, remove_stale_temp_files, \
    restore_rng_state, sha256_of


# --- atomic, verified files ------------------------------------------------------------------------------------------


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
    _atomic_write_text(checksum_path(path), digest + "\n")
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
    checksum = checksum_path(path)
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


# --- recovery --------------------------------------------------------------------------------------------------------


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
