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


@pytest.mark.parametrize("device, mps_autocast, bf16_cpu, dtype, scaler", [
    ("cuda", True, False, torch.float16, True),
    (torch.device("cuda", 1), True, False, torch.float16, True),
    ("mps", True, False, torch.float16, True),
    ("mps", False, False, None, False),
    ("cpu", True, True, torch.bfloat16, False),
    (torch.device("cpu"), True, False, None, False),
])
def test_the_auto_rule_per_device_type(monkeypatch, device, mps_autocast, bf16_cpu, dtype, scaler):
    """fp16 + GradScaler on a GPU, bf16 on a CPU with bf16 instructions, float32 elsewhere; each with its reason."""
    monkeypatch.setattr(amp, "mps_autocast_supported", lambda: mps_autocast)
    monkeypatch.setattr(amp, "cpu_has_bf16_instructions", lambda: bf16_cpu)
    precision = amp.choose("auto", device)
    assert (precision.dtype, precision.scaler) == (dtype, scaler)
    assert precision.reason.startswith("amp='auto' on ")
    assert amp.autocast_dtype("auto", device) is dtype  # one rule, two ways to read it


def test_mps_without_autocast_says_it_falls_back_to_float32(monkeypatch):
    monkeypatch.setattr(amp, "mps_autocast_supported", lambda: False)
    assert str(amp.choose("auto", "mps")).startswith("float32, autocast off (amp='auto' on MPS falls back to "
                                                      f"float32: torch {torch.__version__} has no autocast for MPS")


def test_fp16_is_allowed_on_a_gpu_and_the_measured_type_follows_the_device():
    assert amp.choose("fp16", "mps").dtype is torch.float16
    assert str(amp.choose("fp16", "cuda:0")) == "float16 autocast + GradScaler (amp='fp16')"
    assert [amp.sixteen_bit(d) for d in ("cuda", "mps", "cpu")] == [torch.float16, torch.float16, torch.bfloat16]
    assert amp.make_scaler(torch.float16, "cpu") is None  # CPU autocast is bf16: no scaler there


def test_cuda_bf16_is_false_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert amp.cuda_bf16_supported() is False


def test_scaler_watch_sees_a_real_overflow_skip_a_step_and_the_scale_back_off():
    """A GradScaler whose scale is too large for float32 overflows for real (no patching): measure.ScalerWatch
    counts the steps scaler.step skipped and the scale halving after each, and the weights stay finite."""
    from labutils import measure

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)  # loss * 2**127 is past float32's 3.4e38
    watch = measure.ScalerWatch(model, optimizer, scaler)
    x, y = 1000 * torch.randn(8, 4, 4), torch.randint(0, 4, (8,))  # gradients of about 1e3 * the scale: inf
    for _ in range(40):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    watch.remove()
    assert 1 <= watch.skipped < 40 and watch.optimizer_steps == 40 - watch.skipped
    assert watch.scales[0] == 2.0**127 and watch.scales[watch.skipped] == 2.0**(127 - watch.skipped)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert str(watch).startswith(f"{watch.skipped} of 40 fp16 steps skipped by the GradScaler")
    assert f"backed off {watch.skipped} times" in str(watch)
