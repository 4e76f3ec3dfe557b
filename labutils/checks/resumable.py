"""check_resume (07_crash_resume): train_resumable run three times (uninterrupted; crashing mid-epoch; restarted)
must continue after the last checkpoint, in the middle of the epoch, and end bit-identical to the uninterrupted run.

The loop calls the student's own lab 6 ``save_checkpoint`` / ``load_checkpoint`` (pasted into lab 7's notebook). The
check lends it, and every helper of the notebook, :class:`HeldCheckpoints` under those names instead, so that lab 7's
verdicts judge the loop alone: a lab 6 mistake was graded in lab 6, and here could only be blamed on the loop (a lost
RNG state would read as the loop's "the dropout masks differ"). The notebook checks the student's own pair beside this
check, ungraded. Where the resumed run differs, the message names the first thing that differs, step by step, or a
save made before its step was complete.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LinearLR

from .. import exercises
from ..checkpoint import capture_rng_state, compare_states, restore_rng_state
from ..data import make_loader, set_position
from ..trace import Tracer, current, mark_batches, mode_words
from . import evidence, on_gpu
from .apart import traced_calls
from .calling import (SimulatedCrash, TracedCall, could_not_check, exception_failure, isolated, judge_call, new_report,
                      scratch)
from .report import CheckReport, Failure, NotJudged, described, given, shown
from .rng import rng_state
from .world import BATCH, DEVICE, MAX_EVENTS, random_images, run_seed, tiny_model, which_batch

_ARGS = exercises.get("resume")
R_EPOCHS, R_SAVE_EVERY = (_ARGS.argument(name).values[0] for name in ("epochs", "save_every"))
R_IMAGES, R_CRASH_AT = 44, 10  # 6 batches/epoch, 12 steps; crash mid-epoch 2


NO_LOSS = object()  # on_step(step) called without the loss
evidence.CONSTANTS["NO_LOSS"] = NO_LOSS


LAYOUT = ("model", "optimizer", "scheduler", "scaler", "step", "rng")  # what the check's checkpoint files hold


class HeldCheckpoints:
    """Lab 6's ``save_checkpoint`` / ``load_checkpoint`` as this check lends them to ``train_resumable``, so that lab
    7's verdicts judge the loop alone: a lab 6 mistake was graded in lab 6, and here could only be blamed on the loop.

    Each file is a real checkpoint in the layout lab 7's contract states (:data:`LAYOUT`: a dict of the state_dict()s,
    the step and ``capture_rng_state()``), so a loop that reads one with ``torch.load`` itself finds what it expects,
    and the loop's names, listings and file times are real. Each save is recorded in the trace (``lent_save``) with the
    steps the optimizer and the scheduler had taken when it was called: a save placed between ``optimizer.step()``
    and ``scheduler.step()`` shows there. Not an answer to lab 6 (the handout ships it): it saves only while lab 7's
    check traces the loop it was lent to, and the file is written in place, not atomically."""

    lent = False  # set by _lent_pair: only then, and only inside lab 7's tracing, does the pair work

    def _tracer(self) -> Tracer:
        """The trace of the loop this pair was lent to; anywhere else the pair refuses to work."""
        tracer = current()
        if not self.lent or tracer is None or tracer.forbidden != exercises.get("resume").forbidden:
            raise RuntimeError("lab 7's check lends this pair to the loop it checks, and it works nowhere else: lab "
                               "6's save_checkpoint and load_checkpoint are yours to write")
        return tracer

    def save_checkpoint(self, path, model, optimizer, scheduler, scaler, step):
        """Save every part given (None stays None), as a complete lab 6 checkpoint would."""
        tracer = self._tracer()
        objects = dict(zip(LAYOUT, (model, optimizer, scheduler, scaler)))
        state = {part: None if obj is None else obj.state_dict() for part, obj in objects.items()}
        torch.save({**state, "step": step, "rng": capture_rng_state()}, path)
        tracer.record("lent_save", {"path": os.fspath(path), "step": step,
                                    "optimizer_steps": _optimizer_steps(optimizer),
                                    "scheduler_steps": getattr(scheduler, "last_epoch", None)})

    def load_checkpoint(self, path, model, optimizer, scheduler, scaler):
        """Restore the file's parts into the objects given (those given as None stay as they are); the step."""
        self._tracer()
        state = torch.load(path, weights_only=True)
        if not (isinstance(state, dict) and set(LAYOUT) <= set(state)):
            raise ValueError(f"{os.fspath(path)} is not a checkpoint save_checkpoint wrote: in lab 7 the loop saves "
                             "with save_checkpoint(path, model, optimizer, scheduler, None, step)")
        for part, obj in zip(LAYOUT, (model, optimizer, scheduler, scaler)):
            if obj is not None and state[part] is not None:
                obj.load_state_dict(state[part])
        restore_rng_state(state["rng"])
        return state["step"]


