"""Find each student's notebooks in a submissions folder, and take in only what can be graded safely.

Accepted layouts (the first that matches wins):

- ``SUBMISSIONS/<student>/*.ipynb``: one folder per student;
- ``SUBMISSIONS/<student>/loop_lab/*.ipynb`` or a course root ``SUBMISSIONS/submitted/<student>/loop_lab/``: nbgrader's;
- ``SUBMISSIONS`` is a single ``.ipynb``: one student (named by ``--student`` or the folder holding the file).

A submission may be written to attack the grader (issue 16), so it is read defensively:

- Nothing leads out of a student's folder: a symbolic link, a hard link (a second name of a file elsewhere, such as
  the instructor's solutions), a fifo, a device or a socket is refused with the reason in the student's notes. Files
  are opened relative to their folder's descriptor with ``O_NOFOLLOW`` and checked again on the open descriptor.
- What is accepted is read once, through that descriptor, into the run's own folder (``intake``); only that copy is
  graded and put into the course, so a file changed or swapped after it was checked changes nothing.
- An absurd notebook (too big, nested too deep, too many cells, a cell too big) is refused before any part of grading parses it, and
  outputs too big to be worth reading are cleared, as grading clears them anyway (:class:`Limits`). A notebook that
  is empty, not JSON or not a notebook scores zero with the reason. Unknown notebook names (``01_baseline (1).ipynb``)
  are reported and ignored, never guessed.
- Every folder of SUBMISSIONS is graded or refused with its reason (:attr:`Discovery.refused`, which the grader lists
  in summary.md and its exit status): a hidden (dot-named) folder holding notebooks of the assignment, a symbolic
  link, a folder that cannot be read, a folder whose name is not a valid student id, folders whose names are one
  student to an LMS (they differ only in case). The others are graded.
- Names are chosen by an attacker too (issues 28 and 42): a folder is graded under its own name or not at all
  (:mod:`autograder.course.identity`), and a data file or folder whose name starts with '-' is not taken in, so
  nothing the grader creates reads as a command-line option.
- nbgrader's ``timestamp.txt`` is written on the student's side: it is not copied beside the notebooks (nbgrader's
  autograde would parse it and score the notebook 0 when it is malformed); its first bytes and its size are kept
  (:attr:`Submission.timestamp`) for :mod:`autograder.results.handin`, which believes it only when the instructor
  says so.
"""

from __future__ import annotations

import json
import os
import stat
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from ..layout import ASSIGNMENT
from . import identity

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY  # O_NONBLOCK: a fifo never blocks
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {stat.S_IFIFO: "fifo (named pipe)", stat.S_IFCHR: "device", stat.S_IFBLK: "device", stat.S_IFSOCK: "socket"}
TOOL_FOLDERS = ("__pycache__", "__MACOSX")  # made by Python and by macOS's zip: never a student's work
NBGRADER_FOLDERS = ("source", "release", "submitted", "autograded", "feedback")  # a course root's own
TIMESTAMP_FILE = "timestamp.txt"  # nbgrader's submission time, beside the notebooks (written by `nbgrader submit`)
TIMESTAMP_HEAD = 256  # bytes of it read: nbgrader writes ~30; a bigger file is refused by its size, never read


@dataclass(frozen=True)
class Limits:
    """What a submission may be. Beyond a limit a notebook is refused with the reason (outputs: cleared) before any
    part of grading parses it: an absurd file costs its student that notebook, never the class its grading."""

    notebook_bytes: int = 100 << 20  # the lab's notebooks with every output are under 2 MB; GitHub stops at 100 MB
    output_bytes: int = 16 << 20  # more is cleared (grading clears outputs anyway): every process that reads the
    #                               notebook validates each output again, ~14 s for 400,000 small ones
    json_depth: int = 64  # a notebook nests ~8 deep (widget state ~20); Python's JSON and nbformat recurse ~1,000
    cells: int = 2_000  # the lab's notebooks have 20-40 cells; each runs as a kernel round trip (50,000 took 249 s)
    cell_bytes: int = 1 << 20  # one cell's source: the lab's longest is ~3 KB; a 50 MB written answer took 51 s to
    #                            render as feedback and froze formgrader for 53 s
    folder_depth: int = 16  # sub-folders of a student's folder read (data/raw/...)
    files: int = 1_000  # entries of a student's folder read: each data file is copied beside each of nine notebooks
    extra_bytes: int = 50 << 20  # data files beside the notebooks, all together


