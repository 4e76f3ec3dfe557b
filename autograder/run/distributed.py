"""Grading on a Dask cluster: ``python -m autograder grade SUBMISSIONS --out DIR --scheduler tcp://HOST:8786``.

The client (this process) plans and collects as a local run does; only the (student, notebook) tasks go to Dask
workers instead of ``-j`` local processes (:class:`DaskExecutor`, beside :class:`autograder.run.pool.LocalExecutor`). The
client alone writes the gradebook, the feedback, the formgrader course and the reports.

- With a task (:class:`RemoteTask`): the channel's :class:`Task` with the notebook's bytes and its extra files' bytes,
  never a path on the client, so a worker may be another machine. Back (:class:`RemoteResult`): the :class:`Result`
  with the feedback page and the autograded notebook as bytes, written here where a local task leaves them.
- Once per worker (:class:`GraderPlugin`): the gradebook template (the instructor's generated assignment: test cells,
  points, locked sources). It is the same for every task, so it goes with the plug-in, which Dask sends to every
  worker, including one that joins or restarts mid-run; a task carries only its hash. Per task it would be
  N_tasks copies of the same file.
- The plug-in keeps one warm sandboxed zygote per worker (:mod:`autograder.sandbox.zygote`: torch, labutils and the data
  imported once; started by :func:`prewarm` when the client connects, so it warms while the gradebook is built), so
  a task pays no torch import. A worker advertises a one-slot resource named after the plug-in only once its zygote
  is warm, and tasks ask for it: one task at a time per worker (the grading context is per process), and never on a
  worker that is refused or still warming up. Start workers with ``--nthreads 1`` and one ``--nworkers`` per core.
- Same code everywhere: a worker whose labutils/autograder differ from the client's (a hash of their ``.py`` files)
  is refused, by name, when the client connects; one that joins later with other code never gets the resource.
- The same confinement as a local run: each worker's zygote applies the layers of
  :mod:`autograder.sandbox.isolation` that its machine allows; the client logs them per worker, and with
  ``--require-isolation`` a worker that cannot apply them all is refused, by name, with what is missing.
- A client that dies never unregisters the plug-in: a worker's zygote with no task for :data:`IDLE_S` is stopped
  (a task that comes later starts a new one), so a dead run does not keep torch in every worker's memory.
- A run's warm zygote outlives its plug-in: when the plug-in is removed (the run ended) or replaced (the next run of
  the same assignment registers its own), the worker keeps the zygote for the next run's plug-in
  (:func:`keep_spare`), which then starts without the imports: back-to-back runs (a resume after a killed client,
  the late students) start warm. A kept zygote no run takes for :data:`IDLE_S` is stopped.
- A worker that dies mid-task (killed, out of memory) has its task graded again on another worker by Dask (the
  scheduler's ``distributed.scheduler.allowed-failures``, default 3); a task that raises is retried :data:`RETRIES`
  times. A task that fails every try, or that no worker can take for :data:`STALL_S`, scores zero for that student's
  notebook with the reason; the run goes on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from distributed import WorkerPlugin

from autograder.channel import ExtraFile, Result, RunConfig, Task
from autograder.course.nbgrader_setup import prepare_tools
from autograder.layout import code_version, task_dir
from autograder.sandbox import isolation
from .scratch import passable_folder
from .pool import KERNEL_HEADROOM_MB, GradingSetupError, OnResult, check_isolation, cost

RETRIES = 2  # a task that raised (not a student's failing test: a grader error) is tried this many more times
IDLE_S = 900  # a worker's zygote with no task for this long is stopped (its client may have died); restarted on demand
STALL_S = 600  # no worker able to grade for this long (all refused or gone): the tasks left are not graded
POLL_S = 30  # how often the client looks for that while it waits for results
PLUGIN_PREFIX = "looplab-grader-"

logger = logging.getLogger(__name__)


class WorkerRefused(GradingSetupError):
    """A worker cannot grade this run's tasks (other code, another run's template, too small a memory limit)."""


@dataclass
class RemoteTask:
    """One (student, notebook) task as it travels to a worker: the channel's :class:`Task` (its paths are the
    client's, used only for names) with the bytes themselves."""

    task: Task
    notebook_bytes: bytes
    extra_files: dict[str, bytes] = field(default_factory=dict)  # relative name -> content
    template_sha: str = ""  # the gradebook template this task must be graded against
    code_version: str = ""


