"""check_normalize (00_data_tour): normalize_images turns uint8 pixels into the float32 (N, 1, 28, 28) the model
takes, without touching its input.
"""

from __future__ import annotations

import torch

from .. import exercises
from ..data import MEAN, STD, normalize
from ..trace import Tracer
from .calling import call_failure, could_not_check, new_report, traced_call
from .report import CheckReport, Failure, NotJudged, described, later_run
from .world import random_images, run_seed


@could_not_check("normalize_images")
def check_normalize(fn) -> CheckReport:
    """``normalize_images(images)``: uint8 (N, 28, 28) -> float32 (N, 1, 28, 28), ``(images / 255 - MEAN) / STD``."""
    report = new_report("normalize", ["return_value", "values"], fn)
    if report.failures:  # not callable as the contract calls it
        return report
    sizes = exercises.get("normalize").argument("images").values  # two batch sizes: a hard-coded N shows
    seed = run_seed()
    for k, n in enumerate(sizes):  # every size judged, whatever the first showed: a hard-coded N behind another
        with later_run(report):  # mistake shows too
            _judge(report, fn, n, f"with {n} images, " if n != sizes[0] else "", seed + k)
    return report


def _judge(report: CheckReport, fn, n: int, when: str, seed: int) -> bool:
    images = random_images(n, seed)
    images[0, 0, :2] = torch.tensor([0, 255], dtype=torch.uint8)  # both ends of the range
    given = images.clone()
    run = traced_call(fn, (given,), Tracer(forbidden=exercises.get("normalize").forbidden))
    stopped = call_failure("normalize_images", fn, run, when and f" {when[:-2]}")
    if stopped:
        report.failures.append(stopped)
        return False
    out, want = run.result, normalize(images)
    problem = _shape_problem(out, want, n)
    report.judge("return_value", [Failure("return_value", when + problem + ".")] if problem else [])
    if not (isinstance(out, torch.Tensor) and out.is_floating_point() and out.numel() == want.numel()):
        report.judge("values", NotJudged("the result is not N images of 28 x 28 numbers, so its values cannot be "
                                         "compared; fix test_normalize_images_shape_dtype first"))
        return False
    report.judge("values", _values(out.detach().float().reshape(want.shape), want, images, given, when))
    return not report.failures


def _shape_problem(out, want, n: int) -> str | None:
    if not isinstance(out, torch.Tensor):
        return f"normalize_images returned {described(out)}, not a torch.Tensor"
    if out.dtype != torch.float32:
        return f"the result has dtype {out.dtype}, not torch.float32 (use .float())"
    if out.ndim and len(out) != n:
        return (f"normalize_images returned {len(out)} images for the {n} it was given: keep N from the input "
                "(images.unsqueeze(1), not a fixed shape)")
    if tuple(out.shape) != tuple(want.shape):
        return (f"the result has shape {tuple(out.shape)}, not {tuple(want.shape)} (N, 1, 28, 28): add the channel "
                "dimension with .unsqueeze(1)")
    if out.numel() and bool((out == out.flatten()[0]).all()):
        return (f"every value of the result is {float(out.flatten()[0]):.4g}: it must be computed from the images "
                "(a tensor of one constant has the right shape, but it is not a normalized image)")
    return None


def _values(out, want, images, given, when: str) -> list[Failure]:
    """The values (compared whatever the shape, so a missing channel costs only the shape's points)."""
    raw = images.float()
    if not torch.equal(given, images):
        return [Failure("values", when + "normalize_images changed its input in place: compute a new tensor instead "
                                         "(the caller's images must stay uint8 pixels).")]
    if torch.allclose(out, want, atol=1e-5):
        return []
    hints = [((raw - MEAN) / STD, "it looks like the images were not divided by 255 first"),
             ((raw / 255).unsqueeze(1), "it looks like MEAN was not subtracted and STD not divided by"),
             ((raw / 255 - STD) / MEAN, "it looks like MEAN and STD were swapped")]
    hint = next((h for value, h in hints if torch.allclose(out.reshape(value.shape), value, atol=1e-4)), None)
    hint = hint or _constants_used(out, raw)
    return [Failure("values", when + "the values differ from (images / 255 - MEAN) / STD (largest difference "
                                     f"{float((out - want).abs().max()):.4g})" + (f": {hint}." if hint else "."))]


def _constants_used(out, raw) -> str | None:
    """Which mean and std the result was computed with, when it is (images / 255 - m) / s for other constants."""
    x, y = (raw / 255).flatten().double(), out.flatten().double()
    if x.std() == 0 or y.std() == 0:
        return None
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
    intercept = float(y.mean() - slope * x.mean())
    if slope <= 0 or not torch.allclose(y, slope * x + intercept, atol=1e-3):
        return None
    std, mean = 1 / slope, -intercept / slope
    return (f"it looks like mean {mean:.4g} and std {std:.4g} were used, not the dataset's MEAN = {MEAN:.4f} and "
            f"STD = {STD:.4f} (import them from labutils.data)")

