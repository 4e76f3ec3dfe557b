"""How fast is the reference loop, next to its peers, measured like for like?

    python benchmarks/bench_loop.py [--quick] [--steps 200] [--warmup 20] [--repeats 3] [--arms bare,reference,...]

Arms (all on SmallCNN, AdamW lr 1e-3, batch 128, the same FashionMNIST training images, 0 loader workers):

- bare: the model stepping on batches already in memory, gathered before the clock starts (the ceiling for a loop);
- reference: labutils.reference.loop.train_one_epoch over labutils.data's loader (grad norm, loss and lr every step),
  with the setting ``fit`` applies (``keep_freed_memory``: glibc keeps freed memory instead of faulting it back in);
- reference-glibc: the same loop with glibc's default allocator behaviour (before the setting was adopted);
- reference+ckpt: the reference, writing a complete checkpoint every 100 steps (and rotating);
- reference+bf16: the reference under bf16 autocast;
- textbook: torchvision FashionMNIST + ToTensor + Normalize + DataLoader, a plain loop;
- lightning: ``lightning.Trainer(max_steps=...)`` over the reference loop's loader, as shipped;
- lightning+malloc: the same with the reference loop's allocator setting;
- accelerate: ``Accelerator(cpu=True).prepare(model, optimizer, loader)`` and ``accelerator.backward``;
- compile: the bare loop with ``torch.compile(model)`` (inductor; needs a C++ compiler on CPU).

Like for like: every run is a fresh Python process (no arm inherits another's heap, imports or oneDNN caches), with
the same thread count (set, then checked after the run), the same float32 matmul precision (checked), ``--warmup``
optimizer steps off the clock and then ``--steps`` optimizer steps on it (counted, not assumed). The clock is read
after every optimizer step by the same code in every arm (a hook, a Lightning callback, or the loop itself), so it
covers exactly the timed steps with their data loading, and never start-up, compilation or a trainer's set-up.
Arms run in a new random order in each of ``--repeats`` rounds; the table shows the median and the min-max spread,
and ratios are medians of per-round ratios. Raw numbers go to ``--json`` (default artifacts/bench_loop.json).

Lightning is not a lab requirement: ``pip install -r benchmarks/requirements.txt`` (``make bench`` does) installs it;
accelerate is a lab requirement (lab 8). An arm whose package or compiler is missing says why in the table, and the run
goes on. ``--quick`` (2 rounds of 5 + 30 steps) checks that every arm runs; the defaults are for the numbers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from labutils.checkpoint import last_name, rotate
from labutils.data import MEAN, STD, cache_dir, ensure_data, load_splits, make_loader, normalize
from labutils.memory import keep_freed_memory
from labutils.models import SmallCNN
from labutils.reference.checkpoint import save_checkpoint
from labutils.reference.loop import train_one_epoch
from labutils.reference.optim import make_scheduler

REPO = Path(__file__).resolve().parents[1]
BATCH = 128
LR = 1e-3
CKPT_EVERY = 100
WORKER_TIMEOUT_S = 900
RESULT_TAG = "BENCH-RESULT "  # the worker's one line of output that the parent reads


@dataclass
class ArmRound:
    """One arm, one round, one fresh process."""

    arm: str
    round: int
    steps: int = 0  # optimizer steps on the clock, counted
    seconds: float = float("nan")
    samples_per_s: float = float("nan")
    step_ms_median: float = float("nan")
    page_faults_per_step: float = float("nan")  # minor faults: memory handed back to the OS and faulted in again
    threads: int = 0
    matmul_precision: str = ""
    kept_freed_memory: bool = False
    process_s: float = float("nan")  # the worker process's whole wall time: start-up, imports, data, compile, run
    error: str | None = None


# --- the worker: one arm in this process -----------------------------------------------------------------------------


class Clock:
    """Read after every optimizer step; times steps warmup+1 .. warmup+steps and nothing else."""

    def __init__(self, warmup: int, steps: int):
        self.warmup, self.steps, self.done, self.ticks, self.faults = warmup, steps, 0, [], []

    def tick(self) -> None:
        self.done += 1
        if self.done >= self.warmup:  # the tick that ends the warm-up starts the clock
            self.ticks.append(time.perf_counter())
            self.faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)

    def result(self, run: ArmRound) -> ArmRound:
        run.steps = len(self.ticks) - 1
        if run.steps != self.steps:
            raise RuntimeError(f"{run.arm} ran {self.done} optimizer steps, expected {self.warmup + self.steps}")
        run.seconds = self.ticks[-1] - self.ticks[0]
        run.samples_per_s = run.steps * BATCH / run.seconds
        run.step_ms_median = 1e3 * statistics.median(b - a for a, b in zip(self.ticks, self.ticks[1:]))
        run.page_faults_per_step = (self.faults[-1] - self.faults[0]) / run.steps
        run.threads, run.matmul_precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
        return run


def model_and_optimizer():
    torch.manual_seed(0)
    model = SmallCNN()
    return model, torch.optim.AdamW(model.parameters(), lr=LR)


def lab_loader(n: int):
    """The reference loop's loader over the first ``n`` batches of the training split."""
    images, labels = load_splits().train
    return make_loader(images[: n * BATCH], labels[: n * BATCH], BATCH, seed=0)


