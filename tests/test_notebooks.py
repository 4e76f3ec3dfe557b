"""The notebooks: each solution runs top to bottom in the fast mode with every test passing, each student version
fails only where the student has work to do, and notebooks/ is exactly what nbgrader generates from solutions/.

Notebooks execute with nbclient in a kernel of this interpreter (a temporary kernelspec pointing at sys.executable,
so a "python3" kernel of another Python cannot be picked up), ``LAB_MODE=smoke``, two at a time: the executions of
the tests pytest selected start on first use, longest first, and each test waits for its own. Each kernel is forked
from a server that imported torch once (tests/forked_kernels.py: what it preloads, and why a notebook still imports
everything that looks at the kernel itself).
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import forked_kernels
from autograder.layout import ASSIGNMENT
from autograder.course.release import generate
from labutils import amp, exercises

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions" / ASSIGNMENT
STUDENT = ROOT / "notebooks"
NOTEBOOKS = tuple(notebook.id for notebook in exercises.NOTEBOOKS)  # a new exercise's notebook is tested too
CELL_TIMEOUT_S = 300
WORKERS = 2
KERNEL = "loop-lab-tests"
# executed first: the slowest notebooks (measured), so the two workers finish together; one not listed goes first
SLOWEST_FIRST = ("08_stretch", "04_accumulation", "05_amp", "07_crash_resume", "03_clipping", "02_scheduler",
                 "00_data_tour", "01_baseline", "06_checkpointing")

pytestmark = pytest.mark.notebooks


@dataclass
class Executed:
    path: Path
    nb: nbformat.NotebookNode
    seconds: float

    def errors(self) -> list[tuple[int, str, str]]:
        """(cell index, exception name, message) of every cell that raised."""
        return [(i, out.ename, out.evalue) for i, cell in enumerate(self.nb.cells) if cell.cell_type == "code"
                for out in cell.get("outputs", []) if out.output_type == "error"]


# --- executing, two at a time ----------------------------------------------------------------------------------------


def _kernelspec_dir() -> Path:
    """A kernelspec for this very interpreter, on a JUPYTER_PATH of its own."""
    folder = Path(tempfile.mkdtemp(prefix="loop_lab-kernels-"))
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    return folder


def _execute(kernels: type, path: Path, forced_amp: str | None = None) -> Executed:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}}, kernel_manager_class=kernels)
    started = time.perf_counter()
    client.execute(env={**os.environ, **({"LAB_AMP": forced_amp} if forced_amp else {})})
    return Executed(path, nb, time.perf_counter() - started)


# The notebooks that choose a precision (amp="auto": bf16 on a CPU with bf16 instructions, float32 on others) also run
# once with the path this machine's CPU does not pick, forced with LAB_AMP: both are tested on every machine.
AMP_NOTEBOOKS = tuple(name for name in NOTEBOOKS if "amp" in exercises.notebook(name).config)
OTHER_AMP = "off" if amp.autocast_dtype("auto", "cpu") is not None else "bf16"


@pytest.fixture(scope="session")
def executions(request) -> dict[Path, Future]:
    """Start executing every notebook a selected test needs; each test waits for its own."""
    wanted = set()
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if item.module.__name__ == __name__ and callspec and "notebook_id" in callspec.params:
            folder = STUDENT if item.originalname == "test_student_version_fails_only_where_work_is_missing" \
                else SOLUTIONS
            forced = OTHER_AMP if item.originalname == "test_solution_runs_clean_on_the_other_precision" else None
            wanted.add((folder / f"{callspec.params['notebook_id']}.ipynb", forced))
    env = {"LAB_MODE": "smoke", "JUPYTER_PATH": str(_kernelspec_dir()),
           "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // WORKERS))}  # no oversubscription
    saved = {key: os.environ.get(key) for key in (*env, "LAB_ARTIFACTS", "NBGRADER_EXECUTION")}
    os.environ.update(env)
    for key in ("LAB_ARTIFACTS", "NBGRADER_EXECUTION"):  # tests write no artifacts and run as a student would
        os.environ.pop(key, None)
    server = forked_kernels.ForkServer(dict(os.environ))
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    order = {name: rank for rank, name in enumerate(SLOWEST_FIRST)}
    kernels = forked_kernels.kernel_manager_class(server)
    futures = {key: pool.submit(_execute, kernels, *key)
               for key in sorted(wanted, key=lambda k: (order.get(k[0].stem, -1), k[0].parent != SOLUTIONS, k[1] or ""))}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    server.close()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# --- what the notebooks must contain ---------------------------------------------------------------------------------


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _is_test(cell) -> bool:
    return cell.cell_type == "code" and _nbgrader(cell).get("grade") and not _nbgrader(cell).get("solution")


def test_the_assignment_has_the_registry_notebooks():
    """Check that solutions/ and notebooks/ hold exactly the notebooks of the registry (labutils.exercises)"""
    assert sorted(p.stem for p in SOLUTIONS.glob("*.ipynb")) == list(NOTEBOOKS)
    assert sorted(p.name for p in STUDENT.iterdir()) == [f"{name}.ipynb" for name in NOTEBOOKS]
    assert [p.name for p in SOLUTIONS.iterdir() if p.suffix != ".ipynb"] == []  # nbgrader would release it


@pytest.mark.parametrize("notebook_id", NOTEBOOKS)
def test_solution_structure(notebook_id):
    """Check that every graded test opens with a docstring, has a heading with its points above it, and runs a
    hidden verify for the notebook"""
    nb = nbformat.read(SOLUTIONS / f"{notebook_id}.ipynb", as_version=4)
    tests = [i for i, cell in enumerate(nb.cells) if _is_test(cell)]
    assert tests, "no graded test cell"
    for i in tests:
        cell, heading = nb.cells[i], nb.cells[i - 1]
        points = _nbgrader(cell)["points"]
        assert isinstance(ast.parse(cell.source).body[0].value.value, str), f"cell {i}: no docstring first"
        assert len(cell.source.splitlines()[0]) <= 120 and cell.source.startswith('"""')
        assert heading.cell_type == "markdown" and f"({points} point" in heading.source, f"cell {i - 1}"
        assert f'verify("{notebook_id}", ' in cell.source and "### BEGIN HIDDEN TESTS" in cell.source
    assert "import *" not in "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "lesson.start(" in nb.cells[2].source or "lesson.start(" in nb.cells[3].source  # config printed at top


# --- executing -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("notebook_id", NOTEBOOKS)
def test_solution_runs_clean(notebook_id, executions, record_property):
    """Check that the solution notebook runs top to bottom in the fast mode, every test passing"""
    done = executions[SOLUTIONS / f"{notebook_id}.ipynb", None].result()
    record_property("seconds", round(done.seconds, 1))  # how fast is a benchmark's business, not a test's
    assert done.errors() == [], "\n".join(f"cell {i}: {name}: {msg[:2000]}" for i, name, msg in done.errors())


@pytest.mark.slow
@pytest.mark.parametrize("notebook_id", AMP_NOTEBOOKS)
def test_solution_runs_clean_on_the_other_precision(notebook_id, executions):
    """Check that a notebook with amp="auto" also runs clean on the precision this CPU would not pick"""
    done = executions[SOLUTIONS / f"{notebook_id}.ipynb", OTHER_AMP].result()
    assert done.errors() == [], "\n".join(f"cell {i}: {name}: {msg[:2000]}" for i, name, msg in done.errors())
    printed = "".join(out.get("text", "") for cell in done.nb.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    assert re.search(rf"amp\s*= '{OTHER_AMP}'", printed), "the configuration printed is not the forced precision"


# A warning a notebook means to show would be listed here with the reason; there is none. tqdm's "IProgress not
# found" (ipywidgets missing: every notebook opened with it) or a deprecated torch call would appear in a cell's output.
INTENDED_WARNINGS: tuple[str, ...] = ()
WARNING_LINE = re.compile(r"\b[A-Z]\w*Warning\b")


def unintended_warnings(nb) -> list[str]:
    """The lines of every cell's printed output (stdout, stderr, error) that carry a warning nobody meant to show."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else ():
            text = out.get("text", "") if out.output_type == "stream" else "\n".join(out.get("traceback", []))
            found += [f"cell {i}: {line.strip()[:300]}" for line in text.splitlines()
                      if WARNING_LINE.search(line) and not any(w in line for w in INTENDED_WARNINGS)]
    return found


# What a Jupyter application logs on the terminal beside the notebook (nbconvert's, the kernel's own): "[IPKernelApp]
# WARNING | Kernel is running over TCP without encryption" printed at every start until the handout configured it.
LOG_WARNING = re.compile(r"^\[\w+\] (WARNING|ERROR|CRITICAL)\b")


def terminal_warnings(text: str) -> list[str]:
    """The lines of a Jupyter command's terminal output that carry a warning nobody meant to show."""
    return [line.strip()[:300] for line in text.splitlines() if (LOG_WARNING.search(line) or WARNING_LINE.search(line))
            and not any(w in line for w in INTENDED_WARNINGS)]


def test_warnings_in_outputs_are_found():
    """Check that the warning detector sees tqdm's widget warning as the notebooks once printed it, and not prose"""
    cell = nbformat.v4.new_code_cell("x")
    printed = ("/venv/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please update jupyter and ipywidgets.\n"
               "  from .autonotebook import tqdm as notebook_tqdm\n")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=printed),
                    nbformat.v4.new_output("stream", name="stdout", text="no warnings here; warnings are errors\n")]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("UserWarning in prose"), cell])
    assert unintended_warnings(nb) == ["cell 1: /venv/tqdm/auto.py:21: TqdmWarning: IProgress not found. Please "
                                       "update jupyter and ipywidgets."]
    terminal = ("[NbConvertApp] Converting notebook 00_data_tour.ipynb to notebook\n"
                "[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All communication ...\n"
                "[NbConvertApp] Writing 856 bytes to out.ipynb\n")
    assert terminal_warnings(terminal) == ["[IPKernelApp] WARNING | Kernel is running over TCP without encryption. "
                                           "All communication ..."]


