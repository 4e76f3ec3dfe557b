"""The mutation corpus: correct variants every check must pass, buggy ones each check must catch, and why.

``VARIANTS`` lists ``Variant(name, exercise, function, expected_check, expected_message)``; for a correct variant the
last two are None. ``function`` is the graded function, or for "checkpoint" the pair (save, load). ``source(variant)``
gives notebook-ready source with the contract's names (``def train_one_epoch(...)``), and ``run_check(variant)`` runs
the labutils check the autograder runs.
"""

from __future__ import annotations

import inspect
import re
from typing import NamedTuple

from labutils import checks, exercises

from . import buggy as b
from . import correct as c

# exercise -> the contract's function name(s), in the order check_* takes them (derived from the registry)
CONTRACT_NAMES = {e.id: tuple(f.name for f in e.functions) for e in exercises.EXERCISES}


class Variant(NamedTuple):
    name: str
    exercise: str
    function: object  # a function, or (save, load) for "checkpoint"
    expected_check: str | None = None  # None: a correct variant, must pass every check
    expected_message: str | None = None  # a piece of the failure message

    @property
    def functions(self) -> tuple:
        return self.function if isinstance(self.function, tuple) else (self.function,)

    @property
    def correct(self) -> bool:
        return self.expected_check is None


CORRECT = [
    Variant("normalize_canonical", "normalize", c.normalize_canonical),
    Variant("normalize_indexing", "normalize", c.normalize_indexing),
    Variant("baseline_canonical", "baseline", c.baseline_canonical),
    Variant("baseline_zero_after_step", "baseline", c.baseline_zero_after_step),
    Variant("baseline_while_iter", "baseline", c.baseline_while_iter),
    Variant("baseline_manual_clear", "baseline", c.baseline_manual_clear),
    Variant("baseline_closure", "baseline", c.baseline_closure),
    Variant("baseline_step_at_top", "baseline", c.baseline_step_at_top),
    Variant("baseline_autograd_grad", "baseline", c.baseline_autograd_grad),
    Variant("evaluate_canonical", "evaluate", c.evaluate_canonical),
    Variant("evaluate_inference_mode", "evaluate", c.evaluate_inference_mode),
    Variant("evaluate_collects_on_cpu", "evaluate", c.evaluate_collects_on_cpu),
    Variant("scheduler_canonical", "scheduler", c.scheduler_canonical),
    Variant("scheduler_zero_after_step", "scheduler", c.scheduler_zero_after_step),
    Variant("clipping_canonical", "clipping", c.clipping_canonical),
    Variant("clipping_nn_utils", "clipping", c.clipping_nn_utils),
    Variant("clipping_imported", "clipping", c.clipping_imported),
    Variant("clipping_closure", "clipping", c.clipping_closure),
    Variant("accumulation_canonical", "accumulation", c.accumulation_canonical),
    Variant("accumulation_exact_trailing", "accumulation", c.accumulation_exact_trailing),
    Variant("accumulation_groups", "accumulation", c.accumulation_groups),
    Variant("accumulation_divides_grads", "accumulation", c.accumulation_divides_grads),
    Variant("amp_canonical", "amp", c.amp_canonical),
    Variant("amp_flags", "amp", c.amp_flags),
    Variant("amp_skip_aware", "amp", c.amp_skip_aware),
    Variant("checkpoint_canonical", "checkpoint", (c.save_canonical, c.load_canonical)),
    Variant("checkpoint_nested", "checkpoint", (c.save_nested, c.load_nested)),
    Variant("checkpoint_replace_imported", "checkpoint", (c.save_replace_imported, c.load_canonical)),
    Variant("checkpoint_own_rng", "checkpoint", (c.save_own_rng, c.load_own_rng)),
    Variant("resume_canonical", "resume", c.resume_canonical),
    Variant("resume_while", "resume", c.resume_while),
    Variant("resume_unpadded_names", "resume", c.resume_unpadded_names),
    Variant("resume_loads_by_hand", "resume", c.resume_loads_by_hand),
    Variant("resume_helpers", "resume", c.resume_helpers),
    Variant("param_groups_canonical", "param_groups", c.param_groups_canonical),
    Variant("param_groups_by_module", "param_groups", c.param_groups_by_module),
    Variant("param_groups_generators", "param_groups", c.param_groups_generators),
    Variant("param_groups_filter", "param_groups", c.param_groups_filter),
]

