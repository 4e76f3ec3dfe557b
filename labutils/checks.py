"""Checks for every graded function of the lab: run it on tiny data, trace what it did, say what is wrong and why.

Each check calls the student's function exactly as docs/exercises.md states its contract, on a few dozen random images
and a tiny SmallCNN, while a :class:`labutils.trace.Tracer` records what the loop did. Then it recomputes what should
have happened with plain PyTorch (PyTorch is the oracle: the gradient of the mean cross-entropy over the step's batch,
clipped to ``max_norm``, at the very parameters the loop used) and compares. Nothing is checked textually, so any
correct way of writing a function passes.

A report names the failing check, the step, what was observed, the student's trace beside the expected order, and
the fix in one sentence. Checks depend on each other: when one root mistake breaks several (no ``zero_grad`` also makes
the applied gradient wrong), only the root is reported and the checks that depend on it are listed as not run.

Public API: check_normalize, check_train_one_epoch, check_evaluate, check_checkpoint, check_resume,
check_param_groups, show_trace, CheckReport.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import linecache
import math
import numbers
import random
import tempfile
import textwrap
import warnings
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LinearLR

from .data import MEAN, STD, make_loader, normalize, set_position
from .models import SmallCNN
from .trace import Event, ReferenceCalled, TooManyEvents, Tracer, format_events, global_norm

# --- the tiny world every check runs in ------------------------------------------------------------------------------

SEED = 20240917
MAX_EVENTS = 2000  # a run on the checks' tiny data records well under 200: more means a loop that never ends
DEVICE = "cpu"  # a string: the contract allows torch.device or str, and a string is what most students pass
N_TRAIN, BATCH = 34, 8  # 5 batches, the last with 2 samples: per-batch and per-sample averages differ
N_EVAL = 26  # 4 batches, the last with 2 samples
ACCUM = 2  # 34 samples in batches of 8 -> windows of 2, 2 and a trailing 1 micro-batch
LR = 0.02
LOGIT_GAIN = 20.0  # wider logits: losses differ a lot between samples, so averaging mistakes are visible
CLIP_FRACTION = 0.25  # max_norm is a quarter of the smallest step gradient: every step must clip
AMP_DTYPE = torch.bfloat16  # what CPU autocast supports
INIT_SCALE = 2.0**16  # a large loss scale: clipping before unscale_ is off by a factor of 65536
TRAIN_EXERCISES = ("baseline", "scheduler", "clipping", "accumulation", "amp")
NOTEBOOKS = {"normalize": "00_data_tour", "baseline": "01_baseline", "evaluate": "01_baseline",
             "scheduler": "02_scheduler", "clipping": "03_clipping", "accumulation": "04_accumulation",
             "amp": "05_amp", "checkpoint": "06_checkpointing", "resume": "07_crash_resume",
             "param_groups": "08_stretch"}
# the positional parameters of each contract (docs/exercises.md), in order
CONTRACTS = {
    "normalize": ("images",),
    "baseline": ("model", "loader", "optimizer", "device"),
    "scheduler": ("model", "loader", "optimizer", "scheduler", "device"),
    "clipping": ("model", "loader", "optimizer", "scheduler", "max_norm", "device"),
    "accumulation": ("model", "loader", "optimizer", "scheduler", "max_norm", "accum_steps", "device"),
    "amp": ("model", "loader", "optimizer", "scheduler", "max_norm", "scaler", "amp_dtype", "device"),
    "evaluate": ("model", "loader", "device"),
    "save_checkpoint": ("path", "model", "optimizer", "scheduler", "scaler", "step"),
    "load_checkpoint": ("path", "model", "optimizer", "scheduler", "scaler"),
    "resume": ("model", "optimizer", "scheduler", "train_loader", "epochs", "ckpt_dir", "save_every", "device"),
    "param_groups": ("model", "weight_decay"),
}
# the lab's own implementations a graded function must not hand its work to ("module:function")
FORBIDDEN = {
    "train": ("labutils.loop:train_one_epoch", "labutils.loop:fit", "labutils.loop:optimizer_step"),
    "evaluate": ("labutils.evaluation:evaluate", "labutils.loop:evaluate", "labutils.loop:fit"),
    "checkpoint": ("labutils.checkpoint:save_checkpoint", "labutils.checkpoint:load_checkpoint",
                   "labutils.checkpoint:atomic_save", "labutils.checkpoint:verified_load",
                   "labutils.checkpoint:load_latest_valid"),
    "resume": ("labutils.loop:fit", "labutils.loop:train_one_epoch"),
    "normalize": ("labutils.data:normalize",),
    "param_groups": ("labutils.optim:param_groups",),
}


class SimulatedCrash(BaseException):
    """What check_resume's ``on_step`` raises to stop a run mid-epoch (a BaseException: ``except Exception`` in the
    student's loop must not swallow the crash)."""


# --- reports ---------------------------------------------------------------------------------------------------------


@dataclass
class Failure:
    """One failed check: a short stable id (``"zero_grad"``), the optimizer step (or None) and a message for a
    student; ``details`` holds their trace beside the expected order when the order matters."""

    check: str
    message: str
    step: int | None = None
    details: str = ""

    def __str__(self) -> str:
        text = f"[{self.check}] {self.message}"
        return text + ("\n" + textwrap.indent(self.details, "    ") if self.details else "")


@dataclass
class CheckReport:
    """The verdict on one graded function. ``passed``, ``failures``, the ``trace`` of the (main) run, and the checks
    that were ``skipped`` because one they depend on failed."""

    name: str
    checks: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    trace: list[Event] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        if self.passed:
            return f"✓ {self.name} passed all {len(self.checks)} checks ({', '.join(self.checks)})"
        failed = list(dict.fromkeys(f.check for f in self.failures))
        lines = [f"✗ {self.name} failed: {', '.join(failed)}", ""]
        lines += [str(f) + "\n" for f in self.failures]
        if self.skipped:
            lines.append(f"Not checked until that is fixed: {', '.join(self.skipped)}.")
        return "\n".join(lines).rstrip()

    def __repr__(self) -> str:
        return str(self)  # a check cell ending in check_...(fn) shows the verdict, not a dataclass dump

    def assert_passed(self) -> "CheckReport":
        if not self.passed:
            raise AssertionError(str(self))
        return self


def _run_stages(report: CheckReport, stages, ctx, applicable) -> None:
    """Run ``(name, fn, deps)`` stages in order; a stage whose dependency failed (or could not run) is skipped.

    ``fn(ctx)`` returns a list of failures ([] = passed) or None when it cannot judge (e.g. the run crashed first).
    """
    blocked: set[str] = set()
    for name, fn, deps in stages:
        if name not in applicable:
            continue
        if blocked & set(deps):
            blocked.add(name)
            report.skipped.append(name)
            continue
        failures = fn(ctx)
        if failures is None or failures:
            blocked.add(name)
            report.failures += failures or []


# --- calling the student's function ----------------------------------------------------------------------------------


@dataclass
class Run:
    """What one call of a graded function did."""

    events: list[Event]
    result: object = None
    error: BaseException | None = None
    reference: str | None = None  # the lab function it handed its work to, if any
    crashed: bool = False  # our SimulatedCrash came out, as intended

    @property
    def complete(self) -> bool:
        return self.error is None and self.reference is None and not self.crashed


def _call(fn, args, tracer: Tracer, kwargs=None) -> Run:
    run = Run(tracer.events)
    with tracer:
        try:
            run.result = fn(*args, **(kwargs or {}))
        except ReferenceCalled as exc:
            run.reference = exc.name
        except SimulatedCrash:
            run.crashed = True
        except (Exception, TooManyEvents) as exc:  # the student's bug: reported as a failure, never re-raised
            run.error = exc
    if run.reference is None:
        run.reference = next((e.info["name"] for e in run.events if e.kind == "reference"), None)
    return run


@contextmanager
def _isolated():
    """Checks leave the caller as they found it: RNG streams, thread count, grad mode and warnings filters."""
    py_state, np_state, threads = random.getstate(), np.random.get_state(), torch.get_num_threads()
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings(), torch.inference_mode(False), \
            torch.enable_grad():
        warnings.simplefilter("ignore")  # e.g. "lr_scheduler.step() before optimizer.step()": we say it better
        torch.set_num_threads(1)  # tiny tensors: threads only add overhead, and stall badly on a busy machine
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            random.setstate(py_state)
            np.random.set_state(np_state)