def in_memory_batches(n: int):
    """The same batches in the same order, gathered before the clock starts into one tensor (views, no per-batch
    allocations: 200 separate batch tensors disturb glibc's heap enough to slow every later step by page faults)."""
    loader = lab_loader(n)
    order = torch.cat([torch.as_tensor(b) for b in loader.batch_sampler])
    images = normalize(loader.dataset.images[order]).view(n, BATCH, 1, 28, 28)
    return zip(images, loader.dataset.labels[order].view(n, BATCH))


def plain_loop(model, optimizer, batches, clock: Clock, backward=None) -> None:
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward() if backward is None else backward(loss)
        optimizer.step()
        clock.tick()


def arm_bare(clock: Clock, n: int) -> None:
    plain_loop(*model_and_optimizer(), in_memory_batches(n), clock)


def arm_reference(clock: Clock, n: int, amp_dtype=None, ckpt: bool = False) -> None:
    model, optimizer = model_and_optimizer()
    scheduler = make_scheduler(optimizer, "constant", total_steps=n)
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as folder:
        def save(pos, row):
            if ckpt and pos.step % CKPT_EVERY == 0:
                save_checkpoint(Path(folder) / last_name(pos.step), model, optimizer, scheduler, step=pos.step)
                rotate(folder, 3)

        hooks = (save, lambda pos, row: clock.tick())  # the save belongs to the step it follows
        train_one_epoch(model, lab_loader(n), optimizer, scheduler, amp_dtype=amp_dtype, hooks=hooks, progress=False)


def arm_textbook(clock: Clock, n: int) -> None:
    from torchvision import transforms
    from torchvision.datasets import FashionMNIST

    ensure_data()  # puts the raw files where torchvision looks
    dataset = FashionMNIST(cache_dir(), train=True, transform=transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True, drop_last=True,
                                         generator=torch.Generator().manual_seed(0))
    plain_loop(*model_and_optimizer(), itertools.islice(loader, n), clock)


def arm_lightning(clock: Clock, n: int) -> None:
    import lightning as L  # peers are imported only by their own arm's process

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model, self.optimizer = model_and_optimizer()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return self.optimizer

        def on_train_batch_end(self, outputs, batch, batch_idx):  # after this batch's optimizer step
            clock.tick()

    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=n, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), lab_loader(n))
    if trainer.global_step != n:
        raise RuntimeError(f"Lightning counted {trainer.global_step} optimizer steps, expected {n}")


def arm_accelerate(clock: Clock, n: int) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model, optimizer, loader = accelerator.prepare(*model_and_optimizer(), lab_loader(n))
    plain_loop(model, optimizer, loader, clock, backward=accelerator.backward)


