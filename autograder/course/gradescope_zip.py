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

SETUP_SH = f"""\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (choose a base image with Python 3.11+).
set -euo pipefail
cd /autograder/source/{REPO_IN_ZIP}
apt-get update -qq && apt-get install -y -qq python3-venv python3-pip libseccomp2 >/dev/null
python3 -m venv /autograder/source/.venv
/autograder/source/.venv/bin/pip install -q --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt
/autograder/source/.venv/bin/pip install -q -e .
"""

RUN_AUTOGRADER = f"""\
#!/usr/bin/env bash
# Gradescope runs this for every submission: grade $ROOT/submission, write $ROOT/results/results.json.
set -euo pipefail
ROOT="${{{ROOT_ENV}:-/autograder}}"
PYTHON="${{LOOPLAB_PYTHON:-$ROOT/source/.venv/bin/python}}"
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
        _add(z, "setup.sh", SETUP_SH.encode(), executable=True)
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
