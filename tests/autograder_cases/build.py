"""Build a class of sample submissions at test time, with the grades each one must get.

Sources: the solutions (full marks on every autograded test), the student release (zero), mutants of the trace-check
corpus (``tests/mutants``) pasted into a solution notebook (exactly the intended test fails, with the corpus's
message), and one student per pathological case (broken files, hangs, crashes, a memory blow-up, edited tests,
monkeypatching, writing outside the folder). Most students submit only the notebook their case concerns, so the class
grades in minutes; the notebooks they leave out are "missing" and score 0.

Nothing here is committed output: every notebook is generated from ``solutions/`` and the release.
"""

from __future__ import annotations

import ast
import copy
import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

import mutants  # tests/ is on sys.path: pyproject.toml's pytest `pythonpath`
import stubs

ASSIGNMENT = "loop_lab"


@dataclass
class Test:
    notebook: str
    name: str  # grade_id
    points: float
    written: bool  # a written answer: graded by hand, 0 in grades.csv until then
    function: str | None  # the function its hidden test verifies
    property: str | None = None  # the graded property of that function (labutils.exercises)


@dataclass
class Student:
    name: str
    case: str  # what the submission exercises
    notebooks: dict[str, str | bytes | nbformat.NotebookNode] = field(default_factory=dict)
    extra_files: dict[str, str] = field(default_factory=dict)
    failing: set[tuple[str, str]] = field(default_factory=set)  # (notebook, test) that must fail
    passing_all: bool = True  # every autograded test of its valid notebooks passes, except ``failing``
    zero: bool = False  # every test of every notebook scores 0 (the untouched release)
    messages: dict[tuple[str, str], str] = field(default_factory=dict)  # a piece the test's message must contain
    note: str | None = None  # a piece one of the student's notes must contain
    unreadable: set[str] = field(default_factory=set)  # notebooks that must not even run


def do_nothing_student(sol: dict, tests: list[Test]) -> Student:
    """Every notebook, every graded function replaced by a do-nothing body with a plausible return value (the
    first non-release stub of each exercise): it must score 0 on every autograded test."""
    from labutils import exercises

    notebooks, failing = {}, set()
    for exercise in exercises.EXERCISES:
        stub = next(s for s in stubs.DO_NOTHING if s.exercise == exercise.id and "release" not in s.name)
        names = mutants.CONTRACT_NAMES[exercise.id]
        nb = notebooks.get(exercise.notebook, sol[exercise.notebook])
        notebooks[exercise.notebook] = with_function(nb, names, mutants.source(stub), mutants.IMPORTS)
        failing |= {(exercise.notebook, t.name) for t in tests_for(tests, exercise.notebook, names[0])}
    return Student("do-nothing", "a do-nothing body with a plausible return in every graded function: zero",
                   notebooks, failing=failing)


# correct idioms the grader itself once failed (issue 45); the rest of the correct corpus is judged apart (observer and
# judge, tests/test_evidence.py) without a grading run each: a notebook here costs ~10 s of the class's run
ENGINEER = (("resume_loads_by_hand", "07_crash_resume"), ("param_groups_generators", "08_stretch"))


def engineer_student(sol: dict) -> Student:
    """Correct answers in an experienced engineer's own idiom, each once wrongly failed through the grader (a generator
    of parameters called tampering, a manual torch.load crashing on lab 7's file): full marks on every autograded
    test."""
    by_name = {v.name: v for v in mutants.CORRECT}
    notebooks = {notebook: with_function(sol[notebook], mutants.CONTRACT_NAMES[by_name[name].exercise],
                                         mutants.source(by_name[name]), mutants.IMPORTS)
                 for name, notebook in ENGINEER}
    return Student("engineer", "correct idioms of an engineer: " + ", ".join(name for name, _ in ENGINEER), notebooks)


