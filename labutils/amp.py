"""Mixed precision: which autocast dtype to use and whether a GradScaler is needed.

fp16 has a narrow exponent range: small gradients underflow to zero, so fp16 training needs a GradScaler that
multiplies the loss before backward and divides (``unscale_``) before clipping and stepping. bf16 keeps fp32's
exponent range, so it needs no scaler; it is also the dtype CPU autocast supports well. Hence: fp16 + GradScaler on
CUDA, bf16 (no scaler) elsewhere.
"""

from __future__ import annotations

import torch


def autocast_dtype(amp: str, device) -> torch.dtype | None:
    """The autocast dtype for ``amp`` in off | auto | bf16 | fp16 on ``device``; None means full fp32."""
    device = torch.device(device)
    if amp == "off":
        return None
    if amp == "auto":
        return torch.float16 if device.type == "cuda" else torch.bfloat16
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
