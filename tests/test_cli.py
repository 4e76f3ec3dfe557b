"""python -m labutils: flags generated from the config, clear errors, a summary at the end."""

import subprocess
import sys

from labutils.reference.cli import build_parser, main
from labutils.config import LabConfig
from labutils.reference.resume import config_to_args


def run(*args):
    return subprocess.run([sys.executable, "-m", "labutils", *args], capture_output=True, text=True)


def run_here(capsys, *args) -> tuple[int, str]:
    """(exit status, stderr) of the main() ``python -m labutils ARGS`` calls, called in this process: a refusal needs
    no fresh interpreter importing torch (test_train_prints_the_config_then_a_summary runs the command itself)."""
    capsys.readouterr()
    try:
        status = main(list(args))
    except SystemExit as exc:  # argparse's refusals
        status = exc.code
    return status, capsys.readouterr().err


def test_every_config_knob_has_a_flag_and_round_trips():
    cfg = LabConfig(epochs=2, max_norm=0.5, accum_steps=4, schedule="warmup_cosine", amp="bf16", resume=True,
                    crash_at_step=7, progress=False)
    args = build_parser().parse_args(["train", *config_to_args(cfg)])
    assert LabConfig(**{k: getattr(args, k) for k in LabConfig.keys()}) == cfg


def test_train_prints_the_config_then_a_summary(tmp_path):
    proc = run("train", "--subset", "512", "--epochs", "1", "--max-norm", "1.0", "--log-path", str(tmp_path / "s.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("effective config:")
    assert "max_norm           = 1.0" in proc.stdout
    assert "summary:" in proc.stdout and "final val acc:" in proc.stdout
    assert (tmp_path / "s.jsonl").exists() and (tmp_path / "s-epochs.jsonl").exists()


def test_bad_values_give_one_clear_line_not_a_traceback(capsys):
    status, stderr = run_here(capsys, "train", "--amp", "fp16", "--device", "cpu", "--subset", "64", "--epochs", "1")
    assert status == 2
    assert "amp='fp16' needs a CUDA or MPS device" in stderr and "Traceback" not in stderr
    status, stderr = run_here(capsys, "train", "--schedule", "cosine")
    assert status == 2 and "use one of constant, onecycle, warmup_cosine" in stderr
    status, stderr = run_here(capsys, "train", "--resume")
    assert status == 2 and "--ckpt-dir" in stderr
