"""A Gradescope autograder container, emulated on this machine for the tests: Gradescope's documented ``/autograder``
layout in a private mount namespace, and ``run_autograder`` run there under the default container's resources.

What Gradescope documents (its "Autograder Specifications", "Technical Details" and "Troubleshooting" pages): the zip
is unpacked into ``/autograder/source``; ``run_autograder`` is copied to ``/autograder/run_autograder`` when the
image is built and run for each submission with ``/autograder`` as the working folder, as root; the student's files
are in ``/autograder/submission``; the harness reads ``/autograder/results/results.json`` once it has finished
(whatever its exit status); a container has 768 MB of memory and half a virtual CPU by default.

Here: a process joins a new cgroup (v1: memory, memsw, cpu, pids; v2: memory.max, cpu.max) with those limits,
enters a mount namespace of its own, builds a root there (every top-level folder of this machine bound in, except a
fresh ``/tmp`` and ``/autograder``, which is the test's folder), ``chroot``s into it and runs
``/autograder/run_autograder``. This checkout and its venv (which stand for the ones Gradescope's ``setup.sh`` builds
in the image) are bound in at their own paths, also when they lie under ``/tmp``. Nothing of it is seen outside: this
machine's ``/`` gets no ``/autograder``.

``before_exec``: Python source run in that process just before ``exec`` (after the mounts, as root): where a test
adds what a container refuses (a seccomp filter like Docker's default profile).

Needs root, a writable cgroup file system and ``unshare``: :func:`unavailable` says why not, for a skip.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MEMORY_MB = 768  # Gradescope's default container ("Troubleshooting": "Our default memory limit is 768MB")
CPUS = 0.5  # "each autograder is allocated 1/2 of a virtual CPU"
CGROUP_FS = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
KEEP_OUT = {"autograder", "tmp", "proc", "sys", "dev", "lost+found"}  # made or mounted by the container itself
CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    """One run of ``run_autograder`` in the container."""

    returncode: int
    stdout: str
    stderr: str
    results: dict | None  # results.json, None when it was not written or is not JSON
    peak_mb: int  # the cgroup's peak memory use (v1: page cache included, which the kernel drops before an OOM kill)
    peak_anon_mb: int  # the peak of what it cannot drop (anonymous memory and tmpfs), sampled every 0.2 s
    task_peaks: dict[str, int]  # each task cgroup the grader made (a kernel, a recheck): its peak, as last sampled
    oom_kills: int  # processes the OOM killer took in the container
    seconds: float
    killed: list[int] = field(default_factory=list)  # zygotes a ``kill_zygotes`` run killed


# --- cgroups -------------------------------------------------------------------------------------------------------------


def _own(controller: str) -> str:
    """This process's cgroup path for ``controller`` ("" for the v2 hierarchy)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    raise FileNotFoundError(f"no {controller or 'v2'} cgroup in /proc/self/cgroup")


