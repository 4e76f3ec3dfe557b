"""The lab's plots. Each returns a matplotlib Figure (shown inline in a notebook) and saves a PNG when given ``path``.

They plot what the loop logged, never recompute it, so a plot is evidence about the run that produced the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def _finish(fig: Figure, path) -> Figure:
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def clipped_share(norms: Sequence[float], max_norm: float) -> float:
    """Fraction of steps whose pre-clip norm exceeded ``max_norm`` (those are the steps clipping changed)."""
    if not norms:
        raise ValueError("no gradient norms logged")
    return sum(n > max_norm for n in norms) / len(norms)


def plot_grad_norms(norms: Sequence[float], max_norm: float | None, path=None, bins: int = 50) -> Figure:
    """Histogram of pre-clip global gradient norms, the clipping threshold, and the share of clipped steps."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(norms, bins=bins, color="tab:blue", alpha=0.8)
    title = f"pre-clip gradient norm over {len(norms)} steps"
    if max_norm is not None:
        ax.axvline(max_norm, color="tab:red", linestyle="--", label=f"max_norm = {max_norm:g}")
        ax.legend()
        title += f": {clipped_share(norms, max_norm):.1%} clipped"
    ax.set(xlabel="global L2 norm before clipping", ylabel="steps", title=title)
    return _finish(fig, path)


def plot_lr(lrs: Sequence[float], path=None) -> Figure:
    """Learning rate against optimizer step."""
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(range(1, len(lrs) + 1), lrs, color="tab:green")
    ax.set(xlabel="optimizer step", ylabel="learning rate", title=f"LR schedule (peak {max(lrs):.2e})")
    return _finish(fig, path)


def plot_curves(history: Sequence[Mapping], path=None, title: str = "training curves") -> Figure:
    """Train/validation loss and validation accuracy per epoch; ``history`` rows hold epoch, train_loss, val_loss,
    val_acc."""
    epochs = [row["epoch"] for row in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax_loss.plot(epochs, [row["train_loss"] for row in history], "o-", label="train")
    ax_loss.plot(epochs, [row["val_loss"] for row in history], "o-", label="validation")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    ax_loss.legend()
    ax_acc.plot(epochs, [row["val_acc"] for row in history], "o-", color="tab:purple")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title=f"validation accuracy (last {history[-1]['val_acc']:.2%})")
    fig.suptitle(title)
    return _finish(fig, path)


def plot_compare_curves(histories: Mapping[str, Sequence[Mapping]], key: str = "val_acc", path=None) -> Figure:
    """One line per run (label -> history) for ``key`` against epoch: e.g. baseline against OneCycle."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, history in histories.items():
        ax.plot([row["epoch"] for row in history], [row[key] for row in history], "o-", label=label)
    ax.set(xlabel="epoch", ylabel=key, title=f"{key} by run")
    ax.legend()
    return _finish(fig, path)


def plot_resume_curve(step_log: Sequence[Mapping], crash_step: int, resume_step: int, key: str = "loss",
                      path=None, smooth: int = 20) -> Figure:
    """``key`` against step across every run as one line, with the crash and the resume point marked.

    ``step_log`` rows hold ``step``, ``key`` and ``run`` (1 = before the crash, 2 = after). Steps the first run did
    after its last checkpoint are redone by the second run; the line keeps the redone (surviving) values.
    """
    final = {}  # step -> row; later runs overwrite the steps they redid
    for row in sorted(step_log, key=lambda r: (r["run"], r["step"])):
        final[row["step"]] = row
    steps = sorted(final)
    values = [final[s][key] for s in steps]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(steps, values, color="0.75", linewidth=0.8, label=f"{key} per step")
    if len(values) >= smooth:
        ax.plot(steps[smooth - 1:], _moving_average(values, smooth), color="tab:blue", label=f"{smooth}-step mean")
    ax.axvline(crash_step, color="tab:red", linestyle="--", label=f"crash after step {crash_step}")
    ax.axvline(resume_step, color="tab:green", linestyle=":", label=f"resumed at step {resume_step}")
    ax.set(xlabel="optimizer step", ylabel=key, title="one run across a crash")
    ax.legend()
    return _finish(fig, path)


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    sums, out = 0.0, []
    for i, v in enumerate(values):
        sums += v
        if i >= window:
            sums -= values[i - window]
        if i >= window - 1:
            out.append(sums / window)
    return out


def plot_throughput(results: Mapping[str, float], path=None, title: str = "throughput") -> Figure:
    """Bar chart of samples/s per configuration, each bar labelled with its speed-up over the first."""
    labels, speeds = list(results), list(results.values())
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bars = ax.bar(labels, speeds, color="tab:orange")
    for bar, speed in zip(bars, speeds):
        ax.annotate(f"{speed:,.0f}/s ({speed / speeds[0]:.2f}x)", (bar.get_x() + bar.get_width() / 2, speed),
                    ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="samples / s", title=title)
    return _finish(fig, path)