def _optimizer_steps(optimizer) -> int | None:
    """How many steps the optimizer had taken (AdamW's per-parameter step count), None when it keeps no count."""
    state = getattr(optimizer, "state", None)
    counts = [int(s["step"]) for s in state.values() if isinstance(s, dict) and "step" in s] \
        if isinstance(state, dict) else []
    return max(counts) if counts else None  # no count kept (SGD) or no step yet: nothing to say


@contextlib.contextmanager
def _lent_pair(train_fn):
    """A fresh :class:`HeldCheckpoints`'s pair under the names ``save_checkpoint`` / ``load_checkpoint`` in
    ``train_fn``'s globals while the check runs it: the loop and every helper of its notebook (or module) that calls
    them by name call the check's pair; the student's own are put back after. In the grader's judge ``train_fn`` is
    only a stand-in that is never called: nothing to lend."""
    env = train_fn.__globals__ if isinstance(train_fn, types.FunctionType) else None
    if env is None:
        yield
        return
    held = HeldCheckpoints()
    held.lent = True
    names = {"save_checkpoint": held.save_checkpoint, "load_checkpoint": held.load_checkpoint}
    before = {name: env[name] for name in names if name in env}
    env.update(names)
    try:
        yield
    finally:
        for name in names:
            if name in before:
                env[name] = before[name]
            else:
                env.pop(name, None)


def saved(ckpt_dir: Path) -> dict[int, str]:
    """Step -> file name of the step-NNNNNN.pt (or unpadded step-N.pt) files in ``ckpt_dir``, as they are on disk."""
    found = {}
    for path in sorted(ckpt_dir.glob("step-*.pt")):
        number = path.stem.split("-")[-1]
        if number.isdigit():
            found.setdefault(int(number), path.name)
    return dict(sorted(found.items()))


def saved_steps(ckpt_dir: Path) -> list[int]:
    """The steps of the checkpoints in ``ckpt_dir``, as they are on disk."""
    return list(saved(ckpt_dir))


def _named(names: dict[int, str], step: int) -> str:
    """The file name of the checkpoint of ``step`` as the loop wrote it (the padded name when there is none)."""
    return names.get(step, f"step-{step:06d}.pt")


class _OnStep:
    """The on_step callback: records the steps, whether each due checkpoint existed, and crashes when told."""

    observed = ("steps", "losses", "missing")  # what a call changes here (labutils.checks.evidence)

    def __init__(self, ckpt_dir: Path, crash_at: int | None = None, save_every: int = R_SAVE_EVERY):
        self.ckpt_dir, self.crash_at, self.save_every = ckpt_dir, crash_at, save_every
        self.steps: list = []
        self.losses: list = []  # the loss each call handed over (NO_LOSS when none)
        self.missing: list[int] = []  # due checkpoints that did not exist when on_step was called

    def __call__(self, step, *args, **kwargs):
        self.steps.append(step)
        self.losses.append(args[0] if args else kwargs.get("loss", NO_LOSS))
        if isinstance(step, int) and step % self.save_every == 0:
            if step not in saved(self.ckpt_dir):
                self.missing.append(step)
        if step == self.crash_at:
            raise SimulatedCrash(step)


@dataclass
class ResumeCtx:
    fn: object
    full: TracedCall
    full_log: _OnStep
    crash: TracedCall
    crash_log: _OnStep
    resumed: TracedCall
    resumed_log: _OnStep
    final_full: dict
    final_resumed: dict
    epoch_batches: list  # epoch -> list of (x, y) in the order of that epoch
    total: int
    on_disk: list[int]  # the steps of the checkpoints in ckpt_dir when the run crashed, as on disk
    touched: int | None = None  # the older checkpoint the check made the most recently modified file
    names: dict = field(default_factory=dict)  # step -> the name of its file, as the loop wrote it
    full_names: dict = field(default_factory=dict)  # the same for the run that never stopped
    full_kept: dict = field(default_factory=dict)  # step -> the weights its file holds (None: no checkpoint)
    kept: dict = field(default_factory=dict)  # the same for the files the crashed run left


def _resume_objects(images, labels, seed: int):
    torch.manual_seed(seed)
    model = tiny_model(dropout=0.25, gain=1.0)  # dropout: resuming is exact only with the RNG state restored too
    model.eval()  # as after an evaluation: a loop that never calls model.train() trains without dropout
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    total_steps = R_EPOCHS * math.ceil(R_IMAGES / BATCH)
    scheduler = LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=total_steps)
    loader = mark_batches(make_loader(images, labels, BATCH, seed=seed, shuffle=True))
    return model, optimizer, scheduler, loader



