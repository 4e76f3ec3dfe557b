"""Crash and resume, end to end: the proof that the checkpoints are complete.

Three training processes with the same config: an uninterrupted reference; a run that ``os._exit(1)``s part-way
through an epoch; and a restart of that run with ``--resume``. The restarted run must continue at the step after its
last checkpoint, in the middle of the epoch, with the same batches, and end with parameters and optimizer state equal,
tensor by tensor, to the reference's.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..checkpoint import compare_states
from ..config import LabConfig
from .loop import FINAL_NAME
from ..steplog import EPOCH_FIELDS, STEP_FIELDS, RowLog, epoch_log_path, read_log


@dataclass
class ResumeReport:
    crash_step: int
    resume_step: int  # the step of the checkpoint the second run started from
    expected_resume_step: int  # the last checkpoint written before the crash
    bit_identical: bool
    differences: list[str]
    merged_log: Path
    curve: Path


def crash_plan(subset: int | None = None, epochs: int | None = None, seed: int = 0, save_every: int | None = None,
               crash_at: int | None = None) -> tuple[LabConfig, int]:
    """Lab 7's run (its own settings) for a crash and resume, and the step to crash after.

    Dropout 0.1 is added so that the resumed run must also restore the random state dropout draws from. Defaults:
    about four checkpoints per epoch, and a crash in the middle of the last epoch, between two checkpoints."""
    from ..data import load_splits
    from ..lesson import notebook_config
    from .optim import steps_per_epoch

    cfg = notebook_config("07_crash_resume").replace(subset=subset, seed=seed, dropout=0.1, progress=False,
                                                     **({"epochs": epochs} if epochs else {}))
    per_epoch = steps_per_epoch(-(-len(load_splits(subset).train[1]) // cfg.batch_size), cfg.accum_steps)
    cfg = cfg.replace(save_every=save_every or max(per_epoch // 4, 1))
    crash_at = crash_at or (cfg.epochs - 1) * per_epoch + per_epoch // 2 + max(cfg.save_every // 2, 1)
    if not 0 < crash_at < cfg.epochs * per_epoch:
        raise ValueError(f"the crash step must be between 1 and {cfg.epochs * per_epoch - 1} (the run's last step)")
    return cfg, crash_at


def config_to_args(cfg: LabConfig) -> list[str]:
    """The ``python -m labutils train`` flags that reproduce ``cfg`` (only the ones that differ from the defaults)."""
    args = []
    for key, value in cfg.to_dict().items():
        if value == getattr(LabConfig(), key):
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            args += [flag, str(value)]
    return args


def run_training(cfg: LabConfig) -> int:
    """Run ``python -m labutils train`` for ``cfg`` in a fresh process; returns its exit code."""
    cmd = [sys.executable, "-m", "labutils", "train", *config_to_args(cfg)]
    return subprocess.run(cmd, stdout=sys.stdout, stderr=sys.stderr).returncode


def merge_logs(first: list[dict], second: list[dict], resume_step: int) -> list[dict]:
    """One history: the first run up to the checkpoint the second resumed from, then the second run.

    The steps the first run did after that checkpoint were lost with the crash and redone by the second run.
    """
    kept = [{**row, "run": 1} for row in first if row["step"] <= resume_step]
    return kept + [{**row, "run": 2} for row in second]


def crash_and_resume(cfg: LabConfig, out_dir, crash_at_step: int, log=print) -> ResumeReport:
    """Run the reference, the crashing run and the resumed run of ``cfg``; write logs and the curve to ``out_dir``."""
    from ..plots import plot_resume_curve

    out = Path(out_dir)
    ref_dir, crash_dir = out / "reference", out / "crashed"
    for folder in (ref_dir, crash_dir):
        shutil.rmtree(folder, ignore_errors=True)  # stale checkpoints would turn the first run into a resume
    reference = cfg.replace(ckpt_dir=str(ref_dir / "ckpt"), log_path=str(ref_dir / "steps.csv"),
                            crash_at_step=None, resume=False)
    crashing = reference.replace(ckpt_dir=str(crash_dir / "ckpt"), log_path=str(crash_dir / "run1-steps.csv"),
                                 crash_at_step=crash_at_step)
    resumed = crashing.replace(log_path=str(crash_dir / "run2-steps.csv"), crash_at_step=None, resume=True)

    log(f"[1/3] uninterrupted reference run -> {ref_dir}")
    _expect(run_training(reference), 0, "the reference run")
    log(f"[2/3] run that crashes with os._exit(1) after step {crash_at_step}")
    _expect(run_training(crashing), 1, "the crashing run")
    log("[3/3] restart with --resume")
    _expect(run_training(resumed), 0, "the resumed run")

    second = read_log(resumed.log_path)
    resume_step = second[0]["step"] - 1
    merged_path = out / "merged-steps.csv"
    _write_rows(merged_path, STEP_FIELDS + ("run",), merge_logs(read_log(crashing.log_path), second, resume_step))
    epochs = [*read_log(epoch_log_path(crashing.log_path)), *read_log(epoch_log_path(resumed.log_path))]
    _write_rows(epoch_log_path(merged_path), EPOCH_FIELDS, epochs)
    curve = out / "resume_curve.png"
    plot_resume_curve(read_log(merged_path), crash_at_step, resume_step, path=curve)

    final_ref = torch.load(Path(reference.ckpt_dir) / FINAL_NAME, weights_only=True)
    final_resumed = torch.load(Path(resumed.ckpt_dir) / FINAL_NAME, weights_only=True)
    differences = compare_states(final_ref, final_resumed)
    expected = crash_at_step - crash_at_step % cfg.save_every
    return ResumeReport(crash_at_step, resume_step, expected, not differences, differences, merged_path, curve)


def _expect(code: int, expected: int, what: str) -> None:
    if code != expected:
        raise RuntimeError(f"{what} exited with code {code}, expected {expected}: see its output above")


def _write_rows(path: Path, fields: tuple[str, ...], rows: list[dict]) -> None:
    path.unlink(missing_ok=True)
    out = RowLog(path, fields)
    for row in rows:
        out.write(row)
    out.close()
