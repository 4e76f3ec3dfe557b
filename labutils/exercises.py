"""The lab's exercises, written once: every graded function's contract, the check that judges it, the arguments it
must honour, and its graded properties with their points.

Everything else is derived from here: the checks' signatures and the values they vary arguments over
(:mod:`labutils.checks`), the autograder's hidden tests (``autograder.hidden``), the mutant corpus's names, the
notebooks' graded cells (one per property, ``grade_id`` from :meth:`Exercise.grade_id`), the grader's task order
(:func:`grading_cost`), pytest's per-lab markers, and the tables of ``docs/exercises.md``
(``python -m labutils.exercises --write docs/exercises.md``; a test fails when the file differs).

A property names the failure ids (``Failure.check``) that cost its points; the rule for a property that another
property's failure keeps from being judged is in :mod:`labutils.checks.properties`.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# plain data only (no torch import): the grader reads this file too
GRADER_ENV = "LOOPLAB_HIDDEN_TESTS"  # "external": the grader re-runs every hidden test outside the student's kernel
GRADED_OUTSIDE = {GRADER_ENV: "external"}  # what the grader puts in a kernel's environment


def graded_outside() -> bool:
    """Whether this kernel runs under the grader, which judges every hidden test itself (outside the kernel)."""
    return os.environ.get(GRADER_ENV) == GRADED_OUTSIDE[GRADER_ENV]


@dataclass(frozen=True)
class Function:
    """One graded function: how it is called (positional ``params``, then keyword ``keywords`` defaulting to None),
    what it returns, and what it must do."""

    name: str
    params: tuple[str, ...]
    returns: str
    contract: str  # one Markdown paragraph
    keywords: tuple[str, ...] = ()

    @property
    def signature(self) -> inspect.Signature:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(p, kind) for p in self.params] +
                                 [inspect.Parameter(k, kind, default=None) for k in self.keywords])

    @property
    def call(self) -> str:
        """``train_one_epoch(model, loader, optimizer, device)``: how callers call it."""
        return f"{self.name}({', '.join(self.params + tuple(f'{k}=None' for k in self.keywords))})"

    def __str__(self) -> str:
        return f"{self.call} -> {self.returns}"


@dataclass(frozen=True)
class TorchDevice:
    """A ``torch.device`` in this registry, which imports no torch (the grader reads it): :meth:`Argument.value`
    builds the real one for the checks."""

    spec: str

    def __repr__(self) -> str:
        return f"torch.device({self.spec!r})"


@dataclass(frozen=True)
class Argument:
    """An argument the function must honour: the check runs it with ``values[0]``, then once more with ``values[1]``
    (everything else unchanged); a function that ignores it fails ``property``."""

    name: str
    values: tuple
    property: str
    about: str = ""  # what a value means when it is not the argument itself (e.g. "how many images")

    def value(self, which: int):
        """The value of run ``which`` (0: the main run, 1: the varied one) as the function receives it."""
        value = self.values[which]
        if isinstance(value, TorchDevice):
            import torch  # only the checks ask for values, and they have torch

            return torch.device(value.spec)
        return value


@dataclass(frozen=True)
class Property:
    """One graded test: ``title`` completes "Check that ...", ``checks`` are the failure ids that cost its points.

    ``evidence`` is what it is judged on: evidence a do-nothing or constant answer cannot produce
    (tests/test_stubs.py holds it to do-nothing answers). ``why`` says why a student who has read the checks cannot
    produce that evidence without the work (issue 43): not by a constant (every check run draws fresh data:
    labutils.checks.world), not by a cache (a call whose memory could stand in for the work runs in a process of its
    own: labutils.checks.apart), not by a patched query (modes, autograd and autocast are read from the modules and
    tensors themselves, forbidden helpers by their code: labutils.trace). ``needs`` are the other properties of the
    same exercise whose mistake leaves this one "not judged" (0 points, with "fix ... first"); every other property
    is judged whatever else is wrong (tests/test_checks.py holds them to the mutant corpus: a property a single
    mistake leaves unjudged must name it here)."""

    id: str
    points: float
    title: str
    checks: tuple[str, ...]
    evidence: str
    why: str
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exercise:
    id: str  # what the checks call it: check_train_one_epoch(fn, "accumulation"), show_trace(fn, "accumulation")
    notebook: str
    functions: tuple[Function, ...]
    check: str  # "module:function" in labutils.checks: the check that judges it (the package exports it from here)
    check_args: tuple  # its arguments after the student's function(s)
    arguments: tuple[Argument, ...]
    properties: tuple[Property, ...]
    # the lab's own implementations the graded function must not hand its work to ("module:function"): the check's
    # tracer stops a call to one, however it was reached, and names it
    forbidden: tuple[str, ...]

    @property
    def name(self) -> str:
        """The name its graded tests carry: the function's, or "checkpoint" for the save/load pair."""
        return self.functions[0].name if len(self.functions) == 1 else self.id

    @property
    def check_module(self) -> str:
        return self.check.partition(":")[0]

    @property
    def check_name(self) -> str:
        """What the notebooks call it: ``checks.check_normalize``."""
        return self.check.partition(":")[2]

    @property
    def points(self) -> float:
        return sum(p.points for p in self.properties)

    def property(self, property_id: str) -> Property:
        for p in self.properties:
            if p.id == property_id:
                return p
        raise ValueError(f"{self.name} ({self.notebook}) has no graded property {property_id!r}; its properties: "
                         f"{', '.join(p.id for p in self.properties)}")

    def grade_id(self, property_id: str) -> str:
        return f"test_{self.name}_{self.property(property_id).id}"

    def argument(self, name: str) -> Argument:
        return next(a for a in self.arguments if a.name == name)

    def defaults(self) -> dict:
        """The value of every honoured argument in the check's main run."""
        return {a.name: a.value(0) for a in self.arguments}

    def varied(self) -> dict:
        """The second value of every honoured argument: the run where a function using numbers of its own shows."""
        return {a.name: a.value(1) for a in self.arguments}

    def owner(self, check: str) -> list[Property]:
        """The properties a failure with this id costs."""
        return [p for p in self.properties if check in p.checks]


