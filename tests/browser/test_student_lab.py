"""The student's journey: the handout zip, set up as its README says, and lab 1 worked in JupyterLab in a browser.

The README's commands are read back from the README in the zip and run as written, with two stand-ins where the real
thing is too slow for a test:
- ``pip install -r requirements.txt`` (torch alone is ~1 GB): a ``.pth`` file lends the new venv this venv's
  site-packages, after checking they hold exactly the versions the handout pins; ``pip install .`` then runs with
  ``--no-deps``;
- in the browser tests, ``jupyter lab notebooks/`` runs from this venv with ``PYTHONPATH`` and ``JUPYTER_CONFIG_PATH``
  pointing into the handout: what ``pip install .`` puts in place, as the set-up test proves.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder import handout as handout_module
from labutils import checks, data

from .conftest import ENABLE

pytest.importorskip("playwright.sync_api", reason=ENABLE)

from playwright.sync_api import expect  # noqa: E402

from . import labpage  # noqa: E402

try:
    import mutants
except ImportError:
    from tests import mutants

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {v.name: v for v in mutants.VARIANTS}
CORRECT = VARIANTS["baseline_canonical"]
BUGGY = VARIANTS["zero_grad_before_step"]  # zero_grad() between backward() and step()
CORRECT_EVALUATE = VARIANTS["evaluate_canonical"]
NOTEBOOK = "01_baseline.ipynb"
ANSWER = ("With zero_grad() between backward() and step(), the step sees gradients of zero: the weights barely move "
          "(only weight decay acts) and the model does not learn. Without zero_grad() at all, backward() adds each "
          "batch's gradient to the last ones, so every step follows the sum of all gradients so far and training "
          "diverges or crawls.")


@pytest.fixture(scope="module")
def handout(tmp_path_factory) -> Path:
    """The handout as a student has it: built by ``python -m autograder handout``, then unzipped."""
    tmp = tmp_path_factory.mktemp("student")
    zip_path = tmp / "loop-lab.zip"
    proc = subprocess.run([sys.executable, "-m", "autograder", "handout", "--out", zip_path], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(tmp)
    return tmp / handout_module.HANDOUT_DIR


def readme_commands(readme: str, section: str) -> list[str]:
    """The commands of a README section (its indented lines), without their ``# notes``."""
    body = readme.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return [re.sub(r"\s+#.*$", "", line.strip()) for line in body.splitlines() if line.startswith("    ")]


def student_env(handout: Path) -> dict[str, str]:
    """What ``pip install .`` provides, without installing: the handout's labutils and Jupyter setting."""
    return {"PYTHONPATH": str(handout), "JUPYTER_CONFIG_PATH": str(handout / handout_module.JUPYTER_CONFIG_DIR),
            "LAB_CACHE_DIR": str(data.cache_dir())}  # the decompressed FashionMNIST, not a second copy in HOME


def notebook_url(server) -> str:
    return server.url(f"lab/tree/{NOTEBOOK}")


# --- set-up: the README's commands -----------------------------------------------------------------------------------

LEND_SITE_PACKAGES = """\
import pathlib, sys, sysconfig
lent = pathlib.Path(sysconfig.get_paths()["purelib"]) / "_course_requirements.pth"
lent.write_text(sys.argv[1] + "\\n")
"""
CHECK_VERSIONS = """\
import importlib.metadata as md, sys
pins = [line.split("==") for line in map(str.strip, open("requirements.txt")) if line and not line.startswith("#")]
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
config = pathlib.Path(sys.prefix, "etc/jupyter/jupyter_server_config.json")
print(json.dumps(json.loads(config.read_text())))
"""


@pytest.mark.slow
def test_readme_set_up_commands_work(handout):
    """Run the README's set-up: a venv, the requirements (lent, versions checked), ``pip install .``."""
    readme = (handout / "README.md").read_text()
    setup = readme_commands(readme, "Set up")
    assert setup == [command for command, _ in handout_module.SETUP_COMMANDS]
    venv, requirements, install = setup
    assert requirements == "pip install -r requirements.txt" and install == "pip install ."
    site_packages = next(p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix))
    script = "\n".join([
        "set -e",
        venv,
        f"python -c {_quote(LEND_SITE_PACKAGES)} {site_packages}",  # stands in for the requirements
        f"python -c {_quote(CHECK_VERSIONS)}",
        f"{install} --no-deps --quiet",
        f"cd notebooks && python -c {_quote(CHECK_INSTALL)}",  # where the notebooks' kernels run
    ])
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(handout.parent),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(["bash", "-c", script], cwd=handout, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == handout_module.JUPYTER_SERVER_CONFIG


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


# --- in the browser --------------------------------------------------------------------------------------------------


def start_student_lab(jupyter, handout: Path, **env: str):
    work = readme_commands((handout / "README.md").read_text(), "Work")
    start = work[-1].split()
    assert start[:2] == ["jupyter", "lab"], work
    return jupyter(handout, *start[2:], env={**student_env(handout), **env})


@pytest.mark.browser
@pytest.mark.slow
def test_check_cell_verdicts_in_jupyterlab(handout, jupyter, page):
    """Type a correct train_one_epoch, run down to the check: ✓. Then zero_grad() between backward() and step():
    the verdict names that mistake, without a traceback."""
    server = start_student_lab(jupyter, handout)
    labpage.open_notebook(page, notebook_url(server))
    labpage.screenshot(page, "student-1-opened")
    exercise = labpage.cell_index(page, r'raise NotImplementedError\("Lab 1: train_one_epoch"\)')
    check = labpage.cell_index(page, r"print\(checks\.check_train_one_epoch\(")

    labpage.set_source(page, exercise, mutants.source(CORRECT))
    labpage.screenshot(page, "student-2-typed-correct")
    labpage.run_cells(page, 0, check)
    expected = str(checks.check_train_one_epoch(CORRECT.function, "baseline"))  # the same check, run here
    shown = labpage.wait_output(page, check, expected.splitlines()[0])
    labpage.screenshot(page, "student-3-check-passed")
    assert shown.strip() == expected

    labpage.set_source(page, exercise, mutants.source(BUGGY))
    labpage.run_cells(page, exercise, check)
    shown = labpage.wait_output(page, check, BUGGY.expected_message)
    labpage.screenshot(page, "student-4-check-names-the-bug")
    assert shown.startswith("✗ train_one_epoch") and "Traceback" not in shown
    assert "zero_grad" in shown.splitlines()[0]
    assert "without encryption" not in server.log()  # the kernel got CurveZMQ keys (the handout's Jupyter setting)


@pytest.mark.browser
@pytest.mark.slow
def test_nbgrader_validate_passes_for_a_correct_notebook(handout, jupyter, page):
    """Both functions written correctly and the question answered, then nbgrader's Validate button (it saves
    first, then runs the notebook in grading mode): success."""
    server = start_student_lab(jupyter, handout)
    labpage.open_notebook(page, notebook_url(server))
    for pattern, variant in ((r'NotImplementedError\("Lab 1: train_one_epoch"\)', CORRECT),
                             (r'NotImplementedError\("Lab 1: evaluate"\)', CORRECT_EVALUATE)):
        labpage.set_source(page, labpage.cell_index(page, pattern), mutants.source(variant))
    labpage.set_markdown(page, labpage.cell_index(page, r"^YOUR ANSWER HERE"), ANSWER)
    page.locator(".jp-NotebookPanel:visible .validate-button").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=100_000)
    labpage.screenshot(page, "student-5-validate")
    expect(dialog).to_contain_text("Success! Your notebook passes all the tests.", timeout=1000)