BUGGY = [
    # 00
    Variant("normalize_no_255", "normalize", b.normalize_no_255, "values", "not divided by 255"),
    Variant("normalize_no_channel", "normalize", b.normalize_no_channel, "return_value", ".unsqueeze(1)"),
    # 01 train_one_epoch
    Variant("no_zero_grad", "baseline", b.no_zero_grad, "zero_grad", "still in .grad from step 1"),
    Variant("zero_grad_before_step", "baseline", b.zero_grad_before_step, "zero_grad",
            "ran between loss.backward() and optimizer.step() at step 1"),
    Variant("step_before_backward", "baseline", b.step_before_backward, "order",
            "optimizer.step() ran before loss.backward() at step 1"),
    Variant("softmax_before_cross_entropy", "baseline", b.softmax_before_cross_entropy, "softmax",
            "cross-entropy on softmax probabilities"),
    Variant("no_train_mode", "baseline", b.no_train_mode, "train_mode", "Call model.train()"),
    Variant("loss_per_batch", "baseline", b.loss_per_batch, "per_sample", "average of the per-batch losses"),
    Variant("returns_tensor", "baseline", b.returns_tensor, "return_value", "is a tensor"),
    Variant("forward_under_no_grad", "baseline", b.forward_under_no_grad, "grad_enabled", "under torch.no_grad()"),
    Variant("skips_last_batch", "baseline", b.skips_last_batch, "batches", "batch 5 of 5 was never trained on"),
    Variant("sums_loss_tensor", "baseline", b.sums_loss_tensor, "loss_graph", "the graphs of all 3 earlier batches"),
    Variant("missing_device", "baseline", b.missing_device, "signature", "is missing device"),
    Variant("typo_backwards", "baseline", b.typo_backwards, "exception",
            "AttributeError at line 7 of train_one_epoch (`loss.backwards()`)"),
    Variant("uses_reference_loop", "baseline", b.uses_reference_loop, "uses_reference",
            "labutils.reference.loop.train_one_epoch"),
    # 01 evaluate
    Variant("evaluate_no_eval", "evaluate", b.evaluate_no_eval, "eval_mode", "Call model.eval()"),
    Variant("evaluate_no_no_grad", "evaluate", b.evaluate_no_no_grad, "no_grad", "torch.no_grad()"),
    Variant("evaluate_not_restored", "evaluate", b.evaluate_not_restored, "restore_mode",
            "left the model in eval mode"),
    Variant("evaluate_per_batch", "evaluate", b.evaluate_per_batch, "per_sample", "average of the per-batch means"),
    Variant("evaluate_percentage", "evaluate", b.evaluate_percentage, "accuracy", "percentage"),
    Variant("evaluate_uses_reference", "evaluate", b.evaluate_uses_reference, "uses_reference",
            "labutils.evaluation.evaluate"),
    # 02
    Variant("scheduler_before_optimizer", "scheduler", b.scheduler_before_optimizer, "scheduler_order",
            "scheduler.step() ran before optimizer.step() at step 1"),
    Variant("scheduler_per_epoch", "scheduler", b.scheduler_per_epoch, "scheduler", "stepped per epoch"),
    # 03
    Variant("clip_before_backward", "clipping", b.clip_before_backward, "clip",
            "clip_grad_norm_ ran before loss.backward() at step 1"),
    Variant("clip_after_step", "clipping", b.clip_after_step, "clip",
            "clip_grad_norm_ ran after optimizer.step() at step 1"),
    Variant("no_clipping", "clipping", b.no_clipping, "clip", "clip_grad_norm_ was never called"),
    Variant("logs_post_clip_norm", "clipping", b.logs_post_clip_norm, "norms", "the norm after clipping"),
    Variant("norms_as_tensors", "clipping", b.norms_as_tensors, "norms", "norm 1 of the returned list is a "
                                                                                "tensor"),
    Variant("clip_inf_norm", "clipping", b.clip_inf_norm, "clip", "norm_type"),
    Variant("clipping_missing_max_norm", "clipping", b.clipping_missing_max_norm, "signature", "is missing max_norm"),
    # 04
    Variant("scheduler_per_micro_batch", "accumulation", b.scheduler_per_micro_batch, "scheduler",
            "once per micro-batch"),
    Variant("loss_not_divided", "accumulation", b.loss_not_divided, "loss_divided",
            "neither the loss nor the gradients were divided by accum_steps"),
    Variant("clip_every_micro_batch", "accumulation", b.clip_every_micro_batch, "clip",
            "clip_grad_norm_ ran after micro-batch 1 of step 1"),
    Variant("steps_every_micro_batch", "accumulation", b.steps_every_micro_batch, "accumulation",
            "optimizer.step() ran after every micro-batch"),
    Variant("drops_trailing_group", "accumulation", b.drops_trailing_group, "trailing",
            "the trailing partial group was dropped"),
    Variant("zero_grad_every_micro_batch", "accumulation", b.zero_grad_every_micro_batch, "accumulation",
            "cleared before micro-batch 2 of step 1"),
    Variant("reports_scaled_loss", "accumulation", b.reports_scaled_loss, "mean_loss", "divided by accum_steps"),
    # 05
    Variant("clip_before_unscale", "amp", b.clip_before_unscale, "unscale",
            "clip_grad_norm_ ran before scaler.unscale_(optimizer) at step 1"),
    Variant("optimizer_step_with_scaler", "amp", b.optimizer_step_with_scaler, "scaler_step",
            "optimizer.step() was called directly at step 3, whose scaled loss overflowed"),
    Variant("no_scaler_update", "amp", b.no_scaler_update, "scaler_update",
            "scaler.update() did not run after scaler.step() at step 1"),
    Variant("skipped_step_keeps_gradients", "amp", b.skipped_step_keeps_gradients, "zero_grad",
            "left by step 3, which scaler.step() skipped"),
    Variant("no_autocast", "amp", b.no_autocast, "autocast", "without torch.autocast"),
    Variant("backward_without_scale", "amp", b.backward_without_scale, "scale", "scaler.scale(loss).backward()"),
    Variant("amp_scaler_required", "amp", b.amp_scaler_required, "scaler_none",
            "with scaler=None, train_one_epoch raised AttributeError"),
    Variant("amp_mean_leaves_out_skipped_step", "amp", b.amp_mean_leaves_out_skipped_step, "mean_loss",
            "which scaler.step() skipped"),
    # 06
    Variant("checkpoint_in_place", "checkpoint", (b.save_in_place, c.load_canonical), "atomic",
            "torch.save wrote straight to step-000037.pt"),
    Variant("checkpoint_no_optimizer", "checkpoint", (b.save_no_optimizer, b.load_no_optimizer), "contents",
            "missing the optimizer state"),
    Variant("checkpoint_no_scheduler", "checkpoint", (b.save_no_scheduler, b.load_no_scheduler), "contents",
            "missing the scheduler state"),
    Variant("checkpoint_no_scaler", "checkpoint", (b.save_no_scaler, b.load_no_scaler), "contents",
            "missing the GradScaler state"),
    Variant("checkpoint_no_rng", "checkpoint", (b.save_no_rng, b.load_no_rng), "contents", "missing the RNG state"),
    Variant("checkpoint_torch_rng_only", "checkpoint", (b.save_torch_rng_only, b.load_torch_rng_only), "contents",
            "the RNG state of torch's generator only"),
    Variant("checkpoint_load_without_weights_only", "checkpoint", (c.save_canonical, b.load_without_weights_only),
            "safe_load", "weights_only=True"),
    Variant("checkpoint_load_torch_rng_only", "checkpoint", (c.save_canonical, b.load_restores_torch_rng_only),
            "restore", "restore_rng_state"),
    Variant("checkpoint_load_forgets_scheduler", "checkpoint", (c.save_canonical, b.load_forgets_scheduler),
            "restore", "scheduler.load_state_dict"),
    Variant("checkpoint_pickles_model", "checkpoint", (b.save_pickles_objects, c.load_canonical), "loadable",
            "weights_only=True"),
    Variant("checkpoint_scaler_required", "checkpoint", (b.save_scaler_required, c.load_canonical), "scaler_none",
            "with scaler=None"),
    Variant("checkpoint_load_returns_dict", "checkpoint", (c.save_canonical, b.load_returns_dict), "return_value",
            "the saved step as an int"),
    Variant("checkpoint_uses_reference", "checkpoint", (b.save_uses_reference, c.load_canonical), "uses_reference",
            "labutils.atomic.atomic_file"),
    # 07
    Variant("resume_off_by_one", "resume", b.resume_off_by_one, "resume_step", "it should continue with step 9"),
    Variant("resume_restarts_epoch", "resume", b.resume_restarts_epoch, "mid_epoch", "set_position"),
    Variant("resume_never_loads", "resume", b.resume_never_loads, "resume_step", "started again at step 1"),
    Variant("resume_forgets_rng", "resume", b.resume_forgets_rng, "exact_resume",
            "the RNG state was not the checkpoint's"),
    Variant("resume_saves_after_on_step", "resume", b.resume_saves_after_on_step, "save_every",
            "no checkpoint step-000004.pt existed"),
    Variant("resume_positions_only_when_resuming", "resume", b.resume_positions_only_when_resuming, "epoch_order",
            "so each epoch has its own order"),
    Variant("resume_no_train_mode", "resume", b.resume_no_train_mode, "train_mode", "Call model.train()"),
    Variant("resume_latest_by_file_time", "resume", b.resume_latest_by_file_time, "resume_step",
            "by the step in its name"),
    Variant("resume_restarts_epoch_runs_on", "resume", b.resume_restarts_epoch_runs_on, "mid_epoch",
            "set_position"),
    Variant("resume_epochs_from_the_lab", "resume", b.resume_epochs_from_the_lab, "epochs",
            "as if epochs=3, not the epochs=2 it was given"),
    Variant("resume_forgets_scheduler", "resume", b.resume_forgets_scheduler, "exact_resume",
            "the scheduler's state was not restored"),
    Variant("resume_saves_before_scheduler_step", "resume", b.resume_saves_before_scheduler_step, "exact_resume",
            "between optimizer.step() and scheduler.step()"),
    # 08
    Variant("param_groups_decays_biases", "param_groups", b.param_groups_decays_biases, "no_decay",
            "must not be decayed"),
    Variant("param_groups_forgets_norm", "param_groups", b.param_groups_forgets_norm, "coverage", "is in no group"),
    # arguments it must honour: each check runs a second time with other values (labutils.exercises)
    Variant("baseline_hardcoded_device", "baseline", b.baseline_hardcoded_device, "device",
            "moved tensors to 'cpu', not to the device=torch.device('cpu:0') it was given"),
    Variant("evaluate_hardcoded_device", "evaluate", b.evaluate_hardcoded_device, "device",
            "moved tensors to 'cpu', not to the device=torch.device('cpu:0') it was given"),
    Variant("evaluate_cpu_call", "evaluate", b.evaluate_cpu_call, "device",
            "moved tensors to 'cpu', not to the device=torch.device('cpu:0') it was given"),
    Variant("baseline_cpu_call", "baseline", b.baseline_cpu_call, "device",
            "moved tensors to 'cpu', not to the device=torch.device('cpu:0') it was given"),
    Variant("clipping_hardcoded_max_norm", "clipping", b.clipping_hardcoded_max_norm, "clip",
            "clipped at 2, not at the max_norm=1.37 it was given"),
    Variant("accumulation_hardcoded_accum_steps", "accumulation", b.accumulation_hardcoded_accum_steps,
            "accumulation", "as if accum_steps=2, not the accum_steps=3 it was given"),
    Variant("amp_hardcoded_max_norm", "amp", b.amp_hardcoded_max_norm, "clip",
            "clipped at 2, not at the max_norm=1.37 it was given"),
    Variant("amp_hardcoded_device", "amp", b.amp_hardcoded_device, "device",
            "moved tensors to 'cpu', not to the device=torch.device('cpu:0') it was given"),
    Variant("amp_autocast_device_itself", "amp", b.amp_autocast_device_itself, "exception",
            "device=torch.device('cpu:0'), train_one_epoch raised ValueError at line 9 of train_one_epoch "
            "(`with torch.autocast(device_type=device, dtype=amp_dtype):`)"),
    Variant("amp_hardcoded_dtype", "amp", b.amp_hardcoded_dtype, "autocast",
            "ran under autocast torch.bfloat16, with amp_dtype=torch.float16"),
    Variant("checkpoint_hardcoded_step", "checkpoint", (b.save_hardcoded_step, c.load_canonical), "return_value",
            "load_checkpoint returned 0, not the step=1205 that save_checkpoint was given"),
    Variant("resume_hardcoded_save_every", "resume", b.resume_hardcoded_save_every, "save_every",
            "as if save_every=4, not the save_every=7 it was given"),
    Variant("resume_hardcoded_epochs", "resume", b.resume_hardcoded_epochs, "epochs",
            "as if epochs=2, not the epochs=3 it was given"),
    Variant("resume_saves_every_step", "resume", b.resume_saves_every_step, "save_every",
            "when step % save_every == 0"),
    Variant("resume_on_step_tensor_loss", "resume", b.resume_on_step_tensor_loss, "on_step_loss",
            "was handed a tensor: pass loss.item()"),
    Variant("resume_replays_epoch_order", "resume", b.resume_replays_epoch_order, "epoch_order",
            "so each epoch has its own order"),
    Variant("param_groups_hardcoded_decay", "param_groups", b.param_groups_hardcoded_decay, "weight_decay",
            "by 0.01, not by the weight_decay=0.037 it was given"),
]