@dataclass(frozen=True)
class Notebook:
    """A notebook of the lab: what the grader needs to order it, and its run settings (``lesson.start(id)``)."""

    id: str
    cost: float  # grading time relative to 01_baseline (measured): the grader starts the slowest first
    config: dict = field(default_factory=dict)  # its LabConfig settings in full mode
    fast: dict = field(default_factory=dict)  # what its fast modes (smoke, grade) change beyond labutils.lesson.FAST


# --- the contracts ---------------------------------------------------------------------------------------------------

_TRAIN = ("model", "loader", "optimizer")
_EPOCH = "one pass over `loader` (at least one batch)"


def _device(prop: str) -> Argument:
    # the contract allows a string or a torch.device: a loop that only works with one of them (autocast's device_type
    # given the device itself) fails the second run; a loop that moves tensors to "cpu" of its own fails it too
    return Argument("device", ("cpu", TorchDevice("cpu:0")), prop, "a string, then a torch.device with an index")


def _max_norm(prop: str) -> Argument:
    return Argument("max_norm", (1.37, 0.73), prop)  # not 1.0 or 2.0, the lab's own thresholds

_AMP_DTYPE = Argument("amp_dtype", ("bfloat16", "float16"), "autocast", "the torch dtype of that name")

# failure ids of the loop taught in lab 1, of what train_one_epoch returns, and of the scheduler (lab 2)
_LOOP = ("train_mode", "grad_enabled", "batches", "order", "zero_grad", "gradient", "softmax", "device")
_RETURNS = ("return_value", "mean_loss", "per_sample", "loss_graph")
_SCHEDULER = ("scheduler", "scheduler_order")

# why a property's evidence takes the work, where many say the same
_FRESH = "fresh data and weights every run: a constant or a number copied from another run's message is wrong"
_TRACED = "as the loop's own evidence: fresh data, the loop's own objects traced, every run judged"

_REFERENCE_LOOP = ("labutils.reference.loop:train_one_epoch", "labutils.reference.loop:fit",
                   "labutils.reference.loop:optimizer_step")


def _train(exercise, notebook, params, returns, contract, arguments, properties) -> Exercise:
    fn = Function("train_one_epoch", _TRAIN + params + ("device",), returns, contract)
    return Exercise(exercise, notebook, (fn,), "train:check_train_one_epoch", (exercise,), arguments, properties,
                    forbidden=_REFERENCE_LOOP)


