"""On a CUDA GPU: fp16 + GradScaler training with a real overflow, synchronised timing, lab 7's resume bit-identical,
the checks' GPU run, and notebooks 01-08 in smoke mode. Marked ``cuda``; on a machine without CUDA every test here is
skipped with one reason (tests/conftest.py). ``.venv/bin/python -m pytest -m cuda`` runs them where there is a GPU.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from labutils import amp, checks, crash, data, devices, measure
from labutils.checkpoint import set_seed
from labutils.models import SmallCNN

import mutants

pytestmark = [pytest.mark.cuda, pytest.mark.slow]
GPU = torch.device("cuda")


def _batches(n_batches: int, batch_size: int = 64, seed: int = 0) -> list:
    """Random FashionMNIST-shaped batches (no dataset needed), normalised as the lab's are."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n_batches * batch_size, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (n_batches * batch_size,), generator=g)
    loader = data.make_loader(images, labels, batch_size, shuffle=False, pin_memory=True)
    return list(loader)


def test_auto_chooses_the_gpu_and_fp16_with_a_scaler(monkeypatch):
    monkeypatch.delenv(devices.DEVICE_ENV, raising=False)
    assert devices.resolve("auto") == GPU
    precision = amp.choose("auto", GPU)
    assert (precision.dtype, precision.scaler) == (torch.float16, True)
    assert isinstance(amp.make_scaler(precision.dtype, GPU), torch.amp.GradScaler)


def test_fp16_training_with_a_gradscaler_overflows_for_real_skips_the_step_and_backs_off():
    """No forced overflow: a scale of 2**40 makes the fp16 gradients inf, as a too-high scale does early in real
    runs; the scaler skips those steps (measure.ScalerWatch sees them), halves the scale, and training goes on."""
    set_seed(0)
    model = SmallCNN().to(GPU)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    constant = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)
    watch = measure.ScalerWatch(model, optimizer, scaler)
    loss, norms = mutants.correct.amp_canonical(model, _batches(80), optimizer, constant, 2.0, scaler,
                                                torch.float16, GPU)
    watch.remove()
    print(watch)
    assert watch.skipped >= 1 and watch.optimizer_steps >= 20
    assert watch.scales[0] == 2.0**40 and watch.scales[-1] < 2.0**40  # backed off after the overflow
    assert not all(map(torch.isfinite, map(torch.tensor, norms)))  # the skipped steps' norms are inf/nan
    assert all(torch.isfinite(p).all() for p in model.parameters())  # no inf/nan reached the weights
    assert torch.isfinite(torch.tensor(loss))


def test_throughput_is_timed_with_the_gpu_queue_drained():
    """The same queued GPU work timed with synchronize (device=cuda) and without (device=cpu: no wait): only the
    first measures the work, so it is far slower per "sample"."""
    a = torch.randn(4096, 4096, device=GPU)
    batches = [(None, torch.zeros(1))] * 30

    def work(bs):
        for _ in bs:
            a @ a  # queued, not waited for

    waited = measure.samples_per_second(work, batches, warmup=1, device=GPU)
    devices.synchronize(GPU)
    queued_only = measure.samples_per_second(work, batches, warmup=1, device="cpu")
    devices.synchronize(GPU)
    assert queued_only > 3 * waited, (queued_only, waited)


def _training_process(ckpt_dir, log_path, crash_at_step=None):
    """Lab 7's training_process on random data, on the GPU: deterministic kernels, train_resumable, final weights."""
    torch.set_num_threads(1)
    devices.deterministic()
    set_seed(0)
    model = SmallCNN(dropout=0.25).to(GPU)  # dropout: exact only with the CUDA generator restored too
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (1024, 28, 28), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, 10, (1024,), generator=g)
    loader = data.make_loader(images, labels, 64, seed=0, pin_memory=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=3 * len(loader))
    mutants.correct.resume_canonical(model, optimizer, scheduler, loader, 3, ckpt_dir, 7, GPU,
                                     on_step=crash.StepRecorder(log_path, crash_at_step))
    torch.save(model.state_dict(), f"{ckpt_dir}/final-weights.pt")


