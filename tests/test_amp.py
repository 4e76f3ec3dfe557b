"""amp.autocast_dtype: autocast only where the hardware computes in 16 bits."""

import pytest
import torch

from labutils import amp


@pytest.mark.parametrize("native, expected", [(True, torch.bfloat16), (False, None)])
def test_auto_on_cpu_autocasts_only_with_bf16_instructions(monkeypatch, native, expected):
    monkeypatch.setattr(amp, "cpu_has_bf16_instructions", lambda: native)
    assert amp.autocast_dtype("auto", "cpu") is expected


def test_auto_on_cuda_is_fp16_with_a_scaler_and_explicit_modes_are_kept(monkeypatch):
    monkeypatch.setattr(amp, "cpu_has_bf16_instructions", lambda: False)
    assert amp.autocast_dtype("auto", "cuda") is torch.float16
    assert amp.autocast_dtype("bf16", "cpu") is torch.bfloat16  # asked for: autocast even where it is slow
    assert amp.autocast_dtype("off", "cuda") is None
    assert amp.make_scaler(torch.bfloat16, "cpu") is None


def test_fp16_on_a_cpu_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="amp='bf16' or amp='auto'"):
        amp.autocast_dtype("fp16", "cpu")


def test_the_cpu_report_is_a_plain_bool():
    assert isinstance(amp.cpu_has_bf16_instructions(), bool)