def load_tests(solutions: Path) -> list[Test]:
    """Every graded cell of the solutions, in notebook and cell order."""
    import re

    tests = []
    for path in sorted(solutions.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade"):
                m = re.search(r"""verify\(\s*["'][\w-]+["']\s*,\s*["'](\w+)["'](?:\s*,\s*["'](\w+)["'])?""",
                              cell.source)
                tests.append(Test(path.stem, meta["grade_id"], float(meta["points"]), bool(meta.get("solution")),
                                  m.group(1) if m else None, m.group(2) if m else None))
    return tests


def tests_for(tests: list[Test], notebook: str, function: str) -> list[Test]:
    """Every graded property test of ``function`` (a crash, a hang or a wrong signature fails them all)."""
    return [t for t in tests if t.notebook == notebook and t.function == function]


def test_for(tests: list[Test], notebook: str, function: str, check: str) -> Test:
    """The one property test that a failure with id ``check`` (labutils.checks) costs."""
    from labutils import exercises

    exercise = exercises.find(notebook, function)
    (prop,) = exercise.owner(check)
    return next(t for t in tests_for(tests, notebook, function) if t.property == prop.id)


def failing_tests(tests: list[Test], notebook: str, function: str, check: str) -> set[tuple[str, str]]:
    """(notebook, grade_id) of the tests a failure with id ``check`` fails: its property's, or all of them when the
    function could not be judged at all (labutils.checks.properties.GLOBAL)."""
    from labutils.checks.properties import GLOBAL

    if check in GLOBAL:
        return {(notebook, t.name) for t in tests_for(tests, notebook, function)}
    return {(notebook, test_for(tests, notebook, function, check).name)}


def variant_fails(tests: list[Test], notebook: str, function: str, variant) -> dict:
    """Student(failing=..., messages=...) for a submission with a corpus mutant as ``function``: the tests its check
    does not pass (the mutant's own property, with its message, and any property it leaves unjudged), exactly as
    the check in the notebook judges it."""
    from labutils import exercises
    from labutils.checks import properties

    verdicts = properties.verdicts(variant.exercise, mutants.run_check(variant))
    exercise = exercises.get(variant.exercise)
    failing = {exercise.grade_id(p) for p, v in verdicts.items() if not v.passed}
    keys = {(notebook, t.name) for t in tests_for(tests, notebook, function) if t.name in failing}
    own = failing_tests(tests, notebook, function, variant.expected_check)
    return {"failing": keys, "messages": {key: variant.expected_message for key in own}}


def all_of(tests: list[Test], notebook: str, function: str, message: str | None = None) -> dict:
    """Student(failing=..., messages=...) for a submission whose ``function`` fails every property test, each with
    ``message`` (a crash, a hang, a wrong signature: nothing could be judged)."""
    keys = {(notebook, t.name) for t in tests_for(tests, notebook, function)}
    return {"failing": keys, "messages": {key: message for key in keys} if message else {}}


# --- editing notebooks ---------------------------------------------------------------------------------------------------


def solution_cell(nb, function: str):
    """The solution cell that defines ``function``."""
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            tree = ast.parse(cell.source)
            if any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body):
                return cell
    raise LookupError(f"no solution cell defines {function}()")


def replace_functions(source: str, names: tuple[str, ...], new_source: str) -> str:
    """``source`` with the top-level definitions of ``names`` removed and ``new_source`` put where the first was."""
    tree = ast.parse(source)
    lines = source.splitlines()
    spans = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            spans.append((start, node.end_lineno))
    if not spans:
        raise LookupError(f"none of {names} is defined in the cell")
    out, cursor, inserted = [], 0, False
    for start, end in spans:
        out += lines[cursor:start]
        if not inserted:
            out += new_source.rstrip("\n").splitlines()
            inserted = True
        cursor = end
    out += lines[cursor:]
    return "\n".join(out) + "\n"


