"""The notebooks' runtime: the run mode, each notebook's settings, the model and loaders, and the epoch loop around
the student's own functions.

The student writes ``train_one_epoch`` and ``evaluate``; :func:`fit` only drives them (one call per epoch, a
progress bar, timing) and keeps the history. When a student function still raises ``NotImplementedError``, ``fit``
returns a :class:`Run` without results that says which exercise to finish, so the cells below fail with that message
instead of a ``NameError``.

Run modes (``LAB_MODE``): ``full`` trains on all 48,000 training images for the epochs the notebook asks for;
``smoke`` and ``grade`` use 2,048 images and short runs (one epoch; the checkpointing labs train the two or three
their checkpoints need, :data:`labutils.exercises.NOTEBOOKS`). ``NBGRADER_EXECUTION`` (set by nbgrader while it
validates or autogrades) selects ``grade``. ``LAB_AMP`` forces the precision of the notebooks that choose one;
``LAB_DEVICE`` the device of ``device="auto"`` (:mod:`labutils.devices`), chosen once in :func:`start`, as are the CPU
threads (:mod:`labutils.threads`: the cores other work leaves free).

Each notebook's settings are in its :class:`labutils.exercises.Notebook` (written once, in the exercise registry):
the notebook starts with ``lesson.start("04_accumulation")`` and :mod:`labutils.reference.pipeline` runs the same
stages with the reference loop. The numbers and figures ``make lab`` collects are :mod:`labutils.artifacts`' job; the
measuring helpers are in :mod:`labutils.measure`, the image grid and the source diff in :mod:`labutils.display`.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from . import amp, artifacts, data, devices, exercises, threads
from .checkpoint import set_seed
from .config import LabConfig
from .memory import keep_freed_memory
from .models import SmallCNN

MODES = ("full", "smoke", "grade")
# what a fast run's student reads before the text's numbers, which come from full runs
FAST_NOTE = ("Note: the numbers in the text are from full runs; a fast run's are smaller and noisier. To answer the "
             "questions, use your numbers from a full run (LAB_MODE=full); after a fast run only, discuss the text's.")
FAST = {"subset": 2048, "epochs": 1}  # what smoke/grade change, unless a notebook needs more (e.g. three epochs)


# nbgrader's runs train on the CPU whatever the machine has: a grade must not depend on the grading machine's GPU
GRADING_DEVICE = devices.Choice(torch.device("cpu"), "grading runs on the CPU, whatever this machine has")

_state: dict = {"notebook": None}


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


def notebook_config(notebook_id: str, mode: str = "full") -> LabConfig:
    """The notebook's configuration in ``mode``: its registry settings (:class:`labutils.exercises.Notebook`),
    shrunk by ``FAST`` and its own fast changes outside full mode."""
    entry = exercises.notebook(notebook_id)
    cfg = LabConfig().replace(**{**entry.config, **_forced_amp(entry.config)})
    return cfg if mode == "full" else cfg.replace(**{**FAST, **entry.fast})


def _forced_amp(config: dict) -> dict:
    """``LAB_AMP`` (off | bf16 ...) replaces the ``amp`` of the notebooks that set one (05, 08): ``auto`` picks bf16
    or float32 by the CPU's instructions, so this is how one machine runs both paths (the tests do)."""
    forced = os.environ.get("LAB_AMP", "").strip().lower()
    return {"amp": forced} if forced and "amp" in config else {}


def start(notebook_id: str, **overrides) -> LabConfig:
    """The notebook's whole configuration (:func:`notebook_config` in the current mode, with ``overrides`` for your
    own experiments), seeded and printed. Unknown keys raise."""
    cfg = notebook_config(notebook_id, lab_mode()).replace(**overrides)
    grading = lab_mode() == "grade"
    chosen = devices.choose(cfg.device) if not grading else GRADING_DEVICE  # once: cells read cfg.device
    cfg = cfg.replace(device=str(chosen.device))
    keep_freed_memory()  # the kernel and every process forked from it: no page faults per step (labutils.memory)
    set_seed(cfg.seed)
    _state.update(notebook=notebook_id)
    print(f"{notebook_id}: LAB_MODE={lab_mode()}" + (f"  (2,048 images, short runs)\n{FAST_NOTE}" if is_fast() else ""))
    print(hardware(cfg, chosen))
    if not grading:  # the grader gives each notebook its threads (autograder.run.machine)
        cpu = threads.choose()
        torch.set_num_threads(cpu.threads)
        print(f"CPU threads: {cpu}")
    print(cfg.describe())
    artifacts.begin(notebook_id, lab_mode(), cfg.to_dict())
    return cfg


