"""What a call left behind, as plain data and back: the state of every object it was handed (model, optimizer,
scheduler, scaler, the check's callbacks) and the files in the check's scratch folders.

The grader's observer reads them after each call of a student function (:meth:`labutils.checks.evidence.Observer
.after_call`); the judge, which never runs student code, puts them into its own objects and folders
(:func:`labutils.checks.evidence.replay`) and goes on from there as if it had made the call. The random streams the
call left travel beside them (:mod:`labutils.checks.rng`).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

import torch

from .records import EvidenceError

MAX_FOLDER = 64 * 2**20  # files a run may leave in a check's scratch folders


def _stateful(value) -> str | None:
    if isinstance(value, torch.nn.Module):
        return "module"
    if isinstance(value, torch.optim.Optimizer):
        return "optimizer"
    if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
        return "scheduler"
    if isinstance(value, torch.amp.GradScaler):
        return "scaler"
    if getattr(value, "observed", None):
        return "callback"
    return None


def parameter_refs(args: tuple) -> dict[tuple, torch.Tensor]:
    """(argument position, name) -> each parameter and buffer of the modules among ``args``: a returned or logged
    parameter travels as which one it is, so identity checks (param_groups) hold in the judge."""
    refs = {}
    for pos, value in enumerate(args):
        if isinstance(value, torch.nn.Module):
            for name, t in list(value.named_parameters()) + list(value.named_buffers()):
                refs.setdefault((pos, name), t)
    return refs


def state_of(value):
    """What a call may have changed in an object it was handed, as plain data."""
    kind = _stateful(value)
    if kind == "module":
        return {"state": value.state_dict(), "training": {n: m.training for n, m in value.named_modules()},
                "requires_grad": {n: p.requires_grad for n, p in value.named_parameters()}}
    if kind in ("optimizer", "scheduler", "scaler"):
        return value.state_dict()
    if kind == "callback":
        return {name: getattr(value, name) for name in value.observed}
    return None


def restore_state(value, state) -> None:
    """Put the observer's record of ``value`` into the judge's own object."""
    kind = _stateful(value)
    if kind is None or state is None:
        return
    if kind == "module":
        value.load_state_dict(state["state"])
        for name, module in value.named_modules():
            module.training = bool(state["training"].get(name, module.training))
        for name, p in value.named_parameters():
            p.requires_grad_(bool(state["requires_grad"].get(name, p.requires_grad)))
    elif kind == "scheduler":
        own = value.state_dict()
        value.load_state_dict({k: v for k, v in state.items() if k in own})
    elif kind == "callback":
        for name in value.observed:
            setattr(value, name, state[name])
    else:
        value.load_state_dict(state)


def folder_files(folder: Path) -> dict | None:
    """Relative path -> bytes of every regular file under ``folder`` (empty folders as None); None when too big."""
    files, total = {}, 0
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            continue
        if path.is_dir():
            files[rel] = None
        elif path.is_file():
            total += path.stat().st_size
            if total > MAX_FOLDER:
                return None
            files[rel] = path.read_bytes()
    return files


def make_folder_match(folder: Path, files: dict) -> None:
    """Make ``folder`` hold exactly ``files`` (as :func:`folder_files` listed them), and nothing outside it."""
    for rel in files:
        parts = PurePath(rel).parts
        if not parts or PurePath(rel).is_absolute() or ".." in parts:
            raise EvidenceError(f"a file outside the folder: {rel!r}")
    try:
        for path in sorted(folder.rglob("*"), reverse=True):
            if str(path.relative_to(folder)) not in files or path.is_symlink():
                path.unlink() if not path.is_dir() or path.is_symlink() else os.rmdir(path)
        for rel, data in sorted(files.items()):
            target = folder / rel
            if data is None:
                target.mkdir(parents=True, exist_ok=True)
            elif isinstance(data, (bytes, bytearray)):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            else:
                raise EvidenceError(f"file {rel!r} is not bytes")
    except OSError as exc:
        raise EvidenceError(f"the folder's files: {exc}") from None
