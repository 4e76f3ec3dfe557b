"""The operating-system layers around student code, beyond :mod:`autograder.sandbox.policy`'s Landlock and rlimits.

A task's kernel and its recheck each get, in the child the zygote forked and before any student line runs:

- ``cgroup``: its own cgroup (v1: pids, memory, cpu) with a process budget (a fork or thread bomb hits ``EAGAIN``
  inside its task), a real-memory limit (the OOM killer picks inside the task) and an equal CPU share (one task
  cannot starve another). Needs root and a writable ``/sys/fs/cgroup``; removed when the task's processes are gone.
- ``scratch``: a private mount namespace where ``/dev/shm``, HOME and TMPDIR are one size-limited tmpfs, and
  the notebook's folder is an overlay whose writes land there too: nothing a student writes reaches the disk, another
  student or the next task, and filling it costs only that notebook. Needs root or unprivileged user namespaces.
- ``network``: a seccomp filter: sockets of the Unix family and TCP only (TCP is Landlock's: the kernel's own ports),
  so no UDP, raw or packet socket, IPv4 or IPv6, no netlink but the read-only route family (ZeroMQ reads the
  interfaces through it), and no io_uring (which would bypass the filter).
- ``pid``: a PID namespace of the task's own, with its own ``/proc``: student code sees and signals only its own
  processes (not the grader's, not another task's), and when the task's first process exits the kernel kills every
  process left in it, daemons included. Needs the scratch layer's mount namespace (for ``/proc``).
- ``user``: student code runs as ``nobody`` (a uid that owns no file), no supplementary groups, no capability: the
  task's own folders and files (the policy's ``own_paths``, decided by the grader) are handed to it first, and
  everything else on the machine is closed to it by its ordinary permissions too, not by Landlock alone (what the
  grader keeps from it, :mod:`autograder.sandbox.closure`). Needs root (``CAP_SETUID``/``CAP_SETGID``, which root in
  a container keeps): with the scratch layer's mount namespace, folders closed above what it must read are covered
  (:func:`reveal`); without one (a container whose seccomp profile refuses ``unshare``), the uid changes all the same
  and what it must read has to be readable where it is (the probe checks Python, its packages and labutils). A grader
  started as an ordinary user runs student code as that user (in a user namespace, under Landlock).
- ``landlock`` and ``rlimits``: :mod:`autograder.sandbox.policy`'s; probed here with the rest.

Why here and not bubblewrap or nsjail: both start a new process with ``exec``, and the zygote's reason to exist is a
fork that already has torch, labutils and the data loaded (seconds per notebook). The same system calls they make
(``unshare``, ``mount``, cgroup files, a seccomp filter) are made here, in the fork.

:func:`probe` says which layers hold on this machine, each entered in a throwaway child and then *observed* there as
student code would see it (its cgroup, its mount namespace and tmpfs, a refused UDP socket, PID 1, its uid and
capabilities, a file Landlock must refuse): a layer whose call succeeded but whose effect is not seen is reported
missing. The grader names only the layers observed, says what each missing one exposes, refuses to grade when what is
left cannot keep the hidden tests and the results out of reach (:func:`autograder.sandbox.closure.unprotected`), and
``--require-isolation`` refuses without all of them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import pwd
import signal
import sys
from pathlib import Path

from autograder.process import fork_child

LAYERS = {  # layer -> what a student could do without it
    "cgroup": "a fork bomb or a memory hog slows or starves the notebooks graded beside it",
    "scratch": "/dev/shm is shared between students, and a disk filler fills the grader's disk",
    "network": "student code can send UDP (IPv4 and IPv6) and open raw or netlink sockets",
    "pid": "student code can list every process on the machine and read their command lines (the grader's among "
           "them), and a daemon it starts outlives the task wherever the cgroup layer is missing",
    "user": "student code runs as the grader's own user: only Landlock keeps it out of that user's files",
    "landlock": "student code may read and write whatever its uid may: only the user layer's plain permissions keep "
                "it from the grader's files, and it can connect to any TCP port and signal its uid's processes",
    "rlimits": "a memory blow-up or a disk filler is stopped only by the cgroup and scratch layers",
}
STUDENT_USER = "nobody"  # owns no file (Debian policy); fallback 65534 where the name is missing
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "looplab-tasks"
PIDS_MAX = 512  # threads count: an ipykernel has ~10, torch and a DataLoader some more
SCRATCH_MB = 1024
# Applied inside the scratch layer's mount namespace: the PID namespace mounts its /proc there (an ordinary user's is
# made in its user namespace). The user layer uses it where it exists (to reveal what it must read), not otherwise.
NEEDS_SCRATCH = ("pid",)
POLICY_LAYERS = ("landlock", "rlimits")  # applied by policy.confine, after enter()

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


class IsolationError(OSError):
    """A layer could not be applied."""


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise IsolationError(code, f"{what}: {os.strerror(code)}")


# --- cgroup ----------------------------------------------------------------------------------------------------------


CONTROLLERS = ("pids", "memory", "cpu")


def _parent(controller: str) -> Path:
    """Where this process's task cgroups go: beneath its own cgroup (a grader run inside a limited cgroup, a
    systemd slice or a container's, keeps those limits around its tasks)."""
    own = "/"
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            own = path
    return CGROUP_ROOT / controller / own.lstrip("/") / CGROUP_PARENT


