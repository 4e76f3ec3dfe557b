"""Do-nothing answers with the contract's signatures: the release's own stubs and bodies that return plausible
values without doing the work. Every one must score 0 on every property."""

import os

import torch


# --- 00 normalize_images ---------------------------------------------------------------------------------------------


def normalize_release(images):
    raise NotImplementedError("Lab 0: normalize_images")


def normalize_identity(images):
    return images


def normalize_zeros(images):
    return torch.zeros(images.shape[0], 1, *images.shape[1:])


# --- 01 train_one_epoch ----------------------------------------------------------------------------------------------


def train_release(model, loader, optimizer, device):
    raise NotImplementedError("Lab 1: train_one_epoch")


def train_zero(model, loader, optimizer, device):
    return 0.0


def train_mode_only(model, loader, optimizer, device):
    model.train()
    return 0.0


def train_nan(model, loader, optimizer, device):
    model.train()
    return float("nan")


# --- 01 evaluate -----------------------------------------------------------------------------------------------------


def evaluate_release(model, loader, device):
    raise NotImplementedError("Lab 1: evaluate")


def evaluate_zeros(model, loader, device):
    return 0.0, 0.0


def evaluate_eval_only(model, loader, device):
    model.eval()
    return 0.0, 0.0


def evaluate_mode_dance(model, loader, device):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        pass
    model.train(was_training)
    return 0.0, 0.0


def evaluate_perfect(model, loader, device):
    return 0.0, 1.0


# --- 02 scheduler ----------------------------------------------------------------------------------------------------


def train_scheduler_release(model, loader, optimizer, scheduler, device):
    raise NotImplementedError("Lab 2: train_one_epoch")


def train_scheduler_zero(model, loader, optimizer, scheduler, device):
    model.train()
    return 0.0


def train_scheduler_steps_only(model, loader, optimizer, scheduler, device):
    model.train()
    for _ in loader:
        scheduler.step()
    return 0.0


# --- 03 clipping -----------------------------------------------------------------------------------------------------


def train_clipping_release(model, loader, optimizer, scheduler, max_norm, device):
    raise NotImplementedError("Lab 3: train_one_epoch")


def train_clipping_zero(model, loader, optimizer, scheduler, max_norm, device):
    model.train()
    return 0.0, [0.0]


def train_clipping_empty(model, loader, optimizer, scheduler, max_norm, device):
    return 0.0, []


# --- 04 accumulation -------------------------------------------------------------------------------------------------


def train_accumulation_release(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    raise NotImplementedError("Lab 4: train_one_epoch")


def train_accumulation_zero(model, loader, optimizer, scheduler, max_norm, accum_steps, device):
    model.train()
    return 0.0, []


# --- 05 amp ----------------------------------------------------------------------------------------------------------


def train_amp_release(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    raise NotImplementedError("Lab 5: train_one_epoch")


def train_amp_zero(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    return 0.0, []


def train_amp_empty_norms(model, loader, optimizer, scheduler, max_norm, scaler, amp_dtype, device):
    model.train()
    return 0.0, [0.0] * len(loader)


# --- 06 save_checkpoint / load_checkpoint ----------------------------------------------------------------------------


def save_release(path, model, optimizer, scheduler, scaler, step):
    raise NotImplementedError("Lab 6: save_checkpoint")


def load_release(path, model, optimizer, scheduler, scaler):
    raise NotImplementedError("Lab 6: load_checkpoint")


def save_nothing(path, model, optimizer, scheduler, scaler, step):
    return None


def load_zero(path, model, optimizer, scheduler, scaler):
    return 0


def save_empty_dict(path, model, optimizer, scheduler, scaler, step):
    torch.save({}, path)


def load_returns_step_key(path, model, optimizer, scheduler, scaler):
    return int(torch.load(path, weights_only=True).get("step", 0))


_KEPT = {}


def save_step_in_memory(path, model, optimizer, scheduler, scaler, step):
    """A lazy pair that writes a file but keeps the step in a global: the load 'returns the saved step' having read
    nothing back (as lab 7's check's own in-memory pair does)."""
    torch.save({}, path)
    _KEPT["step"] = step


def load_step_from_memory(path, model, optimizer, scheduler, scaler):
    return _KEPT.get("step", 0)


def save_from_the_handout(path, model, optimizer, scheduler, scaler, step):
    """The shortcut a student tries first: the lab's own save, which the handout no longer has."""
    from labutils.checkpoint import save_checkpoint

    save_checkpoint(path, model, optimizer, scheduler, scaler, step)


def load_from_the_handout(path, model, optimizer, scheduler, scaler):
    from labutils.checkpoint import restore_checkpoint

    return restore_checkpoint(path, model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler)["step"]


# --- 07 train_resumable ----------------------------------------------------------------------------------------------


def resumable_release(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    raise NotImplementedError("Lab 7: train_resumable")


def resumable_zero(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device, on_step=None):
    os.makedirs(ckpt_dir, exist_ok=True)
    return 0


def resumable_returns_nothing(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                              on_step=None):
    model.train()



def resumable_reports_progress(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, device,
                               on_step=None):
    """Reports, saves and resumes every step, but never trains: progress without evidence of training. (It calls lab
    6's pair by name, as lab 7's loop does; the check hands it a pair of its own.)"""
    from labutils.checkpoint import latest_checkpoint

    latest = latest_checkpoint(ckpt_dir)
    step = 0 if latest is None else load_checkpoint(latest, model, optimizer, scheduler, None)  # noqa: F821 (lab 6's)
    model.train()
    while step < epochs * len(train_loader):
        step += 1
        if step % save_every == 0:
            save_checkpoint(os.path.join(ckpt_dir, f"step-{step:06d}.pt"), model, optimizer, scheduler,  # noqa: F821
                            None, step)
        if on_step is not None:
            on_step(step, 2.3)
    return step


# --- 08 param_groups -------------------------------------------------------------------------------------------------


def param_groups_release(model, weight_decay):
    raise NotImplementedError("Lab 8: param_groups")


def param_groups_one_no_decay(model, weight_decay):
    return [{"params": list(model.parameters()), "weight_decay": 0.0}]


def param_groups_empty(model, weight_decay):
    return []


def param_groups_one_decayed(model, weight_decay):
    return [{"params": list(model.parameters()), "weight_decay": 0.0 * weight_decay}]


def param_groups_adamw_default(model, weight_decay):
    """What AdamW(model.parameters(), weight_decay=weight_decay) does by default: one group, everything decayed."""
    return [{"params": list(model.parameters()), "weight_decay": weight_decay}]
