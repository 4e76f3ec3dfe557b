"""The lab's reference pipeline, stage by stage, with the reference loop: what ``python -m labutils lab`` runs.

Each stage adds one thing to the previous one, as the notebooks do (baseline -> scheduler -> clipping ->
accumulation -> AMP -> checkpointing -> crash/resume), and the summary table shows what each addition bought.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from . import plots
from .config import LabConfig
from .loop import RunResult, fit

STAGES: dict[str, dict] = {
    "baseline": {"lr": 1e-3},
    "scheduler": {"schedule": "onecycle", "lr": 3e-3},
    "clipping": {"schedule": "onecycle", "lr": 3e-3, "max_norm": 1.0},
    "accumulation": {"schedule": "onecycle", "lr": 3e-3, "max_norm": 1.0, "batch_size": 32, "accum_steps": 4},
    "amp": {"schedule": "onecycle", "lr": 3e-3, "max_norm": 1.0, "amp": "auto"},
    "checkpointing": {"schedule": "onecycle", "lr": 3e-3, "max_norm": 1.0, "save_every": 100},
}


def run_stage(name: str, out: Path, base: LabConfig) -> RunResult:
    stage_dir = out / name
    cfg = base.replace(**STAGES[name], log_path=str(stage_dir / "steps.csv"),
                       ckpt_dir=str(stage_dir / "ckpt") if name == "checkpointing" else None)
    for stale in (stage_dir / "steps.csv", stage_dir / "steps-epochs.csv"):
        stale.unlink(missing_ok=True)  # logs append; a fresh pipeline run starts them anew
    print(f"\n=== stage {name} ===\n{cfg.describe()}", flush=True)
    return fit(cfg)


def summary_table(results: dict[str, RunResult], crash_line: str) -> str:
    rows = ["| stage | final val acc | best val acc | mean epoch time (s) | samples/s |", "|---|---|---|---|---|"]
    for name, r in results.items():
        rows.append(f"| {name} | {r.final_val_acc:.2%} | {r.best_val_acc:.2%} | {r.epoch_mean('seconds'):.1f} "
                    f"| {r.epoch_mean('samples_per_s'):,.0f} |")
    return "\n".join(rows) + f"\n\n{crash_line}\n"


def save_plots(results: dict[str, RunResult], out: Path) -> None:
    clipping = results["clipping"]
    plots.plot_grad_norms([s["grad_norm"] for s in clipping.steps], clipping.config.max_norm,
                          path=out / "clip_norm_hist.png")
    plots.plot_lr([s["lr"] for s in results["scheduler"].steps], path=out / "lr_curve.png")
    plots.plot_curves(results["clipping"].epochs, path=out / "curves.png", title="OneCycle + clipping")
    plots.plot_compare_curves({name: r.epochs for name, r in results.items()}, path=out / "val_acc_by_stage.png")
    speeds = {"fp32": results["clipping"].epoch_mean("samples_per_s"),
              "bf16 autocast": results["amp"].epoch_mean("samples_per_s")}
    plots.plot_throughput(speeds, path=out / "throughput.png", title="fp32 vs autocast (CPU)")
    plt.close("all")


def run_pipeline(out_dir="artifacts", subset: int | None = None, epochs: int = 5) -> Path:
    """Run every stage and crash/resume; write logs, plots and ``summary.md`` into ``out_dir``."""
    from .resume import crash_and_resume

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = LabConfig(subset=subset, epochs=epochs, progress=False)
    results = {name: run_stage(name, out, base) for name in STAGES}
    save_plots(results, out)

    steps_per_epoch = results["clipping"].final_step // epochs
    crash_cfg = base.replace(**{**STAGES["checkpointing"], "dropout": 0.1, "save_every": max(steps_per_epoch // 4, 1)})
    crash_epoch = min(2, epochs - 1)  # epoch 3 as in the lab, or the last one of a shorter smoke run
    crash_at = crash_epoch * steps_per_epoch + steps_per_epoch // 2 + 1  # partway through it, between checkpoints
    print(f"\n=== stage crash/resume (crash after step {crash_at}) ===", flush=True)
    report = crash_and_resume(crash_cfg, out / "crash_resume", crash_at)
    (out / "resume_curve.png").write_bytes(report.curve.read_bytes())
    crash_line = (f"Crash/resume: crashed after step {report.crash_step}, resumed from the checkpoint at step "
                  f"{report.resume_step}; final parameters and optimizer state bit-identical to the uninterrupted "
                  f"run: **{str(report.bit_identical).lower()}**.")
    summary = out / "summary.md"
    summary.write_text("# Loop Lab reference pipeline\n\n" + summary_table(results, crash_line))
    print(f"\n{summary.read_text()}\nwrote {summary}")
    return summary
