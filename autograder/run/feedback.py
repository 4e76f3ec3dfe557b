"""The feedback page of a task: nbgrader's ``GenerateFeedback`` with an exporter that compiles its templates once.

Why a module: a page is rendered in a forked child of the worker (``autograder.run.task``, a time limit around
nbconvert's markdown), and nbgrader builds a new exporter for every page. What a new exporter compiles is lost with the
child; what the grader compiled before forking its workers (:func:`warm_feedback`) is inherited by every page.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2
from nbconvert.exporters import HTMLExporter

from autograder.channel import Task
from autograder.course.cells import ScrubHiddenTests
from autograder.course.nbgrader_setup import nbgrader_config, run_converter


class _CompiledTemplates(jinja2.BytecodeCache):
    """Jinja's compiled templates, in this process's memory (and so in its forks'), by template and source checksum:
    a changed template is compiled again."""

    def __init__(self) -> None:
        self.compiled: dict[str, tuple[str, bytes]] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        checksum, code = self.compiled.get(bucket.key, ("", b""))
        if code and checksum == bucket.checksum:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.compiled[bucket.key] = (bucket.checksum, bucket.bytecode_to_string())


COMPILED = _CompiledTemplates()


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter (nbgrader's ``HTMLExporter`` settings apply to it) whose Jinja environment keeps its
    compiled templates in :data:`COMPILED`. Each new exporter compiled the feedback templates again: 0.1-0.2 s of
    CPU of a page's 0.2-0.35 in a fork of a warmed process (measured)."""

    def _create_environment(self) -> jinja2.Environment:
        environment = super()._create_environment()
        environment.bytecode_cache = COMPILED
        return environment


def generate_feedback(course: Path, task: Task) -> None:
    """nbgrader's feedback page of the task's (display copy of the) autograded notebook, hidden tests scrubbed."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import GenerateFeedback
    from nbgrader.preprocessors import GetGrades

    c = nbgrader_config(course, student=task.student)
    c.GenerateFeedback.preprocessors = [ScrubHiddenTests, GetGrades, CSSHTMLHeaderPreprocessor]
    c.GenerateFeedback.exporter_class = FeedbackExporter
    run_converter(GenerateFeedback, c)


def warm_feedback() -> None:
    """Render a made-up notebook with the feedback page's exporter, once, in a process that forks the renders (or
    forks the workers that do).

    Each page is rendered in a forked child (``autograder.run.task``), so what nbconvert compiles on first use (its
    regexes, Pygments' lexer, the Jinja templates: :class:`FeedbackExporter`) was compiled again for every task:
    0.8 s of CPU per page cold, 0.5 s in a child of a warmed process, for 0.45 s once (measured). The grader calls it
    before forking its workers when one of them will get a second task."""
    import nbformat
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    converter = GenerateFeedback(coursedir=CourseDirectory(root=os.devnull))  # its exporter settings, no course
    exporter = FeedbackExporter(parent=converter, config=converter.config)
    for preprocessor in (ScrubHiddenTests, CSSHTMLHeaderPreprocessor):
        exporter.register_preprocessor(preprocessor)
    graded = {"nbgrader": {"grade": True, "grade_id": "test", "points": 1, "score": 0, "locked": True}}
    error = nbformat.v4.new_output("error", ename="AssertionError", evalue="wrong",
                                   traceback=["\x1b[0;31mAssertionError\x1b[0m: wrong"])
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# A *title*\n\n- a `list`, $x^2$"),
        nbformat.v4.new_code_cell("import torch\nprint(1)", metadata=graded,
                                  outputs=[nbformat.v4.new_output("stream", name="stdout", text="1\n"), error])])
    exporter.from_notebook_node(nb, resources={"nbgrader": {"notebook": "warm", "score": 0, "max_score": 1,
                                                            "late_penalty": 0}})
