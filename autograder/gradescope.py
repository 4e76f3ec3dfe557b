"""Loop Lab as a Gradescope "Autograder" assignment: what grades one submission inside Gradescope's container.

``run_autograder`` (in the zip :mod:`autograder.course.gradescope_zip` builds) calls ``python -m autograder
gradescope-run``: :func:`run` grades ``/autograder/submission`` as one student with :func:`autograder.grade.grade`,
confined as far as the container allows (the grader says which layers it could not apply; that goes to the
instructor-only stdout), and hands the class record to :mod:`autograder.results.writers.gradescope`, which writes
``/autograder/results/results.json``: one test per graded property with its points and the check's message, a hidden
test's shown only after the scores are published. Late penalties (Gradescope applies none itself): the zip's
deadlines.toml policy on Gradescope's own submission time and due date, the student's extension included, from
``submission_metadata.json`` (:func:`autograder.results.handin.from_gradescope`): the penalty ``grade --deadlines``
gives the same times.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .grade import GradeOptions, grade
from .layout import ASSIGNMENT, DEFAULT_GRADESCOPE_ROOT, GRADESCOPE_ROOT_ENV, REPO_ROOT, GradescopeLayout
from .results import handin
from .results.writers.gradescope import GradescopeResults, to_results

STUDENT = "student"  # the one student a Gradescope run grades


def _submission_folder(layout: GradescopeLayout, work: Path) -> Path:
    """SUBMISSIONS for :func:`grade`: the uploaded files as one student's folder (links stay links and are refused
    by the grader, as in any submission)."""
    subs = work / "submissions"
    shutil.copytree(layout.submission, subs / STUDENT, symlinks=True)
    return subs


def run(layout: GradescopeLayout, source: Path | None = None) -> int:
    """Grade ``layout.submission`` and write ``layout.results``; 0 when graded, 1 when it could not be or the
    container cannot keep the hidden tests and the results from student code (results.json then says why, with a
    score of 0, so Gradescope shows the reason rather than a missing file or a silent grade)."""
    from .run.pool import GradingSetupError

    started = time.monotonic()
    source = Path(source or REPO_ROOT / "solutions" / ASSIGNMENT)
    layout.results.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="looplab-gradescope-") as tmp:
        work = Path(tmp)
        try:
            course = handin.from_gradescope(layout.metadata, layout.deadlines, STUDENT) \
                if layout.deadlines.exists() else None
            record = grade(_submission_folder(layout, work), work / "out",
                           GradeOptions(jobs=min(2, os.cpu_count() or 1), source=source, course_deadlines=course),
                           root=REPO_ROOT, private=(layout.results.parent,))
            log = (work / "out" / "grading.log").read_text(errors="replace")
        except GradingSetupError as exc:  # the container, not the submission: one line for the instructor
            print(f"The autograder {exc}", file=sys.stdout)
            _not_graded(layout, f"The autograder {exc}", started)
            return 1
        except Exception as exc:  # the student sees why, the instructor the traceback on stdout
            import traceback

            traceback.print_exc(file=sys.stdout)
            _not_graded(layout, f"The autograder could not grade this submission ({type(exc).__name__}: {exc}).",
                        started)
            return 1
        print(log)  # stdout: the instructor's (confinement layers, each notebook's line)
        results = to_results(record, STUDENT, time.monotonic() - started)
        layout.results.write_text(results.to_json())
    return 0


def _not_graded(layout: GradescopeLayout, why: str, started: float) -> None:
    """results.json for a submission that was not graded: no test, a score of 0 and ``why``, shown."""
    failed = GradescopeResults(tests=[], output=why, execution_time=round(time.monotonic() - started, 1))
    shown = {**json.loads(failed.to_json()), "score": 0, "visibility": "visible"}  # Gradescope sums no test: say 0
    layout.results.write_text(json.dumps(shown, indent=1) + "\n")


def layout_from_env(root: Path | None) -> GradescopeLayout:
    """``--root``, else ``$GRADESCOPE_ROOT``, else ``/autograder``."""
    return GradescopeLayout(Path(root or os.environ.get(GRADESCOPE_ROOT_ENV) or DEFAULT_GRADESCOPE_ROOT))
