"""The zip a Gradescope "Autograder" assignment takes, beside the students' handout (:mod:`.handout`).

Gradescope's autograder contract is a zip holding ``setup.sh`` (run once, as root, to build the image) and
``run_autograder`` (run for every submission), unpacked into ``/autograder/source``. :func:`build_zip` (``python -m
autograder gradescope --out autograder.zip``) packs this repository's grader and reference code, the assignment's
source (hidden tests included: the zip goes to Gradescope, never to students), the data when this machine has it,
the course's deadlines.toml when given (its late policy: :func:`autograder.results.handin.from_gradescope`), and the
two scripts; ``run_autograder`` calls ``python -m autograder gradescope-run`` (:mod:`autograder.gradescope`).
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

from ..layout import ASSIGNMENT, GRADESCOPE_ROOT_ENV as ROOT_ENV, GRADESCOPE_DEADLINES, REPO_ROOT

REPO_IN_ZIP = "loop-lab"  # the repository's folder inside /autograder/source
DATA_IN_ZIP = "data"
PACKED = ("autograder", "labutils")  # the grader's code; plus the files in PACKED_FILES and the assignment's source
PACKED_FILES = ("pyproject.toml", "requirements.txt")

VENV_IN_SOURCE = ".venv"  # setup.sh's virtualenv, beside the repository in /autograder/source

# Gradescope runs setup.sh once, as root, when it builds the autograder's image. Its default base image is Ubuntu
# 22.04, whose python3 is 3.10: the course's pins need PINS_PYTHON or newer. So: the newest python3.X on the image that
# is new enough, else Ubuntu's own python3.11 (22.04 has it in universe; Otter-Grader's setup, too, installs the
# Python it needs rather than trusting the image's), else one line saying what to choose, and exit 1. torch and
# torchvision come from PyTorch's CPU index (the CUDA build is gigabytes of libraries no autograder machine uses, and
# holds more memory in every process: docs/measurements.md), then the rest of the pins. Paths are the script's own
# folder's, which is /autograder/source on Gradescope (a test runs it elsewhere, with stand-ins for apt-get and Python).
SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (its default: Ubuntu 22.04, Python 3.10).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
SOURCE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
VENV="$SOURCE/{venv}"
NEED={need_dotted}
stop() {{ echo "setup.sh: $*" >&2; exit 1; }}
new_enough() {{ "$1" -c 'import sys; sys.exit(sys.version_info[:2] < {need_tuple})' 2>/dev/null; }}
has_venv() {{ "$1" -c 'import ensurepip, venv' 2>/dev/null; }}
find_python() {{
  for name in python3.14 python3.13 python3.12 python3.11 python3; do
    if command -v "$name" >/dev/null && new_enough "$name" && has_venv "$name"; then command -v "$name"; return 0; fi
  done
  return 1
}}
image="$(python3 --version 2>&1 || echo 'no python3')"
apt-get update -qq >/dev/null || echo "setup.sh: apt-get update failed" >&2
if ! PYTHON="$(find_python)"; then
  apt-get install -y -qq python$NEED python$NEED-venv >/dev/null || true
  PYTHON="$(find_python)" || stop "Loop Lab's pinned packages need Python $NEED or newer with venv; this image has \\
$image and apt-get could not install python$NEED: choose a base image with Python $NEED+ in the autograder's settings"
fi
echo "setup.sh: $("$PYTHON" --version 2>&1) ($PYTHON)"
apt-get install -y -qq libseccomp2 >/dev/null || echo "setup.sh: libseccomp2 not installed: no network filter" >&2
cd "$SOURCE/{repo}"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q {torch_pins} --index-url {cpu_index}
"$VENV/bin/pip" install -q -r requirements.txt
"$VENV/bin/pip" install -q --no-deps -e .
"$VENV/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is not None)' \\
  || stop "torch is not PyTorch's CPU build here: see $VENV/bin/pip list"
"""


def setup_sh(root: Path = REPO_ROOT) -> str:
    """setup.sh for this repository's pins (see :data:`SETUP_SH`)."""
    from labutils.versions import CPU_INDEX

    from .handout import PINS_PYTHON, torch_pins

    return SETUP_SH.format(need_dotted=".".join(map(str, PINS_PYTHON)), need_tuple=PINS_PYTHON, repo=REPO_IN_ZIP,
                           venv=VENV_IN_SOURCE, torch_pins=" ".join(torch_pins(root)), cpu_index=CPU_INDEX)


RUN_AUTOGRADER = f"""\
#!/usr/bin/env bash
# Gradescope runs this for every submission: grade $ROOT/submission, write $ROOT/results/results.json.
set -euo pipefail
ROOT="${{{ROOT_ENV}:-/autograder}}"
PYTHON="${{LOOPLAB_PYTHON:-$ROOT/source/{VENV_IN_SOURCE}/bin/python}}"
if [ -d "$ROOT/source/{DATA_IN_ZIP}" ]; then export LAB_DATA_DIR="$ROOT/source/{DATA_IN_ZIP}"; fi
cd "$ROOT/source/{REPO_IN_ZIP}"
exec "$PYTHON" -m autograder gradescope-run --root "$ROOT"
"""


def _add(z: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # fixed: the same code gives the same zip
    info.external_attr = (0o755 if executable else 0o644) << 16 | stat.S_IFREG << 16
    info.compress_type = zipfile.ZIP_STORED if name.endswith(".gz") else zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def _code_files(root: Path) -> list[Path]:
    return sorted(p for d in PACKED for p in (root / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix != ".pyc")


def build_zip(dest: Path, root: Path = REPO_ROOT, source: Path | None = None, data: bool = True,
              deadlines: Path | None = None) -> list[str]:
    """Write Gradescope's autograder zip to ``dest``; the names it holds. ``deadlines``: the course's deadlines.toml
    (checked by the caller), whose late policy run_autograder applies (its dates are Gradescope's)."""
    from labutils.data_files import RAW_FILES, find_raw_dir

    source = Path(source or root / "solutions" / ASSIGNMENT)
    notebooks = sorted(source.glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"{source} holds no notebooks: give the assignment's source with --source")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w") as z:
        _add(z, "setup.sh", setup_sh(root).encode(), executable=True)
        if deadlines is not None:
            _add(z, GRADESCOPE_DEADLINES, Path(deadlines).read_bytes())
        _add(z, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
        for path in _code_files(root) + [root / f for f in PACKED_FILES]:
            _add(z, f"{REPO_IN_ZIP}/{path.relative_to(root)}", path.read_bytes())
        for path in notebooks:  # the source run_autograder grades against, wherever it came from
            _add(z, f"{REPO_IN_ZIP}/solutions/{ASSIGNMENT}/{path.name}", path.read_bytes())
        raw = find_raw_dir() if data else None
        for name in RAW_FILES if raw else ():
            _add(z, f"{DATA_IN_ZIP}/{name}", (raw / name).read_bytes())
        return z.namelist()
