"""Issue 17: the operating-system layers around student code (autograder/sandbox/isolation.py), each tried the way a
hostile notebook would, in a child process that enters the layer first.

Every bomb runs inside a second fence of the test's own: a pids and memory cgroup (or, without cgroups, the layer's
test is skipped), so a regression fails the test, not the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from autograder.sandbox import isolation

from autograder_cases.fence import Fence

AVAILABLE = isolation.probe()
REPO = Path(__file__).resolve().parents[1]


def needs(layer: str):
    return pytest.mark.skipif(bool(AVAILABLE[layer]), reason=f"this machine does not allow the {layer} layer: "
                              f"{AVAILABLE[layer]}")


def run_confined(body: str, layers: list[str], tmp: Path, fence: Fence | None = None, timeout: float = 120,
                 **kwargs) -> dict:
    """Run ``body`` (which sets ``result``, a dict) in a fresh Python that first enters ``layers``; the result, or
    ``{"returncode": N}`` when the process did not finish by itself."""
    home, cwd = tmp / "home", tmp / "cwd"
    home.mkdir(exist_ok=True)
    cwd.mkdir(exist_ok=True)
    (cwd / "handed-in.txt").write_text("the student's own file")
    script = (fence.enter_command() if fence else "") + textwrap.dedent(f"""
        import json, os, sys
        from autograder.sandbox import isolation
        isolation.enter({layers!r}, "test-{uuid.uuid4().hex[:8]}", {kwargs.get('memory_mb', 512)}, [{str(home)!r}],
                        {str(cwd)!r}, scratch_mb={kwargs.get('scratch_mb', 16)}, pids_max={kwargs.get('pids_max', 64)})
        os.chdir({str(cwd)!r})
        result = {{}}
    """) + textwrap.dedent(body) + "\nprint(json.dumps(result))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          cwd=str(tmp))
    if proc.returncode < 0:
        return {"returncode": proc.returncode}
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- scratch -------------------------------------------------------------------------------------------------------------


@needs("scratch")
def test_shm_home_and_the_notebook_folder_are_private(tmp_path):
    marker = f"looplab-{uuid.uuid4().hex}"
    folders = ("/dev/shm", str(tmp_path / "home"), ".")
    result = run_confined(f"""
        for folder in {folders!r}:
            open(os.path.join(folder, {marker!r}), "w").write("an answer left for the next student")
        result["own file"] = open("handed-in.txt").read()
        result["sees its writes"] = all(os.path.exists(os.path.join(f, {marker!r})) for f in {folders!r})
    """, ["scratch"], tmp_path)
    assert result == {"own file": "the student's own file", "sees its writes": True}
    left = [str(p) for folder in (Path("/dev/shm"), tmp_path) for p in folder.rglob(marker)]
    assert not left, f"a task's writes outlived it: {left}"


@needs("scratch")
def test_a_disk_filler_fills_only_its_own_scratch(tmp_path):
    result = run_confined("""
        written, error = 0, ""
        try:
            with open("big.bin", "wb") as f:
                for _ in range(64):
                    f.write(b"x" * (1 << 20))
                    f.flush()
                    written += 1
        except OSError as exc:
            error = exc.strerror
        result = {"written_mb": written, "error": error}
    """, ["scratch"], tmp_path, scratch_mb=8)
    assert result["written_mb"] <= 8 and "No space left" in result["error"]
    assert not (tmp_path / "cwd" / "big.bin").exists()


# --- network -------------------------------------------------------------------------------------------------------------


@needs("network")
def test_no_udp_raw_packet_or_netlink_socket_and_nothing_reaches_a_listener(tmp_path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(1.0)
    port = listener.getsockname()[1]
    result = run_confined(f"""
        import socket
        tries = {{"udp": (socket.AF_INET, socket.SOCK_DGRAM), "udp6": (socket.AF_INET6, socket.SOCK_DGRAM),
                 "raw": (socket.AF_INET, socket.SOCK_RAW), "raw6": (socket.AF_INET6, socket.SOCK_RAW),
                 "packet": (socket.AF_PACKET, socket.SOCK_RAW), "appletalk": (5, socket.SOCK_DGRAM),
                 "sctp-like": (socket.AF_INET, socket.SOCK_SEQPACKET)}}
        for name, (family, kind) in tries.items():
            try:
                s = socket.socket(family, kind)
                if name == "udp":
                    s.sendto(b"the grading path", ("127.0.0.1", {port}))
                result[name] = "opened"
            except OSError as exc:
                result[name] = exc.strerror
        try:
            socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)  # NETLINK_AUDIT
            result["netlink-audit"] = "opened"
        except OSError as exc:
            result["netlink-audit"] = exc.strerror
        for name, family, kind in (("tcp", socket.AF_INET, socket.SOCK_STREAM), ("unix", socket.AF_UNIX, socket.SOCK_STREAM)):
            socket.socket(family, kind).close()
            result[name] = "opened"
        try:
            import mmap, ctypes
            result["io_uring"] = ctypes.CDLL(None, use_errno=True).syscall(425, 8, ctypes.create_string_buffer(120))
            result["io_uring_errno"] = ctypes.get_errno()
        except Exception as exc:
            result["io_uring"] = repr(exc)
    """, ["network"], tmp_path)
    refused = {k: v for k, v in result.items() if k not in ("tcp", "unix", "io_uring", "io_uring_errno")}
    assert all(v == "Permission denied" for v in refused.values()), result
    assert result["tcp"] == result["unix"] == "opened"  # the kernel's own channels (TCP is Landlock's)
    assert result["io_uring"] == -1 and result["io_uring_errno"] == 1
    with pytest.raises(socket.timeout):
        listener.recvfrom(100)


# --- pid -------------------------------------------------------------------------------------------------------------


def _named(name: str) -> list[int]:
    """Running processes (not zombies) whose name is ``name``, as this process sees them."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == name and \
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            pass
    return found


