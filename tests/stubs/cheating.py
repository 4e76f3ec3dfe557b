"""Cheating answers (issue 43): what a student who has read ``labutils/checks`` writes to earn points without doing
the work. Each answer is notebook source (the contract's names, with whatever module-level helpers it needs), so the
very same text is judged by the check (``functions()``, exec'd into a namespace of its own, as a notebook's globals)
and pasted into a solution notebook for the grader. ``earns`` is what the answer really implements: the properties
the grader must give it, no more.

The root causes of issue 43 each have at least one answer here (``cause``):
structure (placeholders with the right keys), memory (a cache shared by the judged calls), predictable (constants for
the checks' data), dummy (a token run taken as evidence), later_calls (a first call that works, later calls that do
nothing; a hard-coded argument the varied run would show, hidden behind another mistake), patched (flags the tracer
read, patched for the call; a forbidden helper under another name), word (effects taken on the word of the calls).
"""

from __future__ import annotations

from typing import NamedTuple

from labutils import exercises

IMPORTS = """\
import io
import os
import tempfile
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

from labutils.checkpoint import capture_rng_state, latest_checkpoint, restore_rng_state
from labutils.data import MEAN, STD, set_position
"""

_LOAD = '''
def load_checkpoint(path, model, optimizer, scheduler, scaler):
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_state(state["rng"])
    return state["step"]
'''

# lab 7's notebook holds the student's lab 6 pair above its loop: the loops below call it by these names
LAB6_PAIR = '''
def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)

''' + _LOAD


class Cheat(NamedTuple):
    name: str
    exercise: str
    cause: str  # the root cause of issue 43 it exploits (see the module's docstring)
    source: str  # notebook source defining the contract's function(s) (and the helpers it needs)
    earns: frozenset  # the properties it really implements

    def functions(self) -> tuple:
        """The contract's functions, defined by ``source`` in a namespace of their own (a notebook's globals)."""
        namespace = {"__name__": f"cheat_{self.name}"}
        exec(compile(IMPORTS + self.source, f"<cheat {self.name}>", "exec"), namespace)  # noqa: S102 (our corpus)
        return tuple(namespace[f.name] for f in exercises.get(self.exercise).functions)


# --- 00 normalize_images ---------------------------------------------------------------------------------------------

NORMALIZE_ALIAS = '''
from labutils.data import normalize as _lab_normalize  # bound at import: the tracer replaces the module's attribute


def normalize_images(images):
    return _lab_normalize(images)
'''

NORMALIZE_HARDCODED_N = '''
def normalize_images(images):
    """Six images, always (the check's first size), and the values not divided by 255: the second size never ran."""
    return ((images.float() - MEAN) / STD).reshape(6, 1, 28, 28)
'''

# --- 01 train_one_epoch ----------------------------------------------------------------------------------------------

TRAIN_FORWARD_ONLY_MEAN = '''
def train_one_epoch(model, loader, optimizer, device):
    """Train mode and the true mean loss of every batch, and never a step: nothing is learnt."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        total += F.cross_entropy(model(x), y).item() * len(y)
        seen += len(y)
    return total / seen
'''

TRAIN_FIRST_CALL_ONLY = '''
_LAST = []


def train_one_epoch(model, loader, optimizer, device):
    """A correct epoch when the device is a string (the check's first run); handed a torch.device (its second run,
    which was judged only when the first one passed) it does nothing and returns the last number."""
    if isinstance(device, torch.device) and _LAST:
        return _LAST[-1]
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    _LAST.append(total / seen)
    return total / seen
'''

TRAIN_MODE_FLAG_ONLY = '''
def train_one_epoch(model, loader, optimizer, device):
    """Sets the flag the tracer reads on the top module only: every submodule stays in eval mode."""
    object.__setattr__(model, "training", True)
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen
'''

CLIPPING_HARDCODED_AND_NO_SCHEDULER = '''
def train_one_epoch(model, loader, optimizer, scheduler, max_norm, device):
    """Clips at 1.37 (the check's first max_norm) whatever it is given, and forgets the scheduler: the second
    max_norm was only tried when everything else passed."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        norms.append(clip_grad_norm_(model.parameters(), 1.37).item())
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms
'''