def arm_compile(clock: Clock, n: int) -> None:
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        raise RuntimeError("no C++ compiler (g++ or $CXX): torch.compile's inductor needs one on CPU")
    model, optimizer = model_and_optimizer()
    plain_loop(torch.compile(model), optimizer, in_memory_batches(n), clock)  # compiles during the warm-up


# arm -> (body, whether its process keeps freed memory as the reference loop's fit does)
ARM_BODIES = {
    "bare": (arm_bare, True),  # the ceiling gets every setting the reference loop has
    "reference": (arm_reference, True),
    "reference-glibc": (arm_reference, False),  # without the setting it adopted
    "reference+ckpt": (lambda clock, n: arm_reference(clock, n, ckpt=True), True),
    "reference+bf16": (lambda clock, n: arm_reference(clock, n, amp_dtype=torch.bfloat16), True),
    "textbook": (arm_textbook, False),
    "lightning": (arm_lightning, False),  # as shipped
    "lightning+malloc": (arm_lightning, True),  # with the reference loop's setting
    "accelerate": (arm_accelerate, False),
    "compile": (arm_compile, True),
}
ARMS = tuple(ARM_BODIES)


def run_arm(arm: str, steps: int, warmup: int, threads: int) -> ArmRound:
    torch.set_num_threads(threads)
    body, keeps_memory = ARM_BODIES[arm]
    run, clock = ArmRound(arm, -1, kept_freed_memory=keeps_memory and keep_freed_memory()), Clock(warmup, steps)
    try:
        body(clock, warmup + steps)
        clock.result(run)
    except ImportError as exc:
        run.error = f"not installed ({exc.name}): pip install -r benchmarks/requirements.txt"
    except Exception as exc:  # the arm says why; the benchmark goes on
        run.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if run.error is None and run.threads != threads:
        run.error = f"{arm} changed the thread count from {threads} to {run.threads}"
    return run


# --- the parent: rounds of fresh processes ---------------------------------------------------------------------------


def spawn(arm: str, rnd: int, args) -> ArmRound:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONWARNINGS="ignore")
    cmd = [sys.executable, __file__, "--worker", arm, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--threads", str(args.threads)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return ArmRound(arm, rnd, process_s=WORKER_TIMEOUT_S, error=f"worker timed out after {WORKER_TIMEOUT_S} s")
    process_s = time.perf_counter() - started
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_TAG)), None)
    if line is None:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return ArmRound(arm, rnd, process_s=process_s, error=f"worker exited {proc.returncode}: {tail[:200]}")
    return ArmRound(**{**json.loads(line[len(RESULT_TAG):]), "round": rnd, "process_s": process_s})


def median_ratio(runs: list[ArmRound], a: str, b: str) -> tuple[float, float, float] | None:
    """Median, min and max over rounds of (a's samples/s) / (b's samples/s), each pair from the same round."""
    by = {(r.arm, r.round): r.samples_per_s for r in runs if r.error is None}
    ratios = [by[a, k] / by[b, k] for k in {r.round for r in runs} if (a, k) in by and (b, k) in by]
    return (statistics.median(ratios), min(ratios), max(ratios)) if ratios else None


def table(runs: list[ArmRound], arms: list[str]) -> str:
    lines = ["| arm | samples/s, median (min–max) | ms per step | vs bare | page faults per step | freed memory |",
             "|---|---|---|---|---|---|"]
    for arm in arms:
        ok = [r for r in runs if r.arm == arm and r.error is None]
        if not ok:
            why = next((r.error for r in runs if r.arm == arm), "not run")
            lines.append(f"| {arm} | n/a: {why} | | | | |")
            continue
        speeds = [r.samples_per_s for r in ok]
        vs = median_ratio(runs, arm, "bare")
        lines.append(f"| {arm} | {statistics.median(speeds):,.0f} ({min(speeds):,.0f}–{max(speeds):,.0f}) | "
                     f"{statistics.median(r.step_ms_median for r in ok):.1f} | "
                     f"{f'{vs[0]:.2f}x ({vs[1]:.2f}–{vs[2]:.2f})' if vs else 'n/a'} | "
                     f"{statistics.median(r.page_faults_per_step for r in ok):,.0f} | "
                     f"{'kept' if ok[0].kept_freed_memory else 'glibc default'} |")
    return "\n".join(lines)


