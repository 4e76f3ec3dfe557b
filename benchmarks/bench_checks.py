"""What tracing costs a training step, and how long each check takes.

    .venv/bin/python benchmarks/bench_checks.py [--steps 5] [--repeats 15]
    .venv/bin/python benchmarks/bench_checks.py --check-cpu 7 [checkpoint resume ...]

1. Overhead: the default SmallCNN at batch 128 (the lab's real setting) trained with zero_grad, forward, backward,
   clip_grad_norm_, step and a scheduler, with and without a :class:`labutils.trace.Tracer` attached. Short blocks of
   steps alternate between the two and the fastest block of each is compared (other work on the machine can only add
   time). Measured twice: CPU time on 1 thread, which other processes barely disturb (the verdict), and wall time on
   the default threads (2 on the lab's laptops), which a busy machine makes noisy. Target: <= 10%.
2. Check times: every check run on the correct variants of the mutation corpus. Target: each under 5 s on 2 cores.

``--check-cpu RUNS``: instead, the CPU seconds of one check run on each exercise's canonical answer (the median of
RUNS, after one warm-up), this process's and its forked children's together (labs 6 and 7 fork), on 1 torch thread:
what a check costs a busy machine, which wall time hides.

Exits non-zero when a target is missed.
"""

from __future__ import annotations

import argparse
import resource
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


def train_steps(model, optimizer, scheduler, x, y, steps: int, clock=time.perf_counter) -> float:
    """Seconds per step for ``steps`` canonical steps."""
    model.train()
    start = clock()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
    return (clock() - start) / steps


def measure_overhead(steps: int, repeats: int, threads: int, clock) -> tuple[list[float], list[float]]:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model, optimizer, scheduler, x, y = make_run()
        train_steps(model, optimizer, scheduler, x, y, 3)  # warm-up: allocator, oneDNN primitives
        plain, traced = [], []
        for _ in range(repeats):
            plain.append(train_steps(model, optimizer, scheduler, x, y, steps, clock))
            with Tracer(model, optimizer, scheduler):  # a fresh trace per block, as a check would have
                traced.append(train_steps(model, optimizer, scheduler, x, y, steps, clock))
        return plain, traced
    finally:
        torch.set_num_threads(previous)


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


def _cpu_seconds() -> float:
    """This process's CPU time and that of its children waited for (a check's forks)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure_check_cpu(runs: int, exercise_ids: list[str]) -> dict[str, list[float]]:
    """Exercise id -> the CPU seconds of each of ``runs`` check runs on its canonical answer (after one warm-up)."""
    from mutants import CORRECT, run_check

    torch.set_num_threads(1)
    seconds = {}
    for variant in (v for v in CORRECT if v.name.endswith("_canonical")):
        if exercise_ids and variant.exercise not in exercise_ids:
            continue
        run_check(variant)
        seconds[variant.exercise] = []
        for _ in range(runs):
            start = _cpu_seconds()
            report = run_check(variant)
            seconds[variant.exercise].append(_cpu_seconds() - start)
            assert report.passed, str(report)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-cpu", type=int, metavar="RUNS", help="only the CPU seconds of each check (median)")
    parser.add_argument("exercises", nargs="*", help="with --check-cpu: these exercises only (default: all)")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=15, help="blocks per mode (alternating)")
    parser.add_argument("--max-overhead", type=float, default=0.10, help="fail above this fraction")
    parser.add_argument("--max-check-seconds", type=float, default=5.0)
    args = parser.parse_args()
    if args.check_cpu:
        for exercise_id, seconds in measure_check_cpu(args.check_cpu, args.exercises).items():
            print(f"check of {exercise_id:<14} median {statistics.median(seconds):.3f} CPU-s over {len(seconds)} runs "
                  f"(min {min(seconds):.3f}, max {max(seconds):.3f}), self and children")
        return 0

    print(f"torch {torch.__version__}; SmallCNN() at batch 128, {args.repeats} alternating blocks of {args.steps} "
          "steps, per step:")
    overheads = {}
    for label, threads, clock in (("CPU time, 1 thread", 1, time.process_time),
                                  (f"wall time, {torch.get_num_threads()} threads", torch.get_num_threads(),
                                   time.perf_counter)):
        plain, traced = measure_overhead(args.steps, args.repeats, threads, clock)
        overheads[label] = min(traced) / min(plain) - 1
        print(f"  {label:<22} plain {min(plain) * 1e3:6.1f} ms (median {statistics.median(plain) * 1e3:6.1f}), "
              f"traced {min(traced) * 1e3:6.1f} ms (median {statistics.median(traced) * 1e3:6.1f}): "
              f"overhead {overheads[label]:+.1%}")
    overhead = overheads["CPU time, 1 thread"]

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