def _cgroup_dirs(name: str) -> dict[str, Path]:
    return {c: _parent(c) / name for c in CONTROLLERS}


_JOIN_ATTEMPTS = 20


def join_cgroup(name: str, memory_mb: int | None, pids_max: int = PIDS_MAX) -> None:
    """Move this process into a new cgroup ``name`` of each controller, with its limits. Until this process is in
    it, the folder is empty, and another grader's (or our zygote's) :func:`remove_empty_cgroups` may remove it: then
    it is made again."""
    for controller, folder in _cgroup_dirs(name).items():
        for attempt in range(_JOIN_ATTEMPTS):
            try:
                _join_one(controller, folder, memory_mb, pids_max)
                break
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENODEV) or attempt == _JOIN_ATTEMPTS - 1:
                    raise


def _join_one(controller: str, folder: Path, memory_mb: int | None, pids_max: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if controller == "pids":
        (folder / "pids.max").write_text(str(pids_max))
    elif controller == "memory" and memory_mb:
        (folder / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
    (folder / "cgroup.procs").write_text(str(os.getpid()))


def oom_killed(name: str) -> bool:
    """Did the OOM killer take a process of the task cgroup ``name`` (its own memory limit reached)? False when the
    cgroup is gone or has no memory controller here."""
    try:
        text = (_parent("memory") / name / "memory.oom_control").read_text()
    except OSError:
        return False
    return any(line.split()[0] == "oom_kill" and int(line.split()[1]) > 0 for line in text.splitlines())


def remove_empty_cgroups() -> int:
    """Remove this machine's task cgroups whose processes are all gone (rmdir refuses the others); how many."""
    removed = 0
    for controller in CONTROLLERS:
        parent = _parent(controller)
        for folder in parent.glob("*") if parent.is_dir() else []:
            try:
                folder.rmdir()
                removed += 1
            except OSError:
                pass
    return removed


# --- scratch ---------------------------------------------------------------------------------------------------------


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {fstype or 'bind'} {target}")


def private_scratch(binds: list[str], overlay: str | None, size_mb: int = SCRATCH_MB,
                    owner: tuple[int, int] | None = None) -> None:
    """A private mount namespace: /dev/shm a fresh tmpfs of ``size_mb``, every folder of ``binds`` (HOME, TMPDIR) a
    folder of it, ``overlay`` (the notebook's folder) an overlay whose writes land there too; its folders belong to
    ``owner`` (uid, gid) when given. (``/tmp`` itself stays: the task's folders live beneath it, and Landlock lets
    student code write nowhere else in it.)"""
    uid, gid = os.getuid(), os.getgid()
    if os.geteuid() == 0:
        _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    else:  # an ordinary user: a user namespace (root in it, our own uid outside) gives the mount namespace
        _check(_libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER | CLONE_NEWNS)")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing mounted here is seen outside
    _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size_mb}m,mode=1777")
    for i, target in enumerate(binds):
        source = f"/dev/shm/.scratch-{i}"
        _own_folder(source, owner)
        if os.path.isdir(target):
            _mount(source, target, None, _MS_BIND)
    if overlay and os.path.isdir(overlay):
        upper, work = "/dev/shm/.overlay-upper", "/dev/shm/.overlay-work"
        _own_folder(upper, owner)  # the overlay's top folder takes the upper folder's owner
        _own_folder(work, owner)
        _mount("overlay", overlay, "overlay", 0, f"lowerdir={overlay},upperdir={upper},workdir={work}")


def own_pids(mount_proc: bool) -> None:
    """A PID namespace of the task's own. This process forks and stays outside it, only waiting: it is the process
    the zygote knows, and it leaves with the task's exit status. The child, PID 1 of the new namespace, returns to run
    the task; with ``mount_proc`` (in a private mount namespace) its ``/proc`` shows only the namespace. When PID 1
    exits, the kernel kills whatever else is in the namespace."""
    _check(_libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    child = os.fork()
    if child:
        _wait_for_task(child)
    if mount_proc:
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _wait_for_task(child: int) -> None:
    """The process outside the task's PID namespace: wait for the task and leave with its status; never returns.
    What the grader sends the session (an interrupt, a terminate) reaches the task directly, as it is in the same
    process group, so it is ignored here."""
    code = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_IGN)
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        code = code if code >= 0 else 128 - code
    finally:
        os._exit(code)


def reveal(paths: list[str], owner: tuple[int, int]) -> list[str]:
    """In this mount namespace, make ``paths`` reachable for ``owner`` where a folder above them is closed to it (a
    Python installed under ``/root``, mode 0700): that folder is covered with a small tmpfs holding only those paths,
    each bind-mounted back at its own place (same files, same Landlock rules). Returns the folders covered."""
    by_cover: dict[str, list[str]] = {}
    for path in sorted(set(paths)):
        closed = _closed_ancestor(path, owner) if os.path.exists(path) else None
        if closed is not None:
            by_cover.setdefault(closed, []).append(path)
    for cover, inside in by_cover.items():
        kept = [p for p in inside if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in inside)]
        handles = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in kept}  # still reachable: we are root
        try:
            _mount("tmpfs", cover, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
            for path, fd in handles.items():
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(path, mode=0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                    open(path, "a").close()
                _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        finally:
            for fd in handles.values():
                os.close(fd)
    return list(by_cover)


def _closed_ancestor(path: str, owner: tuple[int, int]) -> str | None:
    """The topmost folder above ``path`` that ``owner`` may not pass through, or None."""
    for folder in reversed(Path(path).parents):
        info = os.stat(folder)
        bit = 0o100 if info.st_uid == owner[0] else 0o010 if info.st_gid == owner[1] else 0o001
        if not info.st_mode & bit:
            return str(folder)
    return None


def _own_folder(path: str, owner: tuple[int, int] | None) -> None:
    os.makedirs(path, exist_ok=True)
    if owner is not None:
        os.chown(path, *owner)


# --- user ----------------------------------------------------------------------------------------------------------------


def student_ids() -> tuple[int, int]:
    """(uid, gid) that student code runs as when the grader is root."""
    try:
        entry = pwd.getpwnam(STUDENT_USER)
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def hand_over(paths: list[str], owner: tuple[int, int]) -> None:
    """Give the task's own folders (everything beneath them) and files to ``owner``: what it may write it owns.
    Links are changed themselves, never followed."""
    for path in paths:
        if not os.path.lexists(path):
            continue
        os.chown(path, *owner, follow_symlinks=False)
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                os.chown(os.path.join(folder, name), *owner, follow_symlinks=False)


def become(owner: tuple[int, int]) -> None:
    """Drop to ``owner`` for good: no supplementary groups, real, effective and saved ids all changed (which also
    empties every capability set, and makes setuid back to root fail)."""
    if os.geteuid() != 0:
        raise IsolationError(errno.EPERM, f"the grader runs as uid {os.geteuid()}, not root: student code runs as "
                                          "that user")
    os.setgroups([])
    os.setresgid(owner[1], owner[1], owner[1])
    os.setresuid(owner[0], owner[0], owner[0])


# --- network ---------------------------------------------------------------------------------------------------------


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


_SCMP_ACT_ALLOW = 0x7FFF0000
_SCMP_CMP_EQ, _SCMP_CMP_GT, _SCMP_CMP_MASKED_EQ = 4, 6, 7
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK, _AF_MAX = 1, 2, 10, 16, 64
_NETLINK_ROUTE = 0  # read-only without CAP_NET_ADMIN; ZeroMQ lists the interfaces through it to bind its ports
_SOCK_STREAM, _SOCK_TYPE_MASK = 1, 0xF
_OTHER_TYPES = (2, 3, 4, 5, 10)  # dgram, raw, rdm, seqpacket, packet


def _seccomp():
    name = ctypes.util.find_library("seccomp")
    if not name:
        raise IsolationError(errno.ENOENT, "libseccomp is not installed (Debian: libseccomp2)")
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def no_network() -> None:
    """Refuse (EACCES) every socket but AF_UNIX, TCP over IPv4/IPv6 and a route-netlink socket (reading the
    interfaces; changing them needs a capability student code does not have), and io_uring (EPERM)."""
    lib = _seccomp()
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise IsolationError(errno.ENOMEM, "seccomp_init failed")
    refuse, refuse_io_uring = 0x00050000 | errno.EACCES, 0x00050000 | errno.EPERM

    def rule(action: int, syscall: str, *cmps: tuple) -> None:
        number = lib.seccomp_syscall_resolve_name(syscall.encode())
        array = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(*c) for c in cmps])
        _check(lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array), f"seccomp rule for {syscall}")

    try:
        for family in range(_AF_MAX + 1):
            if family not in (_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK):
                rule(refuse, "socket", (0, _SCMP_CMP_EQ, family, 0))
        rule(refuse, "socket", (0, _SCMP_CMP_GT, _AF_MAX, 0))
        rule(refuse, "socket", (0, _SCMP_CMP_EQ, _AF_NETLINK, 0), (2, _SCMP_CMP_GT, _NETLINK_ROUTE, 0))
        for family in (_AF_INET, _AF_INET6):
            for kind in _OTHER_TYPES:
                rule(refuse, "socket", (0, _SCMP_CMP_EQ, family, 0), (1, _SCMP_CMP_MASKED_EQ, _SOCK_TYPE_MASK, kind))
        for call in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
            rule(refuse_io_uring, call)
        _check(lib.seccomp_load(ctx), "seccomp_load")
    finally:
        lib.seccomp_release(ctx)