def _gpu_case(images, labels, seed: int):
    """The uninterrupted run on the GPU, into the folder it is given."""
    def build(folder):
        model, optimizer, scheduler, loader = _resume_objects(images, labels, seed)
        model.to(on_gpu.GPU)
        return ((model, optimizer, scheduler, loader, R_EPOCHS, folder, R_SAVE_EVERY, on_gpu.GPU),
                on_gpu.tracer(model, optimizer, scheduler, exercise="resume"))
    return build

def _resume_case(images, labels, seed: int, ckpt_dir: Path, log: _OnStep, epochs=R_EPOCHS, device=DEVICE) -> tuple:
    """One run of the loop as the check makes it: (its arguments, its tracer, its keyword arguments, the random
    streams it starts from: those right after its objects were made, as if made right before it)."""
    model, optimizer, scheduler, loader = _resume_objects(images, labels, seed)
    args = (model, optimizer, scheduler, loader, epochs, str(ckpt_dir), log.save_every, device)
    tracer = Tracer(model, optimizer, scheduler, forbidden=exercises.get("resume").forbidden, max_events=MAX_EVENTS,
                    devices=True, outputs=True)
    return args, tracer, {"on_step": log}, rng_state()


def _resume_runs(fn, cases: list[tuple], apart: bool = False) -> list[tuple]:
    """The runs of ``cases`` one after another, (the run, its final state) each; ``apart``: all in one process of
    their own (:mod:`labutils.checks.apart`), so nothing they keep in memory reaches the runs after them, which find
    only what they left on disk. Several runs share that process: one fork costs more than a run."""
    with _lent_pair(fn):  # lab 6's pair known to be right: the loop alone is judged
        runs = traced_calls([(fn, args, tracer, kwargs, None) for args, tracer, kwargs, _ in cases], apart=apart,
                            rng=[start for *_, start in cases])
    return [(run, {"model": args[0].state_dict(), "optimizer": args[1].state_dict()})
            for run, (args, *_) in zip(runs, cases)]


def _resume_run(fn, images, labels, seed: int, ckpt_dir: Path, log: _OnStep, epochs=R_EPOCHS, device=DEVICE):
    """One run of the loop, here."""
    return _resume_runs(fn, [_resume_case(images, labels, seed, ckpt_dir, log, epochs, device)])[0]


def _kept(ckpt_dir: Path) -> dict:
    """Step -> the weights each of the folder's checkpoints holds (None: not a checkpoint save_checkpoint wrote)."""
    kept = {}
    for step, name in saved(ckpt_dir).items():
        try:
            state = torch.load(ckpt_dir / name, weights_only=True)
            kept[step] = list(state["model"].values()) if isinstance(state, dict) and set(LAYOUT) <= set(state) \
                else None
        except Exception:  # an empty file, another format: no checkpoint  # noqa: BLE001
            kept[step] = None
    return kept


def _weights_after(run: TracedCall, final: dict, step: int, first: int = 1) -> list | None:
    """The model's weights after optimizer step ``step`` of ``run`` (whose first step is ``first``), as traced."""
    steps = [e for e in run.events if e.kind == "step"]
    k = step - first + 1
    if 0 <= k < len(steps):
        return steps[k].data["params"]
    return list(final["model"].values()) if k == len(steps) else None


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _varied(fn, images, labels, seed: int, tmp: Path) -> list[Failure]:
    """One more uninterrupted run with the second value of every argument it must honour: a train_resumable that
    uses numbers of its own (save every 4 steps, 2 epochs, "cpu") shows here."""
    varied = _ARGS.varied()
    epochs, save_every, device = varied["epochs"], varied["save_every"], varied["device"]
    words = given(varied)
    ckpt_dir = tmp / "varied"
    ckpt_dir.mkdir()
    log = _OnStep(ckpt_dir, save_every=save_every)
    run, _ = _resume_run(fn, images, labels, seed, ckpt_dir, log, epochs, device)
    if not run.complete:
        return [exception_failure("train_resumable", fn, run.error, " " + words[:-2])] if run.error else []
    total = epochs * math.ceil(R_IMAGES / BATCH)
    found = []  # each argument judged on its own: one hard-coded number does not hide another
    if log.steps != list(range(1, total + 1)):
        as_if = len(log.steps) // math.ceil(R_IMAGES / BATCH)
        found.append(Failure("epochs", f"{words}train_resumable took {len(log.steps)} optimizer steps, as if epochs="
                             f"{as_if}, not the epochs={epochs} it was given ({total} steps): loop over range(epochs)."))
    names = saved(ckpt_dir)
    steps = list(names)
    never_saved = [s for s in log.missing if s not in steps]  # saved late (after on_step) is the main run's finding
    odd = [s for s in steps if s % save_every and s != total]  # a last save at the end of training is allowed
    if never_saved or odd:
        odd = odd or steps
        every = odd[0] if odd else None
        as_if = f"as if save_every={every}, " if every else ""
        found.append(Failure("save_every", f"{words}train_resumable saved "
                             f"{', '.join(names[s] for s in steps[:3])}{' ...' if len(steps) > 3 else ''}: "
                             f"{as_if}not the save_every={save_every} it was given. Save when step % save_every == 0.",
                             every))
    other = next((d for d in run.moves if d != torch.device(device)), None)
    if other is not None:
        found.append(Failure("device", f"train_resumable moved tensors to {str(other)!r}, not to the device="
                             f"{shown(device)} it was given: move each batch with .to(device)."))
    if not found and not _is_step(run.result, total):
        found.append(Failure("return_value", f"{words}train_resumable returned {described(run.result)}; the contract "
                             f"returns the final global step ({total} here)."))
    return found


