"""Evaluation done right: eval mode, no autograd, per-sample averages, and the caller's mode restored.

The lab's table of evaluation mistakes, each of which this function avoids:
- no ``model.eval()``: dropout keeps dropping and BatchNorm keeps updating its running statistics on validation data;
- no ``torch.no_grad()``: every batch builds a graph nobody backpropagates through (memory and time wasted);
- averaging per batch: a smaller last batch counts as much as a full one, so the loss depends on the batch size;
- not restoring train mode: the next epoch silently trains with dropout off and BatchNorm frozen;
- reporting the training loss as the validation loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader, device="cpu", amp_dtype: torch.dtype | None = None) -> tuple[float, float]:
    """(mean cross-entropy per sample, accuracy in [0, 1]) over every batch of ``loader``."""
    was_training = model.training
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    device = torch.device(device)
    try:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)  # overlaps a pinned copy
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                logits = model(x)
            total_loss += F.cross_entropy(logits.float(), y, reduction="sum").item()  # sum, divided once at the end
            correct += (logits.argmax(dim=1) == y).sum().item()
            seen += len(y)
    finally:
        model.train(was_training)
    if seen == 0:
        raise ValueError("evaluate() got an empty loader")
    return total_loss / seen, correct / seen