def hardware(cfg: LabConfig, chosen: devices.Choice) -> str:
    """Where this run trains and in what precision, each with its reason: a student with a GPU sees it is used (and
    one without sees why not) before anything trains."""
    return (f"device: {chosen.device} ({chosen.reason})\n"
            f"precision: {amp.choose(cfg.amp, chosen.device)}")


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
    return data.make_loaders(cfg.batch_size, cfg.subset, cfg.seed, pin_memory=devices.pin_memory(cfg.device))


def take(loader, n: int) -> list:
    """The first ``n`` batches of epoch 0 as a list: the same batches every time, for timing and demos."""
    data.set_position(loader, 0)
    return list(itertools.islice(loader, n))


FAST_TIMING = (2, 32, 3)  # what a throughput comparison times in a fast run: 3 rounds of two batches of 32 images
FULL_ROUNDS = 5  # the rounds of a full run's comparison


def timing_batches(loader, n: int) -> list:
    """The batches a throughput comparison times in each round: the first ``n`` of epoch 0 (all, where there are
    fewer), or in a fast run (smoke, grade) :data:`FAST_TIMING`'s. 16-bit autocast is slow where it is emulated: fp16
    on a CPU took ~1.2 s a batch of 128, so a fast run times small batches (and says when they show no difference)."""
    if is_fast():
        count, size, _ = FAST_TIMING
        return [(x[:size], y[:size]) for x, y in take(loader, count)]
    return take(loader, n)


def timing_rounds() -> int:
    """How many interleaved rounds a throughput comparison times (:func:`labutils.measure.compare_throughput`)."""
    return FAST_TIMING[2] if is_fast() else FULL_ROUNDS


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
        artifacts.add_seconds("training", seconds)
        artifacts.add_seconds("evaluation", eval_seconds)
        run._history.append(row)
        run._grad_norms.extend(float(n) for n in norms)
        bar.set_postfix(train_loss=f"{row['train_loss']:.3f}", val_acc=f"{row['val_acc']:.3f}")
        bar.write(f"{label}  epoch {epoch}/{epochs}  train_loss {row['train_loss']:.4f}  val_loss {row['val_loss']:.4f}"
                  f"  val_acc {row['val_acc']:.4f}  {seconds:.1f} s ({row['samples_per_s']:,.0f} samples/s)")
    return run


def _kept_path(cfg: LabConfig) -> Path:
    key = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
    return data.cache_dir() / "runs" / f"{key}.json"


def keep(run: Run, cfg: LabConfig) -> None:
    """Keep a full-mode run's results, so that a later notebook comparing against the same configuration (same
    settings, so the same initial weights and batches) reads them instead of training it again."""
    if is_fast() or run.missing is not None:
        return  # short runs are cheap, and an unfinished exercise has nothing to keep
    path = _kept_path(cfg)
    record = {"notebook": _state["notebook"], "label": run.label, "config": cfg.to_dict(),
              "history": run.history, "grad_norms": run.grad_norms, "saved": time.strftime("%Y-%m-%d %H:%M")}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    except OSError as exc:  # a read-only cache only costs the later notebook a retraining
        print(f"(could not keep this run for later notebooks: {exc})")


