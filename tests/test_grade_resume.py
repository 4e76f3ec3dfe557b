"""Issue 18: a grading run survives its own death and grades only what changed.

A small class with known mistakes is graded once without interruption (the reference). Then the same class is graded
into another OUT by a grader that is killed with SIGKILL five times (as an OOM killer or a pre-emption would: no
clean-up of its own): with its workers while a kernel runs, after its first finished task, after one more, during the
gradebook write and during the summary (the last two at the grader's kill points), before a sixth run is let finish:
its grades.csv and every student's JSON equal the reference's, the tasks finished before a kill are not graded again,
nothing of a killed run is left running (each of those runs is a real ``python -m autograder`` started under a
subreaper, tests/autograder_cases/reaper.py) and no file or folder of a dead run is left in TMPDIR (kernel connection
files included). Then a late student is added: the next run grades that student's notebooks alone. A second run on a
locked OUT is refused. The runs nobody kills (the reference, the late student's, the refused one) are the suite's
forked commands (tests/forked_graders.py). The same resume on a Dask cluster (its client killed):
tests/test_grade_dask.py, beside that module's one cluster.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder_cases import build, reaper, records

from autograder.results.journal import KILL_AT
from autograder.run.worker import NAME as WORKER_NAME  # its workers are forks with the grader's command line

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions" / "loop_lab"
REAPER = Path(__file__).parent / "autograder_cases" / "reaper.py"
LIMITS = ["--timeout-cell", "30", "--timeout-notebook", "90"]
CLASS = {  # student -> the notebooks handed in: known mistakes beside a right answer, cheap notebooks only
    "solutions": ("01_baseline", "02_scheduler", "03_clipping"),
    "release": ("01_baseline",),
    "mutant-no-zero-grad": ("01_baseline",),
    "mutant-scheduler-before-optimizer": ("02_scheduler",),
}
LATE = "mutant-evaluate-no-eval"

pytestmark = [pytest.mark.autograder, pytest.mark.slow,
              pytest.mark.skipif(len(list(SOLUTIONS.glob("*.ipynb"))) < 9, reason="solutions/ not complete")]


def _students(tmp: Path) -> dict[str, build.Student]:
    chosen = {}  # the release is the committed notebooks/ (tests/test_notebooks.py: nbgrader's output, exactly)
    for st in build.build_class(SOLUTIONS, REPO / "notebooks", REPO, tmp / "unused-out"):
        if st.name in CLASS or st.name == LATE:
            keep = CLASS.get(st.name) or ("01_baseline",)
            st.notebooks = {nb: content for nb, content in st.notebooks.items() if nb in keep}
            chosen[st.name] = st
    return chosen


class GraderRun:
    """``autograder grade`` below a subreaper (so that what a killed grader leaves is seen), in its own TMPDIR."""

    def __init__(self, submissions: Path, out: Path, tmp: Path, *extra: str, env: dict | None = None):
        self.folder = tmp / f"run-{time.monotonic_ns()}"
        self.folder.mkdir(parents=True)
        self.tmpdir = tmp / "scratch"
        self.tmpdir.mkdir(exist_ok=True)
        command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out), "-j", "2",
                   *LIMITS, *extra]
        self.proc = subprocess.Popen([sys.executable, str(REAPER), str(self.folder / "stdout"),
                                      str(self.folder / "stderr"), "--", *command], cwd=REPO,
                                     env=dict(os.environ, TMPDIR=str(self.tmpdir), **(env or {})),
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def grader_pid(self) -> int | None:
        return next((p["pid"] for p in reaper.below(self.proc.pid)
                     if " -m autograder grade " in p["cmdline"] and p["comm"] != WORKER_NAME), None)

    def exited(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        assert line, f"the grader did not exit within {timeout:.0f} s"
        return json.loads(line)

    def left(self) -> list[dict]:
        self.proc.stdin.write("list\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["left"]

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    @property
    def stderr(self) -> str:
        return (self.folder / "stderr").read_text(errors="replace")


def _journal(out: Path) -> set[str]:
    return {p.stem for p in (out / ".journal").glob("*.json")} if (out / ".journal").is_dir() else set()


def _kill_when(run: GraderRun, ready, timeout: float = 600, with_workers: bool = False) -> None:
    """SIGKILL the grader (only it: the rest must go by itself; ``with_workers``: its workers too, at once, as an OOM
    killer or ``kill -9`` of the process group would) as soon as ``ready()`` holds."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert run.proc.poll() is None and time.monotonic() < deadline, "the moment to kill never came"
        time.sleep(0.2)
    pid = run.grader_pid()
    assert pid is not None, "the grader had already exited"
    workers = [p["pid"] for p in reaper.below(run.proc.pid) if p["comm"] == WORKER_NAME]
    for victim in [pid, *(workers if with_workers else [])]:
        os.kill(victim, signal.SIGKILL)


