"""What every run of a notebook shows, and what only some do: a stage trained with the reference loop at several seeds.

    python benchmarks/bench_seeds.py [--stage baseline] [--seeds 3] [--subset N] [--epochs N] [--max-norm X]
                                     [--threads 1]

A notebook's narrative quotes a full run; a student's run differs by its seed (the initial weights and the batch
order), its machine and its thread count. Each seed here is one full run of the stage's notebook settings (as
``python -m labutils reference`` trains them); the table shows every epoch's validation accuracy and loss per seed,
and the spread: the lowest and highest final accuracy, the epochs where the best accuracy fell, whether the
accuracy rose every epoch and whether the last validation loss was the lowest. A claim the narrative makes of every
run must hold in every row; anything else is said of the student's own run, from their numbers. A stage that clips
also shows its gradient norms as lab 3 reads them: the share of steps clipped over the run and over its second half
(the steady state), the steady-state median and 99th percentile, and the largest norm. Lab 3's second run (its
"safety net") is ``--stage clipping --max-norm 2``; lab 8's are ``--stage stretch`` (its groups without decay on
biases) and ``--stage stretch_decay_all`` (decay on every parameter, the run it is compared with); lab 7's
uninterrupted run is ``--stage crash_resume``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from labutils.reference.loop import fit
from labutils.lesson import notebook_config
from labutils.reference.pipeline import STAGES, stage_config

# the notebooks the pipeline has no stage for, with the settings their full run trains with
MORE = {"crash_resume": ("07_crash_resume", {}), "stretch": ("08_stretch", {"no_decay_bias_norm": True}),
        "stretch_decay_all": ("08_stretch", {"no_decay_bias_norm": False})}


def config(stage: str, subset: int | None, epochs: int | None, max_norm: float | None):
    if stage in MORE:
        notebook, changes = MORE[stage]
        cfg = notebook_config(notebook).replace(subset=subset, progress=False, **changes)
        cfg = cfg if epochs is None else cfg.replace(epochs=epochs)
    else:
        cfg = stage_config(stage, subset, epochs)
    return cfg if max_norm is None else cfg.replace(max_norm=max_norm)


def norm_figures(norms: list[float], max_norm: float) -> dict:
    """Lab 3's reading of a run's pre-clip norms: the steady state is the second half of the steps; the 99th
    percentile interpolated as torch.quantile does (the notebook's safety net is its ceiling)."""
    steady = norms[len(norms) // 2:]
    return {"clipped_all": sum(n > max_norm for n in norms) / len(norms),
            "clipped_steady": sum(n > max_norm for n in steady) / len(steady),
            "median_all": statistics.median(norms), "median_steady": statistics.median(steady),
            "q99_steady": statistics.quantiles(steady, n=100, method="inclusive")[-1], "max": max(norms)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="baseline", choices=sorted([*STAGES, *MORE]))
    parser.add_argument("--seeds", type=int, default=3, help="runs, at the notebook's seed and the ones after it")
    parser.add_argument("--subset", type=int, default=None, help="training images (default: all, as a full run)")
    parser.add_argument("--epochs", type=int, default=None, help="default: the notebook's")
    parser.add_argument("--max-norm", type=float, default=None, help="default: the notebook's")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", default=None, help="write the rows here too")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = config(args.stage, args.subset, args.epochs, args.max_norm)
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
        if base.max_norm is not None:
            r["norms"] = norm_figures([s["grad_norm"] for s in result.steps], base.max_norm)
        print(f"seed {seed}: val acc {', '.join(f'{a:.2%}' for a in accs)}; val loss "
              f"{', '.join(f'{x:.4f}' for x in losses)}; best epoch {r['best_epoch']}; rose every epoch "
              f"{r['rose_every_epoch']}; last val loss lowest {r['last_loss_lowest']} ({r['seconds']:.0f} s)", flush=True)
        if "norms" in r:
            n = r["norms"]
            print(f"  norms at max_norm {base.max_norm:g}: clipped {n['clipped_all']:.1%} of all steps, "
                  f"{n['clipped_steady']:.1%} of the second half; steady median {n['median_steady']:.3f}, 99th "
                  f"percentile {n['q99_steady']:.3f}; median over all {n['median_all']:.3f}; max {n['max']:.2f}",
                  flush=True)
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
