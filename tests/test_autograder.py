"""The autograder end to end, and its parts: submissions, sandbox, recheck, reports, handout.

The big one, ``test_grade_the_class``, releases the notebooks, builds a class of sample submissions from the
solutions, the release and the mutant corpus plus one student per pathological case (tests/autograder_cases), grades
it with ``python -m autograder grade -j 2`` and compares grades.csv with the exact expected rows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.hidden import verifier
from autograder.sandbox import policy
from autograder.layout import REFERENCE_PACKAGE
from autograder.course.submissions import SubmissionsError, check_notebook, discover
from labutils import exercises

import mutants
from autograder_cases import build, toy

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions" / "loop_lab"
PYTHON = sys.executable

pytestmark = pytest.mark.autograder
needs_solutions = pytest.mark.skipif(len(list(SOLUTIONS.glob("*.ipynb"))) < 9, reason="solutions/ not complete")
needs_landlock = pytest.mark.skipif(policy.landlock_abi() < 1, reason="this kernel has no Landlock")
# the class's hang cases each wait out this limit twice (the training cell, then the test cell), each wait holding one
# of the run's two workers idle: 15 s is over ten times what an honest notebook's cells took in all (1.3 s at most in
# a class run's timings on the AVX2 machine)
CELL_LIMIT_S = 15


def released_notebooks(tmp: Path) -> Path:
    """``autograder.course.release.release`` on a scratch copy of the solutions (the repo's notebooks/ is left alone)."""
    from autograder.course.release import release

    root = tmp / "release-root"
    shutil.copytree(SOLUTIONS, root / "solutions" / "loop_lab")
    paths = release(root)
    assert [p.stem for p in paths] == sorted(p.stem for p in SOLUTIONS.glob("*.ipynb"))
    return root / "notebooks"


# --- the whole class --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory, autograder_cli):
    tmp = tmp_path_factory.mktemp("class")
    out = tmp / "out"
    # the release's notebooks are the committed notebooks/: test_notebooks checks they are what release generates
    students = build.build_class(SOLUTIONS, REPO / "notebooks", REPO, out)
    build.write_class(students, tmp / "submissions")
    proc = autograder_cli("grade", tmp / "submissions", "--out", out, "-j", 2, "--timeout-cell", CELL_LIMIT_S,
                          "--timeout-notebook", 90, timeout=900)
    print(proc.stderr[-6000:])
    return {"students": students, "out": out, "proc": proc,
            "tests": build.load_tests(SOLUTIONS)}


@pytest.mark.slow
@needs_solutions
def test_grade_the_class_exact_csv(graded_class):
    proc, out = graded_class["proc"], graded_class["out"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    expected = build.expected_grades(graded_class["students"], graded_class["tests"])
    got = build.read_csv(out / "grades.csv")
    assert list(got[0]) == ["student", "notebook", "score", "max_score"]
    mismatches = [(e, g) for e, g in zip(expected, got) if e != g]
    assert not mismatches and len(got) == len(expected), "\n".join(f"expected {e}\n     got {g}" for e, g in
                                                                   mismatches[:20])


@pytest.mark.slow
@needs_solutions
def test_grade_the_class_messages_and_notes(graded_class):
    out = graded_class["out"]
    problems = []
    for st in graded_class["students"]:
        record = build.read_json(out / f"{st.name}.json")
        assert record["graded"], st.name
        tests = {(t["notebook"], t["name"]): t for t in record["tests"]}
        assert {"notebook", "name", "points", "max_points", "passed", "message"} <= set(record["tests"][0])
        for key in st.failing:
            if tests[key]["passed"] is not False:
                problems.append(f"{st.name}: {key} should fail, got {tests[key]}")
        for key, piece in st.messages.items():
            if piece not in tests[key]["message"]:
                problems.append(f"{st.name}: {key} message lacks {piece!r}: {tests[key]['message'][:300]!r}")
        if st.note:
            notes = " | ".join(record["notes"] + [n for nb in record["notebooks"].values() for n in nb["notes"]])
            if st.note not in notes:
                problems.append(f"{st.name}: no note with {st.note!r}: {notes[:300]!r}")
        for nb in st.unreadable:
            if record["notebooks"][nb]["status"] != "unreadable":
                problems.append(f"{st.name}: {nb} should be unreadable, got {record['notebooks'][nb]['status']}")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@needs_solutions
def test_grade_the_class_feedback_summary_and_isolation(graded_class):
    out = graded_class["out"]
    solutions_feedback = sorted((out / "feedback" / "solutions").glob("*.html"))
    assert len(solutions_feedback) == len(exercises.NOTEBOOKS)
    for html in solutions_feedback:  # the data tour's kernel once met a PermissionError on the zygote's data cache
        assert "output_error" not in html.read_text(), f"{html.name}: a cell of the solution failed while graded"
    for html in (out / "feedback").rglob("*.html"):
        text = html.read_text()
        assert "BEGIN HIDDEN TESTS" not in text and "from autograder.hidden import" not in text, html
    mutant = (out / "feedback" / "mutant-no-zero-grad" / "01_baseline.html").read_text()
    assert "still in .grad from step 1" in mutant  # the failed test's explanation is in the student's feedback
    summary = (out / "summary.md").read_text()
    assert "Score distribution" in summary and "| 01_baseline | test_train_one_epoch_steps |" in summary
    concept = exercises.concept("01_baseline", "test_train_one_epoch_steps")  # the concept mutant-no-zero-grad misses
    concepts = summary.split("## Concepts missed", 1)[1]
    assert f"| 01_baseline | {concept} | " in concepts, concepts
    assert (out / "summary.png").stat().st_size > 10_000
    # the escape attempts: nothing written outside the student's folder, nothing read that is not the handout's
    for path in (REPO / "solutions" / "loop_lab" / "HACKED.txt", REPO / "HACKED.txt", out / "HACKED.txt",
                 Path("/tmp/looplab-hacked.txt")):
        assert not path.exists(), f"a submission wrote {path}"
    attempts = (out / "feedback" / "escape" / "02_scheduler.html").read_text()
    assert "ModuleNotFoundError" in attempts and "PermissionError" in attempts
    # the printed {path: outcome} dict: no outcome may be a success (the cell's source has those words, so match
    # "'path': 'WROTE'", not the word)
    assert not re.search(r"(&#39;|')\s*:\s*(&#39;|')(WROTE|READ|IMPORTED)(&#39;|')", attempts)
    record = build.read_json(out / "escape.json")
    assert record["notebooks"]["02_scheduler"]["score"] == record["notebooks"]["02_scheduler"]["max_score"] - sum(
        t["max_points"] for t in record["tests"] if t["notebook"] == "02_scheduler" and t["kind"] == "manual")
    # the gradebook holds every student, and the parent alone wrote it
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == sorted(s.name for s in graded_class["students"])


# --- small pieces, on a throwaway assignment -------------------------------------------------------------------------


def toy_notebook(body: str, extra_cells: tuple[str, ...] = ()) -> nbformat.NotebookNode:
    """The toy assignment with its visible test only, ``extra_cells`` before it."""
    return toy.notebook(body, answer=None, before=extra_cells, hidden=False)


@pytest.mark.slow
def test_notebook_time_limit_fails_the_remaining_tests(tmp_path, autograder_cli):
    source = tmp_path / "source"
    source.mkdir()
    nbformat.write(toy_notebook("    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION\n"),
                   source / "00_toy.ipynb")
    students = {"slow": ("    return a + b\n", ("import time\ntime.sleep(2.5)",) * 3),
                "quick": ("    return a + b\n", ()),
                # the spinning cells the class's never-ending students do not spin (tests/autograder_cases/build.py)
                "spins": ("    while True:\n        pass\n", ()),
                "spins-ignoring-interrupt": ("    import signal\n    signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                             "    while True:\n        pass\n", ())}
    for name, (body, cells) in students.items():
        (tmp_path / "subs" / name).mkdir(parents=True)
        nbformat.write(toy_notebook(body, cells), tmp_path / "subs" / name / "00_toy.ipynb")
    db = tmp_path / "elsewhere" / "book.db"
    db.parent.mkdir()
    proc = autograder_cli("grade", tmp_path / "subs", "--out", tmp_path / "out", "--source", source, "--db",
                          f"sqlite:///{db}", "--timeout-cell", 4, "--timeout-notebook", 6, timeout=300)
    assert proc.returncode == 0, proc.stderr
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{db}") as gb:  # any SQLAlchemy URL: the gradebook went where --db said
        assert sorted(s.id for s in gb.students) == sorted(students)
        assert gb.find_submission("loop_lab", "quick").score == 1
    assert build.read_csv(tmp_path / "out" / "grades.csv") == [
        {"student": name, "notebook": "00_toy", "score": "1" if name == "quick" else "0", "max_score": "1"}
        for name in sorted(students)]
    slow = build.read_json(tmp_path / "out" / "slow.json")
    assert "6 s time limit" in slow["tests"][0]["message"]
    for name, how in (("spins", "was interrupted"), ("spins-ignoring-interrupt", "did not stop when interrupted")):
        message = build.read_json(tmp_path / "out" / f"{name}.json")["tests"][0]["message"]
        # its limit: 4 s, or less where the notebook's 6 s are nearer
        assert re.search(rf"ran past its \d+ s limit and {how}", message), (name, message)
    assert "kernels warm" in proc.stderr and "slowest" in proc.stderr  # progress is shown
    # one student's single notebook, given by a relative path
    single = os.path.relpath(tmp_path / "subs" / "quick" / "00_toy.ipynb", REPO)
    proc = autograder_cli("grade", single, "--student", "solo", "--out", tmp_path / "one", "--source", source,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert build.read_csv(tmp_path / "one" / "grades.csv") == [
        {"student": "solo", "notebook": "00_toy", "score": "1", "max_score": "1"}]
    assert (tmp_path / "one" / "feedback" / "solo" / "00_toy.html").exists()


@needs_solutions
def test_release_command_writes_notebooks_under_root(tmp_path, autograder_cli):
    shutil.copytree(SOLUTIONS, tmp_path / "solutions" / "loop_lab")
    proc = autograder_cli("--root", tmp_path, "release", timeout=300)
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in (tmp_path / "notebooks").glob("*.ipynb"))
    assert written == sorted(p.name for p in SOLUTIONS.glob("*.ipynb"))
    assert all(line.endswith(".ipynb") for line in proc.stdout.split())


def test_discover_layouts(tmp_path):
    ids = ["00_a", "01_b"]
    nb = nbformat.writes(nbformat.v4.new_notebook())
    for rel in ("flat/ann/00_a.ipynb", "flat/bob/01_b.ipynb", "course/submitted/cy/loop_lab/00_a.ipynb"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(nb)

    def found(path, **kw):
        return [(s.student, sorted(s.notebooks)) for s in discover(path, ids, intake=tmp_path / "in", **kw).submissions]

    assert found(tmp_path / "flat") == [("ann", ["00_a"]), ("bob", ["01_b"])]
    assert found(tmp_path / "course") == [("cy", ["00_a"])]
    assert found(tmp_path / "flat" / "ann" / "00_a.ipynb", student="dee") == [("dee", ["00_a"])]
    with pytest.raises(SubmissionsError, match="does not exist"):
        found(tmp_path / "nowhere")
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "00_a.ipynb").write_text(nb)
    with pytest.raises(SubmissionsError, match="loose notebooks"):
        found(tmp_path / "loose")


def test_check_notebook_names_the_problem(tmp_path):
    cases = {"empty": ("", "is empty"), "cut": ('{"cells": [', "not valid JSON"),
             "other": ('{"a": 1}', "not a notebook"), "ok": (nbformat.writes(nbformat.v4.new_notebook()), None)}
    for name, (text, expected) in cases.items():
        path = tmp_path / f"{name}.ipynb"
        path.write_text(text)
        problem = check_notebook(path)
        assert (problem is None) if expected is None else (expected in problem), (name, problem)


def test_cli_usage_errors(tmp_path, autograder_cli):
    proc = autograder_cli("grade", tmp_path / "missing", "--out", tmp_path / "out", timeout=120)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = autograder_cli("grade", tmp_path, "--out", tmp_path / "out", "--memory-limit", 100, timeout=120)
    assert proc.returncode == 2 and "too small" in proc.stderr
    proc = autograder_cli("grade", tmp_path, timeout=120)
    assert proc.returncode == 2 and "--out" in proc.stderr


# --- the sandbox and the recheck -------------------------------------------------------------------------------------


@needs_landlock
def test_sandbox_blocks_writes_reads_and_network(tmp_path):
    allowed = tmp_path / "mine"
    allowed.mkdir()
    script = f"""
import json, os, socket, sys
from autograder.sandbox import policy
rules = policy.Policy(write_dirs=[{str(allowed)!r}], read_dirs=policy.system_read_dirs(), memory_mb=6000)
policy.confine(rules)
result = {{}}
for path in [{str(allowed / 'ok.txt')!r}, {str(tmp_path / 'escape.txt')!r}, {str(REPO / 'HACKED.txt')!r}]:
    try:
        open(path, 'w').write('x'); result[path] = 'wrote'
    except OSError as exc:
        result[path] = type(exc).__name__
try:
    open({str(REPO / 'docs' / 'exercises.md')!r}).read(); result['read'] = 'read'
except OSError as exc:
    result['read'] = type(exc).__name__
try:
    socket.create_connection(('127.0.0.1', 9), timeout=2); result['net'] = 'connected'
except OSError as exc:
    result['net'] = type(exc).__name__
try:
    bytearray(8 << 30); result['memory'] = 'allocated'
except MemoryError:
    result['memory'] = 'MemoryError'
print(json.dumps(result))
"""
    proc = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result[str(allowed / "ok.txt")] == "wrote"
    assert result[str(tmp_path / "escape.txt")] == "PermissionError"
    assert result[str(REPO / "HACKED.txt")] == "PermissionError"
    assert result["read"] == "PermissionError"
    assert result["net"] in ("PermissionError", "ConnectionRefusedError") and result["net"] != "connected"
    assert result["memory"] == "MemoryError"


def test_snapshot_restores_and_reports_monkeypatching():
    import torch

    from autograder.hidden.snapshot import Snapshot

    snap = Snapshot()
    original_allclose, original_step = torch.allclose, torch.optim.SGD.step
    try:
        torch.allclose = lambda *a, **k: True
        torch.optim.SGD.step = lambda self, closure=None: None
        torch.optim.SGD.zero_grad_extra = lambda self: None
        changed = snap.tampered()
        assert "torch.allclose" in changed
        assert any(c.startswith("torch.optim.sgd.SGD.step") for c in changed)
        assert any("zero_grad_extra" in c for c in changed)
        snap.restore()
        assert torch.allclose is original_allclose and torch.optim.SGD.step is original_step
        assert not hasattr(torch.optim.SGD, "zero_grad_extra")
        assert snap.tampered() == []
    finally:
        torch.allclose, torch.optim.SGD.step = original_allclose, original_step


@needs_solutions
def test_hidden_verify_in_a_notebook_namespace():
    variants = {v.name: v for v in mutants.VARIANTS}
    namespace = {"train_one_epoch": variants["baseline_canonical"].function}
    gradient = ("01_baseline", "train_one_epoch", "gradient")
    assert verifier.run_check(gradient, namespace).passed is True
    namespace = {"train_one_epoch": variants["no_zero_grad"].function}
    verdict = verifier.run_check(("01_baseline", "train_one_epoch", "steps"), namespace)
    passed, message = verdict.passed, verdict.message
    assert not passed and "still in .grad from step 1" in message
    verdict = verifier.run_check(gradient, {})
    passed, message = verdict.passed, verdict.message
    assert not passed and "train_one_epoch is not defined" in message
    with pytest.raises(ValueError, match="no hidden test"):
        verifier.verify("01_baseline", "nope", "gradient")
    assert verifier.verify_calls('verify("01_baseline", "train_one_epoch")') == []  # a whole-check call grades nothing


def test_feedback_scrub_keeps_the_message_only():
    from autograder.course.cells import ScrubHiddenTests

    cell = nbformat.v4.new_code_cell(
        '"""Check x"""\ncheck()\n### BEGIN HIDDEN TESTS\nfrom autograder.hidden import verify\nverify("a", "b")\n'
        "### END HIDDEN TESTS\n",
        metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 1, "locked": True, "solution": False}})
    cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="the step is wrong",
                                           traceback=["File verifier.py line 3", "verify(...)"])]
    cell, _ = ScrubHiddenTests().preprocess_cell(cell, {}, 0)
    assert "verify" not in cell.source and "hidden tests ran here" in cell.source
    assert cell.outputs[0]["traceback"] == ["AssertionError: the step is wrong"]


