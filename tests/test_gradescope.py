"""The Gradescope autograder: the zip holds what Gradescope runs, and its run_autograder, run in an emulated
Gradescope folder layout (its root moved with GRADESCOPE_ROOT), writes a results.json with Gradescope's documented
fields for a correct, a stub and a one-mistake submission of the one-notebook toy assignment."""

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

import forked_graders
import gradescope_container
from autograder_cases import toy

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.autograder]

# Gradescope's documented results.json fields (Autograder specifications: "Output format")
TOP_FIELDS = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
              "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
TEST_FIELDS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format", "tags",
               "visibility", "extra_data"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


def validate(results: dict) -> None:
    """Fail unless ``results`` is what Gradescope reads: known fields of the documented types."""
    assert set(results) <= TOP_FIELDS, set(results) - TOP_FIELDS
    assert isinstance(results["tests"], list) and isinstance(results.get("output", ""), str)
    assert results.get("stdout_visibility", "hidden") in VISIBILITY
    for test in results["tests"]:
        assert set(test) <= TEST_FIELDS, set(test) - TEST_FIELDS
        assert isinstance(test["name"], str) and isinstance(test["output"], str)
        assert isinstance(test["score"], (int, float)) and isinstance(test["max_score"], (int, float))
        assert 0 <= test["score"] <= test["max_score"]
        assert test["status"] in ("passed", "failed") and test["visibility"] in VISIBILITY


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


def emulate(root: Path, body: str, created_at: str = ON_TIME) -> dict:
    """One Gradescope submission: the notebook in ROOT/submission, Gradescope's submission_metadata.json (its
    documented fields: the submission's time, the due date), run_autograder, ROOT/results/results.json."""
    for folder in ("submission", "results"):
        subprocess.run(["rm", "-rf", root / folder], check=True)
    (root / "submission").mkdir(parents=True)
    write_metadata(root, created_at)
    import nbformat

    nbformat.write(toy.notebook(body, "Because."), root / "submission" / f"{toy.NOTEBOOK}.ipynb")
    env = dict(os.environ, GRADESCOPE_ROOT=str(root), LOOPLAB_PYTHON=sys.executable)
    proc = subprocess.run(["bash", root / "source" / "run_autograder"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "student code confined" in proc.stdout  # the confinement the container allowed, for the instructor
    results = json.loads((root / "results" / "results.json").read_text())
    validate(results)
    return results


def check_results(results: dict, body: str, scores: dict, late: bool = False) -> dict:
    """The toy notebook's results.json for ``body``: its ``scores``, and what every run's results say (``late``:
    handed in 61 h after Gradescope's due date, the zip's policy taking 30%); its tests."""
    tests = {t["name"].split(": ")[1]: t for t in results["tests"]}
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
    if not late:
        assert "score" not in results  # Gradescope sums the tests
        assert "(time from Gradescope's submission time (submission_metadata.json created_at)), before the " \
               "deadline (2026-03-01T12:00:00+00:00)" in results["output"]
        return tests
    assert results["score"] == 0.1  # 1 of 3 autograded points, less 30% of the 3 (grade --deadlines: the same)
    assert "Handed in 61 h after the deadline (2026-03-01T12:00:00+00:00; time from Gradescope's submission time " \
           "(submission_metadata.json created_at)): penalty: 30% of the notebook's points." in results["output"]
    assert "Late penalty: 0.9 of the autograded points" in results["output"]
    return tests


@pytest.mark.slow
@pytest.mark.parametrize("body, scores", [
    (toy.STUB, {"test_add": 0, "test_add_hidden": 0}),
    (toy.ONE_MISTAKE, {"test_add": 1, "test_add_hidden": 0}),
], ids=["stub", "one-mistake"])  # a correct one: the container test below
def test_run_autograder_writes_gradescope_results(unpacked, body, scores):
    late = body == toy.ONE_MISTAKE  # handed in 61 h after Gradescope's due date: three started days, 30%
    check_results(emulate(unpacked["root"], body, LATE_61H if late else ON_TIME), body, scores, late)


def test_a_submission_that_cannot_be_graded_still_gets_results(tmp_path, monkeypatch):
    layout = gradescope.GradescopeLayout(tmp_path)  # no submission folder at all
    monkeypatch.setattr(gradescope, "grade", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no zygote")))
    assert gradescope.run(layout, toy.write_source(tmp_path / "src")) == 1
    results = json.loads(layout.results.read_text())
    validate(results)
    assert results["tests"] == [] and "could not grade this submission" in results["output"]


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
    results = valid_results(json.loads(layout.results.read_text()))
    assert results["score"] == 0 and results["tests"] == [] and results["visibility"] == "visible"
    assert results["output"] == f"The autograder {why}"


# --- the container, emulated: /autograder in a mount namespace of its own, 768 MB and half a CPU ----------------------


SCHEMA = json.loads((Path(__file__).parent / "gradescope_results.schema.json").read_text())


def valid_results(results: dict | None) -> dict:
    """``results`` checked against the schema written from Gradescope's specification (and the older checks)."""
    import jsonschema

    assert results is not None, "run_autograder wrote no results.json"
    jsonschema.validate(results, SCHEMA)
    validate(results)
    return results


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
    upload(container["root"], container["honest"])
    run = gradescope_container.run_autograder(container["root"], env={"LOOPLAB_PYTHON": sys.executable})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.oom_kills == 0 and 0 < run.peak_mb < gradescope_container.MEMORY_MB, run
    results = valid_results(run.results)
    local = {t["name"]: t["points"] for t in container["local"]["tests"] if t["kind"] == "auto"}
    assert {t["name"].split(": ")[1]: t["score"] for t in results["tests"]} == local == {"test_add": 1,
                                                                                      "test_add_hidden": 2}

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
    results = valid_results(run.results)
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
