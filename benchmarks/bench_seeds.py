"""What every run of a notebook shows, and what only some do: a stage trained with the reference loop at several seeds.

    python benchmarks/bench_seeds.py [--stage baseline] [--seeds 3] [--subset N] [--epochs N] [--threads 1]

A notebook's narrative quotes a full run; a student's run differs by its seed (the initial weights and the batch
order), its machine and its thread count. Each seed here is one full run of the stage's notebook settings (as
``python -m labutils reference`` trains them); the table shows every epoch's validation accuracy and loss per seed,
and the spread: the lowest and highest final accuracy, the epochs where the best accuracy fell, whether the
accuracy rose every epoch and whether the last validation loss was the lowest. A claim the narrative makes of every
run must hold in every row; anything else is said of the student's own run, from their numbers.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from labutils.reference.loop import fit
from labutils.reference.pipeline import STAGES, stage_config


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="baseline", choices=sorted(STAGES))
    parser.add_argument("--seeds", type=int, default=3, help="runs, at the notebook's seed and the ones after it")
    parser.add_argument("--subset", type=int, default=None, help="training images (default: all, as a full run)")
    parser.add_argument("--epochs", type=int, default=None, help="default: the notebook's")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", default=None, help="write the rows here too")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = stage_config(args.stage, args.subset, args.epochs)
    rows = []
    for seed in range(base.seed, base.seed + args.seeds):
        started = time.perf_counter()
        result = fit(base.replace(seed=seed), log=lambda *a, **k: None)
        accs = [e["val_acc"] for e in result.epochs]
        losses = [e["val_loss"] for e in result.epochs]
        rows.append({"seed": seed, "val_acc": accs, "val_loss": losses,
                     "train_loss": [e["train_loss"] for e in result.epochs],
                     "best_epoch": accs.index(max(accs)) + 1, "rose_every_epoch": all(b > a for a, b in zip(accs, accs[1:])),
                     "last_loss_lowest": losses[-1] == min(losses), "seconds": time.perf_counter() - started})
        r = rows[-1]
        print(f"seed {seed}: val acc {', '.join(f'{a:.2%}' for a in accs)}; val loss "
              f"{', '.join(f'{x:.4f}' for x in losses)}; best epoch {r['best_epoch']}; rose every epoch "
              f"{r['rose_every_epoch']}; last val loss lowest {r['last_loss_lowest']} ({r['seconds']:.0f} s)", flush=True)
    finals = [r["val_acc"][-1] for r in rows]
    print(f"{args.stage}, {len(rows)} seeds: final val acc {min(finals):.2%} to {max(finals):.2%}; best epoch "
          f"{sorted({r['best_epoch'] for r in rows})}; accuracy rose every epoch in {sum(r['rose_every_epoch'] for r in rows)}"
          f" of {len(rows)}; last val loss the lowest in {sum(r['last_loss_lowest'] for r in rows)} of {len(rows)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
