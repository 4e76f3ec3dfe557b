"""The autograder's shape: modules that import alone and without cycles, messages that survive their boundary."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder import channel
from autograder.channel import (CellScore, CheckLine, ExtraFile, KernelRequest, RecheckCell,
                                RecheckReply, RecheckSpec, Result, RunConfig, Task)
from autograder.sandbox.policy import Policy
from labutils.verdict import Verdict

PACKAGE = Path(__file__).resolve().parents[1] / "autograder"
pytestmark = pytest.mark.autograder

# autograder's floors, lowest first: a module may import its own package and any floor below, never one above (so
# the folder names say the architecture: the course is built without running anything, student code runs only in
# sandbox/, and run/ schedules tasks without knowing how results are written).
FLOORS = [{"layout", "process", "untrusted"}, {"channel"}, {"course"}, {"hidden"}, {"sandbox"}, {"run"}, {"results"},
          {"grade"}, {"gradescope"}, {"cli"}]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p): p for p in sorted(package.rglob("*.py")) if p.stem != "__main__"}


def _imported(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """The modules one ``from ... import`` names, resolved to absolute dotted names."""
    if node.level:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports, anywhere in the file (a function-level import counts too)."""
    modules = _modules(package)
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                found.update(_imported(name, path, node))
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {m for m in found if m in modules and m != name and not name.startswith(m + ".")}
    return graph


def floor(module: str) -> int:
    top = module.split(".")[1] if "." in module else module
    return next(i for i, names in enumerate(FLOORS) if top in names)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                cycle = visit(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start, [start])
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    graph = import_graph()
    assert {"autograder.channel", "autograder.course.nbgrader_setup", "autograder.run.task",
            "autograder.sandbox.client", "autograder.grade"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_import_cycles_in_labutils():
    """labutils has none either (checks/apart.py and calling.py imported each other until issue 47)"""
    graph = import_graph(PACKAGE.parent / "labutils")
    assert {"labutils.checks.apart", "labutils.checks.calling", "labutils.checks.evidence"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_packages_import_only_downwards():
    """Every module sits on a floor (FLOORS) and imports only its own package and the floors below it"""
    graph = import_graph()
    upward = [f"{m} imports {d}" for m, deps in graph.items() if m != "autograder" for d in sorted(deps)
              if d.split(".")[:2] != m.split(".")[:2] and floor(d) >= floor(m)]
    assert not upward, "\n".join(upward)
    assert graph["autograder.layout"] == set()  # where things are, known before anything else


def drawn_floors(text: str) -> list[set[str]]:
    """The floors of docs/architecture.md's drawing, lowest first: each line of its first code block names the
    modules and packages of one floor (``results/``, ``grade.py``) before the two-space gap of its description."""
    block = text.split("```\n", 2)[1]
    floors = []
    for line in block.splitlines():
        names = []
        for word in line.split():
            if not word.endswith(("/", ".py")):
                break
            names.append(word.removesuffix("/").removesuffix(".py"))
        floors.append(set(names))
    return floors[::-1]


def test_the_architecture_drawing_is_the_floors():
    """docs/architecture.md draws the floors this test enforces, in the same order"""
    drawn = drawn_floors((PACKAGE.parent / "docs" / "architecture.md").read_text())
    assert drawn == FLOORS, f"docs/architecture.md draws {drawn} (lowest first); the floors are {FLOORS}"


# the packages of this repository (pyproject's packages.find): a module imports alone when none of them is loaded yet
OURS = ("autograder", "labutils")


class _ModuleLevelImports(ast.NodeVisitor):
    """The modules a file imports as it is imported: a function's imports wait for its call, so they are skipped."""

    def __init__(self):
        self.found: set[str] = set()

    def visit_FunctionDef(self, node):
        pass

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node):
        self.found.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node):
        if not node.level and node.module:
            self.found.add(node.module)


def third_party_imports() -> list[str]:
    """What our packages import at module level from outside them and the standard library (torch, nbgrader...)."""
    visitor = _ModuleLevelImports()
    for package in OURS:
        for path in (PACKAGE.parent / package).rglob("*.py"):
            visitor.visit(ast.parse(path.read_text()))
    return sorted(m for m in visitor.found if m.split(".")[0] not in (*OURS, *sys.stdlib_module_names))


