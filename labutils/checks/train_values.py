"""train_one_epoch, the checks on the numbers: what it returned, the gradient each step applied (PyTorch's gradient
of the mean cross-entropy, at the loop's own parameters), clipping, the logged norms and the mean loss.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..trace import global_norm
from .report import Failure, NotJudged, described, number_problem
from .train_run import TrainView, all_finite
from .world import close_enough


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1).double() for t in tensors])


def _rel(a, b) -> float:
    """Relative distance of two lists of tensors, taken as one long vector."""
    a, b = _flat(a), _flat(b)
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def _clipped(grads, max_norm: float):
    norm = global_norm(grads)
    return [g * min(1.0, max_norm / (norm + 1e-6)) for g in grads]  # exactly clip_grad_norm_'s formula


def stage_return_value(v: TrainView):
    if not v.run.complete:
        return NotJudged("the loop did not finish the epoch")
    result, wants_norms = v.run.result, v.exercise in ("clipping", "accumulation", "amp")
    if not wants_norms:
        problem = number_problem(result, "the returned mean loss")
        return [Failure("return_value", f"{problem}. train_one_epoch returns the epoch's mean training loss.")] \
            if problem else []
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        return [Failure("return_value", f"train_one_epoch returned {described(result)}; the contract returns a pair: "
                                        "(mean loss, list of pre-clip norms).")]
    problem = number_problem(result[0], "the mean loss (first returned value)")
    if problem:
        return [Failure("return_value", problem + ".")]
    norms = result[1]  # what is wrong with them costs the norms property only
    if not isinstance(norms, (list, tuple)):
        problem = f"the norms (second returned value) are a {type(norms).__name__}, not a list of floats"
    else:
        problem = next((number_problem(n, f"norm {i + 1} of the returned list") for i, n in enumerate(norms)
                        if number_problem(n, "")), None)
    if problem is None and _norm_steps(v, norms) is None:
        problem = (f"{len(norms)} norms were returned for {len(v.steps)} optimizer steps: append one norm (the value "
                   f"clip_grad_norm_ returns) per optimizer step")
    return [Failure("norms", problem + ".")] if problem else []


def _norm_steps(v: TrainView, norms) -> list[int] | None:
    """The step each returned norm belongs to: one per step, or one per step the scaler did not skip (logging a
    skipped step's inf norm and leaving it out are both right); None if the count fits neither."""
    if len(norms) == len(v.steps):
        return list(range(1, len(v.steps) + 1))
    if v.skipped and len(norms) == len(v.steps) - len(v.skipped):
        return [k for k in range(1, len(v.steps) + 1) if k not in v.skipped]
    return None


def _clean_steps(v: TrainView) -> list[int]:
    """The optimizer steps whose micro-batches ran cleanly: known batches, each backward before the step, gradients
    fresh at the first backward and accumulated after it. The gradient is judged on these, so a mistake in the order
    or in clearing (its own property) does not hide whether the loss and its gradient are right."""
    clean = []
    for k, window in v.windows.items():
        event = v.step_event(k)
        if k in v.skipped or not all_finite([*event.data["params"], *event.data["raw"].values()]):
            continue  # an overflowing step (the scaler's to skip), or weights that hold an earlier one's inf/nan
        if not window or any(m.batch is None or m.backward is None or m.backward > v.steps[k - 1] for m in window):
            continue
        if not v.events[window[0].backward].info["fresh"]:
            continue
        if any(v.events[m.backward].info["fresh"] for m in window[1:]):
            continue
        if any(e.kind == "zero_grad" for e in v.events[max(m.backward for m in window): v.steps[k - 1]]):
            continue  # the gradients were wiped before the step: the zero_grad property's mistake
        clean.append(k)
    return clean


def _clips_inside(v: TrainView, k: int) -> list[int]:
    """The clip_grad_norm_ calls between the first and the last backward of step ``k``'s window."""
    window = v.windows[k]
    first, last = window[0].backward, max(m.backward for m in window)
    return [i for i in range(first, last) if v.events[i].kind == "clip"]


def _added(v: TrainView, m) -> list:
    """What micro-batch ``m``'s backward added to ``.grad`` (its gradient, as the loop scaled it)."""
    event = v.events[m.backward]
    before, after = event.data.get("before", {}), event.data.get("after", {})
    params = list(v.case.model.parameters())
    return [after[i] - before.get(i, 0) if i in after else torch.zeros_like(p) for i, p in enumerate(params)]


def _divided_per_micro_batch(v: TrainView, k: int) -> float | None:
    """The 1/window factor every micro-batch of step ``k`` was scaled by, read from what each backward added (apart
    from anything the loop did to ``.grad`` between them); None when no accepted factor fits them all."""
    window = v.windows[k]
    if not all(v.events[m.backward].info.get("into_grad") for m in window):
        return None
    return next((f for f in v.factors(k) if all(
        _rel(_added(v, m), [f * g for g in v.ref(m)[0]]) <= v.tol for m in window)), None)


def stage_gradient(v: TrainView):
    clean = _clean_steps(v)
    if not clean:
        return NotJudged("no optimizer step had a clean window (a known batch, loss.backward() before the step, "
                         "fresh gradients)" if v.steps else "optimizer.step() never ran")
    found = []  # a mistake in the division alone: the steps are still judged on the loop's own gradient
    for k in clean:
        window = v.windows[k]
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
        inside = _clips_inside(v, k) if len(window) > 1 else []
        if inside and _divided_per_micro_batch(v, k) is not None:  # each micro-batch right: the clip is the mistake
            j = next(n for n, m in enumerate(window, start=1) if m.backward > inside[0]) - 1
            return [Failure("clip", f"clip_grad_norm_ ran after micro-batch {j} of step {k}, before the window's "
                            "other micro-batches were added: each clip rescaled a partial sum, so the step's "
                            "gradient is no longer the window's mean, clipped. Clip once per optimizer step, after "
                            "the window's last backward.", k, v.beside(k, inside[0]))]
        if v.exercise == "accumulation" and len(window) > 1 and _rel(pre, v.combined(k, 1.0)) <= v.tol:
            v.accepted[k] = 1.0  # the loop's own gradient: its clipping and norms are judged on it, apart
            found = found or [Failure("loss_divided", f"the gradient at step {k} is {len(window)}x the mean over its "
                                      f"{len(window)} micro-batches: neither the loss nor the gradients were divided "
                                      "by accum_steps, so every step acted as if the learning rate were that much "
                                      "larger. Use (loss / accum_steps).backward().", k)]
            continue
        if v.exercise == "accumulation":
            return found or [Failure("loss_divided", f"the gradient at step {k} is not the mean over its "
                                     f"micro-batches (relative difference {_rel(pre, expected):.2g}): divide each "
                                     "micro-batch's loss by accum_steps before backward().", k)]
        return [Failure("gradient", f"the gradient at step {k} is not the gradient of the mean cross-entropy over "
                        f"the step's batch (relative difference {_rel(pre, expected):.2g}). Compute "
                        "loss = F.cross_entropy(model(x), y) on the raw logits and call loss.backward() on it.", k)]
    if found:
        return found
    if v.case.max_norm is None:  # no clipping in this exercise: what backward produced must reach the step untouched
        for k in clean:
            if _rel(v.applied(k), v.pre_clip(k)) > v.tol:
                return [Failure("gradient", f"the gradients changed between loss.backward() and optimizer.step() at "
                                f"step {k}: this exercise applies them as they are.", k, v.beside(k))]
    return []


def stage_clip(v: TrainView):
    max_norm, clips = v.case.max_norm, [i for i, e in enumerate(v.events) if e.kind == "clip"]
    if not v.accepted:
        return NotJudged("no step's gradient could be checked, so its clipping cannot be (fix the gradient first)")
    for k in v.accepted:
        window = v.windows[k]
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
        measured = [v.events[i].info["norm_before"] for i in between]
        if measured and not close_enough(measured[0], norm, v.tol):  # clip_grad_norm_ measured another norm than the L2
            kinds = {"inf": _p_norm(wanted, float("inf")), "1": _p_norm(wanted, 1.0)}
            kind = next((f"norm_type={t} (the {'largest single value' if t == 'inf' else 'sum of absolute values'})"
                         for t, value in kinds.items() if close_enough(measured[0], value, v.tol)), "another norm_type")
            return [Failure("clip", f"clip_grad_norm_ measured the gradient at step {k} as {measured[0]:.4g}, but "
                            f"its global L2 norm is {norm:.4g}: it was called with {kind}. The contract clips the "
                            "global L2 norm: clip_grad_norm_(model.parameters(), max_norm), whose norm_type is 2 by "
                            "default.", k, v.beside(k, between[0]))]
        got = global_norm(applied)
        if got < norm and _rel(applied, [g * (got / norm) for g in wanted]) <= v.tol:  # clipped, at another threshold
            return [Failure("clip", f"train_one_epoch clipped at {got:.3g}, not at the max_norm={max_norm:g} it was "
                            "given: pass max_norm to clip_grad_norm_(model.parameters(), max_norm).", k)]
        return [Failure("clip", f"the gradient applied at step {k} has norm {global_norm(applied):.4g}; clipping the "
                        f"step's gradient (norm {norm:.4g}) to max_norm={max_norm:g} gives {min(norm, max_norm):.4g}. "
                        "Clip once, after backward, with clip_grad_norm_(model.parameters(), max_norm).", k,
                        v.beside(k, between[0] if between else step_at))]
    return []


def _p_norm(grads, p: float) -> float:
    """The norm clip_grad_norm_ computes with ``norm_type=p`` (all gradients taken together)."""
    return float(torch.linalg.vector_norm(_flat(grads), p))


def _traced_norm(v: TrainView, k: int) -> float | None:
    """What clip_grad_norm_ measured (and returned) for step ``k``: its call after the window's last backward."""
    last, step_at = max(m.backward for m in v.windows[k]), v.steps[k - 1]
    return _clip_norm(v, range(last, step_at))


def _clip_before_backward_norm(v: TrainView, k: int) -> float | None:
    """What clip_grad_norm_ returned for step ``k`` when it ran before the window's last backward, inside the step:
    it measured no gradient of this step (the clip property says so), and a loop that logs what it returned logs
    as the contract says."""
    last, start = max(m.backward for m in v.windows[k]), (v.steps[k - 2] + 1 if k > 1 else 0)
    return _clip_norm(v, range(last - 1, start - 1, -1))


def _clip_norm(v: TrainView, events: range) -> float | None:
    """What the first clip_grad_norm_ call among ``events`` (indices, in the order to search) measured and returned."""
    return next((v.events[i].info["norm_before"] for i in events if v.events[i].kind == "clip"), None)


def _norms_of_clips_inside(v: TrainView, norms: list[float]):
    """Clipping inside the window (the clip property's mistake) leaves no single pre-clip gradient per step: each
    returned norm is judged as what clip_grad_norm_ returned in its step, the value the contract has the loop log."""
    steps = _norm_steps(v, norms)
    if steps is None:
        return NotJudged("the number of returned norms fits no count of steps")
    for k, got in zip(steps, norms):
        window = v.windows[k]
        start, step_at = window[0].backward, v.steps[k - 1]
        measured = [v.events[i].info["norm_before"] for i in range(start, step_at) if v.events[i].kind == "clip"]
        if not measured:
            return NotJudged(f"clip_grad_norm_ never ran in step {k}, so there is no norm it returned to compare")
        if not any(close_enough(float(got), m, v.tol) for m in measured):
            return [Failure("norms", f"the norm returned for step {k} is {float(got):.4g}, none of the norms "
                            f"clip_grad_norm_ returned in that step ({', '.join(f'{m:.4g}' for m in measured)}): "
                            "append what clip_grad_norm_ returns, once per optimizer step.", k)]
    return []


def stage_norms(v: TrainView):
    if not v.run.complete:
        return NotJudged("the loop did not finish the epoch")
    norms = _returned(v, 1)
    norms = [_loss_value(n) for n in norms] if isinstance(norms, (list, tuple)) else [None]
    if None in norms:
        return NotJudged("the returned norms are not a list of numbers")
    if not v.accepted:
        if any(len(v.windows[k]) > 1 and _clips_inside(v, k) for k in v.windows):
            return _norms_of_clips_inside(v, norms)
        return NotJudged("no step's gradient could be checked, so its norm cannot be (fix the gradient first)")
    for k, got in zip(_norm_steps(v, norms) or range(1, len(norms) + 1), norms):  # a wrong count: return_value's
        if k not in v.accepted:
            continue
        want, traced = global_norm(v.combined(k, v.accepted[k])), _traced_norm(v, k)
        if close_enough(float(got), want, v.tol):
            continue
        if traced is not None and close_enough(float(got), traced, v.tol) and not close_enough(traced, want, v.tol):
            continue  # what clip_grad_norm_ returned, measured with another norm_type: the clip property's mistake
        early = _clip_before_backward_norm(v, k) if traced is None else None
        if early is not None and close_enough(float(got), early, v.tol):
            continue  # what clip_grad_norm_ returned before this step's backward: the clip property's mistake
        if close_enough(float(got), min(want, v.case.max_norm), v.tol):
            msg = (f"the norm returned for step {k} is {float(got):.4g}, the norm after clipping (max_norm="
                   f"{v.case.max_norm:g}); the contract logs the pre-clip norm {want:.4g}: keep the value "
                   "clip_grad_norm_ returns.")
        elif v.case.scaler is not None and close_enough(float(got), want * v.scale_used(k), v.tol):
            msg = (f"the norm returned for step {k} is {float(got):.4g}, the norm of the scaled gradients: log the "
                   "norm after scaler.unscale_(optimizer).")
        else:
            msg = (f"the norm returned for step {k} is {float(got):.4g}, but the step's gradient had norm {want:.4g} "
                   "before clipping: append what clip_grad_norm_ returns, once per optimizer step.")
        return [Failure("norms", msg, k)]
    return []


def _returned(v: TrainView, index: int):
    """Part ``index`` of the returned pair (the mean loss, the norms), or the whole result when no pair is due; None
    when the result has no such part (return_value says why)."""
    result = v.run.result
    if v.exercise not in ("clipping", "accumulation", "amp"):
        return result if index == 0 else None
    return result[index] if isinstance(result, (tuple, list)) and len(result) == 2 else None


def _loss_value(value) -> float | None:
    """A returned number (the mean loss, a norm), also when it came back as a one-element tensor: its value is judged
    even though its type is return_value's mistake (one run reports both)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().float().cpu())
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else None


def stage_loss_graph(v: TrainView):
    """Nothing keeps every batch's graph alive (a sum of loss tensors, a list of them): at each training forward,
    the graphs of the earlier ones are counted (:class:`labutils.trace.Tracer`); a loop that drops them keeps one or
    two at most."""
    if len(v.micros) < 4:
        return NotJudged("fewer than four training forwards were observed, too few to see graphs pile up")
    for j, m in enumerate(v.micros[3:], start=3):
        alive = v.events[m.forward].info.get("graphs", 0)
        if alive >= j:
            return [Failure("loss_graph", f"at the forward of batch {v.events[m.forward].info.get('batch', j + 1)}, "
                            f"the graphs of all {alive} earlier batches were still alive: the loop keeps each batch's "
                            "loss tensor (total += loss, or a list of losses), and each holds its batch's whole "
                            "graph until the epoch ends, so memory grows with every batch. Add loss.item(), a "
                            "float, instead.", m.step, v.beside(m.step, m.forward))]
    return []


def _softmax_mean(v: TrainView, sizes: list[int]) -> float:
    """The per-sample mean of cross-entropy on softmax probabilities: what a loop that puts a softmax before
    ``F.cross_entropy`` averages. Its averaging is right then; the loss is wrong, and :func:`stage_gradient` says so
    (``[softmax]``), so the mean is not blamed for it."""
    losses = [v.ref(m, softmax=True)[1] for m in v.micros]
    return sum(n * loss for n, loss in zip(sizes, losses)) / sum(sizes)


def stage_mean_loss(v: TrainView):
    if not v.run.complete:
        return NotJudged("the loop did not finish the epoch")
    if not v.micros or any(m.batch is None for m in v.micros):
        return NotJudged("no training forward on the loader's batches was observed, so there is no loss to average")
    if not v.steps:  # the mean of losses nothing was trained on is no training loss
        return NotJudged("optimizer.step() never ran, and the mean training loss is judged on a loop that trains",
                         needs=("order",))
    value = _loss_value(_returned(v, 0))
    if value is None:
        return NotJudged("the returned mean loss is not a number")
    sizes = [len(v.case.batches[m.batch][1]) for m in v.micros]
    losses = [v.ref(m)[1] for m in v.micros]
    want = sum(n * loss for n, loss in zip(sizes, losses)) / sum(sizes)
    if not math.isfinite(want):
        poisoned = next((k for k in v.windows if not all_finite(v.step_event(k).data["params"])), len(v.steps) + 1)
        return NotJudged(f"the weights held inf/nan from step {poisoned} on, so every loss after it is nan and the "
                         "mean cannot be checked (an earlier step applied an overflowing gradient: fix that first)")
    rtol = v.tol / 10
    if close_enough(value, want, rtol) or close_enough(value, _softmax_mean(v, sizes), rtol):
        return []  # the per-sample mean of the loss the loop computed: a softmax before it is the gradient's mistake
    per_batch = sum(losses) / len(losses)
    if close_enough(value, per_batch, rtol):
        return [Failure("per_sample", f"the returned mean loss {value:.4f} is the average of the per-batch losses; "
                        f"the per-sample average is {want:.4f}. They differ because the last batch has only "
                        f"{sizes[-1]} samples. Add loss.item() * len(y) per batch and divide by the number of "
                        "samples.")]
    kept = [(n, loss) for m, n, loss in zip(v.micros, sizes, losses) if m.step not in v.skipped]
    if v.skipped and kept and close_enough(value, sum(n * loss for n, loss in kept) / sum(n for n, _ in kept), rtol):
        k = min(v.skipped)
        return [Failure("mean_loss", f"the returned mean loss {value:.4f} leaves out the loss of step {k}, which "
                        f"scaler.step() skipped; the per-sample average over the epoch is {want:.4f}. That loss was "
                        "computed on real data, so it counts: add loss.item() * len(y) for every batch.", k)]
    if v.case.accum_steps > 1 and close_enough(value, want / v.case.accum_steps, rtol):
        return [Failure("mean_loss", f"the returned mean loss {value:.4f} is the loss divided by accum_steps; report "
                        f"the unscaled loss ({want:.4f}): add up loss.item() before dividing it for backward.")]
    return [Failure("mean_loss", f"the returned mean loss is {value:.4f}; the per-sample average of the training loss "
                    f"over the epoch is {want:.4f}. Add loss.item() * len(y) per batch and divide by the number of "
                    "samples.")]
