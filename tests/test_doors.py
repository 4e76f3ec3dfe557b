"""Issue 16: the grader's own doors, tried as a hostile student would, black-box through the command line.

One hostile class (tests/autograder_cases/doors.py: one student per door beside an untouched control) is graded once
with ``python -m autograder grade SUBMISSIONS --out OUT -j 2`` from a scratch copy of the project, under a subreaper
(tests/autograder_cases/reaper.py) that keeps whatever the run leaves behind. After the grader exits: the processes
left, grades.csv, the JSONs and OUT; LATER seconds later the same again (one shared wait); the project and SUBMISSIONS
hashed before and after. Each door is asserted in its own test.

The reply-id tests (door 4) drive the zygote client against a fake zygote that answers late or out of
order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue
import select
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autograder.channel import KernelRequest, KernelStarted, KillAll, Killed
from autograder.sandbox.policy import Policy
from autograder.sandbox.client import Zygote, ZygoteError

from autograder_cases import build, doors

REPO = Path(__file__).resolve().parents[1]
REAPER = Path(__file__).parent / "autograder_cases" / "reaper.py"
LATER = 15  # s after the grader's exit when OUT is compared again: the lingering attacker writes 1-1.5 s after it
pytestmark = pytest.mark.autograder


# --- the hostile class, graded once ------------------------------------------------------------------------------------


def tree_hash(root: Path) -> dict[str, str]:
    """path -> sha256 of every regular file under ``root`` (links and special files by their kind); caches left out."""
    found = {}
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        mode = path.lstat().st_mode
        rel = str(path.relative_to(root))
        if stat.S_ISREG(mode):
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        elif not stat.S_ISDIR(mode):
            found[rel] = f"{stat.S_IFMT(mode):o}:{os.readlink(path) if path.is_symlink() else ''}"
    return found


def _changed(before: dict, after: dict) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def _read_line(proc: subprocess.Popen, timeout: float) -> dict:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line:
        raise AssertionError(f"the grader gave no sign of exiting within {timeout:.0f} s")
    return json.loads(line)


@dataclasses.dataclass
class HostileRun:
    cls: doors.HostileClass
    returncode: int
    seconds: float
    stderr: str
    left_at_exit: list[dict]
    left_later: list[dict]
    out_at_exit: dict[str, str]
    out_later: dict[str, str]
    project: tuple[dict, dict]  # before, after
    submissions: tuple[dict, dict]

    def record(self, student: str) -> dict:
        return json.loads((self.cls.out / f"{student}.json").read_text())

    def rows(self, student: str) -> list[dict]:
        return [r for r in build.read_csv(self.cls.out / "grades.csv") if r["student"] == student]

    def auto_points(self, student: str, notebook: str) -> dict[str, float]:
        return {t["name"]: t["points"] for t in self.record(student)["tests"]
                if t["notebook"] == notebook and t["kind"] == "auto"}

    def reasons(self, student: str, notebook: str | None = None) -> str:
        record = self.record(student)
        notes = record["notes"] if notebook is None else []
        for nb, info in record["notebooks"].items():
            if notebook in (None, nb):
                notes += info["notes"]
        return " | ".join(notes)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("doors")
    cls = doors.write_hostile_class(root, REPO)
    (root / "tmp").mkdir()
    project_before, subs_before = tree_hash(cls.project), tree_hash(cls.submissions)
    command = [sys.executable, "-m", "autograder", "grade", str(cls.submissions), "--out", str(cls.out), "-j", "2",
               "--timeout-cell", "30", "--timeout-notebook", "90"]
    env = dict(os.environ, PYTHONPATH=str(cls.project), TMPDIR=str(root / "tmp"))  # the scratch project runs
    proc = subprocess.Popen([sys.executable, str(REAPER), str(root / "stdout"), str(root / "stderr"), "--", *command],
                            cwd=cls.project, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        exited = _read_line(proc, 1800)
        at_exit = time.monotonic()
        out_at_exit = tree_hash(cls.out)
        time.sleep(max(0.0, at_exit + LATER - time.monotonic()))  # one shared wait for every door
        proc.stdin.write("list\n")
        proc.stdin.flush()
        left_later = _read_line(proc, 60)["left"]
        run = HostileRun(cls=cls, returncode=exited["returncode"], seconds=exited["seconds"],
                         stderr=(root / "stderr").read_text(errors="replace"), left_at_exit=exited["left"],
                         left_later=left_later, out_at_exit=out_at_exit, out_later=tree_hash(cls.out),
                         project=(project_before, tree_hash(cls.project)),
                         submissions=(subs_before, tree_hash(cls.submissions)))
        print(f"hostile class graded in {run.seconds:.0f} s, exit status {run.returncode}\n{run.stderr[-5000:]}")
        yield run
    finally:
        proc.stdin.close()  # the reaper kills, by pid, whatever the run left below it
        proc.wait(timeout=60)


needs_solutions = pytest.mark.skipif(len(list((REPO / "solutions" / "loop_lab").glob("*.ipynb"))) < 9,
                                     reason="solutions/ not complete")

@pytest.mark.slow
@needs_solutions
def test_the_control_is_graded_exactly_as_alone(hostile):
    assert hostile.returncode in (0, 1), hostile.stderr[-3000:]  # a finished run (2: refused, or a traceback)
    assert hostile.rows(doors.CONTROL) == hostile.cls.control_rows
    expected = {(t.notebook, t.name): t.points if t.notebook in doors.ATTACKED and not t.written else 0
                for t in hostile.cls.tests}
    got = {(t["notebook"], t["name"]): t["points"] for t in hostile.record(doors.CONTROL)["tests"]}
    assert got == expected
    assert hostile.record(doors.CONTROL)["graded"]


# --- door 1: the zygote's socket -----------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_solutions
def test_the_zygote_socket_does_no_work_for_a_student(hostile):
    cls = hostile.cls
    markers = [str(p) for where in (cls.out, cls.submissions, cls.project, cls.root / "tmp")
               for p in where.rglob(f"*{doors.ESCAPE_MARK}*")]
    assert not markers, f"a student process wrote outside its folder: {markers}"
    assert hostile.project[0] == hostile.project[1], \
        f"the project the grader ran from changed: {_changed(*hostile.project)}"


@pytest.mark.slow
@needs_solutions
def test_submissions_are_left_as_they_were(hostile):
    assert hostile.submissions[0] == hostile.submissions[1], \
        f"files in SUBMISSIONS changed while grading: {_changed(*hostile.submissions)}"


@pytest.mark.slow
@needs_solutions
def test_nothing_outlives_the_run(hostile):
    assert not hostile.left_at_exit, "processes of the run still alive when grade exited:\n" + "\n".join(
        f"{p['pid']}: {p['cmdline']}" for p in hostile.left_at_exit)
    assert not hostile.left_later, f"and {LATER} s later:\n" + "\n".join(
        f"{p['pid']}: {p['cmdline']}" for p in hostile.left_later)


@pytest.mark.slow
@needs_solutions
def test_grades_and_out_are_unchanged_a_while_later(hostile):
    assert hostile.out_at_exit == hostile.out_later, \
        f"OUT changed after the grader exited: {_changed(hostile.out_at_exit, hostile.out_later)}"
    assert hostile.rows(doors.ZYGOTE) and all(r["score"] != r["max_score"] for r in hostile.rows(doors.ZYGOTE)
                                              if r["notebook"] != "02_scheduler")  # nine rows, eight not handed in


# --- door 2: forged verdicts -----------------------------------------------------------------------------------------


@pytest.mark.slow
@needs_solutions
def test_forged_verdict_lines_score_nothing(hostile):
    points = hostile.auto_points(doors.FORGER, "02_scheduler")
    assert points and all(p == 0 for p in points.values()), f"a release notebook scored by forged verdicts: {points}"
    assert all(r["score"] == "0" for r in hostile.rows(doors.FORGER))


# --- door 3: links and special files ------------------------------------------------------------------------------------


def _zero_with_reason(hostile, student: str, notebooks: list[str], *words: str) -> None:
    """``student`` scores 0 on ``notebooks`` and its notes say why, with one of ``words``."""
    rows = {r["notebook"]: r["score"] for r in hostile.rows(student)}
    assert rows and all(rows[nb] == "0" for nb in notebooks), f"{student} scored {rows}"
    for nb in notebooks:
        reasons = hostile.reasons(student, nb) + " | " + hostile.reasons(student)
        assert any(w in reasons for w in words), f"{student}/{nb}: no reason naming {words}: {reasons[:500]}"


@pytest.mark.slow
@needs_solutions
def test_symlinked_folders_are_not_followed(hostile):
    for student in doors.SYMLINKED_FOLDERS:
        _zero_with_reason(hostile, student, [r["notebook"] for r in hostile.cls.control_rows], "symbolic link")


@pytest.mark.slow
@needs_solutions
def test_symlinked_notebooks_are_refused(hostile):
    _zero_with_reason(hostile, doors.SYMLINKED_NOTEBOOKS, ["02_scheduler", "03_clipping"], "symbolic link")


@pytest.mark.slow
@needs_solutions
def test_hard_links_are_refused_and_leak_nothing(hostile):
    _zero_with_reason(hostile, doors.HARDLINKED_NOTEBOOK, ["02_scheduler"], "hard link")
    assert "answers.txt" in hostile.reasons(doors.HARDLINKED_EXTRA)
    leaks = [str(p) for p in hostile.cls.out.rglob("*") if p.is_file() and p.stat().st_size < 50 << 20
             and hostile.cls.leak_hash.encode() in p.read_bytes()]
    assert not leaks, f"the solution notebook, hard-linked as a data file, was read by student code: {leaks}"


@pytest.mark.slow
@needs_solutions
def test_fifos_devices_and_sockets_are_refused(hostile):
    notebooks = ["02_scheduler", "04_accumulation"] + (["03_clipping"] if os.geteuid() == 0 else [])
    _zero_with_reason(hostile, doors.SPECIAL_FILES, notebooks, "fifo", "device", "socket")
    for nb in notebooks:
        assert hostile.record(doors.SPECIAL_FILES)["notebooks"][nb]["status"] == "unreadable"
    assert "data.bin" in hostile.reasons(doors.SPECIAL_FILES)


# --- doors 5 and 6: folders ------------------------------------------------------------------------------------------------


def _listed_as_not_graded(hostile, folder: str) -> None:
    summary = (hostile.cls.out / "summary.md").read_text()
    problems = summary.split("**Incomplete run:**", 1)[-1].split("\n## ", 1)[0]
    assert f"- ` {folder}: " in problems, f"{folder!r} is not listed as not graded in summary.md:\n{problems}"
    assert folder in hostile.stderr.split("problem(s):")[-1]
    assert hostile.returncode == 1


@pytest.mark.slow
@needs_solutions
def test_a_dot_named_folder_is_listed_not_dropped(hostile):
    _listed_as_not_graded(hostile, doors.DOT_NAMED)


@pytest.mark.slow
@needs_solutions
def test_an_id_clash_is_reported_and_the_others_graded(hostile):
    for folder in (*doors.CLASHING, doors.BAD_NAME):
        _listed_as_not_graded(hostile, folder)
    assert hostile.rows(doors.CONTROL) == hostile.cls.control_rows
    assert not (hostile.cls.out / "absent.json").exists()  # é.absent is not renamed into another student's id


@pytest.mark.slow
@needs_solutions
def test_a_symlinked_student_folder_is_listed(hostile):
    _listed_as_not_graded(hostile, doors.SYMLINKED_TOP)


# --- doors 5 and 7, huge outputs: absurd notebooks --------------------------------------------------------------------------


def _solution_points(hostile, notebook: str) -> str:
    return next(r["score"] for r in hostile.cls.control_rows if r["notebook"] == notebook)


@pytest.mark.slow
@needs_solutions
def test_deep_json_is_refused_and_the_rest_is_graded(hostile):
    _zero_with_reason(hostile, doors.DEEP_JSON, ["02_scheduler"], "nested")
    assert hostile.record(doors.DEEP_JSON)["notebooks"]["02_scheduler"]["status"] == "unreadable"
    scores = {r["notebook"]: r["score"] for r in hostile.rows(doors.DEEP_JSON)}
    assert scores["03_clipping"] == _solution_points(hostile, "03_clipping")  # its other notebook: graded


def _refused_or_graded(hostile, student: str, *words: str) -> None:
    """Absurd but possibly honest: refused with a reason naming the limit, or graded as the solution it holds."""
    info = hostile.record(student)["notebooks"]["02_scheduler"]
    score = next(r["score"] for r in hostile.rows(student) if r["notebook"] == "02_scheduler")
    if info["status"] == "unreadable":
        assert any(w in hostile.reasons(student, "02_scheduler") for w in words), info["notes"]
    else:
        assert info["status"] == "graded" and score == _solution_points(hostile, "02_scheduler"), (info, score)


@pytest.mark.slow
@needs_solutions
def test_fifty_thousand_cells_get_a_clear_verdict(hostile):
    _refused_or_graded(hostile, doors.MANY_CELLS, "cells")


@pytest.mark.slow
@needs_solutions
def test_a_huge_output_gets_a_clear_verdict(hostile):
    _refused_or_graded(hostile, doors.HUGE_OUTPUT, "MB")


# --- door 4: replies tied to their requests (today's zygote client, a fake zygote) ------------------------------------------


class FakeZygote:
    """A zygote on a Unix socket that answers each request as ``answer(index, request)`` says: a list of (seconds to
    wait, reply, for a foreign request?) sent in order. A field that ties a reply to its request (a name with "id" in
    the envelope or in both bodies) is echoed from the request, or made foreign."""

    def __init__(self, path: Path, answer):
        self.answer = answer
        self.sent = queue.Queue()  # one item per reply sent
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self.path = str(path)
        threading.Thread(target=self._serve, daemon=True).start()

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.path)
        return sock

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        try:
            with conn:
                for index, line in enumerate(conn.makefile("rb")):
                    request = json.loads(line)
                    if request["type"] == "Exit":
                        return
                    for delay, reply, foreign in self.answer(index, request):
                        time.sleep(delay)
                        conn.sendall(_envelope(request, reply, foreign))
                        self.sent.put(reply)
        except OSError:
            pass  # the client has gone


def _envelope(request: dict, reply, foreign: bool) -> bytes:
    def tie(value):
        if not foreign:
            return value
        return value + "-other" if isinstance(value, str) else value + 1_000_000 if isinstance(value, int) else None

    body = dataclasses.asdict(reply)
    body.update({k: tie(v) for k, v in request["body"].items() if "id" in k and k in body})
    envelope = {k: tie(v) for k, v in request.items() if k not in ("type", "body")}
    return (json.dumps({**envelope, "type": type(reply).__name__, "body": body}) + "\n").encode()


def _kernel_request(name: str) -> KernelRequest:
    return KernelRequest(argv=[name], cwd="/", env={}, policy=Policy(), log="/dev/null")


@pytest.mark.parametrize("first, late", [(_kernel_request("first"), KernelStarted(pid=1111)),
                                         (KillAll(), Killed(killed=3))], ids=["kernel", "killall"])
def test_a_late_reply_never_answers_the_next_request(tmp_path, first, late):
    """A request given up (no answer in time) whose reply comes later: that reply must not become the next
    request's (a kernel of another task, or the issue's 'expected (KernelStarted, Failure), got Killed')."""
    fake = FakeZygote(tmp_path / "z.sock", lambda i, req: [(1.0, late, False)] if i == 0
                      else [(0, KernelStarted(pid=2222), False)])
    client = Zygote(sock=fake.connect())
    with pytest.raises(ZygoteError):
        client.request(first, type(late), timeout=0.3)
    fake.sent.get(timeout=5)  # the late reply is on its way before the next request
    assert client.request(_kernel_request("next"), KernelStarted, timeout=5).pid == 2222


def test_a_reply_for_a_request_never_made_is_skipped(tmp_path):
    """Replies out of order: one tied to another request comes first; the client takes its own."""
    fake = FakeZygote(tmp_path / "z.sock", lambda i, req: [(0, KernelStarted(pid=9999), True),
                                                           (0, KernelStarted(pid=2222), False)])
    client = Zygote(sock=fake.connect())
    assert client.request(_kernel_request("mine"), KernelStarted, timeout=5).pid == 2222