@dataclass
class RemoteResult:
    """A worker's :class:`Result` with the files it names, as bytes (its paths are the worker's): the feedback page
    and the autograded notebook (what formgrader shows in OUT)."""

    result: Result
    feedback_html: bytes | None
    autograded_ipynb: bytes | None
    worker: str


# --- the same code on both sides -----------------------------------------------------------------------------------


def mismatched_workers(versions: dict, mine: str) -> list[str]:
    """One line per worker whose code version (or the error it got asking) is not ``mine``."""
    return [f"{addr} runs labutils/autograder version {v}, this client {mine}" if isinstance(v, str) else
            f"{addr} could not say its labutils/autograder version ({type(v).__name__}: {v}); this client has {mine}"
            for addr, v in sorted(versions.items()) if v != mine]


# --- the worker side --------------------------------------------------------------------------------------------------

_SPARE: dict = {}  # in a worker process: a warm zygote for the next plug-in (prewarm()'s, or the last run's) and its folder
# One task at a time in a worker process, whichever plug-in instance runs it: the grading context
# (autograder.run.execute) is per process. A killed client's task keeps running in its worker thread after the next
# run's plug-in replaced the first (Dask cannot stop a thread); the new run's tasks wait for it to end.
_GRADING = threading.Lock()


def prewarm(dask_worker) -> None:
    """Start this worker's zygote now, in the background: its imports overlap the client's gradebook generation,
    as the local run's shared zygote does; the run's plug-in takes it over. Nothing to start when a zygote is kept
    already, or when a plug-in of ours holds one (registering the next run's plug-in replaces it, zygote kept)."""
    if _SPARE or _held_by_a_plugin(dask_worker):
        return
    folder = zygote_folder(dask_worker.local_directory)

    def start() -> None:
        from autograder.sandbox.client import private_zygote

        try:
            zygote = private_zygote(folder)
        except Exception as exc:  # the plug-in starts its own
            logger.warning("could not prewarm a zygote: %r", exc)
            return
        _SPARE["zygote"] = zygote
        _stop_if_not_taken()

    _SPARE["folder"] = folder
    _SPARE["thread"] = threading.Thread(target=start, name="looplab-prewarm", daemon=True)
    _SPARE["thread"].start()


def zygote_folder(local_directory: str) -> Path:
    """A folder of its own for a zygote (its log and HOME), which outlives the plug-in that uses it when the zygote
    is kept: never the plug-in's folder, removed with the plug-in."""
    return passable_folder(Path(tempfile.mkdtemp(prefix="looplab-zygote-", dir=local_directory)))


def _held_by_a_plugin(dask_worker) -> bool:
    return any(name.startswith(PLUGIN_PREFIX) and getattr(plugin, "zygote", None) is not None
               for name, plugin in dask_worker.plugins.items())


def keep_spare(zygote, folder: Path) -> bool:
    """Keep a removed plug-in's warm zygote (and its folder) for the next run's plug-in on this worker; whether it was
    kept (not when one is kept already, or it is not alive: then the caller stops it)."""
    if _SPARE or not zygote.alive():
        return False
    _SPARE.update(zygote=zygote, folder=folder)
    _stop_if_not_taken()
    return True