def _judge_varied(report: CheckReport, fn, images, labels, seed: int) -> None:
    """The run with the second value of every argument (:func:`_varied`), judged into ``report``."""
    with isolated(), scratch() as tmp:
        varied = _varied(fn, images, labels, seed, Path(tmp))
    known = {f.check for f in report.failures}  # one mistake, said once: the first run's words stand
    report.failures += [f for f in varied if f.check not in known]
    for check in ("epochs", "device"):
        if not any(f.check == check for f in varied):
            report.judge(check, [])  # seen right with the other values


def _touch_older(ckpt_dir: Path, on_disk: list[int]) -> int | None:
    """Make an older checkpoint the most recently modified file, as copying or restoring a backup does: the newest
    checkpoint is the one with the highest step, and a loop that picks by file time shows. Returns its step."""
    if len(on_disk) < 2:
        return None
    names = saved(ckpt_dir)
    older = ckpt_dir / names[on_disk[-2]]
    newest = (ckpt_dir / names[on_disk[-1]]).stat().st_mtime
    os.utime(older, (newest + 60, newest + 60))
    return on_disk[-2]


def _rs_on_step(c: ResumeCtx):
    if not c.full.complete:
        return NotJudged("the uninterrupted run did not finish")
    if not c.full_log.steps:
        return [Failure("on_step", f"on_step was never called: the contract calls on_step(step) after every optimizer "
                        f"step, with step = 1, 2, ..., {c.total}.")]
    per_epoch = len(c.epoch_batches[0])
    taken = len(c.full_log.steps)
    if taken != c.total and c.full_log.steps == list(range(1, taken + 1)) and taken % per_epoch == 0:  # other epochs
        return [Failure("epochs", f"train_resumable took {taken} optimizer steps, as if epochs={taken // per_epoch}, "
                        f"not the epochs={R_EPOCHS} it was given ({c.total} steps): loop over range(epochs).")]
    if c.full_log.steps != list(range(1, c.total + 1)):
        seen = c.full_log.steps[:8]
        return [Failure("on_step", f"on_step was called with {seen}{' ...' if len(c.full_log.steps) > 8 else ''}; the "
                        f"contract calls on_step(step) after every optimizer step, with step = 1, 2, ..., {c.total}.")]
    optimizer_steps = sum(1 for e in c.full.events if e.kind == "step")
    if optimizer_steps != len(c.full_log.steps):  # progress reported without the training it reports
        return [Failure("on_step", f"on_step was called {len(c.full_log.steps)} times, but optimizer.step() ran "
                        f"{optimizer_steps} times: call on_step(step, loss) once after every optimizer step.")]
    if not c.crash.crashed and c.crash.error is None:
        return [Failure("on_step", f"train_resumable kept going after on_step raised at step {R_CRASH_AT}: let "
                        "exceptions from on_step propagate (a crash must stop the run).")]
    return []


def _step_losses(run: TracedCall, epoch_batches: list) -> dict:
    """Step -> the mean cross-entropy of the step's batch, computed from the logits its forward produced (the last
    forward before the step): what on_step must be handed."""
    losses, forward = {}, None
    for event in run.events:
        if event.kind == "forward":
            forward = event
        elif event.kind == "step" and forward is not None and "out" in forward.data:
            labels = next((batches[j][1] for batches in epoch_batches
                           if (j := which_batch(forward.data.get("x"), batches)) is not None), None)
            out = forward.data["out"]
            if labels is not None and out.shape[0] == len(labels):
                losses[event.info["number"]] = F.cross_entropy(out.float(), labels).item()
            forward = None
    return losses