EXERCISES: tuple[Exercise, ...] = (
    Exercise("normalize", "00_data_tour", (Function(
        "normalize_images", ("images",), "torch.Tensor",
        "uint8 (N, 28, 28) -> float32 (N, 1, 28, 28): `(images / 255 - MEAN) / STD`; the input is left unchanged"),),
        "normalize:check_normalize", (),
        (Argument("images", (6, 11), "shape_dtype", "how many images (N)"),),
        (Property("shape_dtype", 1, "normalize_images returns a float32 tensor of shape (N, 1, 28, 28) for N images",
                  ("return_value",),
                  evidence="the tensor returned for N images at two sizes (both always tried): its shape and dtype",
                  why="both sizes are always tried: a shape fixed in advance fails one; the lab's normalize raises "
                      "under any name it is called by"),
         Property("values", 1, "normalize_images computes (images / 255 - MEAN) / STD and leaves its input alone",
                  ("values",),
                  evidence="every returned value against the formula on the same images (drawn afresh each run), "
                           "and the input unchanged; a constant result is refused",
                  why=f"{_FRESH}; a constant tensor is refused", needs=("shape_dtype",))),
        forbidden=("labutils.data:normalize",)),
    _train("baseline", "01_baseline", (), "float",
           f"{_EPOCH}; per batch: clear grads, forward, loss, backward, step; returns mean training loss; puts the "
           "model in train mode at the start",
           (_device("steps"),),
           (Property("train_mode", 1, "train_one_epoch puts the model in train mode before training",
                     ("train_mode",),
                     evidence="every module's own mode at every training forward, in a loop whose forwards reach "
                              "backward and an optimizer step",
                     why="read from each module itself, not the top module's flag or a query a function can patch "
                         "for its call; a forward that trains nothing shows nothing", needs=("steps",)),
            Property("steps", 1, "train_one_epoch clears, backpropagates and steps once per batch, on every batch",
                     ("grad_enabled", "batches", "order", "zero_grad", "device"),
                     evidence="the traced order of zero_grad, forward, backward and step on every batch",
                     why="the optimizer's and parameters' own hooks see every clear, backward and step; autograd is "
                         "read from the forward's outputs, not from torch.is_grad_enabled"),
            Property("gradient", 1, "train_one_epoch steps with the gradient of the batch's mean cross-entropy",
                     ("gradient", "softmax"),
                     evidence="the gradient each step used, against the batch's mean cross-entropy gradient computed "
                              "from the same weights",
                     why=f"PyTorch recomputes each step's gradient at the loop's own weights; {_FRESH}",
                     needs=("steps",)),
            Property("mean_loss", 1, "train_one_epoch returns the epoch's per-sample mean loss as a float",
                     _RETURNS,
                     evidence="the returned number against the per-sample mean of the losses the traced forwards "
                              "produced (on softmax probabilities where the loop puts a softmax before the loss: "
                              "the gradient's mistake), in a loop that steps",
                     why=f"{_FRESH}; a loop that never steps earns nothing", needs=("steps",)))),
    Exercise("evaluate", "01_baseline", (Function(
        "evaluate", ("model", "loader", "device"), "tuple[float, float]",
        "(mean per-sample loss, accuracy in [0, 1]); eval mode + `no_grad`/`inference_mode`; leaves the model in "
        "train mode afterwards"),), "evaluate:check_evaluate", (),
        (_device("loss"),),
        (Property("eval_mode", 1, "evaluate runs every forward in eval mode", ("eval_mode",),
                  evidence="every module's own mode at every forward, on an evaluation of every batch of the loader",
                  why="read from each module itself, not the top module's flag; one forward of a made-up image is "
                      "no evaluation of the loader"),
         Property("no_grad", 1, "evaluate runs its forwards without autograd (no_grad or inference_mode)",
                  ("no_grad",),
                  evidence="what the layers' outputs are at every forward (no graph: nothing requires grad), on an "
                           "evaluation of every batch",
                  why="read from the tensors the layers produced, which a patched torch.is_grad_enabled does not "
                      "change"),
         Property("loss", 0.5, "evaluate returns the per-sample mean loss over every batch of the loader",
                  ("return_value", "loss", "per_sample", "softmax", "batches", "device"),
                  evidence="the returned loss against the cross-entropy of the logits the function's own forwards "
                           "produced, every batch of the loader run",
                  why=f"{_FRESH} (the second call gets other data: a first call's numbers handed back are wrong); a "
                      "batch the function never ran is no evidence"),
         Property("accuracy", 0.5, "evaluate returns the per-sample accuracy as a fraction in [0, 1]",
                  ("return_value", "accuracy"),
                  evidence="the returned accuracy against the argmax of the logits the function's own forwards "
                           "produced",
                  why=f"{_FRESH} (even how many images and which are wrong are drawn per run)"),
         Property("restore_mode", 1, "evaluate leaves the model in train mode afterwards", ("restore_mode",),
                  evidence="every module's mode after a call that evaluated the whole loader (it comes in train "
                           "mode)",
                  why="read from each module itself, after a whole evaluation")),
        forbidden=("labutils.evaluation:evaluate", "labutils.reference.loop:evaluate", "labutils.reference.loop:fit")),
    _train("scheduler", "02_scheduler", ("scheduler",), "float",
           "as 01, plus `scheduler.step()` once after every `optimizer.step()` (`scheduler` is always given)",
           (_device("loop"),),
           (Property("loop", 1, "train_one_epoch keeps lab 1's loop: order, gradient, mean loss",
                     _LOOP + _RETURNS,
                     evidence="lab 1's evidence, traced on this loop", why=_TRACED),
            Property("scheduler_order", 1, "train_one_epoch calls scheduler.step() after optimizer.step(), not "
                                           "before", ("scheduler_order",),
                     evidence="the traced position of every scheduler.step() against optimizer.step()",
                     why="the calls are seen on the very scheduler and optimizer the loop was handed"),
            Property("scheduler_every_step", 1, "train_one_epoch steps the scheduler exactly once per optimizer "
                                                "step", ("scheduler",),
                     evidence="the learning rate of every step against the schedule's, at two schedule lengths",
                     why="the learning rates are the optimizer's own at every step, at two schedule lengths"))),
    _train("clipping", "03_clipping", ("scheduler", "max_norm"), "tuple[float, list[float]]",
           "as 02, plus `clip_grad_norm_(model.parameters(), max_norm)` (L2: the default norm_type) between backward "
           "and step; returns (mean loss, pre-clip global norm of every optimizer step as floats)",
           (_max_norm("clip"), _device("loop")),
           (Property("loop", 1, "train_one_epoch keeps lab 2's loop: order, gradient, scheduler, mean loss",
                     _LOOP + _RETURNS + _SCHEDULER,
                     evidence="lab 2's evidence, traced on this loop", why=_TRACED),
            Property("clip", 1, "train_one_epoch clips the gradient's global norm to max_norm between backward and "
                                "step", ("clip",),
                     evidence="the gradient each step used, against the clipped gradient at two max_norm values",
                     why="recomputed from each step's own gradient at both max_norm values, both always tried: a "
                         "number of its own fails one"),
            Property("norms", 1, "train_one_epoch returns the pre-clip norm of every optimizer step as floats",
                     ("norms",),
                     evidence="the returned list against the pre-clip norm of every step whose gradient matched, or "
                              "against what the loop's own clip_grad_norm_ returned where the clip is the mistake "
                              "(another norm_type, before backward)",
                     why=_FRESH))),
    _train("accumulation", "04_accumulation", ("scheduler", "max_norm", "accum_steps"), "tuple[float, list[float]]",
           "loss divided by `accum_steps` (or the window's summed gradients, before clipping); one clip + optimizer "
           "step + scheduler step per `accum_steps` micro-batches, after the window's last backward; "
           "a trailing partial group is stepped too (scaled by 1/its size, or by 1/accum_steps as Lightning does); one "
           "norm per optimizer step",
           (Argument("accum_steps", (2, 3), "window"), _max_norm("loop"), _device("loop")),
           (Property("loss_divided", 1, "train_one_epoch averages each window's gradients (its loss or its "
                                        "gradients divided by accum_steps)", ("loss_divided",),
                     evidence="the gradient of each optimizer step against the window's averaged gradient (or each "
                              "micro-batch's, where a clip ran inside the window)",
                     why=f"recomputed from the window's own micro-batches; {_FRESH}"),
            Property("window", 1, "train_one_epoch accumulates accum_steps micro-batches into each optimizer step",
                     ("accumulation",),
                     evidence="the micro-batches between optimizer steps, at two accum_steps values",
                     why="both accum_steps values are always tried: a number of its own fails one"),
            Property("trailing", 0.5, "train_one_epoch also steps the trailing partial window", ("trailing",),
                     evidence="an optimizer step for the last, partial window",
                     why="the optimizer's own hook sees the last step"),
            Property("scheduler", 0.5, "train_one_epoch steps the scheduler once per optimizer step, not per "
                                       "micro-batch", _SCHEDULER,
                     evidence="scheduler steps counted against optimizer steps",
                     why="the calls are seen on the very objects the loop was handed"),
            Property("returns", 0.5, "train_one_epoch returns the unscaled mean loss and one pre-clip norm per step",
                     _RETURNS + ("norms",),
                     evidence="the returned loss and norms against the traced unscaled losses and pre-clip norms (of "
                              "the gradient each step used, divided or not)",
                     why=_FRESH, needs=("loop",)),
            Property("loop", 0.5, "train_one_epoch keeps lab 3's loop: train mode, every batch, clearing, clipping",
                     _LOOP + ("clip",),
                     evidence="lab 3's evidence, traced on this loop (clipping judged on the gradient each step "
                              "used, divided or not)",
                     why=_TRACED))),
    _train("amp", "05_amp", ("scheduler", "max_norm", "scaler", "amp_dtype"), "tuple[float, list[float]]",
           "forward and loss under `torch.autocast(device_type, dtype=amp_dtype)`; `scaler` is a "
           "`torch.amp.GradScaler` or `None`; with a scaler: `scaler.scale(loss).backward()`, "
           "`scaler.unscale_(optimizer)`, clip, `scaler.step(optimizer)`, `scaler.update()`, `scheduler.step()`; "
           "without: plain backward and step; norms are of the unscaled gradients; a step the scaler skips (its "
           "gradients overflowed) is still cleared after, and the scheduler may step then or not, its norm (inf) be "
           "logged or left out; its loss counts in the mean loss",
           (_AMP_DTYPE, _max_norm("loop"), _device("loop")),  # autocast's device_type is the device's type, "cpu"
           (Property("autocast", 1, "train_one_epoch runs forward and loss under autocast with the amp_dtype it is "
                                    "given", ("autocast",),
                     evidence="the dtype of every training forward's conv and linear outputs, their weights float32, "
                              "at two amp_dtype values, in a loop whose forwards reach backward and an optimizer step",
                     why="read from the tensors: a patched torch.is_autocast_enabled, or a model cast to bfloat16, "
                         "does not make float32 weights give bfloat16 outputs; a forward that trains nothing shows "
                         "nothing", needs=("loop",)),
            Property("scaler", 1, "train_one_epoch scales the loss and steps through scaler.step and scaler.update",
                     ("scale", "scaler_step", "scaler_update"),
                     evidence="scale, scaler.step and scaler.update on every step; each scale() by the scale the "
                              "GradScaler has there; one scaled loss made to overflow, which must reach backward and "
                              "be skipped: no inf/nan reaches the weights",
                     why="the scaler's effects, not its calls: a scale set to 1 or a scaled loss thrown away shows"),
            Property("unscale", 1, "train_one_epoch calls scaler.unscale_(optimizer) before clipping", ("unscale",),
                     evidence="unscale_ traced before the clipping of every step",
                     why="judged only where the loss was really scaled (a no-op unscale_ shows nothing)",
                     needs=("scaler",)),
            Property("scaler_none", 0.5, "train_one_epoch also trains with scaler=None (plain backward and step)",
                     ("scaler_none",),
                     evidence="a run of its own with scaler=None: a plain backward and step",
                     why="a run of its own, on data of its own"),
            Property("loop", 0.5, "train_one_epoch keeps lab 3's loop: order, gradient, clipping, norms, scheduler",
                     _LOOP + _RETURNS + _SCHEDULER + ("clip", "norms"),
                     evidence="lab 3's evidence, traced on this loop; fresh gradients after the overflowing step; the "
                              "mean loss of the run with scaler=None where this one's weights went inf/nan",
                     why=_TRACED, needs=("scaler",)))),
    Exercise("checkpoint", "06_checkpointing", (
        Function("save_checkpoint", ("path", "model", "optimizer", "scheduler", "scaler", "step"), "None",
                 "`path` is a `pathlib.Path` or a `str` (take `Path(path)` first) in a folder that exists; atomic (a "
                 "temp file in the same folder, then `os.replace`, by any name: `from os import replace` and "
                 "`Path.replace` count; a fresh name from `tempfile.mkstemp(dir=folder, prefix=f'.{name}.', "
                 "suffix='.tmp')` is one the lab's crash clean-up removes; `fsync` before the rename is recommended, "
                 "not graded); holds model, optimizer, scheduler (always given), scaler (`None` allowed), step and the "
                 "RNG state of every generator (`labutils.checkpoint.capture_rng_state()`, or torch's, Python's and "
                 "NumPy's each by hand; not `torch.get_rng_state()` alone), in any layout (one dict of them is "
                 "simplest); loadable with `torch.load(path, weights_only=True)` (so no NumPy array in it)"),
        Function("load_checkpoint", ("path", "model", "optimizer", "scheduler", "scaler"), "int",
                 "restores all of the above into the objects given, RNG included "
                 "(`labutils.checkpoint.restore_rng_state`), loading with `weights_only=True` passed explicitly (its "
                 "default differs across the torch versions the lab allows; any `map_location`: `load_state_dict` "
                 "copies onto each parameter's device); `path` as in save_checkpoint; returns the step as an int")),
        "checkpointing:check_checkpoint", (),
        (Argument("step", (37, 1205), "return_step"),
         Argument("path", ("step-000037.pt", "run-b/last.ckpt"), "complete", "a Path, then a str in a sub-folder")),
        (Property("atomic", 1, "save_checkpoint writes a temp file beside the checkpoint, then os.replace",
                  ("atomic",),
                  evidence="a temporary file beside the checkpoint, then os.replace onto it, and the file's final "
                           "bytes those the rename put there",
                  why="the bytes on disk are compared: a file written in place after the rename, or renamed onto "
                      "itself, shows"),
         Property("complete", 1, "save_checkpoint saves every part (model to RNG), loadable with weights_only=True",
                  ("loadable", "contents"),
                  evidence="the file on disk, loaded with weights_only=True: every part present and equal to the "
                           "state it had at the save",
                  why="values, not keys: placeholders or another run's state fail, and the states are fresh every "
                      "run"),
         Property("restore", 1, "load_checkpoint restores every part: training on matches the run that never stopped",
                  ("restore", "exact_resume", "safe_load"),
                  evidence="training on after a load, in a process where no save ran, against the run that never "
                           "stopped, and the weights_only=True of every torch.load it made",
                  why="the saves run in a forked child: a load that restores from memory (a module's cache) finds "
                      "nothing there, only the file", needs=("complete",)),
         Property("return_step", 1, "load_checkpoint returns the saved step as an int", ("return_value",),
                  evidence="the returned value against the step in the file, at two step values, read back where no "
                           "save ran",
                  why="a step kept in memory is not in the process that loads; the step is read from the file",
                  needs=("complete",)),
         Property("scaler_none", 1, "save_checkpoint and load_checkpoint also work with scaler=None",
                  ("scaler_none",),
                  evidence="a save and load of their own with scaler=None, the load where no save ran",
                  why="as restore: only the file carries the state", needs=("complete",))),
        forbidden=("labutils.reference.checkpoint:save_checkpoint", "labutils.reference.checkpoint:restore_checkpoint",
                   "labutils.reference.checkpoint:atomic_save", "labutils.reference.checkpoint:verified_load",
                   "labutils.reference.checkpoint:load_latest_valid", "labutils.atomic:atomic_file")),
    Exercise("resume", "07_crash_resume", (Function(
        "train_resumable", ("model", "optimizer", "scheduler", "train_loader", "epochs", "ckpt_dir", "save_every",
                            "device"), "int",
        "`ckpt_dir` (a `str`) is an existing folder, empty on a first run; resumes from the newest checkpoint in it "
        "if any, newest by the step in its name, never by file time (`labutils.checkpoint.latest_checkpoint`), with "
        "the student's own lab 6 `load_checkpoint(path, model, optimizer, scheduler, None)`, which returns the saved "
        "step (the check lends the loop, and every helper of the notebook that calls them by name, a correct pair of "
        "its own under the names `save_checkpoint` and `load_checkpoint`, so a lab 6 mistake costs nothing here; its "
        "files are real checkpoints: `torch.load(path, weights_only=True)` gives a dict with the keys model, "
        "optimizer, scheduler, scaler, step and rng, `capture_rng_state()`'s); puts the model in train mode (it may "
        "come in eval mode); calls `labutils.data.set_position(train_loader, epoch, start_batch)` before every epoch "
        "(`start_batch` is 0 except right after resuming; `len(train_loader)` is the batches per epoch); saves "
        "`ckpt_dir/step-{step:06d}.pt` (`step-{step}.pt` is read the same) every `save_every` optimizer steps with "
        "lab 6's `save_checkpoint(path, model, optimizer, scheduler, None, step)`, once the step is complete (after "
        "`scheduler.step()`; one more at the end of training is allowed, no other); "
        "calls `on_step(step, loss)` after every optimizer step (after the save; `loss` is that step's mean training "
        "loss as a float); no clipping; returns the final global step",
        ("on_step",)),), "resumable:check_resume", (),
        (Argument("save_every", (4, 7), "saves"), Argument("epochs", (2, 3), "loop"),
         _device("loop")),
        (Property("saves", 1, "train_resumable saves step-{step:06d}.pt every save_every steps, before on_step",
                  ("save_every",),
                  evidence="the step-NNNNNN.pt files on disk when on_step was called, at two save_every values, each "
                           "holding the weights the model had after that step",
                  why="the files' contents are compared: an empty file by the right name is no checkpoint",
                  needs=("loop",)),
         Property("resumes", 1, "train_resumable restarts from the step of the newest checkpoint", ("resume_step",),
                  evidence="the first step after a crash against the newest checkpoint on disk: its step + 1, from "
                           "the weights it holds",
                  why="the resumed run runs where the loop never ran: only the disk carries the state to it",
                  needs=("loop",)),
         Property("mid_epoch", 1, "train_resumable continues in the middle of the epoch, with the same batches",
                  ("mid_epoch", "epoch_order"),
                  evidence="the batches of every epoch, and the first batch after resuming, against the loader's "
                           "order",
                  why="the loader's order is drawn afresh every run", needs=("resumes",)),
         Property("exact", 1, "train_resumable ends bit-identical to the run that never stopped", ("exact_resume",),
                  evidence="every resumed step (weights, learning rate, gradient, loss) and the final weights and "
                           "optimizer state against the run that never stopped, when the resumed run trained on the "
                           "same batches",
                  why="the uninterrupted run's memory and folder are gone before the resumed run starts, and every "
                      "step must match, not only the end", needs=("resumes", "mid_epoch")),
         Property("loop", 1, "train_resumable trains the given epochs, calls on_step after every step, returns the "
                             "final step",
                  ("train_mode", "on_step", "on_step_loss", "epochs", "return_value", "device"),
                  evidence="every module's mode at every forward, on_step's calls and losses (each its step's own "
                           "cross-entropy), the steps taken at two epochs values, the device, the returned step",
                  why="each loss is compared with the cross-entropy of its step's own forward: a float of the right "
                      "type is not enough")),
        forbidden=("labutils.reference.loop:fit", "labutils.reference.loop:train_one_epoch")),
    Exercise("param_groups", "08_stretch", (Function(
        "param_groups", ("model", "weight_decay"), "list[dict]",
        "AdamW parameter groups: `weight_decay` on weights of conv/linear layers, 0.0 on biases and normalisation "
        "parameters (every parameter with `ndim <= 1`); every trainable parameter exactly once"),),
        "param_groups:check_param_groups", (),
        (Argument("weight_decay", (0.037, 0.0123), "decay"),),
        (Property("coverage", 1, "param_groups puts every trainable parameter in exactly one group",
                  ("return_value", "coverage"),
                  evidence="the groups returned: at least two, every trainable parameter exactly once",
                  why="the model's own parameters, by identity"),
         Property("decay", 1, "param_groups decays conv and linear weights by the weight_decay it is given",
                  ("return_value", "weight_decay"),
                  evidence="the weight decay of the groups holding conv and linear weights, at two values",
                  why="both weight_decay values are always tried: a number of its own fails one"),
         Property("no_decay", 1, "param_groups sets weight_decay=0.0 on biases and normalisation parameters",
                  ("return_value", "no_decay"),
                  evidence="0.0 on the groups holding biases and norm parameters, while weights decay",
                  why="judged while the weights decay: undecayed everything shows nothing")),
        forbidden=("labutils.reference.optim:param_groups",)),
)
TRAIN_EXERCISES = tuple(e.id for e in EXERCISES if e.check_name == "check_train_one_epoch")

