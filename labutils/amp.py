"""Mixed precision: which autocast dtype to use and whether a GradScaler is needed.

fp16 has a narrow exponent range: small gradients underflow to zero, so fp16 training needs a GradScaler that
multiplies the loss before backward and divides (``unscale_``) before clipping and stepping. bf16 keeps fp32's
exponent range, so it needs no scaler; it is also the dtype CPU autocast supports. Hence: fp16 + GradScaler on
CUDA, bf16 (no scaler) on a CPU.

Autocast only pays where the hardware computes in 16 bits. A CPU with bf16 instructions (AVX-512 BF16 or AMX) runs
bf16 convolutions natively; one without them (AVX2 only: most laptops, many cloud cores) has oneDNN emulate them, and
bf16 autocast measured 4.8x *slower* than float32 on a 2-core AVX2 EPYC. So ``amp="auto"`` picks bf16 on a CPU only
where it has those instructions and trains in float32 otherwise; ``amp="bf16"`` always autocasts.
"""

from __future__ import annotations

import torch


def cpu_has_bf16_instructions() -> bool:
    """True where the CPU computes bf16 natively (AVX-512 BF16 or AMX tiles), so bf16 autocast can be faster."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def autocast_dtype(amp: str, device) -> torch.dtype | None:
    """The autocast dtype for ``amp`` in off | auto | bf16 | fp16 on ``device``; None means full fp32.

    ``auto``: fp16 on CUDA; bf16 on a CPU with bf16 instructions; float32 (None) on any other CPU."""
    device = torch.device(device)
    if amp == "off":
        return None
    if amp == "auto":
        if device.type == "cuda":
            return torch.float16
        return torch.bfloat16 if device.type != "cpu" or cpu_has_bf16_instructions() else None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise ValueError("amp='fp16' needs a CUDA device (CPU autocast is bf16): use amp='bf16' or amp='auto'")
        return torch.float16
    raise ValueError(f"amp={amp!r} is unknown: use off, auto, bf16 or fp16")


def make_scaler(amp_dtype: torch.dtype | None, device) -> torch.amp.GradScaler | None:
    """A GradScaler only where it is needed: fp16 on CUDA."""
    device = torch.device(device)
    if amp_dtype == torch.float16 and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None