@pytest.mark.slow
@pytest.mark.parametrize("notebook_id", NOTEBOOKS)
def test_solution_prints_no_warning(notebook_id, executions):
    """Check that no cell of the solution notebook prints a warning the lab did not mean to show (issue 30)"""
    done = executions[SOLUTIONS / f"{notebook_id}.ipynb", None].result()
    assert unintended_warnings(done.nb) == []


def _bound_names(source: str) -> set[str]:
    """Names a cell binds at top level (assignments, defs, imports)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@pytest.mark.slow
@pytest.mark.parametrize("notebook_id", NOTEBOOKS)
def test_student_version_fails_only_where_work_is_missing(notebook_id, executions):
    """Check that the student notebook runs with only the unwritten exercises failing, and every graded test fails"""
    done = executions[STUDENT / f"{notebook_id}.ipynb", None].result()
    cells = done.nb.cells
    failed: set[int] = set()
    for i, name, message in done.errors():
        where = f"cell {i} ({cells[i].source.splitlines()[0][:60]!r}): {name}: {message[:500]}"
        if name == "AssertionError" and _is_test(cells[i]):
            assert "NotImplementedError" in message, f"a graded test failed for another reason: {where}"
        elif name == "NameError":  # a name the failed cell above should have bound
            missing = message.split("'")[1]
            assert any(missing in _bound_names(cells[j].source) for j in failed), f"not a consequence: {where}"
        else:
            assert name in ("NotImplementedError", "AssertionError"), f"unexpected failure: {where}"
        failed.add(i)
    untested = [i for i, cell in enumerate(cells) if _is_test(cell) and i not in failed]
    assert untested == [], f"graded tests that pass on the unmodified stubs: cells {untested}"
    assert all(cell.execution_count is not None for cell in cells if cell.cell_type == "code"), "a cell did not run"


# --- the release -----------------------------------------------------------------------------------------------------


def _comparable(nb) -> list[dict]:
    return [{"id": c.get("id"), "cell_type": c.cell_type, "source": c.source, "metadata": dict(c.metadata)}
            for c in nb.cells]


def test_release_matches_what_nbgrader_generates(tmp_path):
    """Check that notebooks/ is exactly what nbgrader generate_assignment makes of solutions/, outputs cleared"""
    generate(SOLUTIONS, tmp_path)
    for name in NOTEBOOKS:
        committed = nbformat.read(STUDENT / f"{name}.ipynb", as_version=4)
        fresh = nbformat.read(tmp_path / f"{name}.ipynb", as_version=4)
        assert _comparable(committed) == _comparable(fresh), (
            f"notebooks/{name}.ipynb differs from solutions/: run `python -m autograder release` and commit")
        assert committed.metadata == fresh.metadata
        code = [c for c in committed.cells if c.cell_type == "code"]
        assert all(c.outputs == [] and c.execution_count is None for c in code), f"{name}: outputs not cleared"


def test_student_notebooks_hide_solutions_and_name_their_stubs():
    """Check that no solution or hidden test reaches a student, and every stub names its lab and function"""
    for name in NOTEBOOKS:
        lab = int(name[:2])
        nb = nbformat.read(STUDENT / f"{name}.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "autograder"):
            assert marker not in text, f"{name}: {marker!r} reached the student version"
        for cell in nb.cells:
            if cell.cell_type == "code" and _nbgrader(cell).get("solution"):
                fn = ast.parse(cell.source).body[0].name
                assert f'raise NotImplementedError("Lab {lab}: {fn}")' in cell.source, f"{name}: stub of {fn}"