def _kernel_running(scratch: Path) -> bool:
    """Does a kernel run (its connection file exists, wherever jupyter put it)?"""
    return any(p.name.startswith(("kernel-", "tmp")) and p.suffix == ".json" for p in scratch.rglob("*.json"))


LEFT_WAIT_S = 15


def _left_after(run: GraderRun) -> list[dict]:
    """What is still running below a killed grader once its death had time to travel down the tree (zygote, its
    forks, kernels, workers: each a SIGKILL, but a loaded machine takes a while to tear down big processes)."""
    deadline = time.monotonic() + LEFT_WAIT_S
    while (left := run.left()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _uninterrupted(cli, submissions: Path, out: Path, tmp: Path) -> subprocess.CompletedProcess:
    """A run nobody kills (``cli``: the suite's ``autograder_cli``), with the killed runs' options and TMPDIR."""
    (tmp / "scratch").mkdir(exist_ok=True)
    return cli("grade", submissions, "--out", out, "-j", 2, *LIMITS, env=dict(os.environ, TMPDIR=str(tmp / "scratch")),
               timeout=900)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, autograder_cli):
    tmp = tmp_path_factory.mktemp("resume")
    students = _students(tmp)
    on_time = [st for name, st in students.items() if name != LATE]
    build.write_class(on_time, tmp / "submissions")

    reference = _uninterrupted(autograder_cli, tmp / "submissions", tmp / "reference", tmp)
    assert reference.returncode == 0, reference.stderr[-3000:]

    out, kills = tmp / "out", []
    for moment in ("with its workers, while a kernel runs", "after the first task", "after one more task",
                   "during the gradebook write", "during the summary"):
        point = {"during the gradebook write": "gradebook", "during the summary": "summary.md"}.get(moment)
        if moment.startswith("with its workers"):  # nothing cleans up: what the run wrote stays where it wrote it
            run = GraderRun(tmp / "submissions", out, tmp)
            _kill_when(run, lambda: _kernel_running(run.tmpdir), with_workers=True)
        elif point is None:
            run = GraderRun(tmp / "submissions", out, tmp)
            before = _journal(out)
            _kill_when(run, lambda: len(_journal(out) - before) >= 1)
        else:  # too short a moment to aim at from outside: the grader kills itself there (journal.kill_point)
            run = GraderRun(tmp / "submissions", out, tmp, env={KILL_AT: point})
        exited = run.exited(900 if point else 120)
        kills.append({"moment": moment, "kept": _journal(out), "left": _left_after(run), "exited": exited,
                      "stderr": run.stderr, "files": {p.name for p in out.iterdir()}})
        run.stop()
    final = GraderRun(tmp / "submissions", out, tmp)
    last = final.exited(900)
    final.stop()
    assert last["returncode"] == 0, final.stderr[-3000:]
    return {"tmp": tmp, "out": out, "reference": tmp / "reference", "kills": kills, "final": final, "last": last,
            "students": students}