def _exception_failure(name: str, fn, exc: BaseException, when: str = "") -> Failure:
    """'train_one_epoch raised KeyError at line 7 (`...`): ...' pointing into the student's code, not torch's."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    line, tb = None, exc.__traceback__
    while tb is not None:
        if code is not None and tb.tb_frame.f_code.co_filename == code.co_filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = ""
    if line is not None:
        source = linecache.getline(code.co_filename, line).strip()
        where = f" at line {line - code.co_firstlineno + 1} of {name}" + (f" (`{source}`)" if source else "")
    text = (str(exc).strip().splitlines() or [""])[0][:300]
    return Failure("exception", f"{name}{when} raised {type(exc).__name__}{where}: {text}")


def _reference_failure(name: str, reference: str) -> Failure:
    return Failure("uses_reference", f"{name} called {reference}, the lab's own reference implementation: the "
                   f"exercise is to write this part yourself. Replace the call with your own code.")


def _check_signature(report: CheckReport, fn, name: str, contract: str, keywords=()) -> bool:
    """Can ``fn`` be called the way the contract calls it? Says which parameter is missing when it cannot."""
    params = CONTRACTS[contract]
    wanted = f"{name}({', '.join(params + tuple(f'{k}=None' for k in keywords))})"
    if not callable(fn):
        report.failures.append(Failure("signature", f"{name} is a {type(fn).__name__}, not a function: define "
                                                    f"def {wanted}:"))
        return False
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # a builtin or C function: just call it
    theirs = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    try:
        sig.bind(*params, **{k: None for k in keywords})
    except TypeError:
        missing = [p for p in params + tuple(keywords) if p not in sig.parameters]
        if not missing or len(missing) == len(params + tuple(keywords)):
            missing = list(params[len(theirs):]) or list(keywords)
        what = f"is missing {', '.join(missing)}" if missing else "takes different parameters"
        report.failures.append(Failure("signature", f"{name}({', '.join(sig.parameters)}) {what}: the "
                                                    f"{NOTEBOOKS[contract]} contract is {wanted}. Use that exact "
                                                    f"parameter list, in that order."))
        return False
    if sorted(theirs[: len(params)]) == sorted(params) and theirs[: len(params)] != list(params):
        report.failures.append(Failure("signature", f"{name}({', '.join(theirs)}) has the contract's parameters in "
                                                    f"a different order: callers pass them as {wanted}."))
        return False
    return True


def _number_problem(value, what: str) -> str | None:
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        return (f"{what} is a tensor: return a Python float with .item() (a tensor that requires grad also keeps "
                f"every batch's graph alive)")
    return f"{what} is {_show(value)}, not a number"


def _show(value) -> str:
    """A returned value as a student recognises it: small values as they are, big ones by their type."""
    if value is None or isinstance(value, (bool, numbers.Number, str)):
        return repr(value)[:60]
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)) and len(value) <= 3 and all(isinstance(v, numbers.Number) for v in value):
        return repr(value)
    return f"a {type(value).__name__}" + (f" of length {len(value)}" if isinstance(value, (tuple, list)) else "")


# --- tiny data and models --------------------------------------------------------------------------------------------


def _images(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, 28, 28), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def _tiny_model(dropout: float = 0.0, gain: float = LOGIT_GAIN) -> SmallCNN:
    model = SmallCNN(channels=(2, 4), dropout=dropout)  # ~25k parameters: a step takes about a millisecond
    with torch.no_grad():
        model.head[-1].weight.mul_(gain)
    return model


def _crafted_labels(model, images: torch.Tensor, n_last: int) -> torch.Tensor:
    """Labels the model gets right, except in the small last batch where it is as wrong as it can be: the last batch's
    loss and accuracy differ a lot from the rest, so averaging per batch instead of per sample shows."""
    was_training = model.training
    with torch.no_grad():
        logits = model.eval()(normalize(images))
    model.train(was_training)
    labels = logits.argmax(dim=1)
    labels[-n_last:] = logits[-n_last:].argmin(dim=1)
    return labels


def _match(x, batches) -> int | None:
    """Which of the loader's batches is ``x`` (the input a forward saw)?"""
    if not isinstance(x, torch.Tensor):
        return None
    x = x.detach().float().cpu()
    candidates = [j for j, (bx, _) in enumerate(batches) if bx.shape == x.shape]
    exact = [j for j in candidates if torch.equal(batches[j][0], x)]
    close = [j for j in candidates if torch.allclose(batches[j][0], x, atol=1e-2)]  # e.g. a bf16 copy of x
    return (exact or close or [None])[0]


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in tensors])


def _rel(a, b) -> float:
    """Relative distance of two lists of tensors, taken as one long vector."""
    a, b = _flat(a), _flat(b)
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def _clipped(grads, max_norm: float):
    norm = global_norm(grads)
    return [g * min(1.0, max_norm / (norm + 1e-6)) for g in grads]  # exactly clip_grad_norm_'s formula


def _close(a: float, b: float, rtol: float) -> bool:
    return abs(a - b) <= rtol * max(abs(b), 1e-8)


# --- train_one_epoch: the case, the run and the trace view -----------------------------------------------------------


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

    @property
    def args(self) -> tuple:
        values = {"model": self.model, "loader": self.loader, "optimizer": self.optimizer,
                  "scheduler": self.scheduler, "max_norm": self.max_norm, "accum_steps": self.accum_steps,
                  "scaler": self.scaler, "amp_dtype": self.amp_dtype, "device": DEVICE}
        return tuple(values[name] for name in CONTRACTS[self.exercise])

    @property
    def windows(self) -> list[int]:
        """How many micro-batches each optimizer step should take (the last may be a partial group)."""
        n, k = len(self.batches), self.accum_steps
        return [min(k, n - start) for start in range(0, n, k)]


def _train_case(exercise: str, with_scaler: bool = True) -> TrainCase:
    torch.manual_seed(SEED)
    model = _tiny_model()
    images = _images(N_TRAIN, SEED)
    labels = _crafted_labels(model, images, N_TRAIN % BATCH)
    loader = make_loader(images, labels, BATCH, shuffle=False)  # a real DataLoader: len(loader) works
    case = TrainCase(exercise, model, copy.deepcopy(model), loader, list(loader),
                     torch.optim.SGD(model.parameters(), lr=LR))
    if exercise != "baseline":
        case.scheduler = LinearLR(case.optimizer, start_factor=1.0, end_factor=0.5, total_iters=8)
    if exercise == "accumulation":
        case.accum_steps = ACCUM
    if exercise == "amp":
        case.amp_dtype = AMP_DTYPE
        case.scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE) if with_scaler else None
    if exercise in ("clipping", "accumulation", "amp"):
        case.max_norm = _max_norm(case)
    return case


def _max_norm(case: TrainCase) -> float:
    """A max_norm below every step's gradient norm at the start, so that a missing clip always shows."""
    params = [p.detach().clone() for p in case.reference.parameters()]
    norms, start = [], 0
    for size in case.windows:
        grads = [torch.zeros_like(p) for p in params]
        for x, y in case.batches[start: start + size]:
            g, _ = _reference(case, params, x, y, case.amp_dtype)
            grads = [a + b / size for a, b in zip(grads, g)]
        norms.append(global_norm(grads))
        start += size
    return float(f"{CLIP_FRACTION * min(norms):.2g}")  # a round number reads better in messages


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


@dataclass
class Micro:
    """One training forward (with autograd on), the backward that followed it and the step it belongs to."""

    forward: int  # event index
    batch: int | None  # index into case.batches
    backward: int | None = None
    step: int | None = None  # number of the optimizer step whose window it is in; None after the last step


class TrainView:
    """A student's run of train_one_epoch, indexed for the checks: steps, windows of micro-batches, references."""

    def __init__(self, case: TrainCase, run: Run):
        self.case, self.run, self.events = case, run, run.events
        self.exercise = case.exercise
        self.tol = 2e-2 if case.amp_dtype is not None else 1e-3
        self.steps = [i for i, e in enumerate(self.events) if e.kind == "step"]  # step k is at steps[k - 1]
        self.micros: list[Micro] = []
        self.forwards = []
        for i, e in enumerate(self.events):
            if e.kind == "forward":
                batch = _match(e.data["x"], case.batches)
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
        self.trailing = [m for m in self.micros if m.step is None]
        self._refs: dict = {}
        self.accepted: dict[int, float] = {}  # step -> the 1/window factor its gradient matched

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
        size, accum = len(self.windows[k]), self.case.accum_steps
        if k == len(self.steps) and size < accum:
            return [1.0 / size, 1.0 / accum]  # Lightning and accelerate use 1/accum_steps here
        return [1.0 / accum]

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

    def expected_order(self, first: bool) -> list[str]:
        case, amp = self.case, self.case.amp_dtype is not None
        lines = ["model.train()  (once, at the start)"] if first else []
        lines.append("optimizer.zero_grad()")
        for _ in range(case.accum_steps):
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
        return _beside(self.events, lo, hi, self.expected_order(first=lo == 0), mark, title)