def verdicts(runs: list[ArmRound]) -> list[str]:
    out = []
    pairs = [("reference", "bare", 0.95), ("reference", "lightning", 1.2), ("reference", "lightning+malloc", None),
             ("reference", "accelerate", None), ("reference", "textbook", None), ("reference", "reference-glibc", None),
             ("compile", "bare", None), ("reference+ckpt", "reference", None), ("reference+bf16", "reference", None)]
    for a, b, target in pairs:
        r = median_ratio(runs, a, b)
        if r is not None:
            goal = "" if target is None else f"  (target >= {target}x: {'met' if r[0] >= target else 'NOT met'})"
            out.append(f"{a} / {b}: {r[0]:.2f}x (rounds {r[1]:.2f}–{r[2]:.2f}){goal}")
    return out


def save_json(path: Path, args, runs: list[ArmRound], load_before: float) -> None:
    """The raw numbers so far: written after every run, so an interrupted benchmark keeps what it measured."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "torch": torch.__version__, "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "threads": args.threads,
        "batch": BATCH, "steps": args.steps, "warmup": args.warmup, "repeats": args.repeats,
        "load_average": [load_before, os.getloadavg()[0]], "runs": [asdict(r) for r in runs]}, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps on the clock, per run")
    parser.add_argument("--warmup", type=int, default=20, help="optimizer steps before the clock starts")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; each runs every arm once, in a random order")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in every arm (default: torch's)")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {','.join(ARMS)}")
    parser.add_argument("--seed", type=int, default=0, help="seed of the arms' order")
    parser.add_argument("--json", type=Path, default=REPO / "artifacts" / "bench_loop.json",
                        help="where the raw numbers go (default: artifacts/bench_loop.json)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5 warm-up + 30 timed steps: does it run?")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.repeats = 30, 5, 2
    if args.worker:
        print(RESULT_TAG + json.dumps(asdict(run_arm(args.worker, args.steps, args.warmup, args.threads))))
        return
    arms = args.arms.split(",")
    if unknown := set(arms) - set(ARMS):
        raise SystemExit(f"unknown arm(s) {sorted(unknown)}: choose from {', '.join(ARMS)}")
    if args.warmup < 1 or args.steps < 1:
        raise SystemExit("--warmup and --steps must be at least 1 (the clock starts when the warm-up ends)")
    args.threads = args.threads or torch.get_num_threads()
    load_before = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {args.threads} threads, {os.cpu_count()} CPUs, batch {BATCH}, "
          f"{args.warmup} warm-up + {args.steps} timed optimizer steps, {args.repeats} rounds, "
          f"load average {load_before:.2f}", flush=True)
    order, runs, started = random.Random(args.seed), [], time.perf_counter()
    for rnd in range(args.repeats):
        for arm in order.sample(arms, len(arms)):
            run = spawn(arm, rnd, args)
            runs.append(run)
            save_json(args.json, args, runs, load_before)
            said = f"{run.samples_per_s:8,.0f} samples/s" if run.error is None else run.error
            print(f"  round {rnd + 1}/{args.repeats}  {arm:16s} {said}  ({run.process_s:.0f} s)", flush=True)
    precisions = {r.matmul_precision for r in runs if r.error is None}
    if len(precisions) > 1:
        print(f"WARNING: float32 matmul precision differs between arms: {precisions}")
    print()
    print(table(runs, arms))
    print()
    print("\n".join(verdicts(runs)))
    print(f"\nraw numbers: {args.json}; {time.perf_counter() - started:.0f} s in all, "
          f"load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