def _fork_server(preload: list[str], modules: list[str], ours: tuple[str, ...]) -> None:
    """Run in a fresh interpreter (its source is sent with ``-c``): import the third-party libraries once, then fork
    one child per module, which imports that module alone and prints why not. Standard library only."""
    import importlib
    import os
    import sys
    import traceback

    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # not installed: the child that needs it says so
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ours)
    assert not loaded, f"the preload imported modules of ours: {loaded}"
    for name in modules:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                importlib.import_module(name)
            except BaseException as exc:
                print(f"{name}: {traceback.format_exception_only(exc)[-1].strip()}", flush=True)
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            print(f"{name}: the child died ({os.waitstatus_to_exitcode(status)})", flush=True)


@pytest.mark.slow
def test_each_module_imports_alone():
    """Each module imports with no module of ours loaded before it (no module leans on another having been imported
    first). Each is imported in a child forked from one interpreter that has imported only the third-party libraries
    (torch, nbgrader...) our packages import: a fresh interpreter per module would import them again each time."""
    call = f"{_fork_server.__name__}({third_party_imports()!r}, {list(_modules())!r}, {OURS!r})"
    source = textwrap.dedent(inspect.getsource(_fork_server)) + "\n" + call
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not proc.stdout, proc.stdout


def test_assignment_and_config_written_once():
    """ASSIGNMENT is assigned in layout.py only, and only course/nbgrader_setup.py sets nbgrader's CourseDirectory
    (code, not text a module writes into a config file for Jupyter)."""
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    assigns_assignment = isinstance(target, ast.Name) and target.id == "ASSIGNMENT"
                    assert not assigns_assignment or path.name == "layout.py", path
                    sets_course = "attr='CourseDirectory'" in ast.dump(target)
                    assert not sets_course or path.name == "nbgrader_setup.py", f"{path}: {ast.unparse(target)}"


