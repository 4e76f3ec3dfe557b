"""check_evaluate (01_baseline): eval mode, no autograd, per-sample averages over an uneven last batch, and the
model's mode restored afterwards.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import exercises
from ..data import make_loader
from ..trace import Event, Tracer, mark_batches, modes
from . import on_gpu
from .calling import TracedCall, could_not_check, isolated, judge_call, new_report, traced_call
from .report import CheckReport, Failure, NotJudged, as_given, beside, described, number_problem, shown
from .world import (BATCH, DEVICE, MAX_EVENTS, N_EVAL, close_enough, crafted_labels, random_images, run_seed,
                    tiny_model, which_batch)


@dataclass
class EvalView:
    model: torch.nn.Module
    reference: torch.nn.Module
    batches: list
    run: TracedCall
    training_after: bool | None = True  # every module in train mode after the call (None: some of each)
    device: str = DEVICE

    @property
    def forwards(self) -> list[tuple[int, Event]]:
        return [(i, e) for i, e in enumerate(self.run.events) if e.kind == "forward"]


def _eval_case(seed: int):
    """The model and loader of one run: how many images (3 full batches and a short last one) and which of the full
    batches' labels the model gets wrong are drawn from ``seed`` too, so even the accuracy cannot be known in advance
    (the last batch is always all wrong: a per-batch average differs from the per-sample one)."""
    torch.manual_seed(seed)
    model = tiny_model(dropout=0.5)  # dropout: forgetting model.eval() changes the numbers
    draw = torch.Generator().manual_seed(seed)
    n = N_EVAL + int(torch.randint(0, BATCH - 1, (), generator=draw))  # a last batch of 1 to 7
    images = random_images(n, seed)
    labels = crafted_labels(model, images, n % BATCH)
    wrong = torch.randperm(n - n % BATCH, generator=draw)[: int(torch.randint(0, BATCH + 1, (), generator=draw))]
    labels[wrong] = (labels[wrong] + 1 + torch.randint(0, 9, (len(wrong),), generator=draw)) % 10
    loader = mark_batches(make_loader(images, labels, BATCH, shuffle=False))
    return model, copy.deepcopy(model), loader




def _gpu_case(folder):
    """:func:`_eval_case` on the GPU, in train mode (evaluate must switch it)."""
    model, _, loader = _eval_case(run_seed())
    model.to(on_gpu.GPU).train()
    return (model, loader, on_gpu.GPU), on_gpu.tracer(model, exercise="evaluate")


def run_evaluate(fn, seed: int, device: str = DEVICE) -> EvalView:
    model, reference, loader = _eval_case(seed)
    batches = list(loader)
    model.train()  # evaluate is called in the middle of training
    tracer = Tracer(model, forbidden=exercises.get("evaluate").forbidden, max_events=MAX_EVENTS, devices=True,
                    outputs=True)
    run = traced_call(fn, (model, loader, device), tracer)
    view = EvalView(model, reference, batches, run, modes(model), device)
    for _, event in view.forwards:
        j = which_batch(event.data["x"], batches)
        if j is not None:
            event.info["batch"] = f"{j + 1}/{len(batches)}"
    return view


_EVAL_ORDER = ["model.eval()", "forward batch 1 (eval mode, no_grad)", "...", "forward last batch", "model.train()"]


def _eval_beside(v: EvalView, mark: int | None) -> str:
    return beside(v.run.events, 0, len(v.run.events), _EVAL_ORDER, mark, "your evaluate")


def _ev_return_value(v: EvalView):
    if not v.run.complete:
        return NotJudged("evaluate did not return")
    r = v.run.result
    if not (isinstance(r, (tuple, list)) and len(r) == 2):
        return [Failure("return_value", f"evaluate returned {described(r)}; the contract returns a pair "
                        "(mean loss, accuracy).")]
    problem = number_problem(r[0], "the loss (first value)") or number_problem(r[1], "the accuracy (second value)")
    if problem:
        return [Failure("return_value", problem + ".")]
    out_of_range = _out_of_range(v, float(r[0]), float(r[1])) if not 0.0 <= r[1] <= 1.0 else None
    return [out_of_range] if out_of_range else []


def _out_of_range(v: EvalView, loss: float, accuracy: float) -> Failure | None:
    """An accuracy outside [0, 1] as the return value's mistake (the pair swapped), or as the accuracy's where the
    numbers cannot be judged; None where the accuracy's own check judges it (a percentage, a wrong fraction): one
    mistake, said once."""
    if _numbers(v) is not None:
        return Failure("accuracy", f"the accuracy {accuracy:.4g} is outside [0, 1]: return correct / n_samples.")
    outputs = _outputs(v)
    want_loss = _means(outputs, lambda o, y: F.cross_entropy(o, y).item())[0]
    want_acc = _means(outputs, lambda o, y: (o.argmax(dim=1) == y).float().mean().item())[0]
    if close_enough(loss, want_acc, 1e-6) and close_enough(accuracy, want_loss, 1e-4):
        return Failure("return_value", f"evaluate returned ({loss:.4f}, {accuracy:.4f}), the accuracy and the loss "
                       "swapped: the contract returns (loss, accuracy), the loss first.")
    return None


def _first_forward_with(v: EvalView, wrong, prop: str, what_went_wrong) -> list[Failure]:
    """The property fails at the first forward for whose traced info ``wrong(info)`` holds (train mode, autograd);
    ``what_went_wrong(info)`` says how it ran."""
    for i, e in v.forwards:
        if wrong(e.info):
            return [Failure(prop, f"the forward of batch {e.info.get('batch', '?')} {what_went_wrong(e.info)}", None,
                            _eval_beside(v, i))]
    return []


def _unevaluated(v: EvalView) -> list[int]:
    """The batches of the loader (from 1) that no forward ran."""
    seen = {which_batch(e.data["x"], v.batches) for _, e in v.forwards}
    return [j + 1 for j in range(len(v.batches)) if j not in seen]


def _whole_loader(v: EvalView) -> NotJudged | None:
    """The modes are evidence of an evaluation only when the whole loader went through the model: a forward of one
    made-up image in eval mode is no evaluation (the batches stage says which batch was left out)."""
    missing = _unevaluated(v)
    if v.forwards and missing:
        return NotJudged(f"evaluate ran {len(v.batches) - len(missing)} of the loader's {len(v.batches)} batches through "
                         "the model, and how it runs them is judged on an evaluation of every batch",
                         needs=("batches",))
    return None


def _ev_batches(v: EvalView):
    if not v.forwards:
        return NotJudged("evaluate never called the model")
    missing = _unevaluated(v)
    if missing and v.run.complete:
        return [Failure("batches", f"batch {missing[0]} of {len(v.batches)} never went through the model (the last "
                        f"one has only {len(v.batches[-1][1])} samples): evaluate every batch of the loader.", None,
                        _eval_beside(v, None))]
    return [] if not missing else NotJudged("evaluate did not return")


def _ev_eval_mode(v: EvalView):
    if not v.forwards and v.run.complete:
        return [Failure("eval_mode", "evaluate never called the model.")]
    return _whole_loader(v) or _first_forward_with(
        v, lambda info: info["training"] is not False, "eval_mode",
        lambda info: "ran in train mode: dropout was still dropping, so the numbers are noisy and too pessimistic. "
        "Call model.eval() before the loop." if info["training"] else "ran with some of the model's modules in "
        "train mode (its Dropout still dropping): a training flag set by hand changes only that one module. Call "
        "model.eval(), which sets every module.")


def _ev_no_grad(v: EvalView):
    if not v.forwards:
        return NotJudged("evaluate never called the model")
    return _whole_loader(v) or _first_forward_with(
        v, lambda info: info["grad"], "no_grad", lambda info: "ran with autograd on: every batch built a graph nobody "
        "backpropagates through (memory and time wasted). Wrap the loop in torch.no_grad() (or "
        "torch.inference_mode()).")


def _ev_restore_mode(v: EvalView):
    if not v.run.complete:
        return NotJudged("evaluate did not return")
    if not v.forwards:  # a call that never ran the model shows nothing of the mode it leaves (judged apart from
        return NotJudged("evaluate never called the model")  # eval_mode: no model.eval() is that property's alone)
    if _whole_loader(v):
        return _whole_loader(v)
    if v.training_after is not True:
        left = "the model in eval mode" if v.training_after is False else "some of the model's modules in eval mode"
        return [Failure("restore_mode", f"evaluate left {left}: the next epoch would train with dropout off unless it "
                        "calls model.train() itself. Call model.train() before returning (it sets every module).",
                        None, _eval_beside(v, len(v.run.events) - 1))]
    return []


def _outputs(v: EvalView) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(logits, labels) per batch: the logits the student's own forwards produced, and nothing else (so the numbers
    are judged apart from the mode they ran in, and only on what the function computed: :func:`_numbers` first)."""
    seen: dict[int, torch.Tensor] = {}
    for _, e in v.forwards:
        j = which_batch(e.data["x"], v.batches)
        if j is not None and "out" in e.data and j not in seen:
            seen[j] = e.data["out"].float()
    return [(seen[j], y) for j, (_, y) in enumerate(v.batches)]


