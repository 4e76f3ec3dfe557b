"""The notebooks' runtime: each notebook's settings in each mode, and runs kept for a later notebook to reuse."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest
import torch

from labutils import exercises, lesson
from labutils.config import LabConfig


@pytest.fixture
def full_mode(monkeypatch, tmp_path):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("LAB_MODE", "full")
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LAB_ARTIFACTS", raising=False)
    return tmp_path / "cache"


def a_run(label: str = "baseline") -> lesson.Run:
    run = lesson.Run(label)
    run._history = [{"epoch": 1, "train_loss": 0.5, "val_loss": 0.4, "val_acc": 0.86, "seconds": 7.0,
                     "eval_seconds": 0.5, "samples_per_s": 6857.0}]
    return run


def test_every_notebook_has_settings_and_fast_modes_shrink_them():
    for notebook in (n.id for n in exercises.NOTEBOOKS):
        full, fast = lesson.notebook_config(notebook, "full"), lesson.notebook_config(notebook, "grade")
        assert full.subset is None and fast.subset == lesson.FAST["subset"]
    assert lesson.notebook_config("06_checkpointing", "smoke").epochs == 2  # its own fast change beyond FAST
    with pytest.raises(ValueError, match="no settings for notebook '09_extra'"):
        lesson.notebook_config("09_extra")


def test_a_kept_run_is_read_back_only_for_the_same_config(full_mode, capsys):
    cfg = lesson.start("01_baseline")
    lesson.keep(a_run(), cfg)
    again = lesson.kept(cfg, "constant 1e-3")
    assert again is not None and again.history == a_run().history and again.label == "constant 1e-3"
    assert "01_baseline's run" in capsys.readouterr().out
    assert lesson.kept(cfg.replace(lr=3e-3), "other") is None


def test_fast_modes_neither_keep_nor_reuse(full_mode, monkeypatch):
    cfg = lesson.notebook_config("01_baseline")
    lesson.start("01_baseline")
    lesson.keep(a_run(), cfg)
    monkeypatch.setenv("LAB_MODE", "smoke")
    assert lesson.kept(cfg, "baseline") is None
    lesson.keep(a_run(), cfg.replace(lr=0.5))
    monkeypatch.setenv("LAB_MODE", "full")
    assert lesson.kept(cfg.replace(lr=0.5), "baseline") is None


def test_an_unwritable_cache_only_costs_a_retraining(full_mode, capsys):
    full_mode.mkdir()
    (full_mode / "runs").write_text("a file where the runs folder should be")  # root ignores permissions
    cfg = lesson.start("01_baseline")
    lesson.keep(a_run(), cfg)
    assert "could not keep this run" in capsys.readouterr().out


def test_an_unfinished_exercise_keeps_nothing(full_mode):
    cfg = LabConfig()
    lesson.start("01_baseline")
    lesson.keep(lesson.Run("baseline", missing="Lab 1: train_one_epoch"), cfg)
    assert lesson.kept(cfg, "baseline") is None


FAULTS_OF_TEN_FORWARD_PASSES = """
import resource, sys, torch
from labutils import lesson
from labutils.models import SmallCNN
if sys.argv[1] == "start":
    lesson.start("01_baseline")
model, x = SmallCNN().eval(), torch.randn(256, 1, 28, 28)
with torch.no_grad():
    model(x)  # the first pass grows the heap in both runs
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        model(x)  # activations allocated and freed, as in every evaluation batch and training step
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="keep_freed_memory sets glibc's malloc")
def test_a_notebook_keeps_freed_memory_instead_of_faulting_it_in_every_step(full_mode):
    def faults(how: str) -> int:
        out = subprocess.run([sys.executable, "-c", FAULTS_OF_TEN_FORWARD_PASSES, how], capture_output=True, text=True,
                             check=True).stdout
        return int(out.split()[-1])

    plain, started = faults("plain"), faults("start")
    assert plain > 10 * 1_000  # glibc's default: the activations are faulted in again in every pass
    assert started < plain / 5, (started, plain)