class Cgroup:
    """A new cgroup below this process's own, with Gradescope's limits; v1 where a memory controller is mounted."""

    def __init__(self, name: str, memory_mb: int, cpus: float):
        self.v1 = (CGROUP_FS / "memory").is_dir()  # v1's memory controller mounted; else the v2 hierarchy
        if self.v1:
            self.dirs = {c: CGROUP_FS / c / _own(c).lstrip("/") / name for c in ("memory", "cpu", "pids")}
        else:
            self.dirs = {"": CGROUP_FS / _own("").lstrip("/") / name}
        for folder in self.dirs.values():
            folder.mkdir()
        limit, quota = str(memory_mb << 20), str(int(cpus * PERIOD_US))
        if self.v1:
            (self.dirs["memory"] / "memory.limit_in_bytes").write_text(limit)
            memsw = self.dirs["memory"] / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # no swap beyond the limit either, as a container without swap
                memsw.write_text(limit)
            (self.dirs["cpu"] / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(quota)
        else:
            (self.dirs[""] / "memory.max").write_text(limit)
            (self.dirs[""] / "memory.swap.max").write_text("0")
            (self.dirs[""] / "cpu.max").write_text(f"{quota} {PERIOD_US}")

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    @property
    def memory(self) -> Path:
        return self.dirs["memory" if self.v1 else ""]

    def pids(self) -> list[tuple[int, str]]:
        """(pid, the cgroup path below ours) of every process in it and in the cgroups the grader made below it."""
        found = []
        for folder, _, files in os.walk(self.memory):
            if "cgroup.procs" in files:
                rel = os.path.relpath(folder, self.memory)
                found += [(int(p), rel) for p in Path(folder, "cgroup.procs").read_text().split()]
        return found

    def peak_mb(self) -> int:
        name = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        try:
            return int((self.memory / name).read_text()) >> 20
        except (OSError, ValueError):
            return -1

    def anon_mb(self) -> int:
        """What the cgroup holds that the kernel cannot drop: anonymous memory and tmpfs (shmem)."""
        stat = dict(line.split() for line in (self.memory / "memory.stat").read_text().splitlines())
        keys = ("total_rss", "total_shmem") if self.v1 else ("anon", "shmem")
        return sum(int(stat.get(key, 0)) for key in keys) >> 20

    def task_peaks(self) -> dict[str, int]:
        """The peak memory of every task cgroup below it now (the grader's, one per kernel or recheck), in MB."""
        name = "memory.max_usage_in_bytes" if self.v1 else "memory.peak"
        found = {}
        for folder in self.memory.glob("**/task-*"):
            try:
                found[folder.name] = int((folder / name).read_text()) >> 20
            except (OSError, ValueError):
                pass
        return found

    def oom_kills(self) -> int:
        text = (self.memory / ("memory.oom_control" if self.v1 else "memory.events")).read_text()
        return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")), 0)

    def remove(self) -> None:
        """Kill what is left in it, then remove it and every cgroup made below it, deepest first."""
        for _ in range(50):
            left = self.pids()
            if not left:
                break
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for top in self.dirs.values():
            for folder, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(folder)
                except OSError:
                    pass


def unavailable() -> str | None:
    """Why this machine cannot run the container (None: it can)."""
    if os.geteuid() != 0:
        return "the Gradescope emulation needs root (a cgroup and a mount namespace)"
    if not shutil.which("unshare"):
        return "the Gradescope emulation needs util-linux's unshare"
    try:
        probe = Cgroup(f"gradescope-probe-{os.getpid()}", 64, 1.0)
    except OSError as exc:
        return f"the Gradescope emulation cannot make a cgroup here ({exc})"
    probe.remove()
    return None


# --- the container's process (this file run as a script) ---------------------------------------------------------------

_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x00020000, 4096, 16384, 1 << 18


def _mount(libc, source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        raise OSError(ctypes.get_errno(), f"mount {source} on {target}: {os.strerror(ctypes.get_errno())}")


def _enter(config: dict) -> None:
    """In the container's process: the cgroup, the mount namespace, the new root, then ``run_autograder``."""
    for procs in config["procs"]:
        Path(procs).write_text(str(os.getpid()))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing below is seen outside
    new_root = config["new_root"]
    _mount(libc, "tmpfs", new_root, "tmpfs", 0, "size=1m,mode=0755")
    for name in sorted(os.listdir("/")):
        host, inside = f"/{name}", f"{new_root}/{name}"
        if name in KEEP_OUT:
            continue
        if os.path.islink(host):  # /bin -> usr/bin on a merged /usr
            os.symlink(os.readlink(host), inside)
        elif os.path.isdir(host):
            os.mkdir(inside)
            _mount(libc, host, inside, None, _MS_BIND | _MS_REC)
    for name, source in (("proc", "/proc"), ("sys", "/sys"), ("dev", "/dev"), ("tmp", config["tmp"]),
                         ("autograder", config["autograder"])):
        os.mkdir(f"{new_root}/{name}")
        _mount(libc, source, f"{new_root}/{name}", None, _MS_BIND | _MS_REC)
    for path in config["under_tmp"]:  # the fresh /tmp hides them
        os.makedirs(f"{new_root}{path}", exist_ok=True)
        _mount(libc, path, f"{new_root}{path}", None, _MS_BIND | _MS_REC)
    os.chroot(new_root)
    os.chdir("/autograder")  # "When the autograder executes, the working directory is /autograder."
    if config.get("before_exec"):
        exec(compile(config["before_exec"], "before_exec", "exec"), {})
    os.execve("/autograder/run_autograder", ["/autograder/run_autograder"], config["env"])


# --- the tests' side -----------------------------------------------------------------------------------------------------


def gradescope_env(extra: dict | None = None) -> dict:
    """A container's environment: root's, with no trace of the test's (no GRADESCOPE_ROOT: /autograder is real)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    return {**env, **(extra or {})}


def _parent(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


def _busy_zygotes(cgroup: Cgroup) -> set[int]:
    """The zygotes in the container (the server a grading run starts, not its forks) with a notebook running below
    them (a process of a task's cgroup descends from them)."""
    procs, tasks = {}, []
    for pid, rel in cgroup.pids():
        try:
            procs[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes(), _parent(pid))
        except OSError:
            continue
        if "/task-" in f"/{rel}":
            tasks.append(pid)
    forks = {pid for pid, (cmdline, _) in procs.items() if b"zygote import main" in cmdline and b"--control" in cmdline}
    graders = {pid for pid, (cmdline, _) in procs.items() if b"autograder" in cmdline and pid not in forks}
    zygotes = {pid for pid in forks if procs[pid][1] in graders}  # its forks' parent is the zygote (or init)
    busy = set()
    for pid in tasks:
        seen = 0
        while pid in procs and pid not in zygotes and seen < 64:
            pid, seen = procs[pid][1], seen + 1
        if pid in zygotes:
            busy.add(pid)
    return busy


def _kill_zygotes(cgroup: Cgroup, stop: threading.Event, killed: list[int]) -> None:
    """Kill every zygote of the run once a notebook is running below it: a zygote that dies mid-notebook."""
    while not stop.wait(0.05):
        try:
            busy = _busy_zygotes(cgroup)
        except OSError:
            continue
        for pid in busy - set(killed):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass


def _sample(cgroup: Cgroup, stop: threading.Event, peak: list[int], tasks: dict[str, int]) -> None:
    while not stop.wait(0.2):
        try:
            peak[0] = max(peak[0], cgroup.anon_mb())
            tasks.update(cgroup.task_peaks())
        except (OSError, ValueError):
            pass


def _under_tmp(paths: list[Path]) -> list[str]:
    """Those of ``paths`` the container's fresh ``/tmp`` would hide (a checkout cloned under ``/tmp``), outermost
    first, each once."""
    tmp = Path("/tmp").resolve()
    found = sorted({str(p) for p in paths if p.is_relative_to(tmp)}, key=len)
    return [p for i, p in enumerate(found) if not any(Path(p).is_relative_to(q) for q in found[:i])]


def run_autograder(root: Path, *, memory_mb: int = MEMORY_MB, cpus: float = CPUS, env: dict | None = None,
                   timeout: float = 600, before_exec: str = "", kill_zygotes: bool = False) -> Run:
    """Run ``ROOT/run_autograder`` (copied from ``ROOT/source``, as Gradescope's image build does) in the container,
    with ``ROOT`` as ``/autograder`` (``source/``, ``submission/``; ``results/`` is made empty). ``kill_zygotes``: kill
    each zygote once a notebook of it runs."""
    root = Path(root)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "results").mkdir()
    box = root.parent / f".container-{os.getpid()}-{time.monotonic_ns()}"
    (box / "root").mkdir(parents=True)
    (box / "tmp").mkdir(mode=0o1777)
    os.chmod(box / "tmp", 0o1777)
    cgroup = Cgroup(f"gradescope-{os.getpid()}-{time.monotonic_ns()}", memory_mb, cpus)
    config = {"procs": cgroup.procs_files(), "new_root": str(box / "root"), "tmp": str(box / "tmp"),
              "autograder": str(root), "env": gradescope_env(env), "before_exec": before_exec,
              "under_tmp": _under_tmp([CHECKOUT, Path(sys.prefix).resolve()])}
    stop, killed, anon, tasks = threading.Event(), [], [0], {}
    watcher = threading.Thread(target=_kill_zygotes, args=(cgroup, stop, killed), daemon=True)
    sampler = threading.Thread(target=_sample, args=(cgroup, stop, anon, tasks), daemon=True)
    started = time.monotonic()
    try:
        proc = subprocess.Popen([sys.executable, __file__, json.dumps(config)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        sampler.start()
        if kill_zygotes:
            watcher.start()
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            stderr += f"\n[container] killed after {timeout:.0f} s"
        seconds = time.monotonic() - started
        stop.set()
        peak, ooms = cgroup.peak_mb(), cgroup.oom_kills()
    finally:
        stop.set()
        cgroup.remove()
        shutil.rmtree(box, ignore_errors=True)
    try:
        results = json.loads((root / "results" / "results.json").read_text())
    except (OSError, ValueError):
        results = None
    return Run(proc.returncode, stdout, stderr, results, peak, anon[0], dict(tasks), ooms, round(seconds, 1), killed)


if __name__ == "__main__":
    _enter(json.loads(sys.argv[1]))
