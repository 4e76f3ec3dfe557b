"""One dataclass holds every knob of a Loop Lab run.

Why one place: a run is reproducible only if everything that shaped it is printed at the start and stored in the
checkpoint. Unknown overrides raise, so a typo (``max_nrom=1``) never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SCHEDULES = ("constant", "onecycle", "warmup_cosine")
AMP_MODES = ("off", "auto", "bf16", "fp16")


@dataclass
class LabConfig:
    # data
    batch_size: int = 128  # physical batch: what one forward pass sees
    subset: int | None = None  # use only the first N training images (smoke runs); validation shrinks alike
    seed: int = 0  # one seed drives the split, the data order and the weights
    # model
    dropout: float = 0.0  # >0 makes forgetting model.eval() visible
    batchnorm: bool = False  # the BatchNorm variant of SmallCNN
    # optimisation
    epochs: int = 5
    lr: float = 1e-3  # peak LR for the schedules, the constant LR otherwise
    weight_decay: float = 0.01  # AdamW's default
    no_decay_bias_norm: bool = False  # parameter groups: no weight decay on biases and norm parameters
    schedule: str = "constant"  # one of SCHEDULES, stepped once per optimizer step
    warmup_steps: int = 100  # linear warmup length for warmup_cosine
    max_norm: float | None = None  # global-norm clipping threshold; None logs the norm but never clips
    accum_steps: int = 1  # micro-batches per optimizer step (virtual batch = batch_size * accum_steps)
    amp: str = "off"  # one of AMP_MODES; auto = bf16 on CPU, fp16 + GradScaler on CUDA
    device: str = "cpu"
    # checkpoints and logs
    ckpt_dir: str | None = None  # where last-/best- checkpoints go; None disables checkpointing
    save_every: int = 100  # optimizer steps between "last" checkpoints
    keep_last: int = 3  # rotation: how many "last" checkpoints to keep
    log_path: str | None = None  # per-step log, .csv or .jsonl
    resume: bool = False  # continue from the newest valid checkpoint in ckpt_dir
    crash_at_step: int | None = None  # simulate a crash: os._exit(1) right after this optimizer step
    progress: bool | None = None  # tqdm bars; None = only when stderr is a terminal

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r} is unknown: use one of {', '.join(SCHEDULES)}")
        if self.amp not in AMP_MODES:
            raise ValueError(f"amp={self.amp!r} is unknown: use one of {', '.join(AMP_MODES)}")
        for name in ("batch_size", "epochs", "accum_steps", "save_every", "keep_last"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_norm is not None and self.max_norm <= 0:
            raise ValueError(f"max_norm must be positive (or None to disable clipping), got {self.max_norm}")
        if self.subset is not None and self.subset < 1:
            raise ValueError(f"subset must be a positive number of images (or None for all), got {self.subset}")

    def replace(self, **overrides) -> "LabConfig":
        """A copy with ``overrides`` applied; unknown keys raise with the list of valid ones."""
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"unknown config key(s) {unknown}: valid keys are {', '.join(self.keys())}")
        return dataclasses.replace(self, **overrides)

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """The effective config as aligned ``key = value`` lines, printed at the start of every run."""
        width = max(len(k) for k in self.keys())
        return "\n".join(f"{k:<{width}} = {v!r}" for k, v in self.to_dict().items())
