"""Measuring a student's loop without changing it: throughput after a warm-up (one way, or several compared in
interleaved rounds), step counts through hooks, and the steps a GradScaler skipped."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

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


@dataclass
class Comparison:
    """Several ways to train the same batches, timed in interleaved rounds: ``speeds[label]`` holds the samples per
    second of each round. A round times every way once, in an order that rotates from round to round, so a burst of
    load elsewhere on the machine falls on all of them alike; the median of the rounds is the figure, their spread
    how far it can be trusted."""

    speeds: dict[str, list[float]]
    samples: int  # per round and way

    def median(self, label: str) -> float:
        return statistics.median(self.speeds[label])

    def ratios(self, label: str, base: str) -> list[float]:
        """``label``'s speed over ``base``'s, round by round (the same moment of the machine for both)."""
        return [a / b for a, b in zip(self.speeds[label], self.speeds[base])]

    def ratio(self, label: str, base: str) -> float:
        return statistics.median(self.ratios(label, base))

    def within_noise(self, label: str, base: str) -> bool:
        """The rounds disagree on which is faster: some had ``label`` faster, some slower."""
        ratios = self.ratios(label, base)
        return min(ratios) <= 1.0 <= max(ratios)

    def slower(self, label: str, base: str) -> bool:
        """``label`` was slower than ``base`` in every round."""
        return max(self.ratios(label, base)) < 1.0

    def verdict(self, label: str, base: str) -> str:
        """One sentence: how ``label`` compares with ``base`` here, with the spread of the rounds."""
        ratios, rounds = self.ratios(label, base), len(self.speeds[base])
        said = f"{label} ran at {self.ratio(label, base):.2f}x {base} (median of {rounds} rounds, " \
               f"{min(ratios):.2f}x to {max(ratios):.2f}x)"
        if self.within_noise(label, base):
            return (said + ": within the noise of this machine. Some rounds had it faster and some slower, so this "
                    "measurement shows no difference; a quieter machine or more batches might.")
        return said + (": slower in every round." if self.slower(label, base) else ": faster in every round.")

    def __str__(self) -> str:
        lines = [f"{label:>16}: {self.median(label):>9,.0f} samples/s  (median of {len(v)} rounds of {self.samples} "
                 f"samples; {min(v):,.0f} to {max(v):,.0f})" for label, v in self.speeds.items()]
        return "\n".join(lines)


def compare_throughput(ways: dict, batches: list, rounds: int = 5, warmup: int = 1, device="cpu") -> Comparison:
    """Time each of ``ways`` (label -> ``train_on(batches)``, e.g. the student's loop in one precision) on the same
    ``batches``: a warm-up call each on the first ``warmup`` batches (allocation, kernel choice: the same batch size),
    then ``rounds`` interleaved rounds (see :class:`Comparison`). On a GPU the clock starts and stops with its queue
    empty (:func:`labutils.devices.synchronize`)."""
    labels = list(ways)
    for label in labels:
        ways[label](batches[:warmup])
    samples = sum(len(y) for _, y in batches)
    speeds: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(rounds):
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            synchronize(device)
            started = time.perf_counter()
            ways[label](batches)
            synchronize(device)
            speeds[label].append(samples / (time.perf_counter() - started))
    return Comparison(speeds, samples)


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
