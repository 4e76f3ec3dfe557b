"""The supported range (issue 30): written once in pyproject.toml, read back by the guard at ``import labutils``, by
the handout's pyproject and its README; the guard's one line for a torch outside it.

The installs themselves run in tests/browser/test_handout_setup.py (the README's commands) and, for the oldest
supported torch, in benchmarks/bench_compat.py (it downloads wheels).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from autograder.course import handout
from labutils import versions

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
RANGES = {"torch": ">=2.6,<2.15", "torchvision": ">=0.21,<0.30"}


def _pins() -> dict[str, str]:
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_the_guard_reads_the_range_pyproject_writes():
    """Check that the installed metadata the guard reads says what pyproject.toml says, under the name it gives"""
    assert versions.DISTRIBUTION == PROJECT["name"]
    written = {r.name: r.specifier for r in map(Requirement, PROJECT["dependencies"]) if r.name in versions.GUARDED}
    assert {name: SpecifierSet(spec) for name, spec in versions.supported().items()} == written
    assert versions.supported() == RANGES  # floor first, as the message prints it


def test_the_pinned_versions_are_the_newest_end_of_the_range():
    pins = _pins()
    for name, spec in versions.supported().items():
        assert SpecifierSet(spec).contains(pins[name]), f"{name}=={pins[name]} is outside {spec}"
    assert versions.problem({name: pins[name] for name in versions.GUARDED}, versions.supported()) is None
    assert SpecifierSet(PROJECT["requires-python"]).contains("3.10") and SpecifierSet(
        PROJECT["requires-python"]).contains("3.13")


@pytest.mark.parametrize("installed, wrong", [
    ({"torch": "2.5.1", "torchvision": "0.20.1"}, ["torch 2.5.1 is not in >=2.6,<2.15",
                                                   "torchvision 0.20.1 is not in >=0.21,<0.30"]),
    ({"torch": "2.15.0", "torchvision": "0.29.1"}, ["torch 2.15.0 is not in >=2.6,<2.15"]),
    ({"torch": "2.15.0.dev20261120", "torchvision": "0.29.1"}, ["torch 2.15.0.dev20261120 is not in"]),
    ({"torch": "2.14.1", "torchvision": None}, ["torchvision is not installed"]),
])
def test_the_guard_names_what_is_wrong_and_the_install_command(installed, wrong):
    message = versions.problem(installed, RANGES)
    assert "\n" not in message
    assert message.startswith("Loop Lab supports torch>=2.6,<2.15, torchvision>=0.21,<0.30")
    assert all(part in message for part in wrong), message
    assert "pip install 'torch>=2.6,<2.15' 'torchvision>=0.21,<0.30'" in message
    assert f"--index-url {versions.CPU_INDEX}" in message


@pytest.mark.parametrize("installed", [{"torch": "2.6.0", "torchvision": "0.21.0"},
                                       {"torch": "2.14.1+cpu", "torchvision": "0.29.1+cpu"},
                                       {"torch": "2.14.1+cu130", "torchvision": "0.29.1"}])
def test_the_guard_accepts_both_ends_and_local_builds(installed):
    assert versions.problem(installed, RANGES) is None


def test_import_labutils_with_an_old_torch_fails_in_one_line(tmp_path):
    """A torch 2.5.1 first on the path (its metadata is all the guard reads): ``import labutils`` stops, the last line
    of the traceback saying which versions work and how to install one."""
    fake = tmp_path / "torch-2.5.1.dist-info"
    fake.mkdir()
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.5.1\n")
    proc = subprocess.run([sys.executable, "-c", "import labutils"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("labutils.versions.UnsupportedVersion: Loop Lab supports torch>=2.6,<2.15"), proc.stderr
    assert "torch 2.5.1 is not in >=2.6,<2.15" in last and "pip install 'torch>=2.6,<2.15'" in last
    assert "import torch" not in proc.stderr  # stopped before anything imported torch


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
