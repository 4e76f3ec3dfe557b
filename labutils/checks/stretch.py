"""Checks for lab 8's ungraded exercises (08_stretch): the loop under ``accelerate`` and ``evaluate`` with
``model.eval()`` left out on purpose. They print a verdict in the notebook and earn no points; each reuses the check
of the lab the exercise comes from, so a mistake reads as it did there.
"""

from __future__ import annotations

import torch

from .calling import could_not_check
from .evaluate import check_evaluate
from .report import CheckReport, Failure
from .train import check_train_one_epoch


class _PlainAccelerator:
    """The part of ``accelerate.Accelerator`` the loop uses, on one device without mixed precision, where accelerate's
    own ``backward`` and ``clip_grad_norm_`` are plain PyTorch's: lab 3's check then judges the loop."""

    def backward(self, loss, **kwargs):
        loss.backward(**kwargs)

    def clip_grad_norm_(self, parameters, max_norm, norm_type=2):
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)


class _PreparedLoader:
    """A loader as ``accelerator.prepare`` returns it: its batches arrive on the device already (moved here, by the
    lab's code, so the tracer does not count the moves as the loop's)."""

    def __init__(self, loader, device):
        self.loader, self.device = loader, device

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for x, y in self.loader:
            yield x.to(self.device), y.to(self.device)


@could_not_check("train_one_epoch_accelerate")
def check_train_one_epoch_accelerate(fn) -> CheckReport:
    """``train_one_epoch_accelerate(accelerator, model, loader, optimizer, scheduler, max_norm)``: lab 3's loop on
    prepared objects, judged by lab 3's check (clear, forward, ``accelerator.backward``, clip, step, scheduler; returns
    the mean loss and the pre-clip norms)."""
    def as_lab_3(model, loader, optimizer, scheduler, max_norm, device):
        return fn(_PlainAccelerator(), model, _PreparedLoader(loader, device), optimizer, scheduler, max_norm)

    report = check_train_one_epoch(as_lab_3, "clipping", skip=("device",))  # the prepared loader places batches
    report.name = "train_one_epoch_accelerate (08_stretch)"
    return report


@could_not_check("evaluate_without_eval_mode")
def check_evaluate_without_eval_mode(fn) -> CheckReport:
    """``evaluate_without_eval_mode(model, loader, device)``: lab 1's ``evaluate`` with ``model.eval()`` left out.
    It passes when its forwards ran in train mode and everything else lab 1 checks is right."""
    lab_1 = check_evaluate(fn)
    report = CheckReport("evaluate_without_eval_mode (08_stretch)", ["eval_mode left out"] +
                         [c for c in lab_1.checks if c not in ("eval_mode", "restore_mode")])
    report.trace = lab_1.trace
    left_out = any(f.check == "eval_mode" for f in lab_1.failures)
    report.judge("eval_mode", [] if left_out else [Failure(
        "eval_mode", "every forward ran in eval mode: for this experiment leave model.eval() out (the point is to "
        "see what it changes), and keep the rest of lab 1's evaluate.")])
    report.failures += [f for f in lab_1.failures if f.check not in ("eval_mode", "restore_mode")]
    report.unjudged.update({c: why for c, why in lab_1.unjudged.items() if c != "restore_mode"})
    report.judged += [c for c in lab_1.judged if c not in ("eval_mode", "restore_mode")]
    return report
