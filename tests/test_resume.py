"""Crash with os._exit(1) in a subprocess, resume, and end bit-identical to a run that never stopped."""

import subprocess
import sys

import pytest

from labutils.steplog import read_log


@pytest.mark.slow
def test_crash_and_resume_is_bit_identical(tmp_path):
    out = tmp_path / "cr"
    # 1024 images at batch 128: 8 steps per epoch, checkpoints every 2 steps, crash after step 21 (epoch 3)
    proc = subprocess.run([sys.executable, "-m", "labutils", "crash-resume", "--out", str(out), "--subset", "1024",
                           "--epochs", "3"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "bit-identical: true"
    assert "crashed after step 21, resumed from the checkpoint at step 20" in proc.stdout
    assert "resuming from" in proc.stdout and "step-000020.pt" in proc.stdout

    merged = read_log(out / "merged-steps.csv")
    assert [row["step"] for row in merged] == list(range(1, 25))  # one history, every step once
    assert [row["run"] for row in merged] == [1] * 20 + [2] * 4
    assert merged[20]["epoch"] == 3  # the second run starts in the middle of epoch 3
    reference = read_log(out / "reference" / "steps.csv")
    assert [r["loss"] for r in reference] == [r["loss"] for r in merged]  # same batches, same dropout, same losses
    assert (out / "resume_curve.png").stat().st_size > 10_000