# --- all of it ---------------------------------------------------------------------------------------------------------


def _with_its_scratch(layer: str, layers: list[str]) -> bool:
    """Whether ``layer`` is asked for together with the scratch layer it needs (:data:`NEEDS_SCRATCH`)."""
    return layer in layers and (layer not in NEEDS_SCRATCH or "scratch" in layers)


def enter(layers: list[str], name: str, memory_mb: int | None, binds: list[str], overlay: str | None,
          scratch_mb: int = SCRATCH_MB, pids_max: int = PIDS_MAX, own_paths: list[str] = (),
          read_paths: list[str] = (), passable_below: str | None = None) -> None:
    """Apply ``layers`` (those :func:`probe` found possible) to this process and everything it will start. For the
    ``user`` layer: ``own_paths``, the task's own folders and files, are handed to the student's uid, and
    ``read_paths`` (what the sandbox policy lets it read) made reachable for it: by :func:`reveal` in the scratch
    layer's mount namespace; without one, the folders between ``passable_below`` (the run's work folder) and its own
    paths are opened for passing through (:func:`open_ancestors`). The uid changes last: everything before it needs
    root. (It also clears the parent-death signal: set it again.)"""
    owner = student_ids() if "user" in layers else None
    own = [*own_paths, *binds, *([overlay] if overlay else [])]
    if "cgroup" in layers:
        join_cgroup(name, memory_mb, pids_max)
    if owner is not None:
        hand_over(own, owner)
        if "scratch" not in layers and passable_below:
            open_ancestors(own, passable_below)
    if "scratch" in layers:
        private_scratch(binds, overlay, scratch_mb, owner)
        if owner is not None:
            reveal([*read_paths, *own], owner)
    if _with_its_scratch("pid", layers):
        own_pids(mount_proc=True)
    if "network" in layers:
        no_network()
    if owner is not None:
        become(owner)


