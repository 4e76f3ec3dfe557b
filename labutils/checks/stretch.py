"""Checks for lab 8's ungraded exercises (08_stretch): the loop under ``accelerate`` and ``evaluate`` with
``model.eval()`` left out on purpose. They print a verdict in the notebook and earn no points; each reuses the check
of the lab the exercise comes from, so a mistake reads as it did there.
"""

from __future__ import annotations

import contextlib

import torch

from .calling import could_not_check
from .evaluate import check_evaluate
from .report import CheckReport, Failure
from .train import check_train_one_epoch
from ..trace import current


class NotInTheStandIn(AttributeError):
    """What the check's accelerator raises for a part of ``accelerate.Accelerator`` it does not stand in for."""


class _CheckAccelerator:
    """``accelerate.Accelerator`` as the check lends it to the loop: one process on the CPU, no mixed precision, no
    accumulation (``gradient_accumulation_steps=1``), where accelerate's ``backward`` and ``clip_grad_norm_`` do what
    plain PyTorch's do. Each of them marks the trace's events it made (``via_accelerator``), so a loop that calls
    ``loss.backward()`` or ``torch.nn.utils.clip_grad_norm_`` itself shows (equal here, they skip the GradScaler's
    scaling and unscaling under fp16). The rest of the API a one-process loop uses is here as accelerate does it then;
    anything else raises :class:`NotInTheStandIn`, which the check reports as what it could not observe."""

    device = torch.device("cpu")
    num_processes, process_index, gradient_accumulation_steps = 1, 0, 1
    is_main_process = is_local_main_process = sync_gradients = True
    mixed_precision, optimizer_step_was_skipped = "no", False

    def backward(self, loss, **kwargs):
        with _marked("backward"):
            loss.backward(**kwargs)

    def clip_grad_norm_(self, parameters, max_norm, norm_type=2):
        with _marked("clip"):
            return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)

    def clip_grad_value_(self, parameters, clip_value):
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    @contextlib.contextmanager
    def accumulate(self, *models):
        yield  # gradient_accumulation_steps=1: every step synchronises, as accelerate does then

    @contextlib.contextmanager
    def no_sync(self, model=None):
        yield

    @contextlib.contextmanager
    def autocast(self, *args, **kwargs):
        yield  # mixed_precision="no"

    def gather_for_metrics(self, input_data, use_gather_object=False):
        return input_data  # one process: nothing to gather, no duplicate to drop

    def gather(self, tensor):
        return tensor

    def reduce(self, tensor, reduction="sum", scale=1.0):
        return tensor * scale if scale != 1.0 else tensor

    def unwrap_model(self, model, keep_fp32_wrapper=True, keep_torch_compile=True):
        return model

    def prepare(self, *objects):
        return objects[0] if len(objects) == 1 else objects

    def wait_for_everyone(self):
        pass

    def print(self, *args, **kwargs):
        print(*args, **kwargs)

    def __getattr__(self, name):
        raise NotInTheStandIn(f"the check's accelerator (a stand-in for accelerate.Accelerator on one CPU process, "
                              f"without mixed precision) has no {name!r}, so the check could not observe this loop")


@contextlib.contextmanager
def _marked(kind: str):
    """The trace's events of ``kind`` made inside are marked as made through the accelerator."""
    tracer = current()
    start = len(tracer.events) if tracer is not None else 0
    try:
        yield
    finally:
        for event in tracer.events[start:] if tracer is not None else ():
            if event.kind == kind:
                event.info["via_accelerator"] = True


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


def _direct_calls(report: CheckReport) -> list[Failure]:
    """The loop's own loss.backward() and clip_grad_norm_: equal here, wrong under fp16, where only the
    accelerator's scale the loss and unscale the gradients."""
    found = []
    for kind, mine, theirs, why in (
            ("backward", "loss.backward()", "accelerator.backward(loss)",
             "which scales the loss when the Accelerator runs in fp16 (a direct backward bypasses its GradScaler)"),
            ("clip", "torch.nn.utils.clip_grad_norm_", "accelerator.clip_grad_norm_(model.parameters(), max_norm)",
             "which unscales the gradients first under fp16 (a direct clip measures the scaled ones)")):
        direct = next((e for e in report.trace if e.kind == kind and not e.info.get("via_accelerator")), None)
        if direct is not None:
            step = direct.step + 1
            found.append(Failure("accelerator", f"at step {step} the loop called {mine} itself: call {theirs}, {why}.",
                                 step))
    return found


@could_not_check("train_one_epoch_accelerate")
def check_train_one_epoch_accelerate(fn) -> CheckReport:
    """``train_one_epoch_accelerate(accelerator, model, loader, optimizer, scheduler, max_norm)``: lab 3's loop on
    prepared objects, judged by lab 3's check (clear, forward, ``accelerator.backward``, clip, step, scheduler; returns
    the mean loss and the pre-clip norms), and its backward and clipping made through the accelerator."""
    missing = []  # what the loop asked of the stand-in that it does not have

    def as_lab_3(model, loader, optimizer, scheduler, max_norm, device):
        try:
            return fn(_CheckAccelerator(), model, _PreparedLoader(loader, device), optimizer, scheduler, max_norm)
        except NotInTheStandIn as exc:
            missing.append(str(exc))
            raise

    report = check_train_one_epoch(as_lab_3, "clipping", skip=("device",))  # the prepared loader places batches
    report.name = "train_one_epoch_accelerate (08_stretch)"
    if missing:  # the stand-in's limit, not the student's mistake
        return CheckReport(report.name, broken=f"could not check train_one_epoch_accelerate: {missing[0]}.")
    report.checks.append("accelerator")
    report.judge("accelerator", _direct_calls(report) if report.trace else None)
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