# measured with benchmarks/bench_grading.py once grading stopped at the last test cell (medians of 8 students); the
# run settings are LabConfig's in full mode and what the fast modes (smoke, grade) change beyond labutils.lesson.FAST
NOTEBOOKS: tuple[Notebook, ...] = (
    Notebook("00_data_tour", 1.2),
    Notebook("01_baseline", 1.0, dict(epochs=5, lr=1e-3)),
    Notebook("02_scheduler", 0.75, dict(epochs=5, lr=3e-3, schedule="onecycle")),
    Notebook("03_clipping", 1.0, dict(epochs=5, lr=3e-3, schedule="onecycle", max_norm=1.0)),  # then it picks 2.0
    Notebook("04_accumulation", 0.6, dict(epochs=5, lr=3e-3, schedule="onecycle", max_norm=2.0, batch_size=32,
                                          accum_steps=4)),
    Notebook("05_amp", 0.8, dict(epochs=5, lr=3e-3, schedule="onecycle", max_norm=2.0, amp="auto")),
    Notebook("06_checkpointing", 0.75, dict(epochs=3, lr=3e-3, schedule="onecycle", max_norm=2.0, save_every=100,
                                            keep_last=3), fast=dict(epochs=2, save_every=5)),
    Notebook("07_crash_resume", 0.85, dict(epochs=3, lr=3e-3, schedule="onecycle", save_every=100),
             fast=dict(epochs=3, save_every=7)),
    Notebook("08_stretch", 0.8, dict(epochs=2, lr=3e-3, schedule="onecycle", max_norm=2.0, amp="auto")),
)


