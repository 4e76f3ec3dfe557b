"""The handout as a student has it: built by ``python -m autograder handout``, unzipped, and the README's commands.

Where a test cannot afford the real install, :func:`student_env` gives a server what ``pip install .`` would have put
in place: the handout's labutils (``PYTHONPATH``) and its Jupyter setting (``JUPYTER_CONFIG_PATH``).
test_handout_setup.py proves that ``pip install .`` installs exactly those.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import forked_graders
from autograder.course import handout as handout_module
from labutils import data

REPO = Path(__file__).resolve().parents[2]


def unpacked_handout(tmp: Path) -> Path:
    zip_path = tmp / "loop-lab.zip"
    proc = forked_graders.run_real("handout", "--out", zip_path, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m autograder handout failed:\n{proc.stderr[-3000:]}")
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(tmp)
    return tmp / handout_module.HANDOUT_DIR


def readme_commands(handout: Path, section: str) -> list[str]:
    """The commands of a section of the handout's README (its indented lines), without their ``# notes``."""
    readme = (handout / "README.md").read_text()
    body = readme.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [re.sub(r"\s+#.*$", "", line.strip()) for line in body.splitlines() if line.startswith("    ")]


def student_env(handout: Path) -> dict[str, str]:
    """What ``pip install .`` provides, without installing: the handout's labutils and Jupyter setting."""
    return {"PYTHONPATH": str(handout), "JUPYTER_CONFIG_PATH": str(handout / handout_module.JUPYTER_CONFIG_DIR),
            "LAB_CACHE_DIR": str(data.cache_dir())}  # the decompressed FashionMNIST, not a second copy in HOME


def start_command(handout: Path) -> list[str]:
    """The README's ``jupyter lab ...`` arguments after ``jupyter lab``."""
    command = readme_commands(handout, "Work")[-1].split()
    assert command[:2] == ["jupyter", "lab"], command
    return command[2:]
