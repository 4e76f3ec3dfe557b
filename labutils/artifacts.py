"""What a notebook leaves for ``make lab``: its key numbers as ``<notebook_id>.json`` and its figures as PNGs.

Written only when ``LAB_ARTIFACTS`` names a folder (``make lab`` sets it); otherwise :func:`record` just prints.
:func:`labutils.lesson.start` opens the notebook's record with :func:`begin`, and
:mod:`labutils.reference.sequence` reads the files back into ``summary.md``.

``<notebook_id>.json`` is one JSON object: ``notebook``, ``mode``, ``config`` (the LabConfig as a dict), ``figures``
(PNG file names in the same folder), and the numbers; ``val_acc``, ``epoch_seconds`` and ``samples_per_s`` are always
present (null until recorded). ``seconds`` breaks the notebook's time down by kind (``training``, ``evaluation``,
``subprocesses``, ``figures``), added to by :func:`add_seconds` where that work happens.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .atomic import write_atomically

REQUIRED_NUMBERS = ("val_acc", "epoch_seconds", "samples_per_s")  # every <notebook_id>.json holds these keys

_current: dict = {"notebook": None}


def folder() -> Path | None:
    """``LAB_ARTIFACTS`` as a Path, or None when the notebook is not run by ``make lab``."""
    value = os.environ.get("LAB_ARTIFACTS")
    return Path(value) if value else None


def begin(notebook_id: str, mode: str, config: dict) -> None:
    """Start the notebook's record afresh (a re-run of the notebook replaces the previous one)."""
    _current["notebook"] = notebook_id
    _write({"notebook": notebook_id, "mode": mode, "config": config, "figures": [], "seconds": {},
            **{key: None for key in REQUIRED_NUMBERS}}, fresh=True)


def _write(numbers: dict, fresh: bool = False) -> None:
    notebook, out = _current["notebook"], folder()
    if notebook is None:
        raise RuntimeError("call lesson.start(notebook_id) first: it names the notebook the numbers belong to")
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{notebook}.json"
    current = {} if fresh or not path.exists() else json.loads(path.read_text())
    current.update(numbers)
    write_atomically(path, (json.dumps(current, indent=2) + "\n").encode())  # the sequence runner never reads half


def add_seconds(kind: str, seconds: float) -> None:
    """Count ``seconds`` of ``kind`` (training, evaluation, ...) in the notebook's time breakdown under ``make lab``;
    elsewhere (a notebook run by hand, a test) nothing is kept."""
    out, notebook = folder(), _current["notebook"]
    if out is None or notebook is None or not (out / f"{notebook}.json").exists():
        return
    spent = json.loads((out / f"{notebook}.json").read_text()).get("seconds", {})
    _write({"seconds": {**spent, kind: spent.get(kind, 0.0) + seconds}})


def record(**numbers) -> None:
    """Print the notebook's key numbers and, under ``make lab``, merge them into ``<notebook_id>.json``."""
    numbers = {k: (v.item() if hasattr(v, "item") else v) for k, v in numbers.items()}  # tensors -> JSON values
    for key, value in numbers.items():
        print(f"{key:>16} = {value:.4g}" if isinstance(value, float) else f"{key:>16} = {value!r}")
    _write(numbers)


def save_figure(fig, name: str) -> None:
    """Save ``fig`` as ``<notebook_id>-<name>.png`` under ``make lab``. Returns nothing, so that a cell ending with
    this call shows the figure once (the inline backend shows it already)."""
    out = folder()
    if out is None:
        return
    filename = f"{_current['notebook']}-{name}.png"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    fig.savefig(out / filename, dpi=120)
    add_seconds("figures", time.perf_counter() - started)
    figures = json.loads((out / f"{_current['notebook']}.json").read_text()).get("figures", [])
    _write({"figures": sorted(set(figures) | {filename})})