@pytest.mark.slow
@needs_solutions
def test_the_file_time_mutant_is_caught_through_the_grader(graded_class):
    """Issue 31: lab 7's "newest checkpoint by file time" mistake is caught where the grader judges it (the observer in
    the sandbox, the judge outside it), not only in the notebook: the check makes an older checkpoint the newest file
    between the crash and the resume, and the judge sees the resumed run start after that one. The class graded above
    holds that mutant as a student of its own."""
    variant = next(v for v in mutants.VARIANTS if v.name == "resume_latest_by_file_time")
    student = next(st for st in graded_class["students"] if st.case == f"corpus mutant {variant.name}")
    assert graded_class["proc"].returncode == 0, graded_class["proc"].stderr[-4000:]
    record = build.read_json(graded_class["out"] / f"{student.name}.json")
    tests = {t["name"]: t for t in record["tests"] if t["notebook"] == "07_crash_resume" and t["kind"] != "manual"}
    assert {name for name, t in tests.items() if not t["passed"]} == {"test_train_resumable_resumes"}, tests
    assert variant.expected_message in tests["test_train_resumable_resumes"]["message"]


# --- the handout ---------------------------------------------------------------------------------------------------------


def _norm(line: str) -> str:
    return re.sub(r"\s+", " ", line.strip())