def get(exercise_id: str) -> Exercise:
    for e in EXERCISES:
        if e.id == exercise_id:
            return e
    raise ValueError(f"exercise={exercise_id!r} is unknown: use one of {', '.join(e.id for e in EXERCISES)}")


def find(notebook_id: str, function_name: str) -> Exercise:
    """The exercise of ``notebook_id`` that grades ``function_name`` (either function of the checkpoint pair)."""
    for e in EXERCISES:
        if e.notebook == notebook_id and function_name in (f.name for f in e.functions):
            return e
    known = sorted((e.notebook, f.name) for e in EXERCISES for f in e.functions)
    raise ValueError(f"no hidden test for {function_name!r} in notebook {notebook_id!r}; known: {known}")


def function(exercise_id: str, name: str | None = None) -> Function:
    """The exercise's graded function called ``name`` (its only one when None)."""
    fns = get(exercise_id).functions
    return fns[0] if name is None else next(f for f in fns if f.name == name)


def of_notebook(notebook_id: str) -> list[Exercise]:
    return [e for e in EXERCISES if e.notebook == notebook_id]


def concept(notebook_id: str, grade_id: str) -> str | None:
    """What the graded test ``grade_id`` of ``notebook_id`` checks (its property's title), or None for a test the
    registry does not define (a written answer, an instructor's own test)."""
    for e in of_notebook(notebook_id):
        for p in e.properties:
            if e.grade_id(p.id) == grade_id:
                return p.title
    return None


