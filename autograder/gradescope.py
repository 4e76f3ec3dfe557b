"""Loop Lab as a Gradescope "Autograder" assignment: what grades one submission inside Gradescope's container.

``run_autograder`` (in the zip :mod:`autograder.course.gradescope_zip` builds) calls ``python -m autograder
gradescope-run``: :func:`run` finds the notebooks in ``/autograder/submission`` wherever the upload put them
(:func:`find_notebooks`), grades them as one student with :func:`autograder.grade.grade`, sized to the container
(:mod:`autograder.run.machine`) and confined as far as it allows (the grader says which layers it could not apply;
that goes to the instructor-only stdout), and hands the class record to :mod:`autograder.results.writers.gradescope`,
which writes ``/autograder/results/results.json``: what the student may see at once (each test without a hidden part,
what their notebook's checks show), the hidden parts and their points once the grades are published. Late penalties (Gradescope applies none itself): the zip's
deadlines.toml policy on Gradescope's own submission time and due date, the student's extension included, from
``submission_metadata.json`` (:func:`autograder.results.handin.from_gradescope`): the penalty ``grade --deadlines``
gives the same times.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .grade import GradeOptions, grade
from .layout import ASSIGNMENT, DEFAULT_GRADESCOPE_ROOT, GRADESCOPE_ROOT_ENV, REPO_ROOT, GradescopeLayout
from .course.submissions import TOOL_FOLDERS
from .results import handin
from .results.writers.gradescope import not_graded, to_results
from .untrusted import shown

STUDENT = "student"  # the one student a Gradescope run grades


class UploadError(ValueError):
    """The upload cannot be graded as it is; the message says what was found and what to upload, for the student."""


def find_notebooks(upload: Path, notebook_ids: list[str], depth: int = 8) -> Path:
    """The one folder of ``upload`` that holds notebooks of the assignment: the upload itself (notebooks uploaded one
    by one, or a zip of them), or a folder of it however it is named and however deep (the handout's ``notebooks/``,
    ``loop_lab/notebooks/``, nbgrader's ``loop_lab/``). Links are not followed, hidden folders and tools' folders
    not read. :class:`UploadError` naming what was found when no folder, or more than one, holds them."""
    upload = Path(upload)
    found: dict[str, list[str]] = {}
    others: list[str] = []
    for folder, dirs, files in os.walk(upload):  # a link to a folder is listed, never entered
        rel = Path(folder).relative_to(upload)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in TOOL_FOLDERS and len(rel.parts) < depth)
        notebooks = sorted(f for f in files if f.endswith(".ipynb"))
        ours = [f for f in notebooks if f.removesuffix(".ipynb") in notebook_ids]
        if ours:
            found[rel.as_posix()] = ours
        others += [(rel / f).as_posix() for f in notebooks if f not in ours]
    if len(found) == 1:
        return upload / next(iter(found))
    expected = ", ".join(f"{n}.ipynb" for n in notebook_ids[:3]) + (", ..." if len(notebook_ids) > 3 else "")
    if not found:
        seen = (f"it holds {len(others)} other notebook(s): {', '.join(map(shown, others[:5]))}" if others
                else "it holds no notebook")
        raise UploadError(f"Your upload holds no notebook of this assignment ({seen}). Upload your notebooks, named "
                          f"as in the handout ({expected}), one by one or as a zip.")
    where = "; ".join(f"{'the top' if rel == '.' else shown(rel + '/')}: {', '.join(map(shown, names))}"
                      for rel, names in sorted(found.items()))
    raise UploadError(f"Your upload holds notebooks of this assignment in {len(found)} folders ({where}): the grader "
                      "cannot tell which to grade. Upload one folder of notebooks, or the notebooks alone.")


def run(layout: GradescopeLayout, source: Path | None = None) -> int:
    """Grade ``layout.submission`` and write ``layout.results``; 0 when every notebook was graded, 1 when one or all
    could not be, or the container cannot keep the hidden tests and the results from student code (results.json then
    says which and why, with a score, so that Gradescope shows the reason rather than a missing file, a plain 0 or a
    silent grade; Gradescope reads results.json whatever the exit status)."""
    from .run.pool import GradingSetupError

    started = time.monotonic()
    source = Path(source or REPO_ROOT / "solutions" / ASSIGNMENT)
    layout.results.parent.mkdir(parents=True, exist_ok=True)

    def refuse(why: str) -> int:
        layout.results.write_text(not_graded(why, time.monotonic() - started).to_json())
        return 1

    with tempfile.TemporaryDirectory(prefix="looplab-gradescope-") as tmp:
        work = Path(tmp)
        try:
            folder = find_notebooks(layout.submission, sorted(p.stem for p in source.glob("*.ipynb")))
            subs = work / "submissions"  # that folder as one student's (links stay links: the grader refuses them)
            shutil.copytree(folder, subs / STUDENT, symlinks=True)
            course = handin.from_gradescope(layout.metadata, layout.deadlines, STUDENT) \
                if layout.deadlines.exists() else None
            record = grade(subs, work / "out", GradeOptions(source=source, course_deadlines=course),
                           root=REPO_ROOT, private=(layout.results.parent,))
            log = (work / "out" / "grading.log").read_text(errors="replace")
        except UploadError as exc:  # the student's to fix: said to them
            print(f"not graded: {exc}")
            return refuse(str(exc))
        except GradingSetupError as exc:  # the container, not the submission: one line for the instructor
            print(f"The autograder {exc}", file=sys.stdout)
            return refuse(f"The autograder {exc}")
        except Exception as exc:  # the student sees why, the instructor the traceback on stdout
            import traceback

            traceback.print_exc(file=sys.stdout)
            return refuse(f"The autograder could not grade this submission ({type(exc).__name__}: {shown(exc)}).")
        print(log)  # stdout: the instructor's (confinement layers, each notebook's line)
        results = to_results(record, STUDENT, time.monotonic() - started)
        layout.results.write_text(results.to_json())
    return 0 if record.complete else 1


def layout_from_env(root: Path | None) -> GradescopeLayout:
    """``--root``, else ``$GRADESCOPE_ROOT``, else ``/autograder``."""
    return GradescopeLayout(Path(root or os.environ.get(GRADESCOPE_ROOT_ENV) or DEFAULT_GRADESCOPE_ROOT))
