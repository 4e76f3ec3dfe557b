"""The client side of :mod:`autograder.sandbox.zygote`: start it, talk to it, and the environments and rules it is given.

- :class:`SharedZygote` starts the run's one warm zygote (reachable only through sockets the grader hands out); each
  worker talks to its own fork of it with :class:`Zygote`. :func:`private_zygote` starts a worker's own when the shared one is gone.
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
from autograder.sandbox import policy
from autograder.channel import Exit, KillAll, RunConfig, ZygoteReady
from autograder.course.handout import student_labutils_files
from autograder.layout import REPO_ROOT, reference_dir
from labutils import data_files, exercises

ZYGOTE_MAIN = "from autograder.sandbox.zygote import main; main({argv!r})"


class ZygoteError(RuntimeError):
    """The zygote did not answer (it died or hung)."""


def zygote_env(home: Path) -> dict:
    """The zygote's environment: ours, with its own HOME, grading mode and an inline plot backend, and our data cache
    (:func:`data_cache`)."""
    return dict(os.environ, HOME=str(home), MPLCONFIGDIR=str(home / "mpl"),
                MPLBACKEND="module://matplotlib_inline.backend_inline", LAB_MODE="grade",
                LAB_CACHE_DIR=str(data_cache(home)),
                MALLOC_ARENA_MAX="2")  # fewer 64 MB malloc arenas per thread: the memory limit measures data


def data_cache(home: Path) -> Path:
    """Where the zygote finds FashionMNIST decompressed: this user's cache (``labutils.data_files.cache_dir``) when it can
    hold it, else one under the zygote's own HOME. With HOME moved, every run's zygote decompressed the 55 MB into a
    folder of its own again (a quarter of a second of CPU, and the writes). Kernels may read the data cache; the
    grader's own cache (``layout.grader_cache_dir``) is another folder."""
    mine = data_files.cache_dir()
    if data_files.staged(mine) or _writable(mine):
        return mine
    return home / ".cache" / "loop_lab"


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def _spawn(argv: list[str], log, env: dict, stdin, pass_fds=()) -> subprocess.Popen:
    # in its log's folder, which outlives it, never in ours: a Dask worker may spawn one (a prewarm) while a task's
    # nbgrader has chdir'ed into that task's folder, removed when the task ends; torch._dynamo's import calls
    # os.getcwd(), so the zygote lost it and every recheck imported it anew, seen as the student changing torch
    return subprocess.Popen([sys.executable, "-c", ZYGOTE_MAIN.format(argv=argv)], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=log, env=env, cwd=Path(log.name).parent, start_new_session=True, pass_fds=pass_fds)