def _loss_problem(log: _OnStep, traced: dict | None = None) -> str | None:
    """What is wrong with the losses on_step was handed (the contract: that step's mean loss, a Python float); with
    ``traced`` (:func:`_step_losses`), each is compared with the loss of its step's own forward."""
    for step, loss in zip(log.steps, log.losses):
        if loss is NO_LOSS:
            return (f"on_step was called as on_step({step}) without the loss: the contract calls on_step(step, loss) "
                    "with that step's mean training loss, loss.item().")
        if isinstance(loss, torch.Tensor):
            return (f"on_step({step}, loss) was handed a tensor: pass loss.item(), a Python float (a tensor keeps "
                    "the step's graph alive and cannot be logged as a number).")
        if not isinstance(loss, float) or not math.isfinite(loss):
            return f"on_step({step}, loss) was handed {described(loss)}, not the step's mean training loss as a float."
        want = (traced or {}).get(step)
        if want is not None and abs(loss - want) > 1e-4 * max(abs(want), 1e-6):
            return (f"on_step({step}, loss) was handed {loss:.4g}, but that step's batch had a mean cross-entropy of "
                    f"{want:.4g} (from its own forward): pass loss.item() of the step's own loss.")
    return None


def _is_step(value, step: int) -> bool:
    """Is ``value`` the global step ``step`` (a Python int; any other returned value is compared safely)?"""
    return isinstance(value, int) and not isinstance(value, bool) and value == step


def _rs_on_step_loss(c: ResumeCtx):
    if not c.full_log.steps:
        return NotJudged("on_step was never called")
    problem = _loss_problem(c.full_log, _step_losses(c.full, c.epoch_batches))
    return [Failure("on_step_loss", problem)] if problem else []


def _rs_return_value(c: ResumeCtx):
    """The step of the last on_step call is what it must return: a run that took too many or too few steps is
    judged for that by the other stages, not here as well."""
    if not c.full_log.steps:
        return NotJudged("on_step was never called, so the final step is unknown")
    for run, log, when in ((c.full, c.full_log, ""), (c.resumed, c.resumed_log, " after resuming")):
        final = log.steps[-1] if log.steps else None
        if run.complete and isinstance(final, int) and not _is_step(run.result, final):
            return [Failure("return_value", f"train_resumable returned {described(run.result)}{when}; the contract "
                            f"returns the final global step ({final} here, its last on_step).")]
    return []


def _rs_train_mode(c: ResumeCtx):
    """The model comes in eval mode (as after an evaluation): every training forward must run in train mode."""
    forwards = [e for e in c.full.events if e.kind == "forward"]
    if not forwards:
        return NotJudged("train_resumable never called the model")
    for i, event in enumerate(forwards):
        if event.info["training"] is not True:
            return [Failure("train_mode", f"the forward of step {i + 1} ran in {mode_words(event.info['training'])}: "
                            "the model came in eval mode (as after an evaluation), so dropout was off while "
                            "training. Call model.train() before the loop (it sets every module).", i + 1)]
    return []


def _rs_save_every(c: ResumeCtx):
    if not c.full_log.steps:
        return NotJudged("on_step was never called, so no checkpoint could be looked for")
    names = c.full_names
    if c.full_log.missing:
        s = c.full_log.missing[0]
        return [Failure("save_every", f"no checkpoint {_named(names, s)} existed in ckpt_dir when on_step({s}) was "
                        f"called: save ckpt_dir/step-{{step:06d}}.pt every save_every optimizer steps, before calling "
                        "on_step.", s)]
    extra = [s for s in names if s % R_SAVE_EVERY and s != c.total]  # one more at the end of training is allowed
    if extra:
        return [Failure("save_every", f"the run saved {', '.join(names[s] for s in extra[:3])}"
                        f"{' ...' if len(extra) > 3 else ''} with save_every={R_SAVE_EVERY}: save only when "
                        "step % save_every == 0.", extra[0])]
    for step, weights in c.full_kept.items():  # a file by the right name is no evidence: its weights are
        if weights is None:
            return [Failure("save_every", f"{names[step]} is not a checkpoint save_checkpoint wrote (torch.load "
                            "cannot read it as one): save it with save_checkpoint(path, model, optimizer, scheduler, "
                            "None, step), which writes the states a run resumes from.", step)]
        after = _weights_after(c.full, c.final_full, step)
        if after is not None and not _same(weights, after):
            return [Failure("save_every", f"{names[step]} holds other weights than the model had after optimizer step "
                            f"{step}: save with the model that trains, right after its optimizer.step().", step)]
    return []