@needs("pid")
def test_student_code_sees_and_signals_only_its_own_processes_and_none_outlives_it(tmp_path):
    grader, daemon = os.getpid(), f"ll-{uuid.uuid4().hex[:10]}"
    result = run_confined(f"""
        import ctypes, time
        result["pid"], result["ppid"] = os.getpid(), os.getppid()
        result["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        result["grader in /proc"] = os.path.exists("/proc/{grader}/cmdline")
        try:
            os.kill({grader}, 0)
            result["signal the grader"] = "done"
        except OSError as exc:
            result["signal the grader"] = exc.strerror
        read, write = os.pipe()
        if os.fork() == 0:  # a daemon in its own session, meant to outlive the task
            os.setsid()
            ctypes.CDLL(None).prctl(15, {daemon.encode()!r}, 0, 0, 0)  # PR_SET_NAME: the test finds it by name
            os.write(write, b"up")
            time.sleep(300)
            os._exit(0)
        result["daemon"] = os.read(read, 2).decode()
    """, ["scratch", "pid"], tmp_path)
    assert result["pid"] == 1 and result["ppid"] == 0, result
    assert result["processes"] == [1], f"student code sees other processes: {result['processes']}"
    assert not result["grader in /proc"] and result["signal the grader"] == "No such process", result
    assert result["daemon"] == "up"
    deadline = time.monotonic() + 10
    while _named(daemon) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _named(daemon), "a daemon started by student code outlived its task"


