"""The instructor's gradebook (nbgrader's, SQLite or any SQLAlchemy URL): this run's scores go in, and what is read back
(with every score given by hand in formgrader) is what grades.csv and the students' JSON say."""

from __future__ import annotations

from autograder.course.cells import in_cell_order
from autograder.layout import ASSIGNMENT

from .journal import kill_point
from .late import Lateness, penalty_points, read_saved
from .record import NotebookGrade


def store_in_gradebook(db_url: str, students: list[str], notebooks: list[str], outcomes: dict) -> None:
    """Write every student's autograded scores into the gradebook; missing or ungradable notebooks score 0.

    A score given by hand (formgrader's manual_score, on a written answer or overriding a test) stands when the
    class is graded again: the cell is not flagged for grading by hand a second time."""
    import warnings

    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", category=SAWarning)  # nbgrader's own session use is noisy, not wrong
    with Gradebook(db_url) as gb:
        for student in students:
            gb.update_or_create_student(student)
            gb.update_or_create_submission(ASSIGNMENT, student)
            for nb in notebooks:
                outcome = outcomes[(student, nb)]
                tests = outcome.cells()
                submission = gb.find_submission_notebook(nb, ASSIGNMENT, student)
                for grade in submission.grades:
                    test = tests.get(grade.name)
                    grade.auto_score = test.auto_score if test else 0.0
                    grade.needs_manual_grade = grade.manual_score is None and bool(test and test.needs_manual_grade)
            gb.db.commit()
            kill_point("gradebook")  # a test's: one student committed, the others not yet


def store_penalties(db_url: str, students: list[str], notebooks: list[str],
                    lateness: dict[tuple[str, str], Lateness] | None) -> None:
    """Set every submitted notebook's late penalty (nbgrader's ``late_submission_penalty``, in points) from its
    lateness and the raw score the gradebook holds now (hand-graded points included), and each submission's
    timestamp. Set, never added: a regrade, a re-run or an export after grading by hand recomputes the same value;
    without deadlines every penalty is 0. nbgrader's own export and formgrader then show it too."""
    from datetime import datetime

    from nbgrader.api import Gradebook

    lateness = lateness or {}
    with Gradebook(db_url) as gb:
        for student in students:
            submission = gb.find_submission(ASSIGNMENT, student)
            times = [x.submitted for nb in notebooks if (x := lateness.get((student, nb))) and x.submitted]
            submission.timestamp = datetime.fromisoformat(max(times)).replace(tzinfo=None) if times else None
            for nb in notebooks:
                sub = gb.find_submission_notebook(nb, ASSIGNMENT, student)
                sub.late_submission_penalty = penalty_points(lateness.get((student, nb)), float(sub.score or 0.0),
                                                             float(sub.max_score or 0.0))
        gb.db.commit()


def read_rows(db_url: str, students: list[str], notebooks: list[str]) -> tuple[list[NotebookGrade], dict, dict]:
    """(a :class:`NotebookGrade` per student and notebook, {(notebook, test): (max points, graded by hand?)} in cell
    order, {(student, notebook, test): the score given by hand in formgrader}) read back from the gradebook."""
    from nbgrader.api import Gradebook

    rows, test_max, by_hand = [], {}, {}
    with Gradebook(db_url) as gb:
        for nb in notebooks:
            notebook = gb.find_notebook(nb, ASSIGNMENT)
            written = {c.name for c in notebook.solution_cells}
            for cell in in_cell_order(notebook.grade_cells, notebook):
                test_max[(nb, cell.name)] = (float(cell.max_score), cell.name in written)
        for student in students:
            for nb in notebooks:
                sub = gb.find_submission_notebook(nb, ASSIGNMENT, student)
                by_hand.update({(student, nb, g.name): float(g.manual_score) for g in sub.grades
                                if g.manual_score is not None})
                raw, penalty = float(sub.score or 0.0), float(sub.late_submission_penalty or 0.0)
                rows.append(NotebookGrade(student=student, notebook=nb, score=max(0.0, raw - penalty),
                                          max_score=float(sub.max_score or 0.0), raw_score=raw, late_penalty=penalty))
    return rows, test_max, by_hand



def class_rows(db_url: str) -> tuple[list[str], list[str], list[NotebookGrade]]:
    """(the students, the notebooks, :func:`read_rows`'s rows) of every student the gradebook holds: what an
    export reads after grading, hand-graded points included."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        students = sorted(s.id for s in gb.students)
        notebooks = [n.name for n in gb.find_assignment(ASSIGNMENT).notebooks]
    return students, notebooks, read_rows(db_url, students, notebooks)[0]


def refresh_penalties(out) -> str:
    """Recompute the late penalties of the course ``grade`` left in ``out`` from its lateness (``.lateness.json``)
    and the gradebook's current scores (a hand grade given since counts); its gradebook URL. What every export does
    first."""
    from autograder.course.formgrader import load_config
    from autograder.course.nbgrader_setup import database_url, prepare_tools

    prepare_tools()
    db_url = database_url(load_config(out).CourseDirectory.db_url)
    students, notebooks, _ = class_rows(db_url)
    store_penalties(db_url, students, notebooks, read_saved(out))
    return db_url
