"""A grading run's progress: a bar on a terminal, plain lines off one, everything in the log, the slowest at the end."""

from __future__ import annotations

import io
import time

import pytest

from autograder.run.progress import Progress

pytestmark = pytest.mark.autograder


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(stream, log_path) -> Progress:
    progress = Progress({"ann": 2, "bob": 1, "cy": 0}, time.monotonic(), log_path, stream=stream)
    progress.log("grading 3 student(s)")
    progress.done("ann", "01_baseline", "8/8", 3.0)
    progress.done("bob", "05_amp", "ERROR", 40.5)
    progress.done("ann", "08_stretch", "5/6", 12.25)
    progress.close()
    return progress


def test_off_a_terminal_every_line_and_no_bar(tmp_path):
    stream = io.StringIO()
    _run(stream, tmp_path / "grading.log")
    text = stream.getvalue()
    assert "\r" not in text and "student/s" not in text and "it/s" not in text
    lines = text.splitlines()
    assert lines[0] == "grading 3 student(s)"
    assert "[1/3 students, 1/3 notebooks," in lines[1] and "ann/01_baseline: 8/8 in 3.0 s" in lines[1]  # cy: nothing
    assert "[3/3 students, 3/3 notebooks," in lines[3] and "(slowest: bob/05_amp 40.5 s)" in lines[3]
    assert lines[-1] == "slowest notebooks: bob/05_amp 40.5 s, ann/08_stretch 12.2 s, ann/01_baseline 3.0 s"
    assert (tmp_path / "grading.log").read_text() == text


def test_on_a_terminal_a_bar_and_the_notebook_lines_only_in_the_log(tmp_path):
    stream = Terminal()
    _run(stream, tmp_path / "grading.log")
    shown = stream.getvalue()
    assert "\r" in shown and "3/3" in shown and "student" in shown  # tqdm's bar, students done / total
    assert "3/3 notebooks" in shown  # in the bar's postfix
    assert "ann/01_baseline: 8/8" not in shown  # the per-notebook lines stay in the log
    assert "grading 3 student(s)" in shown and "slowest notebooks: bob/05_amp 40.5 s" in shown
    log = (tmp_path / "grading.log").read_text()
    assert "ann/01_baseline: 8/8 in 3.0 s" in log and "slowest notebooks:" in log and "\r" not in log
