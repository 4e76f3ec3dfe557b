"""The supported floor (issues 30, 46): written once in pyproject.toml, read back by the guard at ``import labutils``,
by the handout's pyproject and its README; the guard's one line for a torch below it, and the one line for a torch
newer than every checked release (labutils.versions.CHECKED), which runs.

The installs themselves run in tests/browser/test_handout_setup.py (the README's commands, a newer torch than the
checked ones included) and, for the oldest supported torch or a new release, in benchmarks/bench_compat.py (it
downloads wheels).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from autograder.course import handout
from labutils import versions

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RANGES = {"torch": ">=2.6", "torchvision": ">=0.21"}


def _pins() -> dict[str, str]:
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_the_guard_reads_the_range_pyproject_writes():
    """Check that the installed metadata the guard reads says what pyproject.toml says, under the name it gives"""
    assert versions.DISTRIBUTION == PROJECT["name"]
    written = {r.name: r.specifier for r in map(Requirement, PROJECT["dependencies"]) if r.name in versions.GUARDED}
    assert {name: SpecifierSet(spec) for name, spec in versions.supported().items()} == written
    assert versions.supported() == RANGES  # floor first, as the message prints it


def test_the_floor_and_the_pin_are_checked_releases_and_nothing_has_a_ceiling():
    """Check that the floor is the oldest checked release, the pin one of them, the releases in order, and that no
    requirement of the lab's caps a version (a newer torch is never refused or replaced)"""
    pins = _pins()
    checked = [dict(zip(versions.GUARDED, pair)) for pair in versions.CHECKED]
    for name, spec in versions.supported().items():
        assert spec == f">={checked[0][name].removesuffix('.0')}", (name, spec)
        assert [Version(c[name]) for c in checked] == sorted(Version(c[name]) for c in checked)
    assert {name: pins[name] for name in versions.GUARDED} in checked
    for requirement in map(Requirement, PROJECT["dependencies"]):
        assert not any(s.operator in ("<", "<=", "==", "~=", "!=") for s in requirement.specifier), requirement
    assert versions.problem({name: pins[name] for name in versions.GUARDED}, versions.supported()) is None
    assert SpecifierSet(PROJECT["requires-python"]).contains("3.10") and SpecifierSet(
        PROJECT["requires-python"]).contains("3.13")


@pytest.mark.parametrize("installed, wrong", [
    ({"torch": "2.5.1", "torchvision": "0.20.1"}, ["torch 2.5.1 is not in >=2.6",
                                                   "torchvision 0.20.1 is not in >=0.21"]),
    ({"torch": "2.6.0.dev20241112", "torchvision": "0.21.0"}, ["torch 2.6.0.dev20241112 is not in >=2.6"]),
    ({"torch": "2.14.1", "torchvision": None}, ["torchvision is not installed"]),
])
def test_the_guard_names_what_is_wrong_and_the_install_command(installed, wrong):
    message = versions.problem(installed, RANGES)
    assert "\n" not in message
    assert message.startswith("Loop Lab supports torch>=2.6, torchvision>=0.21")
    assert all(part in message for part in wrong), message
    assert "pip install 'torch>=2.6' 'torchvision>=0.21'" in message
    assert f"--index-url {versions.CPU_INDEX}" in message


@pytest.mark.parametrize("installed", [{"torch": "2.6.0", "torchvision": "0.21.0"},
                                       {"torch": "2.14.1+cpu", "torchvision": "0.29.1+cpu"},
                                       {"torch": "2.14.1+cu130", "torchvision": "0.29.1"},
                                       {"torch": "2.15.0", "torchvision": "0.29.2"},
                                       {"torch": "2.99.0", "torchvision": "0.99.0"}])
def test_the_guard_accepts_the_floor_local_builds_and_newer_releases(installed):
    assert versions.problem(installed, RANGES) is None


CHECKED = (("2.6.0", "0.21.0"), ("2.14.1", "0.29.1"), ("2.15.0", "0.29.2"))


@pytest.mark.parametrize("installed, newer", [
    ({"torch": "2.16.0", "torchvision": "0.29.2"}, "torch 2.16.0 is newer"),
    ({"torch": "2.15.1+cu132", "torchvision": "0.29.2"}, "torch 2.15.1+cu132 is newer"),
    ({"torch": "2.16.0.dev20261201", "torchvision": "0.30.0"},
     "torch 2.16.0.dev20261201 and torchvision 0.30.0 are newer"),
    ({"torch": "2.15.0", "torchvision": "0.30.0"}, "torchvision 0.30.0 is newer"),
])
def test_a_release_newer_than_the_checked_ones_gets_one_line_naming_them(installed, newer):
    note = versions.untested(installed, CHECKED)
    assert note.startswith(f"Loop Lab: {newer} than the releases the lab was checked on (torch 2.6.0 with "
                           "torchvision 0.21.0, 2.14.1 with 0.29.1, 2.15.0 with 0.29.2)"), note
    assert "\n" not in note and "pip install 'torch==2.15.0' 'torchvision==0.29.2'" in note
    assert "Warning" not in note  # informational: no warning class that tests/test_notebooks.py would flag