def notebook(notebook_id: str) -> Notebook:
    for n in NOTEBOOKS:
        if n.id == notebook_id:
            return n
    raise ValueError(f"no settings for notebook {notebook_id!r}: use one of {', '.join(n.id for n in NOTEBOOKS)}")


def grading_cost(notebook_id: str) -> float:
    """Relative time to grade one student's ``notebook_id`` (01_baseline = 1; an unknown notebook counts 1)."""
    return next((n.cost for n in NOTEBOOKS if n.id == notebook_id), 1.0)


def lab_marker(notebook_id: str) -> str:
    """The pytest marker of a notebook's tests: "lab04" for 04_accumulation."""
    return f"lab{notebook_id[:2]}"


# --- docs/exercises.md ---------------------------------------------------------------------------------------------

_BEGIN, _END = "<!-- BEGIN GENERATED by `python -m labutils.exercises --write docs/exercises.md` -->", \
    "<!-- END GENERATED -->"


def _points(x: float) -> str:
    return f"{x:g}"


def _value(value) -> str:
    return f"`{value!r}`"


def markdown() -> str:
    """The generated part of docs/exercises.md: the contracts, the arguments the checks vary, the graded tests."""
    lines = ["| notebook | function | contract |", "|---|---|---|"]
    lines += [f"| {e.notebook} | `{f}` | {f.contract} |" for e in EXERCISES for f in e.functions]
    lines += ["", "### Arguments a function must honour", "",
              "Each check runs the function with the first value, then once more with the second (on data of its "
              "own, and always, whatever the first run showed): a function that uses a number of its own instead "
              "of the argument fails, and the message names the argument and the value it behaved as if it had.",
              "",
              "| notebook | function | argument | values |", "|---|---|---|---|"]
    lines += [f"| {e.notebook} | `{e.functions[0].name}` | `{a.name}`{f' ({a.about})' if a.about else ''} | "
              f"{', '.join(_value(v) for v in a.values)} |" for e in EXERCISES for a in e.arguments]
    lines += ["", "### Graded tests", "",
              "One graded test cell per property. A property earns its points only on evidence from the student's "
              "own run (the \"judged on\" column): evidence a do-nothing or constant answer could also produce "
              "earns nothing, and the checks ship in the handout, so the evidence is also one a student who has "
              "read them cannot produce without the work (the \"why it takes the work\" column: data drawn afresh "
              "every run, calls whose memory could stand in for the work made in a process of their own, what ran "
              "read from the modules and tensors themselves). A single mistake costs the points of the property it "
              "breaks. A property whose evidence a mistake in another can hide lists that one under \"needs\": "
              "when the mistake hides it, it is \"not judged\", 0 points, with a message that says which to fix "
              "first; when its own evidence is still there, it is judged on it. Every other property is judged "
              "whatever else is wrong (the rule is in `labutils/checks/properties.py`).", "",
              "| notebook | graded test | checks that | judged on | why it takes the work | needs | points |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| {e.notebook} | `{e.grade_id(p.id)}` | {p.title} | {p.evidence} | {p.why or '-'} | "
              f"{', '.join(f'`{e.grade_id(n)}`' for n in p.needs) or '-'} | {_points(p.points)} |"
              for e in EXERCISES for p in e.properties]
    return "\n".join([_BEGIN, *lines, _END])


def render_docs(text: str) -> str:
    """``text`` (docs/exercises.md) with its generated part replaced by :func:`markdown`."""
    pattern = re.compile(re.escape(_BEGIN) + r".*?" + re.escape(_END), re.S)
    if not pattern.search(text):
        raise ValueError(f"no generated part ({_BEGIN} ... {_END}) in the file")
    return pattern.sub(lambda _: markdown(), text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Check or rewrite the generated tables of docs/exercises.md.")
    parser.add_argument("path", type=Path, nargs="?", default=Path("docs/exercises.md"))
    parser.add_argument("--write", action="store_true", help="rewrite the file instead of checking it")
    args = parser.parse_args(argv)
    text = args.path.read_text()
    fresh = render_docs(text)
    if args.write:
        args.path.write_text(fresh)
        return 0
    if fresh != text:
        print(f"{args.path} differs from the exercise registry: run python -m labutils.exercises --write {args.path}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
