"""Per-step and per-epoch logs, as CSV or JSON lines (chosen by the file's suffix).

Every optimizer step gets a row: a loop you can trust is one whose every step you can look at afterwards (the
clip-norm histogram and the LR curve are drawn from these rows, not recomputed).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

STEP_FIELDS = ("step", "epoch", "loss", "lr", "grad_norm", "clipped", "samples_per_s")
EPOCH_FIELDS = ("epoch", "train_loss", "val_loss", "val_acc", "seconds", "samples_per_s")


class RowLog:
    """Appends rows to ``path`` (.csv or .jsonl), flushing each one so a crash loses at most the row being written.

    Appending, not truncating: a resumed run continues the log it crashed in. ``path=None`` keeps rows in memory only.
    """

    def __init__(self, path, fields: tuple[str, ...]):
        self.rows: list[dict] = []
        self.fields = fields
        self.path = Path(path) if path is not None else None
        if self.path is None:
            return
        if self.path.suffix not in (".csv", ".jsonl"):
            raise ValueError(f"log file {self.path} must end in .csv or .jsonl")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        needs_header = self.path.suffix == ".csv" and (not self.path.exists() or self.path.stat().st_size == 0)
        self._file = open(self.path, "a", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=fields) if self.path.suffix == ".csv" else None
        if needs_header:
            self._csv.writeheader()

    def write(self, row: dict) -> None:
        self.rows.append(row)
        if self.path is None:
            return
        if self._csv is not None:
            self._csv.writerow(row)
        else:
            self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self.path is not None:
            self._file.close()


def epoch_log_path(step_log_path) -> Path | None:
    """``run/steps.csv`` -> ``run/steps-epochs.csv``: the per-epoch summary sits beside the step log."""
    if step_log_path is None:
        return None
    path = Path(step_log_path)
    return path.with_name(f"{path.stem}-epochs{path.suffix}")


def read_log(path) -> list[dict]:
    """Rows of a .csv or .jsonl log written by :class:`RowLog`, numbers parsed back."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    with open(path, newline="") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _parse(value: str):
    if value in ("True", "False"):
        return value == "True"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value
