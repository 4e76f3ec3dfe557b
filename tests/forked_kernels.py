"""Notebook kernels forked from one process that has imported torch already, for tests/test_notebooks.py.

Why: a fresh kernel spends ~3 CPU s importing torch and torch._dynamo (which torch imports the first time an optimizer
is built) before the notebook's own work starts; twenty notebook executions made that a third of the module's CPU.
Here a server imports them once and forks a kernel per notebook. Only imports that behave the same outside a kernel
are preloaded: matplotlib picks its inline backend and tqdm.auto its notebook bar by looking at the kernel, so
those (and labutils, which imports both) are imported by the notebook itself, as a student's fresh kernel does. A
warning that the preload printed would never reach a notebook's output (tests/test_notebooks.py reads them): the
server refuses to start instead.

Protocol: the server reads one JSON request per line on stdin ({"argv", "env", "cwd"}) and answers on stdout with
the forked kernel's pid; its first line says it is ready (or why not). It exits when stdin closes, and its kernels
die with it.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
import warnings

from autograder.process import fork_child

PRELOAD = ("numpy", "torch", "torch._dynamo", "ipykernel.kernelapp")
# imported by a kernel as a student's would: preloaded, they would behave as outside a notebook
KERNEL_AWARE = ("matplotlib", "tqdm.auto", "tqdm.autonotebook", "labutils")
_PR_SET_PDEATHSIG = 1


# --- the server (this file, run as a script) -------------------------------------------------------------------------


def _preload() -> str | None:
    """Import PRELOAD; what went wrong (a warning, a kernel-aware module imported too), or None."""
    with warnings.catch_warnings(record=True) as caught:  # the filters a fresh kernel has: what it would print
        for name in PRELOAD:
            importlib.import_module(name)
    aware = sorted(name for name in sys.modules if name.split(".")[0] in KERNEL_AWARE or name in KERNEL_AWARE)
    if caught or aware:
        return (f"preloading {', '.join(PRELOAD)} printed warnings {[str(w.message) for w in caught]} or imported "
                f"modules that must see the kernel {aware}")
    return None


def _kernel(request: dict, replies: int) -> None:
    """In the forked child: what ``python -m ipykernel_launcher`` would have (session, cwd, env, sys.path, fresh
    seeds), then the kernel; it dies with the server."""
    os.setsid()  # its own process group: jupyter_client signals the group
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.close(replies)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    del sys.path[0]  # this script's folder; ipykernel_launcher likewise removes the one -m put there
    sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *request["argv"]]
    import random

    import numpy as np

    random.seed()  # a fresh process has fresh Python and NumPy seeds (torch's default seed is fixed anyway)
    np.random.seed()
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(request["argv"])
    # what a kernel does as it exits (the notebooks' scratch folders are removed here); fork_child then skips the
    # interpreter's teardown, ~0.5 CPU s with torch loaded, in which nothing a test reads happens
    atexit._run_exitfuncs()


def serve() -> None:
    replies = os.dup(1)
    os.dup2(2, 1)  # whatever a preload or kernel prints goes to stderr, never into the replies
    problem = _preload()
    os.write(replies, (json.dumps({"ready": problem is None, "problem": problem}) + "\n").encode())
    if problem:
        return
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kernels are reaped as they exit
    for line in sys.stdin:
        pid = fork_child(lambda: _kernel(json.loads(line), replies))
        os.write(replies, (json.dumps({"pid": pid}) + "\n").encode())


# --- the test side -----------------------------------------------------------------------------------------------------


def _launched(env: dict) -> dict:
    """A kernel's environment as jupyter_client's own launch gives it: ``JPY_PARENT_PID`` added."""
    return {**env, "JPY_PARENT_PID": str(os.getpid())}


class ForkServer:
    """The server process, started with the kernels' environment (``env``, what a notebook run adds aside), so that
    what a preloaded module reads from it as it is imported (ipykernel: JPY_PARENT_PID) is what a kernel would."""

    def __init__(self, env: dict):
        self.process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=_launched(env), text=True, bufsize=1)
        ready = json.loads(self.process.stdout.readline() or '{"problem": "the server died while preloading"}')
        if not ready.get("ready"):
            self.close()
            raise RuntimeError(f"forked kernels: {ready['problem']}")
        self._lock = threading.Lock()  # notebooks execute two at a time

    def fork(self, argv: list[str], env: dict, cwd: str) -> int:
        with self._lock:
            self.process.stdin.write(json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n")
            reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError(f"forked kernels: the server exited with {self.process.wait()}")
        return json.loads(reply)["pid"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def kernel_manager_class(server: ForkServer):
    """A jupyter_client kernel manager (for nbclient's ``kernel_manager_class``) whose kernels ``server`` forks."""
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_client.provisioning.local_provisioner import LocalProvisioner

    from autograder.sandbox.kernels import ForkedKernelProcess

    class ForkedProvisioner(LocalProvisioner):
        async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
            cwd = str(kwargs.get("cwd") or os.getcwd())
            pid = await asyncio.to_thread(server.fork, cmd[cmd.index("-f"):], _launched(kwargs["env"]), cwd)
            self.process = ForkedKernelProcess(pid)
            self.pid = self.pgid = pid
            self.cwd = cwd
            return self.connection_info

    class ForkedKernelManager(AsyncKernelManager):
        async def _async_pre_start_kernel(self, **kw):
            self.kernel_id = self.kernel_id or str(uuid.uuid4())
            if self.provisioner is None:
                self.provisioner = ForkedProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec,
                                                     parent=self)
            return await super()._async_pre_start_kernel(**kw)

    return ForkedKernelManager


if __name__ == "__main__":
    serve()
