"""Loop Lab as a Gradescope "Autograder" assignment: the zip Gradescope takes, and what grades one submission in it.

Why: many courses collect and grade work on Gradescope. Its autograder contract is a zip holding ``setup.sh`` (run
once, as root, to build the image) and ``run_autograder`` (run for every submission), unpacked into
``/autograder/source``; the student's files are in ``/autograder/submission`` and the grader writes
``/autograder/results/results.json``: a list of tests, each with ``name``, ``score``, ``max_score``, ``status``,
``output`` and ``visibility`` (``visible``, ``hidden``, ``after_due_date``, ``after_published``), plus a top-level
``output`` and ``stdout_visibility``. Questions graded by hand are Gradescope's own "manual" questions, added beside
the autograder in its outline; they are not in ``results.json``.

- :func:`build_zip` (``python -m autograder gradescope --out autograder.zip``) packs this repository's grader and
  reference code, the assignment's source (hidden tests included: the zip goes to Gradescope, never to students), the
  data when this machine has it, and the two scripts.
- :func:`run` (``run_autograder`` calls ``python -m autograder gradescope-run``) grades the submission as one student
  with :func:`autograder.grade.grade`, confined as far as the container allows (the grader says which layers it could
  not apply; that goes to the instructor-only stdout), and turns the student's record into ``results.json``: one
  test per graded property with its points and the check's message, a hidden test's shown only after the scores
  are published. Late penalties are left to Gradescope's own late policy.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .grade import GradeOptions, grade
from .layout import ASSIGNMENT, REPO_ROOT
from .results.record import StudentRecord

ROOT_ENV = "GRADESCOPE_ROOT"  # where Gradescope's folders are (default /autograder): the tests point it elsewhere
DEFAULT_ROOT = Path("/autograder")
REPO_IN_ZIP = "loop-lab"  # the repository's folder inside /autograder/source
DATA_IN_ZIP = "data"
STUDENT = "student"  # the one student a Gradescope run grades
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


@dataclass(frozen=True)
class GradescopeLayout:
    """Gradescope's folders under one root (``/autograder`` there; anywhere in a test)."""

    root: Path

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def submission(self) -> Path:
        return self.root / "submission"

    @property
    def results(self) -> Path:
        return self.root / "results" / "results.json"


@dataclass
class GradescopeTest:
    """One entry of results.json's ``tests`` (Gradescope's field names)."""

    name: str
    number: str
    score: float
    max_score: float
    status: str  # passed | failed
    output: str
    visibility: str  # visible | after_published (a hidden test)


@dataclass
class GradescopeResults:
    """results.json (Gradescope's field names; its ``score`` left out so that Gradescope sums the tests)."""

    tests: list[GradescopeTest]
    output: str
    execution_time: float
    stdout_visibility: str = "hidden"  # the grader's log (confinement, timings) is for the instructor
    extra_data: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"


# --- the zip ------------------------------------------------------------------------------------------------------------


