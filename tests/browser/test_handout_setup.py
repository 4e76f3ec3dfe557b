"""The handout README's set-up commands, run as written (no browser needed), offline.

The course's versions: ``pip install -r requirements.txt`` would fetch ~1 GB (torch), so a ``.pth`` file lends the new
venv this venv's site-packages instead, after checking that they hold exactly the versions the handout pins. The
README's ``pip install .`` then runs as written, dependencies included, with two offline flags (``--no-index``: nothing
may be downloaded; ``--no-build-isolation``: setuptools from the lent packages), and pip must install no torch. Then
the first cells of notebook 00 run under ``jupyter nbconvert --execute`` there, as a student's check would: no warning
on the terminal or in the outputs (the handout's Jupyter setting reaches nbconvert), and the data cell says where
FashionMNIST came from.

The torch you already have (tests/browser/offline.py): a venv with nothing but torch (what torch requires lent with
it), the README's commands for that way, pip installing the rest from this venv's distributions repacked as wheels:
torch stays, and every notebook's imports resolve. And a torch newer than every checked release (its metadata
faked, the real one lent): ``pip install .`` keeps it, and ``import labutils`` says so in one line. These two venvs
are made without pip (the lent one runs: ``python -m pip``) and read no pip configuration: this machine's (a cap on
torch, local indexes) is not a student's, and ``--no-index`` keeps them offline all the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nbformat
import pytest

from autograder.course import handout as handout_module
from labutils import data, versions
from test_notebooks import terminal_warnings, unintended_warnings

from . import offline
from .student import readme_commands

LEND_SITE_PACKAGES = """\
import pathlib, sys, sysconfig
lent = pathlib.Path(sysconfig.get_paths()["purelib"]) / "_course_requirements.pth"
lent.write_text(sys.argv[1] + "\\n")
"""
CHECK_VERSIONS = """\
import importlib.metadata as md, sys
pins = [line.split("==") for line in map(str.strip, open("requirements.txt")) if line and not line.startswith("#")]
pins = [(name.split("[")[0], pinned) for name, pinned in pins]  # psycopg[binary]: the distribution is psycopg
wrong = [(name, pinned, md.version(name)) for name, pinned in pins if md.version(name) != pinned]
sys.exit(f"lent versions differ from the pins: {wrong}" if wrong else 0)
"""
CHECK_INSTALL = """\
import importlib.metadata as md, importlib.util, pathlib, sys
import labutils
assert pathlib.Path(labutils.__file__).is_relative_to(sys.prefix), labutils.__file__  # installed, not lent
if importlib.util.find_spec("labutils.reference") is not None:
    sys.exit("labutils.reference is importable: the instructor's answers reached a student")
