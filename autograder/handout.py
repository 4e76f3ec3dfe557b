"""The zip students receive: the released notebooks and the student-facing labutils, nothing an instructor keeps.

Left out on purpose: ``solutions/`` (reference solutions and hidden tests), ``autograder/`` (hidden checks, grading),
and the folder ``labutils/reference/`` (the reference loop, the resume harness, the pipeline, the sequence runner and
the instructor's command line) as a whole. The same boundary decides what a student's code may import while it is
graded (:mod:`autograder.sandbox`), so grading sees exactly the handout.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REFERENCE_PACKAGE = "labutils.reference"  # the instructor's side of labutils: never in the handout
HANDOUT_DIR = "loop_lab"  # the folder the zip unpacks into

README = """\
# Loop Lab

Write a PyTorch training loop you can trust, one notebook at a time, on FashionMNIST.

## Set up

    python -m venv .venv && . .venv/bin/activate
    pip install -r requirements.txt
    pip install -e .          # makes `import labutils` work from the notebooks

FashionMNIST is read from `LAB_DATA_DIR`, Debian's `dataset-fashion-mnist` package, or downloaded once.

## Work

    jupyter lab notebooks/

Do the notebooks in order (`00_data_tour` to `08_stretch`). Each exercise states its contract, then a check cell
tells you right away whether your function meets it. Submit the notebooks you changed, keeping their file names.
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "loop-lab-student"
version = "0.1.0"
description = "Loop Lab: the student handout (notebooks + labutils)"
requires-python = ">=3.10"
dependencies = ["torch>=2.4", "torchvision", "matplotlib", "tqdm", "numpy"]

[tool.setuptools.packages.find]
include = ["labutils*"]
"""


def reference_dir(root: Path = REPO_ROOT) -> Path:
    return root.joinpath(*REFERENCE_PACKAGE.split("."))


def student_labutils_files(root: Path = REPO_ROOT) -> list[Path]:
    """Every file of labutils (sub-packages included) outside ``labutils/reference/``, without caches, sorted."""
    package = root / "labutils"
    reference = reference_dir(root)
    files = []
    for path in sorted(package.rglob("*")):
        rel = path.relative_to(package)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if path.is_relative_to(reference) or any(part.startswith(".") for part in rel.parts):
            continue
        files.append(path)
    return files


def student_module_names(root: Path = REPO_ROOT) -> list[str]:
    """Dotted names of the student-facing labutils modules (``labutils``, ``labutils.checks.train``, ...)."""
    names = []
    for path in student_labutils_files(root):
        if path.suffix != ".py":
            continue
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__main__":
            continue  # an entry point: importing it runs it
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def handout_members(root: Path = REPO_ROOT) -> dict[str, Path | str]:
    """Archive name -> source file (or literal text) for every member of the handout."""
    members: dict[str, Path | str] = {}
    notebooks = sorted((root / "notebooks").glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no notebooks in {root / 'notebooks'}: run `python -m autograder release` first")
    for nb in notebooks:
        members[f"{HANDOUT_DIR}/notebooks/{nb.name}"] = nb
    for path in student_labutils_files(root):
        members[f"{HANDOUT_DIR}/{path.relative_to(root).as_posix()}"] = path
    members[f"{HANDOUT_DIR}/requirements.txt"] = student_requirements(root)
    members[f"{HANDOUT_DIR}/pyproject.toml"] = PYPROJECT
    members[f"{HANDOUT_DIR}/README.md"] = README
    return members


def student_requirements(root: Path = REPO_ROOT) -> str:
    """The course's pinned requirements without the grading-only packages."""
    grading_only = ("nbgrader", "sqlalchemy")
    lines = (root / "requirements.txt").read_text().splitlines()
    return "\n".join(line for line in lines if not line.lower().startswith(grading_only)) + "\n"


def build_handout(out: Path, root: Path = REPO_ROOT) -> list[str]:
    """Write the handout zip to ``out``; returns the archive names. Deterministic: fixed timestamps, sorted."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    members = handout_members(root)
    tmp = out.with_name(out.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(members):
            source = members[name]
            data = source.read_bytes() if isinstance(source, Path) else source.encode()
            info = zipfile.ZipInfo(name, date_time=(2024, 9, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp.replace(out)  # a half-written zip never sits under the final name
    return sorted(members)
