"""What pip installs from in the handout's set-up tests, which may not download anything: this venv's own
distributions, either lent as already installed (a folder of links on the new venv's path) or repacked as wheels that
pip installs like the registry's (the installed files and metadata, zipped; no bytecode).

Which is which follows the requirements: :func:`closure` of a set of requirements, read from the installed metadata
(markers evaluated here, extras followed), so "nothing but torch" lends torch and what torch itself requires.
"""

from __future__ import annotations

import importlib.metadata as metadata
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

NOT_REPACKED = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "WHEEL")  # pip writes its own


def closure(requirements: list[str]) -> set[str]:
    """The canonical names of the distributions ``requirements`` install, theirs included, as installed here."""
    extras_of: dict[str, set[str]] = {}
    todo = [Requirement(line) for line in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in extras_of and set(requirement.extras) <= extras_of[name]:
            continue
        extras = extras_of.setdefault(name, set())
        extras |= set(requirement.extras)
        for line in metadata.distribution(name).requires or []:
            sub = Requirement(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": extra}) for extra in extras | {""}):
                todo.append(sub)
    return set(extras_of)


def _files(name: str) -> tuple[Path, list]:
    """The site-packages folder of ``name`` and its files there (not its scripts in bin/, nor bytecode)."""
    dist = metadata.distribution(name)
    files = [f for f in dist.files or () if f.parts[0] != ".." and "__pycache__" not in f.parts]
    return Path(dist.locate_file("")), files


def lend(names: set[str], folder: Path) -> Path:
    """A folder of links to the top-level modules and metadata of ``names``: on a venv's path (a ``.pth`` file),
    they are installed there as far as Python and pip can tell."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in sorted(names):
        site, files = _files(name)
        for top in {f.parts[0] for f in files} - {p.name for p in folder.iterdir()}:
            (folder / top).symlink_to(site / top)
    return folder


def repack(names: set[str], wheelhouse: Path) -> Path:
    """One wheel per distribution of ``names`` in ``wheelhouse``, for ``pip install --no-index --find-links``."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    for name in sorted(names):
        site, files = _files(name)
        info = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
        record = []
        with zipfile.ZipFile(wheelhouse / f"{info.removesuffix('.dist-info')}-py3-none-any.whl", "w") as zf:
            for file in files:
                if file.parts[0] == info and file.name in NOT_REPACKED:
                    continue
                zf.write(site / file, file.as_posix())
                record.append(f"{file.as_posix()},,")
            zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: loop-lab tests\nRoot-Is-Purelib: true\n"
                                         "Tag: py3-none-any\n")
            zf.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/WHEEL,,", f"{info}/RECORD,,"]) + "\n")
    return wheelhouse