def open_ancestors(paths: list[str], top: str) -> None:
    """Let every user pass through (search, never list) the folders strictly between ``top`` and each of ``paths``:
    without a mount namespace there is no other way for the student's uid to reach its own folders, and what the
    grader keeps in those folders is closed by its own mode (the grader's umask, :mod:`autograder.sandbox.closure`)."""
    top_path = Path(top)
    for path in paths:
        for folder in Path(path).parents:
            if folder == top_path or not folder.is_relative_to(top_path):
                break
            mode = os.stat(folder).st_mode
            if not mode & 0o001:
                os.chmod(folder, (mode & 0o7777) | 0o001)


# --- verified, as student code sees it -----------------------------------------------------------------------------


def reachable(owner: tuple[int, int]) -> str:
    """Run as ``owner``: "" when the Python this process runs, its standard library, its packages and labutils can be
    read here; else the first that cannot and the closed folder above it."""
    import sysconfig

    from autograder.layout import REPO_ROOT

    needed = [os.path.realpath(sys.executable), os.path.dirname(os.__file__), sysconfig.get_paths()["purelib"],
              str(REPO_ROOT / "labutils" / "__init__.py")]
    for path in needed:
        if not os.access(path, os.R_OK):
            return (f"{path} cannot be read by uid {owner[0]}"
                    + ("" if not os.path.exists(path) else " (a folder above it is closed to other users): install "
                       "Python, the venv and the lab where every user may read them, or allow the mount namespace"))
    return ""


