"""Hidden tests: the instructor-only side of every graded test cell.

A hidden test cell in a notebook only calls ``verify("01_baseline", "train_one_epoch")``. The logic lives here, in the
autograder package installed in the grading environment, never in the assignment folder (nbgrader copies every file
of the source folder into the student release).
"""

from __future__ import annotations

import sys

# (notebook id, function name) -> (labutils.checks function, its extra arguments, the other names it needs)
CHECKS: dict[tuple[str, str], tuple[str, tuple, tuple[str, ...]]] = {
    ("00_data_tour", "normalize_images"): ("check_normalize", (), ()),
    ("01_baseline", "train_one_epoch"): ("check_train_one_epoch", ("baseline",), ()),
    ("01_baseline", "evaluate"): ("check_evaluate", (), ()),
    ("02_scheduler", "train_one_epoch"): ("check_train_one_epoch", ("scheduler",), ()),
    ("03_clipping", "train_one_epoch"): ("check_train_one_epoch", ("clipping",), ()),
    ("04_accumulation", "train_one_epoch"): ("check_train_one_epoch", ("accumulation",), ()),
    ("05_amp", "train_one_epoch"): ("check_train_one_epoch", ("amp",), ()),
    ("06_checkpointing", "save_checkpoint"): ("check_checkpoint", (), ("load_checkpoint",)),
    ("07_crash_resume", "train_resumable"): ("check_resume", (), ()),
    ("08_stretch", "param_groups"): ("check_param_groups", (), ()),
}


def verify(notebook_id: str, function_name: str) -> None:
    """Run the hidden check of ``function_name`` from the calling notebook; AssertionError with the verdict on failure."""
    key = (notebook_id, function_name)
    if key not in CHECKS:
        raise ValueError(f"no hidden check for {function_name!r} in notebook {notebook_id!r}: known are {sorted(CHECKS)}")
    check_name, extra, companions = CHECKS[key]
    namespace = sys._getframe(1).f_globals
    fns = []
    for name in (function_name, *companions):
        fn = namespace.get(name)
        if not callable(fn):
            raise AssertionError(f"{name} is not defined: run the cell that defines {name}() and keep its name")
        fns.append(fn)
    from labutils import checks

    report = getattr(checks, check_name)(*fns, *extra)
    if not report.passed:
        raise AssertionError(str(report))
