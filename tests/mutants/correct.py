"""Correct ways of writing the lab's functions, each different from the canonical one: every check must pass them.

Each function is self-contained (only this module's imports), so its source can be pasted into a notebook cell under
the contract's name (see ``tests/mutants/__init__.py``).
"""

import os
import random
import tempfile
from os import replace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

from labutils.checkpoint import capture_rng_state, latest_checkpoint, restore_rng_state
from labutils.data import MEAN, STD, set_position

# --- 00 normalize_images ---------------------------------------------------------------------------------------------


def normalize_canonical(images):
    """(images / 255 - MEAN) / STD, with a channel dimension."""
    return ((images.float() / 255 - MEAN) / STD).unsqueeze(1)


def normalize_indexing(images):
    """Same values via .to(float32), .div and None-indexing."""
    x = images.to(torch.float32).div(255.0)
    x = (x - MEAN) / STD
    return x[:, None]


# --- 01 train_one_epoch ----------------------------------------------------------------------------------------------


def baseline_canonical(model, loader, optimizer, device):
    """The canonical order: clear, forward, loss, backward, step."""
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
    return total / seen


def baseline_zero_after_step(model, loader, optimizer, device):
    """model.zero_grad() right after the step, nn.CrossEntropyLoss, enumerate, len(loader.dataset)."""
    criterion = nn.CrossEntropyLoss()
    model.train()
    loss_sum = 0.0
    for i, (images, labels) in enumerate(loader):
        images, labels = images.to(device), labels.to(device)
        logits = model(images)
        loss = criterion(logits, labels)
        loss.backward()
        optimizer.step()
        model.zero_grad()
        loss_sum += loss.item() * labels.shape[0]
    return loss_sum / len(loader.dataset)


def baseline_while_iter(model, loader, optimizer, device):
    """iter/next in a while loop, set_to_none=False, reduction='sum' divided by the batch size."""
    model.train()
    batches = iter(loader)
    total, count = 0.0, 0
    while True:
        try:
            x, y = next(batches)
        except StopIteration:
            break
        x = x.to(device)
        y = y.to(device)
        optimizer.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y, reduction="sum") / len(y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        count += len(y)
    return total / count


def baseline_manual_clear(model, loader, optimizer, device):
    """Clears .grad by hand and uses log_softmax + nll_loss (which is cross-entropy)."""
    model.train()
    sums = torch.zeros(2, dtype=torch.float64)
    for x, y in loader:
        for p in model.parameters():
            p.grad = None
        log_probs = F.log_softmax(model(x.to(device)), dim=1)
        loss = F.nll_loss(log_probs, y.to(device))
        loss.backward()
        optimizer.step()
        sums += torch.tensor([loss.item() * y.numel(), y.numel()], dtype=torch.float64)
    return (sums[0] / sums[1]).item()


# --- 01 evaluate -----------------------------------------------------------------------------------------------------


def evaluate_canonical(model, loader, device):
    """eval(), no_grad, summed loss and correct counts, train() again."""
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
    return total_loss / seen, correct / seen


def evaluate_collects_on_cpu(model, loader, device):
    """Collects every prediction with .cpu() (as one does on a GPU, to free its memory) and scores them at the end."""
    model.eval()
    losses, predictions, targets = [], [], []
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            losses.append(F.cross_entropy(logits, y.to(device), reduction="sum").cpu())
            predictions.append(logits.argmax(dim=1).cpu())
            targets.append(y)
    model.train()
    n = sum(len(t) for t in targets)
    return float(torch.stack(losses).sum()) / n, float((torch.cat(predictions) == torch.cat(targets)).float().mean())


@torch.inference_mode()
def evaluate_inference_mode(model, loader, device):
    """inference_mode as a decorator, means weighted by batch size, the caller's mode restored."""
    was_training = model.training
    model.eval()
    loss_sum, acc_sum, n = 0.0, 0.0, 0
    for images, labels in loader:
        out = model(images.to(device))
        labels = labels.to(device)
        loss_sum += nn.functional.cross_entropy(out, labels).item() * len(labels)
        acc_sum += (out.argmax(1) == labels).float().mean().item() * len(labels)
        n += len(labels)
    model.train(was_training)
    return loss_sum / n, acc_sum / n



def baseline_closure(model, loader, optimizer, device):
    """optimizer.step(closure): the closure clears, runs forward and backward, and returns the loss (issue 45: the
    check once recorded the step before the closure's forward and crashed)."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)

        def closure():
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        loss = optimizer.step(closure)
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def baseline_step_at_top(model, loader, optimizer, device):
    """The step at the top of the loop body applies the previous batch's gradients (the first one has none and
    changes nothing); one more step after the loop."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        optimizer.step()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        total += loss.item() * len(y)
        seen += len(y)
    optimizer.step()
    return total / seen