def _observe(layer: str, layers: list[str], name: str, outside_ns: int, sentinel: str) -> str:
    """In the probe's child, once ``layers`` were entered for ``layer``: "" when its effect is seen from inside, else
    what was seen."""
    if layer == "cgroup":
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        joined = [c for c in CONTROLLERS if any(c in l.split(":")[1].split(",") and l.endswith(f"/{CGROUP_PARENT}/{name}")
                                                for l in lines)]
        return "" if len(joined) == len(CONTROLLERS) else f"/proc/self/cgroup shows it in {joined} of {CONTROLLERS}"
    if layer == "scratch":
        shm = os.statvfs("/dev/shm")
        if os.stat("/proc/self/ns/mnt").st_ino == outside_ns or shm.f_blocks * shm.f_frsize > 8 << 20:
            return "its mount namespace or /dev/shm is the grader's"
        return ""
    if layer == "network":
        import socket

        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
            return "a UDP socket was opened"
        except PermissionError:
            return ""
    if layer == "pid":
        return "" if os.getpid() == 1 else f"it is PID {os.getpid()}, not 1 of its own namespace"
    if layer == "user":
        uid, gid = student_ids()
        cap = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff"))
        if os.getresuid() != (uid,) * 3 or os.getresgid() != (gid,) * 3 or os.getgroups() or int(cap, 16) or uid == 0:
            return f"it runs as uid {os.getresuid()}, gid {os.getresgid()}, groups {os.getgroups()}, capabilities {cap}"
        return "" if "scratch" in layers else reachable((uid, gid))  # with it, kernels get what they read revealed
    if layer == "landlock":
        from autograder.sandbox import policy

        if not policy.apply_landlock(policy.Policy(read_dirs=policy.system_read_dirs())):
            return "this kernel, or the container's seccomp profile, refuses Landlock's system calls"
        for flags in (os.O_RDONLY, os.O_WRONLY | os.O_APPEND):
            try:
                os.close(os.open(sentinel, flags))
                return f"a file outside its rules ({sentinel}) could be opened"
            except PermissionError:
                pass
        return ""
    if layer == "rlimits":
        import resource

        from autograder.sandbox import policy

        policy.apply_limits(policy.Policy(memory_mb=256, cpu_seconds=60))
        return "" if resource.getrlimit(resource.RLIMIT_AS) == (256 << 20,) * 2 else "the limits did not hold"
    raise ValueError(f"no such layer: {layer}")


