"""Buggy versions of the lab's functions: each has one classic mistake, named in its docstring.

``tests/mutants/__init__.py`` says which check each must fail and a piece of the message it must get. Each function is
self-contained (only this module's imports), so its source can be pasted into a notebook cell under the contract's
name.
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

from labutils import atomic as lab_atomic
from labutils import evaluation as lab_evaluation
from labutils.checkpoint import capture_rng_state, latest_checkpoint, restore_rng_state
from labutils.data import MEAN, STD, set_position

from .correct import load_checkpoint, save_checkpoint  # lab 6's pair, pasted above lab 7's loop in its notebook

# --- 00 normalize_images ---------------------------------------------------------------------------------------------


def normalize_no_255(images):
    """Forgets to scale the pixels to [0, 1] first."""
    return ((images.float() - MEAN) / STD).unsqueeze(1)


def normalize_no_channel(images):
    """Right values, but no channel dimension: (N, 28, 28)."""
    return (images.float() / 255 - MEAN) / STD


# --- 01 train_one_epoch ----------------------------------------------------------------------------------------------


def no_zero_grad(model, loader, optimizer, device):
    """Never clears the gradients: every step applies the sum of all batches so far."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def zero_grad_before_step(model, loader, optimizer, device):
    """Clears the gradients between backward and step: the step has nothing to apply."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def step_before_backward(model, loader, optimizer, device):
    """Steps before backward: each update uses the previous batch's gradients."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        optimizer.step()
        loss.backward()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def softmax_before_cross_entropy(model, loader, optimizer, device):
    """Applies softmax to the logits before F.cross_entropy, which applies log-softmax itself."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        probs = F.softmax(model(x), dim=1)
        loss = F.cross_entropy(probs, y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def no_train_mode(model, loader, optimizer, device):
    """Never calls model.train(): after an evaluation it trains in eval mode."""
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


def loss_per_batch(model, loader, optimizer, device):
    """Averages the per-batch mean losses: the small last batch counts as much as a full one."""
    model.train()
    losses = []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def returns_tensor(model, loader, optimizer, device):
    """Sums loss tensors instead of floats: returns a tensor (and keeps every graph alive)."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total = total + loss * len(y)
        seen += len(y)
    return total / seen


def forward_under_no_grad(model, loader, optimizer, device):
    """Runs the training forward inside torch.no_grad(): backward has no graph."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.no_grad():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def skips_last_batch(model, loader, optimizer, device):
    """Stops before the last (smaller) batch."""
    model.train()
    total, seen = 0.0, 0
    for i, (x, y) in enumerate(loader):
        if i == len(loader) - 1:
            break
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen



def sums_loss_tensor(model, loader, optimizer, device):
    """Adds up the loss tensor, not loss.item(): the sum holds every batch's graph until the end of the epoch."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total = total + loss * len(y)
        seen += len(y)
    return total.item() / seen

def missing_device(model, loader, optimizer):
    """Leaves out the device parameter of the contract."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def typo_backwards(model, loader, optimizer, device):
    """Calls loss.backwards(): an AttributeError."""
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backwards()
        optimizer.step()
    return 0.0


def uses_reference_loop(model, loader, optimizer, device):
    """Hands the work to the lab's reference loop (instructor-only: labutils.reference is not in the handout)."""
    from labutils.reference import loop as lab_loop  # here, not at the top: the handout has no labutils.reference

    return lab_loop.train_one_epoch(model, loader, optimizer, None, device=device)


# --- 01 evaluate -----------------------------------------------------------------------------------------------------


def evaluate_no_eval(model, loader, device):
    """Forgets model.eval(): dropout keeps dropping."""
    total_loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            total_loss += F.cross_entropy(logits, y.to(device), reduction="sum").item()
            correct += (logits.argmax(dim=1) == y.to(device)).sum().item()
            seen += len(y)
    return total_loss / seen, correct / seen


def evaluate_no_no_grad(model, loader, device):
    """Forgets torch.no_grad(): every batch builds a graph."""
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    for x, y in loader:
        logits = model(x.to(device))
        total_loss += F.cross_entropy(logits, y.to(device), reduction="sum").item()
        correct += (logits.argmax(dim=1) == y.to(device)).sum().item()
        seen += len(y)
    model.train()
    return total_loss / seen, correct / seen


def evaluate_not_restored(model, loader, device):
    """Leaves the model in eval mode."""
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            total_loss += F.cross_entropy(logits, y.to(device), reduction="sum").item()
            correct += (logits.argmax(dim=1) == y.to(device)).sum().item()
            seen += len(y)
    return total_loss / seen, correct / seen


