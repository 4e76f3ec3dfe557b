"""Measuring a student's loop without changing it: throughput after a warm-up, step counts through hooks, and the
steps a GradScaler skipped."""

from __future__ import annotations

import time

import torch

from .devices import synchronize


def samples_per_second(train_on, batches: list, warmup: int = 2, device="cpu") -> float:
    """Throughput of ``train_on(batches)`` (e.g. one epoch of the student's loop over a list of batches), after a
    warm-up call on the first ``warmup`` batches so that one-time costs (allocation, kernel choice) are excluded.
    On a GPU the clock starts and stops with its queue empty (:func:`labutils.devices.synchronize`)."""
    train_on(batches[:warmup])
    synchronize(device)
    started = time.perf_counter()
    train_on(batches)
    synchronize(device)
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


class ScalerWatch(StepCounter):
    """A :class:`StepCounter` that also reads a GradScaler's scale before every micro-batch: an fp16 step whose
    gradients overflowed shows as a micro-batch without an optimizer step (``scaler.step`` skipped it) and the scale
    halving right after. Assumes one micro-batch per step (no accumulation), as lab 5's loop."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler):
        super().__init__(model, optimizer)
        self.scaler, self.scales = scaler, []

    def _on_forward(self, module, args) -> None:
        if module.training and torch.is_grad_enabled():
            self.scales.append(self.scaler.get_scale())  # what this step's loss is multiplied by
        super()._on_forward(module, args)

    @property
    def skipped(self) -> int:
        """Micro-batches that did not end in an optimizer step: the steps the scaler skipped."""
        return self.micro_batches - self.optimizer_steps

    def __repr__(self) -> str:
        backoffs = sum(b < a for a, b in zip(self.scales, self.scales[1:]))
        scale = f"scale {self.scales[0]:g} -> {self.scales[-1]:g}" if self.scales else "no steps yet"
        return (f"{self.skipped} of {self.micro_batches} fp16 steps skipped by the GradScaler (their gradients "
                f"overflowed); the scale backed off {backoffs} times ({scale})")
