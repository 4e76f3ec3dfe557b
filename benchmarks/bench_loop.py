"""How fast is the reference loop? Ratios measured in one run, on the same model, data and batch size.

    python benchmarks/bench_loop.py [--steps 300] [--repeats 3]

- bare compute: the model stepping on batches already in memory (the ceiling for any loop);
- reference loop: labutils.reference.loop.train_one_epoch on labutils.data (logging the grad norm and loss every step);
- textbook pipeline: torchvision FashionMNIST + ToTensor + Normalize + DataLoader, a plain loop;
- Lightning's Trainer on the same model and data, when ``lightning`` is installed (``pip install lightning``);
- checkpointing every 100 steps as a share of training time; fp32 against bf16 autocast.

Each configuration runs ``--repeats`` times, interleaved, and the best (least disturbed) time is kept.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from labutils.data import MEAN, STD, cache_dir, load_splits, make_loader, normalize, set_position
from labutils.reference.loop import Position, train_one_epoch
from labutils.models import SmallCNN
from labutils.optim import make_scheduler

BATCH = 128


def fresh(seed=0):
    torch.manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer


def bare_compute(steps: int) -> float:
    images, labels = load_splits().train
    batches = [(normalize(images[i:i + BATCH]), labels[i:i + BATCH]) for i in range(0, steps * BATCH, BATCH)]
    model, optimizer = fresh()
    start = time.perf_counter()
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return steps * BATCH / (time.perf_counter() - start)


def reference_loop(steps: int, amp_dtype=None, ckpt_dir=None) -> float:
    images, labels = load_splits().train
    loader = make_loader(images[:steps * BATCH], labels[:steps * BATCH], BATCH, seed=0)
    set_position(loader, 0)
    model, optimizer = fresh()
    scheduler = make_scheduler(optimizer, "constant", total_steps=steps)
    hooks = ()
    if ckpt_dir is not None:
        from labutils.checkpoint import last_name, rotate, save_checkpoint

        def save(pos, row):
            if pos.step % 100 == 0:
                save_checkpoint(Path(ckpt_dir) / last_name(pos.step), model=model, optimizer=optimizer,
                                scheduler=scheduler, step=pos.step)
                rotate(ckpt_dir, 3)

        hooks = (save,)
    start = time.perf_counter()
    train_one_epoch(model, loader, optimizer, scheduler, amp_dtype=amp_dtype, pos=Position(), hooks=hooks,
                    progress=False)
    return steps * BATCH / (time.perf_counter() - start)


def textbook_pipeline(steps: int) -> float:
    from torchvision import transforms
    from torchvision.datasets import FashionMNIST

    dataset = FashionMNIST(cache_dir(), train=True, transform=transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))]))
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, shuffle=True)
    model, optimizer = fresh()
    start = time.perf_counter()
    for x, y in itertools.islice(loader, steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return steps * BATCH / (time.perf_counter() - start)


def lightning_trainer(steps: int) -> float | None:
    try:
        import lightning as L
    except ImportError:
        return None

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = fresh()[0]

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    images, labels = load_splits().train
    loader = make_loader(images[:steps * BATCH], labels[:steps * BATCH], BATCH, seed=0)
    trainer = L.Trainer(accelerator="cpu", max_steps=steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    module = Module()
    start = time.perf_counter()
    trainer.fit(module, loader)
    return steps * BATCH / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}, {args.steps} steps")
    tmp = tempfile.mkdtemp()
    runs = {
        "bare compute": lambda: bare_compute(args.steps),
        "reference loop": lambda: reference_loop(args.steps),
        "reference + checkpoint/100 steps": lambda: reference_loop(args.steps, ckpt_dir=tmp),
        "reference, bf16 autocast": lambda: reference_loop(args.steps, amp_dtype=torch.bfloat16),
        "textbook pipeline": lambda: textbook_pipeline(args.steps),
        "lightning Trainer": lambda: lightning_trainer(args.steps),
    }
    best: dict[str, float | None] = {name: None for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            speed = run()
            if speed is not None:
                best[name] = max(best[name] or 0.0, speed)
    bare = best["bare compute"]
    print(f"\n{'configuration':36s} {'samples/s':>10s} {'vs bare':>8s}")
    for name, speed in best.items():
        if speed is None:
            print(f"{name:36s} {'n/a':>10s}   (pip install lightning to include it)")
        else:
            print(f"{name:36s} {speed:10,.0f} {speed / bare:7.2f}x")
    ref = best["reference loop"]
    print(f"\nreference loop / textbook pipeline: {ref / best['textbook pipeline']:.2f}x")
    if best["lightning Trainer"]:
        print(f"reference loop / Lightning Trainer: {ref / best['lightning Trainer']:.2f}x")
    print(f"checkpointing every 100 steps costs {1 - best['reference + checkpoint/100 steps'] / ref:.1%} of training "
          "time")
    print(f"bf16 autocast / fp32: {best['reference, bf16 autocast'] / ref:.2f}x")


if __name__ == "__main__":
    main()