def test_a_child_whose_parent_died_before_it_asked_to_die_with_it_exits(tmp_path):
    """The grader's workers and zygote ask for SIGKILL when their parent goes (``PR_SET_PDEATHSIG``), but a parent
    killed during the child's imports sends nothing: the child must see that it was already orphaned."""
    child = textwrap.dedent("""
        import os, sys, time
        time.sleep(1)  # the imports: meanwhile the parent is killed
        from autograder.sandbox.policy import die_with_parent
        die_with_parent(int(sys.argv[1]))
        time.sleep(300)
    """)
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", {child!r}, str(os.getpid())], start_new_session=True)
        print(child.pid, flush=True)
        os._exit(0)
    """)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    orphan = int(parent.stdout.readline())
    parent.wait()
    deadline = time.monotonic() + 15
    while _alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(orphan), "a child orphaned before it set PR_SET_PDEATHSIG lives on"


def _alive(pid: int) -> bool:
    """Running, not a zombie (an orphan adopted by this process is one until it is reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# --- user --------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def reachable(tmp_path):
    """A folder another uid may pass through (0711, as the grader's work folder is): pytest's own is root's alone."""
    folder = Path(tempfile.mkdtemp(prefix="looplab-test-user-"))
    os.chmod(folder, 0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs("user")
def test_student_code_runs_as_a_user_that_owns_nothing_but_its_folder(reachable):
    instructor = reachable / "instructor.txt"  # root's, readable by all, as most of a machine's files are
    instructor.write_text("the hidden tests")
    result = run_confined(f"""
        result["ids"] = [list(os.getresuid()), list(os.getresgid()), os.getgroups()]
        result["capabilities"] = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff"))
        result["own file"] = open("handed-in.txt").read()
        open("handed-in.txt", "a").write(" and more")
        open("written.txt", "w").write("its own folder is writable")
        tries = {{"setuid(0)": lambda: os.setuid(0), "write root's file": lambda: open({str(instructor)!r}, "a"),
                 "chmod root's file": lambda: os.chmod({str(instructor)!r}, 0o666),
                 "write /etc": lambda: open("/etc/looplab-escaped", "w"), "kill pid 1": lambda: os.kill(1, 0)}}
        for name, attempt in tries.items():
            try:
                attempt()
                result[name] = "done"
            except OSError as exc:
                result[name] = exc.strerror
        result["sees its write"] = os.path.exists("written.txt")
    """, ["scratch", "user"], reachable)
    escaped = Path("/etc/looplab-escaped")
    wrote_etc = escaped.exists()
    escaped.unlink(missing_ok=True)  # a regression's litter goes with it
    uid, gid = isolation.student_ids()
    assert result["ids"] == [[uid] * 3, [gid] * 3, []] and uid != 0
    assert result["capabilities"] == "0000000000000000"
    assert result["own file"] == "the student's own file"
    assert result["sees its write"] and not (reachable / "cwd" / "written.txt").exists()  # it landed in its scratch
    assert {k: v for k, v in result.items() if k not in ("ids", "capabilities", "own file", "sees its write")} == {
        "setuid(0)": "Operation not permitted", "write root's file": "Permission denied",
        "chmod root's file": "Operation not permitted", "write /etc": "Permission denied",
        "kill pid 1": "Operation not permitted"}
    assert instructor.read_text() == "the hidden tests" and not wrote_etc


# --- cgroup ------------------------------------------------------------------------------------------------------------------


@needs("cgroup")
def test_a_fork_bomb_stays_inside_its_task(tmp_path):
    fence = Fence("test", pids=300, memory_mb=2048)
    try:
        result = run_confined("""
            import time
            children, refused = [], ""
            try:
                for _ in range(1000):
                    pid = os.fork()
                    if pid == 0:
                        time.sleep(30)
                        os._exit(0)
                    children.append(pid)
            except OSError as exc:
                refused = exc.strerror
            for pid in children:
                os.kill(pid, 9)
            result = {"forked": len(children), "refused": refused}
        """, ["cgroup"], tmp_path, fence=fence, pids_max=40)
    finally:
        fence.remove()
    assert result["forked"] < 40 and "unavailable" in result["refused"], result


@needs("cgroup")
def test_a_memory_hog_is_stopped_inside_its_task(tmp_path):
    fence = Fence("test", pids=300, memory_mb=1024)
    try:
        result = run_confined("""
            hog = []
            for _ in range(600):
                hog.append(bytearray(1 << 20))
            result = {"allocated_mb": len(hog)}
        """, ["cgroup"], tmp_path, fence=fence, memory_mb=128)
    finally:
        fence.remove()
    assert result == {"returncode": -9}  # the OOM killer took the hog, inside its task, before it held 600 MB



JOINS = 80  # before the fix, about one join in six failed


@needs("cgroup")
def test_a_task_joins_its_cgroup_while_another_grader_clears_empty_ones():
    """Two graders on one machine (or the zygote's clean-up beside a kernel being started) share the task cgroups'
    parent: one removing the empty ones must not take away the folder a task just made and is about to join."""
    import multiprocessing

    stop = multiprocessing.Event()
    cleaner = multiprocessing.Process(target=_clear_empty_cgroups_until, args=(stop,))
    cleaner.start()
    failures = []
    try:
        for _ in range(JOINS):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                try:
                    isolation.join_cgroup(f"test-join-{os.getpid()}", 64, 10)
                    os.write(write, b"ok")
                except BaseException as exc:
                    os.write(write, repr(exc).encode()[:300])
                os._exit(0)
            os.close(write)
            with os.fdopen(read, "rb") as f:
                said = f.read().decode()
            os.waitpid(pid, 0)
            if said != "ok":
                failures.append(said)
    finally:
        stop.set()
        cleaner.join(10)
        isolation.remove_empty_cgroups()
    assert not failures, f"{len(failures)} of {JOINS} joins failed, e.g. {failures[0]}"


def _clear_empty_cgroups_until(stop) -> None:
    while not stop.is_set():
        isolation.remove_empty_cgroups()


def test_probe_names_what_each_missing_layer_exposes():
    assert set(AVAILABLE) == set(isolation.LAYERS)
    assert all(isinstance(reason, str) for reason in AVAILABLE.values())
    assert all(isolation.LAYERS[layer] for layer in isolation.LAYERS)


# --- the recheck's pipe ---------------------------------------------------------------------------------------------------


KILLED_CLIENT = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from autograder.channel import RecheckCell
from autograder_cases import zygote_recheck

cell = "import ctypes, time\\nctypes.CDLL(None).prctl(15, {name!r}, 0, 0, 0)\\ntime.sleep(120)\\n"
zygote_recheck.recheck(Path({folder!r}), [RecheckCell(index=0, source=cell),
                                         RecheckCell(index=1, grade_id="t", checks=[["01_baseline", "train_one_epoch"]])],
                       timeout=100, cell_timeout=110, started=lambda zygote: print(zygote.proc.pid, flush=True))
"""


@pytest.mark.slow
def test_a_recheck_stops_when_the_process_that_asked_for_it_is_killed(reachable):
    """A Dask worker killed in the middle of a task: its private zygote (no death signal: the worker may have started
    it from a thread) sees the request channel hang up, stops the recheck and exits, instead of letting the
    student's cell run on until the recheck's timeout."""
    name = f"ll-{uuid.uuid4().hex[:10]}"
    client = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT.format(
        tests=str(REPO / "tests"), name=name.encode(), folder=str(reachable))], stdout=subprocess.PIPE, text=True,
        cwd=REPO)
    zygote = int(client.stdout.readline())
    deadline = time.monotonic() + 120
    while not _named(name) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _named(name), "the student's cell never started"
    client.kill()
    client.wait()
    deadline = time.monotonic() + 15
    while (_named(name) or _alive(zygote)) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {"the student's cell": _named(name), "the zygote": _alive(zygote)}
    for pid in left["the student's cell"] + ([zygote] if left["the zygote"] else []):
        os.kill(pid, 9)
    assert not any(left.values()), f"15 s after its client was killed, still running: {left}"


# --- the banner says what was observed (issue 42) ------------------------------------------------------------------------

REFUSE = Path(__file__).parent / "autograder_cases" / "refuse.py"
BANNER = """
import ctypes, json, os
from autograder.sandbox import isolation
from autograder.run.pool import GradingSetupError, check_isolation
lines = []
try:
    check_isolation({**isolation.probe(), "permissions": ""}, False, lines.append)
except GradingSetupError as exc:
    lines.append("refused " + str(exc))
libc = ctypes.CDLL(None, use_errno=True)
def refused(call):  # the test's own look, in a child, at what the container lets a process do
    pid = os.fork()
    if pid == 0:
        os._exit(0 if call() == 0 else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0
seen = {"namespaces": refused(lambda: libc.unshare(0x00020000)),
        "landlock": refused(lambda: 0 if libc.syscall(444, None, 0, 1) > 0 else 1)}
print(json.dumps({"banner": lines[0], "refused": seen}))
"""


def _closed_above(path: str) -> bool:
    return any(not os.stat(folder).st_mode & 0o001 for folder in Path(path).parents)


@pytest.mark.skipif(os.geteuid() != 0, reason="the container emulation needs root (a seccomp filter, the uid change)")
@pytest.mark.parametrize("refuse, reveal", [
    ((), True), (("--namespaces",), True), (("--landlock",), True), (("--namespaces", "--landlock"), True),
    (("--namespaces", "--landlock"), False),
], ids=["all-layers", "namespaces-refused", "landlock-refused", "both-refused", "both-refused-python-closed"])
def test_the_banner_names_only_what_was_observed(refuse, reveal):
    """Issue 42: in a container that refuses namespaces and/or Landlock (a seccomp filter), the grader's banner names
    exactly the layers that hold there, as the test itself sees the system calls answered; without namespaces the
    user layer still holds (a plain uid change) where Python is readable by every user, and where it is not, the
    grader refuses to grade, naming the user layer and what to change."""
    from labutils.data_files import cache_dir

    python = str(Path(sys.base_prefix).resolve())
    proc = subprocess.run([sys.executable, REFUSE, *refuse, *([python, str(cache_dir())] if reveal else []), "--",
                           sys.executable, "-c", BANNER], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["refused"] == {"namespaces": "--namespaces" in refuse, "landlock": "--landlock" in refuse}
    if said["refused"]["namespaces"] and not reveal and _closed_above(python):
        assert said["banner"].startswith("refused refused to grade: student code would run as root"), said
        assert "user layer is missing" in said["banner"] and "what to change" in said["banner"]
        return
    here = {"Landlock" if layer == "landlock" else layer for layer, why in AVAILABLE.items() if not why}
    refused = ({"scratch", "pid"} if said["refused"]["namespaces"] else set()) | (
        {"Landlock"} if said["refused"]["landlock"] else set())
    expected = (here | {"permissions"}) - refused  # what this machine allows, less what the container refuses
    listed = said["banner"].split("student code confined: ", 1)[1].split(" (", 1)[0].split(", ")
    assert set(listed) == expected, said["banner"]
    assert said["banner"].count("WARNING") == len(isolation.LAYERS) - len(expected - {"permissions"}), said


def test_what_holds_decides_whether_to_grade():
    """Issue 42: the hidden tests and the results are out of reach when student code is another uid that the grader's
    files are closed to, or when Landlock holds and student code is not root; anything else is refused, naming the
    missing layer and what to change."""
    from autograder.sandbox.closure import unprotected

    every = {layer: "" for layer in [*isolation.LAYERS, "permissions"]}
    no = "refused by the container"
    assert unprotected(every, 0) is None
    assert unprotected({**every, "landlock": no, "scratch": no, "pid": no}, 0) is None  # uid and permissions
    assert unprotected({**every, "permissions": no}, 0) is None  # uid 65534 under Landlock
    for found, euid, names in [
        ({**every, "user": no}, 0, ["would run as root", "user layer is missing (refused by the container)"]),
        ({**every, "user": no, "landlock": no}, 0, ["would run as root", "CAP_SETUID"]),
        ({**every, "permissions": no, "landlock": no}, 0, ["not closed", "Landlock is missing"]),
        ({**every, "user": no, "permissions": no, "landlock": no}, 1000, ["Landlock is missing", "uid 1000",
                                                                          "landlock_create_ruleset"]),
    ]:
        said = unprotected(found, euid)
        assert said.startswith("refused to grade: ") and "what to change" in said and "\n" not in said, said
        assert all(name in said for name in names), said
    assert unprotected({**every, "user": no, "permissions": no}, 1000) is None  # an ordinary user's, under Landlock
