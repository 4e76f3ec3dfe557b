"""The zip students receive: the released notebooks and the student-facing labutils, nothing an instructor keeps.

Left out on purpose: ``solutions/`` (reference solutions and hidden tests), ``autograder/`` (hidden checks, grading),
and the folder ``labutils/reference/`` (the reference loop and optimizer set-up, the resume harness, the pipeline, the
sequence runner and the instructor's command line) as a whole. The same boundary decides what a student's code may import while it is
graded (:mod:`autograder.sandbox.policy`), so grading sees exactly the handout.
"""

from __future__ import annotations

import ast
import json
import textwrap
import zipfile
from pathlib import Path

from labutils.atomic import atomic_file
from labutils.versions import CHECKED, CPU_INDEX

from ..layout import REPO_ROOT, reference_dir

HANDOUT_DIR = "loop_lab"  # the folder the zip unpacks into

# The README's ways in, each a section with its commands in order and the note printed beside each. The tests read
# them back from the README in the zip and run them (tests/browser/test_handout_setup.py, tests/test_install.py).
VENV = ("python -m venv .venv && . .venv/bin/activate", "")
INSTALL = ("pip install .", "labutils: the helpers and checks the notebooks import")
SETUP_COMMANDS = [
    VENV,
    ("pip install -r requirements.txt", "torch, JupyterLab, ... at the course's versions"),
    INSTALL,
]
SETUP_CPU = "Set up on a CPU-only machine"
SETUP_OWN = "Set up with the torch you already have"
# pip keeps an installed torch that satisfies the lab's floor, unless another requirement asks for a newer one: a
# torchvision that pip adds does (torchvision 0.29.2 requires torch>=2.14.0). The version pip sees (the metadata's
# 2.14.1, not torch.__version__'s 2.14.1+cu130), written as a constraint, makes pip pick the releases that go with it.
KEEP_TORCH_FILE = "keep-torch.txt"
KEEP_TORCH = (f"python -c \"import importlib.metadata as m; print('torch==' + m.version('torch'))\" > {KEEP_TORCH_FILE}",
              "")  # explained beside it in the README: the note would push every other one far to the right
OWN_TORCH_COMMANDS = [KEEP_TORCH, (f"{INSTALL[0]} -c {KEEP_TORCH_FILE}",
                                   "labutils and what the notebooks import (accelerate, ...); your torch stays")]
ADD_JUPYTER = (f"pip install jupyterlab -c {KEEP_TORCH_FILE}", "JupyterLab, nbconvert and a Python kernel")
# What a notebook costs, measured (docs/measurements.md: the commands, the machine and its load).
TIMES = """\
Training cells use all 48,000 training images, and how long they take depends on the machine more than on the
notebook. On an idle 2-core machine the whole lab took about 10 minutes, 2 at most per notebook. On a 2-core machine
shared with other work (a load average of about 12, at times hundreds), notebook 01 alone took 32 minutes, 31 of them
in one training cell. So write and check your functions with `LAB_MODE=smoke jupyter lab notebooks/` (2,048 images: on
that busy machine, 20 s to 2.5 minutes a notebook), then run each notebook in full once it works. From a terminal,
give a full run no cell limit (nbconvert's default, 30 s a cell, stops every training cell):

    jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=-1 notebooks/01_baseline.ipynb"""
SMOKE_CELL_TIMEOUT_S = 600  # the longest cell of a smoke run took 47 s on the busy machine: past nbconvert's 30 s
RUN_ALL = (f"LAB_MODE=smoke jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout="
           f"{SMOKE_CELL_TIMEOUT_S} notebooks/01_baseline.ipynb", "")
COLAB = "On Colab"
# Colab's cells: `!` runs a shell command, `%pip` pip in the notebook's own Python, `%env` sets a variable for it.
COLAB_COMMANDS = [
    ("!test -d loop_lab || unzip -q loop-lab.zip", "the handout you uploaded, unpacked once per runtime"),
    ("%pip install -q ./loop_lab", "labutils and what the notebooks need; Colab's torch stays"),
    ("%env LAB_MODE=smoke", "2,048 images while you write; leave it out for the full run"),
]
WORK_COMMANDS = [
    (". .venv/bin/activate", "in every new terminal (the first two ways; the third: your environment's own)"),
    ("jupyter lab notebooks/", "opens JupyterLab in your browser"),
]
# `pip install .` copies this file to <venv>/etc/jupyter/ (not an editable install). Every Jupyter application reads
# jupyter_config.json before its own file: the server (JupyterLab) and `jupyter nbconvert --execute` alike then hand
# each kernel CurveZMQ keys, its connection is encrypted and it no longer prints "Kernel is running over TCP without
# encryption" at every start (a jupyter_server_config.json reached only the server). "auto" does so only for kernels
# whose kernelspec declares support (ipykernel's does). `jupyter execute` gives its kernel manager no configuration
# at all (nbclient's command line), so no file reaches it.
JUPYTER_CONFIG_DIR = "jupyter-config"
JUPYTER_CONFIG_FILE = f"{JUPYTER_CONFIG_DIR}/jupyter_config.json"
JUPYTER_CONFIG = {"KernelManager": {"transport_encryption": "auto"}}


