"""Grading on a Dask cluster (``grade --scheduler``): the same grades as a local run, and no student lost when a
worker is killed mid-task.

Everything runs on loopback: one ``LocalCluster`` of 2 worker processes (free ports, stopped at the end) that the CLI
connects to with ``--scheduler``, for every test here. The class is a small one built by tests/autograder_cases (the
solutions, the release, a mutant, a broken file, a dying kernel, and a slow student whose worker is killed while grading
it): the full class is graded locally by tests/test_autograder.py, and on 2 cores it takes minutes.
``LOOPLAB_DASK_FULL_CLASS=1`` grades the full class here too (plus the slow student), against the same exact
expectations. The class's local run is the reference of both Dask runs: the one that loses a worker and one whose
client is killed (issue 18's resume, on Dask).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from autograder.run import distributed as dist  # noqa: E402
from autograder.channel import RunConfig, Task  # noqa: E402

from autograder_cases import build, records

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions" / "loop_lab"
LIMITS = ["--timeout-cell", 30, "--timeout-notebook", 90]  # the slow student's cell sleeps SLOW_S well inside them
EXTRA_TEXT = "a data file that travelled with its task"
SLOW_S = 12  # the slow student's cell sleeps this long in the kernel: time to kill its worker mid-task (3 s in)

pytestmark = [pytest.mark.autograder, pytest.mark.skipif(len(list(SOLUTIONS.glob("*.ipynb"))) < 9,
                                                         reason="solutions/ not complete")]

SMALL_CLASS = {  # student -> the notebooks kept (None: all it has); the cheap notebooks only
    "solutions": ("01_baseline", "02_scheduler"),
    "release": ("01_baseline",),
    "mutant-no-zero-grad": None,
    "broken-json": None,
    "os-exit": None,
}


def small_class(tmp: Path) -> list[build.Student]:
    students = []  # the release is the committed notebooks/ (tests/test_notebooks.py: nbgrader's output, exactly)
    for st in build.build_class(SOLUTIONS, REPO / "notebooks", REPO, tmp / "out"):
        if os.environ.get("LOOPLAB_DASK_FULL_CLASS") == "1":
            students.append(st)
        elif st.name in SMALL_CLASS:
            keep = SMALL_CLASS[st.name] or tuple(st.notebooks)
            st.notebooks = {nb: content for nb, content in st.notebooks.items() if nb in keep}
            students.append(st)
    sol = {p.stem: build.nbformat.read(p, as_version=4) for p in SOLUTIONS.glob("0[12]_*.ipynb")}
    sleeper = build.insert_cell(sol["02_scheduler"], "train_one_epoch",
                                f"import time\nif hasattr(get_ipython(), 'kernel'):  # the kernel, not the recheck\n"
                                f"    time.sleep({SLOW_S})\n", after=True)
    students.append(build.Student("slow", "a cell that sleeps: its worker is killed while grading it",
                                  {"02_scheduler": sleeper}))
    reader = build.insert_cell(sol["01_baseline"], "train_one_epoch", "print(open('extra.txt').read())\n")
    students.append(build.Student("extra-file", "reads a data file handed in beside the notebook",
                                  {"01_baseline": reader}, extra_files={"extra.txt": EXTRA_TEXT}))
    return students


def run_cli(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "autograder", *map(str, args)], cwd=REPO, text=True,
                            **{"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", scheduler_port=0,
                      dashboard_address=None, local_directory=str(tmp_path_factory.mktemp("dask")),
                      memory_limit=0) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=300)
        yield cluster, client


@pytest.fixture(scope="module")
def classroom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dask-class")
    students = small_class(tmp)
    build.write_class(students, tmp / "submissions")
    return {"tmp": tmp, "students": students, "tests": build.load_tests(SOLUTIONS)}


@pytest.fixture(scope="module")
def local_run(classroom, autograder_cli):
    out = classroom["tmp"] / "local"
    proc = autograder_cli("grade", classroom["tmp"] / "submissions", "--out", out, "-j", 2, *LIMITS, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _executing(client, key_part: str) -> tuple[str, int, int] | None:
    """(worker address, worker pid, its zygote's pid) of the worker executing a task whose key has ``key_part``."""

    def probe(dask_worker):
        keys = [str(k) for k, ts in dask_worker.state.tasks.items() if ts.state == "executing"]
        zygotes = [p.zygote.proc.pid for name, p in dask_worker.plugins.items()
                   if name.startswith(dist.PLUGIN_PREFIX) and getattr(p, "zygote", None) is not None]
        return keys, os.getpid(), zygotes

    for addr, (keys, pid, zygotes) in client.run(probe).items():
        if any(key_part in k for k in keys) and zygotes:
            return addr, pid, zygotes[0]
    return None


@pytest.fixture(scope="module")
def dask_run(cluster, classroom):
    """The class graded on the cluster; the worker grading the slow student is SIGKILLed mid-task."""
    scheduler, client = cluster[0].scheduler_address, cluster[1]
    out = classroom["tmp"] / "dask"
    proc = run_cli("grade", classroom["tmp"] / "submissions", "--out", out, "--scheduler", scheduler, *LIMITS)
    victim, deadline = None, time.monotonic() + 600
    while victim is None and proc.poll() is None and time.monotonic() < deadline:
        victim = _executing(client, "slow--02_scheduler")
        time.sleep(0.5)
    if victim is not None:
        time.sleep(3)  # well inside its kernel's sleep
        os.kill(victim[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=900)
    print(err[-6000:])
    return {"out": out, "proc": proc, "stderr": err, "victim": victim}


@pytest.mark.slow
def test_dask_grades_the_class_exactly(dask_run, classroom):
    assert dask_run["proc"].returncode == 0, dask_run["stderr"][-4000:]
    expected = build.expected_grades(classroom["students"], classroom["tests"])
    assert build.read_csv(dask_run["out"] / "grades.csv") == expected
    # each worker says how it confines student code, as a local run does
    assert re.search(r"tcp://\S+: student code confined: Landlock, rlimits, cgroup, scratch, network, pid, user",
                     dask_run["stderr"]), dask_run["stderr"][-3000:]


@pytest.mark.slow
def test_a_task_carries_its_extra_files(dask_run):
    assert EXTRA_TEXT in (dask_run["out"] / "feedback" / "extra-file" / "01_baseline.html").read_text()


@pytest.mark.slow
def test_a_killed_worker_loses_no_student(dask_run):
    assert dask_run["victim"] is not None, "the slow student's task was never seen executing"
    _, _, zygote = dask_run["victim"]
    for _ in range(60):  # the killed worker's zygote notices its pipe closing and stops, kernels and all
        try:
            os.kill(zygote, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"the killed worker's zygote {zygote} is still running")
    assert re.search(r"\d+ task\(s\) graded again on another worker", dask_run["stderr"])  # and any queued there
    record = build.read_json(dask_run["out"] / "slow.json")
    assert record["graded"] and record["notebooks"]["02_scheduler"]["status"] == "graded"
    assert all(t["passed"] for t in record["tests"] if t["notebook"] == "02_scheduler" and t["kind"] == "auto")


@pytest.mark.slow
def test_dask_run_matches_a_local_run(dask_run, local_run, classroom):
    dask_out = dask_run["out"]
    assert (dask_out / "grades.csv").read_text() == (local_run / "grades.csv").read_text()
    for st in classroom["students"]:
        records.assert_same_record(dask_out, local_run, st.name)
    for kind, pattern in (("feedback", "*.html"), ("autograded", "*.ipynb"), ("submitted", "*")):
        local_files = sorted(p.relative_to(local_run) for p in (local_run / kind).rglob(pattern))
        assert local_files and sorted(p.relative_to(dask_out) for p in (dask_out / kind).rglob(pattern)) \
            == local_files, kind
    assert "stayed on its worker" not in dask_run["stderr"]  # formgrader shows the graded notebooks, outputs and all
    graded = build.nbformat.read(dask_out / "autograded" / "solutions" / "loop_lab" / "01_baseline.ipynb", 4)
    assert any(cell.get("outputs") for cell in graded.cells)


def _zygotes(client) -> dict[str, list[int]]:
    """Each worker's zygote pids: its plug-ins' and the one it keeps for the next run."""

    def pids(dask_worker):
        held = [p.zygote.proc.pid for name, p in dask_worker.plugins.items()
                if name.startswith(dist.PLUGIN_PREFIX) and getattr(p, "zygote", None) is not None]
        spare = dist._SPARE.get("zygote")
        return sorted(held + ([spare.proc.pid] if spare is not None else []))

    return client.run(pids)


def _journal(out: Path) -> set[str]:
    """The tasks kept in OUT's journal (autograder.results.journal): one file per finished task."""
    return {p.stem for p in (out / ".journal").glob("*.json")} if (out / ".journal").is_dir() else set()


@pytest.mark.slow
def test_a_run_killed_on_a_dask_cluster_resumes_there(cluster, classroom, local_run, tmp_path):
    """The journal is the executor's business too: a run on the Dask cluster whose client is SIGKILLed after its
    first task is finished by the next run on the same cluster, which reuses what was kept and ends equal to the
    local, uninterrupted run. The next run starts at once, while the killed client's last tasks still run in their
    workers (test_a_replaced_plugins_last_task_cannot_touch_the_next_runs). After the runs above: the killed client
    never unregisters its plug-in, whose zygotes stay on the workers; the next run's plug-in replaces it and takes
    its warm zygotes over, and keeps them for the run after it."""
    submissions, out = classroom["tmp"] / "submissions", tmp_path / "out"
    on_dask = ("--out", out, "--scheduler", cluster[0].scheduler_address, *LIMITS)
    with open(tmp_path / "killed.log", "w") as log:  # a file: nothing of the killed client is left to read
        killed = run_cli("grade", submissions, *on_dask, stdout=log, stderr=log)
        deadline = time.monotonic() + 600
        while not _journal(out):
            assert killed.poll() is None and time.monotonic() < deadline, "the moment to kill never came"
            time.sleep(0.2)
        killed.kill()
        assert killed.wait(120) == -signal.SIGKILL
    kept = _journal(out)
    warm = _zygotes(cluster[1])  # the killed run's: its plug-in stays registered until the next run replaces it
    final = run_cli("grade", submissions, *on_dask)
    _, err = final.communicate(timeout=900)
    assert kept and final.returncode == 0, err[-3000:]
    deadline = time.monotonic() + 60
    while _zygotes(cluster[1]) != warm and time.monotonic() < deadline:  # kept again once the final run's plug-in goes
        time.sleep(0.5)
    assert all(warm.values()) and _zygotes(cluster[1]) == warm, "the next run did not take the warm zygotes over"
    reused = re.search(r"(\d+) task\(s\) reused", err)
    assert reused and int(reused.group(1)) >= len(kept), err[-2000:]
    assert (out / "grades.csv").read_text() == (local_run / "grades.csv").read_text()
    for st in classroom["students"]:
        records.assert_same_record(out, local_run, st.name)


@pytest.mark.slow
def test_workers_with_other_code_are_refused(cluster, tmp_path, monkeypatch):
    from autograder import layout

    monkeypatch.setitem(layout._VERSIONS, str(layout.REPO_ROOT), "not-the-workers")
    template = tmp_path / "gradebook.db"
    template.write_bytes(b"")
    run = RunConfig(template_db=str(template), work_dir=str(tmp_path), cell_timeout=1, notebook_timeout=1,
                    memory_mb=4096, threads=1)
    task = Task(id="ann--01_baseline", student="ann", notebook="01_baseline", path=str(tmp_path / "unread.ipynb"))
    with pytest.raises(dist.WorkerRefused, match="their code differs from this client's") as err:
        dist.run_on_cluster(cluster[0].scheduler_address, [task], run, tmp_path, lambda *a: None)
    assert "this client not-the-workers" in str(err.value)
    assert all(addr in str(err.value) for addr in cluster[1].scheduler_info()["workers"])  # each worker named


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and util-linux's unshare to start a worker that cannot confine")
def test_a_worker_that_cannot_confine_is_refused_under_require_isolation(tmp_path, monkeypatch):
    """A worker started in a user namespace (as in a container: root in it, only uid 0 mapped) cannot hand student
    code to another uid: with --require-isolation the run refuses it by name and says which layer it lacks."""
    from distributed import Client, LocalCluster

    monkeypatch.setattr(dist, "STALL_S", 20)
    shutil.copy(SOLUTIONS / "01_baseline.ipynb", tmp_path / "unread.ipynb")
    template = tmp_path / "gradebook.db"
    template.write_bytes(b"")
    run = RunConfig(template_db=str(template), work_dir=str(tmp_path), cell_timeout=1, notebook_timeout=1,
                    memory_mb=6144, threads=1, require_isolation=True)
    task = Task(id="ann--01_baseline", student="ann", notebook="01_baseline", path=str(tmp_path / "unread.ipynb"))
    with LocalCluster(n_workers=0, host="127.0.0.1", scheduler_port=0, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        worker = subprocess.Popen(
            ["unshare", "--user", "--map-root-user", sys.executable, "-m", "distributed.cli.dask_worker",
             cluster.scheduler_address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
             "--local-directory", str(tmp_path / "worker")], cwd=REPO, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        try:
            client.wait_for_workers(1, timeout=120)
            address = next(iter(client.scheduler_info()["workers"]))
            with pytest.raises(dist.WorkerRefused) as err:
                dist.run_on_cluster(cluster.scheduler_address, [task], run, tmp_path, lambda *a: None)
        finally:
            worker.terminate()
            worker.wait(60)
    message = str(err.value)
    assert address in message and "--require-isolation" in message, message
    assert "user not applied" in message, message


@pytest.mark.slow
def test_no_able_worker_for_too_long_fails_the_rest(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(dist, "STALL_S", 1)
    monkeypatch.setattr(dist, "POLL_S", 0.5)
    client = cluster[1]
    executor = dist.DaskExecutor(cluster[0].scheduler_address)
    executor.client, executor.inbox = client, tmp_path
    task = Task(id="ann--01_baseline", student="ann", notebook="01_baseline", path="/nowhere.ipynb")
    future = client.submit(int, 1, resources={"looplab-grader-nobody": 1}, pure=False)  # no worker has it
    got = []
    executor._collect({future: task}, "looplab-grader-nobody", lambda result, seconds: got.append(result))
    assert [(r.student, r.status) for r in got] == [("ann", "error")]
    assert "no Dask worker able to grade it" in got[0].error


def test_a_task_that_fails_every_try_is_a_clear_zero(tmp_path):
    from distributed.scheduler import KilledWorker

    class Worker:
        address = "tcp://127.0.0.1:1"

    class Failed:
        status = "error"

        def exception(self):
            return KilledWorker("looplab-x", Worker(), 3)

    task = Task(id="ann--01_baseline", student="ann", notebook="01_baseline", path="/nowhere.ipynb")
    result, _ = dist._received(Failed(), task, tmp_path)
    assert result.status == "error" and result.student == "ann"
    assert "died 4 times" in result.error and "tcp://127.0.0.1:1" in result.error


def test_an_idle_workers_zygote_is_stopped():
    """A client that died never unregisters its plug-in: after IDLE_S without a task the worker's zygote (torch
    loaded) is stopped, and not before; a later task starts a new one (GraderPlugin.grade)."""
    import threading

    closed = []

    class FakeZygote:
        def close(self):
            closed.append(True)

    plugin = dist.GraderPlugin(b"template", "version", RunConfig(template_db="", work_dir="", cell_timeout=1,
                                                                 notebook_timeout=1, memory_mb=4096, threads=1))
    plugin.lock, plugin.zygote, plugin.address, plugin.last_used = threading.Lock(), FakeZygote(), "tcp://w:1", 100.0
    assert not plugin.stop_if_idle(100.0 + dist.IDLE_S - 1) and not closed
    assert plugin.stop_if_idle(100.0 + dist.IDLE_S) and closed == [True] and plugin.zygote is None
    assert not plugin.stop_if_idle(1e9) and closed == [True]


def test_a_replaced_plugins_last_task_cannot_touch_the_next_runs(tmp_path, monkeypatch):
    """A killed client's task runs on in its worker thread after the next run registers its plug-in (same name: same
    template and code), which replaces the first. The new instance gets a folder of its own, which the old task's
    clean-up cannot remove, and its tasks wait until the old task has ended: one grading context per process (the
    resume-on-Dask test saw a task of the next run graded differently from an uninterrupted run)."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from autograder import layout
    from autograder.channel import Result

    class FakeWorker:
        local_directory, address = str(tmp_path), "tcp://w:1"

        async def set_resources(self, **_):
            pass

    class FakeZygote:
        def alive(self):
            return True

        def close(self):
            pass

    old_may_end, events = threading.Event(), []

    def fake_grade(task, run, zygote):
        folder = layout.task_dir(run.work_dir, task.id)
        folder.mkdir(parents=True)
        events.append(("start", task.student))
        if task.student == "old":
            assert old_may_end.wait(30)
        events.append(("end", task.student, folder.is_dir()))
        return Result(id=task.id, student=task.student, notebook=task.notebook)

    monkeypatch.setattr(dist.GraderPlugin, "_warm", lambda self: None)
    monkeypatch.setattr(dist, "code_version", lambda: "v")
    monkeypatch.setattr(dist, "_grade", fake_grade)
    monkeypatch.setattr(dist, "_unpack", lambda remote, inbox: remote.task)
    run = RunConfig(template_db="", work_dir="", cell_timeout=1, notebook_timeout=1, memory_mb=4096, threads=1)
    old, new = dist.GraderPlugin(b"t", "v", run), dist.GraderPlugin(b"t", "v", run)
    assert old.name == new.name
    worker = FakeWorker()

    def remote(student):
        task = Task(id=f"{student}--01_baseline", student=student, notebook="01_baseline", path="/nowhere.ipynb")
        return SimpleNamespace(task=task, template_sha=old.template_sha, code_version="v")

    asyncio.run(old.setup(worker))
    old.zygote = FakeZygote()
    orphan = threading.Thread(target=old.grade, args=(remote("old"),))
    orphan.start()
    while not events:
        time.sleep(0.01)
    asyncio.run(old.teardown(worker))  # what registering the next run's plug-in does first
    asyncio.run(new.setup(worker))
    new.zygote = FakeZygote()
    assert new.work != old.work and new.work.is_dir()
    second = threading.Thread(target=new.grade, args=(remote("new"),))
    second.start()
    time.sleep(0.5)
    assert events == [("start", "old")], "the next run's task started beside the old one"
    old_may_end.set()
    orphan.join(30)
    second.join(30)
    assert events == [("start", "old"), ("end", "old", False), ("start", "new"), ("end", "new", True)]
    assert new.work.is_dir()
    asyncio.run(new.teardown(worker))
    dist.drop_spare()  # the old instance's zygote, kept for a next run (this test's process is no Dask worker)


def test_a_zygote_started_inside_a_task_folder_runs_in_its_own(tmp_path, monkeypatch):
    """A worker's prewarm may start a zygote while a killed client's last task runs on in the same process, inside
    nbgrader's chdir to that task's folder, which is removed when the task ends: the zygote runs in its own folder
    (torch._dynamo's import calls os.getcwd(); without it, every recheck of the next run imported torch._dynamo anew
    and was judged as the student changing torch)."""
    from autograder.sandbox import client

    task_folder, zygote_folder = tmp_path / "task", tmp_path / "zygote"
    task_folder.mkdir()
    zygote_folder.mkdir()
    monkeypatch.setattr(client, "ZYGOTE_MAIN", "import os; print(os.getcwd()); {argv}")  # where it runs, not a zygote
    monkeypatch.chdir(task_folder)
    with open(zygote_folder / "zygote.log", "ab") as log:
        out, _ = client._spawn([], log, dict(os.environ), subprocess.DEVNULL).communicate(timeout=60)
    assert out.decode().strip() == str(zygote_folder)


def test_a_runs_warm_zygote_waits_for_the_next_run_and_is_stopped_when_none_comes(tmp_path, monkeypatch):
    """When a run's plug-in is removed (or replaced by the next run's), the worker keeps its warm zygote: the next
    run's plug-in takes it instead of importing torch again, and the prewarm of a client that connects meanwhile
    starts nothing. A kept zygote that no run takes within IDLE_S is stopped and its folder removed."""
    import asyncio
    from types import SimpleNamespace

    from autograder.sandbox import client

    started, closed = [], []

    class FakeZygote:
        ready = SimpleNamespace(data_dirs=[], cache_dir="", vm_mb=100, isolation={})

        def __init__(self, folder):
            self.folder = folder
            started.append(self)

        def alive(self):
            return self not in closed

        def close(self):
            closed.append(self)

    class FakeWorker:
        local_directory, address, plugins = str(tmp_path), "tcp://w:1", {}

        async def set_resources(self, **_):
            pass

    monkeypatch.setattr(client, "private_zygote", FakeZygote)
    monkeypatch.setattr(dist, "prepare_tools", lambda: None)
    monkeypatch.setattr(dist, "code_version", lambda: "v")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    run = RunConfig(template_db="", work_dir="", cell_timeout=1, notebook_timeout=1, memory_mb=4096, threads=1)
    worker = FakeWorker()
    try:
        first = dist.GraderPlugin(b"t", "v", run)
        asyncio.run(first.setup(worker))
        worker.plugins[first.name] = first
        dist.prewarm(worker)  # a client connects while the first run's plug-in holds a zygote
        assert len(started) == 1 and not dist._SPARE
        asyncio.run(first.teardown(worker))
        del worker.plugins[first.name]
        assert not closed and dist._SPARE["zygote"] is started[0]
        dist.prewarm(worker)  # one is kept: nothing to start
        second = dist.GraderPlugin(b"t", "v", run)
        asyncio.run(second.setup(worker))
        assert second.zygote is started[0] and len(started) == 1 and started[0].folder.is_dir()
        monkeypatch.setattr(dist, "IDLE_S", 0.3)
        asyncio.run(second.teardown(worker))
        assert dist._SPARE["zygote"] is started[0] and not closed
        def stopped() -> bool:  # the expiry closes the zygote, then removes its folder: wait for both
            return bool(closed) and not dist._SPARE and not started[0].folder.exists()

        deadline = time.monotonic() + 30
        while not stopped() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert closed == [started[0]] and stopped()
    finally:
        dist.drop_spare()
