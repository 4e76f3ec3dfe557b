"""What ``python -m autograder grade`` leaves in OUT is an nbgrader course (autograder/course/formgrader.py): formgrader's
own API lists every submission with its autograded score, a written answer scored by hand the way formgrader saves it
is in ``python -m autograder export``, and grading the class again (a late submission came in) keeps that score.

The class is the browser tests' tiny one, graded once per test run (tests/conftest.py: tiny_class): alice correct,
bob with the zero_grad bug, dan the release's stubs, mallory the attacker; their autograded points are read from what
grade reported (the lab's tests and points change with the lab).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest

import forked_graders
from browser.grading import (ANSWER_ID, ASSIGNMENT, NOTEBOOK, SESSION_CLASS, copy_of, export, grade,
                             submission)

MANUAL_POINTS = 1.0  # bob's written answer, scored by hand


def formgrader_api(course: Path):
    """nbgrader's NbGraderAPI on the course, as formgrader builds it (from the folder's nbgrader_config.py)."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def score_by_hand(course: Path, student: str, grade_id: str, points: float) -> None:
    """What formgrader's PUT /formgrader/api/grade/<id> does with a score typed into a cell's box."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade_row = gb.find_grade(grade_id, NOTEBOOK, ASSIGNMENT, student)
        grade_row.manual_score = points
        grade_row.needs_manual_grade = False
        gb.db.commit()


def needs_manual_grade(course: Path, student: str) -> bool:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return gb.find_grade(ANSWER_ID, NOTEBOOK, ASSIGNMENT, student).needs_manual_grade


@pytest.mark.slow
def test_grade_leaves_a_course_whose_manual_grades_are_exported_and_kept(tiny_class, tmp_path, autograder_cli):
    graded = copy_of(tiny_class, tmp_path / "class")  # the session's class: this test changes its own copy
    course = graded.out
    autograded = {s: graded.autograded(s)[0] for s in SESSION_CLASS}  # the graders' scores
    assert autograded["alice"] == graded.autograded("alice")[1] > autograded["bob"]  # bob's zero_grad bug costs
    assert autograded["dan"] == 0  # the release handed in as it is
    for path in ("nbgrader_config.py", "gradebook.db", f"source/{ASSIGNMENT}/{NOTEBOOK}.ipynb",
                 f"submitted/bob/{ASSIGNMENT}/{NOTEBOOK}.ipynb", f"autograded/bob/{ASSIGNMENT}/{NOTEBOOK}.ipynb"):
        assert (course / path).exists(), path

    api = formgrader_api(course)
    listed = {s["student"]: s for s in api.get_notebook_submissions(ASSIGNMENT, NOTEBOOK)}
    assert {s: listed[s]["score"] for s in listed} == autograded
    assert listed["alice"]["needs_manual_grade"] and listed["bob"]["needs_manual_grade"]  # answers a person grades
    assert not listed["dan"]["needs_manual_grade"]  # no answer written: nbgrader scores it 0 by itself
    assert export(autograder_cli, course, tmp_path / "export-0.csv") == autograded

    score_by_hand(course, "bob", ANSWER_ID, MANUAL_POINTS)
    assert export(autograder_cli, course, tmp_path / "export-1.csv")["bob"] == autograded["bob"] + MANUAL_POINTS

    late = graded.submissions / "carol"  # a late submission: the class is graded again
    late.mkdir()
    nbformat.write(submission("alice"), late / f"{NOTEBOOK}.ipynb")
    proc = grade(autograder_cli, graded.submissions, graded.out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = export(autograder_cli, course, tmp_path / "export-2.csv")
    assert exported == {**autograded, "bob": autograded["bob"] + MANUAL_POINTS, "carol": autograded["alice"]}
    assert not needs_manual_grade(course, "bob"), "bob's answer, graded by hand, is flagged again"
    assert needs_manual_grade(course, "alice") and needs_manual_grade(course, "carol")
    assert (course / f"autograded/carol/{ASSIGNMENT}/{NOTEBOOK}.ipynb").exists()
    assert len(formgrader_api(course).get_notebook_submissions(ASSIGNMENT, NOTEBOOK)) == len(autograded) + 1
    bob = json.loads((course / "bob.json").read_text())  # the reports read the score given by hand too
    answer = next(t for t in bob["tests"] if t["name"] == ANSWER_ID)
    assert (answer["points"], bob["score"]) == (MANUAL_POINTS, autograded["bob"] + MANUAL_POINTS)
    assert "1 graded" in (course / "summary.md").read_text()


def test_the_course_config_follows_the_folder(tmp_path):
    """nbgrader_config.py names its folder and gradebook relative to itself: a course moved elsewhere still opens."""
    from autograder.course.formgrader import config_text, load_config

    (tmp_path / "a").mkdir()
    text = config_text(tmp_path / "a", f"sqlite:///{tmp_path}/a/gradebook.db")
    (tmp_path / "a" / "nbgrader_config.py").write_text(text)
    os.rename(tmp_path / "a", tmp_path / "b")
    config = load_config(tmp_path / "b")
    assert config.CourseDirectory.root == str(tmp_path / "b")
    assert config.CourseDirectory.db_url == f"sqlite:///{tmp_path}/b/gradebook.db"
    assert "postgresql://h/db" in config_text(tmp_path, "postgresql://h/db")


def test_export_without_a_course_says_what_to_do(tmp_path):
    proc = forked_graders.run_real("export", "--out", tmp_path, timeout=120)  # the command line's start-up, for real
    assert proc.returncode == 2 and "grade into" in proc.stderr
