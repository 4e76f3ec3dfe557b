"""A fork server for student code: torch, labutils and ipykernel imported once, then forked per notebook.

Why: a fresh kernel spends ~5 s importing torch and torchvision and decoding FashionMNIST before the first student
line runs; nine notebooks per student make that most of the grading time. The zygote does it once, before any student
code exists (so every fork starts from pristine, unpatched modules), and each kernel or hidden-test recheck is a
``fork()`` of it that confines itself (:mod:`autograder.sandbox`) and then runs the student's code.

Protocol: one JSON request per line on stdin, one JSON reply per line on the original stdout. Requests:
``{"op": "kernel", "argv": [...], "cwd", "env", "policy", "log"}`` -> ``{"pid"}``: an ipykernel in its own session;
``{"op": "recheck", "spec", "cwd", "env", "policy", "log", "timeout"}`` -> ``{"status", "lines"}``;
``{"op": "killall"}`` -> ``{"killed"}``: every process below the zygote (it is a subreaper, so escaped daemons too).
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import signal
import sys
import time

from . import sandbox

_PR_SET_CHILD_SUBREAPER = 36
RESULT_FD = 3  # where a recheck child writes its results


def student_modules() -> list[str]:
    """The labutils modules a student may import (the handout's), as dotted names."""
    from .handout import student_labutils_files

    return ["labutils." + p.stem if p.stem != "__init__" else "labutils" for p in student_labutils_files()]


PRELOAD = [
    "numpy",
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.optim",
    "torch.optim.lr_scheduler",
    "torch.amp",
    "torch.utils.data",
    "torchvision",
    "torchvision.datasets",
    "matplotlib",
    "tqdm",
    "tqdm.auto",
    "IPython",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "autograder.hidden",
    "autograder.recheck",
]


def preload() -> list[str]:
    """Import everything a notebook is likely to, and decode the data, without starting any thread pool."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # GNU OpenMP is not fork-safe once its pool exists: never start it here
    loaded = []
    for name in PRELOAD + student_modules():
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as exc:  # a broken optional import must not stop grading; the kernel will report it
            print(f"zygote: could not preload {name}: {exc!r}", file=sys.stderr)
    try:
        from labutils import data

        data.load_raw(True)
        data.load_raw(False)
    except Exception as exc:
        print(f"zygote: could not preload FashionMNIST: {exc!r}", file=sys.stderr)
    torch.set_num_threads(threads)
    return loaded


def _enter_child(req: dict, keep_fd: int | None = None) -> None:
    """In a freshly forked child: own session, clean fds, the student's cwd and env, then the sandbox."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log_fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    if keep_fd is not None:
        os.dup2(keep_fd, RESULT_FD)
    os.closerange(RESULT_FD + 1 if keep_fd is not None else 3, 65536)  # above all, the zygote's own channels
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    os.umask(0o022)
    import random

    import numpy as np

    import torch

    torch.set_num_threads(int(req.get("threads") or 1))
    random.seed()  # a fresh process would have fresh Python and NumPy seeds; torch's default seed is fixed anyway
    np.random.seed()
    sandbox.confine(sandbox.Policy(**req["policy"]))


def _fork_kernel(req: dict) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _enter_child(req)
        sys.argv = ["ipykernel_launcher", *req["argv"]]
        from ipykernel.kernelapp import IPKernelApp

        app = IPKernelApp.instance()
        app.initialize(req["argv"])
        app.start()
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _run_recheck(req: dict) -> dict:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            _enter_child(req, keep_fd=wfd)
            from .recheck import run

            run(req["spec"], RESULT_FD)
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(wfd)
    deadline = time.monotonic() + req["timeout"]
    chunks, status = [], "timeout"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([rfd], [], [], left)
        if not ready:
            continue
        data = os.read(rfd, 65536)
        if not data:
            status = "exited"
            break
        chunks.append(data)
    os.close(rfd)
    _kill_session(pid)
    return {"status": status, "pid": pid, "lines": b"".join(chunks).decode("utf-8", "replace").splitlines()}


def _kill_session(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed by accident goes to the log, never into the reply channel
    sys.stdout = sys.stderr
    requests = os.fdopen(os.dup(0), "r")
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of student code land here, not in init
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically: no zombies to confuse polls
    started = time.monotonic()
    loaded = preload()
    replies.write(json.dumps({"ready": True, "preloaded": loaded, "seconds": time.monotonic() - started}) + "\n")
    for line in requests:
        req = json.loads(line)
        op = req.get("op")
        try:
            if op == "kernel":
                reply = {"pid": _fork_kernel(req)}
            elif op == "recheck":
                reply = _run_recheck(req)
            elif op == "killall":
                reply = {"killed": sandbox.kill_descendants(os.getpid())}
            elif op == "exit":
                sandbox.kill_descendants(os.getpid())
                break
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as exc:
            reply = {"error": repr(exc)}
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
