"""What a notebook shows that is not a plot of a log: a grid of images (lab 0), two functions side by side (lab 8)."""

from __future__ import annotations

import difflib
import inspect

import matplotlib.pyplot as plt
import torch

from .data import CLASSES


def show_images(images: torch.Tensor, labels: torch.Tensor, n: int = 16):
    """A grid of the first ``n`` uint8 images (N, 28, 28) titled with their class names; returns the Figure."""
    cols = 8
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 1.3, rows * 1.5))
    for ax, image, label in zip(axes.flat, images[:n], labels[:n]):
        ax.imshow(image, cmap="gray_r")
        ax.set_title(CLASSES[int(label)], fontsize=7)
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