class SharedZygote:
    """The run's one warm zygote. Nothing names it: the grader holds the only end of its control socket (a
    socketpair it inherited) and hands it one end of a fresh socketpair per worker (:meth:`attach`), so no student
    process can find it, connect to it or ask it for work. It dies with the grader (``PR_SET_PDEATHSIG``) and kills
    what it forked when the control socket closes."""

    def __init__(self, work: Path):
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.log = open(work / "zygote.log", "ab")
        with theirs:
            self.proc = _spawn(["--control", str(theirs.fileno()), "--parent", str(os.getpid())], self.log, zygote_env(work / "zygote-home"),
                               subprocess.DEVNULL, pass_fds=(theirs.fileno(),))
        self.info: ZygoteReady | None = None

    def attach(self) -> socket.socket:
        """A new connection for a worker: the zygote forks a private server for its other end."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            socket.send_fds(self.control, [b"c"], [theirs.fileno()])
        return mine

    def alive(self) -> bool:
        return self.proc.poll() is None

    def death(self) -> str:
        """How it ended, in words (it has)."""
        code = self.proc.poll()
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
            return f"killed by {name}" + (": the OOM killer, or a kill" if -code == signal.SIGKILL else "")
        return f"exit status {code}; see {self.log.name}"

    def wait_ready(self, timeout: float = 600) -> ZygoteReady:
        if self.info is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else b""
            if not line:
                raise RuntimeError(f"the zygote did not start (see {self.log.name})")
            self.info = channel.decode(line, ZygoteReady)
        return self.info

    def close(self) -> None:
        """Stop the zygote and everything below it. One nobody waited for (a run with nothing left to grade) has
        forked nothing and is still importing: it is killed at once. Closing its control socket alone let it finish
        its warm-up first (torch and the rest, ~4.5 s of CPU) before it saw the socket closed, and the run waited."""
        self.control.close()  # a ready zygote kills everything below it and exits
        if self.info is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.log.close()


class Zygote:
    """A connection to a zygote that forks kernels and rechecks on request.

    With ``sock`` (a socket the grader handed us, see :meth:`SharedZygote.attach`) it talks to the run's shared
    zygote, which forked a private server for it; without, it starts a private zygote process (slower: its own
    imports). Every request carries a number and its reply the same one: a reply that comes after its request was
    given up (a timeout) is dropped, never taken as the answer to the next one.
    """

    def __init__(self, sock: socket.socket | None = None, log_path: Path | None = None, env: dict | None = None,
                 startup_timeout: float = 300):
        started = time.monotonic()
        self.proc = self.sock = None
        self.closed = False
        self.buffer = b""
        self.last_id = 0
        if sock is not None:
            self.sock = sock
            self.fd, self.wfile = sock.fileno(), sock.makefile("wb")
            self.ready = None
        else:
            self.log = open(log_path, "ab")
            self.proc = _spawn([], self.log, env, subprocess.PIPE)
            self.fd, self.wfile = self.proc.stdout.fileno(), self.proc.stdin
            self.ready = self._read(startup_timeout, ZygoteReady)[1]
        self.startup_s = time.monotonic() - started

    def _line(self, deadline: float | None) -> bytes:
        while b"\n" not in self.buffer:
            left = None if deadline is None else deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], None if left is None else max(0.0, left))
            if not ready:
                raise ZygoteError("no answer from the zygote in time")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.closed = True
                raise ZygoteError("the zygote exited")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def _read(self, timeout: float | None, expect=None, id: int | None = None):
        """The next (id, message); with ``id``, the next reply to that request (any other is a late one: dropped)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                tag, message = channel.decode_tagged(self._line(deadline))
            except channel.ChannelError as exc:
                raise ZygoteError(str(exc)) from None
            if id is not None and tag != id:
                print(f"zygote: dropped a reply to request {tag} (not {id}): {type(message).__name__}",
                      file=sys.stderr)
                continue
            if expect is not None and not isinstance(message, expect):
                raise ZygoteError(f"expected {expect}, got {type(message).__name__}")
            return tag, message

    def request(self, message, expect, timeout: float | None = 60):
        """Send ``message``; the reply, which must be an ``expect`` (a :class:`channel.RequestFailed` raises)."""
        self.last_id += 1
        try:
            channel.send(self.wfile, message, id=self.last_id)
        except OSError as exc:
            self.closed = True
            raise ZygoteError(f"the zygote is gone: {exc}") from None
        try:
            reply = self._read(timeout, (expect, channel.RequestFailed), id=self.last_id)[1]
        except ZygoteError as exc:
            raise ZygoteError(f"{type(message).__name__}: {exc} (within {timeout} s)") from None
        if isinstance(reply, channel.RequestFailed):
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
                policy.kill_descendants(self.proc.pid)
                self.proc.kill()
            self.proc.wait()
            self.log.close()
        if self.sock is not None:
            self.sock.close()


def connect(run: RunConfig, shared_fd: int | None = None) -> Zygote:
    """A worker's zygote: the run's shared one over the socket the grader handed us (``shared_fd``, once: a lost
    connection is not reopened), or a private one."""
    if shared_fd is not None:
        try:
            return Zygote(sock=socket.socket(fileno=shared_fd))
        except OSError as exc:
            print(f"worker: shared zygote unavailable ({exc}); starting a private one", file=sys.stderr)
    return private_zygote(Path(run.work_dir))


def private_zygote(work: Path) -> Zygote:
    home = work / f"zygote-home-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    return Zygote(log_path=work / f"zygote-{os.getpid()}.log", env=zygote_env(home))


def base_policy(run: RunConfig) -> policy.Policy:
    """The sandbox rules every kernel and recheck of this run shares; each adds its own folders."""
    return policy.Policy(
        read_dirs=[*policy.system_read_dirs(), *run.data_dirs],
        read_files=[str(p) for p in student_labutils_files()]
        + [str(REPO_ROOT / "autograder" / name) for name in ("__init__.py", "hidden/__init__.py", "hidden/verifier.py")],
        # labutils/ may be listed (a fresh `python` started by the notebook must find its modules); the reference
        # package stays unreadable, and in forks of the zygote it is not even found (zygote.ReferenceBlocker)
        list_dirs=[str(d) for d in [REPO_ROOT / "labutils", *(REPO_ROOT / "labutils").rglob("*")]
                   if d.is_dir() and "__pycache__" not in d.parts and not d.is_relative_to(reference_dir())],
        write_files=["/dev/null"],
        write_dirs=["/dev/shm"],
        memory_mb=run.memory_mb,
        task_memory_mb=run.task_memory_mb,
        cpu_seconds=int(run.notebook_timeout * 2 + 60),
        passable_below=run.work_dir,
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
        **exercises.GRADED_OUTSIDE,
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "LAB_CACHE_DIR": run.cache_dir,
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    if os.environ.get("LAB_DATA_DIR"):
        env["LAB_DATA_DIR"] = os.environ["LAB_DATA_DIR"]
    return env
