"""train_one_epoch, the checks on what ran when: train mode, autograd on, every batch once, backward before step,
zero_grad once per step, accumulation windows, and the scheduler stepped once per optimizer step.

Each check takes a :class:`TrainView` and returns its failures ([] = passed, None = cannot judge).
"""

from __future__ import annotations

from collections import Counter

import torch

from .report import Failure, NotJudged, shown
from .train_run import TrainView


def _no_forward(v: TrainView) -> NotJudged | None:
    return None if v.micros else NotJudged("no training forward pass (autograd on) was observed")


def _no_step(v: TrainView) -> NotJudged | None:
    return None if v.steps else NotJudged("optimizer.step() never ran")


def stage_train_mode(v: TrainView):
    if _no_forward(v):
        return _no_forward(v)
    if not any(m.backward is not None and m.step is not None for m in v.micros):  # a forward alone trains nothing
        return NotJudged("no forward was followed by loss.backward() and optimizer.step(), and the mode is judged on "
                         "a loop that trains", needs=("order",))
    for m in v.micros:
        event = v.events[m.forward]
        if event.info["training"] is False:
            return [Failure("train_mode", f"the forward of batch {event.info.get('batch', '?')} ran in eval mode: "
                            "the model came in eval mode (as after an evaluation) and the loop never switched it "
                            "back, so dropout and BatchNorm would be off while training. Call model.train() at the "
                            "start of train_one_epoch.", m.step, v.beside(m.step, m.forward))]
        if event.info["training"] is not True:
            return [Failure("train_mode", f"the forward of batch {event.info.get('batch', '?')} ran with some of "
                            "the model's modules still in eval mode (a training flag set by hand changes only that "
                            "one module), so their dropout and BatchNorm would be off while training. Call "
                            "model.train(), which sets every module.", m.step, v.beside(m.step, m.forward))]
    return []


def stage_grad_enabled(v: TrainView):
    if not v.forwards:
        return NotJudged("no forward pass was observed")
    trained = {m.batch for m in v.micros}
    for i, batch in v.forwards:
        event = v.events[i]
        if not event.info["grad"] and batch not in trained:
            how = "inference_mode" if event.info["inference"] else "torch.no_grad()"
            return [Failure("grad_enabled", f"the forward of batch {event.info.get('batch', '?')} ran under {how}, "
                            "so the loss had no graph to backpropagate through. Run the training forward with "
                            "autograd on (no no_grad/inference_mode around it).", None, v.beside(None, i))]
    return []


def stage_device(v: TrainView):
    """Every tensor the loop moved went to the ``device`` it was given (a loop that hard-codes "cpu" or "cuda" shows
    when it is given torch.device("cpu:0"))."""
    if not v.forwards:
        return NotJudged("no forward pass was observed")
    if not v.run.moves and not v.run.complete:
        return NotJudged("the loop did not finish, and moved no batch before it stopped")
    if not v.run.moves:
        return [Failure("device", f"train_one_epoch never moved a batch to the device={shown(v.case.device)} it was "
                        "given: move each batch with x.to(device), y.to(device) (on a GPU the model would get CPU "
                        "tensors).")]
    wanted = torch.device(v.case.device)
    other = next((d for d in v.run.moves if d != wanted), None)
    if other is not None:
        return [Failure("device", f"train_one_epoch moved tensors to {str(other)!r}, not to the device="
                        f"{shown(v.case.device)} it was given: move each batch with x.to(device), y.to(device).")]
    return []


def stage_batches(v: TrainView):
    if _no_forward(v):
        return _no_forward(v)
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


def stage_order(v: TrainView):
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
            done = ("forward and backward, but no optimizer.step() followed" if m.backward is not None else
                    "a training forward, but neither backward nor optimizer.step() followed")
            return [Failure("order", f"batch {v.events[m.forward].info.get('batch')} went through {done}, so it never "
                            "changed the weights. Step after every batch's backward.", None,
                            v.beside(None, m.forward))]
    return _no_step(v) or []


def stage_zero_grad(v: TrainView):
    if _no_step(v):
        return _no_step(v)
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
        if not v.events[first].info["fresh"] and k - 1 in v.skipped:
            return [Failure("zero_grad", f"at step {k}, loss.backward() added the new gradients to the inf/nan ones "
                            f"left by step {k - 1}, which scaler.step() skipped: the gradients must be cleared every "
                            "step, skipped or not, or every later step is skipped too. Call optimizer.zero_grad() "
                            "whatever scaler.step() did.", k, v.beside(k, first))]
        if not v.events[first].info["fresh"]:
            return [Failure("zero_grad", f"at step {k}, loss.backward() added the new gradients to the ones still in "
                            f".grad from step {k - 1}: nothing cleared them, so the update used the sum of every "
                            "batch so far. Call optimizer.zero_grad() once per step (at the top of the step or right "
                            "after optimizer.step()).", k, v.beside(k, first))]
    return []


