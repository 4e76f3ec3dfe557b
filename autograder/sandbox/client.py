"""The client side of :mod:`autograder.sandbox.zygote`: start it, talk to it, and the environments and rules it is given.

- :class:`SharedZygote` starts the run's one warm zygote (listening on a Unix socket); each worker connects with
  :class:`Zygote` and gets a fork of it. :func:`private_zygote` starts a worker's own when the shared one is gone.
- :func:`zygote_env` (the zygote's own environment), :func:`kernel_env` (what student code sees) and
  :func:`base_policy` (the sandbox rules every kernel and recheck of a run shares) are written here once.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from autograder import channel
from autograder.sandbox import policy as sandbox
from autograder.channel import Exit, KillAll, RunConfig, ZygoteReady
from autograder.course.handout import student_labutils_files
from autograder.layout import REPO_ROOT, reference_dir

ZYGOTE_MAIN = "from autograder.sandbox.zygote import main; main({argv!r})"


class ZygoteError(RuntimeError):
    """The zygote did not answer (it died or hung)."""


def zygote_env(home: Path) -> dict:
    """The zygote's environment: ours, with its own HOME, grading mode and an inline plot backend."""
    return dict(os.environ, HOME=str(home), MPLCONFIGDIR=str(home / "mpl"),
                MPLBACKEND="module://matplotlib_inline.backend_inline", LAB_MODE="grade",
                MALLOC_ARENA_MAX="2")  # fewer 64 MB malloc arenas per thread: the memory limit measures data


def _spawn(argv: list[str], log, env: dict, stdin) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ZYGOTE_MAIN.format(argv=argv)], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True)


class SharedZygote:
    """The run's one warm zygote; each worker connects to :attr:`socket` and gets its own fork of it."""

    def __init__(self, work: Path):
        self.socket = str(work / "zygote.sock")
        self.log = open(work / "zygote.log", "ab")
        self.proc = _spawn(["--socket", self.socket], self.log, zygote_env(work / "zygote-home"), subprocess.DEVNULL)
        self.info: ZygoteReady | None = None

    def wait_ready(self, timeout: float = 600) -> ZygoteReady:
        if self.info is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else b""
            if not line:
                raise RuntimeError(f"the zygote did not start (see {self.log.name})")
            self.info = channel.decode(line, ZygoteReady)
        return self.info

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.log.close()


class Zygote:
    """A connection to a zygote that forks kernels and rechecks on request.

    With ``socket_path`` it connects to the run's shared zygote, which forks a private one for this connection;
    without, it starts a private zygote process (slower: its own imports).
    """

    def __init__(self, socket_path: str | None = None, log_path: Path | None = None, env: dict | None = None,
                 startup_timeout: float = 300):
        started = time.monotonic()
        self.proc = self.sock = None
        self.closed = False
        if socket_path:
            self._connect(socket_path, startup_timeout)
            self.ready = None
        else:
            self.log = open(log_path, "ab")
            self.proc = _spawn([], self.log, env, subprocess.PIPE)
            self.rfile, self.wfile = self.proc.stdout, self.proc.stdin
            self.ready = self._read(startup_timeout, ZygoteReady)
        self.startup_s = time.monotonic() - started

    def _connect(self, path: str, timeout: float) -> None:
        started = time.monotonic()
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() - started > timeout:
                    raise ZygoteError(f"no zygote at {path} after {timeout} s") from None
                time.sleep(0.2)
        self.rfile, self.wfile = self.sock.makefile("rb"), self.sock.makefile("wb")

    def _read(self, timeout: float | None, expect=None):
        ready, _, _ = select.select([self.rfile.fileno()], [], [], timeout)
        if not ready:
            raise ZygoteError(f"no answer from the zygote within {timeout} s")
        try:
            return channel.receive(self.rfile, expect)
        except EOFError:
            self.closed = True
            raise ZygoteError("the zygote exited") from None
        except channel.ChannelError as exc:
            raise ZygoteError(str(exc)) from None

    def request(self, message, expect, timeout: float | None = 60):
        """Send ``message``; the reply, which must be an ``expect`` (a :class:`channel.Failure` raises)."""
        try:
            channel.send(self.wfile, message)
        except OSError as exc:
            self.closed = True
            raise ZygoteError(f"the zygote is gone: {exc}") from None
        reply = self._read(timeout, (expect, channel.Failure))
        if isinstance(reply, channel.Failure):
            raise ZygoteError(f"the zygote could not do {type(message).__name__}: {reply.error}")
        return reply

    def killall(self) -> int:
        """Kill everything the last notebook left running; how many processes that was."""
        return self.request(KillAll(), channel.Killed, timeout=30).killed

    def alive(self) -> bool:
        return not self.closed and (self.proc is None or self.proc.poll() is None)

    def close(self) -> None:
        try:
            if self.alive():
                channel.send(self.wfile, Exit())
        except OSError:
            pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if self.proc.poll() is None:
                sandbox.kill_descendants(self.proc.pid)
                self.proc.kill()
            self.proc.wait()
            self.log.close()
        if self.sock is not None:
            self.sock.close()


def connect(run: RunConfig) -> Zygote:
    """A worker's zygote: a fork of the run's shared one, or a private one when that is unavailable."""
    if run.zygote_socket:
        try:
            return Zygote(socket_path=run.zygote_socket, startup_timeout=60)
        except ZygoteError as exc:
            print(f"worker: shared zygote unavailable ({exc}); starting a private one", file=sys.stderr)
    return private_zygote(Path(run.work_dir))


def private_zygote(work: Path) -> Zygote:
    home = work / f"zygote-home-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    return Zygote(log_path=work / f"zygote-{os.getpid()}.log", env=zygote_env(home))


def base_policy(run: RunConfig) -> sandbox.Policy:
    """The sandbox rules every kernel and recheck of this run shares; each adds its own folders."""
    return sandbox.Policy(
        read_dirs=[*sandbox.system_read_dirs(), *run.data_dirs],
        read_files=[str(p) for p in student_labutils_files()]
        + [str(REPO_ROOT / "autograder" / name) for name in ("__init__.py", "hidden/__init__.py", "hidden/verifier.py")],
        # labutils/ may be listed (a fresh `python` started by the notebook must find its modules); the reference
        # package stays unreadable, and in forks of the zygote it is not even found (zygote.ReferenceBlocker)
        list_dirs=[str(d) for d in [REPO_ROOT / "labutils", *(REPO_ROOT / "labutils").rglob("*")]
                   if d.is_dir() and "__pycache__" not in d.parts and not d.is_relative_to(reference_dir())],
        write_files=["/dev/null"],
        write_dirs=["/dev/shm"],
        memory_mb=run.memory_mb,
        cpu_seconds=int(run.notebook_timeout * 2 + 60),
    )


def kernel_env(home: Path, tmp: Path, run: RunConfig) -> dict:
    """The environment student code sees: its own HOME and TMPDIR, grading mode, the data, nothing else."""
    env = {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "LAB_MODE": "grade",
        "NBGRADER_EXECUTION": "autograde",
        "LOOPLAB_HIDDEN_TESTS": "external",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "LAB_CACHE_DIR": run.cache_dir,
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    if os.environ.get("LAB_DATA_DIR"):
        env["LAB_DATA_DIR"] = os.environ["LAB_DATA_DIR"]
    return env
