"""train_one_epoch, the checks for mixed precision (05_amp): the forward under autocast, and the GradScaler used in
the canonical order (scale, backward, unscale_ before clipping, scaler.step, scaler.update).
"""

from __future__ import annotations

from .report import Failure, NotJudged
from .train_run import TrainView, all_finite
from .world import OVERFLOW_AT


def stage_autocast(v: TrainView):
    if not v.micros:
        return NotJudged("no training forward pass was observed")
    if not any(m.backward is not None and m.step is not None for m in v.micros):  # a forward alone trains nothing
        return NotJudged("no forward was followed by backward and an optimizer step, and autocast is judged on a "
                         "loop that trains", needs=("order",))
    for m in v.micros:
        dtype = v.events[m.forward].info["autocast"]
        if dtype != v.case.amp_dtype:
            seen = "without torch.autocast" if dtype is None else f"under autocast {dtype}"
            return [Failure("autocast", f"the forward of batch {v.events[m.forward].info.get('batch', '?')} ran "
                            f"{seen}, with amp_dtype={v.case.amp_dtype}. Wrap forward and loss in "
                            "torch.autocast(device_type, dtype=amp_dtype).", m.step)]
    return []


def stage_scale(v: TrainView):
    if not any(m.backward is not None for m in v.micros):
        return NotJudged("loss.backward() never ran")
    for m in v.micros:
        if m.backward is not None and not any(e.kind == "scale" for e in v.events[m.forward: m.backward]):
            step = m.step or len(v.steps) + 1
            return [Failure("scale", f"loss.backward() ran on the unscaled loss at step {step} while a GradScaler is "
                            "in use, so scaler.unscale_ would divide true gradients by the scale. Call "
                            "scaler.scale(loss).backward().", step, v.beside(m.step, m.backward))]
    return _scale_effect(v)


def _scale_effect(v: TrainView):
    """The scaler did its work, seen in its effects rather than its calls: every scale() multiplied by the scale a
    GradScaler has there (the check's at the first step, halved by each update() after an overflowing step), and the
    scaled loss that the check made overflow (scale() returned inf) reached backward: that step's gradients were
    inf/nan and scaler.step skipped it."""
    expected, skipped_last = v.case.init_scale, False
    scales = []
    for i, e in enumerate(v.events):
        if e.kind == "step":  # an overflowing step (its gradients inf/nan): the next update() halves the scale
            skipped_last = bool(e.info.get("skipped")) or not all_finite(e.data["raw"].values())
        elif e.kind == "scaler_update" and skipped_last:
            expected, skipped_last = expected * 0.5, False
        elif e.kind == "scale":
            scales.append(i)
            if expected is not None and e.info["scale"] != expected:
                step = e.step + 1
                return [Failure("scale", f"scaler.scale(loss) scaled by {e.info['scale']:g} at step {step}, where the "
                                f"GradScaler it was given scales by {expected:g}: leave the scaler's scale to it "
                                "(scaler.update() sets it).", step, v.beside(step if step <= len(v.steps) else None, i))]
    if len(scales) >= OVERFLOW_AT and v.run.complete:
        at = v.events[scales[OVERFLOW_AT - 1]].step + 1  # the step of the scale() call the check made overflow
        if at <= len(v.steps) and at not in v.skipped and all_finite(v.step_event(at).data["raw"].values()):
            return [Failure("scale", f"at step {at} the check's scaler.scale(loss) returned inf (an overflow, as fp16 "
                            "meets), yet the gradients backward produced were finite: backward did not run on what "
                            "scaler.scale(loss) returned. Call scaler.scale(loss).backward().", at,
                            v.beside(at, scales[OVERFLOW_AT - 1]))]
    return []


def stage_unscale(v: TrainView):
    if not v.steps:
        return NotJudged("no optimizer step was observed")
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


def stage_scaler_step(v: TrainView):
    if not v.steps:
        return NotJudged("no optimizer step was observed")
    for k in v.windows:
        event = v.step_event(k)
        if not event.info["via_scaler"] and not all_finite(event.data["grads"]):
            return [Failure("scaler_step", f"optimizer.step() was called directly at step {k}, whose scaled loss "
                            "overflowed: it wrote the inf/nan gradients into the weights, which scaler.step(optimizer) "
                            "would have skipped. Call scaler.step(optimizer) instead.", k,
                            v.beside(k, v.steps[k - 1]))]
    for k in v.windows:
        if not v.step_event(k).info["via_scaler"]:
            return [Failure("scaler_step", f"optimizer.step() was called directly at step {k} while a GradScaler is in "
                            "use: that skips the scaler's inf/nan check, so an overflowing step would write inf into "
                            "the weights. Call scaler.step(optimizer) instead.", k, v.beside(k, v.steps[k - 1]))]
    return []


def stage_scaler_update(v: TrainView):
    if not v.steps:
        return NotJudged("no optimizer step was observed")
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
