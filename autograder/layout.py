"""Where things are: the repository, the boundary of the instructor's code, and the folders of one grading task.

Why one module: these paths are read by the release, the sandbox (what a kernel may read), the task runner, the Dask
client and formgrader's course; each once wrote its own copy, and a copy that drifts grades the wrong file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

ASSIGNMENT = "loop_lab"  # the one nbgrader assignment; its notebooks are solutions/loop_lab/NN_name.ipynb
REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE_PACKAGE = "labutils.reference"  # the instructor's side of labutils: never in the handout, never importable
#                                           by a student's code while it is graded


CODE_DIRS = ("labutils", "autograder")  # the grader's code: one version on every Dask worker, part of a result's key


_VERSIONS: dict[str, str] = {}


def code_version(root: Path = REPO_ROOT) -> str:
    """A hash of every ``.py`` file of labutils/ and autograder/ (relative path and content); cached per process."""
    key = str(root)
    if key not in _VERSIONS:
        h = hashlib.sha256()
        for name in CODE_DIRS:
            for path in sorted((root / name).rglob("*.py")):
                if "__pycache__" not in path.parts:
                    h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _VERSIONS[key] = h.hexdigest()[:16]
    return _VERSIONS[key]


def grader_cache_dir() -> Path:
    """What grading runs of the same assignment share (its template course, hidden tests and all):
    ``LOOPLAB_GRADER_CACHE``, default ``~/.cache/looplab-grader``. The grader's alone: never under a folder a kernel
    may read (the data's cache is one, ``labutils.data_files.cache_dir``)."""
    return Path(os.environ.get("LOOPLAB_GRADER_CACHE") or Path.home() / ".cache" / "looplab-grader")


def reference_dir(root: Path = REPO_ROOT) -> Path:
    """The folder of :data:`REFERENCE_PACKAGE` in the repository at ``root``."""
    return root.joinpath(*REFERENCE_PACKAGE.split("."))


def task_dir(work_dir, task_id: str) -> Path:
    """A task's own folder in the run's work folder: its private course, its kernel's HOME and scratch."""
    return Path(work_dir) / "tasks" / task_id


def task_course(work_dir, task_id: str) -> Path:
    """The private nbgrader course a task is graded in (its own copy of the gradebook)."""
    return task_dir(work_dir, task_id) / "course"


def autograded_folder(course: Path, student: str) -> Path:
    """Where nbgrader's autograde leaves a student's graded notebooks in ``course``."""
    return Path(course) / "autograded" / student / ASSIGNMENT


def autograded_notebook(course: Path, student: str, notebook: str) -> Path:
    return autograded_folder(course, student) / f"{notebook}.ipynb"


def submitted_folder(course: Path, student: str) -> Path:
    """Where a student's notebook goes in ``course`` for nbgrader's autograde to find it."""
    return Path(course) / "submitted" / student / ASSIGNMENT


GRADESCOPE_ROOT_ENV = "GRADESCOPE_ROOT"  # where Gradescope's folders are (default /autograder): the tests move it
DEFAULT_GRADESCOPE_ROOT = Path("/autograder")
GRADESCOPE_DEADLINES = "deadlines.toml"  # the course's late policy, at the zip's top (gradescope --deadlines)


@dataclass(frozen=True)
class GradescopeLayout:
    """Gradescope's folders under one root (``/autograder`` there; anywhere in a test)."""

    root: Path

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def submission(self) -> Path:
        return self.root / "submission"

    @property
    def results(self) -> Path:
        return self.root / "results" / "results.json"

    @property
    def metadata(self) -> Path:
        """Gradescope's submission_metadata.json: the submission's time, the due dates, the student's extension."""
        return self.root / "submission_metadata.json"

    @property
    def deadlines(self) -> Path:
        """The course's deadlines.toml, where the zip puts it (``gradescope --deadlines``): its late policy."""
        return self.source / GRADESCOPE_DEADLINES