VARIANTS = CORRECT + BUGGY


def run_check(variant: Variant) -> checks.CheckReport:
    """The labutils check the autograder runs for this variant's exercise."""
    exercise = exercises.get(variant.exercise)
    return getattr(checks, exercise.check_name)(*variant.functions, *exercise.check_args)


def source(variant: Variant) -> str:
    """Notebook-ready source of the variant: each function renamed to the contract's name, after the helper
    functions of the corpus it calls (``_resume_point``: a notebook defines its helpers in a cell of their own)."""
    parts = []
    for fn, name in zip(variant.functions, CONTRACT_NAMES[variant.exercise]):
        for helper in _helpers(fn):
            parts.append(inspect.getsource(helper))
        text = inspect.getsource(fn)
        parts.append(re.sub(rf"^def {fn.__name__}\(", f"def {name}(", text, count=1, flags=re.MULTILINE))
    return "\n\n".join(dict.fromkeys(parts))


def _helpers(fn) -> list:
    """The corpus's own helper functions (a leading underscore, in the variant's module) that ``fn`` calls."""
    return [fn.__globals__[n] for n in fn.__code__.co_names if n.startswith("_") and
            inspect.isfunction(fn.__globals__.get(n)) and fn.__globals__[n].__module__ == fn.__module__]


# the module-level imports a variant's source may rely on (a notebook cell pastes these above it)
IMPORTS = """\
import os
import random
import tempfile
from os import replace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import clip_grad_norm_

from labutils import atomic as lab_atomic
from labutils import evaluation as lab_evaluation
from labutils.checkpoint import capture_rng_state, latest_checkpoint, restore_rng_state
from labutils.data import MEAN, STD, set_position
"""
