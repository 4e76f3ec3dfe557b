"""Which torch and torchvision the lab supports, and what a student is told at ``import labutils`` about theirs.

The floor is written once, in ``pyproject.toml`` (``dependencies``; ``requires-python`` for Python). pip copies it
into the installed package's metadata, which is read here, so the guard, pip and the handout agree by construction.
There is no ceiling: a torch newer than every release in :data:`CHECKED` runs, and ``import labutils`` prints one
line saying which releases were checked. The installed versions are read from metadata too: ``import labutils`` does
not import torch to look at them.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import sys

DISTRIBUTION = "loop-lab"  # pyproject.toml's project name (the handout's pyproject is derived from it; a test checks)
GUARDED = ("torch", "torchvision")  # what the lab's code calls into version by version; the rest only needs a floor
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's CPU-only wheels: a fraction of the CUDA build's size
# The (torch, torchvision) releases the whole lab was run on and found to agree with the pin, oldest first: the
# floor of pyproject.toml and each newer release by benchmarks/bench_compat.py (`--torch X`: the check corpus's
# verdicts and notebooks 00-08 against the pin), the pin of requirements.txt by `make test`. Add a release here only
# after bench_compat.py ran clean on it (docs/installing.md has each run's table).
CHECKED = (("2.6.0", "0.21.0"), ("2.14.1", "0.29.1"), ("2.15.0", "0.29.2"))


class UnsupportedVersion(ImportError):
    """torch or torchvision is older than the lab supports; the message says how to install one."""


def supported() -> dict[str, str]:
    """``{"torch": ">=2.6", ...}`` from the installed package's metadata; empty when labutils is not installed
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


def untested(installed: dict[str, str | None], checked=CHECKED) -> str | None:
    """One line when torch or torchvision is newer than every checked release (a local build's ``+cu130`` aside),
    saying which were checked; None otherwise."""
    from packaging.version import Version

    newer = [f"{name} {version}" for name, version, newest in zip(GUARDED, map(installed.get, GUARDED), checked[-1])
             if version is not None and Version(Version(version).public) > Version(newest)]
    if not newer:
        return None
    pairs = ", ".join(f"{torch} with {vision}" for torch, vision in checked).replace(" with ", " with torchvision ", 1)
    return (f"Loop Lab: {' and '.join(newer)} {'is' if len(newer) == 1 else 'are'} newer than the releases the lab "
            f"was checked on (torch {pairs}); it should work. If a cell fails that is not one of your exercises, tell "
            f"your course staff; the newest checked release: pip install 'torch=={checked[-1][0]}' "
            f"'torchvision=={checked[-1][1]}'")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check() -> None:
    """Raise :class:`UnsupportedVersion` (one line) when torch or torchvision is below the supported floor; print
    :func:`untested`'s line to stderr (beside Python's own notices) when one is newer than every checked release."""
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
    note = untested(installed)
    if note:
        print(note, file=sys.stderr)