def _numbers(v: EvalView) -> NotJudged | None:
    if not v.run.complete:
        return NotJudged("evaluate did not return")
    if not v.forwards:
        return NotJudged("evaluate never called the model, so its numbers were not computed from it")
    missing = _unevaluated(v)
    if missing:  # numbers for a batch it never ran were not computed from it, whatever they are
        return NotJudged(f"batch {missing[0]} of the loader never went through the model, so the numbers were not "
                         "computed from every batch", needs=("batches",))
    return None


def _means(outputs: list[tuple[torch.Tensor, torch.Tensor]], value) -> tuple[float, float]:
    """``value(logits, labels)`` of each batch averaged per sample (weighted by the batch sizes: the answer) and per
    batch (the classic slip, visible when the last batch is short)."""
    sizes = [len(y) for _, y in outputs]
    values = [value(o, y) for o, y in outputs]
    return sum(s * x for s, x in zip(sizes, values)) / sum(sizes), sum(values) / len(values)


def _ev_per_sample(v: EvalView):
    if not_judged := _numbers(v):
        return not_judged
    loss = float(v.run.result[0])
    outputs = _outputs(v)
    want_loss, per_batch = _means(outputs, lambda o, y: F.cross_entropy(o, y).item())
    if close_enough(loss, want_loss, 1e-4):
        return []
    if close_enough(loss, per_batch, 1e-4):
        return [Failure("per_sample", f"the loss {loss:.4f} is the average of the per-batch means; the per-sample "
                        f"mean is {want_loss:.4f} (the last batch has only {len(outputs[-1][1])} samples). Sum "
                        "loss.item() * len(y) (or use reduction='sum') and divide by the number of samples.")]
    if close_enough(loss, _means(outputs, lambda o, y: F.cross_entropy(o.softmax(dim=1), y).item())[0], 1e-4):
        return [Failure("softmax", f"the loss {loss:.4f} is cross-entropy on softmax probabilities: "
                        "F.cross_entropy applies log-softmax itself. Pass the raw logits.")]
    return [Failure("per_sample", f"the loss is {loss:.4f}; the mean cross-entropy per sample over the whole "
                    f"loader is {want_loss:.4f}.")]