def test_a_killed_run_keeps_what_it_finished(graded):
    first, second = graded["kills"][1:3]
    assert first["kept"], "the first killed run kept no finished task"
    assert first["kept"] <= second["kept"] and len(second["kept"]) > len(first["kept"])
    reused = re.search(r"(\d+) task\(s\) reused", graded["final"].stderr)
    assert reused and int(reused.group(1)) >= len(second["kept"]), graded["final"].stderr[-2000:]


def test_a_run_killed_while_writing_its_results_is_finished_by_the_next(graded):
    """Killed in the gradebook write (one student committed) and then in the summary (grades.csv and the JSONs
    written, the plot not yet): every task was kept, so the runs after it grade nothing, and the files a killed run
    left are whole (each is written atomically) and replaced."""
    in_gradebook, in_summary = graded["kills"][3:5]
    assert "gradebook.db" in in_gradebook["files"] and "grades.csv" not in in_gradebook["files"]
    assert {"grades.csv", "summary.md", *(f"{s}.json" for s in CLASS)} <= in_summary["files"]
    assert "summary.png" not in in_summary["files"]
    assert in_summary["kept"] == in_gradebook["kept"], "the run killed in its summary graded a task again"
    assert re.search(r"reused from .*; 0 to grade", in_summary["stderr"]), in_summary["stderr"][-2000:]
    assert re.search(r"reused from .*; 0 to grade", graded["final"].stderr), graded["final"].stderr[-2000:]
    assert (graded["out"] / "summary.png").stat().st_size > 0


def test_the_resumed_run_equals_an_uninterrupted_one(graded):
    out, reference = graded["out"], graded["reference"]
    assert (out / "grades.csv").read_text() == (reference / "grades.csv").read_text()
    for name in CLASS:
        records.assert_same_record(out, reference, name)
    for kind in ("feedback", "autograded"):
        files = sorted(p.relative_to(reference) for p in (reference / kind).rglob("*") if p.is_file())
        assert files and sorted(p.relative_to(out) for p in (out / kind).rglob("*") if p.is_file()) == files


def test_nothing_of_a_killed_run_is_left(graded):
    for kill in graded["kills"]:
        assert kill["exited"]["returncode"] == -signal.SIGKILL
        assert not kill["left"], f"killed {kill['moment']}, still running {LEFT_WAIT_S} s later:\n" + "\n".join(
            f"{p['pid']}: {p['cmdline']}" for p in kill["left"])
    scratch = graded["tmp"] / "scratch"
    assert not list(scratch.glob("looplab-grade-*")), "a dead run's scratch folder was left in TMPDIR"
    left = sorted(p.name for p in scratch.iterdir())  # tmp*.json: kernel connection files holding an HMAC key
    assert left == [], f"files of killed runs left in TMPDIR: {left}"


def test_a_late_student_is_graded_alone(graded, autograder_cli):
    tmp, out = graded["tmp"], graded["out"]
    build.write_class([graded["students"][LATE]], tmp / "submissions")
    run = _uninterrupted(autograder_cli, tmp / "submissions", out, tmp)
    assert run.returncode == 0, run.stderr[-3000:]
    everyone = sum(len(nbs) for nbs in CLASS.values())
    assert f"{everyone} task(s) reused" in run.stderr and "1 to grade (1 new)" in run.stderr, run.stderr[-2000:]
    assert {r["student"] for r in build.read_csv(out / "grades.csv")} == {*CLASS, LATE}
    for name in CLASS:
        records.assert_same_record(out, graded["reference"], name)


def test_a_second_run_on_a_busy_out_is_refused(graded, tmp_path, autograder_cli):
    from autograder.results import journal

    held = journal.lock_out(tmp_path / "out")
    try:
        proc = autograder_cli("grade", graded["tmp"] / "submissions", "--out", tmp_path / "out", timeout=300)
    finally:
        held.close()
    assert proc.returncode == 2
    assert f"pid {os.getpid()}" in proc.stderr and "another --out" in proc.stderr, proc.stderr[-2000:]
