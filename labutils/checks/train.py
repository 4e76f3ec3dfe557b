"""check_train_one_epoch: which checks apply to which exercise (01 to 05), in dependency order, and the verdict."""

from __future__ import annotations

from ..exercises import TRAIN_EXERCISES, get
from . import on_gpu
from .calling import could_not_check, isolated, judge_call, new_report
from .report import CheckReport, NotJudged, as_given
from .train_amp import stage_autocast, stage_scale, stage_scaler_step, stage_scaler_update, stage_unscale
from .train_order import (stage_accumulation, stage_batches, stage_device, stage_grad_enabled, stage_order,
                          stage_scheduler, stage_scheduler_order, stage_trailing, stage_train_mode, stage_zero_grad)
from .train_run import TrainView, run_train, train_case
from .train_values import stage_clip, stage_gradient, stage_loss_graph, stage_mean_loss, stage_norms, stage_return_value
from .world import run_seed

TRAIN_STAGES = (
    ("return_value", stage_return_value, ()),
    ("train_mode", stage_train_mode, ()),
    ("grad_enabled", stage_grad_enabled, ()),
    ("autocast", stage_autocast, ()),
    ("device", stage_device, ()),
    ("batches", stage_batches, ("grad_enabled",)),
    ("order", stage_order, ("grad_enabled",)),
    ("zero_grad", stage_zero_grad, ("order",)),
    ("accumulation", stage_accumulation, ("order", "zero_grad")),
    ("trailing", stage_trailing, ("order",)),
    ("scheduler", stage_scheduler, ()),
    ("scheduler_order", stage_scheduler_order, ()),
    ("scale", stage_scale, ()),
    ("unscale", stage_unscale, ("order", "scale")),
    ("scaler_step", stage_scaler_step, ()),
    ("scaler_update", stage_scaler_update, ()),
    # judged on the steps whose micro-batches ran cleanly (known batches, backward before the step, fresh gradients):
    # a mistake in one step's order does not hide whether the loss and its gradient are right
    ("gradient", stage_gradient, ()),
    ("clip", stage_clip, ("unscale",)),  # clipping the scaled gradients is the unscale mistake, not a clip one
    # judged on what was returned whenever it holds numbers: a tensor instead of a float does not hide a wrong value
    ("norms", stage_norms, ()),
    ("mean_loss", stage_mean_loss, ()),
    ("loss_graph", stage_loss_graph, ()),
)
_COMMON = ("return_value", "train_mode", "grad_enabled", "device", "batches", "order", "zero_grad", "gradient",
           "mean_loss", "loss_graph")
_SCHEDULER = ("scheduler", "scheduler_order")
_SCALER = ("scale", "unscale", "scaler_step", "scaler_update")
EXERCISE_STAGES = {
    "baseline": _COMMON,
    "scheduler": _COMMON + _SCHEDULER,
    "clipping": _COMMON + _SCHEDULER + ("clip", "norms"),
    "accumulation": _COMMON + _SCHEDULER + ("clip", "norms", "accumulation", "trailing"),
    "amp": _COMMON + _SCHEDULER + ("clip", "norms", "autocast") + _SCALER,
}


def _analyse_train(report: CheckReport, fn, view: TrainView, applicable) -> None:
    """Judge one run of the loop on the stages that apply."""
    judge_call(report, "train_one_epoch", fn, view.run, TRAIN_STAGES, view, applicable)


def check_train_one_epoch(fn, exercise: str = "baseline", *, notebook: str | None = None, skip=()) -> CheckReport:
    """Run ``fn`` (train_one_epoch per the ``exercise``'s contract) on tiny data and check what its loop did.

    exercise: one of "baseline", "scheduler", "clipping", "accumulation", "amp". notebook: the notebook that reuses
    the loop, named in the report instead of the exercise's own (08_stretch runs lab 5's loop). skip: checks that do
    not apply to a loop reusing the contract (under accelerate the prepared loader moves the batches, not the loop).
    """
    if exercise not in TRAIN_EXERCISES:
        raise ValueError(f"exercise={exercise!r} is unknown: use one of {', '.join(TRAIN_EXERCISES)}")
    return _check(fn, exercise, notebook, skip)


