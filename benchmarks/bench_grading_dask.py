"""Local ``-j W`` against a Dask cluster of W workers on the same class. One command:
``python benchmarks/bench_grading_dask.py`` (``--students``, ``--workers``, ``--notebooks 01_baseline,02_scheduler``).

Grades a class of complete submissions of the solutions twice with the real CLI: ``-j W`` on this machine, then
``--scheduler`` on a loopback ``LocalCluster`` of W worker processes (one thread each) started here. Prints each run's
wall time, students per minute and the Dask run's warm-up (workers' zygotes), and checks that grades.csv is the same.
On one machine the two runs share the same cores, so the difference is the Dask overhead; a real cluster adds machines.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions" / "loop_lab"


def make_class(folder: Path, n: int, notebooks: list[str] | None) -> None:
    for i in range(n):
        student = folder / f"student{i:02d}"
        student.mkdir(parents=True)
        for nb in sorted(SOLUTIONS.glob("*.ipynb")):
            if notebooks is None or nb.stem in notebooks:
                shutil.copyfile(nb, student / nb.name)


def grade(submissions: Path, out: Path, *extra: str) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", str(submissions), "--out", str(out), *extra],
                          cwd=REPO, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"grading failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds, proc.stderr


def task_seconds(out: Path) -> dict[str, float]:
    """Median seconds per notebook of a task inside its worker (the JSON's ``timings.total_s``)."""
    seconds: dict[str, list[float]] = {}
    for record in out.glob("*.json"):
        for nb, info in json.loads(record.read_text()).get("notebooks", {}).items():
            if info.get("timings", {}).get("total_s") is not None:
                seconds.setdefault(nb, []).append(info["timings"]["total_s"])
    return {nb: statistics.median(v) for nb, v in sorted(seconds.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="-j locally, Dask worker processes on the cluster")
    parser.add_argument("--notebooks", help="comma-separated notebook ids (default: all nine)")
    args = parser.parse_args()
    from distributed import LocalCluster

    tmp = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    try:
        make_class(tmp / "subs", args.students, args.notebooks.split(",") if args.notebooks else None)
        local_s, _ = grade(tmp / "subs", tmp / "local", "-j", str(args.workers))
        started = time.monotonic()
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                          scheduler_port=0, dashboard_address=None,
                          local_directory=str(tmp / "dask-workers")) as cluster:
            cluster_s = time.monotonic() - started
            dask_s, log = grade(tmp / "subs", tmp / "dask", "--scheduler", cluster.scheduler_address)
        warm = re.search(r"warm ([\d.]+) s after the gradebook", log)
        same = (tmp / "local" / "grades.csv").read_text() == (tmp / "dask" / "grades.csv").read_text()
        n = args.students
        print(f"{n} student(s), {args.notebooks or 'all nine notebooks'}, {args.workers} worker(s)")
        print(f"local -j {args.workers}:   {local_s:6.1f} s  {60 * n / local_s:5.2f} students/min")
        print(f"dask {args.workers} workers: {dask_s:6.1f} s  {60 * n / dask_s:5.2f} students/min  (workers' zygotes "
              f"warm {warm.group(1) if warm else '?'} s after the gradebook; cluster start {cluster_s:.1f} s, "
              "not counted)")
        local_t, dask_t = task_seconds(tmp / "local"), task_seconds(tmp / "dask")
        print("median seconds per task inside its worker (local / dask):")
        for nb in local_t:
            print(f"  {nb:18} {local_t[nb]:6.1f} / {dask_t.get(nb, float('nan')):6.1f}")
        print(f"grades.csv identical: {same}")
        if not same:
            sys.exit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
