"""The handout README's set-up commands, run as written (no browser needed).

One stand-in: ``pip install -r requirements.txt`` would fetch ~1 GB (torch), so a ``.pth`` file lends the new venv
this venv's site-packages instead, after checking that they hold exactly the versions the handout pins. The README's
``pip install .`` then runs as written, dependencies included, with two offline flags (``--no-index``: nothing may
be downloaded; ``--no-build-isolation``: setuptools from the lent packages): that is also the README's third way in,
"the torch you already have", on a venv where the pinned torch was there first, and pip must install no torch.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course import handout as handout_module

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
import json, pathlib, sys
import labutils, labutils.checks, labutils.lesson
assert pathlib.Path(labutils.__file__).is_relative_to(sys.prefix), labutils.__file__  # installed, not lent
try:
    import labutils.reference
    sys.exit("labutils.reference is importable: the instructor's answers reached a student")
except ImportError:
    pass
import importlib.metadata as md, torch
pinned = dict(line.strip().split("==") for line in open("../requirements.txt") if "==" in line)["torch"]
assert md.version("torch") == pinned and not pathlib.Path(torch.__file__).is_relative_to(sys.prefix)  # the lent one
print((pathlib.Path(sys.prefix) / "etc/jupyter/jupyter_server_config.json").read_text())
"""


@pytest.mark.slow
def test_readme_set_up_commands_work(handout):
    """A venv, the requirements (lent, versions checked), ``pip install .``: pip installs the handout and nothing
    else (no torch: the one there stays), labutils imports from the install, labutils.reference does not, and the
    Jupyter setting is in the venv."""
    setup = readme_commands(handout, "Set up")
    assert setup == [command for command, _ in handout_module.SETUP_COMMANDS]
    venv, requirements, install = setup
    assert requirements == "pip install -r requirements.txt" and install == "pip install ."
    assert readme_commands(handout, handout_module.SETUP_OWN) == [install]  # the third way: that same command
    site_packages = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    script = "\n".join([
        "set -e",
        venv,
        f"python -c {_quote(LEND_SITE_PACKAGES)} {site_packages}",  # stands in for the requirements
        f"python -c {_quote(CHECK_VERSIONS)}",
        # the build uses the lent setuptools: 3.11's venv bundles setuptools 65, which cannot build a wheel alone
        "python -m pip uninstall --quiet --yes setuptools",
        f"{install} --no-index --no-build-isolation",  # offline: what it needs must be there already
        f"cd notebooks && python -c {_quote(CHECK_INSTALL)}",  # where the notebooks' kernels run
    ])
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(handout.parent),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(["bash", "-c", script], cwd=handout, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    installed = [line for line in proc.stdout.splitlines() if line.startswith("Successfully installed")]
    project = handout_module.project()
    assert installed == [f"Successfully installed {project['name']}-{project['version']}"], proc.stdout[-2000:]
    assert re.search(r"^Requirement already satisfied: torch[<>=]", proc.stdout, re.M), proc.stdout[-2000:]
    assert json.loads(proc.stdout[proc.stdout.index("{"):]) == handout_module.JUPYTER_SERVER_CONFIG


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