def _add(z: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # fixed: the same code gives the same zip
    info.external_attr = (0o755 if executable else 0o644) << 16 | stat.S_IFREG << 16
    info.compress_type = zipfile.ZIP_STORED if name.endswith(".gz") else zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def _code_files(root: Path) -> list[Path]:
    return sorted(p for d in PACKED for p in (root / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix != ".pyc")


def build_zip(dest: Path, root: Path = REPO_ROOT, source: Path | None = None, data: bool = True) -> list[str]:
    """Write Gradescope's autograder zip to ``dest``; the names it holds."""
    from labutils.data_files import RAW_FILES, find_raw_dir

    source = Path(source or root / "solutions" / ASSIGNMENT)
    notebooks = sorted(source.glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"{source} holds no notebooks: give the assignment's source with --source")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w") as z:
        _add(z, "setup.sh", SETUP_SH.encode(), executable=True)
        _add(z, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
        for path in _code_files(root) + [root / f for f in PACKED_FILES]:
            _add(z, f"{REPO_IN_ZIP}/{path.relative_to(root)}", path.read_bytes())
        for path in notebooks:  # the source run_autograder grades against, wherever it came from
            _add(z, f"{REPO_IN_ZIP}/solutions/{ASSIGNMENT}/{path.name}", path.read_bytes())
        raw = find_raw_dir() if data else None
        for name in RAW_FILES if raw else ():
            _add(z, f"{DATA_IN_ZIP}/{name}", (raw / name).read_bytes())
        return z.namelist()


# --- one submission ---------------------------------------------------------------------------------------------------


def hidden_tests(source: Path) -> set[tuple[str, str]]:
    """(notebook, grade id) of every test cell holding hidden tests in the assignment's source."""
    import nbformat

    from .course.cells import HIDDEN_REGION

    found = set()
    for path in sorted(Path(source).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and HIDDEN_REGION.search(cell.source):
                found.add((path.stem, meta["grade_id"]))
    return found


def to_results(record: StudentRecord, hidden: set[tuple[str, str]], seconds: float) -> GradescopeResults:
    """The student's record (``OUT/<student>.json``) as results.json: autograded tests only, the written answers
    left to Gradescope's manual questions."""
    tests, manual = [], []
    for i, t in enumerate(record.tests, start=1):
        if t.kind == "manual":
            manual.append(f"{t.notebook}: {t.name} ({t.max_points:g} points)")
            continue
        tests.append(GradescopeTest(
            name=f"{t.notebook}: {t.name}", number=str(i), score=t.points, max_score=t.max_points,
            status="passed" if t.passed else "failed", output=t.message or ("passed" if t.passed else ""),
            visibility="after_published" if (t.notebook, t.name) in hidden else "visible"))
    auto = sum(t.max_score for t in tests)
    lines = [f"Autograded by Loop Lab: {sum(t.score for t in tests):g} of {auto:g} points."]
    if manual:
        lines.append("Graded by hand on Gradescope: " + "; ".join(manual) + ".")
    lines += [f"Note: {note}" for note in record.notes]
    lines += [f"{nb}: {'; '.join(n.notes)}" for nb, n in record.notebooks.items() if n.notes]
    return GradescopeResults(tests=tests, output="\n".join(lines), execution_time=round(seconds, 1))


def _submission_folder(layout: GradescopeLayout, work: Path) -> Path:
    """SUBMISSIONS for :func:`grade`: the uploaded files as one student's folder (links stay links and are refused
    by the grader, as in any submission)."""
    subs = work / "submissions"
    shutil.copytree(layout.submission, subs / STUDENT, symlinks=True)
    return subs


def run(layout: GradescopeLayout, source: Path | None = None) -> int:
    """Grade ``layout.submission`` and write ``layout.results``; 0 when graded, 1 when it could not be (results.json
    then says why, with no test, so Gradescope shows the reason rather than a missing file)."""
    started = time.monotonic()
    source = Path(source or REPO_ROOT / "solutions" / ASSIGNMENT)
    layout.results.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="looplab-gradescope-") as tmp:
        work = Path(tmp)
        try:
            result = grade(_submission_folder(layout, work), work / "out",
                           GradeOptions(jobs=min(2, os.cpu_count() or 1), source=source), root=REPO_ROOT)
            record = StudentRecord.from_json((result.out / f"{STUDENT}.json").read_text())
            log = (result.out / "grading.log").read_text(errors="replace")
        except Exception as exc:  # the student sees why, the instructor the traceback on stdout
            import traceback

            traceback.print_exc(file=sys.stdout)
            failed = GradescopeResults(tests=[], output=f"The autograder could not grade this submission "
                                       f"({type(exc).__name__}: {exc}).", execution_time=time.monotonic() - started)
            layout.results.write_text(failed.to_json())
            return 1
        print(log)  # stdout: the instructor's (confinement layers, each notebook's line)
        results = to_results(record, hidden_tests(source), time.monotonic() - started)
        layout.results.write_text(results.to_json())
    return 0


def layout_from_env(root: Path | None) -> GradescopeLayout:
    """``--root``, else ``$GRADESCOPE_ROOT``, else ``/autograder``."""
    return GradescopeLayout(Path(root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT))
