"""train_one_epoch, the set-up: the tiny training case, the student's run on it, and a view of that run for the
checks (optimizer steps, the micro-batches of each step, PyTorch's reference gradients at the loop's parameters).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LinearLR

from .. import exercises
from ..data import make_loader
from ..trace import Event, Tracer, global_norm, mark_batches
from .calling import TracedCall, traced_call
from .report import beside
from .world import (AMP_DTYPE, BATCH, DEVICE, FP16_SCALE, INIT_SCALE, LR, MAX_EVENTS, N_TRAIN, OVERFLOW_AT,
                    crafted_labels, random_images, tiny_model, which_batch)


class OverflowingScaler(torch.amp.GradScaler):
    """A GradScaler whose scaled loss overflows once, at the ``overflow_at``-th scale() call: what an fp16 run meets
    at its first steps (the scale starts too high) and after a loss spike. scaler.step() then finds inf/nan
    gradients and skips optimizer.step(), and scaler.update() backs the scale off. Real fp16 overflows cannot happen
    in bf16 on a CPU, so the check makes one: it shows whether the loop lets the scaler handle a skipped step (no
    direct optimizer.step() writing nan into the weights, the gradients cleared before the next step)."""

    def __init__(self, device: str, overflow_at: int, **kwargs):
        super().__init__(device, **kwargs)
        self.overflow_at, self.scaled = overflow_at, 0

    def scale(self, outputs):
        self.scaled += 1
        scaled = super().scale(outputs)
        return scaled * float("inf") if self.scaled == self.overflow_at else scaled


@dataclass
class TrainCase:
    exercise: str
    model: torch.nn.Module
    reference: torch.nn.Module  # an untraced copy, for recomputing gradients and losses
    loader: object
    batches: list
    optimizer: torch.optim.Optimizer
    scheduler: object = None
    scaler: object = None
    max_norm: float | None = None
    accum_steps: int = 1
    amp_dtype: torch.dtype | None = None
    init_scale: float | None = None  # the GradScaler's scale at the first step
    device: str = DEVICE

    @property
    def args(self) -> tuple:
        values = {"model": self.model, "loader": self.loader, "optimizer": self.optimizer,
                  "scheduler": self.scheduler, "max_norm": self.max_norm, "accum_steps": self.accum_steps,
                  "scaler": self.scaler, "amp_dtype": self.amp_dtype, "device": self.device}
        return tuple(values[name] for name in exercises.function(self.exercise).params)

    @property
    def windows(self) -> list[int]:
        """How many micro-batches each optimizer step should take (the last may be a partial group)."""
        n, k = len(self.batches), self.accum_steps
        return [min(k, n - start) for start in range(0, n, k)]


def train_case(exercise: str, seed: int, with_scaler: bool = True, which: int = 0) -> TrainCase:
    """The tiny case, built from ``seed``; ``which`` picks the value of every argument the function must honour
    (registry: 0 is the main run, 1 the run that shows whether the function used its arguments or numbers of its
    own)."""
    values = {a.name: a.value(which) for a in exercises.get(exercise).arguments}
    torch.manual_seed(seed)
    model = tiny_model()
    images = random_images(N_TRAIN, seed)
    labels = crafted_labels(model, images, N_TRAIN % BATCH, BATCH)
    loader = mark_batches(make_loader(images, labels, BATCH, shuffle=False))  # a real DataLoader: len(loader) works
    case = TrainCase(exercise, model, copy.deepcopy(model), loader, list(loader),
                     torch.optim.SGD(model.parameters(), lr=LR))
    if exercise != "baseline":
        # the schedule's length differs between the two runs (longer, then shorter than the epoch's 5 steps): a loop
        # that counts on a length of its own instead of stepping the scheduler it was given shows in the second
        case.scheduler = LinearLR(case.optimizer, start_factor=1.0, end_factor=0.5, total_iters=(8, 3)[which])
    case.accum_steps = values.get("accum_steps", 1)
    case.max_norm = values.get("max_norm")  # well below every step's gradient norm: every step must clip
    case.device = values.get("device", DEVICE)
    if exercise == "amp":
        case.amp_dtype = getattr(torch, values["amp_dtype"])
        scale = INIT_SCALE if case.amp_dtype == torch.bfloat16 else FP16_SCALE  # float16 overflows at 65504
        case.scaler = OverflowingScaler("cpu", OVERFLOW_AT, init_scale=scale) if with_scaler else None
        case.init_scale = scale
    return case


def step_norms(case: TrainCase) -> list[float]:
    """Every step's gradient norm at the start (the registry's max_norm values must be below all of them)."""
    params = [p.detach().clone() for p in case.reference.parameters()]
    norms, start = [], 0
    for size in case.windows:
        grads = [torch.zeros_like(p) for p in params]
        for x, y in case.batches[start: start + size]:
            g, _ = _reference(case, params, x, y, case.amp_dtype)
            grads = [a + b / size for a, b in zip(grads, g)]
        norms.append(global_norm(grads))
        start += size
    return norms


def _reference(case, params, x, y, autocast, softmax: bool = False, training: bool = True):
    """PyTorch as the oracle: (gradients, loss) of the mean cross-entropy of ``x, y`` at ``params``."""
    ref = case.reference
    with torch.no_grad():
        for p, value in zip(ref.parameters(), params):
            p.copy_(value)
    ref.zero_grad(set_to_none=True)
    ref.train(training)
    with torch.autocast("cpu", dtype=autocast or AMP_DTYPE, enabled=autocast is not None):
        logits = ref(x)
        loss = F.cross_entropy(logits.softmax(dim=1) if softmax else logits, y)
    loss.backward()
    return [p.grad.detach().clone() for p in ref.parameters()], loss.item()


def all_finite(tensors) -> bool:
    """No inf or nan in any of ``tensors`` (None entries, a parameter with no gradient, count as finite)."""
    return all(t is None or bool(torch.isfinite(t).all()) for t in tensors)


@dataclass
class Micro:
    """One training forward (with autograd on), the backward that followed it and the step it belongs to."""

    forward: int  # event index
    batch: int | None  # index into case.batches
    backward: int | None = None
    step: int | None = None  # number of the optimizer step whose window it is in; None after the last step


class TrainView:
    """A student's run of train_one_epoch, indexed for the checks: steps, windows of micro-batches, references."""

    def __init__(self, case: TrainCase, run: TracedCall):
        self.case, self.run, self.events = case, run, run.events
        self.exercise = case.exercise
        self.tol = 2e-2 if case.amp_dtype is not None else 1e-3
        self.steps = self._steps()  # step k is at steps[k - 1]
        self.micros: list[Micro] = []
        self.forwards = []
        for i, e in enumerate(self.events):
            if e.kind == "forward":
                batch = which_batch(e.data["x"], case.batches)
                if batch is not None:
                    e.info["batch"] = f"{batch + 1}/{len(case.batches)}"
                self.forwards.append((i, batch))
                if e.info["grad"]:
                    self.micros.append(Micro(i, batch))
            elif e.kind == "backward" and self.micros and self.micros[-1].backward is None:
                self.micros[-1].backward = i
        for m in self.micros:
            m.step = next((k + 1 for k, s in enumerate(self.steps) if s > m.forward), None)
        self.windows = {k: [m for m in self.micros if m.step == k] for k in range(1, len(self.steps) + 1)}
        self.skipped = {k for k in self.windows if self.step_event(k).info.get("skipped")}  # by scaler.step
        self.trailing = [m for m in self.micros if m.step is None]
        self._refs: dict = {}
        self.accepted: dict[int, float] = {}  # step -> the 1/window factor its gradient matched

    def _steps(self) -> list[int]:
        """The optimizer steps, numbered 1, 2, ... in the events. A step that had no gradient at all since the start
        or the previous step (no training forward before it, every ``.grad`` None: the step at the top of a loop
        body, before the first backward) changed nothing, since PyTorch's optimizers skip a parameter without a
        gradient: it is marked as such and is no step of the loop's."""
        steps, since = [], 0  # training forwards since the last step
        for i, e in enumerate(self.events):
            if e.kind == "forward" and e.info["grad"]:
                since += 1
            elif e.kind == "step":
                if not since and all(g is None for g in e.data["grads"]) and not e.info.get("skipped"):
                    e.info["noop"] = True
                    continue
                steps.append(i)
                e.info["number"], since = len(steps), 0
        return steps

    def step_event(self, k: int) -> Event:
        return self.events[self.steps[k - 1]]

    def ref(self, m: Micro, softmax: bool = False):
        key = (m.forward, softmax)
        if key not in self._refs:
            params = (self.step_event(m.step).data["params"] if m.step is not None
                      else [p.detach().clone() for p in self.case.model.parameters()])
            event = self.events[m.forward]
            self._refs[key] = _reference(self.case, params, event.data["x"], self.case.batches[m.batch][1],
                                         event.info["autocast"], softmax)
        return self._refs[key]

    def combined(self, k: int, factor: float, softmax: bool = False):
        """The step's reference gradient: factor * the sum of its micro-batches' mean-loss gradients."""
        grads = [self.ref(m, softmax)[0] for m in self.windows[k]]
        return [factor * sum(parts) for parts in zip(*grads)]

    def factors(self, k: int) -> list[float]:
        """Accepted 1/window factors: 1/accum_steps, and for a trailing partial group also 1/its size."""
        size, accum, own = len(self.windows[k]), self.case.accum_steps, len(self.windows[1]) or None
        factors = [1.0 / accum]
        if k == len(self.steps) and size < accum:
            factors = [1.0 / size, 1.0 / accum]  # Lightning and accelerate use 1/accum_steps here
        if own != accum:  # windows of the wrong size are the window property's mistake: judge the division by the
            factors += [1.0 / size] + ([1.0 / own] if own else [])  # loop's own accumulation apart from it
        return list(dict.fromkeys(factors))

    def zeros_for_none(self, grads):
        return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, self.case.model.parameters())]

    def applied(self, k: int):
        return self.zeros_for_none(self.step_event(k).data["grads"])

    def scale_used(self, k: int) -> float:
        lo = self.steps[k - 2] if k > 1 else -1
        scales = [e.info["scale"] for e in self.events[lo + 1: self.steps[k - 1]] if e.kind == "scale"]
        return scales[-1] if scales else 1.0

    def pre_clip(self, k: int):
        """The gradient as backward left it (before unscale_/clip touched it), divided by the loss scale."""
        raw = self.step_event(k).data["raw"]
        params = list(self.case.model.parameters())
        scale = self.scale_used(k)
        return [raw[i] / scale if i in raw else torch.zeros_like(p) for i, p in enumerate(params)]

    # --- showing the student their trace -----------------------------------------------------------------------------

    def span(self, k: int | None) -> tuple[int, int]:
        """Event range shown for step k: from the end of step k-1's tail to the end of step k's tail (scheduler,
        scaler.update, a late clip); k=None: what came after the last step."""
        def tail_end(step_index):
            j = step_index + 1
            while j < len(self.events) and self.events[j].kind in ("scheduler", "scaler_update", "clip", "unscale"):
                j += 1
            return j

        if k is None:
            return (tail_end(self.steps[-1]) if self.steps else 0), len(self.events)
        return (tail_end(self.steps[k - 2]) if k > 1 else 0), tail_end(self.steps[k - 1])

    def expected_order(self, first: bool, micro_batches: int | None = None) -> list[str]:
        """The order of one optimizer step, with ``micro_batches`` forwards (accum_steps unless the group is the
        trailing partial one)."""
        case, amp = self.case, self.case.amp_dtype is not None
        lines = ["model.train()  (once, at the start)"] if first else []
        lines.append("optimizer.zero_grad()")
        for _ in range(case.accum_steps if micro_batches is None else micro_batches):
            lines.append("forward" + (" (autocast)" if amp else "") + " (train mode, grad on)")
            if case.scaler is not None:
                lines.append("scaler.scale(loss)")
            lines.append("loss.backward()" if case.accum_steps == 1 else "(loss / accum_steps).backward()")
        if case.scaler is not None:
            lines.append("scaler.unscale_(optimizer)")
        if case.max_norm is not None:
            lines.append("clip_grad_norm_(model.parameters(), max_norm)")
        if case.scaler is not None:
            lines += ["scaler.step(optimizer)", "  optimizer.step()  via scaler.step", "scaler.update()"]
        else:
            lines.append("optimizer.step()")
        if case.scheduler is not None:
            lines.append("scheduler.step()")
        return lines

    def beside(self, k: int | None, mark: int | None = None) -> str:
        lo, hi = self.span(k)
        if mark is not None and not lo <= mark < hi:
            lo, hi = min(lo, mark), max(hi, mark + 1)
        title = f"your loop, step {k}" if k is not None else "your loop, after the last step" if self.steps else \
            "your loop"
        return beside(self.events, lo, hi, self.expected_order(first=lo == 0, micro_batches=self._window_size(k)),
                      mark, title)

    def _window_size(self, k: int | None) -> int | None:
        """How many micro-batches step ``k`` should take (None: after the last step, the group that follows it), so
        the expected order of a trailing partial group shows only the micro-batches that remain."""
        index = len(self.steps) if k is None else k - 1
        return self.case.windows[index] if 0 <= index < len(self.case.windows) else None


def run_train(fn, case: TrainCase) -> TrainView:
    case.model.eval()  # as if evaluation just ran: a loop that forgets model.train() would train in eval mode
    tracer = Tracer(case.model, case.optimizer, case.scheduler, case.scaler,
                    forbidden=exercises.get(case.exercise).forbidden, max_events=MAX_EVENTS, devices=True)
    return TrainView(case, traced_call(fn, case.args, tracer))