MESSAGES = [
    Task(id="ann--01_baseline", student="ann", notebook="01_baseline", path="/s/ann/01_baseline.ipynb",
         extra_files=[ExtraFile(name="data/x.csv", path="/s/ann/data/x.csv")]),
    RunConfig(template_db="/w/t.db", work_dir="/w", cell_timeout=30, notebook_timeout=90, memory_mb=6144, threads=1,
              data_dirs=["/d"], cache_dir="/c"),
    Result(id="ann--01_baseline", student="ann", notebook="01_baseline",
           tests=[CellScore(name="test_a", kind="auto", auto_score=2.0, needs_manual_grade=False,
                            verdict=Verdict(grade_id="test_a", passed=False, judged=False, points=0.0, max_points=2.0,
                                            blocked_by=["test_b"], causes=["order"], exercise="baseline",
                                            property_id="a", concept="a concept"))],
           notes=["a note"], timings={"kernel_s": 1.25, "total_s": 3.5}),
    KernelRequest(argv=["-f", "/k.json"], cwd="/w/t", env={"HOME": "/h"},
                  policy=Policy(write_dirs=["/w/t"], bind_ports=[5000], memory_mb=6144), log="/w/t/kernel.log"),
    RecheckSpec(cells=[RecheckCell(index=1, source="x = 1"), RecheckCell(index=2, grade_id="t", checks=[["a", "b"]])],
                cell_timeout=30),
    RecheckReply(status="exited", pid=12, lines=[CheckLine(grade_id="t", call=["a", "b"], seconds=0.5,
                                                           verdict=Verdict(grade_id="t", passed=False, message="no"))]),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_messages_round_trip_as_their_own_type(message):
    line = channel.encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = channel.decode(line)
    assert back == message and type(back) is type(message)
    nested = [v for v in vars(back).values() if isinstance(v, list) and v and not isinstance(v[0], (str, list))]
    for items in nested:  # nested messages come back as dataclasses, not dicts
        assert all(not isinstance(item, dict) for item in items)


def test_decode_refuses_what_is_not_a_message():
    for line in (b"not json", b'{"grade_id": "t", "passed": true}', b'{"type": "Task", "body": {"id": 1, "x": 2}}',
                 b'{"type": "Nope", "body": {}}'):
        with pytest.raises(channel.ChannelError):
            channel.decode(line)
    with pytest.raises(channel.ChannelError, match="expected"):
        channel.decode(channel.encode(MESSAGES[0]), Result)
    with pytest.raises(TypeError):
        channel.encode({"type": "Task"})


def test_line_reader_keeps_partial_lines(tmp_path):
    import os

    r, w = os.pipe()
    reader = channel.LineReader(r)
    line = channel.encode(MESSAGES[0])
    os.write(w, line[:10])
    assert reader.read() == []
    os.write(w, line[10:] + line)
    assert reader.read() == [MESSAGES[0], MESSAGES[0]]
    os.close(w)
    assert reader.read() is None
    os.close(r)


def test_the_pool_starts_the_slowest_notebooks_first():
    from autograder.run.pool import _order, cost
    from labutils.exercises import NOTEBOOKS

    tasks = [Task(id=f"{s}--{nb}", student=s, notebook=nb, path="x") for s in ("bo", "al")
             for nb in ("04_accumulation", "99_unknown", "00_data_tour")]
    order = [(t.notebook, t.student) for t in _order(tasks)]
    assert order == [("00_data_tour", "al"), ("00_data_tour", "bo"), ("99_unknown", "al"), ("99_unknown", "bo"),
                     ("04_accumulation", "al"), ("04_accumulation", "bo")]
    assert cost("99_unknown") == 1.0 and max((n.id for n in NOTEBOOKS), key=cost) == "00_data_tour"


FORKED_WORKER = """
import json, os, sys
from autograder.run import worker

others = os.pipe()  # what the grader holds besides: another worker's task pipe, the OUT lock
lock = open(sys.argv[1], "w")
tasks, results, zygote = os.pipe(), os.pipe(), os.pipe()
log = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT)
pid = os.fork()
if pid == 0:
    moved = worker._own_process(tasks[0], results[1], log, zygote[0], os.getppid())
    print("a stray print")
    os.write(moved[1], json.dumps({"moved": moved, "open": sorted(map(int, os.listdir("/proc/self/fd"))),
                                   "comm": open("/proc/self/comm").read().strip(),
                                   "own_session": os.getsid(0) == os.getpid()}).encode())
    os._exit(0)
os.close(results[1])
os.close(others[1])
seen = json.loads(os.read(results[0], 100000))
seen["other_pipe_ended"] = os.read(others[0], 1) == b""  # no copy of its write end is left open in the worker
os.waitpid(pid, 0)
print(json.dumps(seen))
"""


def test_a_forked_worker_keeps_only_its_own_files(tmp_path):
    """A local worker is a fork of the grader (it inherits the plan's imports): it must hold none of the grader's
    files, or closing one worker's task pipe would not end it while another worker held a copy."""
    proc = subprocess.run([sys.executable, "-c", FORKED_WORKER, str(tmp_path / "lock"), str(tmp_path / "worker.log")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout)
    assert seen["moved"] == [3, 4, 5]
    assert seen["open"] == [0, 1, 2, 3, 4, 5, 6]  # 6: the listing's own
    assert seen["other_pipe_ended"] and seen["own_session"] and seen["comm"] == "looplab-worker"
    assert (tmp_path / "worker.log").read_text() == "a stray print\n"


# --- one place for every grading option ---------------------------------------------------------------------------------


def test_grade_flags_and_defaults_come_from_grade_options():
    """``grade``'s flags are generated from GradeOptions: no default or help text is written twice."""
    from autograder import cli
    from autograder.grade import GradeOptions

    parse = cli.build_parser().parse_args
    assert cli.grade_options(parse(["grade", "subs", "--out", "out"])) == GradeOptions()
    given = parse(["grade", "subs", "--out", "out", "-j", "3", "--timeout-cell", "7", "--memory-limit", "4096",
                   "--regrade", "ann", "--require-isolation", "--keep-work", "--source", "src"])
    assert cli.grade_options(given) == GradeOptions(jobs=3, cell_timeout=7, memory_mb=4096, regrade=["ann"],
                                                    require_isolation=True, keep_work=True, source=Path("src"))
    assert cli.grade_options(parse(["grade", "subs", "--out", "out", "--regrade"])).regrade == []