def _beside(events, lo: int, hi: int, expected: list[str], mark: int | None, title: str, limit: int = 16) -> str:
    """The student's numbered events next to the expected order, the offending event marked with <--."""
    if hi - lo > limit:  # long windows (accumulation): keep the part around the offending event
        lo = hi - limit if mark is None else max(lo, min(mark - limit // 2, hi - limit))
        hi = lo + limit
    left = [line + ("  <--" if n == mark else "") for n, line in zip(range(lo, hi), format_events(events, lo, hi))]
    width = min(max(len(s) for s in left + [title]) + 3, 78)
    rows = [f"{title:<{width}}expected order"]
    rows += [f"{a[:width - 1]:<{width}}{b}" for a, b in itertools.zip_longest(left, expected, fillvalue="")]
    return "\n".join(rows)


def _run_train(fn, case: TrainCase) -> TrainView:
    case.model.eval()  # as if evaluation just ran: a loop that forgets model.train() would train in eval mode
    tracer = Tracer(case.model, case.optimizer, case.scheduler, case.scaler, forbidden=FORBIDDEN["train"],
                    max_events=MAX_EVENTS)
    return TrainView(case, _call(fn, case.args, tracer))


# --- train_one_epoch: the checks -------------------------------------------------------------------------------------


def _st_return_value(v: TrainView):
    if not v.run.complete:
        return None
    result, wants_norms = v.run.result, v.exercise in ("clipping", "accumulation", "amp")
    if not wants_norms:
        problem = _number_problem(result, "the returned mean loss")
        return [Failure("return_value", f"{problem}. train_one_epoch returns the epoch's mean training loss.")] \
            if problem else []
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        return [Failure("return_value", f"train_one_epoch returned {_show(result)}; the contract returns a pair: "
                                        "(mean loss, list of pre-clip norms).")]
    problem = _number_problem(result[0], "the mean loss (first returned value)")
    norms = result[1]
    if problem is None and not isinstance(norms, (list, tuple)):
        problem = f"the norms (second returned value) are a {type(norms).__name__}, not a list of floats"
    if problem is None:
        problem = next((_number_problem(n, f"norm {i + 1} of the returned list") for i, n in enumerate(norms)
                        if _number_problem(n, "")), None)
    if problem is None and len(norms) != len(v.steps):
        problem = (f"{len(norms)} norms were returned for {len(v.steps)} optimizer steps: append one norm (the value "
                   f"clip_grad_norm_ returns) per optimizer step")
    return [Failure("return_value", problem + ".")] if problem else []


def _st_train_mode(v: TrainView):
    for m in v.micros:
        event = v.events[m.forward]
        if not event.info["training"]:
            return [Failure("train_mode", f"the forward of batch {event.info.get('batch', '?')} ran in eval mode: "
                            "the model came in eval mode (as after an evaluation) and the loop never switched it "
                            "back, so dropout and BatchNorm would be off while training. Call model.train() at the "
                            "start of train_one_epoch.", m.step, v.beside(m.step, m.forward))]
    return []


def _st_grad_enabled(v: TrainView):
    trained = {m.batch for m in v.micros}
    for i, batch in v.forwards:
        event = v.events[i]
        if not event.info["grad"] and batch not in trained:
            how = "inference_mode" if event.info["inference"] else "torch.no_grad()"
            return [Failure("grad_enabled", f"the forward of batch {event.info.get('batch', '?')} ran under {how}, "
                            "so the loss had no graph to backpropagate through. Run the training forward with "
                            "autograd on (no no_grad/inference_mode around it).", None, v.beside(None, i))]
    return []


def _st_autocast(v: TrainView):
    for m in v.micros:
        dtype = v.events[m.forward].info["autocast"]
        if dtype != v.case.amp_dtype:
            seen = "without torch.autocast" if dtype is None else f"under autocast {dtype}"
            return [Failure("autocast", f"the forward of batch {v.events[m.forward].info.get('batch', '?')} ran "
                            f"{seen}, with amp_dtype={v.case.amp_dtype}. Wrap forward and loss in "
                            "torch.autocast(device_type, dtype=amp_dtype).", m.step)]
    return []


def _st_batches(v: TrainView):
    n = len(v.case.batches)
    unknown = [m for m in v.micros if m.batch is None]
    if unknown:
        return [Failure("batches", "a training forward received an input that is not one of the loader's batches: "
                        "pass each batch's x (moved to device) to the model as it is.", unknown[0].step)]
    if not v.run.complete:
        return []
    counts = Counter(m.batch for m in v.micros)
    missing = [b + 1 for b in range(n) if counts[b] == 0]
    if missing:
        return [Failure("batches", f"batch {missing[0]} of {n} was never trained on (the last one has only "
                        f"{len(v.case.batches[-1][1])} samples): loop over every batch of the loader.")]
    twice = [b + 1 for b, c in counts.items() if c > 1]
    if twice:
        return [Failure("batches", f"batch {twice[0]} of {n} went through a training forward {counts[twice[0] - 1]}"
                        " times: one pass over the loader trains on each batch once.")]
    return []


def _st_order(v: TrainView):
    for k, window in v.windows.items():
        step_at = v.steps[k - 1]
        if not window:
            return [Failure("order", f"optimizer.step() ran twice with no training forward in between (steps "
                            f"{k - 1} and {k}). Step once per batch, after loss.backward().", k, v.beside(k, step_at))]
        for m in window:
            if m.backward is None:
                return [Failure("order", f"loss.backward() never ran for batch {v.events[m.forward].info.get('batch')}"
                                f" before optimizer.step() #{k}: the step had no gradient from it. Call "
                                "loss.backward() before optimizer.step().", k, v.beside(k, step_at))]
            if m.backward > step_at:
                return [Failure("order", f"optimizer.step() ran before loss.backward() at step {k}: the update used "
                                "the previous batch's gradients (or none at all). Call backward() first.", k,
                                v.beside(k, step_at))]
    if v.run.complete and v.exercise != "accumulation":
        for m in v.trailing:
            return [Failure("order", f"batch {v.events[m.forward].info.get('batch')} went through forward and "
                            "backward but no optimizer.step() followed, so it never changed the weights. Step "
                            "after every batch's backward.", None, v.beside(None, m.forward))]
    return []


def _st_zero_grad(v: TrainView):
    for k, window in v.windows.items():
        step_at = v.steps[k - 1]
        backwards = [m.backward for m in window]
        applied = v.step_event(k).data["grads"]
        if all(g is None or not g.any() for g in applied):
            clears = [i for i in range(max(backwards), step_at) if v.events[i].kind == "zero_grad"]
            who = v.events[clears[-1]].describe() if clears else "something"
            return [Failure("zero_grad", f"{who} ran between loss.backward() and optimizer.step() at step {k}: it "
                            "wiped the gradients, so the step had nothing to apply. Clear the gradients at the top of "
                            "the step or right after optimizer.step().", k,
                            v.beside(k, clears[-1] if clears else step_at))]
        first = min(backwards)
        if not v.events[first].info["fresh"]:
            return [Failure("zero_grad", f"at step {k}, loss.backward() added the new gradients to the ones still in "
                            f".grad from step {k - 1}: nothing cleared them, so the update used the sum of every "
                            "batch so far. Call optimizer.zero_grad() once per step (at the top of the step or right "
                            "after optimizer.step()).", k, v.beside(k, first))]
    return []


def _st_accumulation(v: TrainView):
    expected, accum = v.case.windows, v.case.accum_steps
    sizes = [len(w) for w in v.windows.values()]
    for k, window in v.windows.items():
        for j, m in enumerate(window[1:], start=2):
            if v.events[m.backward].info["fresh"]:
                return [Failure("accumulation", f"the gradients were cleared before micro-batch {j} of step {k}, so "
                                "only the last micro-batch of the window counted. Clear once per optimizer step, not "
                                "per micro-batch.", k, v.beside(k, m.backward))]
    if not v.run.complete:
        return []
    if v.trailing:
        first = v.events[v.trailing[0].forward].info.get("batch")
        return [Failure("accumulation", f"the last {len(v.trailing)} micro-batch(es) (from batch {first}) went "
                        "through backward but no optimizer.step() followed: the trailing partial group was dropped, "
                        "so its data never reached the weights. Also step after the last micro-batch (when "
                        "i + 1 == len(loader)).", None, v.beside(None, v.trailing[0].forward))]
    if accum > 1 and sizes and all(s == 1 for s in sizes) and len(sizes) > len(expected):
        return [Failure("accumulation", f"optimizer.step() ran after every micro-batch ({len(sizes)} steps for "
                        f"{len(v.micros)} micro-batches): with accum_steps={accum} it should run once every {accum} "
                        f"micro-batches ({len(expected)} steps). Step only when (i + 1) % accum_steps == 0 or at the "
                        "last batch.", 1, v.beside(1))]
    for k, (size, want) in enumerate(zip(sizes, expected), start=1):
        if size != want:
            return [Failure("accumulation", f"optimizer step {k} took {size} micro-batch(es); with accum_steps="
                            f"{accum} it should take {want} (only the last group may be smaller).", k, v.beside(k))]
    if len(sizes) != len(expected):
        return [Failure("accumulation", f"{len(sizes)} optimizer steps for {len(v.micros)} micro-batches; with "
                        f"accum_steps={accum} there should be {len(expected)}.")]
    return []


def _st_scheduler(v: TrainView):
    scheds = [i for i, e in enumerate(v.events) if e.kind == "scheduler"]
    n_steps, n_micro = len(v.steps), len(v.micros)
    if v.run.complete and n_steps:
        if not scheds:
            return [Failure("scheduler", f"scheduler.step() was never called in {n_steps} optimizer steps: the "
                            "learning rate never changed. Call scheduler.step() right after every optimizer.step().",
                            1, v.beside(1))]
        if len(scheds) == n_micro != n_steps:
            return [Failure("scheduler", f"scheduler.step() ran {len(scheds)} times for {n_steps} optimizer steps: "
                            "once per micro-batch, so the schedule ran ahead of the optimizer. Call scheduler.step() "
                            "right after optimizer.step(), only when the optimizer steps.", 1, v.beside(1, scheds[0]))]
        if len(scheds) < n_steps and scheds[0] > v.steps[-1]:
            return [Failure("scheduler", f"scheduler.step() ran {len(scheds)} time(s) for {n_steps} optimizer steps, "
                            "after the last one: it is stepped per epoch. The lab's schedules count optimizer steps: "
                            "call scheduler.step() right after every optimizer.step().", n_steps,
                            v.beside(n_steps, scheds[0]))]
    before = [i for i in scheds if v.steps and i < v.steps[0]]
    if before:
        return [Failure("scheduler", "scheduler.step() ran before optimizer.step() at step 1: the first update already "
                        "used the schedule's second learning rate, and every step after it was one ahead. Call "
                        "scheduler.step() right after optimizer.step().", 1, v.beside(1, before[0]))]
    for k in range(1, n_steps + 1):
        end = v.steps[k] if k < n_steps else len(v.events)
        between = [i for i in scheds if v.steps[k - 1] < i < end]
        if len(between) > 1:
            return [Failure("scheduler", f"scheduler.step() ran {len(between)} times after optimizer step {k}: step "
                            "it exactly once per optimizer step.", k, v.beside(k, between[1]))]
        if not between and (k < n_steps or v.run.complete):
            return [Failure("scheduler", f"scheduler.step() did not run after optimizer step {k}: call it right "
                            "after every optimizer.step().", k, v.beside(k, v.steps[k - 1]))]
    return []


def _st_scale(v: TrainView):
    for m in v.micros:
        if m.backward is not None and not any(e.kind == "scale" for e in v.events[m.forward: m.backward]):
            step = m.step or len(v.steps) + 1
            return [Failure("scale", f"loss.backward() ran on the unscaled loss at step {step} while a GradScaler is "
                            "in use, so scaler.unscale_ would divide true gradients by the scale. Call "
                            "scaler.scale(loss).backward().", step, v.beside(m.step, m.backward))]
    return []


def _st_unscale(v: TrainView):
    for k, window in v.windows.items():
        last_backward, step_at = max(m.backward for m in window), v.steps[k - 1]
        for i in range(last_backward, step_at):
            event = v.events[i]
            if event.kind == "unscale" and not event.info["inside_step"]:
                break
            if event.kind == "clip":
                scale = v.scale_used(k)
                return [Failure("unscale", f"clip_grad_norm_ ran before scaler.unscale_(optimizer) at step {k}: it "
                                f"measured the scaled gradients (norm {event.info['norm_before']:.4g}, {scale:g}x too "
                                f"big) and clipped those to max_norm, so the update came out about {scale:g}x too "
                                "small. Call scaler.unscale_(optimizer) before clipping.", k, v.beside(k, i))]
    return []


def _st_scaler_step(v: TrainView):
    for k in v.windows:
        if not v.step_event(k).info["via_scaler"]:
            return [Failure("scaler_step", f"optimizer.step() was called directly at step {k} while a GradScaler is in "
                            "use: that skips the scaler's inf/nan check, so an overflowing step would write inf into "
                            "the weights. Call scaler.step(optimizer) instead.", k, v.beside(k, v.steps[k - 1]))]
    return []


def _st_scaler_update(v: TrainView):
    n = len(v.steps)
    for k in range(1, n + 1):
        end = v.steps[k] if k < n else len(v.events)
        region = v.events[v.steps[k - 1] + 1: end]
        updates = sum(e.kind == "scaler_update" for e in region)
        went_on = any(e.kind in ("scale", "unscale", "scaler_step") for e in region)
        if updates == 0 and (k < n or v.run.complete or went_on):
            return [Failure("scaler_update", f"scaler.update() did not run after scaler.step() at step {k}: the loss "
                            "scale never adapts, and the next scaler.unscale_() raises. Call scaler.update() right "
                            "after scaler.step(optimizer).", k, v.beside(k, v.steps[k - 1]))]
        if updates > 1:
            return [Failure("scaler_update", f"scaler.update() ran {updates} times after step {k}: call it exactly "
                            "once per scaler.step().", k, v.beside(k))]
    return []


def _st_gradient(v: TrainView):
    for k, window in v.windows.items():
        if any(m.batch is None or m.backward is None for m in window):
            return None
        pre = v.pre_clip(k)
        matched = [f for f in v.factors(k) if _rel(pre, v.combined(k, f)) <= v.tol]
        if matched:
            v.accepted[k] = matched[0]
            continue
        factor = v.factors(k)[0]
        expected = v.combined(k, factor)
        if _rel(pre, v.combined(k, factor, softmax=True)) <= v.tol:
            ratio = global_norm(expected) / max(global_norm(pre), 1e-12)
            return [Failure("softmax", f"the gradient at step {k} is that of cross-entropy on softmax probabilities "
                            f"(about {ratio:.0f}x smaller than it should be): F.cross_entropy applies log-softmax "
                            "itself, so a softmax before it squashes the gradients. Pass the raw logits to "
                            "F.cross_entropy.", k)]
        if v.exercise == "accumulation" and len(window) > 1 and _rel(pre, v.combined(k, 1.0)) <= v.tol:
            return [Failure("accumulation", f"the gradient at step {k} is {len(window)}x the mean over its "
                            f"{len(window)} micro-batches: the loss was not divided by accum_steps, so every step "
                            "acted as if the learning rate were that much larger. Use (loss / accum_steps).backward().",
                            k)]
        if v.exercise == "accumulation":
            return [Failure("accumulation", f"the gradient at step {k} is not the mean over its micro-batches "
                            f"(relative difference {_rel(pre, expected):.2g}): divide each micro-batch's loss by "
                            "accum_steps before backward().", k)]
        return [Failure("gradient", f"the gradient at step {k} is not the gradient of the mean cross-entropy over "
                        f"the step's batch (relative difference {_rel(pre, expected):.2g}). Compute "
                        "loss = F.cross_entropy(model(x), y) on the raw logits and call loss.backward() on it.", k)]
    if v.case.max_norm is None:  # no clipping in this exercise: what backward produced must reach the step untouched
        for k in v.windows:
            if _rel(v.applied(k), v.pre_clip(k)) > v.tol:
                return [Failure("gradient", f"the gradients changed between loss.backward() and optimizer.step() at "
                                f"step {k}: this exercise applies them as they are.", k, v.beside(k))]
    return []


def _st_clip(v: TrainView):
    max_norm, clips = v.case.max_norm, [i for i, e in enumerate(v.events) if e.kind == "clip"]
    for k, window in v.windows.items():
        wanted = v.combined(k, v.accepted[k])
        applied = v.applied(k)
        if _rel(applied, _clipped(wanted, max_norm)) <= v.tol:
            continue
        norm, step_at = global_norm(wanted), v.steps[k - 1]
        start = v.steps[k - 2] if k > 1 else -1
        last_backward = max(m.backward for m in window)
        next_forward = next((i for i, _ in v.forwards if i > step_at), len(v.events))
        before = [i for i in clips if start < i < last_backward]
        between = [i for i in clips if last_backward < i < step_at]
        after = [i for i in clips if step_at < i < next_forward]
        unclipped = f"the unclipped gradient (norm {norm:.4g} > max_norm={max_norm:g})"
        if _rel(applied, wanted) <= v.tol and not between:
            if not clips:
                msg, mark = (f"clip_grad_norm_ was never called: step {k} applied {unclipped}. Call "
                             "clip_grad_norm_(model.parameters(), max_norm) between loss.backward() and "
                             "optimizer.step().", step_at)
            elif before:
                msg, mark = (f"clip_grad_norm_ ran before loss.backward() at step {k}, when this step's gradients did "
                             f"not exist yet, so the update used {unclipped}. Call it between loss.backward() and "
                             "optimizer.step().", before[-1])
            elif after:
                msg, mark = (f"clip_grad_norm_ ran after optimizer.step() at step {k}: the update had already used "
                             f"{unclipped}. Clip between loss.backward() and optimizer.step().", after[0])
            else:
                msg, mark = (f"step {k} applied {unclipped}. Call clip_grad_norm_(model.parameters(), max_norm) "
                             "between loss.backward() and optimizer.step().", step_at)
            return [Failure("clip", msg, k, v.beside(k, mark))]
        return [Failure("clip", f"the gradient applied at step {k} has norm {global_norm(applied):.4g}; clipping the "
                        f"step's gradient (norm {norm:.4g}) to max_norm={max_norm:g} gives {min(norm, max_norm):.4g}. "
                        "Clip once, after backward, with clip_grad_norm_(model.parameters(), max_norm).", k,
                        v.beside(k, between[0] if between else step_at))]
    return []


def _st_norms(v: TrainView):
    if not v.run.complete:
        return None
    norms = v.run.result[1]
    for k, got in enumerate(norms, start=1):
        want = global_norm(v.combined(k, v.accepted[k]))
        if _close(float(got), want, v.tol):
            continue
        if _close(float(got), min(want, v.case.max_norm), v.tol):
            msg = (f"the norm returned for step {k} is {float(got):.4g}, the norm after clipping (max_norm="
                   f"{v.case.max_norm:g}); the contract logs the pre-clip norm {want:.4g}: keep the value "
                   "clip_grad_norm_ returns.")
        elif v.case.scaler is not None and _close(float(got), want * v.scale_used(k), v.tol):
            msg = (f"the norm returned for step {k} is {float(got):.4g}, the norm of the scaled gradients: log the "
                   "norm after scaler.unscale_(optimizer).")
        else:
            msg = (f"the norm returned for step {k} is {float(got):.4g}, but the step's gradient had norm {want:.4g} "
                   "before clipping: append what clip_grad_norm_ returns, once per optimizer step.")
        return [Failure("norms", msg, k)]
    return []


def _st_mean_loss(v: TrainView):
    if not v.run.complete:
        return None
    result = v.run.result
    value = float(result[0] if isinstance(result, (tuple, list)) else result)
    sizes = [len(v.case.batches[m.batch][1]) for m in v.micros]
    losses = [v.ref(m)[1] for m in v.micros]
    want = sum(n * loss for n, loss in zip(sizes, losses)) / sum(sizes)
    rtol = v.tol / 10
    if _close(value, want, rtol):
        return []
    per_batch = sum(losses) / len(losses)
    if _close(value, per_batch, rtol):
        return [Failure("per_sample", f"the returned mean loss {value:.4f} is the average of the per-batch losses; "
                        f"the per-sample average is {want:.4f}. They differ because the last batch has only "
                        f"{sizes[-1]} samples. Add loss.item() * len(y) per batch and divide by the number of "
                        "samples.")]
    if v.case.accum_steps > 1 and _close(value, want / v.case.accum_steps, rtol):
        return [Failure("mean_loss", f"the returned mean loss {value:.4f} is the loss divided by accum_steps; report "
                        f"the unscaled loss ({want:.4f}): add up loss.item() before dividing it for backward.")]
    return [Failure("mean_loss", f"the returned mean loss is {value:.4f}; the per-sample average of the training loss "
                    f"over the epoch is {want:.4f}. Add loss.item() * len(y) per batch and divide by the number of "
                    "samples.")]


TRAIN_STAGES = (
    ("return_value", _st_return_value, ()),
    ("train_mode", _st_train_mode, ()),
    ("grad_enabled", _st_grad_enabled, ()),
    ("autocast", _st_autocast, ()),
    ("batches", _st_batches, ("grad_enabled",)),
    ("order", _st_order, ("grad_enabled",)),
    ("zero_grad", _st_zero_grad, ("order",)),
    ("accumulation", _st_accumulation, ("order", "zero_grad")),
    ("scheduler", _st_scheduler, ()),
    ("scale", _st_scale, ("order",)),
    ("unscale", _st_unscale, ("order", "scale")),
    ("scaler_step", _st_scaler_step, ()),
    ("scaler_update", _st_scaler_update, ()),
    ("gradient", _st_gradient, ("batches", "order", "zero_grad", "accumulation", "scale", "autocast")),
    ("clip", _st_clip, ("gradient", "unscale")),
    ("norms", _st_norms, ("return_value", "clip")),
    ("mean_loss", _st_mean_loss, ("return_value", "gradient", "batches")),
)
_COMMON = ("return_value", "train_mode", "grad_enabled", "batches", "order", "zero_grad", "gradient", "mean_loss")
_SCALER = ("scale", "unscale", "scaler_step", "scaler_update")
EXERCISE_STAGES = {
    "baseline": _COMMON,
    "scheduler": _COMMON + ("scheduler",),
    "clipping": _COMMON + ("scheduler", "clip", "norms"),
    "accumulation": _COMMON + ("scheduler", "clip", "norms", "accumulation"),
    "amp": _COMMON + ("scheduler", "clip", "norms", "autocast") + _SCALER,
}


def _analyse_train(report: CheckReport, fn, view: TrainView, applicable, when: str = "") -> None:
    before = len(report.failures)
    if view.run.reference is not None:
        report.failures.append(_reference_failure("train_one_epoch", view.run.reference))
        return
    _run_stages(report, TRAIN_STAGES, view, applicable)
    for failure in report.failures[before:]:
        failure.message = when + failure.message
    if view.run.error is not None:
        error = _exception_failure("train_one_epoch", fn, view.run.error)
        error.message = when + error.message
        if len(report.failures) == before:
            report.failures.append(error)
        else:  # the root cause was found in what ran before the crash; the crash is its consequence
            report.failures[before].details += f"\n(after this, {error.message[0].lower()}{error.message[1:]})"


def check_train_one_epoch(fn, exercise: str = "baseline") -> CheckReport:
    """Run ``fn`` (train_one_epoch per the ``exercise``'s contract) on tiny data and check what its loop did.

    exercise: one of "baseline", "scheduler", "clipping", "accumulation", "amp".
    """
    if exercise not in TRAIN_EXERCISES:
        raise ValueError(f"exercise={exercise!r} is unknown: use one of {', '.join(TRAIN_EXERCISES)}")
    applicable = EXERCISE_STAGES[exercise]
    report = CheckReport(f"train_one_epoch ({NOTEBOOKS[exercise]})",
                         ["signature", "uses_reference"] + [s for s, _, _ in TRAIN_STAGES if s in applicable])
    if not _check_signature(report, fn, "train_one_epoch", exercise):
        return report
    with _isolated():
        view = _run_train(fn, _train_case(exercise))
        report.trace = view.events
        _analyse_train(report, fn, view, applicable)
        if exercise == "amp" and report.passed:  # the contract also allows scaler=None: plain backward and step
            no_scaler = _run_train(fn, _train_case(exercise, with_scaler=False))
            _analyse_train(report, fn, no_scaler, set(applicable) - set(_SCALER), "with scaler=None, ")
    return report


# --- evaluate --------------------------------------------------------------------------------------------------------


@dataclass
class EvalView:
    model: torch.nn.Module
    reference: torch.nn.Module
    batches: list
    run: Run
    training_after: bool = True

    @property
    def forwards(self) -> list[tuple[int, Event]]:
        return [(i, e) for i, e in enumerate(self.run.events) if e.kind == "forward"]


def _eval_case():
    torch.manual_seed(SEED + 1)
    model = _tiny_model(dropout=0.5)  # dropout: forgetting model.eval() changes the numbers
    images = _images(N_EVAL, SEED + 1)
    labels = _crafted_labels(model, images, N_EVAL % BATCH)
    loader = make_loader(images, labels, BATCH, shuffle=False)
    return model, copy.deepcopy(model), loader


def _run_evaluate(fn) -> EvalView:
    model, reference, loader = _eval_case()
    batches = list(loader)
    model.train()  # evaluate is called in the middle of training
    run = _call(fn, (model, loader, DEVICE), Tracer(model, forbidden=FORBIDDEN["evaluate"], max_events=MAX_EVENTS))
    view = EvalView(model, reference, batches, run, model.training)
    for _, event in view.forwards:
        j = _match(event.data["x"], batches)
        if j is not None:
            event.info["batch"] = f"{j + 1}/{len(batches)}"
    return view


_EVAL_ORDER = ["model.eval()", "forward batch 1 (eval mode, no_grad)", "...", "forward last batch", "model.train()"]


def _eval_beside(v: EvalView, mark: int | None) -> str:
    return _beside(v.run.events, 0, len(v.run.events), _EVAL_ORDER, mark, "your evaluate")


def _ev_return_value(v: EvalView):
    if not v.run.complete:
        return None
    r = v.run.result
    if not (isinstance(r, (tuple, list)) and len(r) == 2):
        return [Failure("return_value", f"evaluate returned {_show(r)}; the contract returns a pair "
                        "(mean loss, accuracy).")]
    problem = _number_problem(r[0], "the loss (first value)") or _number_problem(r[1], "the accuracy (second value)")
    if problem:
        return [Failure("return_value", problem + ".")]
    if not 0.0 <= r[1] <= 1.0:
        return [Failure("return_value", f"the accuracy {r[1]:.4g} is outside [0, 1]" +
                        (" (a percentage?): return correct / n_samples." if 1 < r[1] <= 100 else "."))]
    return []


def _ev_eval_mode(v: EvalView):
    if not v.forwards and v.run.complete:
        return [Failure("eval_mode", "evaluate never called the model.")]
    for i, e in v.forwards:
        if e.info["training"]:
            return [Failure("eval_mode", f"the forward of batch {e.info.get('batch', '?')} ran in train mode: dropout "
                            "was still dropping, so the numbers are noisy and too pessimistic. Call model.eval() "
                            "before the loop.", None, _eval_beside(v, i))]
    return []


def _ev_no_grad(v: EvalView):
    for i, e in v.forwards:
        if e.info["grad"]:
            return [Failure("no_grad", f"the forward of batch {e.info.get('batch', '?')} ran with autograd on: every "
                            "batch built a graph nobody backpropagates through (memory and time wasted). Wrap the loop "
                            "in torch.no_grad() (or torch.inference_mode()).", None, _eval_beside(v, i))]
    return []


def _ev_restore_mode(v: EvalView):
    if not v.run.complete:
        return None
    if not v.training_after:
        return [Failure("restore_mode", "evaluate left the model in eval mode: the next epoch would train with dropout "
                        "off unless it calls model.train() itself. Call model.train() before returning.", None,
                        _eval_beside(v, len(v.run.events) - 1))]
    return []


def _ev_per_sample(v: EvalView):
    if not v.run.complete:
        return None
    loss, acc = (float(x) for x in v.run.result)
    ref = v.reference.eval()
    with torch.no_grad():
        outputs = [(ref(x), y) for x, y in v.batches]
    sizes = [len(y) for _, y in outputs]
    losses = [F.cross_entropy(o, y).item() for o, y in outputs]
    soft = [F.cross_entropy(o.softmax(dim=1), y).item() for o, y in outputs]
    accs = [(o.argmax(dim=1) == y).float().mean().item() for o, y in outputs]
    n = sum(sizes)
    want_loss = sum(s * x for s, x in zip(sizes, losses)) / n
    want_acc = sum(s * a for s, a in zip(sizes, accs)) / n
    uneven = f"the last batch has only {sizes[-1]} samples"
    if not _close(loss, want_loss, 1e-4):
        if _close(loss, sum(losses) / len(losses), 1e-4):
            return [Failure("per_sample", f"the loss {loss:.4f} is the average of the per-batch means; the per-sample "
                            f"mean is {want_loss:.4f} ({uneven}). Sum loss.item() * len(y) (or use reduction='sum') "
                            "and divide by the number of samples.")]
        if _close(loss, sum(s * x for s, x in zip(sizes, soft)) / n, 1e-4):
            return [Failure("softmax", f"the loss {loss:.4f} is cross-entropy on softmax probabilities: "
                            "F.cross_entropy applies log-softmax itself. Pass the raw logits.")]
        return [Failure("per_sample", f"the loss is {loss:.4f}; the mean cross-entropy per sample over the whole "
                        f"loader is {want_loss:.4f}.")]
    if not _close(acc, want_acc, 1e-6):
        if _close(acc, sum(accs) / len(accs), 1e-6):
            return [Failure("per_sample", f"the accuracy {acc:.4f} is the average of the per-batch accuracies; the "
                            f"per-sample accuracy is {want_acc:.4f} ({uneven}). Count correct predictions and divide "
                            "by the number of samples.")]
        return [Failure("per_sample", f"the accuracy is {acc:.4f}; the fraction of correct predictions (argmax of the "
                        f"logits) over the whole loader is {want_acc:.4f}.")]
    return []


EVAL_STAGES = (
    ("return_value", _ev_return_value, ()),
    ("eval_mode", _ev_eval_mode, ()),
    ("no_grad", _ev_no_grad, ()),
    ("restore_mode", _ev_restore_mode, ()),
    ("per_sample", _ev_per_sample, ("return_value", "eval_mode")),
)


def check_evaluate(fn) -> CheckReport:
    """Run ``fn`` (evaluate(model, loader, device) -> (loss, accuracy)) on tiny data with an uneven last batch."""
    names = [s for s, _, _ in EVAL_STAGES]
    report = CheckReport("evaluate (01_baseline)", ["signature", "uses_reference"] + names)
    if not _check_signature(report, fn, "evaluate", "evaluate"):
        return report
    with _isolated():
        view = _run_evaluate(fn)
    report.trace = view.run.events
    if view.run.reference is not None:
        report.failures.append(_reference_failure("evaluate", view.run.reference))
        return report
    _run_stages(report, EVAL_STAGES, view, names)
    if view.run.error is not None and not report.failures:
        report.failures.append(_exception_failure("evaluate", fn, view.run.error))
    return report


# --- normalize_images and param_groups -------------------------------------------------------------------------------


def check_normalize(fn) -> CheckReport:
    """``normalize_images(images)``: uint8 (N, 28, 28) -> float32 (N, 1, 28, 28), ``(images / 255 - MEAN) / STD``."""
    report = CheckReport("normalize_images (00_data_tour)", ["signature", "uses_reference", "return_value", "values"])
    if not _check_signature(report, fn, "normalize_images", "normalize"):
        return report
    images = _images(6, SEED)
    images[0, 0, :2] = torch.tensor([0, 255], dtype=torch.uint8)  # both ends of the range
    given = images.clone()
    run = _call(fn, (given,), Tracer(forbidden=FORBIDDEN["normalize"]))
    if run.reference is not None:
        report.failures.append(_reference_failure("normalize_images", run.reference))
        return report
    if run.error is not None:
        report.failures.append(_exception_failure("normalize_images", fn, run.error))
        return report
    out, want = run.result, normalize(images)
    if not isinstance(out, torch.Tensor):
        problem = f"normalize_images returned a {type(out).__name__}, not a torch.Tensor"
    elif out.dtype != torch.float32:
        problem = f"the result has dtype {out.dtype}, not torch.float32 (use .float())"
    elif tuple(out.shape) != tuple(want.shape):
        problem = (f"the result has shape {tuple(out.shape)}, not {tuple(want.shape)} (N, 1, 28, 28): add the "
                   "channel dimension with .unsqueeze(1)")
    else:
        problem = None
    if problem:
        report.failures.append(Failure("return_value", problem + "."))
        return report
    raw = images.float()
    if not torch.equal(given, images):
        report.failures.append(Failure("values", "normalize_images changed its input in place: compute a new tensor "
                                                 "instead (the caller's images must stay uint8 pixels)."))
    elif not torch.allclose(out, want, atol=1e-5):
        hints = [((raw - MEAN) / STD, "it looks like the images were not divided by 255 first"),
                 ((raw / 255).unsqueeze(1), "it looks like MEAN was not subtracted and STD not divided by"),
                 ((raw / 255 - STD) / MEAN, "it looks like MEAN and STD were swapped")]
        hint = next((h for value, h in hints if torch.allclose(out.reshape(value.shape), value, atol=1e-4)), None)
        report.failures.append(Failure("values", f"the values differ from (images / 255 - MEAN) / STD (largest "
                                                 f"difference {float((out - want).abs().max()):.4g})" +
                                       (f": {hint}." if hint else ".")))
    return report


def check_param_groups(fn) -> CheckReport:
    """``param_groups(model, weight_decay)``: AdamW groups, decay on conv/linear weights, 0.0 on every ndim <= 1."""
    report = CheckReport("param_groups (08_stretch)", ["signature", "uses_reference", "return_value", "coverage",
                                                        "weight_decay"])
    if not _check_signature(report, fn, "param_groups", "param_groups"):
        return report
    with _isolated():
        torch.manual_seed(SEED)
        model = SmallCNN(channels=(2, 4), batchnorm=True)  # conv weights, BN scales and shifts, linear weights, biases
    names = {id(p): n for n, p in model.named_parameters()}
    wd = 0.05
    run = _call(fn, (model, wd), Tracer(forbidden=FORBIDDEN["param_groups"]))
    if run.reference is not None:
        report.failures.append(_reference_failure("param_groups", run.reference))
        return report
    if run.error is not None:
        report.failures.append(_exception_failure("param_groups", fn, run.error))
        return report
    groups = run.result
    if not (isinstance(groups, (list, tuple)) and groups and all(isinstance(g, dict) and "params" in g
                                                                 for g in groups)):
        report.failures.append(Failure("return_value", f"param_groups returned {_show(groups)}; the contract returns "
                                       "a list of dicts, each with a 'params' list (and a 'weight_decay')."))
        return report
    groups = [{**g, "params": list(g["params"])} for g in groups]  # a generator can be read only once
    seen = Counter(id(p) for g in groups for p in g["params"])
    twice = [names.get(i, "?") for i, c in seen.items() if c > 1]
    missing = [n for n, p in model.named_parameters() if id(p) not in seen]
    strangers = [i for i in seen if i not in names]
    coverage = (f"{twice[0]} is in more than one group" if twice else
                f"{missing[0]} is in no group" + (f" (nor are {len(missing) - 1} more)" if len(missing) > 1 else "")
                if missing else "a tensor that is not a parameter of the model is in a group" if strangers else None)
    if coverage:
        report.failures.append(Failure("coverage", coverage + ": every trainable parameter must be in exactly one "
                                                              "group."))
        return report
    default = torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults["weight_decay"]
    for group in groups:
        decay = group.get("weight_decay", default)
        for p in group["params"]:
            want = 0.0 if p.ndim <= 1 else wd
            if decay != want:
                why = ("a bias or normalisation parameter (ndim <= 1) must not be decayed" if p.ndim <= 1 else
                       f"conv/linear weights get weight_decay={wd}")
                unset = ("" if "weight_decay" in group else
                         f" (the group sets none, so AdamW uses its default {default})")
                report.failures.append(Failure("weight_decay", f"{names[id(p)]} has weight_decay={decay}{unset}: "
                                                               f"{why}."))
                return report
    return report


# --- save_checkpoint / load_checkpoint -------------------------------------------------------------------------------


@dataclass
class _Objects:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    scaler: object


def _ckpt_objects(seed: int, scaler: bool = True) -> _Objects:
    torch.manual_seed(seed)
    model = _tiny_model(dropout=0.5, gain=1.0)  # dropout: the resumed run needs the RNG state too
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # moment estimates: optimizer state matters
    scheduler = LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=10)
    # growth_interval=2: the loss scale has moved by the time of the save, so a missing scaler state shows
    grad_scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_interval=2) if scaler else None
    model.train()
    return _Objects(model, optimizer, scheduler, grad_scaler)