def _stop_if_not_taken() -> None:
    """After :data:`IDLE_S`, stop the zygote kept now if it is still kept, and not taken and kept again since: no run
    came (its client may have died)."""
    kept = _SPARE["kept"] = object()  # this keeping, not the zygote: one taken and kept again waits IDLE_S anew

    def expire() -> None:
        if _SPARE.get("kept") is kept:
            logger.warning("a kept zygote was not taken by a run for %.0f s: it is stopped", IDLE_S)
            drop_spare()

    timer = threading.Timer(IDLE_S, expire)
    timer.daemon = True
    timer.start()


def take_spare():
    """The kept zygote (prewarmed, or a removed plug-in's) and its folder; (None, folder) when it died or failed to
    start; (None, None) when none is kept."""
    thread = _SPARE.pop("thread", None)
    if thread is not None:
        thread.join()
    _SPARE.pop("kept", None)
    zygote, folder = _SPARE.pop("zygote", None), _SPARE.pop("folder", None)
    if zygote is not None and not zygote.alive():
        zygote.close()
        zygote = None
    return zygote, folder


def drop_spare() -> None:
    """Stop the kept zygote and remove its folder."""
    zygote, folder = take_spare()
    if zygote is not None:
        zygote.close()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


class GraderPlugin(WorkerPlugin):
    """Installed on every Dask worker for one run: the template gradebook on disk and one warm zygote."""

    idempotent = False  # registered again (same template): replaced, zygote and all

    def __init__(self, template: bytes, code_version: str, run: RunConfig):
        self.template = template
        self.template_sha = hashlib.sha256(template).hexdigest()[:16]
        self.code_version = code_version
        self.run = run  # the limits; paths and data folders are filled in on the worker
        # also the worker resource (one slot) that a worker holds once it is ready: tasks ask for it, so a refused
        # worker, or one still warming up, is never given a task
        self.name = PLUGIN_PREFIX + hashlib.sha256(f"{self.template_sha} {code_version}".encode()).hexdigest()[:16]

    async def setup(self, worker) -> None:
        self.address = worker.address
        self.lock = _GRADING
        self.zygote = self.work = self.zygote_folder = None
        self.local_directory = worker.local_directory
        self.refused = None
        mine = code_version()
        if mine != self.code_version:
            self.refused = (f"Dask worker {worker.address} refused: its labutils/autograder (version {mine}) differ "
                            f"from the client's ({self.code_version}); check out the client's commit there and "
                            "restart the worker")
            logger.error(self.refused)
            return
        # its own folder, never the one of the instance it replaces: that one's last task may still be running
        self.work = Path(tempfile.mkdtemp(prefix=self.name + "-", dir=worker.local_directory))
        (passable_folder(self.work) / "template").mkdir()
        (self.work / "template" / "gradebook.db").write_bytes(self.template)
        self.run = replace(self.run, template_db=str(self.work / "template" / "gradebook.db"), work_dir=str(self.work))
        # the zygote's imports take seconds: off the event loop, so the worker keeps answering the scheduler
        await asyncio.get_running_loop().run_in_executor(None, self._warm)
        await worker.set_resources(**{self.name: 1})  # ready: the scheduler may send tasks now
        self.last_used, self.stopping = time.monotonic(), threading.Event()
        threading.Thread(target=self._watch_idle, name="looplab-idle-zygote", daemon=True).start()

    def _watch_idle(self) -> None:
        """A client that died never unregisters the plug-in: its zygote (torch loaded, about 1 GB) would stay on the
        worker for good. After :data:`IDLE_S` without a task it is stopped; a task that comes later starts one."""
        while not self.stopping.wait(min(60.0, IDLE_S / 4)):
            self.stop_if_idle(time.monotonic())

    def stop_if_idle(self, now: float) -> bool:
        """Stop the zygote when no task came for IDLE_S; whether it did."""
        with self.lock:
            if self.zygote is None or now - self.last_used < IDLE_S:
                return False
            logger.warning("%s: no task for %.0f s (was the client stopped?): its zygote is stopped",
                           self.address, now - self.last_used)
            self.zygote.close()
            self.zygote = None
            return True

    def _warm(self) -> None:
        with self.lock:
            if self.zygote is None:
                self._start_zygote()
        floor = self.zygote.ready.vm_mb + KERNEL_HEADROOM_MB
        if self.run.memory_mb < floor:
            self.refused = (f"--memory-limit {self.run.memory_mb} MB is below what a kernel needs to start on Dask "
                            f"worker {self.address}: the imports alone map {self.zygote.ready.vm_mb} MB of address "
                            f"space; use at least {floor} MB")
            raise WorkerRefused(self.refused)
        gaps = isolation.missing(self.zygote.ready.isolation)
        if gaps and self.run.require_isolation:
            self.refused = f"Dask worker {self.address} refused (--require-isolation): " + "; ".join(gaps)
            raise WorkerRefused(self.refused)
        for gap in gaps:
            logger.warning("%s: %s", self.address, gap)

    def _start_zygote(self) -> None:
        import warnings

        from sqlalchemy.exc import SAWarning

        from autograder.sandbox.client import private_zygote

        warnings.filterwarnings("ignore", category=SAWarning)  # nbgrader's own session use: noisy, not wrong
        prepare_tools()
        os.environ["JUPYTER_RUNTIME_DIR"] = str(passable_folder(self.work / "runtime"))  # the kernels' connection files
        self.zygote, self.zygote_folder = take_spare()
        if self.zygote is None:
            self.zygote_folder = self.zygote_folder or zygote_folder(self.local_directory)
            self.zygote = private_zygote(self.zygote_folder)
        self.run = replace(self.run, data_dirs=self.zygote.ready.data_dirs, cache_dir=self.zygote.ready.cache_dir)

    async def teardown(self, worker) -> None:
        if getattr(self, "stopping", None) is not None:
            self.stopping.set()
        if self.zygote is not None and self.refused is None:
            try:
                await worker.set_resources(**{self.name: 0})
            except Exception:  # the scheduler is gone: nothing to tell
                pass
        if self.zygote is not None and keep_spare(self.zygote, self.zygote_folder):
            self.zygote = None  # the next run's now
        else:
            if self.zygote is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.zygote.close)  # kernels and all
            if self.zygote_folder is not None:
                shutil.rmtree(self.zygote_folder, ignore_errors=True)
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)

    def grade(self, remote: RemoteTask) -> RemoteResult:
        if self.refused:
            raise WorkerRefused(self.refused)
        if remote.template_sha != self.template_sha or remote.code_version != self.code_version:
            raise WorkerRefused(f"Dask worker {self.address} holds another run's gradebook template or code")
        with self.lock:
            if self.zygote is None or not self.zygote.alive():
                if self.zygote is not None:
                    self.zygote.close()
                self._start_zygote()
            inbox = self.work / "inbox" / remote.task.id
            shutil.rmtree(inbox, ignore_errors=True)
            try:
                task = _unpack(remote, inbox)
                result = _grade(task, self.run, self.zygote)
                feedback, autograded = _read(result.feedback), _read(result.autograded)
            finally:
                shutil.rmtree(inbox, ignore_errors=True)
                shutil.rmtree(task_dir(self.work, remote.task.id), ignore_errors=True)
                self.last_used = time.monotonic()
        # paths on this worker mean nothing to the client
        return RemoteResult(replace(result, feedback=None, autograded=None), feedback, autograded, self.address)


