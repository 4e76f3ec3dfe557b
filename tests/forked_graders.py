"""``python -m autograder ...`` run in forks of one process that has imported the grader and holds a warm zygote, for
the tests that check what a command grades, writes and says rather than how its processes live and die.

Why: every ``python -m autograder grade`` pays a fixed ~15 s of CPU on the 2-core AVX2 machine besides its tasks
(process accounting of a run of the one-notebook toy assignment: the zygote 8.8 s, torch, torch._dynamo, ipykernel and
the data; the grader 6.5 s, its imports, nbgrader's alone ~1 s, the feedback templates and the summary's figure),
against ~1 s per toy task. The suite ran about forty such commands. Here a server pays them once per xdist worker:
it imports what the commands import, warms the feedback templates, starts one
:class:`~autograder.sandbox.client.SharedZygote` and waits for it; each command is then a fork of it that runs
``autograder.cli.main(argv, zygote)`` with the caller's arguments, folder, environment and a stdout and stderr of its
own, and exits with the command's status. ``grade`` lends its workers that zygote
(:class:`~autograder.run.pool.LocalExecutor`'s ``zygote``): each still gets a server of its own, which kills what its
kernels left.

What stays a real ``python -m autograder`` process: a test that kills the grader or looks for what it leaves
running (tests/test_grade_resume.py), runs it in a fence of its own (tests/test_confinement_class.py), changes the
zygote's environment or code (another project's copy, a wrapper around the checks), or tests the command line's
start-up itself.

Protocol: one JSON request per line on stdin ({"argv", "cwd", "env", "stdout", "stderr", "timeout"}), one JSON reply
per line on stdout ({"returncode", "timed_out"}); the first line says it is ready (or why not). It exits when stdin
closes; its zygote and commands die with it.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# what a grade run imports on its way (its plan, workers, feedback, reports, formgrader course), and the exports
PRELOAD = ("autograder.cli", "autograder.grade", "autograder.course.release", "autograder.course.submissions",
           "autograder.course.formgrader", "autograder.run.pool", "autograder.run.worker", "autograder.run.task",
           "autograder.run.feedback", "autograder.results.collect", "autograder.results.writers.summary",
           "autograder.results.gradebook", "autograder.results.writers.nbgrader_csv", "autograder.results.writers.lms",
           "nbgrader.api", "nbgrader.converters", "nbgrader.preprocessors", "matplotlib.figure",
           "matplotlib.backends.backend_agg")


# --- the server (this file, run as a script) -------------------------------------------------------------------------


def _warm_up(folder: Path):
    """The imports, the feedback templates and the zygote, waited for; the zygote."""
    for name in PRELOAD:
        importlib.import_module(name)
    from autograder.run.feedback import warm_feedback
    from autograder.sandbox.client import SharedZygote

    warm_feedback()
    zygote = SharedZygote(folder)
    zygote.wait_ready()
    return zygote


def _command(request: dict, replies: int, server: int, zygote) -> None:
    """In the forked child: what ``python -m autograder ARGV`` started in ``cwd`` with ``env`` would have, then the
    command; it leaves with the command's exit status."""
    from autograder.sandbox.policy import die_with_parent

    os.setsid()  # its own process group: a timed-out command is killed with its workers
    die_with_parent(server)
    os.close(replies)
    written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], written),
                            (2, request["stderr"], written)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    for signum in (signal.SIGCHLD, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # the server's was cached: this command's TMPDIR is the caller's
    sys.argv = [str(REPO / "autograder" / "__main__.py"), *request["argv"]]
    atexit._clear()  # the server's exit handlers are not this command's
    from autograder import cli

    try:
        code = cli.main(request["argv"], zygote=zygote)
    except SystemExit as exc:  # argparse's usage errors (2), as the interpreter turns them into a status
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The command's exit status, and whether it was killed (with its process group) for running past ``timeout``."""
    from autograder.process import ForkedChild

    child = ForkedChild(pid)
    try:
        return child.wait(timeout), False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        return child.wait(), True


def serve() -> None:
    from autograder.process import fork_child

    replies = os.dup(1)
    os.dup2(2, 1)  # whatever the warm-up or a command prints goes to stderr, never into the replies
    folder = Path(tempfile.mkdtemp(prefix="looplab-forked-graders-"))
    try:
        zygote = _warm_up(folder)
        threads = threading.enumerate()  # a fork copies one thread: one holding a lock would leave it held
        problem = None if len(threads) == 1 else f"threads after the warm-up: {threads}"
    except Exception as exc:
        zygote, problem = None, f"the warm-up failed: {exc!r}"
    os.write(replies, (json.dumps({"ready": problem is None, "problem": problem}) + "\n").encode())
    try:
        if problem is None:
            server = os.getpid()
            for line in sys.stdin:
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = fork_child(lambda: _command(request, replies, server, zygote))
                code, timed_out = _wait(pid, request["timeout"])
                os.write(replies, (json.dumps({"returncode": code, "timed_out": timed_out}) + "\n").encode())
    finally:
        if zygote is not None:
            zygote.close()
        shutil.rmtree(folder, ignore_errors=True)


# --- the test side -----------------------------------------------------------------------------------------------------


def run_real(*args, cwd: Path = REPO, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m autograder ARGS`` as a process of its own, called as :meth:`GraderServer.run` is: for a command
    whose zygote must see the caller's environment (a wrapper on its path) or that tests the start-up itself."""
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


class GraderServer:
    """The server process, started on first use (:meth:`run`) and closed with the test session."""

    def __init__(self):
        self.process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   cwd=REPO, text=True, bufsize=1)
        ready = json.loads(process.stdout.readline() or '{"problem": "the server died while warming up"}')
        if not ready.get("ready"):
            process.stdin.close()
            process.wait()
            raise RuntimeError(f"forked graders: {ready['problem']}")
        return process

    def run(self, *args, cwd: Path = REPO, env: dict | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
        """``python -m autograder ARGS`` as ``subprocess.run(..., capture_output=True, text=True)`` gives it back
        (a ``TimeoutExpired`` past ``timeout``, the command killed)."""
        argv = [str(a) for a in args]
        with self._lock, tempfile.TemporaryDirectory(prefix="looplab-command-") as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            if self.process is None:
                self.process = self._start()
            request = {"argv": argv, "cwd": str(cwd), "env": dict(os.environ if env is None else env),
                       "stdout": str(out), "stderr": str(err), "timeout": timeout}
            self.process.stdin.write(json.dumps(request) + "\n")
            reply = self.process.stdout.readline()
            if not reply:
                raise RuntimeError(f"forked graders: the server exited with {self.process.wait()}")
            reply = json.loads(reply)
            command = [sys.executable, "-m", "autograder", *argv]
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, reply["returncode"], stdout, stderr)

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()


if __name__ == "__main__":
    sys.path[0] = str(REPO)  # the repository's packages, as ``python -m autograder`` run there finds them
    serve()