def kept(cfg: LabConfig, label: str) -> Run | None:
    """The run an earlier notebook kept for exactly this configuration (see :func:`keep`), or None: then train it."""
    path = _kept_path(cfg)
    if is_fast() or not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("config") != cfg.to_dict():
        return None
    run = Run(label)
    run._history, run._grad_norms = record["history"], record["grad_norms"]
    print(f"{label}: {record['notebook']}'s run of {record['saved']} (same settings, weights and batches), read from "
          f"{path} instead of training it again; delete that file to retrain it here")
    return run


def _curves(rows: list[dict]) -> str:
    """What the loss curves of ``rows`` show, each claim read from the numbers it is about (4 decimals: two runs
    printed 0.2546 and 0.2562, and a rise of 0.0016 is a rise)."""
    first, last = rows[0], rows[-1]
    low = min(rows, key=lambda row: row["val_loss"])
    train_falling = last["train_loss"] == min(row["train_loss"] for row in rows)
    said = (f"Train loss {first['train_loss']:.4f} -> {last['train_loss']:.4f}, validation loss "
            f"{first['val_loss']:.4f} -> {last['val_loss']:.4f}: ")
    if len(rows) == 1:
        return said + "a single epoch, too short to see a trend."
    train = "training loss at its lowest too" if train_falling else "training loss not at its lowest either"
    if low is last:
        more = ", so more epochs would likely still help." if train_falling else "."
        return said + f"validation loss at its lowest at the last epoch, {train}{more}"
    rise = last["val_loss"] / low["val_loss"] - 1
    if rise <= 0.02:
        return said + (f"validation loss {rise:.1%} above its lowest ({low['val_loss']:.4f} at epoch {low['epoch']}): "
                       f"about flat at the end, {train}; more epochs at this learning rate would add little.")
    start = " while training loss kept falling, the start of overfitting" if train_falling else ""
    return said + (f"validation loss rose after epoch {low['epoch']} ({low['val_loss']:.4f} -> "
                   f"{last['val_loss']:.4f}, {rise:.1%}){start}.")


# the final accuracies of one setting over four seeds spread this far (lab 1's full runs: 90.08% to 90.72%,
# benchmarks/bench_seeds.py): two runs closer than this cannot show that one setting is better
SEED_SPREAD = 0.0064


def accuracy_gap(new: float, old: float) -> str:
    """``new - old`` in points, said against :data:`SEED_SPREAD`: a gap inside it is not a finding."""
    gap = new - old
    if abs(gap) <= SEED_SPREAD:
        return (f"{gap * 100:+.2f} points: within the {SEED_SPREAD * 100:.1f} points one setting spread over four "
                "seeds, so the same within noise")
    return (f"{gap * 100:+.2f} points: more than the {SEED_SPREAD * 100:.1f} points one setting spread over four seeds; "
            "repeat both at other seeds before calling it real")


def loop_note(run: Run, max_norm: float | None = None) -> str:
    """The run in three lines: the best epoch, what the curves imply, and whether it was stable."""
    rows = run.history
    best, last = run.best, rows[-1]
    lines = [f"Loop note ({run.label}): best validation accuracy {best['val_acc']:.2%} at epoch {best['epoch']} of "
             f"{last['epoch']} (last {last['val_acc']:.2%})."]
    lines.append(_curves(rows))
    finite = all(math.isfinite(row[k]) for row in rows for k in ("train_loss", "val_loss"))
    rises = [row["epoch"] for prev, row in itertools.pairwise(rows) if row["train_loss"] > prev["train_loss"]]
    stable = "Stable: " if finite and not rises else "Not stable: "
    stable += "every loss finite" if finite else "a loss became inf/NaN"
    stable += ", train loss fell every epoch" if not rises else f", train loss rose at epoch(s) {rises}"
    norms = run.grad_norms
    if norms:
        # over all steps, said so: lab 3 also prints the steady-state (second half) median, a different number
        stable += (f"; gradient norm median over all {len(norms)} steps {statistics.median(norms):.2f}, "
                   f"max {max(norms):.2f}")
        if max_norm is not None:
            stable += f", {sum(n > max_norm for n in norms) / len(norms):.1%} of all steps clipped at {max_norm:g}"
    lines.append(stable + ".")
    return "\n".join(lines)
