"""The handout answers no graded exercise: lab 6's points are not available by copying a file the student was given.

A student who pastes a shipped function (its whole module, so that its helpers come along and the check's ban on
calling the lab's own functions does not apply) as lab 6's ``save_checkpoint`` or ``load_checkpoint`` earns nothing:
the complete save/restore is instructor-only (``labutils/reference/checkpoint.py``), and what ``labutils.checkpoint``
ships (RNG capture, checksums, listing, temp-file clean-up) answers no graded property.
"""

import inspect

import pytest

from autograder.course import handout
from labutils import exercises
from labutils.checks import check_checkpoint, properties

import mutants
from stubs import do_nothing as stubs

CHECKPOINT = exercises.get("checkpoint")
SAVE, LOAD = CHECKPOINT.functions


def _pasted_copies(module_name: str) -> list:
    """The public functions of a shipped module as a student's paste of the whole file would define them: new
    function objects (not the lab's own, which the check refuses to call) with the file's helpers beside them."""
    import importlib

    module = importlib.import_module(module_name)
    namespace = {"__name__": module_name, "__package__": module.__package__, "__file__": module.__file__}
    source = "\n" * 7 + inspect.getsource(module)  # pasted into a cell: other line numbers, so other code objects
    exec(compile(source, "<pasted>", "exec"), namespace)  # noqa: S102 (our own shipped file)
    pasted = [value for name, value in sorted(namespace.items()) if not name.startswith("_") and
              getattr(value, "__module__", None) == module_name and
              getattr(getattr(value, "__code__", None), "co_filename", "<pasted>") == "<pasted>"]
    functions = [fn for fn in pasted if inspect.isfunction(fn)]
    for cls in (c for c in pasted if inspect.isclass(c)):  # a class's bound methods count too: keeper.save
        try:
            instance = cls()
        except Exception:
            continue
        functions += [getattr(instance, n) for n, m in vars(cls).items() if inspect.isfunction(m) and
                      not n.startswith("_")]
    return functions


def _binds(fn, contract: exercises.Function) -> bool:
    try:
        inspect.signature(fn).bind(*contract.params)
    except (TypeError, ValueError):
        return False
    return True


def _shipped_candidates(contract: exercises.Function) -> list:
    """Every public function of the handout's labutils that could be called as ``contract`` (``python -m labutils``,
    the instructor's command line, is left out: it only says so)."""
    names = [n for n in handout.student_module_names() if not n.endswith("__main__")]
    assert "labutils.checkpoint" in names and "labutils.checks.resumable" in names
    return [fn for name in names for fn in _pasted_copies(name) if _binds(fn, contract)]


def _points(save_fn, load_fn) -> set[str]:
    report = check_checkpoint(save_fn, load_fn)
    return {p for p, v in properties.verdicts("checkpoint", report).items() if v.passed}


@pytest.mark.parametrize("role", ["save", "load"])
def test_no_shipped_function_pasted_as_lab_6s_answer_earns_a_point(role):
    """Each shipped function that fits the call, pasted with its whole file, beside a correct other half."""
    correct_save, correct_load = mutants.c.save_canonical, mutants.c.load_canonical
    halves = {"save": lambda fn: (fn, correct_load), "load": lambda fn: (correct_save, fn)}[role]
    by_the_correct_half = _points(*halves(stubs.save_nothing if role == "save" else stubs.load_zero))
    earned = {}
    for fn in _shipped_candidates(SAVE if role == "save" else LOAD):
        if points := _points(*halves(fn)) - by_the_correct_half:
            earned[fn.__name__] = sorted(points)
    assert not earned, f"shipped functions that earn lab 6's points as its {role}: {earned}"


def test_lab_6s_answer_is_not_importable_from_the_handout():
    """``from labutils.checkpoint import save_checkpoint`` (the shortcut a student would try first) finds nothing."""
    import labutils.checkpoint

    assert not hasattr(labutils.checkpoint, "save_checkpoint")
    assert not hasattr(labutils.checkpoint, "restore_checkpoint")


def test_lab_7s_own_pair_handed_in_as_lab_6s_answer_earns_nothing():
    """The pair lab 7's check lends the loop ships with the checks, and writes real checkpoints there; handed in as
    both halves it earns nothing: it saves only while lab 7's check traces the loop it was lent to."""
    from labutils.checks.resumable import HeldCheckpoints

    held = HeldCheckpoints()
    assert _points(held.save_checkpoint, held.load_checkpoint) == set()
