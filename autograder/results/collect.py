"""The end of a grading run: every task's scores into the gradebook, lateness assessed once, the class record built
once from the final gradebook, and every writer's files published.

In this order, each step once: the lateness of every handed-in notebook (:func:`.handin.assess_class`), the scores and
the penalties into the gradebook and what it then holds read back (:func:`.gradebook.store`), OUT made the nbgrader
course formgrader opens (:func:`autograder.course.formgrader.write_course`), the record
(:meth:`.record.ClassRecord.build`, saved for the exports), then the files of the writers of :data:`PUBLISHED`, each
written atomically.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from labutils.atomic import write_atomically

from autograder.course.formgrader import write_course

from . import gradebook, handin
from .journal import kill_point
from .outcome import TaskOutcome
from .record import ClassRecord, RunFacts
from .writers import feedback, grades_csv, student_json, summary

PUBLISHED = (grades_csv, student_json, feedback, summary)  # what a run leaves in OUT, in this order


def collect(the_plan, outcomes: dict[tuple[str, str], TaskOutcome], problems: list[str], seconds, say
            ) -> ClassRecord:
    """The run's grades stored, its record built and published; ``the_plan``: :class:`autograder.grade.Plan`;
    ``seconds()``: the run's time so far."""
    students, notebooks = the_plan.students, the_plan.notebooks
    started = datetime.now(timezone.utc) - timedelta(seconds=seconds())  # stands for the collection's time
    lateness = handin.assess_class(the_plan.deadlines, the_plan.submissions, notebooks, started, say)
    gradebook.store_duedate(the_plan.db_url, the_plan.deadlines)  # nbgrader's export and formgrader show it
    book = gradebook.store(the_plan.db_url, students, notebooks, outcomes, lateness)
    for note in write_course(the_plan, outcomes):  # OUT becomes the nbgrader course: formgrader, export
        say(note)
    problems = list(problems) + sorted({f"{x.student}: hand-in time not known, no late penalty applied: {x.problem}"
                                        for x in (lateness or {}).values() if x.problem})
    problems += [f"{o.student}/{o.notebook}: not graded: {'; '.join(o.notes)}"
                 for o in outcomes.values() if o.status == "error"]
    record = ClassRecord.build(book, outcomes, students, lateness, {s.student: s.notes for s in the_plan.submissions},
                               RunFacts(complete=not problems, problems=problems, seconds=seconds()))
    record.save(the_plan.out)
    for name, data in (f for writer in PUBLISHED for f in writer.files(record)):  # made when it is its turn: a
        path = the_plan.out / name                                               # class's pages never all in memory
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, data)
        kill_point(name)  # a test's: killed right after writing this one (AUTOGRADER_KILL_AT=summary.md)
    return record
