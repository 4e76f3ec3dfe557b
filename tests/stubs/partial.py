"""Partial answers: the reference minus one or more concepts. Each earns exactly the properties it implements."""

import os

import torch


def normalize_shape_without_values(images):
    """The right dtype and shape, from the images, without the normalisation."""
    return images.float().unsqueeze(1)


def param_groups_split_without_decay(model, weight_decay):
    """Splits weights from biases and norms, decays neither: covers, decays nothing."""
    return [{"params": [p for p in model.parameters() if p.ndim > 1], "weight_decay": 0.0},
            {"params": [p for p in model.parameters() if p.ndim <= 1], "weight_decay": 0.0}]


def train_forward_only(model, loader, optimizer, device):
    """Runs every batch through the model in train mode and never learns: the mode of a loop that never steps shows
    nothing (its property needs steps), so it earns nothing."""
    model.train()
    for x, y in loader:
        model(x.to(device))
    return 0.0


def evaluate_modes_but_constant_numbers(model, loader, device):
    """Switches to eval mode under no_grad over every batch and restores the mode, but returns made-up numbers."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, _ in loader:
            model(x.to(device))
    model.train(was_training)
    return 0.0, 0.0


def save_atomic_complete(path, model, optimizer, scheduler, scaler, step):
    """A complete checkpoint written atomically, paired with a load that restores nothing."""
    from labutils.checkpoint import capture_rng_state

    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "step": step, "rng": capture_rng_state()}
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
