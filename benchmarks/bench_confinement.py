"""Does a hostile neighbour slow an honest student down? ``python benchmarks/bench_confinement.py`` (root, every
isolation layer: the grader runs with ``--require-isolation``).

Grades a control student (the solutions of labs 02, 03 and 06) twice with ``autograder grade -j 2``: alone, then in
a class where a Python fork bomb and a memory hog (each in a lab 02 notebook, the code of
``tests/test_confinement_class.py``) are graded beside it. Reports the control's seconds per notebook (as the parent
saw each task, hand-out to result) in each run and the ratio, against the target of at most 1.5 (the issue measured
2.4 s alone against 116-261 s beside a fork bomb before each task had its own cgroup). The whole run sits in a pids
and memory cgroup of its own, so a regression cannot take the machine down.

``--rounds N`` repeats both runs (median per notebook); ``--json PATH`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from autograder_cases import build  # noqa: E402
from test_confinement_class import MEMORY_HOG, PYTHON_FORK_BOMB, SOLUTIONS, Fence  # noqa: E402

CONTROL_NOTEBOOKS = ("02_scheduler", "03_clipping", "06_checkpointing")
TARGET = 1.5


def write_class(folder: Path, with_attackers: bool) -> None:
    sol = {nb: build.nbformat.read(SOLUTIONS / f"{nb}.ipynb", as_version=4) for nb in CONTROL_NOTEBOOKS}
    students = [build.Student("control", "untouched", dict(sol))]
    if with_attackers:
        for name, cell in (("fork-bomb", PYTHON_FORK_BOMB), ("memory-hog", MEMORY_HOG)):
            students.append(build.Student(name, "attacker", {"02_scheduler": build.insert_cell(
                sol["02_scheduler"], "train_one_epoch", cell)}, passing_all=False))
    build.write_class(students, folder)


def control_run(tmp: Path, with_attackers: bool, fence: Fence) -> dict[str, tuple[float, float]]:
    """The control's (seconds, score) per notebook in one graded class."""
    shutil.rmtree(tmp, ignore_errors=True)
    write_class(tmp / "submissions", with_attackers)
    command = [sys.executable, "-m", "autograder", "grade", str(tmp / "submissions"), "--out", str(tmp / "out"),
               "-j", "2", "--require-isolation"]
    proc = subprocess.run([*fence.prefix(), *command], cwd=REPO, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"grading failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    record = json.loads((tmp / "out" / "control.json").read_text())
    graded = {nb: v for nb, v in record["notebooks"].items() if nb in CONTROL_NOTEBOOKS}
    if any(v["status"] != "graded" for v in graded.values()):
        sys.exit(f"the control was not graded: {graded}")
    return {nb: (v["seconds"], v["score"]) for nb, v in graded.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="runs of each kind (default: 1)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("run as root: the attackers are only safe to start with every isolation layer (cgroups need root)")
    fence = Fence()
    tmp = Path(tempfile.mkdtemp(prefix="bench-confinement-"))
    runs: dict[str, list[dict[str, float]]] = {"alone": [], "beside": []}
    try:
        for _ in range(args.rounds):
            for kind in runs:
                graded = control_run(tmp / kind, kind == "beside", fence)
                runs[kind].append({nb: seconds for nb, (seconds, _) in graded.items()})
                scores = {nb: score for nb, (_, score) in graded.items()}
                if kind == "alone":
                    clean = scores
                elif scores != clean:
                    sys.exit(f"the control scored {scores} beside the attackers, {clean} alone: a neighbour got in")
    finally:
        fence.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = {}
    print(f"the control's seconds per notebook, -j 2, {os.cpu_count()} CPU(s), median of {args.rounds} run(s) each:")
    print(f"  {'notebook':18s}{'alone':>8s}{'beside':>8s}{'ratio':>8s}")
    for nb in CONTROL_NOTEBOOKS:
        alone = statistics.median(r[nb] for r in runs["alone"])
        beside = statistics.median(r[nb] for r in runs["beside"])
        rows[nb] = {"alone_s": alone, "beside_s": beside, "ratio": round(beside / alone, 2)}
        print(f"  {nb:18s}{alone:8.1f}{beside:8.1f}{beside / alone:8.2f}")
    worst = max(r["ratio"] for r in rows.values())
    print(f"worst ratio {worst:.2f} (target <= {TARGET}): {'met' if worst <= TARGET else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": args.rounds, "notebooks": rows, "worst_ratio": worst}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
