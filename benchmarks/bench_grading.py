"""How fast does ``python -m autograder grade`` go? One command: ``python benchmarks/bench_grading.py``.

Grades a class of ``--students`` (default 8) complete submissions of the solutions with the real CLI and ``-j 2``,
then prints:

- the median seconds per complete submission (all nine notebooks of one student: the sum of its tasks' seconds, as
  the parent saw each task from hand-out to result) and the wall time per student (wall / students), target <= 30 s;
- students per minute (students / wall time);
- where each notebook's time goes (medians over the class, from the students' JSON ``timings``): kernel start, the
  non-test cells, the test cells, the hidden-test recheck, nbgrader's own work in Autograde (its converter, the
  gradebook copies: everything in autograde but the kernel and the recheck), the HTML feedback, the task's set-up
  and score read-back;
- the parent's own steps (the two generate_assignment runs, the gradebook, the reports) from the run's
  ``timings.json``;
- re-runs on the same OUT: with nothing changed (every task reused from the journal), and with one late student
  added (only that student's nine notebooks graded);
- stock nbgrader on the same notebooks: ``nbgrader autograde`` (its own preprocessors, one notebook after another,
  the hidden tests run in the student's kernel, the same cell timeout) on a copy of the course the run left in OUT,
  for ``--stock-students`` complete submissions, side by side with ours: seconds per complete submission and the
  ratio (``--no-stock`` skips it).

The machine should be otherwise idle: the numbers are CPU-bound and two cores are easily shared with something else.
``--json PATH`` also writes every number.
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
TARGET_S = 30.0
COLUMNS = [  # (header, how to get it from one task's timings)
    ("start", lambda t: t.get("kernel_start_s", 0.0)),
    ("cells", lambda t: t.get("cells_s", 0.0)),
    ("tests", lambda t: t.get("tests_s", 0.0)),
    ("recheck", lambda t: t.get("recheck_s", 0.0)),
    ("nbgrader", lambda t: t.get("autograde_s", 0.0) - t.get("kernel_s", 0.0) - t.get("recheck_s", 0.0)),
    ("feedback", lambda t: t.get("feedback_s", 0.0)),
    ("setup+read", lambda t: t.get("setup_s", 0.0) + t.get("scores_s", 0.0)),
    ("task", lambda t: t.get("total_s", 0.0)),
]


def make_class(folder: Path, n: int) -> None:
    for i in range(n):
        student = folder / f"student{i:02d}"
        student.mkdir(parents=True)
        for nb in sorted(SOLUTIONS.glob("*.ipynb")):
            shutil.copyfile(nb, student / nb.name)


def grade(submissions: Path, out: Path, jobs: int) -> tuple[float, str]:
    """(wall seconds, the run's log)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out),
                           "-j", str(jobs)], cwd=REPO, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"grading failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, proc.stderr


def stock_nbgrader(out: Path, copy: Path, students: int) -> list[float]:
    """Seconds of ``nbgrader autograde`` per complete submission, on a copy of the course ``out`` (its gradebook,
    source and submitted notebooks; the hidden tests run in the kernel, as plain nbgrader runs them)."""
    shutil.copytree(out, copy)
    seconds = []
    for i in range(students):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", "loop_lab", "--student",
                               f"student{i:02d}", "--force"], cwd=copy, capture_output=True, text=True,
                              env=dict(os.environ, LAB_MODE="grade"))
        seconds.append(time.monotonic() - started)
        if proc.returncode != 0:
            sys.exit(f"nbgrader autograde failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds


def summarize(out: Path, wall: float, students: int, jobs: int) -> dict:
    records = [json.loads(p.read_text()) for p in sorted(out.glob("student*.json"))]
    per_student = [sum(nb["seconds"] for nb in r["notebooks"].values()) for r in records]
    per_notebook: dict[str, dict[str, float]] = {}
    for nb in records[0]["notebooks"]:
        rows = [r["notebooks"][nb]["timings"] or {} for r in records]
        per_notebook[nb] = {name: round(statistics.median(get(t) for t in rows), 2) for name, get in COLUMNS}
        per_notebook[nb]["cells_skipped"] = rows[0].get("cells_skipped", 0)
    parent = json.loads((out / "timings.json").read_text()) if (out / "timings.json").exists() else {}
    return {
        "cpus": os.cpu_count(), "jobs": jobs, "students": students, "wall_s": round(wall, 1),
        "median_submission_s": round(statistics.median(per_student), 1),
        "wall_per_student_s": round(wall / students, 1),
        "students_per_minute": round(students / wall * 60, 2),
        "per_notebook": per_notebook, "parent": parent,
    }


def report(s: dict) -> None:
    print(f"{s['students']} complete submissions of the solutions, -j {s['jobs']}, {s['cpus']} CPU(s): "
          f"{s['wall_s']:.1f} s wall")
    print(f"  median seconds per complete submission: {s['median_submission_s']:.1f} s (sum of its 9 tasks); "
          f"wall per student {s['wall_per_student_s']:.1f} s (target <= {TARGET_S:.0f} s)")
    print(f"  students per minute: {s['students_per_minute']:.2f}")
    print("  per notebook, median seconds over the class:")
    print("    " + f"{'notebook':18s}" + "".join(f"{name:>11s}" for name, _ in COLUMNS) + "    skipped cells")
    for nb, row in sorted(s["per_notebook"].items()):
        print("    " + f"{nb:18s}" + "".join(f"{row[name]:11.2f}" for name, _ in COLUMNS)
              + f"    {row['cells_skipped']}")
    if s["parent"]:
        print("  the parent: " + ", ".join(f"{k} {v:.2f} s" for k, v in s["parent"].items()))
    print(f"  re-run on the same OUT, nothing changed: {s['rerun_s']:.1f} s; with one late student: "
          f"{s['late_student_s']:.1f} s")
    if s.get("stock_submission_s"):
        print(f"  stock nbgrader autograde: {s['stock_submission_s']:.1f} s per complete submission (median of "
              f"{len(s['stock_s'])}); ours {s['wall_per_student_s']:.1f} s wall per student: "
              f"{s['stock_submission_s'] / s['wall_per_student_s']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=8, help="class size (default: 8, the issue's minimum)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="grading processes (default: 2)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--stock-students", type=int, default=1, help="complete submissions graded by stock "
                        "nbgrader (default: 1; it takes about a minute each)")
    parser.add_argument("--no-stock", action="store_true", help="skip stock nbgrader")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f} before starting", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        make_class(tmp / "class", args.students)
        wall, _ = grade(tmp / "class", tmp / "out", args.jobs)
        summary = summarize(tmp / "out", wall, args.students, args.jobs)
        if not args.no_stock:
            summary["stock_s"] = [round(x, 1) for x in stock_nbgrader(tmp / "out", tmp / "stock",
                                                                       min(args.stock_students, args.students))]
            summary["stock_submission_s"] = round(statistics.median(summary["stock_s"]), 1)
        summary["rerun_s"] = round(grade(tmp / "class", tmp / "out", args.jobs)[0], 1)
        late = tmp / "late"
        make_class(late, 1)
        (late / "student00").rename(tmp / "class" / "late-student")
        summary["late_student_s"] = round(grade(tmp / "class", tmp / "out", args.jobs)[0], 1)
    report(summary)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