def _code_lines(text: str) -> list[str]:
    """Non-trivial code lines, whitespace-normalised: no blanks, comments, docstring quotes or short lines."""
    lines = (_norm(line) for line in text.splitlines())
    return [line for line in lines if len(line) >= 12 and not line.startswith(("#", '"""', "'''"))]


def solution_blocks() -> list[tuple[str, list[str]]]:
    """(notebook, code lines) of every ``### BEGIN SOLUTION`` region of the solutions."""
    blocks = []
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            current = None
            for line in cell.source.splitlines():
                if "### BEGIN SOLUTION" in line:
                    current = []
                elif "### END SOLUTION" in line and current is not None:
                    blocks.append((path.stem, _code_lines("\n".join(current))))
                    current = None
                elif current is not None:
                    current.append(line)
    return blocks


def solution_leaks(name: str, text: str, blocks) -> list[str]:
    """Where ``text`` (a handout file) repeats solution code: three consecutive solution lines anywhere, or, in a
    student notebook, any long line of that notebook's own solutions.

    A notebook may show code that an *earlier* notebook's exercise already had the student write (lab 6 gives the
    lab 2 loop, to have something to checkpoint): that is not a leak. Everywhere else every solution counts.
    """
    if name.endswith(".ipynb"):
        sources = [c.source for c in nbformat.reads(text, as_version=4).cells if c.cell_type == "code"]
        this_notebook = Path(name).stem
    else:
        sources = [text]
        this_notebook = ""  # labutils files: nothing counts as taught
    lines = [line for src in sources for line in _code_lines(src)]
    windows = {tuple(lines[i:i + 3]) for i in range(len(lines) - 2)}
    taught = {tuple(block[i:i + 3]) for notebook, block in blocks if notebook < this_notebook
              for i in range(len(block) - 2)}
    leaks = []
    for notebook, block in blocks:
        for i in range(len(block) - 2):
            if tuple(block[i:i + 3]) in windows - taught:
                leaks.append(f"{name}: repeats the {notebook} solution lines {block[i:i + 3]}")
                break
        if name.endswith(f"/{notebook}.ipynb"):
            leaks += [f"{name}: its own solution line {line!r}" for line in block if len(line) >= 25 and
                      line in lines]
    return leaks