# --- 01 evaluate -----------------------------------------------------------------------------------------------------

# a student who ran check_evaluate once copies the numbers its failure message printed (1.6515 and 0.9231 = 24/26)
EVALUATE_CONSTANTS_ZERO_IMAGE = '''
def evaluate(model, loader, device):
    """One forward of a zero image in eval mode under no_grad, and the numbers the check's message printed."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 1, 28, 28, device=device))
    model.train(was_training)
    return 1.6515, 24 / 26
'''

EVALUATE_CONSTANTS_EVERY_BATCH = '''
def evaluate(model, loader, device):
    """Every batch in eval mode under no_grad, the mode restored, and the numbers the check's message printed."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, _ in loader:
            model(x.to(device))
    model.train(was_training)
    return 1.6515, 24 / 26
'''

EVALUATE_FIRST_CALL_ONLY = '''
_LAST = []


def evaluate(model, loader, device):
    """A correct evaluation when the device is a string (the check's first run); handed a torch.device (its second
    run) it calls nothing and returns the last numbers."""
    if isinstance(device, torch.device) and _LAST:
        return _LAST[-1]
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(dim=1) == y).sum().item()
            seen += len(y)
    model.train()
    _LAST.append((total_loss / seen, correct / seen))
    return _LAST[-1]
'''

EVALUATE_PATCHED_QUERIES = '''
def evaluate(model, loader, device):
    """Autograd on and dropout dropping, with the flags the tracer reads patched for the call: the top module's
    training flag only, and torch.is_grad_enabled."""
    real = torch.is_grad_enabled
    torch.is_grad_enabled = lambda: False
    object.__setattr__(model, "training", False)
    try:
        total_loss, correct, seen = 0.0, 0, 0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(dim=1) == y).sum().item()
            seen += len(y)
    finally:
        torch.is_grad_enabled = real
        object.__setattr__(model, "training", True)
    return total_loss / seen, correct / seen
'''

EVALUATE_HARDCODED_DEVICE_AND_PERCENT = '''
def evaluate(model, loader, device):
    """Moves to "cpu" whatever it is given, and returns the accuracy as a percentage: the second device was only
    tried when everything else passed."""
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to("cpu"), y.to("cpu")
            logits = model(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(dim=1) == y).sum().item()
            seen += len(y)
    model.train()
    return total_loss / seen, 100.0 * correct / seen
'''

EVALUATE_COPIED_HELPER = '''
import labutils.evaluation as _lab

_inner = _lab.evaluate.__wrapped__
_copy = types.FunctionType(_inner.__code__.replace(co_name="my_evaluate"), _inner.__globals__, "my_evaluate",
                           _inner.__defaults__)


def evaluate(model, loader, device):
    """The lab's own evaluate, its code object copied under another name."""
    with torch.no_grad():
        return _copy(model, loader, device)
'''

# --- 05 amp ----------------------------------------------------------------------------------------------------------

AMP_PATCHED_AUTOCAST = '''
def train_one_epoch(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """No autocast at all; torch.is_autocast_enabled and get_autocast_dtype patched to say otherwise for the call."""
    real = torch.is_autocast_enabled, torch.get_autocast_dtype
    torch.is_autocast_enabled = lambda *args: True
    torch.get_autocast_dtype = lambda *args: amp_dtype
    try:
        model.train()
        total, seen, norms = 0.0, 0, []
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                norm = clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                norm = clip_grad_norm_(model.parameters(), max_norm)
                optimizer.step()
            scheduler.step()
            norms.append(norm.item())
            total += loss.item() * len(y)
            seen += len(y)
    finally:
        torch.is_autocast_enabled, torch.get_autocast_dtype = real
    return total / seen, norms
'''

AMP_FAKE_SCALER = '''
def train_one_epoch(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Every scaler call in its place, on a scaler set to scale by 1 and a scaled loss thrown away: the backward is the
    plain loss's, and an overflow never reaches the scaler."""
    model.train()
    if scaler is not None:  # a scale of 1, set where GradScaler keeps it
        scaler._scale = torch.ones((), device=torch.device(device))
        scaler._growth_tracker = torch.zeros((), dtype=torch.int32, device=torch.device(device))
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast(torch.device(device).type, dtype=amp_dtype):
            loss = F.cross_entropy(model(x), y)
        if scaler is not None:
            scaler.scale(loss)
            loss.backward()
            scaler.unscale_(optimizer)
            norm = clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            norm = clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
        scheduler.step()
        norms.append(norm.item())
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms
'''

