"""How fast does ``python -m autograder grade`` go? Run by hand: ``python benchmarks/bench_grading.py``.

Two numbers, each the wall time of the real CLI (start-up, gradebook, warm-up, kernels, hidden-test rechecks,
feedback, reports):

1. one complete submission (all nine solution notebooks of one student), target <= 60 s on 2 cores;
2. a class of ``--students`` complete submissions with ``-j``: students per minute.

Per-notebook times (kernel, recheck) come from the students' JSON. The machine should be otherwise idle: the numbers
are CPU-bound and two cores are easily shared with something else.
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions" / "loop_lab"


def make_class(folder: Path, n: int) -> None:
    for i in range(n):
        student = folder / f"student{i:02d}"
        student.mkdir(parents=True)
        for nb in sorted(SOLUTIONS.glob("*.ipynb")):
            shutil.copyfile(nb, student / nb.name)


def grade(submissions: Path, out: Path, jobs: int) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out),
                           "-j", str(jobs)], cwd=REPO, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"grading failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stderr


def per_notebook(out: Path) -> dict[str, list[dict]]:
    times: dict[str, list[dict]] = {}
    for path in out.glob("student*.json"):
        for nb, info in json.loads(path.read_text())["notebooks"].items():
            times.setdefault(nb, []).append(info.get("timings") or {})
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=4, help="class size for the throughput run (default: 4)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="grading processes (default: 2)")
    parser.add_argument("--skip-class", action="store_true", help="only time one complete submission")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f} before starting")
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        make_class(tmp / "one", 1)
        seconds, log = grade(tmp / "one", tmp / "out-one", args.jobs)
        warm = next((line for line in log.splitlines() if "kernels warm" in line), "")
        print(f"one complete submission (9 notebooks), -j {args.jobs}: {seconds:.1f} s (target <= 60 s)")
        print(f"  {warm.strip()}")
        for nb, rows in sorted(per_notebook(tmp / "out-one").items()):
            t = rows[0]
            print(f"  {nb:18s} kernel {t.get('kernel_s', 0):5.1f} s  recheck {t.get('recheck_s', 0):4.1f} s  "
                  f"total {t.get('total_s', 0):5.1f} s")
        if args.skip_class:
            return
        make_class(tmp / "class", args.students)
        seconds, _ = grade(tmp / "class", tmp / "out-class", args.jobs)
        print(f"{args.students} complete submissions, -j {args.jobs}: {seconds:.1f} s = "
              f"{args.students / seconds * 60:.2f} students/minute")
        for nb, rows in sorted(per_notebook(tmp / "out-class").items()):
            totals = [r.get("total_s", 0) for r in rows]
            print(f"  {nb:18s} median {statistics.median(totals):5.1f} s per student")


if __name__ == "__main__":
    main()
