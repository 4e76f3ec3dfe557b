"""Run a command where the container refuses what the grader's confinement is made of: a seccomp filter, inherited by
everything the command starts, that refuses the namespace and mount system calls (as Docker's default profile did
before 2022: ``unshare``, ``setns``, ``mount``, ``clone`` with a namespace flag, ``clone3``) and/or Landlock's (a
kernel or profile without them).

    python refuse.py [--namespaces] [--landlock] [--reveal PATH ...] -- COMMAND ...

``--reveal`` makes PATHs reachable for the student's uid before the filter goes on (a private mount namespace of
this wrapper's own, :func:`autograder.sandbox.isolation.reveal`): this machine's Python lives under ``/root``
(mode 0700), a container's under ``/usr`` or in a venv every user may read.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from autograder.sandbox import isolation

NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)  # CLONE_NEW*
NAMESPACE_CALLS = ("unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen")
LANDLOCK_CALLS = {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446}
_ERRNO = 0x00050000  # SCMP_ACT_ERRNO(0)


def install(namespaces: bool, landlock: bool) -> None:
    """The filter, on this process and everything it will start."""
    lib = isolation._seccomp()
    ctx = lib.seccomp_init(isolation._SCMP_ACT_ALLOW)

    def rule(action: int, name: str, *cmps, number: int | None = None) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        nr = number if nr < 0 and number is not None else nr
        if nr < 0:
            return  # this libseccomp does not know it, nor this kernel
        array = (isolation._ArgCmp * max(1, len(cmps)))(*[isolation._ArgCmp(*c) for c in cmps])
        if lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array) != 0:
            raise OSError(f"seccomp rule for {name}")

    if namespaces:
        for name in NAMESPACE_CALLS:
            rule(_ERRNO | errno.EPERM, name)
        for flag in NAMESPACE_FLAGS:
            rule(_ERRNO | errno.EPERM, "clone", (0, isolation._SCMP_CMP_MASKED_EQ, flag, flag))
        rule(_ERRNO | errno.ENOSYS, "clone3")  # glibc then falls back to clone, which the rules above see
    if landlock:
        for name, number in LANDLOCK_CALLS.items():
            rule(_ERRNO | errno.EPERM, name, number=number)  # Docker's default action for a call it does not list
    if lib.seccomp_load(ctypes.c_void_p(ctx)) != 0:
        raise OSError("seccomp_load failed")
    lib.seccomp_release(ctypes.c_void_p(ctx))


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    reveal = [p for p in options if not p.startswith("--")]
    if reveal:
        isolation._check(isolation._libc.unshare(isolation._CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        isolation._mount(None, "/", None, isolation._MS_REC | isolation._MS_PRIVATE)
        isolation.reveal(reveal, isolation.student_ids())
    install("--namespaces" in options, "--landlock" in options)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