def evaluate_per_batch(model, loader, device):
    """Averages per-batch means: the small last batch counts as much as a full one."""
    model.eval()
    losses, accs = [], []
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            losses.append(F.cross_entropy(logits, y.to(device)).item())
            accs.append((logits.argmax(dim=1) == y.to(device)).float().mean().item())
    model.train()
    return sum(losses) / len(losses), sum(accs) / len(accs)


def evaluate_percentage(model, loader, device):
    """Returns the accuracy in percent."""
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x.to(device))
            total_loss += F.cross_entropy(logits, y.to(device), reduction="sum").item()
            correct += (logits.argmax(dim=1) == y.to(device)).sum().item()
            seen += len(y)
    model.train()
    return total_loss / seen, 100.0 * correct / seen


def evaluate_uses_reference(model, loader, device):
    """Hands the work to labutils.evaluation.evaluate, the lab's own reference."""
    return lab_evaluation.evaluate(model, loader, device)


# --- 02 scheduler ----------------------------------------------------------------------------------------------------


def scheduler_before_optimizer(model, loader, optimizer, scheduler, device):
    """Steps the scheduler before the optimizer: every step uses the next step's learning rate."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        scheduler.step()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def scheduler_per_epoch(model, loader, optimizer, scheduler, device):
    """Steps the scheduler once per epoch, after the loop."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    scheduler.step()
    return total / seen


# --- 03 clipping -----------------------------------------------------------------------------------------------------


def clip_before_backward(model, loader, optimizer, scheduler, max_norm, device):
    """Clips before backward, when there is nothing to clip yet."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        norm = clip_grad_norm_(model.parameters(), max_norm)
        loss.backward()
        optimizer.step()
        scheduler.step()
        norms.append(norm.item())
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def clip_after_step(model, loader, optimizer, scheduler, max_norm, device):
    """Clips after the step: the update already used the unclipped gradients."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()
        norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def no_clipping(model, loader, optimizer, scheduler, max_norm, device):
    """Measures the norm but never clips."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        norms.append(torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])).item())
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def logs_post_clip_norm(model, loader, optimizer, scheduler, max_norm, device):
    """Logs the norm after clipping instead of the value clip_grad_norm_ returns."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        clip_grad_norm_(model.parameters(), max_norm)
        norms.append(torch.norm(torch.stack([p.grad.norm() for p in model.parameters()])).item())
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def norms_as_tensors(model, loader, optimizer, scheduler, max_norm, device):
    """Appends the norm tensors themselves, not floats."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        norms.append(clip_grad_norm_(model.parameters(), max_norm))
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms



def clip_inf_norm(model, loader, optimizer, scheduler, max_norm, device):
    """Clips the largest single gradient value (norm_type=inf), not the global L2 norm the contract asks for."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        norms.append(clip_grad_norm_(model.parameters(), max_norm, norm_type=float("inf")).item())
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms

def clipping_missing_max_norm(model, loader, optimizer, scheduler, device):
    """The 02 signature in the 03 exercise: max_norm is missing."""
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
        scheduler.step()
    return 0.0, []


# --- 04 accumulation -------------------------------------------------------------------------------------------------