def _ev_accuracy(v: EvalView):
    if not_judged := _numbers(v):
        return not_judged
    acc = float(v.run.result[1])
    outputs = _outputs(v)
    want_acc, per_batch = _means(outputs, lambda o, y: (o.argmax(dim=1) == y).float().mean().item())
    if close_enough(acc, want_acc, 1e-6):
        return []
    if close_enough(acc, per_batch, 1e-6):
        return [Failure("accuracy", f"the accuracy {acc:.4f} is the average of the per-batch accuracies; the "
                        f"per-sample accuracy is {want_acc:.4f} (the last batch has only {len(outputs[-1][1])} "
                        "samples). Count correct predictions and divide by the number of samples.")]
    if close_enough(acc / 100, want_acc, 1e-6):
        return [Failure("accuracy", f"the accuracy {acc:.4g} is a percentage ({want_acc:.4f} as a fraction): return "
                        "correct / n_samples, a fraction in [0, 1].")]
    return [Failure("accuracy", f"the accuracy is {acc:.4f}; the fraction of correct predictions (argmax of the "
                    f"logits) over the whole loader is {want_acc:.4f}.")]


def _ev_device(v: EvalView):
    if not v.forwards:
        return NotJudged("evaluate never called the model")
    if not v.run.moves:
        return [Failure("device", f"evaluate never moved a batch to the device={shown(v.device)} it was given: move "
                        "each batch with x.to(device), y.to(device).")]
    other = next((d for d in v.run.moves if d != torch.device(v.device)), None)
    if other is not None:
        return [Failure("device", f"evaluate moved tensors to {str(other)!r}, not to the device={shown(v.device)} it "
                        "was given: move each batch with x.to(device), y.to(device).")]
    return []


EVAL_STAGES = (
    ("return_value", _ev_return_value, ()),
    ("device", _ev_device, ()),
    ("batches", _ev_batches, ()),
    ("eval_mode", _ev_eval_mode, ()),
    ("no_grad", _ev_no_grad, ()),
    ("restore_mode", _ev_restore_mode, ()),
    ("per_sample", _ev_per_sample, ("return_value",)),  # judged on the student's own logits, in any mode
    ("accuracy", _ev_accuracy, ("return_value",)),
)


@could_not_check("evaluate")
def check_evaluate(fn) -> CheckReport:
    """Run ``fn`` (evaluate(model, loader, device) -> (loss, accuracy)) on tiny data with an uneven last batch."""
    names = [s for s, _, _ in EVAL_STAGES]
    report = new_report("evaluate", names, fn)
    if report.failures:  # not callable as the contract calls it
        return report
    seed = run_seed()  # fresh data and weights: numbers copied from an earlier run are wrong in this one
    with isolated():
        view = run_evaluate(fn, seed)
    report.trace = view.run.events
    judge_call(report, "evaluate", fn, view.run, EVAL_STAGES, view, names)
    # the device it must honour, at its second value, whatever the first run showed: a hard-coded device shows
    # here, and every call is judged (a second call that does nothing earns nothing)
    varied = exercises.get("evaluate").varied()
    with isolated():
        view = run_evaluate(fn, seed + 1, varied["device"])  # other data: the first call's numbers are wrong here
    with as_given(report, varied):
        judge_call(report, "evaluate", fn, view.run, EVAL_STAGES, view, names)
    if report.passed:  # where a notebook has a GPU, once more there (never while grading: checks.on_gpu)
        with isolated():
            report.failures += on_gpu.failures("evaluate", fn, _gpu_case)
    return report