def test_the_loop_note_says_which_steps_its_median_is_over():
    """Lab 03 prints the steady-state median and the loop note's median: the note must say it is over all steps, so
    the two numbers do not contradict each other (issue 31)."""
    run = lesson.Run("clip 1")
    run._history = [{"epoch": 1, "train_loss": 1.0, "val_loss": 1.0, "val_acc": 0.5, "seconds": 1.0,
                     "eval_seconds": 0.1, "samples_per_s": 10.0}]
    run._grad_norms = [3.0, 2.0, 1.0, 0.5]
    note = lesson.loop_note(run, max_norm=1.0)
    assert "median over all 4 steps 1.50" in note and "50.0% of all steps clipped at 1" in note, note


def test_a_fast_run_says_which_numbers_the_text_and_the_questions_use(monkeypatch, capsys, tmp_path):
    """In smoke mode the text's numbers (92%, a safety net of 2.0) are not the student's: the banner says so, and
    which numbers the written questions want (issue 31)."""
    monkeypatch.setenv("LAB_MODE", "smoke")
    monkeypatch.setenv("LAB_ARTIFACTS", str(tmp_path))
    lesson.start("03_clipping")
    out = capsys.readouterr().out
    assert "the numbers in the text are from full runs" in out and "answer the questions" in out, out


def test_a_fast_run_times_two_small_batches_and_a_full_run_the_ones_asked_for(monkeypatch):
    """Lab 5's and lab 8's throughput cells time ``lesson.timing_batches`` in each of ``timing_rounds()`` rounds: in a
    fast run two batches of 32 images, 3 rounds (fp16 autocast on a CPU took 3.5 s of every graded lab 8 at batch
    128), in full mode the first ``n`` of epoch 0, whole and in order."""
    loader = [(torch.full((128, 1), float(i)), torch.full((128,), i)) for i in range(6)]
    monkeypatch.setattr(lesson.data, "set_position", lambda loader, epoch: None)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)  # it would mean grade mode whatever LAB_MODE says
    monkeypatch.setenv("LAB_MODE", "grade")
    fast = lesson.timing_batches(loader, 4)
    assert [(x.shape[0], int(y[0])) for x, y in fast] == [(32, 0), (32, 1)] == [(lesson.FAST_TIMING[1], i)
                                                                                for i in range(2)]
    assert lesson.timing_rounds() == 3
    monkeypatch.setenv("LAB_MODE", "full")
    assert [(x.shape[0], int(y[0])) for x, y in lesson.timing_batches(loader, 4)] == [(128, i) for i in range(4)]
    assert len(lesson.timing_batches(loader, 40)) == 6  # fewer than asked: all of them


@pytest.mark.parametrize("val_losses, said", [
    ([0.30, 0.27, 0.2546, 0.2562], "validation loss 0.6% above its lowest (0.2546 at epoch 3): about flat"),
    ([0.30, 0.27, 0.26, 0.25], "validation loss at its lowest at the last epoch, training loss at its lowest too, so "
                               "more epochs"),
    ([0.30, 0.25, 0.27, 0.29], "validation loss rose after epoch 2 (0.2500 -> 0.2900, 16.0%) while training loss kept "
                               "falling, the start of overfitting")])
def test_the_loop_note_says_what_the_numbers_show(val_losses, said):
    """A validation loss that rose from 0.2546 to 0.2562 is not "still at its lowest" (issue 45): each claim of the
    note is read from the numbers it is about."""
    run = lesson.Run("baseline")
    run._history = [{"epoch": e, "train_loss": 1.0 / e, "val_loss": v, "val_acc": 0.8, "seconds": 1.0,
                     "eval_seconds": 0.1, "samples_per_s": 10.0} for e, v in enumerate(val_losses, start=1)]
    note = lesson.loop_note(run)
    assert said in note, note
    assert "still at their lowest" not in note


def test_an_accuracy_gap_is_said_against_the_seeds_spread():
    """Lab 3's two thresholds and lab 8's two groupings end a few tenths apart: the notebook says whether the
    student's gap is inside what seeds alone spread over (issue 45), never that one setting won on noise."""
    assert "within the 0.6 points" in lesson.accuracy_gap(0.9219, 0.9206)
    assert lesson.accuracy_gap(0.9219, 0.9206).startswith("+0.13 points")
    assert lesson.accuracy_gap(0.9028, 0.9033).startswith("-0.05 points")
    assert "more than the 0.6 points" in lesson.accuracy_gap(0.92, 0.90)
