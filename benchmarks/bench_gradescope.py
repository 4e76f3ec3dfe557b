"""One complete submission graded as Gradescope grades it, in its default container: how long, and how much memory?

    .venv/bin/python benchmarks/bench_gradescope.py [--memory-mb 768] [--cpus 0.5] [--python PATH] [--json PATH]

Builds the autograder zip (``python -m autograder gradescope``, the dataset included), unpacks it as Gradescope does,
uploads the nine solution notebooks as a zip of the handout's ``notebooks/`` folder, and runs ``run_autograder`` in
the emulated container of the tests (tests/gradescope_container.py: ``/autograder`` in a private mount namespace, a
cgroup of ``--memory-mb`` and ``--cpus``; Gradescope's default is 768 MB and half a CPU). Prints the exit status, the
score, the wall time, the cgroup's peak memory (page cache included, which the kernel drops before it kills anything),
the peak of what it cannot drop (anonymous memory and tmpfs), the largest task's peak (a kernel or a recheck, in
its own cgroup), the OOM kills, and how the grader sized itself.

``--python``: the interpreter of the virtualenv to grade with (``LOOPLAB_PYTHON``; default this one). Gradescope's
setup.sh installs PyTorch's CPU build; a CUDA build of torch (PyPI's) holds more memory in every process, so measure
with a virtualenv of the CPU build to know what Gradescope sees. It must live outside ``/tmp`` (the container has a
/tmp of its own). Needs root and cgroups, as the tests' container does. Not part of ``make test``: a few minutes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import gradescope_container  # noqa: E402  (the tests' container)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory-mb", type=int, default=gradescope_container.MEMORY_MB)
    parser.add_argument("--cpus", type=float, default=gradescope_container.CPUS)
    parser.add_argument("--python", default=sys.executable, help="the grading virtualenv's python (default: this)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    why_not = gradescope_container.unavailable()
    if why_not:
        sys.exit(why_not)
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="bench-gradescope-") as tmp:
        tmp = Path(tmp)
        built = subprocess.run([sys.executable, "-m", "autograder", "gradescope", "--out", tmp / "autograder.zip"],
                               cwd=REPO, capture_output=True, text=True)
        if built.returncode:
            sys.exit(f"building the zip failed:\n{built.stderr[-2000:]}")
        root = tmp / "autograder"
        with zipfile.ZipFile(tmp / "autograder.zip") as z:
            z.extractall(root / "source")
        for name in ("setup.sh", "run_autograder"):  # zipfile drops the modes Gradescope's unzip keeps
            (root / "source" / name).chmod(0o755)
        (root / "submission" / "notebooks").mkdir(parents=True)
        for notebook in sorted((REPO / "solutions" / "loop_lab").glob("*.ipynb")):
            shutil.copyfile(notebook, root / "submission" / "notebooks" / notebook.name)
        run = gradescope_container.run_autograder(root, memory_mb=args.memory_mb, cpus=args.cpus, timeout=3600,
                                                  env={"LOOPLAB_PYTHON": args.python})
    sized = next((re.sub(r"; \d+m[\d.]+s since the start$", "", line) for line in run.stdout.splitlines()
                  if line.startswith("sized for")), "")
    results = run.results or {}
    summary = {"memory_mb": args.memory_mb, "cpus": args.cpus, "torch": version, "exit": run.returncode,
               "score": results.get("score"), "seconds": run.seconds, "peak_mb": run.peak_mb,
               "peak_anon_mb": run.peak_anon_mb, "task_peak_mb": max(run.task_peaks.values(), default=0),
               "tasks": len(run.task_peaks), "oom_kills": run.oom_kills, "sized": sized,
               "incomplete": [t["name"] for t in results.get("tests", []) if t["name"].startswith("Grade incomplete")]}
    print(f"one complete submission (9 notebooks) in a {args.memory_mb} MB, {args.cpus:g} CPU container, torch "
          f"{version}: exit {run.returncode}, score {summary['score']}, {run.seconds:.0f} s")
    print(f"  peak memory {run.peak_mb} MB (page cache included); what cannot be dropped {run.peak_anon_mb} MB; "
          f"OOM kills {run.oom_kills}")
    print(f"  the largest of {summary['tasks']} tasks (a kernel, or a recheck) peaked at {summary['task_peak_mb']} MB "
          "(sampled every 0.2 s)")
    print(f"  {sized}")
    for name in summary["incomplete"]:
        print(f"  {name}")
    if run.returncode:
        print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