@needs_solutions
def test_handout_leaks_nothing_and_still_imports(tmp_path, autograder_cli):
    release_dir = released_notebooks(tmp_path)
    root = tmp_path / "release-root"
    for name in ("labutils", "requirements.txt", "pyproject.toml"):  # the handout's pyproject is derived from it
        src = REPO / name
        shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir() \
            else shutil.copyfile(src, root / name)
    zip_path = tmp_path / "dist" / "loop_lab.zip"
    proc = autograder_cli("--root", root, "handout", "--out", zip_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(zip_path) as zf:
        names = zf.namelist()
        contents = {n: zf.read(n).decode("utf-8", "replace") for n in names}
        zf.extractall(tmp_path / "unzipped")
    assert sorted(n for n in names if n.startswith("loop_lab/notebooks/")) == sorted(
        f"loop_lab/notebooks/{p.name}" for p in release_dir.glob("*.ipynb"))
    assert {"loop_lab/README.md", "loop_lab/requirements.txt", "loop_lab/labutils/__init__.py"} <= set(names)
    assert any(n.startswith("loop_lab/labutils/checks") for n in names)
    assert not any(n.startswith("loop_lab/labutils/reference/") for n in names)
    assert "loop_lab/labutils/__main__.py" in names  # says the command line is the instructor's
    assert not any(n.startswith(("loop_lab/solutions", "loop_lab/autograder")) or "__pycache__" in n for n in names)
    leaks = []
    blocks = solution_blocks()
    assert len(blocks) >= 10
    for name, text in contents.items():
        for marker in ("### BEGIN SOLUTION", "### END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            if marker in text:
                leaks.append(f"{name}: {marker}")
        # any import of the grader; in a notebook, any mention of its hidden tests (a .py file's docstring may name
        # the module, as labutils/exercises.py does)
        hidden_ref = r"|autograder\.hidden" if name.endswith(".ipynb") else ""
        if re.search(r"^\s*(from|import)\s+autograder\b" + hidden_ref, text, re.M):
            leaks.append(f"{name}: imports autograder")
        if name != "loop_lab/labutils/__main__.py" and re.search(  # the entry point says it is the instructor's
                r"^\s*(from\s+(labutils)?\.?reference\b|import\s+labutils\.reference\b|"
                r"from\s+labutils\s+import\s+.*\breference\b)", text, re.M):
            leaks.append(f"{name}: imports {REFERENCE_PACKAGE}")
        leaks += solution_leaks(name, text, blocks)
    assert not leaks, "\n".join(leaks[:30])
    # the handout's notebooks import only what the handout has (not the repo's editable labutils)
    unzipped = tmp_path / "unzipped" / "loop_lab"
    imports = set()
    for nb_path in (unzipped / "notebooks").glob("*.ipynb"):
        for cell in nbformat.read(nb_path, as_version=4).cells:
            if cell.cell_type == "code":
                imports |= {line.strip() for line in cell.source.splitlines()
                            if re.match(r"\s*(from|import)\s+labutils\b", line) and not line.rstrip().endswith("(")}
    assert imports, "the notebooks import nothing from labutils?"
    script = "import sys; sys.path.insert(0, sys.argv[1]); import labutils\n" \
             "assert labutils.__file__.startswith(sys.argv[1]), labutils.__file__\n" + "\n".join(sorted(imports))
    proc = subprocess.run([PYTHON, "-c", script, str(unzipped)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=dict(os.environ, MPLBACKEND="Agg"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # -S: without site-packages, where the repo's editable install would find labutils.reference for it
    proc = subprocess.run([PYTHON, "-S", "-m", "labutils", "train"], capture_output=True, text=True, timeout=120,
                          cwd=unzipped)
    assert proc.returncode == 1 and "instructor's command line" in proc.stderr and "Traceback" not in proc.stderr
