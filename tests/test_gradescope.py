"""The Gradescope autograder: the zip holds what Gradescope runs; run_autograder finds the notebooks wherever an upload
puts them, writes a results.json that validates against a schema written from Gradescope's specification
(tests/gradescope_results.schema.json), shows at once only what a student may see, takes the late penalty of the
zip's policy from Gradescope's submission_metadata.json, and never turns a notebook it could not grade into a plain 0.
Run in an emulated folder layout (its root moved with GRADESCOPE_ROOT) for a stub and a one-mistake submission of the
one-notebook toy assignment, and in an emulated Gradescope container (tests/gradescope_container.py: /autograder,
768 MB, half a CPU) for an honest one, for the same with every zygote killed mid-notebook, and for one that attacks
from a container without namespaces or Landlock."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from autograder import gradescope
from autograder.hidden.verifier import judged_outside
from autograder.results.writers.gradescope import to_results

import forked_graders
import gradescope_container
from autograder_cases import records, toy

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.autograder]
SCHEMA = json.loads((Path(__file__).parent / "gradescope_results.schema.json").read_text())


def valid(results: dict | None) -> dict:
    """``results`` checked against the schema written from Gradescope's specification, and scores within bounds."""
    import jsonschema

    assert results is not None, "run_autograder wrote no results.json"
    jsonschema.validate(results, SCHEMA)
    assert "score" in results  # always: the spec requires it when there is no test
    for test in results["tests"]:
        assert ("score" in test) == ("max_score" in test), test
        assert 0 <= test.get("score", 0) <= test.get("max_score", 0), test
    return results


def scored(results: dict) -> dict[str, dict]:
    """The tests with points, by grade id."""
    return {t["name"].split(": ")[1]: t for t in results["tests"] if "score" in t}


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """Gradescope's /autograder, elsewhere: the zip unpacked into ROOT/source, as Gradescope does."""
    tmp = tmp_path_factory.mktemp("gradescope")
    zip_path = tmp / "autograder.zip"
    (tmp / "deadlines.toml").write_text(DEADLINES)
    proc = forked_graders.run_real("gradescope", "--out", zip_path, "--source", toy.write_source(tmp / "source"),
                                   "--no-data", "--deadlines", tmp / "deadlines.toml", timeout=120)
    assert proc.returncode == 0, proc.stderr
    root = tmp / "autograder"
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    for name in ("setup.sh", "run_autograder"):  # zipfile.extractall drops modes; Gradescope's unzip keeps them
        assert modes[name] & stat.S_IXUSR, name
        os.chmod(root / "source" / name, modes[name] & 0o777)
    return {"root": root, "names": set(modes)}


def test_zip_holds_what_gradescope_runs(unpacked):
    names = unpacked["names"]
    assert {"setup.sh", "run_autograder", "loop-lab/pyproject.toml", "loop-lab/requirements.txt",
            "loop-lab/autograder/gradescope.py", "loop-lab/labutils/reference/loop.py",
            f"loop-lab/solutions/loop_lab/{toy.NOTEBOOK}.ipynb"} <= names
    assert not any("__pycache__" in n for n in names) and not any(n.startswith("data/") for n in names)
    run_autograder = (unpacked["root"] / "source" / "run_autograder").read_text()
    assert "gradescope-run" in run_autograder and "GRADESCOPE_ROOT" in run_autograder


DEADLINES = 'deadline = "2026-03-01T12:00"\n[penalty]\nper = "day"\npercent = 10\n'  # the dates: Gradescope's
ON_TIME, LATE_61H = "2026-03-01T12:59:00.000000+01:00", "2026-03-04T02:00:00.000000+01:00"


def write_metadata(root: Path, created_at: str) -> None:
    """Gradescope's ROOT/submission_metadata.json, its documented fields: the submission's time, the due date."""
    (root / "submission_metadata.json").write_text(json.dumps({
        "id": 123456, "created_at": created_at, "submission_method": "upload", "previous_submissions": [],
        "assignment": {"due_date": "2026-03-01T13:00:00.000000+01:00", "late_due_date": None, "group_size": None,
                       "release_date": "2026-02-15T00:00:00.000000+01:00", "title": "Loop Lab", "id": 25828,
                       "course_id": 1234, "group_submission": False, "total_points": "5.0"},
        "users": [{"email": "eve@uni.example", "id": 1234, "name": "Eve E"}]}))


