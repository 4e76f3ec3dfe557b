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


# --- timing a student can believe (issue 45) --------------------------------------------------------------------------


def _comparison(fp32, sixteen):
    from labutils.measure import Comparison

    return Comparison({"fp32": list(fp32), "bf16 autocast": list(sixteen)}, samples=64)


def test_a_comparison_says_when_its_rounds_disagree():
    """The median of interleaved rounds, their spread, and a sentence when the rounds disagree on which is faster."""
    noisy = _comparison([1000, 1000, 1000], [800, 1100, 1300])
    assert noisy.within_noise("bf16 autocast", "fp32") and not noisy.slower("bf16 autocast", "fp32")
    assert "within the noise" in noisy.verdict("bf16 autocast", "fp32")
    assert "1.10x fp32 (median of 3 rounds, 0.80x to 1.30x)" in noisy.verdict("bf16 autocast", "fp32")
    slow = _comparison([5000, 4000, 5200], [1000, 900, 1100])
    assert slow.slower("bf16 autocast", "fp32") and "slower in every round" in slow.verdict("bf16 autocast", "fp32")
    assert "1,000 samples/s" in str(slow) and "900 to 1,100" in str(slow)


def test_auto_never_trains_in_a_precision_its_own_measurement_showed_slower():
    """amp='auto' picks by the CPU's instructions; the measurement on this machine overrides it when every round
    disagrees with it, and otherwise says the default stands, with the figures."""
    from labutils import amp

    bf16 = amp.Precision(torch.bfloat16, False, "amp='auto' on a CPU with bf16 instructions")
    fp32 = amp.Precision(None, False, "amp='auto' on a CPU without bf16 instructions")
    slow, fast = _comparison([5000] * 3, [900, 1000, 1100]), _comparison([1000] * 3, [1500, 1600, 1700])
    noisy = _comparison([1000] * 3, [900, 1000, 1200])
    dropped = amp.confirmed(bf16, slow, torch.bfloat16, "bf16 autocast")
    assert dropped.dtype is None and "slower in every round, so float32" in dropped.reason, dropped
    assert amp.confirmed(fp32, fast, torch.bfloat16, "bf16 autocast").dtype is torch.bfloat16
    kept = amp.confirmed(bf16, noisy, torch.bfloat16, "bf16 autocast")
    assert kept.dtype is torch.bfloat16 and "within the noise" in kept.reason, kept
    assert amp.confirmed(fp32, slow, torch.bfloat16, "bf16 autocast").dtype is None


def test_compare_throughput_interleaves_its_rounds():
    """Each round times every way once, the first way rotating, after a warm-up of each on the same batch size."""
    from labutils import measure

    calls = []
    ways = {name: (lambda b, name=name: calls.append((name, len(b)))) for name in ("a", "b", "c")}
    batches = [(torch.zeros(4, 1), torch.zeros(4))] * 3
    comparison = measure.compare_throughput(ways, batches, rounds=3, warmup=1)
    assert calls[:3] == [("a", 1), ("b", 1), ("c", 1)]
    assert [name for name, _ in calls[3:]] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert comparison.samples == 12 and all(len(v) == 3 for v in comparison.speeds.values())
