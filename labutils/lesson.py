"""Notebook support: the run mode, one config per notebook, the model and loaders, the epoch loop around the
student's own functions, and the figures and numbers that ``make lab`` collects.

The student writes ``train_one_epoch`` and ``evaluate``; :func:`fit` only drives them (one call per epoch, a
progress bar, timing) and keeps the history. When a student function still raises ``NotImplementedError``, ``fit``
returns a :class:`Run` without results that says which exercise to finish, so the cells below fail with that message
instead of a ``NameError``.

Run modes (``LAB_MODE``): ``full`` trains on all 48,000 training images for the epochs the notebook asks for;
``smoke`` and ``grade`` use 2,048 images and one short epoch. ``NBGRADER_EXECUTION`` (set by nbgrader while it
validates or autogrades) selects ``grade``. Artifacts: when ``LAB_ARTIFACTS`` names a folder, :func:`record` and
:func:`save_figure` write ``<notebook_id>.json`` and ``<notebook_id>-<name>.png`` there (see :func:`record`).
"""

from __future__ import annotations

import atexit
import difflib
import inspect
import itertools
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from tqdm.auto import tqdm

from . import data
from .checkpoint import set_seed
from .config import LabConfig
from .models import SmallCNN

MODES = ("full", "smoke", "grade")
FAST = {"subset": 2048, "epochs": 1}  # what smoke/grade change, unless a notebook needs more (e.g. three epochs)
REQUIRED_NUMBERS = ("val_acc", "epoch_seconds", "samples_per_s")  # every <notebook_id>.json holds these keys

_state: dict = {"notebook": None, "config": None}


# --- mode and config -------------------------------------------------------------------------------------------------


def lab_mode() -> str:
    """``full``, ``smoke`` or ``grade``: ``NBGRADER_EXECUTION`` means grade, else ``LAB_MODE`` (default full)."""
    if os.environ.get("NBGRADER_EXECUTION"):
        return "grade"
    mode = os.environ.get("LAB_MODE", "full").strip().lower() or "full"
    if mode not in MODES:
        raise ValueError(f"LAB_MODE={mode!r} is unknown: use one of {', '.join(MODES)}")
    return mode


def is_fast() -> bool:
    """True in the smoke and grade modes: a small subset and short runs."""
    return lab_mode() != "full"


def start(notebook_id: str, *, fast: dict | None = None, **settings) -> LabConfig:
    """The notebook's whole configuration: ``LabConfig(**settings)``, shrunk by ``FAST`` (updated with ``fast``) in
    the fast modes, then seeded and printed. Unknown keys raise."""
    cfg = LabConfig().replace(**settings)
    if is_fast():
        cfg = cfg.replace(**{**FAST, **(fast or {})})
    set_seed(cfg.seed)
    _state.update(notebook=notebook_id, config=cfg)
    print(f"{notebook_id}: LAB_MODE={lab_mode()}" + ("  (2,048 images, short runs)" if is_fast() else ""))
    print(cfg.describe())
    _write_numbers({key: None for key in REQUIRED_NUMBERS}, fresh=True)
    return cfg


def variant(cfg: LabConfig, label: str, **changes) -> LabConfig:
    """A second configuration in the same notebook (e.g. the baseline to compare against), printed as its changes."""
    print(f"{label}: " + ", ".join(f"{k} = {v!r}" for k, v in changes.items()) + "  (everything else as above)")
    return cfg.replace(**changes)


def build_model(cfg: LabConfig) -> SmallCNN:
    """A SmallCNN seeded with ``cfg.seed``: every run in a notebook starts from the same weights."""
    torch.manual_seed(cfg.seed)
    return SmallCNN(dropout=cfg.dropout, batchnorm=cfg.batchnorm).to(cfg.device)


def build_loaders(cfg: LabConfig):
    """(train_loader, val_loader) for the config; the batch order depends only on (seed, epoch)."""
    return data.make_loaders(cfg.batch_size, cfg.subset, cfg.seed)


def take(loader, n: int) -> list:
    """The first ``n`` batches of epoch 0 as a list: the same batches every time, for timing and demos."""
    data.set_position(loader, 0)
    return list(itertools.islice(loader, n))