def _rs_resume_step(c: ResumeCtx):
    if not c.resumed_log.steps:
        return NotJudged("the run started after the crash took no optimizer step")
    if not c.on_disk:
        return NotJudged(f"no step-*.pt was in ckpt_dir when the run crashed at step {R_CRASH_AT}, so there was "
                         "nothing to resume from")
    last = c.on_disk[-1]
    first = c.resumed_log.steps[0]
    newest = _named(c.names, last)
    if first == last + 1:
        if c.kept.get(last) is None:
            return NotJudged(f"{newest} is not a checkpoint save_checkpoint wrote, so the run after the crash had no "
                             "state to resume from", needs=("save_every",))
        start = next((e.data["params"] for e in c.resumed.events if e.kind == "step"), None)
        if start is not None and not _same(start, c.kept[last]):
            return [Failure("resume_step", f"the run after the crash continued at step {first}, but not from the "
                            f"weights {newest} holds: load it into the model that trains (load_checkpoint("
                            "latest_checkpoint(ckpt_dir), model, optimizer, scheduler, None)) and change them no "
                            "more.", first)]
        return []
    if c.touched is not None and first == c.touched + 1:
        msg = (f"the second run resumed from {_named(c.names, c.touched)}, the file modified most recently (the check "
               f"touched it, as a copy or a backup does), not from the newest checkpoint {newest}: choose the newest "
               "checkpoint by the step in its name (latest_checkpoint(ckpt_dir)), never by file time.")
    elif first == 1:
        msg = (f"the second run started again at step 1: it did not resume from the newest checkpoint ({newest}). "
               "Load it with load_checkpoint(latest_checkpoint(ckpt_dir), model, optimizer, scheduler, None) and "
               "continue from the step it returns.")
    else:
        msg = (f"the second run's first optimizer step was {first}, but the newest checkpoint was {newest}, so it "
               f"should continue with step {last + 1}.")
    return [Failure("resume_step", msg, first)]


def _resumed_at(c: ResumeCtx) -> int | None:
    """The first step of the run after the crash, when it resumed from a checkpoint on disk (the step after it)."""
    first = c.resumed_log.steps[0] if c.resumed_log.steps else None
    if not (isinstance(first, int) and first > 1 and first - 1 in c.on_disk and c.kept.get(first - 1) is not None):
        return None
    start = next((e.data["params"] for e in c.resumed.events if e.kind == "step"), None)
    return first if start is not None and _same(start, c.kept[first - 1]) else None


def _rs_mid_epoch(c: ResumeCtx):
    """The first batch after resuming is the one the loader's order has for that step (evidence of its own: it does
    not need the end states to match)."""
    first = c.resumed_log.steps[0] if c.resumed_log.steps else None
    per_epoch = len(c.epoch_batches[0])
    if not isinstance(first, int) or first <= 1:
        return NotJudged("the run after the crash did not resume from a checkpoint")
    want_epoch, want_batch = divmod(first - 1, per_epoch)
    if want_epoch >= len(c.epoch_batches) or want_batch == 0:
        return NotJudged(f"the run after the crash resumed at step {first}, not in the middle of an epoch")
    first_forward = next((e for e in c.resumed.events if e.kind == "forward"), None)
    if first_forward is None:
        return NotJudged("the run after the crash never called the model")
    if which_batch(first_forward.data.get("x"), c.epoch_batches[want_epoch]) == want_batch:
        return []
    seen = next(((ep, j) for ep, batches in enumerate(c.epoch_batches)
                 if (j := which_batch(first_forward.data.get("x"), batches)) is not None), None)
    what = f"epoch {seen[0] + 1} batch {seen[1] + 1}" if seen else "a batch the loader does not give"
    return [Failure("mid_epoch", f"after resuming at step {first} the first batch was {what}, but step {first} is "
                    f"epoch {want_epoch + 1} batch {want_batch + 1} of the loader's order: continue in the middle of "
                    "the epoch with set_position(train_loader, epoch, start_batch).", first)]


def _other_batches(c: ResumeCtx, first: int) -> int | None:
    """The first step at or after ``first`` where the resumed run trained on another batch than the run that never
    stopped (None: the same batches all along, so their end states can be compared)."""
    full = [e for e in c.full.events if e.kind == "forward"][first - 1:]
    resumed = [e for e in c.resumed.events if e.kind == "forward"]
    for k, (a, b) in enumerate(zip(full, resumed)):
        x, y = a.data.get("x"), b.data.get("x")
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
                and torch.equal(x, y)):
            return first + k
    return None if len(full) == len(resumed) else first + min(len(full), len(resumed))


def _rs_exact(c: ResumeCtx):
    """Judged only on isolating evidence: a run that resumed from a checkpoint on disk and trained on the same
    batches as the run that never stopped; a difference then lies in what was restored."""
    if not c.resumed.complete:
        return NotJudged("the run started after the crash did not finish")
    first = _resumed_at(c)
    if not any(e.kind == "step" for e in c.resumed.events):  # equal end states of untrained models show nothing
        return NotJudged("the run after the crash took no optimizer step")
    if first is None:
        return NotJudged("needs resume_step right first: the run after the crash did not go on from a checkpoint on "
                         "disk with the step after it", needs=("resume_step",))
    other = _other_batches(c, first)
    if other is not None:
        return NotJudged(f"after resuming, step {other} trained on another batch than the run that never stopped, so "
                         "their end states cannot be compared until the batches are right")
    diffs = compare_states(c.final_full, c.final_resumed)
    if not diffs:  # the same end, reached the same way: every resumed step as the run that never stopped made it
        walked = _first_resumed_step_difference(c, first) or _other_losses(c, first)
        return [Failure("exact_resume", walked, first)] if walked else []
    return [Failure("exact_resume", _misplaced_save(c, first - 1) or _first_resumed_step_difference(c, first) or
                    f"the resumed run ended with a different state than the run that never stopped (first difference: "
                    f"{diffs[0]}): restore everything with load_checkpoint(path, model, optimizer, scheduler, None).",
                    first)]