def _layers_for(layer: str, found: dict[str, str]) -> list[str]:
    """What the probe of ``layer`` enters: a layer the scratch layer holds up with it; the user layer with it where
    the scratch layer holds (as kernels get it), alone where it does not."""
    if layer in NEEDS_SCRATCH or (layer == "user" and not found.get("scratch")):
        return ["scratch", layer]
    return [] if layer in POLICY_LAYERS else [layer]


def probe() -> dict[str, str]:
    """layer -> "" when it holds on this machine, else why not: each entered in a throwaway child and observed there
    (:func:`_observe`), in :data:`LAYERS`' order (the user layer's way depends on the scratch layer's finding)."""
    import socket  # noqa: F401  imported here, once: each child would import them again (~0.4 s of CPU each)
    import tempfile

    from autograder.sandbox import policy  # noqa: F401

    found = {}
    outside_ns = os.stat("/proc/self/ns/mnt").st_ino
    # every user may read it: Landlock alone refuses it. In the zygote's own folder (its cwd, in the run's scratch
    # folder), not TMPDIR: a run killed during the probe leaves it where the next run removes a dead run's files
    handle, sentinel = tempfile.mkstemp(prefix="looplab-probe-", dir=os.getcwd())
    os.close(handle)
    os.chmod(sentinel, 0o644)
    try:
        for layer in LAYERS:
            found[layer] = _probe_one(layer, _layers_for(layer, found), outside_ns, sentinel)
    finally:
        os.unlink(sentinel)
    if found["scratch"] and not found["pid"]:
        found["pid"] = "it needs the scratch layer's mount namespace"
    remove_empty_cgroups()
    return found


def _probe_one(layer: str, layers: list[str], outside_ns: int, sentinel: str) -> str:
    read, write = os.pipe()

    def attempt() -> None:  # runs at once, in the child
        os.close(read)
        try:
            name = f"probe-{os.getpid()}"
            enter(layers, name, 64, [], None, scratch_mb=1)
            reason = _observe(layer, layers, name, outside_ns, sentinel)
        except BaseException as exc:
            reason = str(exc) or type(exc).__name__
        os.write(write, reason.encode()[:500])

    pid = fork_child(attempt)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        reason = f.read().decode(errors="replace")
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass  # reaped already (the zygote ignores SIGCHLD)
    return reason


def missing(found: dict[str, str], others: dict[str, str] | None = None) -> list[str]:
    """One line per layer :func:`probe` (or a check of ``others``: layer -> what it leaves open) found impossible:
    why, and what that leaves open."""
    exposes = {**LAYERS, **(others or {})}
    return [f"{layer} not applied ({why}): {exposes[layer]}" for layer, why in found.items() if why]
