"""Which torch and torchvision the lab supports, and the one line a student gets at ``import labutils`` outside them.

The range is written once, in ``pyproject.toml`` (``dependencies``; ``requires-python`` for Python). pip copies it
into the installed package's metadata, which is read here, so the guard, pip and the handout agree by construction.
The installed versions are read from metadata too: ``import labutils`` does not import torch to check it.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import sys

DISTRIBUTION = "loop-lab"  # pyproject.toml's project name (the handout's pyproject is derived from it; a test checks)
GUARDED = ("torch", "torchvision")  # what the lab's code calls into version by version; the rest only needs a floor
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's CPU-only wheels: a fraction of the CUDA build's size


class UnsupportedVersion(ImportError):
    """torch or torchvision is outside the range the lab is tested with; the message says how to install one."""


def supported() -> dict[str, str]:
    """``{"torch": ">=2.6,<2.15", ...}`` from the installed package's metadata; empty when labutils is not installed
    (imported from a source folder on ``sys.path``) or its metadata cannot be read: then there is no guard."""
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except (metadata.PackageNotFoundError, OSError):  # OSError: a sandbox that may not read it
        return {}
    from packaging.requirements import Requirement  # one of the dependencies (and matplotlib's)

    parsed = [Requirement(line) for line in requirements]
    return {r.name: ",".join(sorted(map(str, r.specifier), key=lambda s: not s.startswith(">")))  # floor first
            for r in parsed if r.name in GUARDED and r.marker is None}


def install_command(ranges: dict[str, str]) -> str:
    return "pip install " + " ".join(f"'{name}{spec}'" for name, spec in ranges.items())


def problem(installed: dict[str, str | None], ranges: dict[str, str]) -> str | None:
    """One line naming every package outside its range and the command that installs a supported set, or None.

    ``installed`` maps a name to its version (None: not installed)."""
    from packaging.specifiers import SpecifierSet

    wrong = []
    for name, spec in ranges.items():
        version = installed.get(name)
        if version is None:
            wrong.append(f"{name} is not installed")
        elif not SpecifierSet(spec).contains(version, prereleases=True):
            wrong.append(f"{name} {version} is not in {spec}")
    if not wrong:
        return None
    return (f"Loop Lab supports {', '.join(f'{n}{s}' for n, s in ranges.items())} (Python "
            f"{sys.version_info.major}.{sys.version_info.minor} here), but {'; '.join(wrong)}. Install a supported "
            f"one: {install_command(ranges)}  (CPU only: add --index-url {CPU_INDEX})")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check() -> None:
    """Raise :class:`UnsupportedVersion` (one line) when torch or torchvision is outside the supported range."""
    ranges = supported()
    if not ranges:
        return  # not installed: no metadata to read (and maybe no site-packages at all, as under ``python -S``)
    installed = {name: _installed(name) for name in ranges}
    # importable without metadata (a source build on sys.path): its version is unknown, so it is not refused
    ranges = {name: spec for name, spec in ranges.items()
              if installed[name] is not None or importlib.util.find_spec(name) is None}
    message = problem(installed, ranges)
    if message:
        raise UnsupportedVersion(message)