@could_not_check("train_one_epoch")
def _check(fn, exercise: str, notebook: str | None, skip) -> CheckReport:
    applicable = tuple(s for s in EXERCISE_STAGES[exercise] if s not in skip)
    where = None if notebook is None else f"{notebook}, lab {int(get(exercise).notebook[:2])}'s loop"
    report = new_report(exercise, [s for s, _, _ in TRAIN_STAGES if s in applicable], fn, where=where)
    if report.failures:  # not callable as the contract calls it
        return report
    seed = run_seed()  # fresh data and weights: no answer can be fitted to them in advance
    with isolated():
        view = run_train(fn, train_case(exercise, seed))
        report.trace = view.events
        _analyse_train(report, fn, view, applicable)
        # the arguments it must honour, at their second values, whatever the first run showed: its own numbers would
        # show here, and every call is judged (a second call that does nothing earns nothing)
        case = train_case(exercise, seed + 1, which=1)  # other data too: a first call's result handed back fails
        with as_given(report, {name: getattr(case, name) for name in get(exercise).varied()}):
            _analyse_train(report, fn, run_train(fn, case), applicable)
        if report.passed:  # where a notebook has a GPU, once more there (never while grading: checks.on_gpu)
            report.failures += on_gpu.failures("train_one_epoch", fn, _gpu_case(exercise))
        if exercise == "accumulation":  # the gradient's scale is the loss_divided property's evidence
            report.judge("loss_divided", [] if report.passed_on_evidence("gradient") else
                         NotJudged(report.unjudged.get("gradient", "the gradient could not be checked")))
        if exercise == "amp":
            report.judge("scaler_none", _without_scaler(report, fn, applicable, seed + 2))
    return report


def _without_scaler(report: CheckReport, fn, applicable, seed: int):
    """The contract also allows scaler=None (plain backward and step): the mistakes that show only then are the
    scaler_none property's; the ones the run with a scaler already showed are not counted twice."""
    scratch, view = CheckReport(report.name), run_train(fn, train_case("amp", seed, with_scaler=False))
    with as_given(scratch, {"scaler": None}):
        _analyse_train(scratch, fn, view, set(applicable) - set(_SCALER))
    if "mean_loss" in report.unjudged and scratch.passed_on_evidence("return_value"):
        # the run with a scaler showed no mean (it stopped, or a direct optimizer.step() wrote its overflowing step
        # into the weights): this run's losses show whether the loop averages them right
        reason = report.unjudged.pop("mean_loss")
        verdict = stage_mean_loss(view)
        with as_given(report, {"scaler": None}):
            report.judge("mean_loss", verdict if verdict is not None else reason)
    already = {f.check for f in report.failures} | set(report.unjudged)
    new = [f for f in scratch.failures if f.check not in already]
    for failure in new:
        failure.check = "scaler_none"
    if new or scratch.passed_on_evidence("order"):
        return new
    return NotJudged("with scaler=None the loop ran no optimizer step")


def _gpu_case(exercise: str):
    """The check's own tiny case on the GPU, so the GPU run sees the same loop; lab 5's with the GPU's recipe (fp16
    and a real GradScaler)."""
    def build(folder):
        import torch

        case = train_case(exercise, run_seed())
        case.model.to(on_gpu.GPU)  # in place: the optimizer keeps the same parameters
        case.device = on_gpu.GPU
        if exercise == "amp":
            case.amp_dtype, case.scaler = torch.float16, torch.amp.GradScaler(on_gpu.GPU)
        return case.args, on_gpu.tracer(case.model, case.optimizer, case.scheduler, case.scaler, exercise=exercise)
    return build