def with_function(nb, names: tuple[str, ...], new_source: str, imports: str = ""):
    """A copy of ``nb`` whose solution cell defines ``names`` by ``new_source`` instead."""
    nb = copy.deepcopy(nb)
    cell = solution_cell(nb, names[0])
    cell.source = (imports + "\n" if imports else "") + replace_functions(cell.source, names, new_source)
    for other in nb.cells:  # a pair defined in two cells (save / load): a later cell must not redefine one
        if other is not cell and other.cell_type == "code" and other.metadata.get("nbgrader", {}).get("solution"):
            defined = [n.name for n in ast.parse(other.source).body if isinstance(n, ast.FunctionDef)]
            for name in set(names) & set(defined):
                other.source = replace_functions(other.source, (name,), f"# {name} is defined above")
    return nb


def insert_cell(nb, before_function: str, source: str, after: bool = False):
    """A copy of ``nb`` with a new code cell just before (or after) the solution cell of ``before_function``."""
    nb = copy.deepcopy(nb)
    target = solution_cell(nb, before_function)
    index = nb.cells.index(target) + (1 if after else 0)
    nb.cells.insert(index, nbformat.v4.new_code_cell(source))
    return nb


def test_cell_index(nb, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


# --- the class -----------------------------------------------------------------------------------------------------------------

MUTANTS = [  # (corpus variant, notebook): one per notebook, plus a wrong signature and an exception
    ("normalize_no_255", "00_data_tour"),
    ("no_zero_grad", "01_baseline"),
    ("evaluate_no_eval", "01_baseline"),
    ("scheduler_before_optimizer", "02_scheduler"),
    ("clip_after_step", "03_clipping"),
    ("loss_not_divided", "04_accumulation"),
    ("clip_before_unscale", "05_amp"),
    ("checkpoint_no_rng", "06_checkpointing"),
    ("resume_off_by_one", "07_crash_resume"),
    ("resume_latest_by_file_time", "07_crash_resume"),  # the check's touch of an older file, seen by the grader too
    ("param_groups_decays_biases", "08_stretch"),
    ("missing_device", "01_baseline"),  # the wrong signature case
    ("typo_backwards", "01_baseline"),  # the exception case
]


def build_class(solutions: Path, release: Path, repo: Path, out_dir: Path) -> list[Student]:
    """Every sample student, with expectations; see :func:`write_class` to put them on disk."""
    tests = load_tests(solutions)
    sol = {p.stem: nbformat.read(p, as_version=4) for p in sorted(solutions.glob("*.ipynb"))}
    rel = {p.stem: p.read_bytes() for p in sorted(release.glob("*.ipynb"))}
    students = [
        Student("solutions", "the reference solutions: full marks", dict(sol)),
        Student("release", "the untouched student release: zero", dict(rel), passing_all=False, zero=True),
    ]
    by_name = {v.name: v for v in mutants.VARIANTS}
    for name, notebook in MUTANTS:
        variant = by_name[name]
        names = mutants.CONTRACT_NAMES[variant.exercise]
        nb = with_function(sol[notebook], names, mutants.source(variant), mutants.IMPORTS)
        students.append(Student(f"mutant-{name.replace('_', '-')}", f"corpus mutant {name}", {notebook: nb},
                                **variant_fails(tests, notebook, names[0], variant)))
    students.append(engineer_student(sol))
    students.append(do_nothing_student(sol, tests))
    students += pathological(sol, tests, repo, out_dir)
    return students


def pathological(sol: dict, tests: list[Test], repo: Path, out_dir: Path) -> list[Student]:
    t02 = tests_for(tests, "02_scheduler", "train_one_epoch")[0]  # the first property test of each function
    t01 = tests_for(tests, "01_baseline", "train_one_epoch")[0]
    t01e = tests_for(tests, "01_baseline", "evaluate")[0]

    def all02(message=None):
        return all_of(tests, "02_scheduler", "train_one_epoch", message)

    def all03(message=None):
        return all_of(tests, "03_clipping", "train_one_epoch", message)

    def only(notebook, variant):  # a corpus mutant as train_one_epoch
        return variant_fails(tests, notebook, "train_one_epoch", variants[variant])

    sig02 = "def train_one_epoch(model, loader, optimizer, scheduler, device):\n"
    sig03 = "def train_one_epoch(model, loader, optimizer, scheduler, max_norm, device):\n"
    good02 = solution_cell(sol["02_scheduler"], "train_one_epoch").source
    variants = {v.name: v for v in mutants.VARIANTS}
    s = []

    raw = nbformat.writes(sol["02_scheduler"])
    s.append(Student("broken-json", "a truncated .ipynb", {"02_scheduler": raw[: len(raw) // 2]},
                     unreadable={"02_scheduler"}, note="is not valid JSON"))
    s.append(Student("empty-file", "a 0-byte .ipynb", {"03_clipping": b""}, unreadable={"03_clipping"},
                     note="is empty"))
    s.append(Student("no-notebooks", "nothing gradable: a misnamed notebook and a text file",
                     {"02_scheduler (1)": sol["02_scheduler"]}, extra_files={"notes.txt": "see you\n"},
                     note="02_scheduler (1).ipynb ignored"))
    renamed = copy.deepcopy(sol["02_scheduler"])
    cell = solution_cell(renamed, "train_one_epoch")
    cell.source = cell.source.replace("def train_one_epoch(", "def train_one_epoch_v2(")
    s.append(Student("function-missing", "the graded function renamed", {"02_scheduler": renamed},
                     **all02("train_one_epoch")))
    # the never-ending cells below wait rather than spin: the same timeout, interrupt and kill, without a core burnt
    # for each timeout (test_autograder's cell limit); spinning cells are stopped in test_autograder's time-limit test
    s.append(Student("infinite-loop", "the graded function never returns (per-cell timeout)",
                     {"02_scheduler": with_function(sol["02_scheduler"], ("train_one_epoch",),
                                                    sig02 + "    import time\n    while True:\n"
                                                    "        time.sleep(0.05)\n")},
                     **all02("CellTimeoutError")))
    s.append(Student("ignores-interrupt", "a cell that ignores the interrupt: the kernel is killed",
                     {"03_clipping": insert_cell(sol["03_clipping"], "train_one_epoch",
                                                 "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                                 "while True:\n    time.sleep(0.05)\n")},
                     **all03("NotRun")))
    s.append(Student("os-exit", "os._exit() in a cell: the kernel dies",
                     {"02_scheduler": insert_cell(sol["02_scheduler"], "train_one_epoch", "import os\nos._exit(3)\n",
                                                  after=True)},
                     **all02("the kernel died")))
    s.append(Student("sys-exit", "sys.exit() inside the graded function",
                     {"03_clipping": with_function(sol["03_clipping"], ("train_one_epoch",),
                                                   sig03 + "    import sys\n    sys.exit(0)\n")},
                     **all03("SystemExit")))
    # in its own PID namespace the kernel is PID 1, which its own SIGKILL does not reach: it lives on, and the
    # re-run's observer (not PID 1) dies of the same cell, so the tests are lost there instead
    s.append(Student("kernel-killed", "the kernel kills itself with SIGKILL",
                     {"02_scheduler": insert_cell(sol["02_scheduler"], "train_one_epoch",
                                                  "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
                                                  after=True)},
                     **all02("stopped before it finished" if _pid_layer() else "the kernel died")))
    s.append(Student("memory-hog", "the graded function allocates without bound (address-space limit)",
                     {"02_scheduler": with_function(sol["02_scheduler"], ("train_one_epoch",),
                                                    sig02 + "    hog = []\n    while True:\n"
                                                    "        hog.append(torch.empty(1 << 28, dtype=torch.uint8))\n")},
                     **all02("can't allocate memory")))
    # test cells edited and deleted: the instructor's versions come back from the gradebook
    edited = with_function(sol["01_baseline"], ("train_one_epoch",), mutants.source(variants["no_zero_grad"]),
                           mutants.IMPORTS)
    edited.cells[test_cell_index(edited, t01.name)].source = 'print("all tests passed")\n'
    del edited.cells[test_cell_index(edited, t01e.name)]
    s.append(Student("edited-tests", "a test cell emptied, another deleted, with a buggy function",
                     {"01_baseline": edited}, **only("01_baseline", "no_zero_grad")))
    # broken nbgrader metadata (nbgrader itself would refuse the notebook): repaired from the gradebook
    broken = copy.deepcopy(sol["02_scheduler"])
    broken.cells[test_cell_index(broken, t02.name)].metadata["nbgrader"].update(points=-5, locked=False,
                                                                               schema_version=99)
    solution_cell(broken, "train_one_epoch").metadata["nbgrader"] = "not a dict"
    broken.cells[0].metadata["nbgrader"] = {"grade": True, "grade_id": "made_up", "points": 100}
    s.append(Student("broken-metadata", "corrupted nbgrader metadata (points, schema, a made-up test)",
                     {"02_scheduler": broken}))
    # monkeypatching the checks so the visible test passes: the hidden test re-runs on pristine modules
    cheat = with_function(sol["02_scheduler"], ("train_one_epoch",),
                          mutants.source(variants["scheduler_before_optimizer"]), mutants.IMPORTS)
    cheat = insert_cell(cheat, "train_one_epoch", CHEAT_CHECKS, after=True)
    s.append(Student("patches-checks", "replaces labutils.checks functions and CheckReport.passed",
                     {"02_scheduler": cheat}, **only("02_scheduler", "scheduler_before_optimizer")))
    cheat3 = with_function(sol["03_clipping"], ("train_one_epoch",), mutants.source(variants["clip_after_step"]),
                           mutants.IMPORTS)
    cheat3 = insert_cell(cheat3, "train_one_epoch", CHEAT_VERIFY, after=True)
    s.append(Student("patches-torch", "replaces autograder.hidden.verify and torch's clip_grad_norm_ and allclose",
                     {"03_clipping": cheat3}, **only("03_clipping", "clip_after_step")))
    forge = insert_cell(cheat, "train_one_epoch", FORGE_RESULTS, after=True)
    s.append(Student("forges-results", "writes look-alike hidden-test results to every descriptor, then exits",
                     {"02_scheduler": forge}, **all02("could not check")))
    during = insert_cell(cheat, "train_one_epoch", PATCH_DURING_CHECK, after=True)
    s.append(Student("patches-during-check", "the graded function patches torch while it is being checked",
                     {"02_scheduler": during}, **all02("while it was being checked")))
    # writes outside its folder and reads what it must not: all blocked, and a correct function still scores
    escape = insert_cell(sol["02_scheduler"], "train_one_epoch", escape_source(repo, out_dir), after=True)
    s.append(Student("escape", "writes to the repo and the gradebook, reads the solutions and the reference loop",
                     {"02_scheduler": escape}))
    ref = variants["uses_reference_loop"]
    s.append(Student("reference-loop", "calls labutils.reference.loop (not in the handout, not importable in grading)",
                     {"01_baseline": with_function(sol["01_baseline"], ("train_one_epoch",), mutants.source(ref),
                                                   mutants.IMPORTS)},
                     **all_of(tests, "01_baseline", "train_one_epoch", "No module named 'labutils.reference'")))
    assert good02  # the untouched solution cell the cases above start from
    return s


CHEAT_CHECKS = '''\
from labutils import checks as _checks


class _Pass:
    passed = True
    failures = []

    def assert_passed(self):
        return self

    def __str__(self):
        return "all checks passed"


_checks.check_train_one_epoch = lambda *args, **kwargs: _Pass()
_checks.CheckReport.passed = property(lambda self: True)
_checks.CheckReport.assert_passed = lambda self: self
'''

FORGE_RESULTS = '''\
import json
import os

if not hasattr(get_ipython(), "kernel"):  # only in the grader's re-run, not in the kernel
    for fd in range(3, 12):
        try:
            os.write(fd, (json.dumps({"grade_id": "test_train_one_epoch", "call": ["02_scheduler", "train_one_epoch"],
                                      "passed": True, "message": ""}) + "\\n").encode())
        except OSError:
            pass
    os._exit(0)
'''

PATCH_DURING_CHECK = '''\
_inner_train = train_one_epoch


def train_one_epoch(model, loader, optimizer, scheduler, device):
    import torch

    torch.allclose = lambda *args, **kwargs: True
    torch.isclose = lambda a, b, *args, **kwargs: torch.ones_like(torch.as_tensor(a), dtype=torch.bool)
    return _inner_train(model, loader, optimizer, scheduler, device)
'''

CHEAT_VERIFY = '''\
import sys
import types

import torch
from labutils import checks as _checks

_fake = types.ModuleType("autograder.hidden")
_fake.verify = lambda *args, **kwargs: None
sys.modules["autograder.hidden"] = _fake
torch.allclose = lambda *args, **kwargs: True
torch.nn.utils.clip_grad_norm_ = lambda parameters, max_norm, *args, **kwargs: torch.tensor(1.0)
_checks.check_train_one_epoch = lambda *args, **kwargs: type("R", (), {"passed": True, "assert_passed": lambda s: s})()
'''


def escape_source(repo: Path, out_dir: Path) -> str:
    targets = [repo / "solutions" / ASSIGNMENT / "HACKED.txt", repo / "HACKED.txt", out_dir / "gradebook.db",
               out_dir / "HACKED.txt", Path("/tmp/looplab-hacked.txt")]
    reads = [repo / "solutions" / ASSIGNMENT / "02_scheduler.ipynb", repo / "labutils" / "loop.py",
             out_dir / "gradebook.db"]
    return (
        "attempts = {}\n"
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        with open(path, 'a') as f:\n"
        "            f.write('hacked')\n"
        "        attempts[path] = 'WROTE'\n"
        "    except OSError as exc:\n"
        "        attempts[path] = type(exc).__name__\n"
        f"for path in {[str(r) for r in reads]!r}:\n"
        "    try:\n"
        "        open(path, 'rb').read(10)\n"
        "        attempts[path] = 'READ'\n"
        "    except OSError as exc:\n"
        "        attempts[path] = type(exc).__name__\n"
        "try:\n"
        "    import labutils.reference.loop\n"
        "    attempts['import labutils.reference.loop'] = 'IMPORTED'\n"
        "except ImportError as exc:\n"
        "    attempts['import labutils.reference.loop'] = type(exc).__name__\n"
        "print(attempts)\n"
    )


def _pid_layer() -> bool:
    """Does the grader give each task a PID namespace on this machine?"""
    from autograder.sandbox import isolation

    return not isolation.probe()["pid"]


def write_class(students: list[Student], dest: Path) -> None:
    for st in students:
        folder = dest / st.name
        folder.mkdir(parents=True)
        for nb_id, content in st.notebooks.items():
            path = folder / f"{nb_id}.ipynb"
            if isinstance(content, bytes):
                path.write_bytes(content)
            elif isinstance(content, str):
                path.write_text(content)
            else:
                nbformat.write(content, path)
        for name, text in st.extra_files.items():
            (folder / name).write_text(text)


def expected_grades(students: list[Student], tests: list[Test]) -> list[dict]:
    """The exact grades.csv rows: autograded points of passing tests; written answers, missing and broken: 0."""
    notebooks = sorted({t.notebook for t in tests})
    rows = []
    for st in sorted(students, key=lambda s: s.name):
        for nb in notebooks:
            nb_tests = [t for t in tests if t.notebook == nb]
            graded = nb in st.notebooks and nb not in st.unreadable and not st.zero
            score = sum(t.points for t in nb_tests
                        if graded and not t.written and (nb, t.name) not in st.failing)
            rows.append({"student": st.name, "notebook": nb, "score": _fmt(score),
                         "max_score": _fmt(sum(t.points for t in nb_tests))})
    return rows


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
