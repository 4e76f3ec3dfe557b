"""The optimizer and the learning-rate schedules.

Schedules here are stepped once per *optimizer* step, never per micro-batch or per epoch: ``total_steps`` counts
optimizer steps, so with gradient accumulation it is ``epochs * ceil(batches_per_epoch / accum_steps)``.
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LinearLR, LRScheduler, OneCycleLR, SequentialLR


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay the weights of conv and linear layers; never biases or normalisation parameters.

    Why: weight decay pulls parameters toward zero. For a bias or a BatchNorm scale that is not regularisation but a
    bias of its own (a BN scale pulled to 0 silences its channel). Every parameter with ndim <= 1 is one of those.
    """
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, no_decay_bias_norm: bool = False):
    params = param_groups(model, weight_decay) if no_decay_bias_norm else model.parameters()
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def steps_per_epoch(batches_per_epoch: int, accum_steps: int) -> int:
    """Optimizer steps in one epoch: a trailing partial accumulation window still gets its step."""
    return math.ceil(batches_per_epoch / accum_steps)


def make_scheduler(optimizer, schedule: str, total_steps: int, warmup_steps: int = 100) -> LRScheduler:
    """``constant``, ``onecycle`` (peak = the optimizer's lr) or ``warmup_cosine`` (linear warmup, cosine to 0)."""
    if schedule == "constant":
        return ConstantLR(optimizer, factor=1.0, total_iters=0)  # a real scheduler object: same loop, same checkpoint
    if schedule == "onecycle":
        peak = [group["lr"] for group in optimizer.param_groups]
        return OneCycleLR(optimizer, max_lr=peak, total_steps=total_steps)
    if schedule == "warmup_cosine":
        warmup = min(warmup_steps, max(total_steps - 1, 1))  # short smoke runs still get some cosine
        return SequentialLR(
            optimizer,
            [LinearLR(optimizer, start_factor=1e-3, total_iters=warmup),
             CosineAnnealingLR(optimizer, T_max=max(total_steps - warmup, 1))],
            milestones=[warmup],
        )
    raise ValueError(f"schedule={schedule!r} is unknown: use constant, onecycle or warmup_cosine")