pinned = dict(line.strip().split("==") for line in open("../requirements.txt") if "==" in line)["torch"]
torch = pathlib.Path(importlib.util.find_spec("torch").origin)
assert md.version("torch") == pinned and not torch.is_relative_to(sys.prefix)  # the lent one
print((pathlib.Path(sys.prefix) / "etc/jupyter/jupyter_config.json").read_text())
"""
FIRST_CELLS = "first_cells_00.ipynb"  # notebook 00 up to its first exercise: imports, settings, the data, a figure
OFFLINE = "--no-index --no-build-isolation --no-compile"  # --no-compile: the bytecode of ~200 MB, which no check reads


@pytest.mark.slow
def test_readme_set_up_commands_work(handout):
    """A venv, the requirements (lent, versions checked), ``pip install .``: pip installs the handout and nothing
    else (no torch: the one there stays), labutils imports from the install, labutils.reference does not, and the
    Jupyter setting is in the venv, where ``jupyter nbconvert --execute`` reads it: its kernel prints no warning."""
    setup = readme_commands(handout, "Set up")
    assert setup == [command for command, _ in handout_module.SETUP_COMMANDS]
    venv, requirements, install = setup
    assert requirements == "pip install -r requirements.txt" and install == "pip install ."
    site_packages = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    _first_cells_of_00(handout / "notebooks")
    assert venv.startswith("python -m venv ")
    script = "\n".join([
        "set -e",
        # pip and setuptools come with the lent packages (3.11's venv bundles setuptools 65, which cannot build a
        # wheel alone); ensurepip's copy of pip cost 5 CPU-s
        venv.replace("python -m venv ", "python -m venv --without-pip ", 1),
        'pip() { python -m pip "$@"; }',
        f"python -c {_quote(LEND_SITE_PACKAGES)} {site_packages}",  # stands in for the requirements
        f"python -c {_quote(CHECK_VERSIONS)}",
        f"{install} --no-index --no-build-isolation",  # offline: what it needs must be there already
        "cd notebooks",  # where the notebooks' kernels run
        f"python -c {_quote(CHECK_INSTALL)}",
        # `jupyter nbconvert` as this venv's Python runs it (the lent `jupyter` script would run the course's)
        f"LAB_MODE=smoke python -m nbconvert --to notebook --execute {FIRST_CELLS} --output ran.ipynb",
    ])
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(handout.parent),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", **_data_env()}
    proc = subprocess.run(["bash", "-c", script], cwd=handout, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    installed = [line for line in proc.stdout.splitlines() if line.startswith("Successfully installed")]
    project = handout_module.project()
    assert installed == [f"Successfully installed {project['name']}-{project['version']}"], proc.stdout[-2000:]
    assert re.search(r"^Requirement already satisfied: torch[<>=]", proc.stdout, re.M), proc.stdout[-2000:]
    assert json.loads(proc.stdout[proc.stdout.index("{"):]) == handout_module.JUPYTER_CONFIG
    ran = nbformat.read(handout / "notebooks" / "ran.ipynb", as_version=4)
    errors = [out.ename for cell in ran.cells for out in cell.get("outputs", []) if out.output_type == "error"]
    assert errors == [] and unintended_warnings(ran) == []
    assert terminal_warnings(proc.stderr) == [], proc.stderr[-3000:]  # the kernel's "without encryption" among them
    printed = "".join(out.get("text", "") for cell in ran.cells for out in cell.get("outputs", []))
    assert data.origin() in printed  # the first data cell: where the data came from, where it is kept


@pytest.mark.slow
def test_the_own_torch_way_on_nothing_but_torch_installs_what_every_notebook_imports(handout, tmp_path):
    """A venv with torch alone (and what torch requires), the README's commands for the torch you already have:
    pip keeps torch and installs the rest (accelerate, torchvision, cloudpickle, ...), and every import statement of
    every notebook runs there, every module labutils imports is found."""
    commands = readme_commands(handout, handout_module.SETUP_OWN)
    assert commands == [command for command, _ in [*handout_module.OWN_TORCH_COMMANDS, handout_module.ADD_JUPYTER]]
    keep, install = commands[:2]
    torch_side = offline.closure(["torch", "pip", "setuptools"])  # pip and setuptools: a venv has them
    lent = offline.lend(torch_side, tmp_path / "lent")
    wheels = offline.repack(offline.closure(_dependencies()) - torch_side, tmp_path / "wheels")
    venv = _bare_venv(tmp_path / "venv", lent)
    script = "\n".join([
        "set -e",
        f". {venv}/bin/activate",
        'pip() { python -m pip "$@"; }',  # the lent pip, in this venv
        keep,
        f"{install} {OFFLINE} --find-links {wheels}",
        "cd notebooks",
        f"python -c {_quote(handout_module.RESOLVE_IMPORTS)} {_quote(json.dumps(handout_module.imports()))}",
    ])
    proc = subprocess.run(["bash", "-c", script], cwd=handout, env=_bare_env(handout), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (handout / handout_module.KEEP_TORCH_FILE).read_text() == f"torch=={_version('torch')}\n"
    installed = next(line for line in proc.stdout.splitlines() if line.startswith("Successfully installed")).split()
    assert {"accelerate", "torchvision", "cloudpickle", "ipywidgets", "loop-lab"} <= {
        name.rsplit("-", 1)[0] for name in installed[2:]}, installed
    assert not any(name.startswith("torch-") for name in installed), installed
    assert json.loads(proc.stdout.splitlines()[-1]) == {"failed": []}


@pytest.mark.slow
def test_pip_install_keeps_a_torch_newer_than_the_checked_ones_and_labutils_says_so_in_one_line(handout, tmp_path):
    """A torch and torchvision newer than every checked release installed (their metadata, the code lent): the
    handout's ``pip install .`` keeps them and installs only the handout; ``import labutils`` runs and prints one
    line on stderr naming the checked releases."""
    newest = versions.CHECKED[-1]
    newer = {name: f"{int(checked.split('.')[0]) + 1}.0.0" for name, checked in zip(versions.GUARDED, newest)}
    site_packages = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    venv = _bare_venv(tmp_path / "venv", Path(site_packages))
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    for name, version in newer.items():  # before the lent folder on the path: pip and importlib.metadata see these
        info = purelib / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    script = "\n".join([
        "set -e",
        f". {venv}/bin/activate",
        'pip() { python -m pip "$@"; }',
        f"{handout_module.INSTALL[0]} {OFFLINE}",
        "cd notebooks",
        'python -c "import labutils"',
    ])
    proc = subprocess.run(["bash", "-c", script], cwd=handout, env=_bare_env(handout), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    project = handout_module.project()
    installed = [line for line in proc.stdout.splitlines() if line.startswith("Successfully installed")]
    assert installed == [f"Successfully installed {project['name']}-{project['version']}"], proc.stdout[-2000:]
    assert re.search(rf"^Requirement already satisfied: torch>=\S+ in .* \({newer['torch']}\)$", proc.stdout, re.M)
    note = versions.untested(newer)
    assert note.startswith(f"Loop Lab: torch {newer['torch']} and torchvision {newer['torchvision']} are newer")
    assert proc.stderr.splitlines()[-1] == note and note not in proc.stdout  # the import's one line, last


def _first_cells_of_00(folder: Path) -> None:
    """Notebook 00 as released, up to its first exercise cell: what every notebook opens with, and the data."""
    nb = nbformat.read(folder / "00_data_tour.ipynb", as_version=4)
    first_exercise = next(i for i, cell in enumerate(nb.cells) if cell.metadata.get("nbgrader", {}).get("solution"))
    nb.cells = nb.cells[:first_exercise]
    nbformat.write(nb, folder / FIRST_CELLS)


def _data_env() -> dict[str, str]:
    """The decompressed FashionMNIST here (not a second copy in the test's HOME), where it came from, and
    matplotlib's font list (built once per HOME: a second of CPU)."""
    import matplotlib

    return {"LAB_CACHE_DIR": str(data.cache_dir()), "MPLCONFIGDIR": matplotlib.get_cachedir(),
            **({"LAB_DATA_DIR": os.environ["LAB_DATA_DIR"]} if os.environ.get("LAB_DATA_DIR") else {})}


def _dependencies() -> list[str]:
    return tomllib.loads(handout_module.pyproject())["project"]["dependencies"]


def _version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


def _bare_venv(venv: Path, lent: Path) -> Path:
    """A venv without pip, with ``lent`` on its path after its own site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=60)
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    (purelib / "_lent.pth").write_text(f"{lent}\n")
    return venv


def _bare_env(handout: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(handout.parent), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_CONFIG_FILE": os.devnull}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
