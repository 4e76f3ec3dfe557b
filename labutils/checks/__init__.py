"""Checks for every graded function of the lab: run it on tiny data, trace what it did, say what is wrong and why.

Each check calls the student's function exactly as docs/exercises.md states its contract, on a few dozen random images
and a tiny SmallCNN (drawn afresh every run: no answer can be fitted to them), while a :class:`labutils.trace.Tracer`
records what the loop did. Then it recomputes what should have happened with plain PyTorch (PyTorch is the oracle:
the gradient of the mean cross-entropy over the step's batch, clipped to ``max_norm``, at the very parameters the loop
used) and compares. Nothing is checked textually, so any correct way of writing a function passes.

A report names the failing check, the step, what was observed, the student's trace beside the expected order, and
the fix in one sentence. Checks depend on each other: when one root mistake breaks several (no ``zero_grad`` also makes
the applied gradient wrong), only the root is reported and the checks that depend on it are listed as not run.

Public API: each exercise's check (check_normalize, check_train_one_epoch, check_evaluate, check_checkpoint,
check_resume, check_param_groups: exported from the module the registry, :mod:`labutils.exercises`, names), show_trace,
CheckReport, and assert_property (the visible part of a graded test cell).

The modules, shared parts first, then one per exercise in the order of the lab:

- ``world``: the tiny data and model, drawn afresh every run (the contracts are in :mod:`labutils.exercises`);
  ``calling``: running the student's function safely (``traced_call``) and the skeleton every check follows;
  ``apart``: calls made in a forked child, so that nothing they keep in memory reaches the next; ``report``:
  CheckReport, Failure, the trace beside the expected order, the words for what a student's function returned.
- The grader's recheck (:mod:`autograder.hidden.recheck`): ``evidence``, the observer that records each call and the
  judge that replays the records; ``records``, the messages between them; ``wire``, their wire format; ``state`` and
  ``rng``, what a call left in its objects, folders and random streams; ``error_facts``, what it raised.
- ``normalize`` (00); ``train`` (01-05), with ``train_run`` (the case and the view of a run) and the checks in
  ``train_order``, ``train_amp`` and ``train_values``; ``evaluate`` (01); ``checkpointing`` (06); ``resumable`` (07);
  ``param_groups`` (08), ``stretch`` (08's ungraded exercises); ``show``: show_trace; ``properties``: the graded
  properties judged from one report.
"""

from importlib import import_module

from ..exercises import EXERCISES, TRAIN_EXERCISES
from .calling import SimulatedCrash
from .properties import assert_property
from .report import CheckReport, Failure
from .show import show_trace
from .stretch import check_evaluate_without_eval_mode, check_train_one_epoch_accelerate


def _registered_checks() -> dict:
    """Every exercise's check, from the module the registry names: a new exercise is not also listed here."""
    return {e.check_name: getattr(import_module(f"{__name__}.{e.check_module}"), e.check_name) for e in EXERCISES}


globals().update(_registered_checks())
__all__ = ["CheckReport", "Failure", "SimulatedCrash", "TRAIN_EXERCISES", "assert_property",
           "check_evaluate_without_eval_mode", "check_train_one_epoch_accelerate", "show_trace",
           *sorted({e.check_name for e in EXERCISES})]
