"""An exercise is written once (docs/adding-an-exercise.md): a tenth exercise added to a scratch copy of the project,
with nothing in autograder/ touched, is released and graded like the others.

The sample is a second normalisation exercise in a notebook 09_sample (judged by the existing check_normalize, so the
test is about the plumbing, not a new check): its registry entry, its notebook's graded cells printed by
``python -m autograder cells``, ``python -m autograder release``, then a class of three graded with the copy's CLI: a
correct student gets every point, one who hands the release in gets none, one who forgets ``/ 255`` loses exactly the
values property.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest

import forked_graders
from autograder_cases import build, doors

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "09_sample"
pytestmark = [pytest.mark.slow, pytest.mark.autograder]

REGISTRY_ENTRY = '''

# --- a sample exercise added by tests/test_sample_exercise.py ---
EXERCISES = EXERCISES + (Exercise("standardise", "09_sample", (Function(
    "standardise", ("images",), "torch.Tensor",
    "uint8 (N, 28, 28) -> float32 (N, 1, 28, 28): `(images / 255 - MEAN) / STD`"),),
    "normalize:check_normalize", (), (Argument("images", (6, 11), "shape_dtype", "how many images (N)"),),
    (Property("shape_dtype", 1, "standardise returns a float32 tensor of shape (N, 1, 28, 28)", ("return_value",),
              evidence="the tensor returned for N images", why="both sizes are always tried"),
     Property("values", 2, "standardise computes (images / 255 - MEAN) / STD", ("values",),
              evidence="every returned value against the formula", why=_FRESH, needs=("shape_dtype",))),
    forbidden=get("normalize").forbidden),)
NOTEBOOKS = NOTEBOOKS + (Notebook("09_sample", 0.5),)
'''
CORRECT = '''def standardise(images):
    """uint8 (N, 28, 28) -> float32 (N, 1, 28, 28), standardised."""
    ### BEGIN SOLUTION
    return ((images.float() / 255 - data.MEAN) / data.STD).unsqueeze(1)
    ### END SOLUTION'''
NO_DIVISION = '''def standardise(images):
    return ((images.float() - data.MEAN) / data.STD).unsqueeze(1)'''


def _sample_notebook(project: Path) -> nbformat.NotebookNode:
    """The instructor's notebook: set-up, the exercise (a solution cell), the check, the generated graded cells."""
    cells = [nbformat.v4.new_markdown_cell("# Sample: standardise the images"),
             nbformat.v4.new_code_cell("from labutils import checks, data"),
             nbformat.v4.new_code_cell(CORRECT, metadata={"nbgrader": {
                 "grade": False, "grade_id": "standardise", "locked": False, "schema_version": 3, "solution": True,
                 "task": False}}),
             nbformat.v4.new_code_cell("print(checks.check_normalize(standardise))")]
    printed = forked_graders.run_real("cells", "standardise", cwd=project, env=_env(project), timeout=120)
    assert printed.returncode == 0, printed.stderr
    nb = nbformat.v4.new_notebook(cells=cells + nbformat.reads(printed.stdout, as_version=4).cells)
    nb.metadata = nbformat.read(project / "solutions" / build.ASSIGNMENT / "00_data_tour.ipynb", as_version=4).metadata
    return nb


def _env(project: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(project))


@pytest.fixture(scope="module")
def sample_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample-exercise")
    project = doors.scratch_project(REPO, root / "project")
    before = {p.relative_to(project): p.read_bytes() for p in (project / "autograder").rglob("*.py")}
    with open(project / "labutils" / "exercises.py", "a") as f:
        f.write(REGISTRY_ENTRY)
    nbformat.write(_sample_notebook(project), project / "solutions" / build.ASSIGNMENT / f"{NOTEBOOK}.ipynb")
    released = forked_graders.run_real("release", cwd=project, env=_env(project), timeout=300)
    assert released.returncode == 0, released.stderr[-3000:]
    release = nbformat.read(project / "notebooks" / f"{NOTEBOOK}.ipynb", as_version=4)
    students = {"correct": build.with_function(release, ("standardise",), CORRECT),
                "stub": release,
                "no-division": build.with_function(release, ("standardise",), NO_DIVISION)}
    for name, nb in students.items():
        (root / "submissions" / name).mkdir(parents=True)
        nbformat.write(nb, root / "submissions" / name / f"{NOTEBOOK}.ipynb")
    graded = forked_graders.run_real("grade", root / "submissions", "--out", root / "out", "-j", 2, cwd=project,
                                     env=_env(project), timeout=900)
    after = {p.relative_to(project): p.read_bytes() for p in (project / "autograder").rglob("*.py")}
    return {"out": root / "out", "graded": graded, "autograder_untouched": before == after}


def _tests(out: Path, student: str) -> dict[str, float]:
    record = json.loads((out / f"{student}.json").read_text())
    return {t["name"]: t["points"] for t in record["tests"] if t["notebook"] == NOTEBOOK}


def test_a_new_exercise_is_graded_with_nothing_in_the_autograder_touched(sample_class):
    assert sample_class["autograder_untouched"]
    out = sample_class["out"]
    assert _tests(out, "correct") == {"test_standardise_shape_dtype": 1, "test_standardise_values": 2}, \
        sample_class["graded"].stderr[-3000:]
    assert _tests(out, "stub") == {"test_standardise_shape_dtype": 0, "test_standardise_values": 0}
    assert _tests(out, "no-division") == {"test_standardise_shape_dtype": 1, "test_standardise_values": 0}
    rows = {(r["student"], r["notebook"]): r["score"] for r in build.read_csv(out / "grades.csv")}
    assert [rows[(s, NOTEBOOK)] for s in ("correct", "stub", "no-division")] == ["3", "0", "1"]
