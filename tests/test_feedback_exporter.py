"""The feedback page's exporter compiles its Jinja templates once per grader: every page after the warm-up (each a
new nbgrader exporter, in a fork of the worker) takes them compiled from memory, and renders the same page."""

from __future__ import annotations

import re

import jinja2
import pytest

from autograder.run import feedback

pytestmark = pytest.mark.autograder


def test_a_page_after_the_warm_up_compiles_no_template(monkeypatch):
    import nbformat
    from nbconvert.exporters import HTMLExporter
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    feedback.warm_feedback()
    assert feedback.COMPILED.compiled, "the warm-up compiled nothing into the shared cache"
    compiled = []
    real_compile = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):
        compiled.append(name)
        return real_compile(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Lab"), nbformat.v4.new_code_cell("x = 1")])
    resources = {"nbgrader": {"notebook": "lab", "score": 0, "max_score": 1, "late_penalty": 0}}
    pages = []
    for exporter_class in (feedback.FeedbackExporter, HTMLExporter):  # a new exporter, as nbgrader makes per page
        converter = GenerateFeedback(coursedir=CourseDirectory(root="/nonexistent"))
        pages.append(exporter_class(parent=converter, config=converter.config).from_notebook_node(nb, resources)[0])
        if exporter_class is feedback.FeedbackExporter:
            assert compiled == [], compiled
    assert compiled, "nbconvert's own exporter compiled nothing: this test no longer sees a compile"
    strip = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
    assert strip.sub("", pages[0]) == strip.sub("", pages[1])  # the same page (but for nbconvert's random ids)
