"""What a notebook's cells print at other seeds, and on a machine shared with other work.

    python benchmarks/bench_cells.py 08_stretch --list
    python benchmarks/bench_cells.py 08_stretch --cells 26,27,28 --seeds 3 [--load 2] [--repeat 1] [--json F]
    python benchmarks/bench_cells.py 01_baseline --cells 31,32,35 --seeds 1 --set epochs=1 --load 1

A narrative sentence quotes a cell's output: lab 8's `accelerate` match, what leaving model.eval() out costs, lab 5's
bf16 speed-up. ``bench_seeds.py`` re-runs a whole training stage; this re-runs the very cells the sentence is about,
from the solution notebook as it ships, so what is measured is what a student's notebook runs. Each run is a fresh
kernel of this interpreter in full mode (``LAB_MODE=full``, every figure and artifact written to a temporary folder)
that executes the notebook's set-up (every code cell up to and including the one that calls ``lesson.start``, and every
cell that only defines functions: the student's answers) and then the chosen cells, in the notebook's order; a chosen
cell that needs another's variables (a loader, a model) needs that cell chosen too. ``lesson.start(...)`` is given
``seed=S``: one seed drives the split, the data order and the weights. ``--load K`` keeps K busy processes (a spinning
Python each) running beside the kernel for the whole run, as a shared laptop or a busy server would. ``--set epochs=1``
hands ``lesson.start`` a setting of its own (any of ``LabConfig``'s), for a shorter run of a training cell. The table
prints each chosen cell's output per run; ``--list`` prints every code cell's index and first line, to choose them by.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from labutils.reference.sequence import ENCRYPTED_KERNELS, SOLUTIONS

START = re.compile(r"lesson\.start\((?P<args>[^)]*)\)")


def code_cells(nb) -> dict[int, str]:
    return {i: c.source for i, c in enumerate(nb.cells) if c.cell_type == "code"}


def only_defines(source: str) -> bool:
    """A cell of function definitions (and imports) only: running it computes nothing."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom)) for n in body)


def setup_cells(nb) -> list[int]:
    """The cells every chosen cell may rely on: up to and including ``lesson.start``, and every definition."""
    cells = code_cells(nb)
    started = min(i for i, s in cells.items() if START.search(s))
    return [i for i, s in cells.items() if i <= started or only_defines(s)]


def seeded(source: str, seed: int, settings: dict[str, str]) -> str:
    """``lesson.start("id")`` → ``lesson.start("id", seed=seed, epochs=1)`` (``settings``: ``--set``'s, as written)."""
    given = "".join(f", {key}={value}" for key, value in settings.items())
    return START.sub(lambda m: f"lesson.start({m['args']}, seed={seed}{given})", source)


def text_of(cell) -> str:
    """What a cell printed (stdout and stderr streams, and any error's last line)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}\n")
    return "".join(parts).rstrip()


@contextmanager
def busy(processes: int):
    """``processes`` spinning Pythons for the duration: another user's work on the same cores."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def run(notebook: Path, chosen: list[int], seed: int, settings: dict[str, str], cell_timeout: float
        ) -> dict[int, str]:
    """One fresh kernel: the set-up and the chosen cells at ``seed``; each chosen cell's output."""
    nb = nbformat.read(notebook, as_version=4)
    keep = sorted(set(setup_cells(nb)) | set(chosen))
    for i in keep:
        nb.cells[i].source = seeded(nb.cells[i].source, seed, settings)
    sub = nbformat.v4.new_notebook(cells=[nb.cells[i] for i in keep], metadata=nb.metadata)
    with tempfile.TemporaryDirectory(prefix="bench-cells-") as out:
        client = NotebookClient(sub, timeout=cell_timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(notebook.parent)}}, config=ENCRYPTED_KERNELS)
        client.execute(env={**os.environ, "LAB_MODE": "full", "LAB_ARTIFACTS": out})
    by_index = dict(zip(keep, sub.cells))
    return {i: text_of(by_index[i]) for i in chosen}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", help="a solution notebook's id, e.g. 08_stretch")
    parser.add_argument("--list", action="store_true", help="print every code cell's index and first line")
    parser.add_argument("--cells", default="", help="the code cells to run and show, by index (comma-separated)")
    parser.add_argument("--seeds", type=int, default=3, help="runs at seeds 0, 1, ...")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per seed (timings differ between runs)")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the kernel")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for lesson.start, as Python (--set epochs=1); repeatable")
    parser.add_argument("--cell-timeout", type=float, default=3600)
    parser.add_argument("--json", default=None, help="write the outputs here too")
    args = parser.parse_args(argv)
    notebook = SOLUTIONS / f"{args.notebook}.ipynb"
    if not notebook.is_file():
        parser.error(f"no solution notebook {notebook.name}: use one of "
                     f"{', '.join(p.stem for p in sorted(SOLUTIONS.glob('*.ipynb')))}")
    cells = code_cells(nbformat.read(notebook, as_version=4))
    if args.list or not args.cells:
        for i, source in cells.items():
            print(f"{i:3}  {source.splitlines()[0] if source else ''}")
        return 0
    chosen = [int(c) for c in args.cells.split(",")]
    if unknown := [c for c in chosen if c not in cells]:
        parser.error(f"not code cells of {notebook.name}: {unknown} (--list shows them)")
    settings = dict(item.split("=", 1) for item in args.set if "=" in item)
    if len(settings) != len(args.set):
        parser.error("--set takes KEY=VALUE, e.g. --set epochs=1")
    rows = []
    with busy(args.load):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for attempt in range(1, args.repeat + 1):
                started = time.perf_counter()
                outputs = run(notebook, chosen, seed, settings, args.cell_timeout)
                rows.append({"seed": seed, "attempt": attempt, "load": args.load, "outputs": outputs,
                             "seconds": time.perf_counter() - started})
                print(f"=== seed {seed}, run {attempt}, {args.load} busy process(es) beside it "
                      f"({rows[-1]['seconds']:.0f} s)", flush=True)
                for i, text in outputs.items():
                    print(f"--- cell {i}\n{text}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