def _commands(commands: list[tuple[str, str]]) -> str:
    width = max((len(command) for command, note in commands if note), default=0) + 2  # the notes line up
    return "\n".join(f"    {command:<{width}}# {note}" if note else f"    {command}" for command, note in commands)


PINS_PYTHON = (3, 11)  # the oldest Python the course's pins (requirements.txt) install on: numpy 2.4 has no 3.10 wheel


def torch_pins(root: Path = REPO_ROOT) -> list[str]:
    """requirements.txt's ``torch==`` and ``torchvision==`` lines: what the CPU-only installs take from PyTorch's
    index first."""
    return [line for line in student_requirements(root).splitlines() if line.startswith(("torch==", "torchvision=="))]


def cpu_commands(root: Path = REPO_ROOT) -> list[tuple[str, str]]:
    """The CPU-only way: the course's torch and torchvision pins from PyTorch's CPU wheel index, then the rest."""
    pins = torch_pins(root)
    cpu_build = next(p for p in pins if p.startswith("torch==")).split("==")[1] + "+cpu"  # PEP 440: a local
    # version (+cpu) matches a pin that has none
    return [VENV, (f"pip install {' '.join(pins)} --index-url {CPU_INDEX}", ""),
            ("pip install -r requirements.txt", f"the rest (the CPU build, {cpu_build}, satisfies the pin)"), INSTALL]


def project(root: Path = REPO_ROOT) -> dict:
    """The ``[project]`` table of the course's pyproject.toml: its name, Python and the supported torch range."""
    import tomllib  # Python 3.11+: the instructor's side (the handout itself installs on 3.10)

    return tomllib.loads((root / "pyproject.toml").read_text())["project"]


def readme(root: Path = REPO_ROOT) -> str:
    meta = project(root)
    pins_python = ".".join(map(str, PINS_PYTHON))
    floors = ", ".join(d.replace(" ", "") for d in meta["dependencies"] if d.startswith(("torch>", "torchvision>")))
    checked = textwrap.fill(
        f"The lab needs {floors}; a torchvision that goes with your torch comes with it if you have none. It was "
        f"checked on {', '.join(f'torch {torch} with torchvision {vision}' for torch, vision in CHECKED)}. A newer "
        "torch runs, and `import labutils` says in one line which releases were checked. No Jupyter in that "
        "environment (`jupyter lab --version` fails)? Add it:", width=117)
    return f"""\
# Loop Lab

Write a PyTorch training loop you can trust, one notebook at a time, on FashionMNIST.

## {COLAB}

Upload `loop-lab.zip` to the Files pane (or fetch it there with `!wget` from where your course publishes it), upload
a notebook from its `notebooks/` folder (File > Upload notebook) and add a first cell:

{_commands(COLAB_COMMANDS)}

Run it in every new runtime. FashionMNIST downloads itself the first time; to use the four `.gz` files instead (say you
uploaded them to `/content/fashion-mnist`), add `%env LAB_DATA_DIR=/content/fashion-mnist`. `pip` keeps Colab's torch.

## Which way to set up

- **Linux without an NVIDIA GPU** (most laptops, a cloud machine without a GPU): the CPU-only way below. The first
  way would install torch with CUDA's libraries, a 5.8 GB environment, most of it libraries such a machine never uses.
- **Linux with an NVIDIA GPU**: the first way, the course's versions.
- **macOS or Windows**: the first way. PyPI's torch for these has no CUDA libraries (a wheel of about 130 MB), so the
  first way is already the small one; on Windows it runs on the CPU even where there is an NVIDIA GPU.
- **An environment that already has torch** (conda, a JupyterHub, your own): the third way; it keeps that torch.
- **Colab**: above.

## Set up (once)

The first two ways install the course's pins, which need Python {pins_python} or newer (numpy 2.4 does); on Python 3.10 take
the third. The course's versions (on Linux, torch with its CUDA libraries: a 5.8 GB virtualenv):

{_commands(SETUP_COMMANDS)}

## {SETUP_CPU}

The same versions with torch and torchvision from PyTorch's CPU-only wheels, without the CUDA libraries (a fraction
of the size):

{_commands(cpu_commands(root))}

## {SETUP_OWN}

In the environment that has it (conda, a JupyterHub, your own venv), on Python {meta["requires-python"]}: the
first command writes your torch's version down, so that pip keeps it while it adds what the notebooks need.

{_commands(OWN_TORCH_COMMANDS)}

{checked}

{_commands([ADD_JUPYTER])}

## Data

FashionMNIST is read from `LAB_DATA_DIR` (a folder with the four original `.gz` files), from Debian's
`dataset-fashion-mnist` package, or downloaded once. The first data cell of notebook 00 says which, and the folder the
lab keeps its decompressed copy in (`~/.cache/loop_lab`, or `LAB_CACHE_DIR`).

## Work

{_commands(WORK_COMMANDS)}

Do the notebooks in order, `00_data_tour` to `08_stretch`. Each exercise states the contract of a function you
write; the check cell under it runs your function on tiny fixed data and prints a verdict: a ✓, or what went wrong,
at which step, and how to fix it. The graded test cell after it runs the same check. Questions marked "graded by
hand" are answered in the cell that says `YOUR ANSWER HERE`.

## How long a notebook takes

{TIMES}

## Submit

The notebooks you changed, with their file names unchanged. Grading runs each one from top to bottom in a fresh
kernel, in the short mode (2,048 images): check that Kernel > Restart Kernel and Run All Cells works in JupyterLab
started with `LAB_MODE=smoke` before you submit, or from a terminal, as grading runs it (the result is
`01_baseline.nbconvert.ipynb`, beside it):

{_commands([RUN_ALL])}
"""