def emulate(root: Path, body: str, created_at: str = ON_TIME, under: str = "") -> dict:
    """One Gradescope submission: the notebook in ROOT/submission/UNDER, Gradescope's submission_metadata.json (its
    documented fields: the submission's time, the due date), run_autograder, ROOT/results/results.json."""
    for folder in ("submission", "results"):
        subprocess.run(["rm", "-rf", root / folder], check=True)
    (root / "submission" / under).mkdir(parents=True)
    write_metadata(root, created_at)
    import nbformat

    nbformat.write(toy.notebook(body, "Because."), root / "submission" / under / f"{toy.NOTEBOOK}.ipynb")
    env = dict(os.environ, GRADESCOPE_ROOT=str(root), LOOPLAB_PYTHON=sys.executable)
    proc = subprocess.run(["bash", root / "source" / "run_autograder"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "student code confined" in proc.stdout  # the confinement the container allowed, for the instructor
    return valid(json.loads((root / "results" / "results.json").read_text()))


def check_results(results: dict, body: str, scores: dict, late: bool = False) -> dict:
    """The toy notebook's results.json for ``body``: its ``scores``, and what every run's results say (``late``:
    handed in 61 h after Gradescope's due date, the zip's policy taking 30%); its tests."""
    tests = scored(results)
    assert {name: t["score"] for name, t in tests.items()} == scores  # the written answer is not a test
    assert {name: t["max_score"] for name, t in tests.items()} == {"test_add": 1, "test_add_hidden": 2}
    assert tests["test_add"]["visibility"] == "visible"
    assert tests["test_add_hidden"]["visibility"] == "after_published"  # hidden: shown once scores are published
    assert all((t["status"] == "passed") == (t["score"] == t["max_score"]) for t in tests.values())
    if body == toy.ONE_MISTAKE:
        assert "add(7, 3) should be 10" in tests["test_add_hidden"]["output"]  # the check's message
    if body == toy.STUB:
        assert "NotImplementedError" in tests["test_add"]["output"]
    assert "Graded by hand on Gradescope: 00_toy: answer (2 points)" in results["output"]
    assert len(results["tests"]) == 2  # the toy's hidden test runs in the kernel: nothing of it shown before
    assert f"Tests shown now: {scores['test_add']} of 1 points." in results["output"]
    assert " of 3 " not in results["output"]  # no visible total holds the hidden test's points
    if not late:
        assert results["score"] == sum(scores.values())
        assert "(time from Gradescope's submission time (submission_metadata.json created_at)), before the " \
               "deadline (2026-03-01T12:00:00+00:00)" in results["output"]
        return tests
    assert results["score"] == 0.1  # 1 of 3 autograded points, less 30% of the 3 (grade --deadlines: the same)
    assert "Handed in 61 h after the deadline (2026-03-01T12:00:00+00:00; time from Gradescope's submission time " \
           "(submission_metadata.json created_at)): penalty: 30% of the notebook's points." in results["output"]
    assert "Late penalty: 0.9 of the autograded points" in results["output"]
    return tests


@pytest.mark.slow
@pytest.mark.parametrize("body, under, scores", [
    (toy.STUB, "loop_lab/notebooks", {"test_add": 0, "test_add_hidden": 0}),  # the handout, zipped whole
    (toy.ONE_MISTAKE, "loop_lab", {"test_add": 1, "test_add_hidden": 0}),  # nbgrader's folder
], ids=["stub", "one-mistake"])  # a correct one: the container test below
def test_run_autograder_writes_gradescope_results(unpacked, body, under, scores):
    late = body == toy.ONE_MISTAKE  # handed in 61 h after Gradescope's due date: three started days, 30%
    check_results(emulate(unpacked["root"], body, LATE_61H if late else ON_TIME, under), body, scores, late)


def test_a_submission_that_cannot_be_graded_still_gets_results(tmp_path, monkeypatch):
    layout = gradescope.GradescopeLayout(tmp_path)
    toy.write_student(tmp_path, "submission")
    monkeypatch.setattr(gradescope, "grade", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no zygote")))
    assert gradescope.run(layout, toy.write_source(tmp_path / "src")) == 1
    results = valid(json.loads(layout.results.read_text()))
    assert results["score"] == 0 and results["tests"] == [] and results["visibility"] == "visible"
    assert results["output"] == "The autograder could not grade this submission (RuntimeError: no zygote)."


def test_a_container_that_cannot_keep_the_hidden_tests_out_refuses_with_a_score_and_the_reason(tmp_path,
                                                                                                 monkeypatch):
    """Issue 42: when the grader refuses (student code would stay root, nothing keeps the hidden tests out of reach),
    Gradescope gets results.json with a score of 0 and the grader's line, shown, and run_autograder exits 1."""
    from autograder.run.pool import GradingSetupError

    layout = gradescope.GradescopeLayout(tmp_path)
    toy.write_student(tmp_path, "submission")  # an ordinary upload: the container is the problem
    why = "refused to grade: student code would run as root, as the grader does: the user layer is missing (x)"
    monkeypatch.setattr(gradescope, "grade", lambda *a, **k: (_ for _ in ()).throw(GradingSetupError(why)))
    assert gradescope.run(layout, toy.write_source(tmp_path / "src")) == 1
    results = valid(json.loads(layout.results.read_text()))
    assert results["score"] == 0 and results["tests"] == [] and results["visibility"] == "visible"
    assert results["output"] == f"The autograder {why}"


# --- setup.sh on Gradescope's base image (Ubuntu 22.04, Python 3.10): its logic, with stand-ins ------------------------

FAKE_PYTHON = """#!/bin/bash
# a stand-in python{version}: its version checks, venv (a venv whose pip and python log their arguments)
case "$*" in
  --version) echo "Python {version}.0" ;;
  *version_info*) exit {too_old} ;;
  *ensurepip*) exit {no_venv} ;;
  "-m venv "*) mkdir -p "$3/bin"
    printf '#!/bin/bash\\necho "pip $* (in $PWD)" >> "$SETUP_LOG"\\n' > "$3/bin/pip"
    printf '#!/bin/bash\\necho "python $*" >> "$SETUP_LOG"\\n' > "$3/bin/python"
    chmod +x "$3/bin/pip" "$3/bin/python" ;;
  *) exit 2 ;;
esac
"""
FAKE_APT = """#!/bin/bash
# a stand-in apt-get: logs, and installs python3.11 (a stand-in) only where $APT_HAS_PYTHON says it can
echo "apt-get $*" >> "$SETUP_LOG"
case "$*" in
  *python3.11*) [ -n "$APT_HAS_PYTHON" ] || exit 100; cp "$FAKES/python3.11.available" "$FAKES/python3.11" ;;
esac
"""


def fake_python(path: Path, version: str, venv: bool = True) -> None:
    too_old = int(tuple(map(int, version.split("."))) < (3, 11))
    path.write_text(FAKE_PYTHON.format(version=version, too_old=too_old, no_venv=int(not venv)))
    path.chmod(0o755)


def setup(unpacked, tmp_path: Path, image_python: str, apt_has_python: bool) -> tuple[subprocess.CompletedProcess,
                                                                                        list[str], Path]:
    """setup.sh from the zip, run in a copy of /autograder/source with only stand-ins on PATH: the image's python3
    (``image_python``) and apt-get; (the run, what apt-get, pip and python were asked, the fakes' folder)."""
    source, fakes = tmp_path / "source", tmp_path / "bin"
    (source / "loop-lab").mkdir(parents=True)
    fakes.mkdir()
    shutil.copy2(unpacked["root"] / "source" / "setup.sh", source / "setup.sh")
    for tool in ("bash", "dirname", "cat", "mkdir", "chmod", "cp"):
        (fakes / tool).symlink_to(shutil.which(tool))
    fake_python(fakes / "python3", image_python)
    fake_python(fakes / "python3.11.available", "3.11")
    (fakes / "apt-get").write_text(FAKE_APT)
    (fakes / "apt-get").chmod(0o755)
    log = tmp_path / "log"
    env = {"PATH": str(fakes), "SETUP_LOG": str(log), "FAKES": str(fakes), "APT_HAS_PYTHON": "1" * apt_has_python}
    proc = subprocess.run([str(source / "setup.sh")], env=env, capture_output=True, text=True, timeout=60)
    return proc, log.read_text().splitlines() if log.exists() else [], fakes


def test_setup_on_the_default_image_installs_python_3_11_and_the_cpu_build_of_torch(unpacked, tmp_path):
    proc, calls, fakes = setup(unpacked, tmp_path, "3.10", apt_has_python=True)
    assert proc.returncode == 0, proc.stderr
    assert f"setup.sh: Python 3.11.0 ({fakes}/python3.11)" in proc.stdout  # not the image's 3.10
    source = tmp_path / "source"
    from autograder.course.handout import torch_pins
    from labutils.versions import CPU_INDEX

    assert calls == [
        "apt-get update -qq", "apt-get install -y -qq python3.11 python3.11-venv", "apt-get install -y -qq libseccomp2",
        f"pip install -q {' '.join(torch_pins())} --index-url {CPU_INDEX} (in {source}/loop-lab)",
        f"pip install -q -r requirements.txt (in {source}/loop-lab)",
        f"pip install -q --no-deps -e . (in {source}/loop-lab)",
        "python -c import sys, torch; sys.exit(torch.version.cuda is not None)"]


def test_setup_uses_an_image_python_that_is_new_enough(unpacked, tmp_path):
    proc, calls, fakes = setup(unpacked, tmp_path, "3.12", apt_has_python=False)
    assert proc.returncode == 0, proc.stderr
    assert f"setup.sh: Python 3.12.0 ({fakes}/python3)" in proc.stdout
    assert not any("python3.11" in call for call in calls)


def test_setup_that_cannot_get_python_3_11_stops_at_once_with_one_line(unpacked, tmp_path):
    proc, calls, _ = setup(unpacked, tmp_path, "3.10", apt_has_python=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ("setup.sh: Loop Lab's pinned packages need Python 3.11 or newer with venv; this image has "
                           "Python 3.10.0 and apt-get could not install python3.11: choose a base image with Python "
                           "3.11+ in the autograder's settings\n")
    assert not any(call.startswith("pip") for call in calls) and not (tmp_path / "source" / ".venv").exists()


# --- where the notebooks are in an upload ------------------------------------------------------------------------------

NOTEBOOKS = ["00_data_tour", "01_baseline", "02_scheduler"]


def make_upload(root: Path, files: list[str]) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}")
    return root


@pytest.mark.parametrize("files, found", [
    (["01_baseline.ipynb", "02_scheduler.ipynb", "data.csv"], "."),  # one by one, or a zip of the files
    (["notebooks/01_baseline.ipynb", "notebooks/02_scheduler.ipynb"], "notebooks"),  # the handout's notebooks/
    (["loop_lab/notebooks/01_baseline.ipynb", "loop_lab/README.md"], "loop_lab/notebooks"),  # the handout, whole
    (["loop_lab/01_baseline.ipynb"], "loop_lab"),  # nbgrader's folder
    (["my work/lab/01_baseline.ipynb", "my work/notes.ipynb", "__MACOSX/01_baseline.ipynb",
      ".ipynb_checkpoints/01_baseline.ipynb"], "my work/lab"),  # any folder; tools' and hidden ones not read
])
def test_the_notebooks_are_found_wherever_the_upload_put_them(tmp_path, files, found):
    upload = make_upload(tmp_path / "submission", files)
    assert gradescope.find_notebooks(upload, NOTEBOOKS) == upload / found


@pytest.mark.parametrize("files, says", [
    (["01_baseline.ipynb", "old/01_baseline.ipynb", "old/02_scheduler.ipynb"],
     "in 2 folders (the top: 01_baseline.ipynb; old/: 01_baseline.ipynb, 02_scheduler.ipynb)"),
    (["lab1.ipynb", "x/Untitled.ipynb"], "no notebook of this assignment (it holds 2 other notebook(s): lab1.ipynb, "
                                         "x/Untitled.ipynb)"),
    (["README.md"], "no notebook of this assignment (it holds no notebook)"),
])
def test_an_upload_that_is_not_one_folder_of_notebooks_says_what_was_found(tmp_path, files, says):
    upload = make_upload(tmp_path / "submission", files)
    with pytest.raises(gradescope.UploadError, match=r"\(") as caught:
        gradescope.find_notebooks(upload, NOTEBOOKS)
    assert says in str(caught.value)


def test_a_link_to_a_folder_of_notebooks_is_not_followed(tmp_path):
    make_upload(tmp_path / "elsewhere", ["01_baseline.ipynb"])
    upload = make_upload(tmp_path / "submission", ["mine/02_scheduler.ipynb"])
    (upload / "theirs").symlink_to(tmp_path / "elsewhere")
    assert gradescope.find_notebooks(upload, NOTEBOOKS) == upload / "mine"


def test_an_ambiguous_upload_is_not_graded_and_results_say_why(tmp_path, monkeypatch):
    layout = gradescope.GradescopeLayout(tmp_path)
    make_upload(layout.submission, [f"{toy.NOTEBOOK}.ipynb", f"copy/{toy.NOTEBOOK}.ipynb"])
    monkeypatch.setattr(gradescope, "grade", lambda *a, **k: pytest.fail("graded an ambiguous upload"))
    assert gradescope.run(layout, toy.write_source(tmp_path / "src")) == 1
    results = valid(json.loads(layout.results.read_text()))
    assert results["score"] == 0 and results["tests"] == [] and "cannot tell which to grade" in results["output"]


# --- what a student sees at once -----------------------------------------------------------------------------------------


def test_only_verify_calls_make_a_hidden_part_that_the_kernel_does_not_judge():
    hidden = "\"\"\"Check ...\"\"\"\nchecks.assert_property(1)\n### BEGIN HIDDEN TESTS\n{}\n### END HIDDEN TESTS\n"
    verify = 'from autograder.hidden import verify\nverify("02_scheduler", "train_one_epoch", "loop")'
    assert judged_outside(hidden.format(verify))
    assert not judged_outside(hidden.format('assert add(7, 3) == 10, "add(7, 3) should be 10"'))  # runs in the kernel
    assert not judged_outside(hidden.format(verify + "\nprint(secret)"))
    assert not judged_outside("assert add(1, 2) == 3")  # no hidden part


def lab_record(status_07: str = "graded"):
    """A lab-shaped class of one: a test with a hidden part judged outside the kernel that the student's notebook
    passes but the hidden recheck fails, one without a hidden part, a written answer, and 07 graded or not."""
    order = records.test("02_scheduler", "test_order", 0, 1, hidden=True, judged_outside=True, in_notebook=True,
                         message="scheduler.step() ran before optimizer.step()")
    shape = records.test("02_scheduler", "test_shape", 1, 1, in_notebook=True)
    answer = records.test("02_scheduler", "answer", 0, 2, written=True, to_grade=True)
    resume = records.test("07_crash_resume", "test_resume", 0, 3, judged=False,
                          message="could not be graded: the zygote died")
    student = records.student("student", {"02_scheduler": [order, shape, answer], "07_crash_resume": [resume]})
    student.notebooks[1].status = status_07
    student.notebooks[1].notes = ["could not be graded: the zygote died"]
    return records.class_record([student])


def test_a_student_sees_at_once_what_their_notebook_shows_and_no_hidden_total():
    results = valid(json.loads(to_results(lab_record(), "student", 1.0).to_json()))
    now = [t for t in results["tests"] if t["visibility"] == "visible"]
    assert [(t["name"], t["status"], "score" in t) for t in now] == [
        ("02_scheduler: test_order: the check your notebook runs", "passed", False),  # what the notebook showed
        ("02_scheduler: test_shape", "passed", True), ("07_crash_resume: test_resume", "failed", True)]
    assert "scheduler.step()" not in now[0]["output"]  # the hidden verdict waits for publication, with the points
    later = [t for t in results["tests"] if t["visibility"] == "after_published"]
    assert [(t["name"], t["score"], t["output"]) for t in later] == [
        ("02_scheduler: test_order", 0, "scheduler.step() ran before optimizer.step()")]
    assert "Tests shown now: 1 of 4 points." in results["output"] and " of 5 " not in results["output"]
    assert results["output_format"] == results["test_output_format"] == "text"  # student text is never HTML


def test_a_notebook_that_could_not_be_graded_is_no_zero_but_a_visible_incomplete_grade():
    results = valid(json.loads(to_results(lab_record("error"), "student", 1.0).to_json()))
    assert not any(t["name"].startswith("07_crash_resume: ") for t in results["tests"])  # no 0 of its tests
    failed = [t for t in results["tests"] if t["name"].startswith("Grade incomplete")]
    assert [(t["status"], t["visibility"], "score" in t) for t in failed] == [("failed", "visible", False)]
    assert "the zygote died" in failed[0]["output"] and "leaves out its 3 points" in failed[0]["output"]
    assert results["score"] == 1 and "GRADE INCOMPLETE: 07_crash_resume" in results["output"]


# --- the container, emulated: /autograder in a mount namespace of its own, 768 MB and half a CPU ----------------------


@pytest.fixture(scope="module")
def container(unpacked, tmp_path_factory, autograder_cli):
    """An /autograder root for the emulated container (the zip unpacked as in ``unpacked``), and what ``grade`` gives
    the same honest submission: the reference a Gradescope run must equal."""
    why_not = gradescope_container.unavailable()
    if why_not:
        pytest.skip(why_not)
    tmp = tmp_path_factory.mktemp("container")
    root = tmp / "autograder"
    shutil.copytree(unpacked["root"] / "source", root / "source", symlinks=True)
    write_metadata(root, ON_TIME)
    toy.write_student(tmp / "subs", "honest")
    proc = autograder_cli("grade", tmp / "subs", "--out", tmp / "out", "--source", root / "source" / "loop-lab" /
                          "solutions" / "loop_lab")
    assert proc.returncode == 0, proc.stderr[-3000:]
    local = json.loads((tmp / "out" / "honest.json").read_text())
    return {"root": root, "honest": tmp / "subs" / "honest", "local": local}


def upload(root: Path, files: Path, under: str = "") -> None:
    """What Gradescope puts in /autograder/submission for an upload of ``files``' contents (a zip is unpacked),
    beneath ``under``."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.copytree(files, root / "submission" / under)


@pytest.mark.slow
def test_an_honest_submission_grades_in_the_default_container_as_grade_does(container):
    upload(container["root"], container["honest"], "notebooks")  # a zip of the handout's notebooks/
    run = gradescope_container.run_autograder(container["root"], env={"LOOPLAB_PYTHON": sys.executable})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.oom_kills == 0 and 0 < run.peak_mb < gradescope_container.MEMORY_MB, run
    assert "sized for 0.5 CPU, 768 MB (cgroup v1" in run.stdout and "1 notebook(s) at a time" in run.stdout
    results = valid(run.results)
    local = {t["name"]: t["points"] for t in container["local"]["tests"] if t["kind"] == "auto"}
    assert {name: t["score"] for name, t in scored(results).items()} == local == {"test_add": 1, "test_add_hidden": 2}
    assert results["score"] == 3


@pytest.mark.slow
def test_a_notebook_whose_zygote_dies_is_retried_then_reported_as_not_graded(container):
    """Every zygote killed once a notebook runs below it (as the OOM killer took it): retried once in a fresh one,
    then "could not be graded", never a 0: results.json with a visible failed check and a score, exit status 1."""
    upload(container["root"], container["honest"])
    run = gradescope_container.run_autograder(container["root"], env={"LOOPLAB_PYTHON": sys.executable},
                                              kill_zygotes=True)
    assert run.returncode == 1 and len(run.killed) == 2, (run.killed, run.stdout[-3000:], run.stderr[-3000:])
    assert "trying once more in a fresh zygote" in run.stdout
    results = valid(run.results)
    assert scored(results) == {} and results["score"] == 0
    [failed] = results["tests"]
    assert (failed["status"], failed["visibility"]) == ("failed", "visible")
    assert failed["name"] == f"Grade incomplete: {toy.NOTEBOOK} could not be graded"
    assert "the zygote it used died; on the first try: the zygote it used died" in failed["output"]


# --- a container that refuses namespaces and Landlock (issue 42) ---------------------------------------------------------

# What the finding's submission did from inside its kernel, beside a correct add; each attempt says "done" (what it
# read, for the hidden test) or why it failed, in a report left in /dev/shm (the machine's own where there is no mount
# namespace: a channel out, as the finding's visible check message was).
ATTACK = """\
import json, os, sysconfig
source = "/autograder/source/loop-lab/solutions/loop_lab/{notebook}.ipynb"
report = {{}}
def attempt(name, action):
    try:
        report[name] = action() or "done"
    except OSError as exc:
        report[name] = exc.strerror
def publish_hidden():
    text = open(source).read()
    open(source, "w").write(text.replace("### BEGIN HIDDEN TESTS", "### BEGIN TESTS"))
attempt("read a hidden test", lambda: "done: " + open(source).read())
attempt("rewrite the hidden marker", publish_hidden)
attempt("change the grader", lambda: open("/autograder/source/loop-lab/autograder/gradescope.py", "a").write("# x"))
attempt("write a .pth into the venv", lambda: open(os.path.join(sysconfig.get_paths()["purelib"],
                                                                 {pth!r}), "w").write("# owned"))
attempt("write the results", lambda: open("/autograder/results/forged.json", "w").write("{{}}"))
with open({report!r}, "w") as f:
    json.dump(report, f)
"""

# In the container, before run_autograder: Python and the data cache readable by every user, as a container's are
# (this machine's live under /root, mode 0700), then the seccomp filter of Docker's default profile before 2022 on a
# kernel without Landlock (tests/autograder_cases/refuse.py).
WITHOUT_NAMESPACES_OR_LANDLOCK = """\
from autograder.sandbox import isolation
from autograder_cases import refuse
isolation.reveal({reveal!r}, isolation.student_ids())
refuse.install(namespaces=True, landlock=True)
"""


@pytest.mark.slow
def test_a_correct_submission_that_attacks_from_a_container_without_namespaces_or_landlock(container):
    """Issue 42: run_autograder in the container where namespaces, mount and Landlock are refused. The submission is
    correct, and it reads the hidden tests, rewrites their marker, edits the grader, writes a .pth into the venv and
    forges results: either every attempt is refused (student code runs as an unprivileged uid; the grader's files
    are closed to it by plain permissions) and it is graded as any correct one, or the run refuses to grade and says
    why."""
    import uuid

    import nbformat
    from labutils.data_files import cache_dir

    root = container["root"]
    nonce = uuid.uuid4().hex[:8]
    planted = Path(sysconfig.get_paths()["purelib"]) / f"zz-looplab-attack-{nonce}.pth"
    report_file = Path(f"/dev/shm/looplab-attack-{nonce}.json")
    source_nb = root / "source" / "loop-lab" / "solutions" / "loop_lab" / f"{toy.NOTEBOOK}.ipynb"
    grader = root / "source" / "loop-lab" / "autograder" / "gradescope.py"
    before = {p: p.read_bytes() for p in (source_nb, grader)}
    attack = ATTACK.format(pth=planted.name, notebook=toy.NOTEBOOK, report=str(report_file))
    shutil.rmtree(root / "submission", ignore_errors=True)
    (root / "submission").mkdir()
    nbformat.write(toy.notebook(toy.CORRECT, "Because.", before=(attack,)), root / "submission" /
                   f"{toy.NOTEBOOK}.ipynb")
    reveal = [str(Path(sys.base_prefix).resolve()), str(cache_dir())]
    try:
        run = gradescope_container.run_autograder(
            root, env={"LOOPLAB_PYTHON": sys.executable, "LOOPLAB_GRADER_CACHE": "/tmp/grader-cache"},
            before_exec=WITHOUT_NAMESPACES_OR_LANDLOCK.format(reveal=reveal))
        changed = [p.name for p, data in before.items() if p.read_bytes() != data]
        planted_pth, forged = planted.exists(), (root / "results" / "forged.json").exists()
        report = json.loads(report_file.read_text()) if report_file.exists() else None
    finally:
        planted.unlink(missing_ok=True)  # a regression's litter in this checkout's venv goes with it
        report_file.unlink(missing_ok=True)
        for path, data in before.items():
            path.write_bytes(data)  # the module's container serves the other tests
    results = valid(run.results)
    assert not changed and not planted_pth and not forged, (changed, planted_pth, forged, report)
    if run.returncode != 0:  # refused: the reason, for the instructor, in results.json too
        assert results["score"] == 0 and "refused to grade" in results["output"], results
        assert "what to change" in results["output"] and results["tests"] == [], results
        return
    assert report == dict.fromkeys(["read a hidden test", "rewrite the hidden marker", "change the grader",
                                    "write a .pth into the venv", "write the results"], "Permission denied")
    check_results(results, toy.CORRECT, {"test_add": 1, "test_add_hidden": 2})
    confined = next(line for line in run.stdout.splitlines() if "student code confined" in line)
    assert "Landlock" not in confined and "scratch" not in confined  # refused here: never claimed
    assert "user, permissions" in confined and "uid 65534" in confined, confined