LIMITS = Limits()


@dataclass(frozen=True)
class HandedInFile:
    """A small file of the student's that the grader reads itself rather than copies (nbgrader's timestamp.txt):
    its first :data:`TIMESTAMP_HEAD` bytes and its size, or why it could not be read."""

    head: bytes = b""
    size: int = 0
    problem: str = ""  # e.g. "is a folder, not a file"


@dataclass
class Submission:
    student: str
    folder: Path | None
    notebooks: dict[str, Path] = field(default_factory=dict)  # notebook id -> the copy taken in (intake)
    unreadable: dict[str, str] = field(default_factory=dict)  # notebook id -> why it cannot be graded
    extra_files: list[dict] = field(default_factory=list)  # {"name": relative path, "path": the copy taken in}
    notes: list[str] = field(default_factory=list)
    file_times: dict[str, float] = field(default_factory=dict)  # notebook id -> its mtime as handed in (written by
    #                                                             the student: a hand-in time only if trusted)
    timestamp: HandedInFile | None = None  # nbgrader's timestamp.txt, if there is one



@dataclass
class Discovery:
    """What :func:`discover` found: the students to grade, and every folder of SUBMISSIONS that is not graded."""

    submissions: list[Submission]
    refused: list[str] = field(default_factory=list)  # "<folder>: not graded: <why>"


class SubmissionsError(ValueError):
    """The submissions path cannot be graded at all (missing, empty, wrong kind of file)."""


class Refused(Exception):
    """A file that is not taken in; the message says why, as the student reads it after the file's name."""


def _size(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MB" if n >= 1 << 20 else f"{n:,} bytes"


# --- one file ----------------------------------------------------------------------------------------------------------


def _not_regular(st: os.stat_result, target: str = "") -> str | None:
    """Why a file with this (l)stat is not taken in: a link of either kind, or not a regular file."""
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (to {target}): links are not followed; hand in the files themselves"
    if not stat.S_ISREG(st.st_mode):
        return f"is a {_KINDS.get(stat.S_IFMT(st.st_mode), 'special file')}, not a regular file"
    if st.st_nlink > 1:
        return (f"is a hard link (one of {st.st_nlink} names of one file on disk, which may be anyone's): hand in a "
                "copy of the file itself")
    return None


def _read(name: str, dir_fd: int | None, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``name`` (in folder ``dir_fd``), read through one descriptor opened without
    following links and checked again once open; :class:`Refused` for anything else or more than ``limit`` bytes."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    problem = _not_regular(st, os.readlink(name, dir_fd=dir_fd) if stat.S_ISLNK(st.st_mode) else "")
    if problem:
        raise Refused(problem)
    fd = os.open(name, _READ, dir_fd=dir_fd)
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) or _not_regular(opened):
            raise Refused("changed while it was being read: hand it in again")
        chunks, got = [], 0
        while opened.st_size <= limit and got <= limit and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            got += len(chunk)
        size = max(opened.st_size, got)  # a file may grow while it is read
        if size > limit:
            raise Refused(f"is {_size(size)}: more than the {_size(limit)} {what}")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _why(exc: Exception) -> str:
    """What a student reads after a file's name when it was not taken in."""
    return str(exc) if isinstance(exc, Refused) else f"could not be read ({type(exc).__name__}: {exc})"


def _deeper_than(value, limit: int) -> bool:
    """Does the parsed JSON ``value`` nest lists and objects more than ``limit`` deep? (No recursion: it is the point.)"""
    todo = [(value, 1)]
    while todo:
        value, depth = todo.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                todo.append((child, depth + 1))
    return False


def _parse(data: bytes, limits: Limits) -> dict:
    """The notebook's JSON, bounded before anything recursive reads it; :class:`Refused` with the reason."""
    if not data.strip():
        raise Refused("is empty (0 bytes of notebook)")
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Refused(f"could not be read (UnicodeDecodeError: {exc})") from None
    except json.JSONDecodeError as exc:
        raise Refused(f"is not valid JSON ({exc.msg} at line {exc.lineno}); it may have been cut off or edited by "
                      "hand") from None
    except RecursionError:
        raw = None  # deeper than Python's JSON reader goes: refused just below
    if raw is None or _deeper_than(raw, limits.json_depth):
        raise Refused(f"is nested more than {limits.json_depth} levels deep (lists or objects inside each other; a "
                      "notebook needs about 8): remove what was pasted into its metadata or outputs")
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list) or "nbformat" not in raw:
        raise Refused("is JSON but not a notebook (no 'cells' / 'nbformat')")
    if len(raw["cells"]) > limits.cells:
        raise Refused(f"has {len(raw['cells']):,} cells: more than the {limits.cells:,} a notebook of this lab may "
                      "have; delete the cells added for scratch work and hand it in again")
    _check_cells(raw["cells"], limits)
    return raw


