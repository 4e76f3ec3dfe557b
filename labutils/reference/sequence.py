"""``make lab``: execute the solution notebooks in full mode, in order, and collect what they measured.

Each notebook runs top to bottom with nbclient in a fresh kernel of this interpreter, ``LAB_MODE=full`` and
``LAB_ARTIFACTS`` pointing at the output folder, where :mod:`labutils.lesson` writes each notebook's numbers
(``<notebook_id>.json``) and figures. The executed notebooks are kept beside them, and ``summary.md`` gathers one row
per notebook: validation accuracy, epoch time, throughput, the notebook's wall time and where that time went
(training and evaluation as :func:`labutils.lesson.fit` timed them, forked subprocesses, saving figures, the other
cells, and the kernel's start and nbclient's own work: the wall time less every cell's). ``summary.json`` holds the same rows with the raw seconds.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from traitlets.config import Config

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions" / "loop_lab"
# One cell's limit: long enough for a full run's longest cell on a busy machine (lab 1's five epochs took 1,886 s
# there), short enough that a hung kernel ends the run the same day. ``--cell-timeout 0`` runs without one.
CELL_TIMEOUT_S = 3600
# CurveZMQ keys for each kernel: its connection is encrypted, and it no longer prints "Kernel is running over TCP
# without encryption" into make lab's output at every notebook (the handout sets the same for JupyterLab).
ENCRYPTED_KERNELS = Config({"KernelManager": {"transport_encryption": "auto"}})


def execute_notebook(path: Path, out_dir: Path, mode: str, cell_timeout: float | None = CELL_TIMEOUT_S) -> float:
    """Run one notebook (stopping at the first failing cell, or one that runs past ``cell_timeout`` seconds; None:
    no limit); save the executed copy; return its wall time."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(path.parent)}}, config=ENCRYPTED_KERNELS)
    started = time.perf_counter()
    try:
        client.execute(env={**os.environ, "LAB_MODE": mode, "LAB_ARTIFACTS": str(out_dir.resolve())})
    finally:
        executed = out_dir / "notebooks" / path.name
        executed.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, executed)  # also when a cell failed: the saved copy shows where and why
    return time.perf_counter() - started


def cells_seconds(nb) -> float:
    """The time the notebook's code cells took, from the timestamps nbclient's ``record_timing`` leaves."""
    total = 0.0
    for cell in nb.cells:
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            begun, done = (datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                           for k in ("iopub.execute_input", "shell.execute_reply"))
            total += (done - begun).total_seconds()
    return total


BREAKDOWN = ("training", "evaluation", "subprocesses", "figures")
PARTS = (*BREAKDOWN, "other cells", "kernel start and nbclient")  # they add up to the notebook's wall time


def notebook_row(out_dir: Path, notebook: str, seconds: float) -> dict:
    """One notebook's numbers, the raw seconds of each part of its wall time included (a smoke run's training can
    take 0.4 s: rounding it to whole seconds would say it took none)."""
    numbers = json.loads((out_dir / f"{notebook}.json").read_text())
    spent = numbers.get("seconds", {})
    in_cells = cells_seconds(nbformat.read(out_dir / "notebooks" / f"{notebook}.ipynb", as_version=4))
    parts = {kind: spent.get(kind, 0.0) for kind in BREAKDOWN}
    parts["other cells"] = in_cells - sum(parts.values())
    parts["kernel start and nbclient"] = seconds - in_cells
    return {"notebook": notebook, "val_acc": numbers.get("val_acc"), "epoch_seconds": numbers.get("epoch_seconds"),
            "samples_per_s": numbers.get("samples_per_s"), "wall_seconds": seconds, "seconds": parts}


def summary_table(rows: list[dict]) -> str:
    """summary.md's table: seconds with one decimal, so every part of a smoke run still shows."""
    lines = ["| notebook | val acc | mean epoch time (s) | samples/s | notebook wall time (s) | "
             + " | ".join(PARTS) + " |",
             "|---|---|---|---|---|" + "---|" * len(PARTS)]
    for row in rows:
        lines.append(f"| {row['notebook']} | {_fmt(row['val_acc'], '.2%')} | {_fmt(row['epoch_seconds'], '.1f')} "
                     f"| {_fmt(row['samples_per_s'], ',.0f')} | {row['wall_seconds']:.1f} | "
                     + " | ".join(f"{row['seconds'][part]:.1f}" for part in PARTS) + " |")
    total = sum(row["wall_seconds"] for row in rows)
    return "\n".join(lines) + f"\n\nWhole sequence: {total:.1f} s ({total / 60:.1f} min).\n"


def _fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def run_sequence(out_dir="artifacts", mode: str = "full", notebooks: list[str] | None = None,
                 cell_timeout: float | None = CELL_TIMEOUT_S) -> Path:
    """Execute the solution notebooks (all, or those named) into ``out_dir``; write ``summary.md``. A notebook that
    fails or runs past ``cell_timeout`` in one cell raises RuntimeError with the one line that says so."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = sorted(SOLUTIONS.glob("*.ipynb"))
    if notebooks:
        unknown = set(notebooks) - {p.stem for p in paths}
        if unknown:
            raise ValueError(f"no such notebook(s) {sorted(unknown)}: choose from {[p.stem for p in paths]}")
        paths = [p for p in paths if p.stem in notebooks]
    wall_times = {}
    for i, path in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {path.stem} ({mode} mode) ...", flush=True)
        try:
            wall_times[path.stem] = execute_notebook(path, out, mode, cell_timeout)
        except CellExecutionError as exc:
            raise RuntimeError(f"{path.stem} failed; the executed copy is in {out / 'notebooks'}:\n"
                               f"{str(exc)[-2000:]}") from None
        except CellTimeoutError:
            raise RuntimeError(f"{path.stem}: a cell ran past the {cell_timeout:.0f} s cell limit (the executed copy, "
                               f"in {out / 'notebooks'}, shows which); on a busy or slow machine give it longer with "
                               "--cell-timeout SECONDS, or none with --cell-timeout 0") from None
        print(f"      done in {wall_times[path.stem]:.0f} s", flush=True)
    rows = [notebook_row(out, notebook, seconds) for notebook, seconds in wall_times.items()]
    (out / "summary.json").write_text(json.dumps({"mode": mode, "notebooks": rows}, indent=2))
    summary = out / "summary.md"
    summary.write_text(f"# Loop Lab: the notebook sequence ({mode} mode)\n\n" + summary_table(rows))
    print(f"\n{summary.read_text()}\nwrote {summary}")
    return summary
