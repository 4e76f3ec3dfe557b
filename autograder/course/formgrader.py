"""The nbgrader course a grading run leaves in OUT: what formgrader and nbgrader's own commands open.

After ``python -m autograder grade SUBMISSIONS --out OUT``, OUT is an nbgrader course::

    OUT/nbgrader_config.py               the course (its root is this folder, wherever it is moved; its gradebook)
    OUT/gradebook.db                     the gradebook (unless --db named another)
    OUT/source/loop_lab/, release/...    the assignment as nbgrader generated it
    OUT/submitted/<student>/loop_lab/    what each student handed in
    OUT/autograded/<student>/loop_lab/   the notebooks as graded (outputs, hidden tests): what formgrader shows

so ``jupyter lab --config=jupyter_server_config.json`` (:data:`SERVER_ARGS`) started in OUT opens it in formgrader
(Nbgrader > Formgrader) with every submission and its autograded scores, written answers are scored by hand there, and
:func:`autograder.results.writers.nbgrader_csv.export_grades` (``python -m autograder export --out OUT``) writes every student's
total, manual points included. Grading again keeps the manual scores
(:func:`autograder.results.gradebook.store_scores`).

What a student wrote is shown there only as a display copy (:mod:`.display`), and ``jupyter_server_config.json``
(:func:`server_config`) makes that server read-only for the course, kernel- and terminal-free, with a
Content-Security-Policy (:mod:`.serving`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..layout import ASSIGNMENT, autograded_folder, submitted_folder
from . import display, sanitize
from .nbgrader_setup import nbgrader_config, sqlite_url

CONFIG_NAME = "nbgrader_config.py"
EXPORT_NAME = "nbgrader_export.csv"  # grades.csv is the autograder's own (autograded points per notebook)

SERVER_CONFIG_NAME = "jupyter_server_config.json"  # the Jupyter server's settings for this course
SERVER_ARGS = (f"--config={SERVER_CONFIG_NAME}",)  # `jupyter lab` run in OUT with these serves it safely
_HEADER = f"""\
# Written by `python -m autograder grade`: this folder is an nbgrader course. Start
# `jupyter lab {' '.join(SERVER_ARGS)}` here and open Nbgrader > Formgrader to grade the written
# answers; `python -m autograder export --out .` writes the totals.
import os

c = get_config()  # noqa: F821 (given by traitlets)
HERE = os.path.dirname(os.path.abspath(__file__))  # the course is wherever this file is, moved or copied
"""


def config_text(out: Path, db_url: str) -> str:
    """``nbgrader_config.py`` for the course at ``out``: the settings of :func:`autograder.course.nbgrader_setup.nbgrader_config`,
    its folder and default gradebook named relative to the file. No assignment: nbgrader's commands name theirs."""
    settings = nbgrader_config(out, db_url).CourseDirectory
    lines = [_HEADER]
    for key, value in settings.items():
        if key == "assignment_id":
            continue
        if key == "root":
            value_text = "HERE"
        elif key == "db_url" and value == sqlite_url(Path(out) / "gradebook.db"):
            value_text = '"sqlite:///" + os.path.join(HERE, "gradebook.db")'
        else:
            value_text = repr(value)
        lines.append(f"c.CourseDirectory.{key} = {value_text}")
    lines += ["# nbgrader's own autograde (formgrader's button) would run the students' code unconfined, as you",
              'c.Autograde.sanitize_preprocessors = ["autograder.course.serving.RefuseAutograde"]']
    return "\n".join(lines) + "\n"


def server_config() -> dict:
    """The Jupyter server settings of a course folder (:mod:`.serving`): its contents read-only, no kernel, no
    terminal, every page under :data:`autograder.course.sanitize.SERVER_CSP`."""
    return {"ServerApp": {
        # no kernel, so no language server: jupyter-lsp's autodetection would start node and npm at every start
        "jpserver_extensions": {"jupyter_lsp": False},
        "contents_manager_class": "autograder.course.serving.ReadOnlyCourse",
        "kernel_manager_class": "autograder.course.serving.NoKernels",
        "terminals_enabled": False,
        "tornado_settings": {"headers": {"Content-Security-Policy": sanitize.SERVER_CSP}},
    }}


def write_course(the_plan, outcomes: dict) -> list[str]:
    """Make ``the_plan.out`` the nbgrader course of this run (its gradebook is already written). Returns notes: the
    submissions whose autograded notebook was not available here (a remote worker's), shown as submitted."""
    out = Path(the_plan.out)
    template = Path(the_plan.run.template_db).parent  # release.generate_gradebook's course: source/ and release/
    for folder in ("source", "release"):
        if (template / folder / ASSIGNMENT).is_dir():
            shutil.copytree(template / folder / ASSIGNMENT, out / folder / ASSIGNMENT, dirs_exist_ok=True)
    (out / CONFIG_NAME).write_text(config_text(out, the_plan.db_url))
    (out / SERVER_CONFIG_NAME).write_text(json.dumps(server_config(), indent=1) + "\n")
    notes = []
    for sub in the_plan.submissions:
        submitted, autograded = submitted_folder(out, sub.student), autograded_folder(out, sub.student)
        for folder in (submitted, autograded):
            if folder.exists():  # a new submission replaces the old one entirely (a notebook may be gone)
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
        for nb, path in sub.notebooks.items():
            shutil.copyfile(path, submitted / f"{nb}.ipynb")
        for extra in sub.extra_files:
            target = submitted / extra["name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(extra["path"], target)
        for nb in sub.notebooks:
            outcome = outcomes.get((sub.student, nb))
            if outcome is None or outcome.status != "graded":
                continue
            graded = Path(outcome.autograded or "/nonexistent")  # the journal's copy (autograder.results.journal)
            if graded.is_file():
                shutil.copyfile(graded, autograded / f"{nb}.ipynb")
            else:  # graded on another machine: formgrader shows the notebook as handed in, as typed
                display.write_display_copy(Path(sub.notebooks[nb]), autograded / f"{nb}.ipynb", render=False)
                notes.append(f"{sub.student}/{nb}: formgrader shows the submitted notebook (no outputs): the graded "
                             "one stayed on its worker")
    return notes


def load_config(course: Path):
    """The traitlets ``Config`` of the course at ``course`` (its ``nbgrader_config.py``)."""
    from traitlets.config.loader import PyFileConfigLoader

    path = Path(course) / CONFIG_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: grade into {course} first (python -m autograder grade "
                                f"SUBMISSIONS --out {course})")
    return PyFileConfigLoader(CONFIG_NAME, path=str(Path(course).resolve())).load_config()
