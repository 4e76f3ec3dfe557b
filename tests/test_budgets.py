"""Size abuse (issue 28): one output budget per notebook that errors and tracebacks count toward, and caps on every
student-derived string in a check's message. Fast: messages fed to the grader's executor by hand, no kernel."""

from __future__ import annotations

import linecache

import nbformat
import pytest

from labutils.checks.calling import exception_failure
from labutils.checks.report import MESSAGE_CHARS, Failure, described
from labutils.checks.error_facts import error_facts

pytestmark = pytest.mark.autograder

MB = 1 << 20
HUGE = "x" * (16 * MB)  # one string, referenced by every message: the test itself stays small
HUGE_NAME = "E" * (8 * MB)


def _executor(cells: int):
    from nbclient.client import NotebookClient

    from autograder.run.budget import OutputBudget
    from autograder.run.execute import SandboxedExecute

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"cell_{i}()", id=f"c{i}") for i in range(cells)])
    ex = SandboxedExecute()
    NotebookClient.__init__(ex, nb)
    ex.reset_execution_trackers()
    ex.clear_before_next_output = False  # set by nbclient as each cell starts
    ex.budget = OutputBudget(ex.output_limit, ex.notebook_output_limit)
    return ex, nb


def _message(kind: str, **content) -> dict:
    return {"msg_type": kind, "header": {"msg_type": kind}, "parent_header": {"msg_id": "m"}, "content": content}


