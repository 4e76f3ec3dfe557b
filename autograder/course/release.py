"""``python -m autograder release``: generate the student notebooks from ``solutions/`` and refresh ``notebooks/``.

The solutions are the single source of truth. ``nbgrader generate_assignment`` turns each into its student version:
solution regions become stubs, hidden tests disappear, test cells are locked and checksummed, outputs are cleared.
It runs in a scratch course folder that holds copies of the notebooks only, so nothing else from ``solutions/`` can
leak into the release, and the result is written flat into ``notebooks/NN_name.ipynb``.

One change to nbgrader's defaults: :class:`NamedStubs` makes each stub name its task,
``raise NotImplementedError("Lab 1: train_one_epoch")``, instead of a bare ``NotImplementedError()``, so a student
who runs a cell too early is told which exercise is missing. No gradebook is written (``no_database``): a release
needs none, and grading builds its own from ``solutions/``.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from pathlib import Path

from nbgrader import utils as nbgrader_utils
from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions, SaveCells

from ..layout import ASSIGNMENT, grader_cache_dir
from .nbgrader_setup import nbgrader_config, run_converter, sqlite_url
BARE_STUB = "raise NotImplementedError()"
_DEF = re.compile(r"^\s*def\s+(\w+)\s*\(")


class NamedStubs(ClearSolutions):
    """ClearSolutions whose stub says which task is missing: ``raise NotImplementedError("Lab 1: train_one_epoch")``
    (the lab number from the notebook's ``NN_`` prefix, the name of the function the stub sits in)."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.cell_type == "code" and nbgrader_utils.is_solution(cell):
            cell.source = name_stubs(cell.source, resources["unique_key"], cell.metadata["nbgrader"]["grade_id"])
        return cell, resources


def name_stubs(source: str, notebook_id: str, fallback: str) -> str:
    """Replace each bare ``raise NotImplementedError()`` with one naming ``Lab N: <enclosing function>``."""
    lab = int(notebook_id.split("_", 1)[0])
    lines, function = [], fallback
    for line in source.split("\n"):
        if match := _DEF.match(line):
            function = match.group(1)
        if line.strip() == BARE_STUB:
            line = line.replace(BARE_STUB, f'raise NotImplementedError("Lab {lab}: {function}")')
        lines.append(line)
    return "\n".join(lines)


def _preprocessors(gradebook: bool = False) -> list:
    """nbgrader's own list with the named stubs; without the gradebook writer unless ``gradebook``."""
    chain = [NamedStubs if p is ClearSolutions else p for p in GenerateAssignment.class_traits()["preprocessors"].default()]
    return chain if gradebook else [p for p in chain if p is not SaveCells]


def copy_source(solutions: Path, course: Path) -> list[Path]:
    """Copy the notebooks (only: nothing else can leak) of ``solutions`` into ``course/source/loop_lab``."""
    notebooks = sorted(Path(solutions).glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no notebooks in {solutions}")
    source = Path(course) / "source" / ASSIGNMENT
    source.mkdir(parents=True, exist_ok=True)
    for nb in notebooks:
        shutil.copyfile(nb, source / nb.name)
    return notebooks


def generate_gradebook(solutions: Path, course: Path, db_url: str) -> list[str]:
    """generate_assignment with the gradebook writer, in the course at ``course``: the gradebook then holds exactly
    the cells the students were given (test cells, their points, the instructor's source of every locked cell).
    Returns the notebook ids in the gradebook."""
    if not (Path(course) / "source" / ASSIGNMENT).exists():
        copy_source(solutions, course)
    c = nbgrader_config(course, db_url)
    c.GenerateAssignment.force = True
    c.GenerateAssignment.preprocessors = _preprocessors(gradebook=True)
    run_converter(GenerateAssignment, c)
    return gradebook_notebooks(db_url)


def gradebook_notebooks(db_url: str) -> list[str]:
    """The notebook ids of the assignment in the gradebook at ``db_url``."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        return sorted(nb.name for nb in gb.find_assignment(ASSIGNMENT).notebooks)


def template_course(solutions: Path, course: Path, version: str) -> list[str]:
    """:func:`generate_gradebook` into the new folder ``course`` (``gradebook.db`` and the ``source/`` and
    ``release/`` folders the graded course is made from), copied from the grader's cache when a run made it from the
    same ``version`` (the source, the grader's code and nbgrader: :func:`autograder.grade.assignment_version`), else
    generated and cached. Generating it is nbgrader's converter over every notebook: 1.4-2 s of CPU in each run and
    re-run. The cache is the grader's own folder (:func:`autograder.layout.grader_cache_dir`): it holds hidden tests,
    so never a folder a kernel may read."""
    cached = grader_cache_dir() / "courses" / hashlib.sha256(version.encode()).hexdigest()[:32]
    if cached.is_dir():
        shutil.copytree(cached, course)
        return gradebook_notebooks(sqlite_url(Path(course) / "gradebook.db"))
    notebooks = generate_gradebook(solutions, course, sqlite_url(Path(course) / "gradebook.db"))
    try:
        cached.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix="partial-", dir=cached.parent))
    except OSError:
        return notebooks  # no cache here (a read-only HOME): the next run generates it again
    try:
        shutil.copytree(course, partial, dirs_exist_ok=True)
        partial.rename(cached)  # whole or not at all
    except OSError:  # another run's copy came first (or the disk is full): ours is not needed
        shutil.rmtree(partial, ignore_errors=True)
    return notebooks


def generate(solutions: Path, out: Path) -> list[Path]:
    """Run generate_assignment on every ``solutions/*.ipynb`` in a scratch course; copy the results into ``out``
    (created if needed) and return their paths. Raises if nbgrader fails or a notebook goes missing."""
    if not sorted(Path(solutions).glob("*.ipynb")):
        raise FileNotFoundError(f"no notebooks in {solutions}: nothing to release")
    with tempfile.TemporaryDirectory(prefix="loop_lab-release-") as tmp:
        course = Path(tmp)
        notebooks = copy_source(solutions, course)
        c = nbgrader_config(course)
        c.GenerateAssignment.no_database = True
        c.GenerateAssignment.force = True
        c.GenerateAssignment.preprocessors = _preprocessors()
        run_converter(GenerateAssignment, c)  # raises NbGraderException (after logging the reason) when one fails
        released = course / "release" / ASSIGNMENT
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for nb in notebooks:
            generated = released / nb.name
            if not generated.exists():
                raise RuntimeError(f"nbgrader did not produce {nb.name}")
            shutil.copyfile(generated, out / nb.name)
            written.append(out / nb.name)
    return written


def release(root: Path) -> list[Path]:
    """Regenerate ``root/notebooks/`` from ``root/solutions/loop_lab/``: every student notebook rewritten, and any
    notebook there without a solution removed. Returns the notebooks written."""
    root = Path(root)
    target = root / "notebooks"
    with tempfile.TemporaryDirectory(prefix="loop_lab-notebooks-") as tmp:
        fresh = generate(root / "solutions" / ASSIGNMENT, Path(tmp))  # all or nothing: fail before touching notebooks/
        target.mkdir(exist_ok=True)
        names = {path.name for path in fresh}
        for stale in target.glob("*.ipynb"):
            if stale.name not in names:
                stale.unlink()
        for path in fresh:
            shutil.copyfile(path, target / path.name)
    return sorted(target / name for name in names)
