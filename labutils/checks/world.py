"""The tiny world every check runs in: constants and a few dozen random images for a tiny SmallCNN.

Every check run draws fresh data and weights (:func:`run_seed`): the checks ship in the handout, so data a student
can reproduce would let a constant stand in for the work (the numbers a failure message printed in one run are
wrong in the next). Inside :func:`seeded` a run uses the seed given: the grader's observer and judge build the
same data from a seed the judge drew (:mod:`autograder.hidden.recheck`), and tests pin one. It is small enough that
a whole check runs in about a second on a laptop. The contracts themselves are in :mod:`labutils.exercises`.
"""

from __future__ import annotations

import contextlib
import secrets

import torch

from ..data import normalize
from ..models import SmallCNN

_PINNED: list[int] = []  # seeded()'s seeds, innermost last


def run_seed() -> int:
    """The seed of one check run's data and weights (each run derives what it builds from it: ``seed + k``): from
    the operating system, so no answer can be fitted to it in advance; inside :func:`seeded`, the seed given."""
    return _PINNED[-1] if _PINNED else secrets.randbits(31)


@contextlib.contextmanager
def seeded(seed: int):
    """Every check run inside builds its data from ``seed``."""
    _PINNED.append(int(seed))
    try:
        yield
    finally:
        _PINNED.pop()


MAX_EVENTS = 1000  # a run on the checks' tiny data records at most 109 (lab 7, over the mutant corpus): more means
#                    a loop that never ends, stopped here after ~5 s (9 s at 2000)
DEVICE = "cpu"  # a string: the contract allows torch.device or str, and a string is what most students pass
N_TRAIN, BATCH = 34, 8  # 5 batches, the last with 2 samples: per-batch and per-sample averages differ
N_EVAL = 25  # at least: 4 batches, the last with 1 to 7 samples (evaluate draws how many)
LR = 0.02
LOGIT_GAIN = 20.0  # wider logits: losses differ a lot between samples, so averaging mistakes are visible
AMP_DTYPE = torch.bfloat16  # what CPU autocast supports
INIT_SCALE = 2.0**16  # a large loss scale: clipping before unscale_ is off by a factor of 65536
FP16_SCALE = 2.0**5  # with amp_dtype=float16 the scaled gradients must stay below float16's 65504
OVERFLOW_AT = 3  # the AMP check's scaled loss overflows at this step (of 5): the scaler must skip it, the loop go on


def random_images(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, 28, 28), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def tiny_model(dropout: float = 0.0, gain: float = LOGIT_GAIN) -> SmallCNN:
    model = SmallCNN(channels=(2, 4), dropout=dropout)  # ~25k parameters: a step takes about a millisecond
    with torch.no_grad():
        model.head[-1].weight.mul_(gain)
    return model


def crafted_labels(model, images: torch.Tensor, n_last: int, batch: int | None = None) -> torch.Tensor:
    """Labels the model gets right, except in the small last batch where it is as wrong as it can be: the last batch's
    loss and accuracy differ a lot from the rest, so averaging per batch instead of per sample shows. With ``batch``,
    the first sample of every full batch is wrong too: every step's gradient is then far above the checks' max_norm
    values, whatever the seed (a batch the model gets all right has a tiny gradient)."""
    was_training = model.training
    with torch.no_grad():
        logits = model.eval()(normalize(images))
    model.train(was_training)
    labels = logits.argmax(dim=1)
    labels[-n_last:] = logits[-n_last:].argmin(dim=1)
    if batch is not None:
        firsts = torch.arange(0, len(images) - n_last, batch)
        labels[firsts] = logits[firsts].argmin(dim=1)
    return labels


def which_batch(x, batches) -> int | None:
    """Which of the loader's batches is ``x`` (the input a forward saw)?"""
    if not isinstance(x, torch.Tensor):
        return None
    x = x.detach().float().cpu()
    candidates = [j for j, (bx, _) in enumerate(batches) if bx.shape == x.shape]
    exact = [j for j in candidates if torch.equal(batches[j][0], x)]
    close = [j for j in candidates if torch.allclose(batches[j][0], x, atol=1e-2)]  # e.g. a bf16 copy of x
    return (exact or close or [None])[0]


def close_enough(a: float, b: float, rtol: float) -> bool:
    return abs(a - b) <= rtol * max(abs(b), 1e-8)
