"""A fork server for student code: torch, labutils and ipykernel imported once, then forked per notebook.

Why: a fresh kernel spends ~5 s importing torch and torchvision and decoding FashionMNIST before the first student
line runs; nine notebooks per student make that most of the grading time. The zygote does it once, before any student
code exists (so every fork starts from pristine, unpatched modules), and each kernel or hidden-test recheck is a
``fork()`` of it that confines itself (:mod:`autograder.sandbox.policy`) and then runs the student's code.

Protocol (:mod:`autograder.channel`): one numbered request per line, one reply per line with the same number (on
stdin / the original stdout, or on the socket the grader handed over):
:class:`~autograder.channel.KernelRequest` -> ``KernelStarted`` (an ipykernel in its own session),
:class:`~autograder.channel.RecheckRequest` -> ``RecheckReply``, ``KillAll`` -> ``Killed`` (every process below the
zygote: it is a subreaper, so escaped daemons too), ``Exit``; anything that fails -> ``RequestFailed``. The client
side (starting it, the environments it gets) is :mod:`autograder.sandbox.client`.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
import select
import signal
import sys
import time

from autograder import channel
from autograder.process import fork_child
from autograder.sandbox import isolation
from autograder.sandbox import policy
from autograder.channel import (CheckLine, Exit, KernelRequest, KernelStarted, KillAll, Killed, RecheckReply,
                                RecheckRequest, RequestFailed, ZygoteReady)

_PR_SET_CHILD_SUBREAPER = 36
RESULT_FD = 3  # where a recheck child writes its results
LAYERS: list[str] = []  # the isolation layers this machine allows (probed at start), applied to every child


def student_modules() -> list[str]:
    """The labutils modules a student may import (the handout's), as dotted names."""
    from autograder.course.handout import student_module_names

    return student_module_names()


# torchvision is not preloaded: the lab's data is read by labutils.data without it, and no notebook imports it (a
# grading run spent 1-1.5 s of CPU on it); a notebook that does pays that in its own kernel.
PRELOAD = [
    "numpy",
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.optim",
    "torch.optim.lr_scheduler",
    "torch.amp",
    "torch.utils.data",
    "matplotlib",
    "tqdm",
    "tqdm.auto",
    "IPython",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    # what IPKernelApp imports as it starts: each kernel paid ~0.1 s of CPU for ipykernel.debugger (debugpy) alone
    "ipykernel.debugger",
    "IPython.core.debugger",
    "pdb",
    "psutil",
    "sqlite3",
    "stack_data",
    "tornado.platform.asyncio",
    "autograder.hidden",
    "autograder.hidden.recheck",
]


def _import_or_forget(name: str) -> bool:
    """Import ``name``; when that fails, forget every module the failed import added, so that no kernel forked from
    here inherits a half-initialised one. (A failed import leaves its submodules in sys.modules holding the package
    it aborted: a kernel of the resume-on-Dask test failed with "partially initialized module 'torch._inductor' has
    no attribute 'custom_graph_pass'".) A broken optional import must not stop grading; the kernel reports it."""
    before = set(sys.modules)
    try:
        importlib.import_module(name)
        return True
    except Exception as exc:
        for added in set(sys.modules) - before:
            del sys.modules[added]
        print(f"zygote: could not preload {name}: {exc!r}", file=sys.stderr)
        return False


def preload() -> list[str]:
    """Import everything a notebook is likely to, and decode the data, without starting any thread pool."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # GNU OpenMP is not fork-safe once its pool exists: never start it here
    loaded = []
    for name in PRELOAD + student_modules():
        if _import_or_forget(name) or _import_or_forget(name):  # once more: a failure may be passing (a timeout)
            loaded.append(name)
    try:
        from labutils import data

        data.load_raw(True)
        data.load_raw(False)
    except Exception as exc:
        print(f"zygote: could not preload FashionMNIST: {exc!r}", file=sys.stderr)
    _prewarm_optimizers()
    torch.set_num_threads(threads)
    leaked = sorted(name for name in sys.modules if is_blocked(name))
    if leaked:
        print(f"zygote: WARNING: student-facing modules imported the reference implementation {leaked}; "
              "it is removed from kernels, which may break them", file=sys.stderr)
    return loaded


def _prewarm_optimizers() -> None:
    """torch wraps ``step`` of an optimizer class the first time one is built; do it now, so that a later change to
    a torch class during a hidden test is always the student's doing (see autograder.hidden.recheck)."""
    import torch

    params = [torch.zeros(1, 1, requires_grad=True)]  # a matrix: Muon takes nothing else
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer:
            try:
                cls(params)
            except Exception as exc:  # a kernel then pays for it, and a recheck may see torch change: say so
                print(f"zygote: could not prewarm {name}: {exc!r}", file=sys.stderr)


def _freeze_heap() -> None:
    """Move every object the imports made out of the garbage collector's sight. A fork's full collection walks (and
    so copies, page by page) all of them: 0.27 s of CPU and 24,000 page faults per kernel or recheck, measured with
    torch loaded. Frozen, they are shared with every fork until one of them writes to them; the zygote itself makes
    no garbage after this."""
    gc.collect()
    gc.freeze()


def is_blocked(name: str) -> bool:
    """Is ``name`` the reference package or a module in it?"""
    from autograder.layout import REFERENCE_PACKAGE

    return name == REFERENCE_PACKAGE or name.startswith(REFERENCE_PACKAGE + ".")


class ReferenceBlocker:
    """First on sys.meta_path in a student's process: the reference loop is not importable (Landlock also makes its
    files unreadable; this turns that into a clean ModuleNotFoundError)."""

    def find_spec(self, name, path=None, target=None):
        if is_blocked(name):
            raise ModuleNotFoundError(f"No module named {name!r} (the lab's reference implementation is not part of "
                                      "the handout)", name=name)
        return None


def _enter_child(req: KernelRequest | RecheckRequest, server: int, keep_fd: int | None = None) -> None:
    """In a freshly forked child of ``server``: own session, clean fds, the student's cwd and env, then the sandbox."""
    os.setsid()
    policy.die_with_parent(server)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log_fd = os.open(req.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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
    os.chdir(req.cwd)
    os.environ.clear()
    os.environ.update(req.env)
    os.umask(0o022)
    import random

    import numpy as np

    import torch

    torch.set_num_threads(int(req.threads or 1))
    random.seed()  # a fresh process would have fresh Python and NumPy seeds; torch's default seed is fixed anyway
    np.random.seed()
    import importlib
    import tempfile

    tempfile.tempdir = None  # the zygote cached /tmp; this process's TMPDIR is its own folder
    for name in [name for name in sys.modules if is_blocked(name)]:
        del sys.modules[name]
    sys.meta_path.insert(0, ReferenceBlocker())
    importlib.invalidate_caches()  # forget the zygote's directory listings: what is not preloaded must be found anew
    server_fd = os.pidfd_open(server)  # still names it inside the task's PID namespace
    # a container's OOM killer takes student code first, never the zygote or the grader (raising it needs no privilege)
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    isolation.enter(LAYERS, f"task-{os.getpid()}", req.policy.task_memory_mb or req.policy.memory_mb,
                    [req.env[k] for k in ("HOME", "TMPDIR") if req.env.get(k)], req.cwd,
                    scratch_mb=req.policy.scratch_mb, pids_max=req.policy.pids_max, own_paths=req.policy.own_paths,
                    read_paths=[*req.policy.read_dirs, *req.policy.read_files, *req.policy.list_dirs,
                                *req.policy.write_files, *req.policy.write_dirs],
                    passable_below=req.policy.passable_below)
    # Again, as the change of uid cleared it. The parent may now be outside the task's PID namespace (the process
    # that waits for the task and dies with the server): whether it is gone, the server's pidfd says.
    policy.die_with_parent_watching(server_fd)
    os.close(server_fd)
    os.chdir(req.cwd)  # again: the notebook's folder is now the overlay
    policy.confine(req.policy)


def _fork_kernel(req: KernelRequest) -> int:
    server = os.getpid()

    def kernel() -> None:
        _enter_child(req, server)
        sys.argv = ["ipykernel_launcher", *req.argv]
        from ipykernel.kernelapp import IPKernelApp

        app = IPKernelApp.instance()
        app.initialize(req.argv)
        app.start()

    return fork_child(kernel)


class _ClientGone(Exception):
    """The process that asked for the work died while it ran: nobody is left to answer, and nothing is kept."""


def _run_recheck(req: RecheckRequest, client_fd: int) -> RecheckReply:
    """Run the recheck in a confined fork and read its verdict lines; ``client_fd`` is the channel the request came
    on: if the client dies meanwhile (a Dask worker killed mid-task), the recheck is stopped at once."""
    rfd, wfd = os.pipe()
    nonce = os.urandom(16).hex()  # lives only in memory: only the recheck code's own lines carry it
    server = os.getpid()

    def recheck() -> None:
        os.close(rfd)
        _enter_child(req, server, keep_fd=wfd)
        from autograder.hidden.recheck import run

        run(req.spec, RESULT_FD, nonce)

    pid = fork_child(recheck)
    os.close(wfd)
    chunks, status = _read_until_exit(rfd, pid, time.monotonic() + req.timeout, client_fd)
    os.close(rfd)
    _kill_session(pid)
    if status == "client gone":
        raise _ClientGone
    oom_killed = isolation.oom_killed(f"task-{pid}")
    lines = []
    for line in b"".join(chunks).splitlines():
        try:
            item = channel.decode(line, CheckLine)
        except channel.ChannelError:
            continue  # not the recheck's own line: the notebook printed it
        if item.nonce == nonce:
            item.nonce = ""
            lines.append(item)
    return RecheckReply(status=status, pid=pid, lines=lines, oom_killed=oom_killed)


def _read_until_exit(rfd: int, pid: int, deadline: float, client_fd: int) -> tuple[list[bytes], str]:
    """What the recheck wrote, until it exits (its pidfd says so: a process the notebook forked may hold the pipe
    open for minutes, and must not keep the grader waiting), the deadline, or the client's hang-up; and "exited",
    "timeout" or "client gone"."""
    try:
        exited = os.pidfd_open(pid)
    except ProcessLookupError:  # gone already (and reaped: the zygote ignores SIGCHLD)
        return _left_in_pipe(rfd), "exited"
    poller = select.poll()
    poller.register(rfd, select.POLLIN)
    poller.register(exited, select.POLLIN)
    poller.register(client_fd, 0)  # its hang-up only (POLLHUP is always reported): a request may wait unread
    chunks = []
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return chunks, "timeout"
            ready = dict(poller.poll(left * 1000))
            if exited in ready:
                return chunks + _left_in_pipe(rfd), "exited"
            if ready.get(client_fd, 0) & (select.POLLHUP | select.POLLERR):
                return chunks, "client gone"
            if rfd in ready:
                data = os.read(rfd, 65536)
                if not data:
                    return chunks, "exited"
                chunks.append(data)
    finally:
        os.close(exited)


def _left_in_pipe(rfd: int) -> list[bytes]:
    """What an exited writer left in the pipe (a pipe holds 64 KB), not what its orphans may still send."""
    os.set_blocking(rfd, False)
    chunks = []
    for _ in range(16):
        try:
            data = os.read(rfd, 65536)
        except BlockingIOError:
            break
        if not data:
            break
        chunks.append(data)
    return chunks


def _kill_session(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass


def serve(requests, replies) -> None:
    """Answer requests (binary streams) until the channel closes or says exit."""
    for line in requests:
        tag = None
        try:
            tag, req = channel.decode_tagged(line)
            if isinstance(req, Exit):
                break
            if isinstance(req, KernelRequest):
                reply = KernelStarted(pid=_fork_kernel(req))
            elif isinstance(req, RecheckRequest):
                reply = _run_recheck(req, requests.fileno())
            elif isinstance(req, KillAll):
                reply = Killed(killed=policy.kill_descendants(os.getpid()))
                isolation.remove_empty_cgroups()
            else:
                reply = RequestFailed(error=f"the zygote does not handle {type(req).__name__}")
        except _ClientGone:
            break
        except Exception as exc:
            reply = RequestFailed(error=repr(exc))
        channel.send(replies, reply, id=tag)
    policy.kill_descendants(os.getpid())
    isolation.remove_empty_cgroups()


def _vm_size_mb() -> int:
    """This process's address space after the imports: every kernel starts at least this big."""
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) // 1024
    return 0


def _data_locations() -> dict:
    """The folders a kernel may read the data from (of the data cache, the decompressed FashionMNIST alone: the
    cache is the user's, which may hold other things) and the data cache a kernel is told about."""
    from labutils import data_files

    dirs = [str(data_files.DEBIAN_DIR), str(data_files.decompressed_folder(data_files.cache_dir()).parent)]
    if os.environ.get("LAB_DATA_DIR"):
        dirs.append(os.environ["LAB_DATA_DIR"])
    return {"data_dirs": dirs, "cache_dir": str(data_files.cache_dir())}


def _serve_connections(control_fd: int) -> None:
    """The shared zygote's loop: the grader sends, over the control socket it alone holds, one end of a new
    socketpair per worker; each gets its own forked server. When the control socket closes, everything below goes."""
    import socket

    control = socket.socket(fileno=control_fd)
    zygote = os.getpid()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 16, 8)
        except OSError:
            break
        if not data and not fds:
            break  # the grader closed its end (or died)
        for fd in fds:
            def server() -> None:  # runs at once, in the child: this turn of the loop's fd
                control.close()
                policy.die_with_parent(zygote)
                ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
                conn = socket.socket(fileno=fd)
                serve(conn.makefile("rb"), conn.makefile("wb"))

            # quiet: a worker killed mid-request makes the reply's write fail, which is no error of the zygote's
            fork_child(server, quiet=True)
            os.close(fd)
    policy.kill_descendants(os.getpid())


def main(argv: list[str] | None = None) -> None:
    """``main()``: serve stdin/stdout. ``main(["--control", FD, "--parent", PID])``: the run's shared zygote, given
    connections over the inherited socket FD (:class:`autograder.sandbox.client.SharedZygote`), so -j workers share
    one warm-up; it dies with the grader, PID."""
    argv = sys.argv[1:] if argv is None else argv
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by accident goes to the log, never into the reply channel
    sys.stdout = sys.stderr
    requests = os.fdopen(os.dup(0), "rb")
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped automatically: no zombies to confuse polls
    if "--control" in argv:
        policy.die_with_parent(int(argv[argv.index("--parent") + 1]))
    started = time.monotonic()
    found = isolation.probe()  # before the imports: a probe is a fork of a small process
    LAYERS[:] = [layer for layer, why_not in found.items() if not why_not]
    loaded = preload()
    _freeze_heap()
    ready = ZygoteReady(preloaded=loaded, seconds=round(time.monotonic() - started, 2), vm_mb=_vm_size_mb(),
                        isolation=found, **_data_locations())
    ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of student code land here
    channel.send(replies, ready)
    if "--control" in argv:
        _serve_connections(int(argv[argv.index("--control") + 1]))
    else:
        serve(requests, replies)


if __name__ == "__main__":
    main()