@pytest.mark.parametrize("installed", [{"torch": "2.15.0", "torchvision": "0.29.2"},
                                       {"torch": "2.15.0+cu130", "torchvision": "0.29.2+cu132"},
                                       {"torch": "2.10.0", "torchvision": "0.25.0"},
                                       {"torch": "2.15.0rc2", "torchvision": "0.29.2"}])
def test_a_checked_release_or_one_between_them_gets_no_line(installed):
    assert versions.untested(installed, CHECKED) is None


def test_import_labutils_with_an_old_torch_fails_in_one_line(tmp_path):
    """A torch 2.5.1 first on the path (its metadata is all the guard reads): ``import labutils`` stops, the last line
    of the traceback saying which versions work and how to install one."""
    _fake_distribution(tmp_path, "torch", "2.5.1")
    proc = subprocess.run([sys.executable, "-c", "import labutils"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("labutils.versions.UnsupportedVersion: Loop Lab supports torch>=2.6"), proc.stderr
    assert "torch 2.5.1 is not in >=2.6" in last and "pip install 'torch>=2.6'" in last
    assert "import torch" not in proc.stderr  # stopped before anything imported torch


def test_import_labutils_with_a_torch_newer_than_the_checked_ones_says_so_in_one_line(tmp_path):
    """A torch and torchvision newer than every checked release first on the path (their metadata is all the check
    reads): ``import labutils`` succeeds, with one line on stderr naming the checked releases, nothing on stdout."""
    newest = versions.CHECKED[-1]
    newer = (f"{int(newest[0].split('.')[0]) + 1}.0.0", f"{int(newest[1].split('.')[0]) + 1}.0.0")
    for name, version in zip(versions.GUARDED, newer):
        _fake_distribution(tmp_path, name, version)
    proc = subprocess.run([sys.executable, "-c", "import labutils"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    assert proc.stderr == versions.untested(dict(zip(versions.GUARDED, newer))) + "\n"
    assert proc.stderr.startswith(f"Loop Lab: torch {newer[0]} and torchvision {newer[1]} are newer than the releases")


def _fake_distribution(folder: Path, name: str, version: str) -> None:
    """The metadata of ``name`` at ``version`` (no code): what the version checks read."""
    fake = folder / f"{name}-{version}.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_torch_without_metadata_is_not_refused(tmp_path):
    """torch and torchvision importable but without metadata (source builds on the path): their versions are
    unknown, so nothing is refused."""
    script = ("import importlib.metadata as m, labutils.versions as v\n"
              "m.version = lambda name: (_ for _ in ()).throw(m.PackageNotFoundError(name))\n"
              "v.check()\nprint('accepted')\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "accepted", proc.stderr


def test_the_handout_installs_with_the_courses_range():
    """The handout's pyproject carries the course's name, Python and dependencies (the range) verbatim."""
    written = tomllib.loads(handout.pyproject())["project"]
    for key in ("name", "version", "requires-python", "dependencies"):
        assert written[key] == PROJECT[key], key
    assert "ipywidgets" in written["dependencies"]  # tqdm's bars render as widgets, not as a warning


def test_the_cpu_only_way_installs_the_pinned_versions_from_the_cpu_index():
    """The README's CPU-only command pins what requirements.txt pins; pip then keeps the CPU build, whose local
    version (2.14.1+cpu) matches requirements.txt's ``torch==2.14.1`` (PEP 440). The index itself cannot be reached
    from the test machine: its size is measured, with a CPU wheel of another version, in docs/installing.md."""
    pins = _pins()
    commands = [command for command, _ in handout.cpu_commands()]
    assert commands[1] == (f"pip install torch=={pins['torch']} torchvision=={pins['torchvision']} "
                           "--index-url https://download.pytorch.org/whl/cpu")
    assert commands[2:] == ["pip install -r requirements.txt", "pip install ."]
    for name in ("torch", "torchvision"):
        assert SpecifierSet(f"=={pins[name]}").contains(f"{pins[name]}+cpu")
    readme = handout.readme()
    assert commands[1] in readme and f"## {handout.SETUP_CPU}" in readme and f"## {handout.SETUP_OWN}" in readme


def test_notebook_00_opens_with_the_colab_recipe_of_the_readme():
    """The Colab recipe is written once (handout.COLAB_COMMANDS); notebook 00's first cell and both READMEs show the
    same commands."""
    import nbformat

    for folder in ("solutions/loop_lab", "notebooks"):
        first = nbformat.read(ROOT / folder / "00_data_tour.ipynb", as_version=4).cells[0]
        assert first.cell_type == "markdown"
        assert all(command in first.source for command, _ in handout.COLAB_COMMANDS), folder
    assert all(command in handout.readme() for command, _ in handout.COLAB_COMMANDS)
    course_readme = (ROOT / "README.md").read_text()
    assert all(command in course_readme for command, _ in handout.COLAB_COMMANDS)  # at the top of the README too
