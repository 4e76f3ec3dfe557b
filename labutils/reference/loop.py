"""The reference training loop: every step of the lab, in the canonical order, written out once.

    zero_grad -> forward (autocast) -> loss / window -> backward (scaled)      x accum_steps micro-batches
    -> unscale_ -> clip (log the pre-clip norm) -> optimizer/scaler step -> scaler.update -> scheduler.step
    -> log the step -> "last" checkpoint every save_every steps -> step callbacks

``step`` counts optimizer steps and ``micro_step`` counts batches; they are kept apart in every name, because mixing
them is the classic accumulation bug (a trainer that stops stepping after the first window).

This module is the instructor's reference: the student handout ships without it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..amp import autocast_dtype, make_scaler
from ..checkpoint import BEST_NAME, last_name, remove_stale_temp_files, rotate, set_seed
from ..config import LabConfig
from ..crash import exit_at_step
from ..data import make_loaders, set_position
from ..devices import deterministic, pin_memory, resolve as resolve_device
from ..evaluation import evaluate
from ..memory import keep_freed_memory
from ..models import SmallCNN
from ..steplog import EPOCH_FIELDS, STEP_FIELDS, RowLog, epoch_log_path
from .checkpoint import atomic_save, load_latest_valid, save_checkpoint
from .optim import make_optimizer, make_scheduler, steps_per_epoch

FINAL_NAME = "final.pt"


@dataclass
class Position:
    """Where training is; saved in every checkpoint so a resumed run continues mid-epoch with the same batches."""

    step: int = 0  # optimizer steps done, over the whole run
    epoch: int = 0  # the epoch in progress (0-based)
    micro_step: int = 0  # batches done in this epoch
    loss_sum: float = 0.0  # sum of per-sample training losses so far this epoch
    seen: int = 0  # samples so far this epoch
    best_val_acc: float = -1.0

    def start_next_epoch(self) -> None:
        self.epoch, self.micro_step, self.loss_sum, self.seen = self.epoch + 1, 0, 0.0, 0


StepHook = Callable[[Position, dict], None]


def optimizer_step(model, optimizer, scheduler, scaler=None, max_norm: float | None = None) -> tuple[float, float]:
    """unscale -> clip -> step -> update -> schedule -> clear. Returns (pre-clip global grad norm, lr used)."""
    if scaler is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the loss-scaled ones
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if max_norm is None:
        norm = torch.nn.utils.get_total_norm(grads)  # measured and logged even when nothing is clipped
    else:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # returns the norm *before* clipping
    lr = optimizer.param_groups[0]["lr"]
    if scaler is not None:
        scaler.step(optimizer)  # skips the step if the unscaled gradients hold inf/nan
        scaler.update()
    else:
        optimizer.step()
    scheduler.step()  # once per optimizer step, after it
    optimizer.zero_grad(set_to_none=True)
    return norm.item(), lr


def train_one_epoch(model, loader, optimizer, scheduler, *, max_norm=None, accum_steps: int = 1, scaler=None,
                    amp_dtype=None, device="cpu", pos: Position | None = None, hooks: tuple[StepHook, ...] = (),
                    progress: bool | None = None) -> float:
    """One pass over ``loader`` from ``pos.micro_step`` on; returns the epoch's mean training loss per sample.

    A trailing partial accumulation window is stepped, its loss divided by its real length, so every optimizer step
    applies a mean gradient. ``hooks`` run after every optimizer step with the position and the step's log row.
    """
    pos = pos if pos is not None else Position()
    device = torch.device(device)
    n_batches = len(loader)  # the whole epoch's batches, also when resuming part-way
    model.train()
    window_losses, window_samples, t_window = [], 0, time.perf_counter()
    bar = tqdm(total=n_batches, initial=pos.micro_step, desc=f"epoch {pos.epoch + 1}", leave=False,
               disable=None if progress is None else not progress)
    for x, y in loader:
        window_start = pos.micro_step - pos.micro_step % accum_steps
        window_len = min(accum_steps, n_batches - window_start)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = F.cross_entropy(model(x), y)  # raw logits: cross_entropy applies log-softmax itself
        scaled = loss / window_len  # average over the virtual batch, not a sum
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_value = loss.item()
        window_losses.append(loss_value)
        window_samples += len(y)
        pos.loss_sum += loss_value * len(y)
        pos.seen += len(y)
        pos.micro_step += 1
        bar.update()
        if pos.micro_step - window_start < window_len:
            continue  # keep accumulating
        grad_norm, lr = optimizer_step(model, optimizer, scheduler, scaler, max_norm)
        pos.step += 1
        now = time.perf_counter()
        row = {"step": pos.step, "epoch": pos.epoch + 1, "loss": sum(window_losses) / len(window_losses), "lr": lr,
               "grad_norm": grad_norm, "clipped": max_norm is not None and grad_norm > max_norm,
               "samples_per_s": window_samples / max(now - t_window, 1e-9)}
        bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{lr:.1e}")
        for hook in hooks:
            hook(pos, row)
        window_losses, window_samples, t_window = [], 0, time.perf_counter()
    bar.close()
    return pos.loss_sum / max(pos.seen, 1)


@dataclass
class RunResult:
    """What :func:`fit` returns: the trained model, every step row and epoch row, and where the run started."""

    config: LabConfig
    model: torch.nn.Module
    steps: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    final_step: int = 0
    best_val_acc: float = float("nan")
    resumed_from_step: int | None = None

    @property
    def final_val_acc(self) -> float:
        return self.epochs[-1]["val_acc"] if self.epochs else float("nan")

    def epoch_mean(self, key: str) -> float:
        """Mean of ``key`` (e.g. seconds, samples_per_s) over the epochs this run trained."""
        return sum(e[key] for e in self.epochs) / len(self.epochs)


def _checkpoint_hook(cfg: LabConfig, objects: dict) -> StepHook:
    def save_last(pos: Position, row: dict) -> None:
        if pos.step % cfg.save_every == 0:
            save_checkpoint(Path(cfg.ckpt_dir) / last_name(pos.step), **objects, step=pos.step,
                            position=dataclasses.asdict(pos), config=cfg.to_dict())
            rotate(cfg.ckpt_dir, cfg.keep_last)  # only after the new one is in place

    return save_last


def fit(cfg: LabConfig, on_step: Callable[[int, float], None] | None = None, log=print) -> RunResult:
    """Train SmallCNN on FashionMNIST as ``cfg`` says: the lab's whole loop with checkpoints, logs and resume."""
    keep_freed_memory()
    set_seed(cfg.seed)
    device = resolve_device(cfg.device)  # "auto": CUDA, else MPS, else CPU (labutils.devices)
    if cfg.ckpt_dir is not None and device.type == "cuda":
        deterministic()  # a run that checkpoints is compared bit for bit with its resumed twin (crash-resume)
    train_loader, val_loader = make_loaders(cfg.batch_size, cfg.subset, cfg.seed, pin_memory=pin_memory(device))
    model = SmallCNN(dropout=cfg.dropout, batchnorm=cfg.batchnorm).to(device)
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay, cfg.no_decay_bias_norm)
    total_steps = cfg.epochs * steps_per_epoch(len(train_loader), cfg.accum_steps)
    scheduler = make_scheduler(optimizer, cfg.schedule, total_steps, cfg.warmup_steps)
    amp_dtype = autocast_dtype(cfg.amp, device)
    scaler = make_scaler(amp_dtype, device)
    objects = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}

    pos, resumed_from = Position(), None
    if cfg.ckpt_dir is not None:  # the run starts: clear what writers killed mid-save left (fresh start or resume)
        remove_stale_temp_files(cfg.ckpt_dir, log=log)
    if cfg.resume:
        if cfg.ckpt_dir is None:
            raise ValueError("resume=True needs ckpt_dir: pass --ckpt-dir DIR (the folder the crashed run wrote)")
        state = load_latest_valid(cfg.ckpt_dir, **objects, log=log)
        if state is not None:
            pos = Position(**state["position"])
            resumed_from = pos.step

    step_log = RowLog(cfg.log_path, STEP_FIELDS)
    epoch_log = RowLog(epoch_log_path(cfg.log_path), EPOCH_FIELDS)
    hooks: list[StepHook] = [lambda pos, row: step_log.write(row)]
    if cfg.ckpt_dir is not None:
        hooks.append(_checkpoint_hook(cfg, objects))
    if on_step is not None:
        hooks.append(lambda pos, row: on_step(pos.step, row["loss"]))
    if cfg.crash_at_step is not None:
        crash = exit_at_step(cfg.crash_at_step)
        hooks.append(lambda pos, row: crash(pos.step))  # last: the checkpoint and log of this step are written

    result = RunResult(cfg, model, steps=step_log.rows, epochs=epoch_log.rows, resumed_from_step=resumed_from)
    for epoch in range(pos.epoch, cfg.epochs):
        set_position(train_loader, epoch, pos.micro_step)
        t0, seen_before = time.perf_counter(), pos.seen
        train_loss = train_one_epoch(model, train_loader, optimizer, scheduler, max_norm=cfg.max_norm,
                                     accum_steps=cfg.accum_steps, scaler=scaler, amp_dtype=amp_dtype, device=device,
                                     pos=pos, hooks=tuple(hooks), progress=cfg.progress)
        seconds = time.perf_counter() - t0
        val_loss, val_acc = evaluate(model, val_loader, device, amp_dtype)
        epoch_log.write({"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss, "val_acc": val_acc,
                         "seconds": seconds, "samples_per_s": (pos.seen - seen_before) / max(seconds, 1e-9)})
        log(f"epoch {epoch + 1}/{cfg.epochs}: train loss {train_loss:.4f}  val loss {val_loss:.4f}  "
            f"val acc {val_acc:.2%}  ({seconds:.1f}s)")
        if val_acc > pos.best_val_acc:
            pos.best_val_acc = val_acc
            if cfg.ckpt_dir is not None:
                save_checkpoint(Path(cfg.ckpt_dir) / BEST_NAME, **objects, step=pos.step,
                                position=dataclasses.asdict(pos), config=cfg.to_dict(), val_acc=val_acc)
        pos.start_next_epoch()
    if cfg.ckpt_dir is not None:  # the exact end state, for comparing runs tensor by tensor
        atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": pos.step},
                    Path(cfg.ckpt_dir) / FINAL_NAME)
    step_log.close()
    epoch_log.close()
    result.final_step, result.best_val_acc = pos.step, pos.best_val_acc
    return result


def summarize(result: RunResult) -> str:
    """The end-of-run summary printed by the CLI."""
    epochs = result.epochs
    lines = [f"optimizer steps: {result.final_step}"]
    if result.resumed_from_step is not None:
        lines.append(f"resumed from step: {result.resumed_from_step}")
    if epochs:
        lines += [f"final val acc: {result.final_val_acc:.2%}", f"best val acc: {result.best_val_acc:.2%}",
                  f"mean epoch time: {result.epoch_mean('seconds'):.1f}s",
                  f"throughput: {result.epoch_mean('samples_per_s'):,.0f} samples/s"]
    if result.steps and any(s["clipped"] for s in result.steps):
        lines.append(f"clipped steps: {sum(s['clipped'] for s in result.steps) / len(result.steps):.1%}")
    return "\n".join(lines)
