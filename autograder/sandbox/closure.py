"""What the grader keeps from student code by plain file permissions, whatever Landlock and the namespaces do.

Why: the user layer (:mod:`autograder.sandbox.isolation`) runs student code as ``nobody``, but a uid change protects
only what that uid may not open. An unpacked zip, a checkout, a gradebook copied into a task's course: all are
readable by every user unless someone closes them. A grader that runs as root therefore

- creates everything of a run (its work folder's courses and gradebooks, OUT, the cache) with the umask
  :data:`UMASK`: closed to other users from the start; the task's own folders are handed to the student's uid,
  and the folders above them opened for passing only (:func:`autograder.sandbox.isolation.open_ancestors`);
- closes what existed before the run (:func:`close`: the assignment's source with its hidden tests and solutions, the
  reference implementation, OUT, the grader's cache, Gradescope's results folder): no read, write or search bit for
  other users;
- checks it as the student's uid, in a throwaway child (:func:`check`): none of the secrets may be read or listed,
  and nothing may be created in or appended to the grader's code, its venv, the source or the results.

The grader's own code (``autograder/``) stays readable: it holds no secret (the hidden tests are the source's, the
reference is ``labutils/reference``), and a kernel imports three of its modules. What student code may read besides
its own folders is Landlock's allow-list (:func:`autograder.sandbox.client.base_policy`).

:func:`unprotected` decides whether what was verified keeps the hidden tests and the results out of reach.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import uuid
from pathlib import Path

from autograder.process import fork_child

LAYER = "permissions"
EXPOSES = ("the grader's files (the hidden tests, the results, the grader's code and venv) are kept from student code "
           "by Landlock alone")
UMASK = 0o027  # no bit for other users: the student's uid is one (its group, nogroup, owns no file of ours)
MAX_FILES = 50  # files tried in each folder (the folder's own modes are what close them; these show it)


def close(paths: list[Path]) -> None:
    """Take every bit for other users off ``paths`` (their own mode: what is beneath can no longer be reached)."""
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue
        if mode & 0o007:
            os.chmod(path, mode & 0o7770)


def venv_folders() -> list[Path]:
    """Where the grader's Python finds code at start-up: its scripts and its packages (a ``.pth`` there runs first)."""
    paths = sysconfig.get_paths()
    return sorted({Path(sys.prefix) / "bin", Path(paths["purelib"]), Path(paths["platlib"])})


def check(unreadable: list[Path], unwritable: list[Path]) -> str:
    """As the student's uid, in a throwaway child of this (root) process: "" when no file or folder of
    ``unreadable`` can be opened or listed and nothing can be created in or written to ``unwritable``; else what
    could, or why it cannot be checked."""
    from autograder.sandbox import isolation

    if os.geteuid() != 0:
        return f"the grader runs as uid {os.geteuid()}, not root: student code runs as that uid, which owns its files"
    read, write = os.pipe()

    def attempt() -> None:
        os.close(read)
        try:
            reads = [(p, os.O_RDONLY | (os.O_DIRECTORY if p.is_dir() else 0)) for p in _seen(unreadable)]
            creates = [p for p in unwritable if p.is_dir()]
            writes = [(p, os.O_WRONLY | os.O_APPEND) for p in _seen(unwritable) if p.is_file()]
            isolation.become(isolation.student_ids())  # what follows is what student code could do
            found = _opened(reads, "read") + _created(creates) + _opened(writes, "write")
            said = "; ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        except BaseException as exc:
            said = f"could not check as the student's uid: {exc}"
        os.write(write, said.encode()[:2000])

    pid = fork_child(attempt)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        said = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    uid = isolation.student_ids()[0]
    return f"uid {uid} could {said}" if said and not said.startswith("could not") else said


def _seen(paths: list[Path]) -> list[Path]:
    """``paths`` and, in each folder, what the grader (root) sees in it, as far down as it goes, up to
    :data:`MAX_FILES` a folder."""
    found = []
    for path in paths:
        if not path.exists():
            continue
        found.append(path)
        inside = []
        for parent, dirs, names in os.walk(path) if path.is_dir() else ():
            inside += [Path(parent) / n for n in dirs + names][: MAX_FILES - len(inside)]
            if len(inside) >= MAX_FILES:
                break
        found += inside
    return found


def _opened(targets: list[tuple[Path, int]], what: str) -> list[str]:
    said = []
    for path, flags in targets:
        try:
            os.close(os.open(path, flags))
            said.append(f"{what} {path}")
        except OSError:
            pass
    return said


def _created(folders: list[Path]) -> list[str]:
    said = []
    for folder in folders:
        probe = folder / f".looplab-closed-{uuid.uuid4().hex[:8]}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
            said.append(f"create files in {folder}")
        except OSError:
            pass
    return said


def unprotected(found: dict[str, str], euid: int) -> str | None:
    """None when the layers verified (``found``: layer -> "" or why not, the zygote's and :data:`LAYER`) keep the
    hidden tests and the results out of student code's reach; else one line: what is missing and what to change.

    Enough: the user layer and these permissions (student code is another uid, which can open none of them), or
    Landlock's allow-list (for a grader that is not root, student code runs as the grader's uid under it). A root
    grader whose student code would stay root is refused whatever else holds."""
    user, closed, landlock = found.get("user", "not probed"), found.get(LAYER, "not checked"), found.get("landlock")
    if not user and not closed:
        return None
    fix_user = ("run the grader as root with CAP_SETUID and CAP_SETGID (Docker keeps them for root by default) so that "
                "student code runs as uid 65534, and Python, the venv and the lab readable by every user")
    if euid == 0 and user:
        return (f"refused to grade: student code would run as root, as the grader does: the user layer is missing "
                f"({user}); what to change: {fix_user}, or allow unshare and mount (a seccomp profile that allows "
                f"them)")
    if landlock == "":
        return None  # Landlock's allow-list holds: the uid is 65534 (root grader) or the grader's own
    if euid == 0:
        return (f"refused to grade: the grader's files are not closed to student code ({closed}) and Landlock is "
                f"missing ({landlock or 'not probed'}); what to change: give those files and folders no permission "
                "for other users")
    return (f"refused to grade: nothing keeps the hidden tests and the results out of student code's reach: "
            f"Landlock is missing ({landlock or 'not probed'}) and student code runs as the grader's uid {euid}; "
            f"what to change: {fix_user}, or a kernel with Landlock (5.13 or newer) and a seccomp profile that "
            "allows landlock_create_ruleset, landlock_add_rule and landlock_restrict_self")
