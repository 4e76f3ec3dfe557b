"""Where a notebook has a CUDA GPU, a check also runs the student's function on it, once, with ``device="cuda"``.

On a CPU a loop that hard-codes ``"cpu"`` is caught because the check passes ``torch.device("cpu:0")`` and sees the
batches moved elsewhere; some mistakes only a GPU shows: a tensor made on the CPU and added to one on the GPU, a batch
left where the loader put it while the model sits on the GPU. This run catches those, and its message says it was the
GPU run.

Grading never does this: a grade must not depend on whether the grading machine has a GPU, so under the grader
(:data:`labutils.checks.evidence.ROLE` set) and on a machine without CUDA these functions return no failures.
"""

from __future__ import annotations

import tempfile

import torch

from .. import exercises
from ..trace import Tracer
from . import evidence
from .calling import traced_call
from .error_facts import error_facts
from .report import Failure
from .world import MAX_EVENTS

GPU = "cuda"


def available() -> bool:
    """True in a notebook on a machine with CUDA; False under the grader, whatever its hardware."""
    return evidence.ROLE is None and torch.cuda.is_available()


def _run(fn, args, tracer):
    """The call, with the CUDA generator put back after it (a check leaves the caller's RNG streams alone)."""
    with torch.random.fork_rng(devices=[torch.cuda.current_device()]):
        return traced_call(fn, args, tracer)


def _failures(name: str, fn, run) -> list[Failure]:
    """What the GPU run showed: an exception (the usual sign of a tensor left on the CPU) or a move elsewhere."""
    if run.error is not None:
        facts = run.error.facts if hasattr(run.error, "facts") else error_facts(fn, run.error)
        where = f" at line {facts.line} (`{facts.source}`)" if facts.line is not None else ""
        return [Failure("device", f"on the GPU (device={GPU!r}), {name} raised {facts.type}{where}: "
                                  f"{facts.text}. Move every batch to device and make new tensors there "
                                  "(torch.zeros(..., device=device)).")]
    other = next((d for d in run.moves if d.type != GPU), None)
    if other is not None:
        return [Failure("device", f"on the GPU (device={GPU!r}), {name} moved tensors to {str(other)!r}, not to "
                                  "the device it was given: move each batch with x.to(device), y.to(device).")]
    return []


def failures(name: str, fn, gpu_case) -> list[Failure]:
    """``fn`` (the contract's ``name``) once on the GPU, in the case the exercise builds there:
    ``gpu_case(folder)`` -> (the call's arguments, a :func:`tracer` of its objects), ``folder`` a scratch folder of
    its own. No failures where there is no GPU to run on, or under the grader."""
    if not available():
        return []
    with tempfile.TemporaryDirectory() as folder:
        args, tracer_ = gpu_case(folder)
        return _failures(name, fn, _run(fn, args, tracer_))


def tracer(*objects, exercise: str) -> Tracer:
    """A tracer of the GPU case's objects that also records where tensors are moved."""
    return Tracer(*objects, forbidden=exercises.get(exercise).forbidden, max_events=MAX_EVENTS, devices=True)
