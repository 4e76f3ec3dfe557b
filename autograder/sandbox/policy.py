"""Confine a process that runs student code: memory and CPU limits, a file-system allow-list, no network.

Applied in the forked child right before it runs anything a student wrote (the kernel, a hidden-test recheck), and
inherited by everything it starts:

- ``RLIMIT_AS`` caps the address space (torch alone maps ~4 GB of virtual memory, so the limit is in the GBs), so a
  memory blow-up is a ``MemoryError``/``RuntimeError`` in that cell instead of the machine swapping or the OOM killer
  taking the grader with it; ``RLIMIT_CPU`` backs up the wall-clock timeouts; ``RLIMIT_FSIZE`` stops a disk filler.
- Landlock (Linux >= 5.13, no root needed): the process may write only beneath its own work folder (cwd, HOME, TMPDIR)
  and read only the system, the Python installation, the student-facing labutils modules and the data; it cannot read
  the solutions, the reference loop, the gradebook or other students' work, cannot open TCP connections, and cannot
  signal processes outside the sandbox.
- When running as root, every capability is dropped, so uid 0 grants nothing beyond ordinary file permissions.

Where Landlock is missing (old kernel, seccomp), the sandbox still applies the limits and the grader detects writes to
protected trees afterwards (see :func:`autograder.grade.fingerprint`).
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import sys
from pathlib import Path

from ..channel import Policy  # the rules travel as a message; applying them is this module's job

# --- Landlock ABI (linux/landlock.h) ---------------------------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same numbers on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_SET_SECUREBITS = 38, 24, 28

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_READ = FS_EXECUTE | FS_READ_FILE  # rights that make sense on a single file


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    abi = _libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(abi), 0)


def _all_fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def system_read_dirs() -> list[str]:
    """Folders any Python process needs to read: the OS, the interpreter, this virtualenv's site-packages."""
    dirs = ["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/opt", "/run"]
    dirs += [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    import sysconfig

    dirs += [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return dirs


def apply_limits(policy: Policy) -> None:
    """Resource limits for this process and its children (hard limits too, so student code cannot raise them)."""
    if policy.memory_mb:
        nbytes = policy.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    if policy.cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (policy.cpu_seconds, policy.cpu_seconds + 5))
    if policy.file_size_mb:
        nbytes = policy.file_size_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _add_path_rule(ruleset_fd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a folder this machine does not have
    try:
        is_dir = os.path.isdir(path)
        if not is_dir:
            access &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        attr = _PathBeneathAttr(access, fd)
        if _libc.syscall(_SYS_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, ctypes.byref(attr), 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def apply_landlock(policy: Policy) -> bool:
    """Restrict this process (and its future children) to ``policy``. Returns False where Landlock is unavailable."""
    abi = landlock_abi()
    if abi < 1:
        return False
    fs_rights = _all_fs_rights(abi)
    attr = _RulesetAttr(fs_rights, 0, 0)
    size = ctypes.sizeof(ctypes.c_uint64)  # ABI 1-3: only handled_access_fs
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 2 * ctypes.sizeof(ctypes.c_uint64)
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = ctypes.sizeof(_RulesetAttr)
    ruleset_fd = _libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset_fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in policy.read_dirs:
            _add_path_rule(ruleset_fd, path, READ)
        for path in policy.list_dirs:
            _add_path_rule(ruleset_fd, path, FS_READ_DIR)
        for path in policy.read_files:
            _add_path_rule(ruleset_fd, path, FILE_READ)
        for path in policy.write_files:
            _add_path_rule(ruleset_fd, path, FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE)
        for path in policy.write_dirs:
            _add_path_rule(ruleset_fd, path, fs_rights)
        if abi >= 4:
            for port in policy.bind_ports:
                net = _NetPortAttr(NET_BIND_TCP, port)
                if _libc.syscall(_SYS_ADD_RULE, ruleset_fd, _RULE_NET_PORT, ctypes.byref(net), 0) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock net rule for port {port} failed")
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if _libc.syscall(_SYS_RESTRICT_SELF, ruleset_fd, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset_fd)
    return True


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """As root: empty the bounding set and every capability set, and stop execve from granting root's set back."""
    if os.geteuid() != 0:
        return
    SECBIT_NOROOT, SECBIT_NOROOT_LOCKED = 1 << 0, 1 << 1
    SECBIT_NO_SETUID_FIXUP, SECBIT_NO_SETUID_FIXUP_LOCKED = 1 << 2, 1 << 3
    _libc.prctl(_PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP
                | SECBIT_NO_SETUID_FIXUP_LOCKED, 0, 0, 0)
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def confine(policy: Policy) -> dict:
    """Everything at once, in the order that works: limits, Landlock (needs no_new_privs), then capabilities."""
    apply_limits(policy)
    landlocked = apply_landlock(policy)
    drop_capabilities()
    return {"landlock": landlocked, "landlock_abi": landlock_abi()}


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent goes, however the parent goes (it may not live to close our channels):
    nothing the grader started outlives it. (The parent's *thread* counts: start such children from the main one.)

    ``parent`` is the pid this process was started by, known before it started: a parent that died before this call
    sends no signal (the process was already re-parented), so the call checks and exits at once."""
    _set_parent_death_signal()
    if os.getppid() != parent:
        os._exit(1)


def die_with_parent_watching(pidfd: int) -> None:
    """:func:`die_with_parent` for a process whose parent is outside its PID namespace (``getppid()`` is 0 there):
    ``pidfd``, opened before, refers to the parent or to the process whose death brings the parent's, and is
    readable once that process has exited."""
    _set_parent_death_signal()
    gone, _, _ = select.select([pidfd], [], [], 0)
    if gone:
        os._exit(1)


def _set_parent_death_signal() -> None:
    _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


PF_EXITING = 0x4  # a task's flag (include/linux/sched.h): it is in do_exit(), dying


def kill_descendants(root_pid: int, sig: int = 9) -> int:
    """Kill every process below ``root_pid`` (by walking /proc); returns how many of them were still running, not
    already dying (see :func:`_still_running`)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        fields = _stat_fields(entry) if entry.name.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    todo, found = [root_pid], []
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            found.append(child)
            todo.append(child)
    running = [pid for pid in found if _still_running(pid)]  # before the signal: it makes every one of them dying
    for pid in found:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return len(running)


def _still_running(pid: int) -> bool:
    """Whether a thread of ``pid`` is neither exiting nor dead. A SIGKILLed kernel still tearing down its memory on a
    loaded machine, or a zombie not yet reaped, is not something a notebook left running; a process whose first
    thread exited while others run is."""
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for thread in threads:
        fields = _stat_fields(thread)
        if fields is not None and fields[0] not in ("Z", "X") and not int(fields[6]) & PF_EXITING:
            return True
    return False


def _stat_fields(entry: Path) -> list[str] | None:
    """The fields of ``entry/stat`` (a /proc process or task folder) after the command name: state, ppid, ..., flags
    (the name is cut at its last parenthesis: it may hold spaces and parentheses); None when it is gone."""
    try:
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