def test_lab07_crash_and_resume_is_bit_identical_on_cuda(tmp_path):
    """Lab 7's flow: an uninterrupted run and a run killed mid-epoch 3 then resumed, each in its own (spawned)
    process on the GPU; every parameter must match to the bit."""
    assert crash.start_method() == "spawn"  # a forked child could not use CUDA
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight.mkdir(), resumed.mkdir()

    def process(*args):  # a closure, as a notebook cell's function: it reaches the child by value
        _training_process(*args)

    assert crash.run_forked(process, straight, straight / "steps.jsonl") == 0
    assert crash.run_forked(process, resumed, resumed / "steps.jsonl", 40) == 1
    assert crash.run_forked(process, resumed, resumed / "steps.jsonl") == 0
    runs = {r["run"] for r in crash.read_step_log(resumed / "steps.jsonl")}
    assert runs == {1, 2}
    a = torch.load(straight / "final-weights.pt", weights_only=True)
    b = torch.load(resumed / "final-weights.pt", weights_only=True)
    differ = {k: (a[k].double() - b[k].double()).abs().max().item() for k in a if not torch.equal(a[k], b[k])}
    assert differ == {}, f"not bit-identical on CUDA: largest difference per tensor {differ}"


def train_one_epoch_with_cpu_accumulator(model, loader, optimizer, device):
    """Right on a CPU; on a GPU the per-sample losses it collects live on the GPU and the accumulator on the CPU."""
    model.train()
    losses = torch.zeros(0, device="cpu")  # hard-coded: the bug only a GPU shows
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        per_sample = F.cross_entropy(model(x), y, reduction="none")
        per_sample.mean().backward()
        optimizer.step()
        losses = torch.cat([losses, per_sample.detach()])
    return losses.mean().item()


def test_the_checks_gpu_run_catches_a_hard_coded_cpu_and_says_so():
    report = checks.check_train_one_epoch(train_one_epoch_with_cpu_accumulator, "baseline")
    assert [f.check for f in report.failures] == ["device"]  # the CPU runs pass it: only the GPU run shows it
    message = report.failures[0].message
    assert message.startswith("on the GPU (device='cuda'), train_one_epoch raised RuntimeError at line 11 "
                              "(`losses = torch.cat([losses, per_sample.detach()])`)")
    assert "cpu" in message.partition("RuntimeError")[2]  # torch's own words name the CPU tensor


@pytest.mark.parametrize("variant", [v for v in mutants.CORRECT if v.exercise in
                                     ("baseline", "evaluate", "scheduler", "clipping", "accumulation", "amp",
                                      "resume")], ids=lambda v: v.name)
def test_every_correct_variant_also_passes_on_the_gpu(variant):
    report = mutants.run_check(variant)
    assert report.passed, str(report)


@pytest.mark.notebooks
@pytest.mark.parametrize("notebook_id", ["01_baseline", "02_scheduler", "03_clipping", "04_accumulation", "05_amp",
                                         "06_checkpointing", "07_crash_resume", "08_stretch"])
def test_solution_notebook_runs_clean_on_the_gpu(notebook_id, monkeypatch):
    """Each solution notebook, smoke mode, LAB_DEVICE=cuda: no cell raises and the first cell says cuda."""
    import test_notebooks as tn

    monkeypatch.setenv("LAB_MODE", "smoke")
    monkeypatch.setenv(devices.DEVICE_ENV, "cuda")
    monkeypatch.setenv("JUPYTER_PATH", str(tn._kernelspec_dir()))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("LAB_ARTIFACTS", raising=False)
    started = time.perf_counter()
    executed = tn._execute(tn.SOLUTIONS / f"{notebook_id}.ipynb")
    print(f"{notebook_id} on the GPU: {time.perf_counter() - started:.1f} s")
    assert executed.errors() == []
    outputs = "".join(out.get("text", "") for cell in executed.nb.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    assert "device: cuda (LAB_DEVICE=cuda)" in outputs