def baseline_autograd_grad(model, loader, optimizer, device):
    """torch.autograd.grad, its result assigned to .grad: nothing accumulates, so nothing needs clearing."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    total, seen = 0.0, 0
    for x, y in loader:
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen

# --- 02 scheduler ----------------------------------------------------------------------------------------------------


def scheduler_canonical(model, loader, optimizer, scheduler, device):
    """As 01, plus scheduler.step() after every optimizer.step()."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def scheduler_zero_after_step(model, loader, optimizer, scheduler, device):
    """zero_grad and scheduler after the step, in the other order."""
    model.train()
    losses = []
    for x, y in loader:
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        losses.append((loss.item(), len(y)))
    return sum(value * n for value, n in losses) / sum(n for _, n in losses)


# --- 03 clipping -----------------------------------------------------------------------------------------------------


def clipping_canonical(model, loader, optimizer, scheduler, max_norm, device):
    """torch.nn.utils.clip_grad_norm_ between backward and step; the pre-clip norm it returns is logged."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        scheduler.step()
        norms.append(norm.item())
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def clipping_nn_utils(model, loader, optimizer, scheduler, max_norm, device):
    """nn.utils.clip_grad_norm_, zero_grad after the step, float(norm)."""
    model.train()
    loss_sum, n, norms = 0.0, 0, []
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = nn.CrossEntropyLoss()(model(images), labels)
        loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        loss_sum += loss.item() * len(labels)
        n += len(labels)
    return loss_sum / n, norms


def clipping_imported(model, loader, optimizer, scheduler, max_norm, device):
    """from torch.nn.utils import clip_grad_norm_, a list of params, iter/next."""
    model.train()
    params = list(model.parameters())
    it = iter(loader)
    total, seen, norms = 0.0, 0, []
    for _ in range(len(loader)):
        x, y = next(it)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        norms.append(clip_grad_norm_(params, max_norm).item())
        optimizer.step()
        scheduler.step()
        total += loss.item() * y.size(0)
        seen += y.size(0)
    return total / seen, norms



def clipping_closure(model, loader, optimizer, scheduler, max_norm, device):
    """optimizer.step(closure) with the clipping inside the closure, after backward; the norm kept from it."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)

        def closure():
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            return loss

        loss = optimizer.step(closure)
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms

# --- 04 accumulation -------------------------------------------------------------------------------------------------