def _feed(ex, nb, index: int) -> None:
    """What one hostile cell sends: outputs just under the per-cell limit, then a 16 MB exception with an 8 MB
    class name and a 16 MB traceback."""
    cell = nb.cells[index]
    for _ in range(3):
        ex.process_message(_message("stream", name="stdout", text=HUGE[: ex.output_limit // 3 - 10]), cell, index)
    ex.process_message(_message("display_data", data={"text/plain": HUGE[:1000]}, metadata={}), cell, index)
    ex.process_message(_message("error", ename=HUGE_NAME, evalue=HUGE, traceback=[HUGE, HUGE_NAME, "raise E"]), cell,
                       index)
    reply = {"content": {"status": "error", "ename": HUGE_NAME, "evalue": HUGE, "traceback": [HUGE]}}
    ex.on_cell_executed(cell=cell, cell_index=index, execute_reply=reply)  # nbgrader adds the reply's error if new
    timeout = {"content": {"status": "error", "ename": "CellTimeoutError" + HUGE, "evalue": HUGE, "traceback": [HUGE]}}
    ex.on_cell_executed(cell=cell, cell_index=index, execute_reply=timeout)  # a new one: cut too


def test_errors_and_tracebacks_count_toward_one_notebook_budget():
    ex, nb = _executor(cells=40)
    for index in range(40):
        _feed(ex, nb, index)
    written = len(nbformat.writes(nb))
    assert written < ex.notebook_output_limit + 40 * 25_000, f"{written:,} characters kept"  # was ~2 GB
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert len(errors) == 2 * 40, "an error is cut, never dropped: it is what fails a test cell"
    assert all(len(o.ename) < 300 and len(o.evalue) < 21_000 for o in errors)
    assert "output cut by the grader" in nb.cells[-1].outputs[0].text and ex.budget.notebook_spent


def test_a_cell_over_its_own_limit_is_cut_once():
    ex, nb = _executor(cells=1)
    for _ in range(10):
        ex.process_message(_message("stream", name="stdout", text=HUGE[:MB]), nb.cells[0], 0)
    texts = [o.text for o in nb.cells[0].outputs]
    assert len(texts) == 1 + 1 and sum(len(t) for t in texts) < ex.output_limit + 200
    assert not ex.budget.notebook_spent


def test_widget_messages_count_toward_the_budget(monkeypatch):
    """A comm message's binary buffers are kept as widget state in the notebook's metadata: they count too."""
    from nbclient.client import NotebookClient

    kept = []
    monkeypatch.setattr(NotebookClient, "process_message",
                        lambda self, msg, cell, index: kept.append(sum(len(b) for b in msg.get("buffers", []))))
    ex, nb = _executor(cells=1)
    for i in range(20):
        msg = _message("comm_msg", comm_id=f"w{i}", data={"method": "update", "state": {}, "buffer_paths": [["v"]]})
        msg["buffers"] = [memoryview(HUGE.encode("ascii")[:MB])]
        ex.process_message(msg, nb.cells[0], 0)
    assert 0 < sum(kept) <= ex.output_limit


def test_cleared_output_is_no_longer_counted():
    """A live plot redrawn with clear_output each epoch keeps one plot: it must not use the notebook's budget up."""
    ex, nb = _executor(cells=1)
    for _ in range(20):
        ex.process_message(_message("clear_output", wait=False), nb.cells[0], 0)
        ex.process_message(_message("display_data", data={"image/png": HUGE[:MB]}, metadata={}), nb.cells[0], 0)
    assert len(nb.cells[0].outputs) == 1 and not ex.budget.notebook_spent


def _raiser(tmp_path, source_line: str, exc: BaseException):
    """A student's function defined in a file (so linecache shows its line), raising ``exc``."""
    path = tmp_path / "student.py"
    path.write_text(f"def train(*args):\n    raise EXC  # {source_line}\n")
    namespace = {"EXC": exc}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    linecache.checkcache(str(path))
    return namespace["train"]


def test_a_huge_exception_name_source_line_and_text_are_capped(tmp_path):
    big = type(HUGE_NAME, (Exception,), {})(HUGE)
    fn = _raiser(tmp_path, HUGE, big)
    with pytest.raises(Exception) as caught:
        fn()
    facts = vars(error_facts(fn, caught.value))
    assert all(len(facts[k]) <= 400 for k in ("type", "source", "text")), {k: len(v) for k, v in facts.items()
                                                                           if isinstance(v, str)}
    message = exception_failure("train", fn, caught.value).message
    assert len(message) < 2_000 and message.startswith("train raised EEEE")


def test_a_returned_object_of_a_huge_class_is_named_briefly():
    value = type(HUGE_NAME, (), {})()
    assert len(described(value)) < 400


def test_every_message_is_capped_whatever_it_quotes():
    failure = Failure("exception", "x" * (10 * MB), details="y" * (10 * MB))
    assert len(failure.message) <= MESSAGE_CHARS + 100 and len(failure.details) <= 10 * MESSAGE_CHARS + 100


# --- files a killed run leaves -------------------------------------------------------------------------------------


def test_a_kernel_connection_file_is_written_in_the_runs_scratch_not_tmpdir(tmp_path, monkeypatch):
    """Its HMAC key in TMPDIR outlived a SIGKILLed run (jupyter_client's default is a mkstemp there); in the
    runtime folder the workers keep inside the run's scratch folder, the next run removes it with the dead run's
    folder (tests/test_grade_resume.py kills runs and finds nothing left)."""
    import asyncio
    import tempfile

    from autograder.sandbox.kernels import ZygoteKernelManager

    for name in ("runtime", "tmpdir"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmpdir"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    km = ZygoteKernelManager(kernel_name="python3")
    asyncio.run(km._async_pre_start_kernel())  # writes the connection file; starts nothing
    assert list((tmp_path / "tmpdir").iterdir()) == []
    assert [p.name for p in (tmp_path / "runtime").iterdir()] == [f"kernel-{km.kernel_id}.json"]
    km.cleanup_connection_file()


def test_the_security_page_states_the_budgets_the_code_applies():
    """docs/security.md's numbers are the code's (one definition per fact: a changed limit fails here)."""
    from pathlib import Path

    from autograder.course.submissions import LIMITS
    from autograder.run.execute import SandboxedExecute
    from labutils.quoting import STUDENT_CHARS

    security = (Path(__file__).resolve().parents[1] / "docs" / "security.md").read_text()
    sizes = security.split("**Sizes.**", 1)[1].split("**Leftover files.**", 1)[0]
    for number in (SandboxedExecute.output_limit.default_value, SandboxedExecute.notebook_output_limit.default_value,
                   STUDENT_CHARS, MESSAGE_CHARS, LIMITS.cells):
        assert f"{number:,}" in sizes, number
    assert f"a cell over {LIMITS.cell_bytes >> 20} MB" in sizes and f"over {LIMITS.notebook_bytes >> 20} MB" in sizes
