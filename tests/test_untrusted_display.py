"""What a student wrote reaches a person's browser only inert (issue 28), checked without a browser: the sanitiser,
the display copy of a graded notebook, the time limit on rendering, the pages' Content-Security-Policy and the
course server's settings. The browser tests (tests/browser/test_hostile.py) open the same attacks in Chromium.
"""

from __future__ import annotations

import json
import time
from html.parser import HTMLParser

import nbformat
import pytest
from nbformat import v4

from autograder import process
from autograder.course import display, formgrader, sanitize

from browser import hostile

SLOW_MATH = "\\begin{x}" * 8000  # 72 KB: nbconvert's markdown takes ~10-25 s on it (quadratic), the took 105


class Live(HTMLParser):
    """Everything in an HTML text that could run or fetch: script-like tags, on* attributes, javascript: URLs,
    sources that are not data: URLs."""

    RUNS = {"script", "iframe", "svg", "style", "object", "embed", "form", "meta", "base", "link", "frame", "math"}

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.RUNS:
            self.found.append(f"<{tag}>")
        for name, value in attrs:
            value = (value or "").strip().lower()
            if name.startswith("on") or name == "srcdoc" or value.startswith("javascript:"):
                self.found.append(f"{tag} {name}")
            if name in ("src", "data", "action", "poster", "background") and not value.startswith("data:image/"):
                self.found.append(f"{tag} {name}={value[:40]}")


def live(html: str) -> list[str]:
    parser = Live()
    parser.feed(html)
    return parser.found


def hostile_notebook() -> nbformat.NotebookNode:
    """A graded notebook as the student's kernel could leave it: the hostile answer, and every output kind."""
    nb = v4.new_notebook(metadata={"title": "</title><script>alert(1)</script>",
                                   "language_info": {"name": "<script>", "pygments_lexer": "<script>"}})
    nb.cells.append(v4.new_markdown_cell(hostile.written_answer(), metadata={"nbgrader": {"grade_id": "answer"}}))
    code = v4.new_code_cell("print(1)", metadata={"tags": ['"><script>alert(1)</script>']})
    p = hostile.payload("out")
    code.outputs = [
        v4.new_output("display_data", data={
            "text/html": f'<img src=x onerror="{p}"><img src="http://{hostile.ATTACKER}/a.png">',
            "application/javascript": p, "image/svg+xml": f'<svg onload="{p}"/>', "text/latex": f"<script>{p}</script>",
            "image/png": f'x" onerror="{p}', "application/vnd.jupyter.widget-view+json": {"model_id": "x"}},
            metadata={"image/png": {"width": f'1" onerror="{p}'}}),
        v4.new_output("display_data", data={"text/markdown": f"[x](javascript:{p}) <img src=x onerror=\"{p}\">"}),
        v4.new_output("execute_result", data={"text/plain": "fine", "image/png": "iVBORw0KGgo="}, execution_count=3),
        v4.new_output("stream", name='"><script>', text="<script>alert(1)</script>"),
        v4.new_output("error", ename="<b>", evalue="<script>", traceback=["<img src=x onerror=alert(1)>"]),
    ]
    nb.cells.append(code)
    nb.cells.append(v4.new_raw_cell(f"<script>{p}</script>", metadata={"raw_mimetype": "text/html"}))
    return nb


def test_clean_html_keeps_text_and_drops_every_live_part():
    dirty = hostile.written_answer()
    assert live(dirty), "the attack does nothing: the test would prove nothing"
    clean = sanitize.clean_html(dirty)
    assert not live(clean), live(clean)
    assert hostile.ANSWER_TEXT in clean and hostile.FORMULA in clean
    images = sanitize.clean_html('<img src="data:image/png;base64,iVBORw0KGgo=" alt="plot">'
                                 '<img src="data:image/svg+xml;base64,PHN2Zz4="><a href="data:text/html,x">d</a>')
    assert '<img src="data:image/png;base64,iVBORw0KGgo="' in images  # an embedded plot is kept
    assert "svg" not in images and "text/html" not in images and "image not shown" in images


