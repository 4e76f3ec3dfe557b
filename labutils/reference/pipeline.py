"""The notebooks' stages run with the reference loop: ``python -m labutils reference``.

Each stage adds one thing to the previous one, as the notebooks do (baseline -> scheduler -> clipping ->
accumulation -> AMP -> checkpointing -> crash/resume), with each notebook's own settings
(:data:`labutils.exercises.NOTEBOOKS`), and the summary table shows what each addition bought.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from .. import plots
from ..config import LabConfig
from ..lesson import notebook_config
from .loop import RunResult, fit

STAGES = {"baseline": "01_baseline", "scheduler": "02_scheduler", "clipping": "03_clipping",
          "accumulation": "04_accumulation", "amp": "05_amp", "checkpointing": "06_checkpointing"}  # stage -> notebook


def stage_config(name: str, subset: int | None = None, epochs: int | None = None) -> LabConfig:
    """The stage's notebook's full-mode settings, optionally on a subset and for another number of epochs."""
    cfg = notebook_config(STAGES[name]).replace(subset=subset, progress=False)
    return cfg if epochs is None else cfg.replace(epochs=epochs)


def run_stage(name: str, out: Path, subset: int | None, epochs: int | None) -> RunResult:
    stage_dir = out / name
    cfg = stage_config(name, subset, epochs).replace(
        log_path=str(stage_dir / "steps.csv"), ckpt_dir=str(stage_dir / "ckpt") if name == "checkpointing" else None)
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


def run_pipeline(out_dir="artifacts", subset: int | None = None, epochs: int | None = None) -> Path:
    """Run every stage (``epochs``: None keeps each notebook's own) and crash/resume; write logs, plots and
    ``summary.md`` into ``out_dir``."""
    from .resume import crash_and_resume, crash_plan

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = {name: run_stage(name, out, subset, epochs) for name in STAGES}
    save_plots(results, out)

    crash_cfg, crash_at = crash_plan(subset, epochs)
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