def _check_cells(cells: list, limits: Limits) -> None:
    """:class:`Refused` naming the first cell whose source is more than ``limits.cell_bytes``."""
    for number, cell in enumerate(cells, 1):
        source = cell.get("source", "") if isinstance(cell, dict) else ""
        text = "".join(s for s in source if isinstance(s, str)) if isinstance(source, list) else str(source)
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limits.cell_bytes:
            kind = cell.get("cell_type") if cell.get("cell_type") in ("code", "markdown", "raw") else "unknown type"
            raise Refused(f"has a cell of {_size(size)} (cell {number}, {kind}): more "
                          f"than the {_size(limits.cell_bytes)} a cell may be; shorten it (an image: attach a smaller "
                          "one) and hand it in again")


def _outputs_size(raw: dict) -> int:
    return sum(len(json.dumps(cell.get("outputs", []))) for cell in raw["cells"] if isinstance(cell, dict))


def _without_outputs(raw: dict) -> bytes:
    for cell in raw["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return (json.dumps(raw, indent=1, ensure_ascii=False) + "\n").encode()


def screen_notebook(data: bytes, limits: Limits = LIMITS) -> tuple[bytes, list[str]]:
    """The bytes to grade and notes on what was changed in them (outputs too big: cleared); :class:`Refused` with the
    reason when the notebook cannot be graded (empty, not JSON, nested too deep, too many cells, not a notebook)."""
    import nbformat  # here, not at the top: the CLI imports SubmissionsError before grading starts its processes

    raw = _parse(data, limits)
    notes = []
    if len(data) > limits.output_bytes and (size := _outputs_size(raw)) > limits.output_bytes:
        data = _without_outputs(raw)
        notes.append(f"its outputs ({_size(size)}) were cleared before grading, which runs every cell afresh")
    try:
        nbformat.validate(nbformat.reads(data.decode(), as_version=4))
    except Exception as exc:
        raise Refused(f"is not a valid notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    return data, notes


def _take_notebook(name: str, dir_fd: int | None, limits: Limits) -> tuple[bytes, list[str]]:
    return screen_notebook(_read(name, dir_fd, limits.notebook_bytes, "a notebook may be; clear its outputs "
                                 "(Edit > Clear Outputs of All Cells), save it and hand it in again"), limits)


def check_notebook(path: Path, limits: Limits = LIMITS) -> str | None:
    """Why ``path`` cannot be graded (a link or special file, too big, empty, not JSON, nested too deep, too many
    cells, not a v4 notebook), or None if it can."""
    try:
        _take_notebook(str(path), None, limits)
    except (Refused, OSError) as exc:
        return _why(exc)
    return None


# --- one student's folder ------------------------------------------------------------------------------------------------


def _entries(dir_fd: int, rel: Path, depth: int, limits: Limits, notes: list[str]):
    """(path relative to the student's folder, its folder's descriptor, its lstat) of every entry below ``dir_fd``
    that is not a folder; folders are entered by descriptor, never through a link. Hidden names and caches skipped."""
    with os.scandir(dir_fd) as it:
        names = sorted(entry.name for entry in it)
    for name in names:
        if name.startswith(".") or name == "__pycache__":
            continue
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if name.startswith("-"):  # it would become a file of that name in OUT's course, read as an option by `cmd *`
            notes.append(f"{rel / name}{'/ not read' if stat.S_ISDIR(st.st_mode) else ' not copied'}: its name starts "
                         "with '-'; rename it")
        elif not stat.S_ISDIR(st.st_mode):
            yield rel / name, dir_fd, st
        elif depth >= limits.folder_depth:
            notes.append(f"{rel / name}/ not read: more than {limits.folder_depth} folders deep")
        else:
            child = os.open(name, _FOLDER, dir_fd=dir_fd)
            try:
                yield from _entries(child, rel / name, depth + 1, limits, notes)
            finally:
                os.close(child)


def _keep(intake: Path, rel: Path, data: bytes) -> Path:
    """``data`` written to ``intake/rel``: the copy grading reads."""
    path = intake / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _collect(name: str, folder: Path, notebook_ids: list[str], intake: Path, limits: Limits) -> Submission:
    sub = Submission(student=name, folder=folder)  # a valid id: discover refused any other name
    fd = os.open(folder, _FOLDER)
    try:  # nbgrader's layout: <student>/loop_lab/, if it is a real folder (a link to one is refused below)
        inner = os.open(ASSIGNMENT, _FOLDER, dir_fd=fd)
        os.close(fd)
        fd, sub.folder = inner, folder / ASSIGNMENT
    except OSError:
        pass
    try:
        _take_folder(sub, fd, notebook_ids, intake / sub.student, limits)
    finally:
        os.close(fd)
    return sub


def _take_folder(sub: Submission, fd: int, notebook_ids: list[str], intake: Path, limits: Limits) -> None:
    """Every notebook of the assignment and data file of the student's folder ``fd``, taken into ``intake``."""
    expected = ", ".join(n + ".ipynb" for n in notebook_ids)
    extra_bytes = 0
    sub.timestamp = _timestamp(fd)
    with closing(_entries(fd, Path(), 0, limits, sub.notes)) as entries:
        for count, (rel, dir_fd, st) in enumerate(entries):
            if rel.parts[0] == TIMESTAMP_FILE:
                continue  # read by _timestamp, never copied (nor what a folder of that name holds)
            notebook = rel.suffix == ".ipynb" and len(rel.parts) == 1
            if count >= limits.files:
                sub.notes.append(f"{rel} and later files not read: more than {limits.files:,} files in the folder")
                break
            if notebook and rel.stem not in notebook_ids:
                sub.notes.append(f"{rel} ignored: not a notebook of this assignment (expected names: {expected})")
                continue
            if rel.suffix == ".ipynb" and not notebook:
                continue  # a notebook in a sub-folder: not graded, not data
            extra_bytes += 0 if notebook else st.st_size
            if extra_bytes > limits.extra_bytes:
                sub.notes.append(f"{rel} and later files ignored: more than {_size(limits.extra_bytes)} of extra files")
                break
            try:
                _take(sub, rel, dir_fd, intake, limits)
                if notebook:
                    sub.file_times[rel.stem] = st.st_mtime
            except (Refused, OSError) as exc:
                if notebook:
                    sub.unreadable[rel.stem] = f"{rel} {_why(exc)}"
                else:
                    sub.notes.append(f"{rel} {_why(exc)}: not copied beside the notebooks")


def _timestamp(fd: int) -> HandedInFile | None:
    """nbgrader's timestamp.txt in the student's folder ``fd``: its first bytes and its size (a 50 MB one costs the
    grader one small read), or why it cannot be read; None if there is none."""
    try:
        st = os.stat(TIMESTAMP_FILE, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    problem = "is a folder, not a file" if stat.S_ISDIR(st.st_mode) else \
        _not_regular(st, os.readlink(TIMESTAMP_FILE, dir_fd=fd) if stat.S_ISLNK(st.st_mode) else "")
    if problem:
        return HandedInFile(size=st.st_size, problem=problem)
    try:
        handle = os.open(TIMESTAMP_FILE, _READ, dir_fd=fd)
        try:
            return HandedInFile(head=os.read(handle, TIMESTAMP_HEAD), size=os.fstat(handle).st_size)
        finally:
            os.close(handle)
    except OSError as exc:
        return HandedInFile(problem=f"could not be read ({type(exc).__name__}: {exc.strerror})")


def _take(sub: Submission, rel: Path, dir_fd: int, intake: Path, limits: Limits) -> None:
    """One notebook (``rel`` at the top of the folder) or data file of ``sub``, into ``intake``."""
    if len(rel.parts) == 1 and rel.suffix == ".ipynb":
        data, notes = _take_notebook(rel.name, dir_fd, limits)
        sub.notebooks[rel.stem] = _keep(intake, rel, data)
        sub.notes += [f"{rel}: {note}" for note in notes]
    else:
        data = _read(rel.name, dir_fd, limits.extra_bytes, "all data files together may be")
        sub.extra_files.append({"name": str(rel), "path": str(_keep(intake, rel, data))})


# --- SUBMISSIONS -----------------------------------------------------------------------------------------------------------


def _holds_notebooks(folder: Path, notebook_ids: list[str]) -> bool:
    return any(os.path.lexists(folder / f"{n}.ipynb") or os.path.lexists(folder / ASSIGNMENT / f"{n}.ipynb")
               for n in notebook_ids)


def _not_a_student(entry: os.DirEntry, notebook_ids: list[str]) -> str | None:
    """Why an entry of SUBMISSIONS is not graded as a student's folder: None for a student's folder, "" for what is
    no submission at all (a file, a tool's folder, a hidden folder without notebooks), otherwise the reason."""
    if entry.is_symlink():
        return (f"it is a symbolic link (to {os.readlink(entry.path)}): links are not followed; copy the student's "
                "folder itself into SUBMISSIONS")
    if not entry.is_dir(follow_symlinks=False):
        return "a notebook outside any student's folder: move it into its student's folder" \
            if entry.name.endswith(".ipynb") else ""
    if entry.name in TOOL_FOLDERS:
        return ""
    if entry.name.startswith("."):
        return "its name starts with a dot (a hidden folder): rename it to the student's name to grade it" \
            if _holds_notebooks(Path(entry.path), notebook_ids) else ""
    return None


def _students_root(path: Path, notebook_ids: list[str]) -> tuple[Path, list[str]]:
    """The folder holding the students' folders: ``path``, or ``path/submitted`` when ``path`` is an nbgrader course
    (``submitted/<student>/loop_lab/``); then every other folder of ``path`` holding notebooks of the assignment is
    refused, nbgrader's own aside, so that a student folder named "submitted" hides no one."""
    submitted = path / "submitted"
    if submitted.is_symlink() or not submitted.is_dir() or not any(
            (d / ASSIGNMENT).is_dir() and not (d / ASSIGNMENT).is_symlink() for d in submitted.iterdir()):
        return path, []
    beside = sorted(e.name for e in os.scandir(path) if e.name not in NBGRADER_FOLDERS
                    and e.is_dir(follow_symlinks=False) and _holds_notebooks(Path(e.path), notebook_ids))
    return submitted, [f"{name}: not graded: SUBMISSIONS is read as an nbgrader course (submitted/<student>/"
                       f"{ASSIGNMENT}/) and this folder is not in submitted/" for name in beside]


def require_existing(path: Path) -> None:
    """SUBMISSIONS must exist; :func:`autograder.grade.grade` asks before it starts a process (a mistyped folder
    then costs no zygote), :func:`discover` again."""
    if not Path(path).exists():
        raise SubmissionsError(f"{path} does not exist")


def discover(path: Path, notebook_ids: list[str], student: str | None = None, *, intake: Path,
             limits: Limits = LIMITS) -> Discovery:
    """Every student's submission under ``path`` (see the module docstring), sorted by student id, each file taken
    into ``intake/<student>/``; and every folder that is not graded, with the reason."""
    path = Path(path)
    require_existing(path)
    if path.is_file():
        return Discovery([_single(path, notebook_ids, student, intake, limits)])
    root, refused = _students_root(path, notebook_ids)
    names = []
    with os.scandir(root) as it:
        for entry in sorted(it, key=lambda e: e.name):
            why = _not_a_student(entry, notebook_ids)
            if why is None and (bad := identity.why_not_an_id(entry.name)):
                why = (f"its name is not a valid student id: {bad}. Rename the folder to the student's id (their "
                       "login, as the LMS knows them); it is never renamed for you, which could make it someone "
                       "else's")
            if why is None:
                names.append(entry.name)
            elif why:
                refused.append(f"{entry.name}: not graded: {why}")
    for clash in identity.clashes((name, name) for name in names).values():
        refused += [f"{name}: not graded: folders {' and '.join(map(repr, clash))} differ only in case, so an LMS "
                    "(and a case-insensitive disk) takes them for one student. If they are two students, rename "
                    "the folders to ids that differ otherwise and pair each with its roster row in the LMS export's "
                    "--mapping; if one is a stale copy, remove it" for name in clash]
        names = [n for n in names if n not in clash]
    subs = []
    for name in names:
        try:
            subs.append(_collect(name, root / name, notebook_ids, intake, limits))
        except OSError as exc:
            refused.append(f"{name}: not graded: it could not be read ({type(exc).__name__}: {exc})")
    refused.sort()
    if not subs:
        loose = sorted(p.name for p in root.glob("*.ipynb"))
        hint = f" (found loose notebooks {loose[:3]}: put each student's notebooks in a folder named after them)" \
            if loose else ""
        raise SubmissionsError(f"no student folders in {root}{hint}" + "".join(f"; {r}" for r in refused))
    return Discovery(subs, refused)


def _single(path: Path, notebook_ids: list[str], student: str | None, intake: Path, limits: Limits) -> Submission:
    """``SUBMISSIONS`` is one notebook: one student's, named by ``student`` or the folder holding it."""
    if path.suffix != ".ipynb":
        raise SubmissionsError(f"{path} is a file but not a .ipynb notebook")
    if path.stem not in notebook_ids:
        raise SubmissionsError(f"{path.name} is not a notebook of this assignment: expected one of "
                               f"{', '.join(n + '.ipynb' for n in notebook_ids)}")
    name = student or path.parent.resolve().name
    if bad := identity.why_not_an_id(name):
        raise SubmissionsError(f"{'--student' if student else 'the folder holding the notebook'} {name!r} is not a "
                               f"valid student id: {bad}; give the student's id with --student ID")
    sub = Submission(student=name, folder=None)
    fd = os.open(path.parent, _FOLDER)
    try:
        _take(sub, Path(path.name), fd, intake / sub.student, limits)
        sub.file_times[path.stem] = os.stat(path.name, dir_fd=fd, follow_symlinks=False).st_mtime
    except (Refused, OSError) as exc:
        sub.unreadable[path.stem] = f"{path.name} {_why(exc)}"
    finally:
        os.close(fd)
    return sub