def _train_steps(o: _Objects, batches) -> None:
    for x, y in batches:
        o.optimizer.zero_grad()
        loss = F.cross_entropy(o.model(x), y)
        if o.scaler is not None:
            o.scaler.scale(loss).backward()
            o.scaler.step(o.optimizer)
            o.scaler.update()
        else:
            loss.backward()
            o.optimizer.step()
        o.scheduler.step()


def _state_of(o: _Objects) -> dict:
    return copy.deepcopy({"model": o.model.state_dict(), "optimizer": o.optimizer.state_dict(),
                          "scheduler": o.scheduler.state_dict(),
                          "scaler": o.scaler.state_dict() if o.scaler is not None else None,
                          "rng": torch.get_rng_state()})


def _differences(a, b, where: str = "") -> list[str]:
    """Where two nested states differ; tensors compared bit for bit."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return [] if a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) else [where or "<root>"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where} (keys differ)"]
        return [d for k in a for d in _differences(a[k], b[k], f"{where}.{k}" if where else str(k))]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where} (lengths differ)"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b or (a != a and b != b) else [where or "<root>"]


# what a complete checkpoint holds: how to recognise it in any key layout, and how to describe it
_PARTS = {
    "model": ("the model's weights", "model.state_dict()"),
    "optimizer": ("the optimizer state (AdamW's moment estimates and step counts)", "optimizer.state_dict()"),
    "scheduler": ("the scheduler state (how far the learning-rate schedule has gone)", "scheduler.state_dict()"),
    "scaler": ("the GradScaler state (its current loss scale)", "scaler.state_dict()"),
    "rng": ("the RNG state (dropout masks after resuming would differ)", "capture_rng_state()"),
    "step": ("the step number", "step"),
}


def _find_parts(ckpt, model_keys: set, step: int) -> dict:
    """Where in the saved structure each part is, by its shape, not its key name: {part: path}."""
    found, rng_size = {}, torch.get_rng_state().numel()

    def is_part(obj):
        if isinstance(obj, dict):
            keys = set(obj)
            if model_keys <= keys:
                return "model"
            if {"state", "param_groups"} <= keys:
                return "optimizer"
            if {"last_epoch", "base_lrs"} <= keys:
                return "scheduler"
            if {"scale", "_growth_tracker"} <= keys:
                return "scaler"
        if isinstance(obj, torch.Tensor) and obj.dtype == torch.uint8 and obj.numel() == rng_size:
            return "rng"
        return None

    def walk(obj, path):
        part = is_part(obj)
        if part is not None:
            found.setdefault(part, path)
            return
        if isinstance(obj, dict):
            for k, value in obj.items():
                walk(value, path + (k,))
        elif isinstance(obj, (list, tuple)):
            for i, value in enumerate(obj):
                walk(value, path + (i,))
        elif isinstance(obj, numbers.Integral) and not isinstance(obj, bool) and obj == step:
            found.setdefault("step", path)
        elif isinstance(obj, torch.Tensor) and obj.numel() == 1 and obj.dtype == torch.int64 and obj.item() == step:
            found.setdefault("step", path)

    walk(ckpt, ())
    return found


@dataclass
class CkptCtx:
    path: Path
    save: Run
    load: Run | None = None
    saved: dict | None = None
    loaded: dict | None = None
    final_a: dict | None = None
    final_b: dict | None = None
    ckpt: object = None
    parts: dict = field(default_factory=dict)
    none_problem: str | None = None
    step: int = 3


def _ck_atomic(c: CkptCtx):
    if not c.path.exists():
        return []  # "contents" says so
    final = str(c.path)
    for e in c.save.events:
        if e.kind == "save" and e.info["target"] and Path(e.info["target"]).resolve() == c.path.resolve():
            return [Failure("atomic", f"torch.save wrote straight to {c.path.name}: a crash during the write leaves a "
                            "truncated file under the real name (and the previous checkpoint is already gone). Save "
                            "to a temp file in the same folder (str(path) + '.tmp'), then os.replace(tmp, path).",
                            None, _beside(c.save.events, 0, len(c.save.events), _CKPT_ORDER, c.save.events.index(e),
                                          "your save_checkpoint"))]
    first = next((e for e in c.save.events if e.info.get("exists", {}).get(final)), None)
    if first is None or first.kind != "replace" or Path(first.info["dst"]).resolve() != c.path.resolve():
        return [Failure("atomic", f"{c.path.name} came into existence without os.replace/os.rename (it was written in "
                        "place): a crash during the write leaves a truncated checkpoint. Write a temp file in the same "
                        "folder, then os.replace(tmp, path).")]
    if Path(first.info["src"]).resolve().parent != c.path.resolve().parent:
        return [Failure("atomic", f"the temp file was in {Path(first.info['src']).parent}, not beside the checkpoint: "
                        "a rename is only atomic within one file system. Put the temp file in the same folder.")]
    return []


_CKPT_ORDER = ["torch.save(state, tmp)  (tmp beside path)", "os.replace(tmp, path)"]


def _ck_loadable(c: CkptCtx):
    if not c.path.exists():
        return [Failure("contents", f"save_checkpoint wrote nothing at the path it was given ({c.path.name}).")]
    try:
        c.ckpt = torch.load(c.path, weights_only=True)
    except Exception as exc:
        return [Failure("loadable", f"torch.load(path, weights_only=True) cannot read the checkpoint "
                        f"({type(exc).__name__}): it holds a pickled object, not only tensors and plain values. Save "
                        "state_dict()s and numbers, never the model or optimizer objects themselves.")]
    return []


def _ck_contents(c: CkptCtx):
    if not isinstance(c.ckpt, dict):
        return [Failure("contents", f"the checkpoint is a {type(c.ckpt).__name__}; save one dict holding every part.")]
    c.parts = _find_parts(c.ckpt, set(c.saved["model"]), c.step)
    found = ", ".join(str(k) for k in c.ckpt) or "nothing"
    failures = []
    for part, (what, how) in _PARTS.items():
        if part not in c.parts:
            failures.append(Failure("contents", f"the checkpoint is missing {what} (its keys: {found}): a resumed run "
                                    f"would differ from one that never stopped. Save {how} in it and restore it in "
                                    "load_checkpoint."))
    return failures


def _ck_restore(c: CkptCtx):
    if c.load is None or not c.load.complete:
        return None
    fixes = {"model": "model.load_state_dict(...)", "optimizer": "optimizer.load_state_dict(...)",
             "scheduler": "scheduler.load_state_dict(...)", "scaler": "scaler.load_state_dict(...)",
             "rng": "labutils.checkpoint.restore_rng_state(...)"}
    for part, fix in fixes.items():
        if _differences(c.saved[part], c.loaded[part]):
            return [Failure("restore", f"after load_checkpoint, {_PARTS[part][0]} differs from what was saved: "
                            f"restore it with {fix}.")]
    return []


def _ck_return_value(c: CkptCtx):
    if c.load is None or not c.load.complete:
        return None
    got = c.load.result
    if isinstance(got, numbers.Integral) and not isinstance(got, bool) and got == c.step:
        return []
    return [Failure("return_value", f"load_checkpoint returned {_show(got)}; the contract returns the saved step as an "
                    f"int (here {c.step}).")]


def _ck_exact_resume(c: CkptCtx):
    if c.load is None or not c.load.complete:
        return None
    diffs = _differences(c.final_a, c.final_b)
    if diffs:
        return [Failure("exact_resume", f"after loading, the same steps did not reproduce the run that never stopped "
                        f"(first difference: {diffs[0]}). Save and restore every state the steps depend on.")]
    return []


def _ck_scaler_none(c: CkptCtx):
    return [Failure("scaler_none", c.none_problem)] if c.none_problem else []


CKPT_STAGES = (
    ("atomic", _ck_atomic, ()),
    ("loadable", _ck_loadable, ()),
    ("contents", _ck_contents, ("loadable",)),
    ("restore", _ck_restore, ("contents",)),
    ("return_value", _ck_return_value, ()),
    ("exact_resume", _ck_exact_resume, ("contents", "restore")),
    ("scaler_none", _ck_scaler_none, ("loadable", "contents")),
)


def _without_scaler(save_fn, load_fn, batches, folder: Path) -> str | None:
    """The contract allows scaler=None: saving and loading must work then too."""
    a = _ckpt_objects(SEED, scaler=False)
    _train_steps(a, batches)
    path = folder / "no-scaler.pt"
    forbidden = FORBIDDEN["checkpoint"]
    save = _call(save_fn, (path, a.model, a.optimizer, a.scheduler, None, 2), Tracer(forbidden=forbidden))
    if save.error is not None:
        return _exception_failure("save_checkpoint", save_fn, save.error, " with scaler=None").message
    b = _ckpt_objects(SEED + 1, scaler=False)
    load = _call(load_fn, (path, b.model, b.optimizer, b.scheduler, None), Tracer(forbidden=forbidden))
    if load.error is not None:
        return _exception_failure("load_checkpoint", load_fn, load.error, " with scaler=None").message
    if _differences(a.model.state_dict(), b.model.state_dict()):
        return "with scaler=None, load_checkpoint did not restore the model's weights."
    return None


def check_checkpoint(save_fn, load_fn) -> CheckReport:
    """Save mid-training with ``save_fn``, keep training; load into fresh objects with ``load_fn``, train the same
    steps; everything must match bit for bit, and the file must appear atomically."""
    names = [s for s, _, _ in CKPT_STAGES]
    report = CheckReport("save_checkpoint / load_checkpoint (06_checkpointing)",
                         ["signature", "uses_reference"] + names)
    ok = _check_signature(report, save_fn, "save_checkpoint", "save_checkpoint")
    if not (_check_signature(report, load_fn, "load_checkpoint", "load_checkpoint") and ok):
        return report
    forbidden = FORBIDDEN["checkpoint"]
    with _isolated(), tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(SEED)
        batches = [(normalize(_images(4, SEED + i)), torch.randint(0, 10, (4,))) for i in range(6)]
        a = _ckpt_objects(SEED)
        _train_steps(a, batches[:3])
        c = CkptCtx(Path(tmp) / "step-000003.pt", save=Run([]), saved=_state_of(a))
        c.save = _call(save_fn, (c.path, a.model, a.optimizer, a.scheduler, a.scaler, c.step),
                       Tracer(files=True, watch=[c.path], forbidden=forbidden))
        report.trace = c.save.events
        if c.save.reference or c.save.error is not None:
            report.failures.append(_reference_failure("save_checkpoint", c.save.reference) if c.save.reference else
                                   _exception_failure("save_checkpoint", save_fn, c.save.error))
            return report
        _train_steps(a, batches[3:])  # the run that never stopped
        c.final_a = _state_of(a)
        b = _ckpt_objects(SEED + 1)  # fresh objects, other weights, another RNG stream: a new process
        c.load = _call(load_fn, (c.path, b.model, b.optimizer, b.scheduler, b.scaler),
                       Tracer(files=True, forbidden=forbidden))
        if c.load.complete:
            c.loaded = _state_of(b)
            _train_steps(b, batches[3:])
            c.final_b = _state_of(b)
        c.none_problem = _without_scaler(save_fn, load_fn, batches[:2], Path(tmp))
        if c.load.reference:
            report.failures.append(_reference_failure("load_checkpoint", c.load.reference))
            return report
        _run_stages(report, CKPT_STAGES, c, names)
    if c.load.error is not None and not report.failures:
        report.failures.append(_exception_failure("load_checkpoint", load_fn, c.load.error))
    return report


# --- train_resumable -------------------------------------------------------------------------------------------------

R_IMAGES, R_EPOCHS, R_SAVE_EVERY, R_CRASH_AT = 44, 2, 4, 10  # 6 batches/epoch, 12 steps; crash mid-epoch 2


class _OnStep:
    """The on_step callback: records the steps, whether each due checkpoint existed, and crashes when told."""

    def __init__(self, ckpt_dir: Path, crash_at: int | None = None):
        self.ckpt_dir, self.crash_at = ckpt_dir, crash_at
        self.steps: list = []
        self.missing: list[int] = []  # due checkpoints that did not exist when on_step was called

    def __call__(self, step, *args, **kwargs):
        self.steps.append(step)
        if isinstance(step, int) and step % R_SAVE_EVERY == 0:
            if not (self.ckpt_dir / f"step-{step:06d}.pt").exists():
                self.missing.append(step)
        if step == self.crash_at:
            raise SimulatedCrash(step)


@dataclass
class ResumeCtx:
    fn: object
    full: Run
    full_log: _OnStep
    crash: Run
    crash_log: _OnStep
    resumed: Run
    resumed_log: _OnStep
    final_full: dict
    final_resumed: dict
    epoch_batches: list  # epoch -> list of (x, y) in the order of that epoch
    total: int


def _resume_objects(images, labels):
    torch.manual_seed(SEED)
    model = _tiny_model(dropout=0.25, gain=1.0)  # dropout: resuming is exact only with the RNG state restored too
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    total_steps = R_EPOCHS * math.ceil(R_IMAGES / BATCH)
    scheduler = LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps)
    loader = make_loader(images, labels, BATCH, seed=SEED, shuffle=True)
    return model, optimizer, scheduler, loader


def _resume_run(fn, images, labels, ckpt_dir: Path, log: _OnStep):
    model, optimizer, scheduler, loader = _resume_objects(images, labels)
    args = (model, optimizer, scheduler, loader, R_EPOCHS, str(ckpt_dir), R_SAVE_EVERY, DEVICE)
    tracer = Tracer(model, optimizer, scheduler, forbidden=FORBIDDEN["resume"], max_events=MAX_EVENTS)
    run = _call(fn, args, tracer, {"on_step": log})
    return run, {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def _rs_on_step(c: ResumeCtx):
    if not c.full.complete:
        return None
    if c.full_log.steps != list(range(1, c.total + 1)):
        seen = c.full_log.steps[:8]
        return [Failure("on_step", f"on_step was called with {seen}{' ...' if len(c.full_log.steps) > 8 else ''}; the "
                        f"contract calls on_step(step) after every optimizer step, with step = 1, 2, ..., {c.total}.")]
    if not c.crash.crashed and c.crash.error is None:
        return [Failure("on_step", f"train_resumable kept going after on_step raised at step {R_CRASH_AT}: let "
                        "exceptions from on_step propagate (a crash must stop the run).")]
    return []


def _rs_return_value(c: ResumeCtx):
    for run, when in ((c.full, ""), (c.resumed, " after resuming")):
        if run.complete and run.result != c.total:
            return [Failure("return_value", f"train_resumable returned {_show(run.result)}{when}; the contract "
                            f"returns the final global step ({c.total} here).")]
    return []


def _rs_save_every(c: ResumeCtx):
    if c.full_log.missing:
        s = c.full_log.missing[0]
        return [Failure("save_every", f"no checkpoint step-{s:06d}.pt existed in ckpt_dir when on_step({s}) was "
                        f"called: save ckpt_dir/step-{{step:06d}}.pt every save_every optimizer steps, before calling "
                        "on_step.", s)]
    return []


def _rs_resume_step(c: ResumeCtx):
    if not c.resumed_log.steps:
        return None
    last = R_CRASH_AT - R_CRASH_AT % R_SAVE_EVERY
    first = c.resumed_log.steps[0]
    if first == last + 1:
        return []
    if first == 1:
        msg = (f"the second run started again at step 1: it did not resume from the newest checkpoint "
               f"(step-{last:06d}.pt). Load it with latest_checkpoint(ckpt_dir) and load_checkpoint, and continue "
               "from the step it holds.")
    else:
        msg = (f"the second run's first optimizer step was {first}, but the newest checkpoint was step-{last:06d}.pt, "
               f"so it should continue with step {last + 1}.")
    return [Failure("resume_step", msg, first)]


def _rs_exact(c: ResumeCtx):
    if not c.resumed.complete:
        return None
    diffs = _differences(c.final_full, c.final_resumed)
    if not diffs:
        return []
    last = R_CRASH_AT - R_CRASH_AT % R_SAVE_EVERY
    per_epoch = len(c.epoch_batches[0])
    want_epoch, want_batch = divmod(last, per_epoch)
    first_forward = next((e for e in c.resumed.events if e.kind == "forward"), None)
    if first_forward is not None:
        where = [(ep, j) for ep, batches in enumerate(c.epoch_batches)
                 if (j := _match(first_forward.data["x"], batches)) is not None]
        if where and where[0] != (want_epoch, want_batch):
            ep, j = where[0]
            return [Failure("exact_resume", f"after resuming at step {last + 1} the first batch was epoch {ep + 1} "
                            f"batch {j + 1}, but the run that never stopped used epoch {want_epoch + 1} batch "
                            f"{want_batch + 1} there: continue in the middle of the epoch with "
                            "set_position(train_loader, epoch, start_batch).", last + 1)]
    return [Failure("exact_resume", _first_resumed_step_difference(c, last + 1) or
                    f"the resumed run ended with a different state than the run that never stopped (first difference: "
                    f"{diffs[0]}): restore everything from the checkpoint (load_checkpoint) and continue with the same "
                    "batches.", last + 1)]


def _first_resumed_step_difference(c: ResumeCtx, step: int) -> str | None:
    """Compare the resumed run's first optimizer step with the same step of the run that never stopped: same weights
    before it? same learning rate? same gradient (same dropout masks)? The first difference names the culprit."""
    full = [e for e in c.full.events if e.kind == "step"]
    resumed = [e for e in c.resumed.events if e.kind == "step"]
    if len(full) < step or not resumed:
        return None
    a, b = full[step - 1], resumed[0]
    restore = f"after resuming, step {step}"
    if _differences(a.data["params"], b.data["params"]):
        return f"{restore} started from other weights than the run that never stopped: restore the model's state."
    if a.info["lr"] != b.info["lr"]:
        return (f"{restore} used learning rate {b.info['lr'][0]:.4g} instead of {a.info['lr'][0]:.4g}: restore the "
                "scheduler's state.")
    if _differences(a.data["grads"], b.data["grads"]):
        return (f"{restore} computed a different gradient from the same weights and batch: the dropout masks differ, "
                "so the RNG state was not restored (load_checkpoint restores it; restore_rng_state if you load by "
                "hand).")
    return (f"{restore} had the same weights, learning rate and gradient, but the update differed: restore the "
            "optimizer's state (AdamW's moment estimates).")


RESUME_STAGES = (
    ("on_step", _rs_on_step, ()),
    ("return_value", _rs_return_value, ()),
    ("save_every", _rs_save_every, ("on_step",)),
    ("resume_step", _rs_resume_step, ("on_step", "save_every")),
    ("exact_resume", _rs_exact, ("resume_step",)),
)


def check_resume(train_fn) -> CheckReport:
    """Run ``train_fn`` (train_resumable) uninterrupted; again, crashing mid-epoch; then once more with fresh objects:
    the third run must continue after the last checkpoint and end bit-identical to the first."""
    names = [s for s, _, _ in RESUME_STAGES]
    report = CheckReport("train_resumable (07_crash_resume)", ["signature", "uses_reference"] + names)
    if not _check_signature(report, train_fn, "train_resumable", "resume", keywords=("on_step",)):
        return report
    images = _images(R_IMAGES, SEED)
    labels = torch.randint(0, 10, (R_IMAGES,), generator=torch.Generator().manual_seed(SEED))
    with _isolated(), tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(tmp) / name for name in ("uninterrupted", "crashed")]
        for d in dirs:
            d.mkdir()
        full_log, crash_log, resumed_log = _OnStep(dirs[0]), _OnStep(dirs[1], R_CRASH_AT), _OnStep(dirs[1])
        full, final_full = _resume_run(train_fn, images, labels, dirs[0], full_log)
        report.trace = full.events
        runs = [(full, "")]
        if full.complete:
            crash, _ = _resume_run(train_fn, images, labels, dirs[1], crash_log)
            resumed, final_resumed = _resume_run(train_fn, images, labels, dirs[1], resumed_log)
            runs += [(crash, f" (in the run meant to crash at step {R_CRASH_AT})"), (resumed, " (when resuming)")]
        else:
            crash = resumed = full
            final_resumed = final_full
        loader = _resume_objects(images, labels)[3]
        epoch_batches = []
        for epoch in range(R_EPOCHS):
            set_position(loader, epoch, 0)
            epoch_batches.append(list(loader))
    for run, _ in runs:
        if run.reference is not None:
            report.failures.append(_reference_failure("train_resumable", run.reference))
            return report
    ctx = ResumeCtx(train_fn, full, full_log, crash, crash_log, resumed, resumed_log, final_full, final_resumed,
                    epoch_batches, R_EPOCHS * len(epoch_batches[0]))
    _run_stages(report, RESUME_STAGES, ctx, names)
    if not report.failures:
        for run, when in runs:
            if run.error is not None:
                report.failures.append(_exception_failure("train_resumable", train_fn, run.error, when))
                break
    return report


# --- looking at your own loop ----------------------------------------------------------------------------------------


def show_trace(fn, exercise: str = "baseline", steps: int | None = 2) -> None:
    """Print the numbered events of ``fn`` run on the check's tiny data: see what your loop does, in order.

    exercise: a train_one_epoch exercise ("baseline", "scheduler", "clipping", "accumulation", "amp") or "evaluate".
    steps: how many optimizer steps to show (None: all).
    """
    with _isolated():
        if exercise == "evaluate":
            view = _run_evaluate(fn)
            events, run, title, ends = view.run.events, view.run, "evaluate", []
        elif exercise in TRAIN_EXERCISES:
            view = _run_train(fn, _train_case(exercise))
            events, run, title = view.events, view.run, f"train_one_epoch ({NOTEBOOKS[exercise]})"
            ends = [view.span(k)[1] for k in range(1, len(view.steps) + 1)]  # where each step's events end
        else:
            raise ValueError(f"exercise={exercise!r} is unknown: use one of {', '.join(TRAIN_EXERCISES)}, evaluate")
    stop = ends[steps - 1] if steps and len(ends) > steps else len(events)
    print(f"{title}: {len(events)} events on the check's tiny data, in the order they happened")
    lines = format_events(events, 0, stop)
    for n, line in enumerate(lines):
        print(line)
        if n + 1 in ends and n + 1 < len(events):
            print(f"     {'-' * 40} end of step {ends.index(n + 1) + 1}")
    if stop < len(events):
        print(f"     ... {len(events) - stop} more events: show_trace(fn, {exercise!r}, steps=None) shows all")
    if run.error is not None:
        print(_exception_failure(getattr(fn, "__name__", "the function"), fn, run.error).message)
    if run.reference is not None:
        print(f"it called {run.reference}, the lab's reference implementation")