def _other_losses(c: ResumeCtx, first: int) -> str | None:
    """The first resumed step whose loss (handed to on_step) differs from the same step's in the run that never
    stopped: a resumed run that trains as the run that never stopped computes the same losses."""
    full = dict(zip(c.full_log.steps, c.full_log.losses))
    for step, loss in zip(c.resumed_log.steps, c.resumed_log.losses):
        if step in full and isinstance(loss, float) and loss != full[step]:
            return (f"after resuming, step {step}'s loss was {loss:.6g}, not the {full[step]:.6g} of the run that "
                    "never stopped, though the runs ended alike: the resumed run must train the remaining steps "
                    "from the loaded state, not arrive at the end state another way.")
    return None


def _misplaced_save(c: ResumeCtx, step: int) -> str | None:
    """The save the resumed run started from, when it was called before the optimizer or the scheduler had taken
    that step (the check's save_checkpoint records how many steps each had taken): its checkpoint is a step
    behind, whatever load_checkpoint restores."""
    saves = [e for e in c.crash.events if e.kind == "lent_save" and e.info.get("step") == step]
    if not saves:
        return None
    info = saves[-1].info
    for what, taken, fix in (("optimizer.step()", info.get("optimizer_steps"), "after optimizer.step()"),
                             ("scheduler.step()", info.get("scheduler_steps"), "after scheduler.step()")):
        if isinstance(taken, int) and taken < step:
            between = ("between optimizer.step() and scheduler.step()" if what == "scheduler.step()" else
                       "before optimizer.step()")
            return (f"save_checkpoint was called for step {step} {between} (the {what.split('.')[0]} had taken "
                    f"{taken} steps), so the checkpoint holds its state one step behind, and the resumed run "
                    f"continued from it: save once the step is complete, {fix}.")
    return None


def _first_resumed_step_difference(c: ResumeCtx, step: int) -> str | None:
    """Walk the resumed run's optimizer steps beside the same steps of the run that never stopped: same weights
    before each? same learning rate? same gradient (same dropout masks)? The first difference names the culprit,
    which is the loop's: the check's load_checkpoint (:class:`HeldCheckpoints`) restores every part it is handed.
    Weights that differ after a step with the same weights, learning rate and gradient: the update, so the
    optimizer's state."""
    full = [e for e in c.full.events if e.kind == "step"][step - 1:]
    resumed = [e for e in c.resumed.events if e.kind == "step"]
    for k, (a, b) in enumerate(zip(full, resumed)):
        at = f"after resuming, step {step + k}"
        if compare_states(a.data["params"], b.data["params"]):
            if k == 0:
                return (f"{at} started from other weights than the run that never stopped: load the checkpoint into "
                        "the model that trains (load_checkpoint(path, model, optimizer, scheduler, None)) and change "
                        "it no more.")
            return (f"after resuming, step {step + k - 1} had the same weights, learning rate and gradient as the run "
                    "that never stopped, but the update differed: the optimizer's state was not restored (AdamW's "
                    "moment estimates: hand the optimizer that trains to load_checkpoint).")
        if a.info["lr"] != b.info["lr"]:
            return (f"{at} used learning rate {b.info['lr'][0]:.4g} instead of {a.info['lr'][0]:.4g}: the "
                    "scheduler's state was not restored (hand the scheduler that trains to load_checkpoint; build no "
                    "new one after loading).")
        if compare_states(a.data["grads"], b.data["grads"]):
            return (f"{at} computed a different gradient from the same weights and batch: the dropout masks differ, "
                    "so the RNG state was not the checkpoint's: load_checkpoint restores it, so seed or draw nothing "
                    "random after loading.")
    return None


def _rs_epoch_order(c: ResumeCtx):
    """The run that never stopped trains every epoch on that epoch's batches, in that epoch's order (a loop that
    never tells the loader the epoch replays epoch 1's order, and a resumed run would replay it too)."""
    forwards = [e for e in c.full.events if e.kind == "forward"]
    if not forwards:
        return NotJudged("train_resumable never called the model")
    per_epoch = len(c.epoch_batches[0])
    for i, event in enumerate(forwards[: c.total]):
        epoch, j = divmod(i, per_epoch)
        if which_batch(event.data.get("x"), c.epoch_batches[epoch]) == j:
            continue
        seen = next(((ep, k) for ep, batches in enumerate(c.epoch_batches)
                     if (k := which_batch(event.data.get("x"), batches)) is not None), None)
        what = f"epoch {seen[0] + 1}'s batch {seen[1] + 1}" if seen else "a batch the loader does not give"
        return [Failure("epoch_order", f"step {i + 1} (epoch {epoch + 1}, batch {j + 1}) trained on {what}: tell "
                        "the loader the epoch with set_position(train_loader, epoch, start_batch) before every "
                        "epoch (start_batch is 0 except right after resuming), so each epoch has its own order.",
                        i + 1)]
    return []