def scheduler_per_micro_batch(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Steps the scheduler after every micro-batch instead of every optimizer step."""
    model.train()
    total, seen, norms = 0.0, 0, []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        (loss / accum_steps).backward()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            optimizer.zero_grad()
    return total / seen, norms


def loss_not_divided(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Sums the micro-batch gradients without dividing the loss by accum_steps."""
    model.train()
    total, seen, norms = 0.0, 0, []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return total / seen, norms



def clip_every_micro_batch(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Divides the loss, but clips after every micro-batch's backward instead of once per optimizer step."""
    model.train()
    total, seen, norms = 0.0, 0, []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        (loss / accum_steps).backward()
        norm = clip_grad_norm_(model.parameters(), max_norm).item()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
            norms.append(norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return total / seen, norms

def steps_every_micro_batch(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Divides the loss but steps after every micro-batch: no accumulation at all."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        (loss / accum_steps).backward()
        norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def drops_trailing_group(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Steps only on full windows: the trailing partial group is backpropagated and then thrown away."""
    model.train()
    total, seen, norms = 0.0, 0, []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        (loss / accum_steps).backward()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % accum_steps == 0:
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return total / seen, norms


def zero_grad_every_micro_batch(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Clears the gradients before every micro-batch: only the last one of each window counts."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        (loss / accum_steps).backward()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
    return total / seen, norms


def reports_scaled_loss(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Returns the mean of the loss already divided by accum_steps."""
    model.train()
    total, seen, norms = 0.0, 0, []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x.to(device)), y.to(device)) / accum_steps
        loss.backward()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return total / seen, norms


# --- 05 amp ----------------------------------------------------------------------------------------------------------


def clip_before_unscale(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Clips the scaled gradients, then unscales: the update comes out 65536x too small."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        if scaler is not None:
            scaler.scale(loss).backward()
            norm = clip_grad_norm_(model.parameters(), max_norm)
            scaler.unscale_(optimizer)
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


def optimizer_step_with_scaler(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Calls optimizer.step() directly although a GradScaler is in use."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
        optimizer.step()
        if scaler is not None:
            scaler.update()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def no_scaler_update(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Forgets scaler.update(): the scale never adapts and the second unscale_ raises."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            scaler.step(optimizer)
        else:
            loss.backward()
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def skipped_step_keeps_gradients(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Clears the gradients only after a step the scaler did not skip: a skipped step's inf gradients stay, and
    every step after it is skipped too."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        stepped = True
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            scale = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            stepped = scaler.get_scale() >= scale
        else:
            loss.backward()
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
        if stepped:
            optimizer.zero_grad()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def no_autocast(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Uses the scaler but never enters torch.autocast."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def backward_without_scale(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Calls loss.backward() on the unscaled loss, then unscale_ divides true gradients by the scale."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=amp_dtype):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        if scaler is not None:
            scaler.unscale_(optimizer)
        norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def amp_mean_leaves_out_skipped_step(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Leaves the loss of a step the scaler skipped out of the mean: it was computed on real data, so it counts."""
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
        if torch.isfinite(norm):  # a skipped step's gradients overflowed: its loss is left out too
            total += loss.item() * len(y)
            seen += len(y)
    return total / seen, norms

# --- 06 checkpointing ------------------------------------------------------------------------------------------------


def save_in_place(path, model, optimizer, scheduler, scaler, step):
    """Complete, but torch.save writes straight to the final path (not atomic)."""
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict() if scaler is not None else None, "step": step,
                "rng": capture_rng_state()}, path)


def save_no_optimizer(path, model, optimizer, scheduler, scaler, step):
    """Leaves out the optimizer state."""
    state = {"model": model.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    torch.save(state, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def load_no_optimizer(path, model, optimizer, scheduler, scaler):
    """The matching load: no optimizer state to restore."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_state(state["rng"])
    return state["step"]


def save_no_scheduler(path, model, optimizer, scheduler, scaler, step):
    """Leaves out the scheduler state."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    torch.save(state, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def load_no_scheduler(path, model, optimizer, scheduler, scaler):
    """The matching load: no scheduler state to restore."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_state(state["rng"])
    return state["step"]


def save_no_scaler(path, model, optimizer, scheduler, scaler, step):
    """Leaves out the GradScaler state."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "step": step, "rng": capture_rng_state()}
    torch.save(state, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def load_no_scaler(path, model, optimizer, scheduler, scaler):
    """The matching load: no scaler state to restore."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    restore_rng_state(state["rng"])
    return state["step"]


def save_no_rng(path, model, optimizer, scheduler, scaler, step):
    """Leaves out the RNG state."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step}
    torch.save(state, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def load_no_rng(path, model, optimizer, scheduler, scaler):
    """The matching load: no RNG state to restore."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    return state["step"]


def save_torch_rng_only(path, model, optimizer, scheduler, scaler, step):
    """Saves torch's RNG state only: Python's, NumPy's and CUDA's generators would not come back."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step,
             "rng": torch.get_rng_state()}
    torch.save(state, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def load_torch_rng_only(path, model, optimizer, scheduler, scaler):
    """The matching load: torch's RNG state only."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"])
    return state["step"]


def load_without_weights_only(path, model, optimizer, scheduler, scaler):
    """torch.load(path) without weights_only: safe only where its default is True (torch 2.6 on)."""
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_state(state["rng"])
    return state["step"]


def load_restores_torch_rng_only(path, model, optimizer, scheduler, scaler):
    """Restores torch's RNG state only, from a complete checkpoint."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    return state["step"]

def load_forgets_scheduler(path, model, optimizer, scheduler, scaler):
    """The file is complete, but loading skips the scheduler."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_state(state["rng"])
    return state["step"]


def save_pickles_objects(path, model, optimizer, scheduler, scaler, step):
    """Saves the model object itself: torch.load(weights_only=True) refuses it."""
    state = {"model": model, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    torch.save(state, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def save_scaler_required(path, model, optimizer, scheduler, scaler, step):
    """Calls scaler.state_dict() even when scaler is None."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict(), "step": step, "rng": capture_rng_state()}
    torch.save(state, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)


def load_returns_dict(path, model, optimizer, scheduler, scaler):
    """Restores everything but returns the whole dict instead of the step."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng_state(state["rng"])
    return state


def save_uses_reference(path, model, optimizer, scheduler, scaler, step):
    """Hands the atomic write to the lab's own atomic_file (a shipped helper, not the exercise's answer)."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    with lab_atomic.atomic_file(path) as f:
        torch.save(state, f)


# --- 07 crash and resume ---------------------------------------------------------------------------------------------


def resume_off_by_one(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """Counts the loaded step as already done once more: resumes one step too late."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None) + 1
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
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_restarts_epoch(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                          on_step=None):
    """Resumes at the right step but starts the epoch from its first batch again."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, 0)
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
            if step == epochs * per_epoch:
                return step
    return step


def resume_forgets_rng(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """Seeds torch after loading, as a fresh start would: the RNG state the checkpoint brought back is thrown away,
    so the dropout masks after resuming differ."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    torch.manual_seed(0)
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
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_never_loads(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    """Saves checkpoints but never looks for one: every run starts from scratch."""
    step = 0
    model.train()
    for epoch in range(epochs):
        set_position(train_loader, epoch, 0)
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
    return step


def resume_saves_after_on_step(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                               on_step=None):
    """Calls on_step before saving: a crash in on_step loses the checkpoint of that step."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
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
            if on_step is not None:
                on_step(step, loss.item())
            if step % save_every == 0:
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
    return step


def resume_positions_only_when_resuming(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every,
                                        device, on_step=None):
    """Calls set_position once, when it resumes, not before every epoch: the run that never stops replays the first
    epoch's order, the resumed run does not (issue 31: the RNG was blamed for it)."""
    step = 0
    per_epoch = len(train_loader)
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
        set_position(train_loader, step // per_epoch, step % per_epoch)
    model.train()
    for epoch in range(step // per_epoch, epochs):
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
    return step


def resume_no_train_mode(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                         on_step=None):
    """Never calls model.train(): a model handed over in eval mode trains without dropout."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
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
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_latest_by_file_time(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                               on_step=None):
    """Takes the most recently modified file as the newest checkpoint: a copied or touched older file wins."""
    step = 0
    found = [os.path.join(ckpt_dir, name) for name in os.listdir(ckpt_dir) if name.endswith(".pt")]
    if found:
        latest = max(found, key=os.path.getmtime)
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
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
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_restarts_epoch_runs_on(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                                  on_step=None):
    """Resumes at the right step but restarts the epoch from its first batch, and so takes more steps in all."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, 0)
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
    return step


def resume_epochs_from_the_lab(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                               on_step=None):
    """Trains the lab's 3 epochs whatever epochs says."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, 3):
        set_position(train_loader, epoch, step % per_epoch if epoch == step // per_epoch else 0)
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
    return step


# --- 08 param_groups -------------------------------------------------------------------------------------------------



def resume_forgets_scheduler(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                             on_step=None):
    """Hands no scheduler to load_checkpoint: the schedule restarts from the beginning after resuming."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, None, None)
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
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_saves_before_scheduler_step(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every,
                                       device, on_step=None):
    """Saves between optimizer.step() and scheduler.step(): the checkpoint's schedule is one step behind."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, epoch, step % per_epoch if epoch == step // per_epoch else 0)
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            step += 1
            if step % save_every == 0:
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            scheduler.step()
            if on_step is not None:
                on_step(step, loss.item())
    return step

def param_groups_decays_biases(model, weight_decay):
    """Decays everything except BatchNorm: biases get weight decay too."""
    norm = [p for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()]
    ids = {id(p) for p in norm}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return [{"params": rest, "weight_decay": weight_decay}, {"params": norm, "weight_decay": 0.0}]


def param_groups_forgets_norm(model, weight_decay):
    """Only conv and linear layers: the BatchNorm parameters are in no group (they would never train)."""
    decay, no_decay = [], []
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            decay.append(m.weight)
            if m.bias is not None:
                no_decay.append(m.bias)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


# --- numbers of its own instead of the arguments it was given (each check varies the argument: issue 10) ------------


def baseline_hardcoded_device(model, loader, optimizer, device):
    """Moves the batches to "cpu" whatever device it is given."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to("cpu"), y.to("cpu")
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def evaluate_hardcoded_device(model, loader, device):
    """Evaluates on "cpu" whatever device it is given."""
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
    return total_loss / seen, correct / seen


def evaluate_cpu_call(model, loader, device):
    """Moves each batch with .cpu(), whatever device it is given (passes on a CPU, fails on a GPU)."""
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.cpu(), y.cpu()
            logits = model(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(dim=1) == y).sum().item()
            seen += len(y)
    model.train()
    return total_loss / seen, correct / seen


def baseline_cpu_call(model, loader, optimizer, device):
    """Moves each batch with .cpu() instead of .to(device)."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.cpu(), y.cpu()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen


def clipping_hardcoded_max_norm(model, loader, optimizer, scheduler, max_norm, device):
    """Clips at 2.0, the lab's own threshold, instead of max_norm."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        norms.append(clip_grad_norm_(model.parameters(), 2.0).item())
        optimizer.step()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def accumulation_hardcoded_accum_steps(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    """Accumulates 2 micro-batches per step (the notebook's value) whatever accum_steps says."""
    model.train()
    total, seen, norms = 0.0, 0, []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        (loss / 2).backward()
        total += loss.item() * len(y)
        seen += len(y)
        if (i + 1) % 2 == 0 or i + 1 == len(loader):
            norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return total / seen, norms


def amp_hardcoded_max_norm(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Clips at 2.0 instead of max_norm (otherwise lab 5's canonical loop)."""
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
            norm = clip_grad_norm_(model.parameters(), 2.0)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            norm = clip_grad_norm_(model.parameters(), 2.0)
            optimizer.step()
        scheduler.step()
        norms.append(norm.item())
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def amp_hardcoded_device(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Moves the batches to "cpu" (and autocasts there) whatever device it is given."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to("cpu"), y.to("cpu")
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=amp_dtype):
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


def amp_autocast_device_itself(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Gives autocast the device itself: works for the string "cpu", raises for a torch.device (autocast wants its
    type, "cpu" or "cuda")."""
    model.train()
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type=device, dtype=amp_dtype):
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


def amp_hardcoded_dtype(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Autocasts to bfloat16 whatever amp_dtype says."""
    model.train()
    device_type = torch.device(device).type
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=torch.bfloat16):
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


def save_hardcoded_step(path, model, optimizer, scheduler, scaler, step):
    """Saves the step parsed from the file name (step-000037.pt) instead of the step it is given."""
    name = os.path.basename(str(path))
    saved_step = int(name[5:11]) if name.startswith("step-") else 0
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": saved_step,
             "rng": capture_rng_state()}
    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def resume_hardcoded_save_every(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                                on_step=None):
    """Saves every 4 steps whatever save_every says."""
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
            if step % 4 == 0:
                save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_hardcoded_epochs(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                            on_step=None):
    """Trains 2 epochs whatever epochs says."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, 2):
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


def param_groups_hardcoded_decay(model, weight_decay):
    """Decays weights by 0.01 (AdamW's default) whatever weight_decay says."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]


def amp_scaler_required(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    """Always goes through the scaler: breaks with scaler=None, which the contract allows."""
    model.train()
    device_type = torch.device(device).type
    total, seen, norms = 0.0, 0, []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norms.append(clip_grad_norm_(model.parameters(), max_norm).item())
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        total += loss.item() * len(y)
        seen += len(y)
    return total / seen, norms


def resume_saves_every_step(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                            on_step=None):
    """Saves a checkpoint after every optimizer step, whatever save_every says."""
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
            save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler, None, step)
            if on_step is not None:
                on_step(step, loss.item())
    return step


def resume_on_step_tensor_loss(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                               on_step=None):
    """Hands on_step the loss tensor itself instead of loss.item()."""
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
                on_step(step, loss)
    return step


def resume_replays_epoch_order(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                               on_step=None):
    """Positions the loader mid-epoch but always as epoch 0: every epoch replays the first epoch's order."""
    step = 0
    latest = latest_checkpoint(ckpt_dir)
    if latest is not None:
        step = load_checkpoint(latest, model, optimizer, scheduler, None)
    per_epoch = len(train_loader)
    model.train()
    for epoch in range(step // per_epoch, epochs):
        set_position(train_loader, 0, step % per_epoch if epoch == step // per_epoch else 0)
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
