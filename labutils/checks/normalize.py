"""check_normalize (00_data_tour): normalize_images turns uint8 pixels into the float32 (N, 1, 28, 28) the model
takes, without touching its input.
"""

from __future__ import annotations

import torch

from .. import exercises
from ..data import MEAN, STD, normalize
from ..trace import Tracer
from .calling import _call, _check_signature, _exception_failure, _reference_failure
from .report import CheckReport, Failure
from .world import FORBIDDEN, SEED, _images


def check_normalize(fn) -> CheckReport:
    """``normalize_images(images)``: uint8 (N, 28, 28) -> float32 (N, 1, 28, 28), ``(images / 255 - MEAN) / STD``."""
    report = CheckReport("normalize_images (00_data_tour)", ["signature", "uses_reference", "return_value", "values"])
    if not _check_signature(report, fn, "normalize"):
        return report
    sizes = exercises.get("normalize").argument("images").values  # two batch sizes: a hard-coded N shows
    for n in sizes:
        if not _judge(report, fn, n, f"with {n} images, " if n != sizes[0] else ""):
            break
    return report


def _judge(report: CheckReport, fn, n: int, when: str) -> bool:
    images = _images(n, SEED)
    images[0, 0, :2] = torch.tensor([0, 255], dtype=torch.uint8)  # both ends of the range
    given = images.clone()
    run = _call(fn, (given,), Tracer(forbidden=FORBIDDEN["normalize"]))
    if run.reference is not None:
        report.failures.append(_reference_failure("normalize_images", run.reference))
        return False
    if run.error is not None:
        report.failures.append(_exception_failure("normalize_images", fn, run.error, when and f" {when[:-2]}"))
        return False
    out, want = run.result, normalize(images)
    if not isinstance(out, torch.Tensor):
        problem = f"normalize_images returned a {type(out).__name__}, not a torch.Tensor"
    elif out.dtype != torch.float32:
        problem = f"the result has dtype {out.dtype}, not torch.float32 (use .float())"
    elif out.ndim and len(out) != n:
        problem = (f"normalize_images returned {len(out)} images for the {n} it was given: keep N from the input "
                   "(images.unsqueeze(1), not a fixed shape)")
    elif tuple(out.shape) != tuple(want.shape):
        problem = (f"the result has shape {tuple(out.shape)}, not {tuple(want.shape)} (N, 1, 28, 28): add the "
                   "channel dimension with .unsqueeze(1)")
    else:
        problem = None
    if problem:
        report.failures.append(Failure("return_value", when + problem + "."))
        return False
    raw = images.float()
    if not torch.equal(given, images):
        report.failures.append(Failure("values", when + "normalize_images changed its input in place: compute a new "
                                                 "tensor instead (the caller's images must stay uint8 pixels)."))
    elif not torch.allclose(out, want, atol=1e-5):
        hints = [((raw - MEAN) / STD, "it looks like the images were not divided by 255 first"),
                 ((raw / 255).unsqueeze(1), "it looks like MEAN was not subtracted and STD not divided by"),
                 ((raw / 255 - STD) / MEAN, "it looks like MEAN and STD were swapped")]
        hint = next((h for value, h in hints if torch.allclose(out.reshape(value.shape), value, atol=1e-4)), None)
        report.failures.append(Failure("values", when + "the values differ from (images / 255 - MEAN) / STD (largest "
                                                 f"difference {float((out - want).abs().max()):.4g})" +
                                       (f": {hint}." if hint else ".")))
    return not report.failures