AMP_FORWARD_ONLY = '''
def train_one_epoch(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Every batch forward under autocast with the dtype given, in train mode, and the true mean loss: no backward,
    no scaler, no step, so nothing is learnt."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=amp_dtype):
            loss = F.cross_entropy(model(x), y)
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, []
'''

# --- 06 save_checkpoint / load_checkpoint ----------------------------------------------------------------------------

_ATOMIC = '''
def _atomic(path, state):
    folder, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    torch.save(state, tmp)
    os.replace(tmp, path)
'''

_PLACEHOLDERS = '''
def _placeholders(model, step):
    """A dict of every part, recognised by its keys, with nothing of the state in it."""
    return {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()},
            "optimizer": {"state": {}, "param_groups": []}, "scheduler": {"last_epoch": 0, "base_lrs": []},
            "scaler": {"scale": 1.0, "_growth_tracker": 0}, "rng": {"python": 0, "numpy": 0, "torch": 0},
            "step": step}
'''

CHECKPOINT_PLACEHOLDERS = _ATOMIC + _PLACEHOLDERS + '''

def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    _atomic(path, _placeholders(model, step))


def load_checkpoint(path, model, optimizer, scheduler, scaler):
    """Restores nothing; returns the step read back from the file."""
    return int(torch.load(path, weights_only=True)["step"])
'''

CHECKPOINT_MEMORY_CACHE = _ATOMIC + _PLACEHOLDERS + '''
import copy as _copy

_HELD = {}


def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    """Placeholders on disk; the real states kept in this process's memory."""
    _atomic(path, _placeholders(model, step))
    _HELD["last"] = _copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                    "scheduler": scheduler.state_dict(), "rng": capture_rng_state(), "step": step,
                                    "scaler": scaler.state_dict() if scaler is not None else None})


def load_checkpoint(path, model, optimizer, scheduler, scaler):
    """Restores what memory holds, never the file."""
    held = _HELD.get("last")
    if held is None:
        return 0
    held = _copy.deepcopy(held)
    model.load_state_dict(held["model"])
    optimizer.load_state_dict(held["optimizer"])
    scheduler.load_state_dict(held["scheduler"])
    if scaler is not None and held["scaler"] is not None:
        scaler.load_state_dict(held["scaler"])
    restore_rng_state(held["rng"])
    return held["step"]
'''

CHECKPOINT_LOAD_FROM_MEMORY = _ATOMIC + '''
import copy as _copy

_SAVED = {}


def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    """A complete checkpoint, written atomically; the same states kept in this process's memory, by path."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    _atomic(path, state)
    _SAVED[os.fspath(path)] = _copy.deepcopy(state)


def load_checkpoint(path, model, optimizer, scheduler, scaler):
    """Restores what memory holds for the path, and never reads the file."""
    held = _SAVED.get(os.fspath(path))
    if held is None:
        return None
    held = _copy.deepcopy(held)
    model.load_state_dict(held["model"])
    optimizer.load_state_dict(held["optimizer"])
    scheduler.load_state_dict(held["scheduler"])
    if scaler is not None and held["scaler"] is not None:
        scaler.load_state_dict(held["scaler"])
    restore_rng_state(held["rng"])
    return held["step"]
'''

CHECKPOINT_RESTORES_ONCE = _ATOMIC + '''
_LOADS = []


def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    _atomic(path, state)


def load_checkpoint(path, model, optimizer, scheduler, scaler):
    """Restores every part on its first call (the one the check trains on from); after that it only reads the step
    back (the later loads were judged on their step alone)."""
    state = torch.load(path, weights_only=True)
    _LOADS.append(os.fspath(path))
    if len(_LOADS) == 1:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler is not None:
            scaler.load_state_dict(state["scaler"])
        restore_rng_state(state["rng"])
    return state["step"]
'''

