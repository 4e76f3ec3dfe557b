"""What tracing costs a training step, and how long each check takes.

    .venv/bin/python benchmarks/bench_checks.py [--steps 20] [--repeats 5]

1. Overhead: the default SmallCNN at batch 128 (the lab's real setting) trained with zero_grad, forward, backward,
   clip_grad_norm_, step and a scheduler, with and without a :class:`labutils.trace.Tracer` attached. Blocks of steps
   alternate between the two so that a busy machine slows both alike; the medians are compared. Target: <= 10%.
2. Check times: every check run on the correct variants of the mutation corpus. Target: each under 5 s on 2 cores.

Exits non-zero when a target is missed (the overhead one with some slack for noise, see --max-overhead).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the mutation corpus lives with the tests

from labutils.models import SmallCNN  # noqa: E402
from labutils.trace import Tracer  # noqa: E402


def make_run(batch_size: int = 128, seed: int = 0):
    torch.manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=10_000)
    x, y = torch.randn(batch_size, 1, 28, 28), torch.randint(0, 10, (batch_size,))
    return model, optimizer, scheduler, x, y


def train_steps(model, optimizer, scheduler, x, y, steps: int) -> float:
    """Seconds per step for ``steps`` canonical steps."""
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
    return (time.perf_counter() - start) / steps


def measure_overhead(steps: int, repeats: int) -> tuple[float, float]:
    model, optimizer, scheduler, x, y = make_run()
    train_steps(model, optimizer, scheduler, x, y, 3)  # warm-up: allocator, oneDNN primitives
    plain, traced = [], []
    for _ in range(repeats):
        plain.append(train_steps(model, optimizer, scheduler, x, y, steps))
        with Tracer(model, optimizer, scheduler):  # a fresh trace per block, as a check would have
            traced.append(train_steps(model, optimizer, scheduler, x, y, steps))
    return statistics.median(plain), statistics.median(traced)


def measure_checks() -> dict[str, float]:
    from mutants import CORRECT, run_check

    times: dict[str, float] = {}
    for variant in CORRECT:
        start = time.perf_counter()
        report = run_check(variant)
        seconds = time.perf_counter() - start
        assert report.passed, str(report)
        key = f"check_{variant.exercise}"
        times[key] = max(times.get(key, 0.0), seconds)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=5, help="blocks per mode (alternating)")
    parser.add_argument("--max-overhead", type=float, default=0.10, help="fail above this fraction")
    parser.add_argument("--max-check-seconds", type=float, default=5.0)
    args = parser.parse_args()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    plain, traced = measure_overhead(args.steps, args.repeats)
    overhead = traced / plain - 1
    print(f"SmallCNN() batch 128, one step: plain {plain * 1e3:.1f} ms, traced {traced * 1e3:.1f} ms, "
          f"overhead {overhead:+.1%} (median of {args.repeats} blocks of {args.steps} steps)")

    times = measure_checks()
    for name, seconds in sorted(times.items()):
        print(f"{name:<24} {seconds:6.2f} s (slowest correct variant)")

    failed = []
    if overhead > args.max_overhead:
        failed.append(f"tracing overhead {overhead:.1%} > {args.max_overhead:.0%}")
    slow = [n for n, s in times.items() if s > args.max_check_seconds]
    if slow:
        failed.append(f"checks slower than {args.max_check_seconds:g} s: {', '.join(slow)}")
    for line in failed:
        print("FAIL:", line)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