RESUME_STAGES = (
    ("train_mode", _rs_train_mode, ()),
    ("on_step", _rs_on_step, ()),
    ("on_step_loss", _rs_on_step_loss, ()),
    ("return_value", _rs_return_value, ()),
    ("save_every", _rs_save_every, ("on_step",)),
    ("resume_step", _rs_resume_step, ("on_step",)),
    ("epoch_order", _rs_epoch_order, ()),
    ("mid_epoch", _rs_mid_epoch, ("epoch_order",)),  # an epoch order already wrong shows there first, not twice
    ("exact_resume", _rs_exact, ()),
)


@could_not_check("train_resumable")
def check_resume(train_fn) -> CheckReport:
    """Run ``train_fn`` (train_resumable) uninterrupted; again, crashing mid-epoch; then once more with fresh objects:
    the third run must continue after the last checkpoint and end bit-identical to the first."""
    names = [s for s, _, _ in RESUME_STAGES]
    report = new_report("resume", names + ["epochs", "device"], train_fn)
    if report.failures:  # not callable as the contract calls it
        return report
    seed = run_seed()  # fresh data and weights: no state made in advance fits them
    images = random_images(R_IMAGES, seed)
    labels = torch.randint(0, 10, (R_IMAGES,), generator=torch.Generator().manual_seed(seed))
    run_fn = train_fn  # each run is lent lab 6's pair known to be right (_resume_run): the loop alone is judged
    with isolated(), scratch() as tmp:
        dirs = [Path(tmp) / name for name in ("uninterrupted", "crashed")]
        for d in dirs:
            d.mkdir()
        full_log, crash_log, resumed_log = _OnStep(dirs[0]), _OnStep(dirs[1], R_CRASH_AT), _OnStep(dirs[1])
        # the uninterrupted and the crashing runs in a process of their own, and the resumed run here, where the loop
        # never ran before: it finds nothing of them but the disk (the varied run, judged on nothing they could
        # leave, runs here too). The crashing run may find the uninterrupted one in memory: nothing it could not make
        # itself from the same data and seed, and what it leaves for the resumed run is judged on disk either way
        (full, final_full), (crash, _) = _resume_runs(run_fn, [
            _resume_case(images, labels, seed, dirs[0], full_log),
            _resume_case(images, labels, seed, dirs[1], crash_log)], apart=True)
        full_names, full_kept = saved(dirs[0]), _kept(dirs[0])
        shutil.rmtree(dirs[0])  # the runs made here find nothing of the run that never stopped, on disk or in memory
        report.trace = full.events
        runs = [(full, "")]
        on_disk, kept = [], {}
        if full.complete:
            on_disk, files, kept = saved_steps(dirs[1]), saved(dirs[1]), _kept(dirs[1])
            touched = _touch_older(dirs[1], on_disk)
            resumed, final_resumed = _resume_run(run_fn, images, labels, seed, dirs[1], resumed_log)
            runs += [(crash, f" (in the run meant to crash at step {R_CRASH_AT})"), (resumed, " (when resuming)")]
        else:
            crash = resumed = full
            final_resumed, files = final_full, {}
        loader = _resume_objects(images, labels, seed)[3]
        epoch_batches = []
        for epoch in range(R_EPOCHS):
            set_position(loader, epoch, 0)
            epoch_batches.append(list(loader))
    ctx = ResumeCtx(train_fn, full, full_log, crash, crash_log, resumed, resumed_log, final_full, final_resumed,
                    epoch_batches, R_EPOCHS * len(epoch_batches[0]), on_disk, touched if full.complete else None,
                    files, full_names, full_kept, kept)
    # the arguments it must honour, judged whatever else went wrong (where the run that never stopped finished)
    then = functools.partial(_judge_varied, fn=train_fn, images=images, labels=labels, seed=seed) \
        if full.complete else None
    judge_call(report, "train_resumable", train_fn, runs, RESUME_STAGES, ctx, names, then=then)
    if not report.failures:  # where a notebook has a GPU, once more there (never while grading: checks.on_gpu)
        with isolated(), _lent_pair(train_fn):
            report.failures += on_gpu.failures("train_resumable", train_fn, _gpu_case(images, labels, seed))
    return report