def pyproject(root: Path = REPO_ROOT) -> str:
    """The handout's pyproject.toml: the course's name, Python and dependencies (the supported range is written once,
    in the course's pyproject.toml), only labutils as the package."""
    meta = project(root)
    return f"""\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = {json.dumps(meta["name"])}
version = {json.dumps(meta["version"])}
description = "Loop Lab: the student handout (notebooks + labutils)"
requires-python = {json.dumps(meta["requires-python"])}
dependencies = {json.dumps(meta["dependencies"])}

[tool.setuptools.packages.find]
include = ["labutils*"]

[tool.setuptools.data-files]  # copied by `pip install .` (not by an editable install)
"etc/jupyter" = ["{JUPYTER_CONFIG_FILE}"]
"""


NOT_FOR_STUDENTS = ("nbgrader", "sqlalchemy", "psycopg", "distributed", "playwright")  # grading and its tests only


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
    members[f"{HANDOUT_DIR}/pyproject.toml"] = pyproject(root)
    members[f"{HANDOUT_DIR}/README.md"] = readme(root)
    members[f"{HANDOUT_DIR}/{JUPYTER_CONFIG_FILE}"] = json.dumps(JUPYTER_CONFIG, indent=2) + "\n"
    return members


def imports(root: Path = REPO_ROOT) -> dict[str, list[str]]:
    """What the handout's code imports, for :data:`RESOLVE_IMPORTS`: ``statements``, every import statement of the
    released notebooks as written, and ``modules``, the top-level name of every absolute import in the handout's
    labutils, those inside functions included (``cloudpickle`` where lab 7 runs on a CUDA machine)."""
    statements, modules = [], set()
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                statements += [ast.unparse(node) for node in ast.walk(ast.parse("".join(cell["source"])))
                               if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)]
    for path in student_labutils_files(root):
        if path.suffix == ".py":
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    modules.add(node.module.split(".")[0])
    return {"statements": list(dict.fromkeys(statements)), "modules": sorted(modules - {"labutils", "__future__"})}


# Run by the Python of an environment set up as the README says, with json.dumps(imports()) as its argument: runs
# every notebook's import statements and finds every module labutils imports; prints what failed, exits 1 if any.
RESOLVE_IMPORTS = """\
import importlib.util, json, sys
wanted = json.loads(sys.argv[1])
failed = []
for statement in wanted["statements"]:
    try:
        exec(statement, {})
    except Exception as exc:
        failed.append(f"{statement}: {type(exc).__name__}: {exc}")
failed += [f"{name}: not found" for name in wanted["modules"] if importlib.util.find_spec(name) is None]
print(json.dumps({"failed": failed}))
sys.exit(1 if failed else 0)
"""


def student_requirements(root: Path = REPO_ROOT) -> str:
    """The course's pinned requirements without the packages only grading and the tests use (nor the course's
    comments, which speak of its own set-up)."""
    lines = [line.strip().lower() for line in (root / "requirements.txt").read_text().splitlines()]
    pins = [line for line in lines if line and not line.startswith(("#", *NOT_FOR_STUDENTS))]
    return "# The versions the course is tested with: pip install -r requirements.txt\n" + "\n".join(pins) + "\n"


def build_handout(out: Path, root: Path = REPO_ROOT) -> list[str]:
    """Write the handout zip to ``out``; returns the archive names. Deterministic: fixed timestamps, sorted."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    members = handout_members(root)
    with atomic_file(out) as f, zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(members):
            source = members[name]
            data = source.read_bytes() if isinstance(source, Path) else source.encode()
            info = zipfile.ZipInfo(name, date_time=(2024, 9, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return sorted(members)