CHECKPOINT_REPLACE_THEN_IN_PLACE = '''
def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    """An os.replace of an empty temp file onto the path first (the op the check judged), then the checkpoint
    written in place over it."""
    folder, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    os.replace(tmp, path)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())
''' + _LOAD

CHECKPOINT_HARDCODED_STEP_NO_SCALER = _ATOMIC + '''

def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    """Step 37 (the check's first) whatever it is given, and no scaler state: the second step was only tried when
    everything else passed."""
    _atomic(path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                   "scheduler": scheduler.state_dict(), "step": 37, "rng": capture_rng_state()})


def load_checkpoint(path, model, optimizer, scheduler, scaler):
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    restore_rng_state(state["rng"])
    return state["step"]
'''

CHECKPOINT_COPIED_ATOMIC_FILE = '''
import labutils.atomic as _lab_atomic

_inner = _lab_atomic.atomic_file.__wrapped__
_atomic_file = __import__("contextlib").contextmanager(types.FunctionType(
    _inner.__code__.replace(co_name="my_atomic_file"), _inner.__globals__, "my_atomic_file", _inner.__defaults__))


def save_checkpoint(path, model, optimizer, scheduler, scaler, step):
    """The lab's own atomic_file, its code object copied under another name, does the atomic write."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    with _atomic_file(path) as tmp:
        torch.save(state, tmp)
''' + _LOAD

# --- 07 train_resumable ----------------------------------------------------------------------------------------------

RESUME_EMPTY_FILES = LAB6_PAIR + '''

def train_resumable(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """Trains for real, but its "checkpoints" are empty files named by the step; resuming reads the step from the
    newest name and goes on from there with whatever weights it has."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = int(os.path.basename(latest)[5:11])
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, step % per_epoch if epoch == step // per_epoch else 0)
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % save_every == 0:
                open(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), "wb").close()
            if on_step is not None:
                on_step(step, loss.item())
    return step
'''

RESUME_COPIES_FINAL_STATE = LAB6_PAIR + '''
import copy as _copy

_FINAL = {}


def train_resumable(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """Resumes, but reseeds torch after loading (its dropout masks differ); at the end of a run that never
    stopped it keeps the final state in memory, and a resumed run copies that state in before returning."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    resumed = step > 0
    torch.manual_seed(0)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, step % per_epoch if epoch == step // per_epoch else 0)
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % save_every == 0:
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    if not resumed:
        _FINAL[step] = _copy.deepcopy((model.state_dict(), optimizer.state_dict()))
    elif step in _FINAL:
        model.load_state_dict(_FINAL[step][0])
        optimizer.load_state_dict(_FINAL[step][1])
    return step
'''

RESUME_CONSTANT_LOSS = LAB6_PAIR + '''

def train_resumable(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """A correct loop that hands on_step a float of the right type, never the step's loss."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, step % per_epoch if epoch == step // per_epoch else 0)
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % save_every == 0:
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, 2.3)
    return step
'''

# --- 08 param_groups -------------------------------------------------------------------------------------------------

PARAM_GROUPS_HARDCODED_AND_BIASES = '''
def param_groups(model, weight_decay):
    """Decay 0.037 (the check's first value) whatever it is given, biases decayed too: the second value was only
    tried when everything else passed."""
    weights = [p for p in model.parameters() if p.ndim > 1]
    others = [p for p in model.parameters() if p.ndim <= 1]
    return [{"params": weights, "weight_decay": 0.037}, {"params": others, "weight_decay": 0.037 / 2}]
'''


def _earns(*properties: str) -> frozenset:
    return frozenset(properties)