def test_the_display_copy_renders_answers_and_keeps_only_inert_outputs():
    """Every field nbconvert's templates put into a page unescaped is checked or dropped; the answer and the formula
    stay readable (as text), and nbconvert turns the copy into a page with nothing live in it."""
    from nbconvert import HTMLExporter

    copy = display.display_copy(hostile_notebook(), render=True)
    answer, code, raw = copy.cells
    assert copy.metadata == display.KERNEL_METADATA and code.metadata == {}
    assert answer.metadata["nbgrader"] == {"grade_id": "answer"}
    assert answer.source.startswith('<div class="looplab-shown">') and "\n" not in answer.source
    assert "$" not in answer.source and "\\" not in answer.source  # nothing for nbconvert's math regexes to scan
    outputs = code.outputs
    assert set(outputs[0].data) == {"text/html", "text/plain"} and outputs[0].metadata == {}
    assert "application/javascript" in outputs[0].data["text/plain"]  # the grader sees that something was dropped
    assert outputs[2].data["image/png"] == "iVBORw0KGgo=" and outputs[2].execution_count == 3
    assert outputs[3].name == "stdout" and raw.cell_type == "markdown"
    page, _ = HTMLExporter(template_name="classic").from_notebook_node(copy)
    body = page.split('<div id="notebook"', 1)[1] if '<div id="notebook"' in page else page
    student = [x for x in live(body) if "cdnjs" not in x and "require" not in x]
    assert not [x for x in student if x not in ("<script>", "<style>", "<meta>", "<link>")], student
    assert f'"{hostile.payload("out")}' not in page and f"<script>{hostile.payload('out')}" not in page
    assert hostile.ANSWER_TEXT in page and "g_t = " in page


def test_markdown_rendered_from_the_inert_block_is_the_same_html_in_linear_time():
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    block = sanitize.inert_block(sanitize.markdown_html("# Title\n\nSome *text* with $a<b$ and `code`\n\n    indented"))
    assert markdown2html_mistune(block).strip() == block
    hostile_block = sanitize.inert_block(sanitize.plain_html(SLOW_MATH))
    t0 = time.monotonic()
    markdown2html_mistune(hostile_block)
    assert time.monotonic() - t0 < 2, "formgrader would freeze on this answer"


def test_rendering_that_takes_too_long_is_cut_and_the_plain_copy_is_fast():
    t0 = time.monotonic()
    assert process.within(1.0, lambda: sanitize.markdown_html(SLOW_MATH)) == "timed out"
    assert time.monotonic() - t0 < 5
    assert process.within(10, lambda: None) == "done"
    assert process.within(10, lambda: 1 / 0) == "failed"
    huge = v4.new_notebook(cells=[v4.new_markdown_cell("x" * 50_000_000 + "<script>")])
    t0 = time.monotonic()
    copy = display.display_copy(huge, render=False)
    assert time.monotonic() - t0 < 5
    assert len(copy.cells[0].source) < 2 * sanitize.DISPLAY_CHARS and "more characters not shown" in copy.cells[0].source
    slow = v4.new_notebook(cells=[v4.new_markdown_cell(SLOW_MATH)])
    noted = display.display_copy(slow, render=False, note=display.TIMED_OUT).cells[0].source
    assert "took too long to render" in noted and "&#92;begin{x}" in noted  # the page says why it is shown as typed


def test_pages_we_write_carry_the_policy_first():
    page = sanitize.with_page_csp("<html><head><script src='x'></script></head><body><header></header></body></html>")
    assert page.index("Content-Security-Policy") < page.index("<script")
    assert sanitize.with_page_csp(page) == page
    with pytest.raises(ValueError, match="no <head>"):
        sanitize.with_page_csp("<p>no head</p>")
    summary = sanitize.markdown_page("s", f"| a |\n|---|\n| {hostile.written_answer().splitlines()[2]} |")
    assert not [x for x in live(summary) if x not in ("<meta>", "<style>")] and "Content-Security-Policy" in summary


def test_the_course_server_settings_name_classes_that_exist():
    """jupyter_server_config.json names the read-only contents, the kernel refusal, the policy; nbgrader_config.py
    makes nbgrader's own autograde refuse. (tests/browser/test_hostile.py starts a server with them.)"""
    import importlib

    settings = json.loads(json.dumps(formgrader.server_config()))["ServerApp"]
    for key in ("contents_manager_class", "kernel_manager_class"):
        module, _, name = settings[key].rpartition(".")
        assert getattr(importlib.import_module(module), name)
    assert settings["terminals_enabled"] is False
    assert settings["tornado_settings"]["headers"]["Content-Security-Policy"] == sanitize.SERVER_CSP
    assert "autograder.course.serving.RefuseAutograde" in formgrader.config_text(formgrader.Path("/c"), "sqlite://")