def accumulation_canonical(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Loss / accum_steps always (the trailing group is scaled by 1/accum_steps, as Lightning does)."""
    model.train()
    total, seen, norms = 0.0, 0, []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        (loss / accum_steps).backward()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return total / seen, norms


def accumulation_exact_trailing(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Divides by the real size of each window (so the trailing group is a true mean); micro_step counter."""
    model.train()
    n_batches = len(loader)
    micro_step, loss_sum, n, norms = 0, 0.0, 0, []
    for x, y in loader:
        window_start = micro_step - micro_step % accum_steps
        window = min(accum_steps, n_batches - window_start)
        if micro_step == window_start:
            optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        (loss / window).backward()
        micro_step += 1
        loss_sum += loss.item() * len(y)
        n += len(y)
        if micro_step - window_start == window:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
    return loss_sum / n, norms


def accumulation_groups(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Takes explicit groups of micro-batches from an iterator in a while loop."""
    model.train()
    batches = iter(loader)
    total, seen, norms = 0.0, 0, []
    more = True
    while more:
        taken = 0
        optimizer.zero_grad()
        while taken < accum_steps:
            try:
                x, y = next(batches)
            except StopIteration:
                more = False
                break
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            (loss / accum_steps).backward()
            total += loss.item() * len(y)
            seen += len(y)
            taken += 1
        if taken > 0:
            norms.append(nn.utils.clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
    return total / seen, norms



def accumulation_divides_grads(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Plain loss.backward(), then the window's summed gradients divided by its size before clipping (the same
    update as dividing each loss; issue 45: the check once said the loss was not divided)."""
    model.train()
    total, seen, norms, in_window = 0.0, 0, [], 0
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        in_window += 1
        total += loss.item() * len(y)
        seen += len(y)
        if in_window == accum_steps or i + 1 == len(loader):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad /= in_window
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            in_window = 0
    return total / seen, norms

# --- 05 amp ----------------------------------------------------------------------------------------------------------


def amp_canonical(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """autocast around forward and loss; scale, unscale_, clip, scaler.step, update; plain path without a scaler."""
    model.train()
    device_type = torch.device(device).type
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
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
    return total / seen, norms


def amp_flags(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """autocast(enabled=True) with keywords and its device_type by a test on the string, a use_scaler flag, zero_grad
    after the step."""
    model.train()
    use_scaler = scaler is not None
    loss_sum, n, norms = 0.0, 0, []
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        with torch.autocast(device_type="cuda" if "cuda" in str(device) else "cpu", dtype=amp_dtype, enabled=True):
            logits = model(images)
            loss = nn.functional.cross_entropy(logits, labels)
        (scaler.scale(loss) if use_scaler else loss).backward()
        if use_scaler:
            scaler.unscale_(optimizer)
        norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        if use_scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        loss_sum += loss.item() * len(labels)
        n += len(labels)
    return loss_sum / n, norms


def amp_skip_aware(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """As Hugging Face's Trainer: the scheduler steps, and the norm is logged, only when the scaler did not skip the
    optimizer step (a smaller scale after update() means it did)."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        with torch.autocast(torch.device(device).type, dtype=amp_dtype):
            loss = F.cross_entropy(model(x), y)
        stepped = True
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            norm = clip_grad_norm_(model.parameters(), max_norm)
            scale = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            stepped = scaler.get_scale() >= scale
        else:
            loss.backward()
            norm = clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if stepped:
            scheduler.step()
            norms.append(norm.item())
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


# --- 06 checkpointing ------------------------------------------------------------------------------------------------


def save_canonical(path, model, optimizer, scheduler, scaler, step):
    """Every state in one dict, written to a temp file beside the target, then os.replace."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": step,
        "rng": capture_rng_state(),
    }
    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_canonical(path, model, optimizer, scheduler, scaler):
    """Restore all of it, strictly, RNG included; return the step."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_state(state["rng"])
    return state["step"]


def save_nested(path, model, optimizer, scheduler, scaler, step):
    """Other key names, nested dicts, the RNG states under another key, a hidden temp name, os.rename."""
    folder, name = os.path.split(os.fspath(path))
    tmp = os.path.join(folder, "." + name + ".partial")
    states = {"net": model.state_dict(), "optim": optimizer.state_dict(), "sched": scheduler.state_dict()}
    if scaler is not None:
        states["grad_scaler"] = scaler.state_dict()
    torch.save({"states": states, "meta": {"global_step": step, "generators": capture_rng_state()}}, tmp)
    os.rename(tmp, path)


def load_nested(path, model, optimizer, scheduler, scaler):
    """The other half of save_nested."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["states"]["net"], strict=True)
    optimizer.load_state_dict(ckpt["states"]["optim"])
    scheduler.load_state_dict(ckpt["states"]["sched"])
    if scaler is not None:
        scaler.load_state_dict(ckpt["states"]["grad_scaler"])
    restore_rng_state(ckpt["meta"]["generators"])
    return int(ckpt["meta"]["global_step"])



def save_replace_imported(path, model, optimizer, scheduler, scaler, step):
    """`from os import replace` (bound before any check runs), mkstemp in the folder of a str or a Path, fsync
    (issue 45: the check once missed the rename and said the file was written in place)."""
    folder, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "scaler": None if scaler is None else scaler.state_dict(),
                    "step": step, "rng": capture_rng_state()}, f)
        f.flush()
        os.fsync(f.fileno())
    replace(tmp, path)


def save_own_rng(path, model, optimizer, scheduler, scaler, step):
    """Every generator captured by hand under keys of its own, NumPy's keys as a list (issue 45: the check once saw
    torch's state only)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": None if scaler is None else scaler.state_dict(), "step": step,
             "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
             "numpy_rng": (kind, keys.tolist(), pos, has_gauss, gauss)}
    tmp = os.fspath(path) + ".partial"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_own_rng(path, model, optimizer, scheduler, scaler):
    """The other half of save_own_rng."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    kind, keys, pos, has_gauss, gauss = state["numpy_rng"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    return state["step"]

# lab 7's loops call the student's own lab 6 pair by its contract names (pasted above them in lab 7's notebook)
save_checkpoint, load_checkpoint = save_canonical, load_canonical


# --- 07 crash and resume ---------------------------------------------------------------------------------------------


def resume_canonical(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """Resume from the newest checkpoint, continue mid-epoch, save every save_every steps, then call on_step."""
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
                on_step(step, loss.item())
    return step


def resume_while(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """A global-step while loop; epoch and start batch from divmod."""
    per_epoch = len(train_loader)
    total = epochs * per_epoch
    latest = latest_checkpoint(ckpt_dir)
    step = 0 if latest is None else load_checkpoint(latest, model, optimizer, scheduler, None)
    model.train()
    while step < total:
        epoch, start_batch = divmod(step, per_epoch)
        set_position(train_loader, epoch, start_batch)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % save_every == 0:
                save_checkpoint(f"{ckpt_dir}/step-{step:06d}.pt", model, optimizer, scheduler, None, step)
            if on_step:
                on_step(step, loss.item())
    return step



def resume_unpadded_names(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                          on_step=None):
    """step-8.pt, not step-000008.pt: latest_checkpoint reads the step in either (issue 45: the check once looked
    for the padded name in its own folder and crashed)."""
    latest = latest_checkpoint(ckpt_dir)
    step = 0 if latest is None else load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, step % per_epoch if epoch == step // per_epoch else 0)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % save_every == 0:
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_loads_by_hand(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                         on_step=None):
    """Reads the newest checkpoint with torch.load itself (the lab 6 layout: model, optimizer, scheduler, step, rng)
    and restores each part, map_location included (issue 45: it once met the check's marker file); one more save at
    the end of training."""
    step, latest = 0, latest_checkpoint(ckpt_dir)
    if latest is not None:
        state = torch.load(latest, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        restore_rng_state(state["rng"])
        step = int(state["step"])
    per_epoch = len(train_loader)
    model.train()
    while step < epochs * per_epoch:
        epoch, start = divmod(step, per_epoch)
        set_position(train_loader, epoch, start)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % save_every == 0:
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    if step % save_every:
        save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
    return step


def _resume_point(ckpt_dir, model, optimizer, scheduler):
    """The step to continue from: the newest checkpoint's, loaded, or 0."""
    latest = latest_checkpoint(ckpt_dir)
    return 0 if latest is None else load_checkpoint(latest, model, optimizer, scheduler, None)


def _save_if_due(ckpt_dir, step, save_every, model, optimizer, scheduler):
    if step % save_every == 0:
        save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)


def resume_helpers(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """Loads and saves through helper functions of the notebook (issue 45: the check's pair once reached only the
    loop itself, so the helpers called the student's own lab 6 pair)."""
    step = _resume_point(ckpt_dir, model, optimizer, scheduler)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, step % per_epoch if epoch == step // per_epoch else 0)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            _save_if_due(ckpt_dir, step, save_every, model, optimizer, scheduler)
            if on_step is not None:
                on_step(step, loss.item())
    return step

# --- 08 param_groups -------------------------------------------------------------------------------------------------


def param_groups_canonical(model, weight_decay):
    """Decay on every parameter with ndim > 1, none on ndim <= 1."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def param_groups_by_module(model, weight_decay):
    """Walks the modules: conv/linear weights decayed, their biases and every normalisation parameter not."""
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if isinstance(module, (nn.Conv2d, nn.Linear)) and name == "weight":
                decay.append(p)
            else:
                no_decay.append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def param_groups_generators(model, weight_decay):
    """Generator expressions over named_parameters(), read by AdamW once (issue 45: the grader once sent them as an
    opaque object and accused the answer of tampering)."""
    named = list(model.named_parameters())
    return [{"params": (p for _, p in named if p.ndim > 1), "weight_decay": weight_decay},
            {"params": (p for _, p in named if p.ndim <= 1), "weight_decay": 0.0}]


def param_groups_filter(model, weight_decay):
    """filter() over parameters() (an iterator), the no-decay group first."""
    return [{"params": filter(lambda p: p.ndim <= 1, model.parameters()), "weight_decay": 0.0},
            {"params": filter(lambda p: p.ndim > 1, model.parameters()), "weight_decay": weight_decay}]