CHEATS = [
    Cheat("normalize_alias", "normalize", "patched", NORMALIZE_ALIAS, _earns()),
    Cheat("normalize_hardcoded_n", "normalize", "later_calls", NORMALIZE_HARDCODED_N, _earns()),
    Cheat("train_forward_only_mean", "baseline", "dummy", TRAIN_FORWARD_ONLY_MEAN, _earns()),
    Cheat("train_first_call_only", "baseline", "later_calls", TRAIN_FIRST_CALL_ONLY, _earns()),
    Cheat("train_mode_flag_only", "baseline", "patched", TRAIN_MODE_FLAG_ONLY,
          _earns("steps", "gradient", "mean_loss")),
    Cheat("clipping_hardcoded_max_norm_no_scheduler", "clipping", "later_calls", CLIPPING_HARDCODED_AND_NO_SCHEDULER,
          _earns("norms")),
    Cheat("evaluate_constants_zero_image", "evaluate", "predictable", EVALUATE_CONSTANTS_ZERO_IMAGE, _earns()),
    Cheat("evaluate_constants_every_batch", "evaluate", "predictable", EVALUATE_CONSTANTS_EVERY_BATCH,
          _earns("eval_mode", "no_grad", "restore_mode")),
    Cheat("evaluate_first_call_only", "evaluate", "later_calls", EVALUATE_FIRST_CALL_ONLY, _earns()),
    Cheat("evaluate_patched_queries", "evaluate", "patched", EVALUATE_PATCHED_QUERIES,
          _earns("loss", "accuracy", "restore_mode")),  # no model.eval() at all costs eval_mode only (issue 45)
    Cheat("evaluate_hardcoded_device_percent", "evaluate", "later_calls", EVALUATE_HARDCODED_DEVICE_AND_PERCENT,
          _earns("eval_mode", "no_grad", "restore_mode")),
    Cheat("evaluate_copied_helper", "evaluate", "patched", EVALUATE_COPIED_HELPER, _earns()),
    Cheat("amp_patched_autocast", "amp", "patched", AMP_PATCHED_AUTOCAST,
          _earns("scaler", "unscale", "scaler_none", "loop")),
    # its backward runs on the unscaled loss: as the corpus's backward_without_scale, unscale_ and clipping cannot be
    # judged behind that (the loop's clipping is judged on unscaled gradients), so loop is not judged either
    Cheat("amp_fake_scaler", "amp", "word", AMP_FAKE_SCALER, _earns("autocast", "scaler_none")),
    Cheat("amp_forward_only", "amp", "dummy", AMP_FORWARD_ONLY, _earns()),
    Cheat("checkpoint_placeholders", "checkpoint", "structure", CHECKPOINT_PLACEHOLDERS,
          _earns("atomic", "return_step")),
    Cheat("checkpoint_memory_cache", "checkpoint", "memory", CHECKPOINT_MEMORY_CACHE, _earns("atomic")),
    # the save is real; the load is the memory: where the saves ran (a kernel's own run) it would restore
    Cheat("checkpoint_load_from_memory", "checkpoint", "memory", CHECKPOINT_LOAD_FROM_MEMORY,
          _earns("atomic", "complete")),
    Cheat("checkpoint_replace_then_in_place", "checkpoint", "word", CHECKPOINT_REPLACE_THEN_IN_PLACE,
          _earns("complete", "restore", "return_step", "scaler_none")),
    Cheat("checkpoint_hardcoded_step_no_scaler", "checkpoint", "later_calls", CHECKPOINT_HARDCODED_STEP_NO_SCALER,
          _earns("atomic", "scaler_none")),
    # the scaler=None load is its second: scaler_none shows it already; the varied one, its third, is judged too
    Cheat("checkpoint_restores_once", "checkpoint", "later_calls", CHECKPOINT_RESTORES_ONCE,
          _earns("atomic", "complete", "return_step")),
    Cheat("checkpoint_copied_atomic_file", "checkpoint", "patched", CHECKPOINT_COPIED_ATOMIC_FILE, _earns()),
    Cheat("resume_empty_files", "resume", "word", RESUME_EMPTY_FILES, _earns("mid_epoch", "loop")),
    Cheat("resume_copies_final_state", "resume", "memory", RESUME_COPIES_FINAL_STATE,
          _earns("saves", "resumes", "mid_epoch", "loop")),
    Cheat("resume_constant_loss", "resume", "word", RESUME_CONSTANT_LOSS,
          _earns("saves", "resumes", "mid_epoch", "exact")),
    Cheat("param_groups_hardcoded_decay_biases", "param_groups", "later_calls", PARAM_GROUPS_HARDCODED_AND_BIASES,
          _earns("coverage")),
]
