"""One dataclass holds every knob of a Loop Lab run.

Why one place: a run is reproducible only if everything that shaped it is printed at the start and stored in the
checkpoint. Unknown overrides raise, so a typo (``max_nrom=1``) never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field

SCHEDULES = ("constant", "onecycle", "warmup_cosine")
AMP_MODES = ("off", "auto", "bf16", "fp16")


def knob(default, help: str):
    """A config field whose help text is kept with it: the CLI's --help and describe() read it from here."""
    return field(default=default, metadata={"help": help})


@dataclass
class LabConfig:
    # data
    batch_size: int = knob(128, "physical batch: what one forward pass sees")
    subset: int | None = knob(None, "use only the first N training images (smoke runs); validation shrinks alike")
    seed: int = knob(0, "one seed drives the split, the data order and the weights")
    # model
    dropout: float = knob(0.0, ">0 makes forgetting model.eval() visible")
    batchnorm: bool = knob(False, "the BatchNorm variant of SmallCNN")
    # optimisation
    epochs: int = knob(5, "passes over the training split")
    lr: float = knob(1e-3, "peak LR for the schedules, the constant LR otherwise")
    weight_decay: float = knob(0.01, "AdamW's default")
    no_decay_bias_norm: bool = knob(False, "parameter groups: no weight decay on biases and norm parameters")
    schedule: str = knob("constant", "constant | onecycle | warmup_cosine, stepped once per optimizer step")
    warmup_steps: int = knob(100, "linear warmup length for warmup_cosine")
    max_norm: float | None = knob(None, "global-norm clipping threshold; None logs the norm but never clips")
    accum_steps: int = knob(1, "micro-batches per optimizer step (virtual batch = batch_size * accum_steps)")
    amp: str = knob("off", "off | auto | bf16 | fp16; auto = fp16 + GradScaler on CUDA (and MPS where torch "
                           "autocasts there), bf16 on a CPU with bf16 instructions (AVX-512 BF16, AMX), float32 "
                           "elsewhere (labutils.amp)")
    device: str = knob("auto", "auto | cpu | cuda | cuda:1 | mps; auto = CUDA, else MPS, else CPU, and the "
                               "LAB_DEVICE environment variable replaces it (labutils.devices)")
    # checkpoints and logs
    ckpt_dir: str | None = knob(None, "where last-/best- checkpoints go; None disables checkpointing")
    save_every: int = knob(100, "optimizer steps between \"last\" checkpoints")
    keep_last: int = knob(3, "rotation: how many \"last\" checkpoints to keep")
    log_path: str | None = knob(None, "per-step log, .csv or .jsonl")
    resume: bool = knob(False, "continue from the newest valid checkpoint in ckpt_dir")
    crash_at_step: int | None = knob(None, "simulate a crash: os._exit(1) right after this optimizer step")
    progress: bool | None = knob(None, "tqdm bars; None = only when stderr is a terminal")

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
            hints = [f"{k} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(k, self.keys(), 1)) else k
                     for k in unknown]
            raise ValueError(f"unknown config key(s): {', '.join(hints)}. Valid keys: {', '.join(self.keys())}")
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