def scratch_dir(name: str) -> Path:
    """A fresh, empty folder for checkpoints and logs, removed when the kernel exits."""
    folder = Path(tempfile.mkdtemp(prefix=f"loop_lab-{_state['notebook'] or 'lab'}-{name}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# --- the epoch loop --------------------------------------------------------------------------------------------------


class Run:
    """What :func:`fit` recorded: one history row per epoch (epoch, train_loss, val_loss, val_acc, seconds,
    eval_seconds, samples_per_s) and the gradient norms the student's function returned, if any.

    A run whose student function is not written yet has no results: reading them raises ``NotImplementedError``
    naming the exercise.
    """

    def __init__(self, label: str, missing: str | None = None):
        self.label, self.missing = label, missing
        self._history: list[dict] = []
        self._grad_norms: list[float] = []

    def _results(self):
        if self.missing is not None:
            raise NotImplementedError(f"{self.label} has no results: {self.missing}. Finish that exercise, then run "
                                      "the notebook again from the top.")
        return self

    @property
    def history(self) -> list[dict]:
        return self._results()._history

    @property
    def grad_norms(self) -> list[float]:
        """Pre-clip global norm of every optimizer step, in order, over all epochs."""
        return self._results()._grad_norms

    @property
    def final_val_acc(self) -> float:
        return self.history[-1]["val_acc"]

    @property
    def best(self) -> dict:
        """The history row with the highest validation accuracy (the earliest, on a tie)."""
        return max(self.history, key=lambda row: row["val_acc"])

    @property
    def epoch_seconds(self) -> float:
        """Mean wall time of one training epoch (the student's train_one_epoch call, evaluation excluded)."""
        return statistics.fmean(row["seconds"] for row in self.history)

    @property
    def samples_per_s(self) -> float:
        """Training throughput over the whole run."""
        rows = self.history
        return sum(row["seconds"] * row["samples_per_s"] for row in rows) / sum(row["seconds"] for row in rows)

    def __repr__(self) -> str:
        if self.missing is not None:
            return f"Run({self.label!r}, not trained: {self.missing})"
        return f"Run({self.label!r}, {len(self._history)} epochs, final val_acc {self.final_val_acc:.4f})"


def fit(train_epoch, evaluate, *, loader, epochs: int, label: str = "run") -> Run:
    """Call ``train_epoch()`` once per epoch and ``evaluate()`` after each; returns the :class:`Run`.

    ``train_epoch`` returns the mean training loss, or ``(loss, grad_norms)``; ``evaluate`` returns
    ``(val_loss, val_acc)``. ``loader`` is the training loader: each epoch starts by pointing it at that epoch, so the
    batch order is a function of (seed, epoch) and two runs in one notebook see the same batches.
    """
    run = Run(label)
    n_samples = len(loader.dataset)
    bar = tqdm(range(1, epochs + 1), desc=label, unit="epoch", disable=is_fast())
    for epoch in bar:
        data.set_position(loader, epoch - 1)
        try:
            started = time.perf_counter()
            result = train_epoch()
            seconds = time.perf_counter() - started
            val_loss, val_acc = evaluate()
            eval_seconds = time.perf_counter() - started - seconds
        except NotImplementedError as exc:
            bar.close()
            print(f"{label}: not trained, a function it calls is not written yet ({exc or 'NotImplementedError'})")
            return Run(label, missing=str(exc) or "NotImplementedError")
        train_loss, norms = result if isinstance(result, tuple) else (result, [])
        row = {"epoch": epoch, "train_loss": float(train_loss), "val_loss": float(val_loss), "val_acc": float(val_acc),
               "seconds": seconds, "eval_seconds": eval_seconds, "samples_per_s": n_samples / seconds}
        run._history.append(row)
        run._grad_norms.extend(float(n) for n in norms)
        bar.set_postfix(train_loss=f"{row['train_loss']:.3f}", val_acc=f"{row['val_acc']:.3f}")
        bar.write(f"{label}  epoch {epoch}/{epochs}  train_loss {row['train_loss']:.4f}  val_loss {row['val_loss']:.4f}"
                  f"  val_acc {row['val_acc']:.4f}  {seconds:.1f} s ({row['samples_per_s']:,.0f} samples/s)")
    return run


def loop_note(run: Run, max_norm: float | None = None) -> str:
    """The run in three lines: the best epoch, what the curves imply, and whether it was stable."""
    rows = run.history
    best, last = run.best, rows[-1]
    lines = [f"Loop note ({run.label}): best validation accuracy {best['val_acc']:.2%} at epoch {best['epoch']} of "
             f"{last['epoch']} (last {last['val_acc']:.2%})."]
    low = min(rows, key=lambda row: row["val_loss"])
    curves = (f"Train loss {rows[0]['train_loss']:.3f} -> {last['train_loss']:.3f}, validation loss "
              f"{rows[0]['val_loss']:.3f} -> {last['val_loss']:.3f}: ")
    if len(rows) == 1:
        curves += "a single epoch, too short to see a trend."
    elif last["val_loss"] > 1.02 * low["val_loss"]:
        curves += f"validation loss rose after epoch {low['epoch']} while training loss fell, the start of overfitting."
    else:
        curves += "both still at their lowest, so more epochs would likely still help."
    lines.append(curves)
    finite = all(math.isfinite(row[k]) for row in rows for k in ("train_loss", "val_loss"))
    rises = [row["epoch"] for prev, row in itertools.pairwise(rows) if row["train_loss"] > prev["train_loss"]]
    stable = "Stable: " if finite and not rises else "Not stable: "
    stable += "every loss finite" if finite else "a loss became inf/NaN"
    stable += ", train loss fell every epoch" if not rises else f", train loss rose at epoch(s) {rises}"
    norms = run.grad_norms
    if norms:
        stable += f"; gradient norm median {statistics.median(norms):.2f}, max {max(norms):.2f}"
        if max_norm is not None:
            stable += f", {sum(n > max_norm for n in norms) / len(norms):.1%} of steps clipped at {max_norm:g}"
    lines.append(stable + ".")
    return "\n".join(lines)


# --- measuring -------------------------------------------------------------------------------------------------------


def samples_per_second(train_on, batches: list, warmup: int = 2) -> float:
    """Throughput of ``train_on(batches)`` (e.g. one epoch of the student's loop over a list of batches), after a
    warm-up call on the first ``warmup`` batches so that one-time costs (allocation, kernel choice) are excluded."""
    train_on(batches[:warmup])
    started = time.perf_counter()
    train_on(batches)
    return sum(len(y) for _, y in batches) / (time.perf_counter() - started)


class StepCounter:
    """Counts micro-batches (forward passes in train mode with autograd on) and ``optimizer.step()`` calls through
    hooks, so the loop being counted is not changed. ``remove()`` takes the hooks off."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.micro_batches = self.optimizer_steps = 0
        self._handles = [model.register_forward_pre_hook(self._on_forward),
                         optimizer.register_step_post_hook(self._on_step)]

    def _on_forward(self, module, args) -> None:
        if module.training and torch.is_grad_enabled():  # evaluation forwards are not micro-batches
            self.micro_batches += 1

    def _on_step(self, optimizer, args, kwargs) -> None:
        self.optimizer_steps += 1

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def __repr__(self) -> str:
        ratio = self.micro_batches / self.optimizer_steps if self.optimizer_steps else float("nan")
        return (f"{self.micro_batches} micro-batches, {self.optimizer_steps} optimizer steps "
                f"({ratio:.2f} micro-batches per step)")


# --- showing ---------------------------------------------------------------------------------------------------------


def show_images(images: torch.Tensor, labels: torch.Tensor, n: int = 16):
    """A grid of the first ``n`` uint8 images (N, 28, 28) titled with their class names; returns the Figure."""
    cols = 8
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.3, rows * 1.5))
    for ax, image, label in zip(axes.flat, images[:n], labels[:n]):
        ax.imshow(image, cmap="gray_r")
        ax.set_title(data.CLASSES[int(label)], fontsize=7)
    for ax in axes.flat:
        ax.axis("off")
    fig.tight_layout()
    return fig


def show_diff(before, after) -> list[str]:
    """Print a unified diff of two functions' source; returns the deleted lines (stripped)."""
    a, b = inspect.getsource(before).splitlines(), inspect.getsource(after).splitlines()
    diff = list(difflib.unified_diff(a, b, before.__name__, after.__name__, lineterm="", n=1))
    print("\n".join(diff))
    return [line[1:].strip() for line in diff if line.startswith("-") and not line.startswith("---")]


# --- artifacts for `make lab` ----------------------------------------------------------------------------------------


def _artifacts_dir() -> Path | None:
    folder = os.environ.get("LAB_ARTIFACTS")
    return Path(folder) if folder else None


def _write_numbers(numbers: dict, fresh: bool = False) -> dict:
    folder, notebook = _artifacts_dir(), _state["notebook"]
    if notebook is None:
        raise RuntimeError("call lesson.start(notebook_id, ...) first: it names the notebook the numbers belong to")
    if folder is None:
        return numbers
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{notebook}.json"
    current = {} if fresh or not path.exists() else json.loads(path.read_text())
    if fresh:
        cfg = _state["config"]
        current = {"notebook": notebook, "mode": lab_mode(), "config": cfg.to_dict(), "figures": []}
    current.update(numbers)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(current, indent=2) + "\n")
    os.replace(tmp, path)  # the pipeline never reads half a file
    return current


def record(**numbers) -> None:
    """Print the notebook's key numbers and, when ``LAB_ARTIFACTS`` is set, merge them into
    ``LAB_ARTIFACTS/<notebook_id>.json``.

    That file is one JSON object: ``notebook``, ``mode``, ``config`` (the LabConfig as a dict), ``figures`` (PNG file
    names in the same folder), and the numbers; ``val_acc``, ``epoch_seconds`` and ``samples_per_s`` are always
    present (null until recorded).
    """
    numbers = {k: (v.item() if hasattr(v, "item") else v) for k, v in numbers.items()}  # tensors -> JSON values
    for key, value in numbers.items():
        print(f"{key:>16} = {value:.4g}" if isinstance(value, float) else f"{key:>16} = {value!r}")
    _write_numbers(numbers)


def save_figure(fig, name: str) -> None:
    """Save ``fig`` as ``LAB_ARTIFACTS/<notebook_id>-<name>.png`` when ``LAB_ARTIFACTS`` is set. Returns nothing, so
    that a cell ending with this call shows the figure once (the inline backend shows it already)."""
    folder = _artifacts_dir()
    if folder is not None:
        filename = f"{_state['notebook']}-{name}.png"
        folder.mkdir(parents=True, exist_ok=True)
        fig.savefig(folder / filename, dpi=120)
        figures = json.loads((folder / f"{_state['notebook']}.json").read_text()).get("figures", [])
        _write_numbers({"figures": sorted(set(figures) | {filename})})
