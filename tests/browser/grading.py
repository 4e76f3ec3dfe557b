"""A tiny class, graded once per test session: what the feedback and formgrader tests open.

Three students, each submitting lab 1 as a student would: the released notebook (notebooks/, no solution markers, no
hidden tests) with the exercise cells filled in from the mutant corpus the way tests/autograder_cases/build.py does,
and the written question answered. ``alice`` is correct; ``bob`` calls ``zero_grad()`` between ``backward()`` and
``step()``, the mistake the student journey types in the browser; ``dan`` hands the release in as it is (the stubs).
The browser tests' session class adds ``mallory`` (:data:`HOSTILE`), whose correct code and written answer carry
the attacks of :mod:`.hostile` (issue 28): every page that shows them must show them inert.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import nbformat

import mutants
from autograder.layout import ASSIGNMENT
from autograder_cases import build
from browser import hostile

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "01_baseline"
VARIANTS = {v.name: v for v in mutants.VARIANTS}
BUGGY = VARIANTS["zero_grad_before_step"]
STUDENTS = {  # student -> (train_one_epoch, evaluate, written answer)
    "alice": ("baseline_canonical", "evaluate_canonical",
              "The step would see zeroed gradients and nothing would be learned; without zero_grad() the gradients "
              "of all batches add up and every step follows a stale running sum."),
    "bob": ("zero_grad_before_step", "evaluate_canonical", "Training would be slower, I think."),
    "dan": (None, None, None),  # nothing written: the release's stubs
}
HOSTILE = "mallory"  # correct code, and script in her answer, her outputs and her function's output (.hostile)
ANSWER_ID = "answer_zero_grad_order"  # the written answer's grade_id in 01_baseline
GRADE_ARGS = ("-j", "2", "--timeout-cell", "60", "--timeout-notebook", "120")


@dataclass
class GradedClass:
    submissions: Path
    out: Path
    proc: subprocess.CompletedProcess

    def feedback(self, student: str) -> Path:
        return self.out / "feedback" / student / f"{NOTEBOOK}.html"

    def tests(self, student: str) -> list[dict]:
        """The student's 01_baseline tests as grade reported them (<student>.json), in cell order."""
        record = json.loads((self.out / f"{student}.json").read_text())
        return [t for t in record["tests"] if t["notebook"] == NOTEBOOK]

    def autograded(self, student: str) -> tuple[float, float]:
        """(points, maximum) of the student's autograded 01_baseline tests: the scores are the graders' (the
        notebook's test cells and points change as the lab does), these tests check where they are shown."""
        auto = [t for t in self.tests(student) if t["kind"] == "auto"]
        return sum(t["points"] for t in auto), sum(t["max_points"] for t in auto)


def submission(student: str) -> nbformat.NotebookNode:
    if student == HOSTILE:
        return hostile_submission()
    train, evaluate, answer = STUDENTS[student]
    nb = nbformat.read(REPO / "notebooks" / f"{NOTEBOOK}.ipynb", as_version=4)
    if train is None:
        return nb
    nb = build.with_function(nb, ("train_one_epoch",), mutants.source(VARIANTS[train]))
    nb = build.with_function(nb, ("evaluate",), mutants.source(VARIANTS[evaluate]))
    nb.cells[build.test_cell_index(nb, ANSWER_ID)].source = answer
    return nb


def hostile_submission() -> nbformat.NotebookNode:
    """alice's correct notebook, with :mod:`.hostile`'s answer, an output cell after the training function, and a
    training function that shows HTML wherever it runs (the graded tests included)."""
    nb = submission("alice")
    correct = mutants.source(VARIANTS["baseline_canonical"])
    renamed = correct.replace("def train_one_epoch(", "def _looplab_train_one_epoch(", 1)
    nb = build.with_function(nb, ("train_one_epoch",), renamed + "\n\n\n" + hostile.function_wrapper())
    nb = build.insert_cell(nb, "train_one_epoch", hostile.output_cell(), after=True)
    nb.cells[build.test_cell_index(nb, ANSWER_ID)].source = hostile.written_answer()
    return nb


def write_submissions(dest: Path, students=tuple(STUDENTS)) -> Path:
    for student in students:
        (dest / student).mkdir(parents=True)
        nbformat.write(submission(student), dest / student / f"{NOTEBOOK}.ipynb")
    return dest


def grade(cli, submissions: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``python -m autograder grade SUBMISSIONS --out OUT`` as an instructor runs it (``cli``: the suite's
    ``autograder_cli``, tests/conftest.py)."""
    return cli("grade", submissions, "--out", out, *GRADE_ARGS, *extra)


def export(cli, course: Path, dest: Path) -> dict[str, float]:
    """``python -m autograder export`` (``cli``: as in :func:`grade`): student -> the assignment's score (autograded
    + manual)."""
    proc = cli("export", "--out", course, "--to", dest, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(dest, newline="") as f:
        return {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)
                if row["assignment"] == ASSIGNMENT}


def copy_of(graded: GradedClass, dest: Path) -> GradedClass:
    """The graded class (submissions and OUT, the course) copied to ``dest``: a test that changes the course (a
    score given by hand, a late submission) changes its own copy (nbgrader_config.py names the folder it sits in)."""
    shutil.copytree(graded.submissions, dest / "submissions")
    shutil.copytree(graded.out, dest / "out")
    return GradedClass(dest / "submissions", dest / "out", graded.proc)


SESSION_CLASS = (*STUDENTS, HOSTILE)  # the class graded once per test session (tests/conftest.py: tiny_class)


def shared_class(folder: Path, cli, students=SESSION_CLASS) -> GradedClass:
    """The class graded into ``folder`` once (with ``cli``, as :func:`grade`): the first caller (an xdist worker,
    holding the lock) grades it, the others read what it left. A failed grading is kept too, so every caller fails
    with the same stderr."""
    from filelock import FileLock

    done = folder / "graded.json"
    with FileLock(str(folder) + ".lock"):
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            submissions = write_submissions(folder / "submissions", students)
            proc = grade(cli, submissions, folder / "out")
            done.write_text(json.dumps({"args": [str(a) for a in proc.args], "returncode": proc.returncode,
                                        "stdout": proc.stdout, "stderr": proc.stderr}))
    saved = json.loads(done.read_text())
    proc = subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"], saved["stderr"])
    if proc.returncode != 0:
        raise RuntimeError(f"grading the tiny class failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return GradedClass(folder / "submissions", folder / "out", proc)


def hidden_test_lines(notebook: str = NOTEBOOK) -> list[str]:
    """Every line between ### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS in the solutions' notebook."""
    nb = nbformat.read(REPO / "solutions" / "loop_lab" / f"{notebook}.ipynb", as_version=4)
    blocks = [m.group(1) for cell in nb.cells for m in
              re.finditer(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S)]
    return sorted({line.strip() for block in blocks for line in block.splitlines() if line.strip()})
