"""SmallCNN: the lab's model, small enough to train on a laptop CPU in minutes.

Dropout and BatchNorm are optional because they are the two layers that behave differently in train and eval mode:
with either switched on, forgetting ``model.eval()`` visibly changes validation results.
"""

from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Two conv-relu-pool blocks, a 128-unit linear head, 10 logits.

    x: of shape (N, 1, 28, 28), normalised images; returns raw logits of shape (N, 10) (no softmax: cross-entropy
    applies log-softmax itself).
    """

    def __init__(self, channels: tuple[int, int] = (16, 32), dropout: float = 0.0, batchnorm: bool = False):
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            *self._block(1, c1, batchnorm),
            *self._block(c1, c2, batchnorm),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(c2 * 7 * 7, 128),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(128, 10),
        )

    @staticmethod
    def _block(cin: int, cout: int, batchnorm: bool) -> list[nn.Module]:
        conv = nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=not batchnorm)  # BN's shift replaces the bias
        norm = [nn.BatchNorm2d(cout)] if batchnorm else []
        return [conv, *norm, nn.ReLU(), nn.MaxPool2d(2)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
