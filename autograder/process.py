"""How a forked child of the grader ends: it runs its body and leaves with ``os._exit`` (0, or 1 with the traceback on
stderr). It never returns into the code it was forked from: an exception that unwound into the zygote's request loop
would leave a second zygote serving requests. Every fork of the grader's whose child runs a body goes through
:func:`fork_child`."""

from __future__ import annotations

import os
import traceback
from typing import Callable


def fork_child(body: Callable[[], object], quiet: bool = False) -> int:
    """Fork a child that runs ``body`` and then always leaves with ``os._exit``: 0, or 1 with the traceback on stderr
    (``quiet``: without it) when ``body`` raises. Returns the child's pid, in the parent only."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        body()
        code = 0
    except BaseException:
        if not quiet:
            traceback.print_exc()
    finally:
        os._exit(code)


def within(seconds: float, body: Callable[[], object]) -> str:
    """Run ``body`` in a forked child for at most ``seconds``: ``"done"``, ``"failed"`` (it raised; the traceback is
    on stderr) or ``"timed out"`` (killed). For work on a student's text whose time no input check can bound (a
    renderer's regex that is quadratic on some text): the grader goes on after ``seconds`` whatever the text."""
    import signal
    import subprocess

    child = ForkedChild(fork_child(body))
    try:
        code = child.wait(seconds)
    except subprocess.TimeoutExpired:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        return "timed out"
    return "done" if code == 0 else "failed"


class ForkedChild:
    """The parent's handle on a :func:`fork_child`: ``pid``, :meth:`poll` and :meth:`wait` as a ``subprocess.Popen``
    has them, for a child that was forked rather than started from a command line."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; raises ``subprocess.TimeoutExpired`` when the child still runs after ``timeout`` s."""
        import select
        import subprocess

        if self.poll() is None and timeout is not None:
            pidfd = os.pidfd_open(self.pid)  # readable when the child ends: a wait with a timeout, no polling loop
            try:
                if not select.select([pidfd], [], [], timeout)[0]:
                    raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            finally:
                os.close(pidfd)
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode
