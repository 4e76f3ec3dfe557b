"""The autograder's shape: modules that import alone and without cycles, messages that survive their boundary."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import channel
from autograder.channel import (CellScore, CheckLine, ExtraFile, KernelRequest, RecheckCell, RecheckOutcome,
                                RecheckReply, RecheckSpec, Result, RunConfig, Task)
from autograder.sandbox import Policy

PACKAGE = Path(__file__).resolve().parents[1] / "autograder"
pytestmark = pytest.mark.autograder


def _modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__main__")


def import_graph() -> dict[str, set[str]]:
    """module -> the autograder modules it imports, anywhere in the file (a function-level import counts too)."""
    graph = {}
    for name in _modules():
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    found.add(node.module.split(".")[0])
                elif node.level == 1:
                    found |= {alias.name for alias in node.names}
                elif node.module and node.module.startswith("autograder."):
                    found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("autograder.")}
        graph[name] = {m for m in found if m in _modules() and m != name}
    return graph


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
    assert {"channel", "course", "task", "zygote_client", "grade"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))
    assert graph["channel"] <= {"sandbox"}  # the channel sits below everything that talks over it
    assert graph["course"] == set()


@pytest.mark.slow
def test_each_module_imports_alone():
    failures = []
    for name in _modules():
        proc = subprocess.run([sys.executable, "-c", f"import autograder.{name}"], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            failures.append(f"autograder.{name}: {proc.stderr.strip().splitlines()[-1]}")
    assert not failures, "\n".join(failures)


def test_assignment_and_config_written_once():
    """ASSIGNMENT is assigned in course.py only, and only course.py sets nbgrader's CourseDirectory (code, not text a
    module writes into a config file for Jupyter)."""
    for path in PACKAGE.glob("*.py"):
        if path.name == "course.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    assert not (isinstance(target, ast.Name) and target.id == "ASSIGNMENT"), path.name
                    assert "attr='CourseDirectory'" not in ast.dump(target), f"{path.name}: {ast.unparse(target)}"


MESSAGES = [
    Task(id="ann--01_baseline", student="ann", notebook="01_baseline", path="/s/ann/01_baseline.ipynb",
         extra_files=[ExtraFile(name="data/x.csv", path="/s/ann/data/x.csv")]),
    RunConfig(template_db="/w/t.db", work_dir="/w", cell_timeout=30, notebook_timeout=90, memory_mb=6144, threads=1,
              data_dirs=["/d"], cache_dir="/c", zygote_socket=None),
    Result(id="ann--01_baseline", student="ann", notebook="01_baseline",
           tests=[CellScore(name="test_a", kind="auto", points=2.0, max_points=2.0, passed=True, auto_score=2.0,
                            needs_manual_grade=False, message="")],
           notes=["a note"], timings={"kernel_s": 1.25, "total_s": 3.5},
           rechecks=[RecheckOutcome(grade_id="test_a", call=["01_baseline", "train_one_epoch"], passed=True)]),
    KernelRequest(argv=["-f", "/k.json"], cwd="/w/t", env={"HOME": "/h"},
                  policy=Policy(write_dirs=["/w/t"], bind_ports=[5000], memory_mb=6144), log="/w/t/kernel.log"),
    RecheckSpec(cells=[RecheckCell(index=1, source="x = 1"), RecheckCell(index=2, grade_id="t", checks=[["a", "b"]])],
                cell_timeout=30),
    RecheckReply(status="exited", pid=12, lines=[CheckLine(grade_id="t", call=["a", "b"], passed=False, message="no",
                                                           seconds=0.5)]),
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
    from autograder.pool import _order, cost
    from labutils.exercises import NOTEBOOKS

    tasks = [Task(id=f"{s}--{nb}", student=s, notebook=nb, path="x") for s in ("bo", "al")
             for nb in ("04_accumulation", "99_unknown", "00_data_tour")]
    order = [(t.notebook, t.student) for t in _order(tasks)]
    assert order == [("00_data_tour", "al"), ("00_data_tour", "bo"), ("99_unknown", "al"), ("99_unknown", "bo"),
                     ("04_accumulation", "al"), ("04_accumulation", "bo")]
    assert cost("99_unknown") == 1.0 and max((n.id for n in NOTEBOOKS), key=cost) == "00_data_tour"
