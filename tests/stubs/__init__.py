"""The stub corpus: answers that do nothing (or one thing) with the right signatures, and what each may earn.

A grader whose properties pass by default gives points to a student who wrote nothing: these stubs are the proof it
does not. ``DO_NOTHING`` holds, per exercise, the release's own stub and do-nothing bodies that return plausible values
(zeros, empty lists, the inputs handed back, ``model.train()`` alone, a single no-decay group, ``torch.save({}, path)``):
each must score 0 on every property. ``PARTIAL`` holds "reference minus one concept" stubs that each really implement
some properties: each must earn exactly those (``earns``). ``CHEATS`` (:mod:`stubs.cheating`) holds the answers of a
student who has read the checks and wants points without the work (issue 43): each must earn exactly what it really
implements too, at check level and through the grader.
"""

from __future__ import annotations

from typing import NamedTuple

from labutils import checks, exercises

from . import do_nothing as d
from . import partial as p
from .cheating import CHEATS, Cheat  # noqa: F401 (the corpus's third part)


class Stub(NamedTuple):
    name: str
    exercise: str
    function: object  # a function, or (save, load) for "checkpoint"
    earns: frozenset = frozenset()  # the properties it really implements (none for a do-nothing stub)

    @property
    def functions(self) -> tuple:
        return self.function if isinstance(self.function, tuple) else (self.function,)


def _stubs(exercise: str, *functions) -> list[Stub]:
    return [Stub(f"{exercise}:{'+'.join(fn.__name__ for fn in (f if isinstance(f, tuple) else (f,)))}", exercise, f)
            for f in functions]


DO_NOTHING = [
    *_stubs("normalize", d.normalize_release, d.normalize_identity, d.normalize_zeros),
    *_stubs("baseline", d.train_release, d.train_zero, d.train_mode_only, d.train_nan),
    *_stubs("evaluate", d.evaluate_release, d.evaluate_zeros, d.evaluate_eval_only, d.evaluate_mode_dance,
            d.evaluate_perfect),
    *_stubs("scheduler", d.train_scheduler_release, d.train_scheduler_zero, d.train_scheduler_steps_only),
    *_stubs("clipping", d.train_clipping_release, d.train_clipping_zero, d.train_clipping_empty),
    *_stubs("accumulation", d.train_accumulation_release, d.train_accumulation_zero),
    *_stubs("amp", d.train_amp_release, d.train_amp_zero, d.train_amp_empty_norms),
    *_stubs("checkpoint", (d.save_release, d.load_release), (d.save_nothing, d.load_zero),
            (d.save_from_the_handout, d.load_from_the_handout),
            (d.save_empty_dict, d.load_zero), (d.save_empty_dict, d.load_returns_step_key),
            (d.save_step_in_memory, d.load_step_from_memory)),
    *_stubs("resume", d.resumable_release, d.resumable_zero, d.resumable_returns_nothing,
            d.resumable_reports_progress),
    *_stubs("param_groups", d.param_groups_release, d.param_groups_one_no_decay, d.param_groups_empty,
            d.param_groups_one_decayed, d.param_groups_adamw_default),
]

PARTIAL = [
    Stub("normalize:shape_without_values", "normalize", p.normalize_shape_without_values, frozenset({"shape_dtype"})),
    # train mode is evidence only of a loop that trains (issue 43): a loop that never steps earns nothing
    Stub("baseline:forward_only", "baseline", p.train_forward_only, frozenset()),
    Stub("evaluate:modes_only", "evaluate", p.evaluate_modes_but_constant_numbers,
         frozenset({"eval_mode", "no_grad", "restore_mode"})),
    Stub("param_groups:split_without_decay", "param_groups", p.param_groups_split_without_decay,
         frozenset({"coverage"})),
    Stub("checkpoint:atomic_save_only", "checkpoint", (p.save_atomic_complete, d.load_zero),
         frozenset({"atomic", "complete"})),
]

STUBS = DO_NOTHING + PARTIAL


def run_check(stub: Stub) -> checks.CheckReport:
    exercise = exercises.get(stub.exercise)
    return getattr(checks, exercise.check_name)(*stub.functions, *exercise.check_args)