def stage_accumulation(v: TrainView):
    if _no_step(v):
        return _no_step(v)
    accum, sizes = v.case.accum_steps, [len(w) for w in v.windows.values()]
    # a dropped trailing group is its own property (stage_trailing): judge the windows of the steps that were taken
    expected = _windows(len(v.micros) - len(v.trailing), accum) if v.trailing else v.case.windows
    for k, window in v.windows.items():
        for j, m in enumerate(window[1:], start=2):
            if v.events[m.backward].info["fresh"]:
                return [Failure("accumulation", f"the gradients were cleared before micro-batch {j} of step {k}, so "
                                "only the last micro-batch of the window counted. Clear once per optimizer step, not "
                                "per micro-batch.", k, v.beside(k, m.backward))]
    if not v.run.complete:
        return []
    if accum > 1 and sizes and all(s == 1 for s in sizes) and len(sizes) > len(expected):
        return [Failure("accumulation", f"optimizer.step() ran after every micro-batch ({len(sizes)} steps for "
                        f"{len(v.micros)} micro-batches): with accum_steps={accum} it should run once every {accum} "
                        f"micro-batches ({len(expected)} steps). Step only when (i + 1) % accum_steps == 0 or at the "
                        "last batch.", 1, v.beside(1))]
    if sizes != expected:
        n = len(v.micros)
        as_if = next((a for a in range(1, len(v.case.batches) + 1) if a != accum and sizes == _windows(n, a)), None)
        if as_if is not None:
            return [Failure("accumulation", f"train_one_epoch stepped every {as_if} micro-batch(es), as if accum_steps="
                            f"{as_if}, not the accum_steps={accum} it was given: step when (i + 1) % accum_steps == 0 "
                            "(or at the last batch).", 1, v.beside(1))]
    for k, (size, want) in enumerate(zip(sizes, expected), start=1):
        if size != want:
            return [Failure("accumulation", f"optimizer step {k} took {size} micro-batch(es); with accum_steps="
                            f"{accum} it should take {want} (only the last group may be smaller).", k, v.beside(k))]
    if len(sizes) != len(expected):
        return [Failure("accumulation", f"{len(sizes)} optimizer steps for {len(v.micros)} micro-batches; with "
                        f"accum_steps={accum} there should be {len(expected)}.")]
    return []


def stage_trailing(v: TrainView):
    """Every micro-batch reached an optimizer step: the last, partial group too."""
    if not v.run.complete:
        return NotJudged("the loop did not finish the epoch")
    if _no_step(v):
        return _no_step(v)
    if v.trailing:
        first = v.events[v.trailing[0].forward].info.get("batch")
        return [Failure("trailing", f"the last {len(v.trailing)} micro-batch(es) (from batch {first}) went "
                        "through backward but no optimizer.step() followed: the trailing partial group was dropped, "
                        "so its data never reached the weights. Also step after the last micro-batch (when "
                        "i + 1 == len(loader)).", None, v.beside(None, v.trailing[0].forward))]
    return []


def _windows(n: int, accum: int) -> list[int]:
    return [min(accum, n - start) for start in range(0, n, accum)]


def stage_scheduler(v: TrainView):
    if _no_step(v):
        return _no_step(v)
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
    early = bool(scheds) and scheds[0] < v.steps[0]  # stepped before the optimizer: its own property (order)
    for k in range(1, n_steps + 1):
        if early:  # count the calls that lead each optimizer step instead of those that follow it
            start, end = (v.steps[k - 2] if k > 1 else -1), v.steps[k - 1]
        else:
            start, end = v.steps[k - 1], (v.steps[k] if k < n_steps else len(v.events))
        between = [i for i in scheds if start < i < end]
        if len(between) > 1:
            return [Failure("scheduler", f"scheduler.step() ran {len(between)} times after optimizer step {k}: step "
                            "it exactly once per optimizer step.", k, v.beside(k, between[1]))]
        if not between and k not in v.skipped and (k < n_steps or v.run.complete):  # a skipped step may go unscheduled
            return [Failure("scheduler", f"scheduler.step() did not run after optimizer step {k}: call it right "
                            "after every optimizer.step().", k, v.beside(k, v.steps[k - 1]))]
    return []


def stage_scheduler_order(v: TrainView):
    """scheduler.step() follows optimizer.step(): none before the first step (judged apart from how often it runs)."""
    scheds = [i for i, e in enumerate(v.events) if e.kind == "scheduler"]
    if _no_step(v) or not scheds:
        return _no_step(v) or NotJudged("scheduler.step() never ran")
    if len(scheds) == len(v.micros) != len(v.steps):
        return NotJudged("scheduler.step() ran once per micro-batch, so its place beside optimizer.step() cannot be "
                         "told; fix how often it runs first")
    before = [i for i in scheds if i < v.steps[0]]
    if before:
        return [Failure("scheduler_order", "scheduler.step() ran before optimizer.step() at step 1: the first update "
                        "already used the schedule's second learning rate, and every step after it was one ahead. Call "
                        "scheduler.step() right after optimizer.step().", 1, v.beside(1, before[0]))]
    return []
