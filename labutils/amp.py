"""Mixed precision: which autocast dtype to use on which device, and whether a GradScaler is needed.

fp16 has a narrow exponent range: small gradients underflow to zero, so fp16 training needs a GradScaler that
multiplies the loss before backward and divides (``unscale_``) before clipping and stepping. bf16 keeps fp32's
exponent range, so it needs no scaler.

The rule of ``amp="auto"``, per device type (written here once; lab 5 explains it, lab 8 compares the two types):

- CUDA: fp16 autocast with a GradScaler, the recipe every GPU course teaches (tensor cores compute in fp16 on every
  CUDA GPU; bf16 only on Ampere and newer, :func:`cuda_bf16_supported`).
- MPS (Apple silicon): fp16 autocast with a GradScaler where this torch has autocast for MPS; float32 otherwise, and
  :func:`choose` says so.
- CPU: bf16 where the CPU computes it natively (AVX-512 BF16 or AMX), float32 elsewhere. Without those instructions
  oneDNN emulates bf16, and bf16 autocast measured 4.8x *slower* than float32 on a 2-core AVX2 EPYC.

``amp="bf16"`` always autocasts to bf16; ``amp="fp16"`` needs a GPU (CPU autocast computes in bf16).

That rule is a default, from the hardware's instructions; lab 5 then times the student's loop both ways on their own
machine (:func:`labutils.measure.compare_throughput`), and :func:`confirmed` keeps ``auto``'s choice only where that
measurement does not show it slower: a notebook never trains in a precision its own cell showed to be slower.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

GPU_FP16 = ("cuda", "mps")  # device types whose autocast computes in fp16 (and so needs a GradScaler)


def cpu_has_bf16_instructions() -> bool:
    """True where the CPU computes bf16 natively (AVX-512 BF16 or AMX tiles), so bf16 autocast can be faster."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def cuda_bf16_supported() -> bool:
    """True on a CUDA GPU that computes bf16 in hardware (Ampere and newer), not by emulation."""
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def mps_autocast_supported() -> bool:
    """True where this torch has autocast for MPS (older versions raise on ``torch.autocast("mps")``)."""
    is_available = getattr(torch.amp, "is_autocast_available", None)
    return bool(is_available is not None and is_available("mps"))


@dataclass(frozen=True)
class Precision:
    """What a run computes in, and why: ``dtype`` None means plain float32 (autocast off)."""

    dtype: torch.dtype | None
    scaler: bool  # a GradScaler is needed (fp16)
    reason: str

    def __str__(self) -> str:
        if self.dtype is None:
            return f"float32, autocast off ({self.reason})"
        what = str(self.dtype).removeprefix("torch.")
        return f"{what} autocast" + (" + GradScaler" if self.scaler else "") + f" ({self.reason})"


def _auto(device: torch.device) -> Precision:
    """``amp="auto"``: the rule of the module docstring, with its reason."""
    if device.type == "cuda":
        return Precision(torch.float16, True, "amp='auto' on CUDA: fp16 on tensor cores, scaled against underflow")
    if device.type == "mps":
        if mps_autocast_supported():
            return Precision(torch.float16, True, "amp='auto' on MPS: fp16, scaled against underflow")
        return Precision(None, False, f"amp='auto' on MPS falls back to float32: torch {torch.__version__} has no "
                                      "autocast for MPS")
    if cpu_has_bf16_instructions():
        return Precision(torch.bfloat16, False, "amp='auto' on a CPU with bf16 instructions, AVX-512 BF16 or AMX: "
                                                "the default by instructions, which lab 5 measures on this machine")
    return Precision(None, False, "amp='auto' on a CPU without bf16 instructions, where bf16 is emulated and slower: "
                                  "the default by instructions, which lab 5 measures on this machine")


def choose(amp: str, device) -> Precision:
    """The precision for ``amp`` in off | auto | bf16 | fp16 on ``device`` (a string or a torch.device)."""
    device = torch.device(device)
    if amp == "off":
        return Precision(None, False, "amp='off'")
    if amp == "auto":
        return _auto(device)
    if amp == "bf16":
        return Precision(torch.bfloat16, False, "amp='bf16' (bf16 keeps float32's range: no scaler)")
    if amp == "fp16":
        if device.type not in GPU_FP16:
            raise ValueError("amp='fp16' needs a CUDA or MPS device (CPU autocast is bf16): use amp='bf16' or "
                             "amp='auto'")
        return Precision(torch.float16, True, "amp='fp16'")
    raise ValueError(f"amp={amp!r} is unknown: use off, auto, bf16 or fp16")


def autocast_dtype(amp: str, device) -> torch.dtype | None:
    """The autocast dtype for ``amp`` on ``device``; None means full fp32 (see :func:`choose` for why)."""
    return choose(amp, device).dtype


def sixteen_bit(device) -> torch.dtype:
    """The 16-bit type a device's autocast is measured in (lab 5's throughput): fp16 on a GPU, bf16 on a CPU, even
    where ``auto`` would not use it (the measurement is how a student sees why)."""
    return torch.float16 if torch.device(device).type in GPU_FP16 else torch.bfloat16


def make_scaler(amp_dtype: torch.dtype | None, device) -> torch.amp.GradScaler | None:
    """A GradScaler only where it is needed: fp16 on a GPU."""
    device = torch.device(device)
    if amp_dtype == torch.float16 and device.type in GPU_FP16:
        return torch.amp.GradScaler(device.type)
    return None


def confirmed(precision: Precision, comparison, sixteen: torch.dtype, label: str, base: str = "fp32") -> Precision:
    """``amp="auto"``'s ``precision`` checked against this machine's ``comparison`` (a
    :class:`labutils.measure.Comparison` of the loop under ``sixteen``-bit autocast, ``label``, and in float32,
    ``base``): the way that was faster in every round is the one to train in; where the rounds disagree (within the
    noise) the default stands, said so. The reason carries the measured figures."""
    figures = comparison.verdict(label, base).partition(":")[0]
    if comparison.slower(label, base) and precision.dtype == sixteen:
        return Precision(None, False, f"amp='auto' measured here: {figures}, slower in every round, so float32")
    if comparison.slower(base, label) and precision.dtype is None:
        scaler = sixteen == torch.float16
        return Precision(sixteen, scaler, f"amp='auto' measured here: {figures}, faster in every round")
    how = "within the noise" if comparison.within_noise(label, base) else "as the default expects"
    return dataclasses.replace(precision, reason=f"{precision.reason}; measured here: {figures}, {how}")
