"""Find each student's notebooks in a submissions folder and check that they can be read at all.

Accepted layouts (the first that matches wins):

- ``SUBMISSIONS/<student>/*.ipynb``: one folder per student;
- ``SUBMISSIONS/<student>/loop_lab/*.ipynb`` or a course root ``SUBMISSIONS/submitted/<student>/loop_lab/``: nbgrader's;
- ``SUBMISSIONS`` is a single ``.ipynb``: one student (named by ``--student`` or the folder holding the file).

A notebook that is not valid JSON or not a notebook is not run; it scores zero with the reason in the student's notes.
Unknown notebook names (``01_baseline (1).ipynb``) are reported and ignored, never guessed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .course import ASSIGNMENT
MAX_EXTRA_BYTES = 50 * 1024 * 1024  # data files a student may hand in beside the notebooks
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.@+-]")


@dataclass
class Submission:
    student: str
    folder: Path | None
    notebooks: dict[str, Path] = field(default_factory=dict)  # notebook id -> readable file
    unreadable: dict[str, str] = field(default_factory=dict)  # notebook id -> why it cannot be graded
    extra_files: list[dict] = field(default_factory=list)  # {"name": relative path, "path": absolute}
    notes: list[str] = field(default_factory=list)


class SubmissionsError(ValueError):
    """The submissions path cannot be graded at all (missing, empty, wrong kind of file)."""


def student_id(name: str) -> str:
    """A file-system- and nbgrader-safe id: letters, digits and ``_.@+-`` kept, anything else becomes ``_``."""
    cleaned = _SAFE_ID.sub("_", name).strip("._") or "student"
    return cleaned


def check_notebook(path: Path) -> str | None:
    """Why ``path`` cannot be graded (empty, not JSON, not a v4 notebook), or None if it can."""
    import nbformat  # here, not at the top: the CLI imports SubmissionsError before grading starts its processes

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"could not be read ({type(exc).__name__}: {exc})"
    if not text.strip():
        return "is empty (0 bytes of notebook)"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"is not valid JSON ({exc.msg} at line {exc.lineno}); it may have been cut off or edited by hand"
    if not isinstance(raw, dict) or "cells" not in raw or "nbformat" not in raw:
        return "is JSON but not a notebook (no 'cells' / 'nbformat')"
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:
        return f"is not a valid notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
    return None


def _collect(student: str, folder: Path, notebook_ids: list[str]) -> Submission:
    sub = Submission(student=student_id(student), folder=folder)
    if sub.student != student:
        sub.notes.append(f"folder {student!r} graded as student id {sub.student!r}")
    extra_bytes = 0
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts) or not path.is_file():
            continue
        if path.suffix == ".ipynb" and len(rel.parts) == 1:
            if path.stem in notebook_ids:
                problem = check_notebook(path)
                if problem:
                    sub.unreadable[path.stem] = f"{path.name} {problem}"
                else:
                    sub.notebooks[path.stem] = path
            else:
                sub.notes.append(f"{path.name} ignored: not a notebook of this assignment "
                                 f"(expected names: {', '.join(n + '.ipynb' for n in notebook_ids)})")
        elif path.suffix != ".ipynb" and not path.is_symlink():
            extra_bytes += path.stat().st_size
            if extra_bytes > MAX_EXTRA_BYTES:
                sub.notes.append(f"{rel} and later files ignored: more than {MAX_EXTRA_BYTES >> 20} MB of extra files")
                break
            sub.extra_files.append({"name": str(rel), "path": str(path)})
    return sub


def discover(path: Path, notebook_ids: list[str], student: str | None = None) -> list[Submission]:
    """Every student's submission under ``path`` (see the module docstring), sorted by student id."""
    path = Path(path)
    if not path.exists():
        raise SubmissionsError(f"{path} does not exist")
    if path.is_file():
        if path.suffix != ".ipynb":
            raise SubmissionsError(f"{path} is a file but not a .ipynb notebook")
        sub = Submission(student=student_id(student or path.parent.resolve().name), folder=None)
        if path.stem not in notebook_ids:
            raise SubmissionsError(f"{path.name} is not a notebook of this assignment: expected one of "
                                   f"{', '.join(n + '.ipynb' for n in notebook_ids)}")
        problem = check_notebook(path)
        if problem:
            sub.unreadable[path.stem] = f"{path.name} {problem}"
        else:
            sub.notebooks[path.stem] = path
        return [sub]
    if (path / "submitted").is_dir():
        path = path / "submitted"
    subs: dict[str, Submission] = {}
    for folder in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))):
        inner = folder / ASSIGNMENT
        sub = _collect(folder.name, inner if inner.is_dir() else folder, notebook_ids)
        if sub.student in subs:
            raise SubmissionsError(f"two folders map to student id {sub.student!r}: rename one of them")
        subs[sub.student] = sub
    if not subs:
        loose = sorted(p.name for p in path.glob("*.ipynb"))
        hint = f" (found loose notebooks {loose[:3]}: put each student's notebooks in a folder named after them)" \
            if loose else ""
        raise SubmissionsError(f"no student folders in {path}{hint}")
    return [subs[k] for k in sorted(subs)]