def worker_isolation(plugin_name: str, dask_worker=None) -> dict | None:
    """The confinement layers this worker's zygote applies (layer -> why not, "" when applied), for the client's log."""
    plugin = dask_worker.plugins.get(plugin_name)
    zygote = getattr(plugin, "zygote", None)
    return dict(zygote.ready.isolation) if zygote is not None else None


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path and Path(path).exists() else None


def _unpack(remote: RemoteTask, inbox: Path) -> Task:
    """The task with its files written under ``inbox`` on this worker."""
    path = inbox / f"{remote.task.notebook}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_bytes(remote.notebook_bytes)
    extras = []
    for name, data in remote.extra_files.items():
        target = inbox / "extra" / name
        if not target.resolve().is_relative_to((inbox / "extra").resolve()):
            raise WorkerRefused(f"extra file name {name!r} leaves the task's folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        extras.append(ExtraFile(name=name, path=str(target)))
    return replace(remote.task, path=str(path), extra_files=extras)


def _grade(task: Task, run: RunConfig, zygote) -> Result:
    from .task import grade_task

    return grade_task(task, run, zygote)


def grade_remote(remote: RemoteTask, plugin_name: str) -> RemoteResult:
    """The Dask task: grade ``remote`` with this worker's plug-in."""
    from distributed import get_worker

    worker = get_worker()
    plugin = worker.plugins.get(plugin_name)
    if plugin is None:
        raise WorkerRefused(f"Dask worker {worker.address} has no Loop Lab grader plug-in {plugin_name}")
    return plugin.grade(remote)


# --- the client side --------------------------------------------------------------------------------------------------


def pack(task: Task, template_sha: str, version: str) -> RemoteTask:
    """A task of this machine (paths) as a :class:`RemoteTask` (the bytes themselves)."""
    return RemoteTask(task=task, notebook_bytes=Path(task.path).read_bytes(),
                      extra_files={e.name: Path(e.path).read_bytes() for e in task.extra_files},
                      template_sha=template_sha, code_version=version)


def failure_reason(exc: BaseException) -> str:
    """Why a task failed every try, as the student's notes say it."""
    from distributed.scheduler import KilledWorker

    if isinstance(exc, KilledWorker):
        return (f"the Dask workers grading it died {exc.allowed_failures + 1} times (the last one was "
                f"{exc.last_worker.address}); not graded")
    return f"{type(exc).__name__}: {exc} (failed {RETRIES + 1} tries on the Dask cluster)"


class DaskExecutor:
    """Grades a run's tasks on the Dask cluster at ``scheduler``: the "run" step of :func:`autograder.grade.grade`,
    with the same three methods as :class:`autograder.run.pool.LocalExecutor`."""

    def __init__(self, scheduler: str, connect_timeout: float = 60):
        self.scheduler = scheduler
        self.connect_timeout = connect_timeout
        self.client = None

    def start(self, work: Path) -> None:
        """Connect, refuse workers with other code, and start every worker's zygote while the gradebook is built."""
        from distributed import Client

        self.work = work
        self.inbox = work / "from-workers"  # the feedback pages the workers send back
        self.version = code_version()
        try:
            self.client = Client(self.scheduler, timeout=self.connect_timeout)
            self.client.wait_for_workers(1, timeout=self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise GradingSetupError(f"no Dask scheduler with a worker answered at {self.scheduler} within "
                                    f"{self.connect_timeout:.0f} s ({type(exc).__name__}: {exc})") from None
        wrong = mismatched_workers(self.client.run(code_version, on_error="return"), self.version)
        if wrong:
            raise WorkerRefused("Dask worker(s) refused, their code differs from this client's (check out the same "
                                "commit there and restart them):\n  " + "\n  ".join(wrong))
        self.client.run(prewarm)  # returns at once: each worker starts its zygote in a thread

    def run(self, tasks: list[Task], run: RunConfig, on_result: OnResult, log=print) -> None:
        """Every task on the cluster; ``on_result(result, seconds)`` as each comes back, ``result.feedback`` a file
        under ``work`` on this machine."""
        if not tasks:
            return
        client, version = self.client, self.version
        plugin = GraderPlugin(Path(run.template_db).read_bytes(), version, run)
        started = time.monotonic()
        try:
            client.register_plugin(plugin, name=plugin.name)  # returns when every worker's zygote is warm
            log(f"{len(client.scheduler_info()['workers'])} Dask worker(s) at {self.scheduler} warm "
                f"{time.monotonic() - started:.1f} s after the gradebook (its template sent once per worker)")
            for address, found in sorted(client.run(worker_isolation, plugin.name, on_error="return").items()):
                if isinstance(found, dict):  # the same layers as a local run, said per worker
                    check_isolation(found, run.require_isolation, lambda line, a=address: log(f"{a}: {line}"))
            futures = {}
            for task in tasks:
                future = client.submit(grade_remote, pack(task, plugin.template_sha, version), plugin.name,
                                       key=f"{plugin.name}-{task.id}", pure=False, retries=RETRIES,
                                       resources={plugin.name: 1}, priority=int(10 * cost(task.notebook)))
                futures[future] = task  # priority: the longest notebooks first
            self._collect(futures, plugin.name, on_result)
            reruns = client.run_on_scheduler(_rerun, [f.key for f in futures])
            if reruns:
                log(f"{reruns} task(s) graded again on another worker after the one grading them died")
        finally:
            try:
                client.unregister_worker_plugin(plugin.name)  # every worker stops its zygote, removes its folder
            except Exception as exc:  # never registered: the error that stopped the run matters, not this one
                log(f"note: the Dask plug-in {plugin.name} was not removed ({type(exc).__name__}: {exc})")

    def _collect(self, futures: dict, resource: str, on_result: OnResult) -> None:
        """Each result as it comes; when no worker has been able to grade for :data:`STALL_S`, the rest fail."""
        from distributed import wait

        pending, stalled_since = set(futures), None
        while pending:
            try:
                done, pending = wait(pending, timeout=POLL_S, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            for future in done:
                on_result(*_received(future, futures[future], self.inbox, self.work))
            if done or self._ready_workers(resource):
                stalled_since = None
            elif stalled_since is None:
                stalled_since = time.monotonic()
            elif time.monotonic() - stalled_since > STALL_S:
                for future in pending:
                    future.cancel()
                    on_result(Result.failed(futures[future], f"no Dask worker able to grade it for {STALL_S} s (all "
                                            "refused or gone; see the workers' logs)"), 0.0)
                return

    def _ready_workers(self, resource: str) -> int:
        workers = self.client.scheduler_info()["workers"].values()
        return sum(1 for w in workers if w.get("resources", {}).get(resource, 0) > 0)

    def close(self) -> None:
        if self.client is not None:  # a zygote no plug-in took waits for the next run (keep_spare), IDLE_S at most
            self.client.close()


def _rerun(keys: list, dask_scheduler=None) -> int:
    """On the scheduler: how many of ``keys`` were running on a worker that died."""
    return sum(1 for key in keys if getattr(dask_scheduler.tasks.get(key), "suspicious", 0) > 0)


def run_on_cluster(scheduler: str, tasks: list[Task], run: RunConfig, work: Path, on_result: OnResult,
                   log=print) -> None:
    """``tasks`` graded on the cluster at ``scheduler`` (start, run, close)."""
    executor = DaskExecutor(scheduler)
    try:
        executor.start(work)
        executor.run(tasks, run, on_result, log)
    finally:
        executor.close()


def _received(future, task: Task, inbox: Path, work: Path | None = None) -> tuple[Result, float]:
    """A finished future as the local pool's result: its files written on this machine, where a local task leaves
    them (the autograded notebook where the formgrader course looks for it)."""
    from autograder.layout import autograded_notebook, task_course

    if future.status != "finished":
        return Result.failed(task, failure_reason(future.exception())), 0.0
    remote: RemoteResult = future.result()
    result = remote.result
    if remote.feedback_html is not None:
        page = inbox / task.student / f"{task.notebook}.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_bytes(remote.feedback_html)
        result = replace(result, feedback=str(page))
    if remote.autograded_ipynb is not None and work is not None:
        graded = autograded_notebook(task_course(work, task.id), task.student, task.notebook)
        graded.parent.mkdir(parents=True, exist_ok=True)
        graded.write_bytes(remote.autograded_ipynb)
        result = replace(result, autograded=str(graded))
    return result, float(result.timings.get("total_s", 0.0))
