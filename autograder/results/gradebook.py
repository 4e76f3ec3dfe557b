"""The instructor's gradebook (nbgrader's, SQLite or any SQLAlchemy URL): this run's scores and late penalties go in,
and what is read back (with every score given by hand in formgrader) is the points of the class record
(:mod:`.record`): the gradebook is the source of truth for points."""

from __future__ import annotations

from dataclasses import dataclass, field

from autograder.course.cells import in_cell_order
from autograder.layout import ASSIGNMENT

from .journal import kill_point
from .late import Lateness, penalty_points


def store(db_url: str, students: list[str], notebooks: list[str], outcomes: dict,
          lateness: dict[tuple[str, str], Lateness] | None) -> ClassBook:
    """A run's grades into the gradebook: every task's scores, then every notebook's late penalty from its lateness
    and the score stored; what the gradebook then holds, read back."""
    store_scores(db_url, students, notebooks, outcomes)
    return store_penalties(db_url, students, notebooks, lateness)


def store_scores(db_url: str, students: list[str], notebooks: list[str], outcomes: dict) -> None:
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
                tests = outcome.cells
                submission = gb.find_submission_notebook(nb, ASSIGNMENT, student)
                for grade in submission.grades:
                    test = tests.get(grade.name)
                    grade.auto_score = test.auto_score if test else 0.0
                    grade.needs_manual_grade = grade.manual_score is None and bool(test and test.needs_manual_grade)
            gb.db.commit()
            kill_point("gradebook")  # a test's: one student committed, the others not yet


def store_penalties(db_url: str, students: list[str], notebooks: list[str],
                    lateness: dict[tuple[str, str], Lateness] | None) -> ClassBook:
    """Set every submitted notebook's late penalty (nbgrader's ``late_submission_penalty``, in points) from its
    lateness and the raw score the gradebook holds now (hand-graded points included), and each submission's
    timestamp; what the gradebook then holds, read back. Set, never added: a regrade, a re-run or an export after
    grading by hand recomputes the same value; without deadlines every penalty is 0. nbgrader's own export and
    formgrader then show it too."""
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
    return read_class(db_url, students)


def store_duedate(db_url: str, deadlines) -> None:
    """The assignment's due date in the gradebook (nbgrader's ``duedate``, naive UTC), which nbgrader's CSV export
    (``nbgrader_export.csv``) and formgrader show: the course's deadline, else its latest notebook deadline; none
    without deadlines. Each student's extension stays in the lateness files (nbgrader's has none per notebook)."""
    from nbgrader.api import Gradebook

    due = None
    if deadlines is not None:
        due = deadlines.deadline or max(deadlines.notebooks.values(), default=None)
    with Gradebook(db_url) as gb:
        gb.update_or_create_assignment(ASSIGNMENT, duedate=due)  # nbgrader stores it as naive UTC


@dataclass(frozen=True)
class TestFacts:
    """One graded test of the assignment, the same for every student: what the gradebook and the registry say."""

    notebook: str
    name: str  # grade_id
    max_points: float
    written: bool  # a written answer, graded by hand
    hidden: bool  # its cell holds hidden tests: what they decide is shown after the grades are published
    concept: str = ""  # the registry's, "" for a test it does not define
    judged_outside: bool = False  # those only call verify(): the cell's run in the kernel is what the student's own
    #                               notebook shows (autograder.hidden.verifier.judged_outside)


@dataclass
class Entry:
    """One (student, notebook) as the gradebook holds it: each test's autograded points, the scores given by hand
    in formgrader, and the late penalty stored."""

    auto: dict[str, float] = field(default_factory=dict)  # test -> points
    by_hand: dict[str, float] = field(default_factory=dict)  # test -> the score a person gave
    penalty: float = 0.0


@dataclass
class ClassBook:
    """What :meth:`autograder.results.record.ClassRecord.build` reads of the gradebook, in one pass."""

    tests: list[TestFacts]
    duedate: str | None
    people: dict[str, tuple[str, str, str]]  # student -> (first name, last name, email)
    entries: dict[str, dict[str, Entry]]  # student -> notebook -> its entry, every one of both

    @property
    def notebooks(self) -> list[str]:
        return list(dict.fromkeys(t.notebook for t in self.tests))



def read_class(db_url: str, students: list[str]) -> ClassBook:
    """The assignment's graded tests (in cell order, hidden tests found in the instructor's source the gradebook
    keeps) and ``students``' points, as the gradebook holds them now."""
    from nbgrader.api import Gradebook

    from autograder.course.cells import HIDDEN_REGION
    from autograder.hidden.verifier import judged_outside
    from labutils import exercises

    tests, entries, people = [], {}, {}
    with Gradebook(db_url) as gb:
        assignment = gb.find_assignment(ASSIGNMENT)
        for notebook in assignment.notebooks:
            written = {c.name for c in notebook.solution_cells}
            sources = {c.name: c.source or "" for c in notebook.source_cells}
            tests += [TestFacts(notebook.name, cell.name, float(cell.max_score), cell.name in written,
                                bool(HIDDEN_REGION.search(sources.get(cell.name, ""))),
                                exercises.concept(notebook.name, cell.name) or "",
                                judged_outside(sources.get(cell.name, "")))
                      for cell in in_cell_order(notebook.grade_cells, notebook)]
        for student in students:
            person = gb.find_student(student)
            people[student] = (person.first_name or "", person.last_name or "", person.email or "")
            entries[student] = {}
            for notebook in assignment.notebooks:
                sub = gb.find_submission_notebook(notebook.name, ASSIGNMENT, student)
                entries[student][notebook.name] = Entry(
                    auto={g.name: float(g.auto_score or 0.0) for g in sub.grades},
                    by_hand={g.name: float(g.manual_score) for g in sub.grades if g.manual_score is not None},
                    penalty=float(sub.late_submission_penalty or 0.0))
        duedate = assignment.duedate
    return ClassBook(tests, None if duedate is None else str(duedate), people, entries)


def course_url(out) -> str:
    """The gradebook URL of the course ``grade`` left in ``out`` (its ``nbgrader_config.py``)."""
    from autograder.course.formgrader import load_config
    from autograder.course.nbgrader_setup import database_url, prepare_tools

    prepare_tools()
    return database_url(load_config(out).CourseDirectory.db_url)
