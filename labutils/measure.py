"""Measuring a student's loop without changing it: throughput after a warm-up, and step counts through hooks."""

from __future__ import annotations

import time

import torch


def samples_per_second(train_on, batches: list, warmup: int = 2) -> float:
    """Throughput of ``train_on(batches)`` (e.g. one epoch of the student's loop over a list of batches), after a
    warm-up call on the first ``warmup`` batches so that one-time costs (allocation, kernel choice) are excluded."""
    train_on(batches[:warmup])
    started = time.perf_counter()
    train_on(batches)
    return sum(len(y) for _, y in batches) / (time.perf_counter() - started)


class StepCounter:
    """Counts micro-batches (forward passes in train mode with autograd on) and ``optimizer.step()`` calls through
    hooks, so the loop being counted is not changed. ``remove()`` takes the hooks off."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.micro_batches = self.optimizer_steps = 0
        self._handles = [model.register_forward_pre_hook(self._on_forward),
                         optimizer.register_step_post_hook(self._on_step)]

    def _on_forward(self, module, args) -> None:
        if module.training and torch.is_grad_enabled():  # evaluation forwards are not micro-batches
            self.micro_batches += 1

    def _on_step(self, optimizer, args, kwargs) -> None:
        self.optimizer_steps += 1

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def __repr__(self) -> str:
        ratio = self.micro_batches / self.optimizer_steps if self.optimizer_steps else float("nan")
        return (f"{self.micro_batches} micro-batches, {self.optimizer_steps} optimizer steps "
                f"({ratio:.2f} micro-batches per step)")
