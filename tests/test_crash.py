"""Simulated crashes: the step log survives os._exit, and run_forked survives a notebook kernel's thread pool."""

import torch

from labutils.crash import StepRecorder, exit_at_step, read_step_log, run_forked


def train_and_record(path, crash_at_step=None, steps=5):
    recorder = StepRecorder(path, crash_at_step=crash_at_step)
    for step in range(1, steps + 1):
        torch.randn(256, 256) @ torch.randn(256, 256)  # a parallel op in the child
        recorder(step, loss=1.0 / step)


def test_a_crash_keeps_the_lines_written_before_it_and_runs_are_numbered(tmp_path):
    torch.randn(512, 512) @ torch.randn(512, 512)  # the parent has used its thread pool, as a notebook has
    log = tmp_path / "steps.jsonl"
    assert run_forked(train_and_record, log, crash_at_step=3) == 1
    assert run_forked(train_and_record, log) == 0
    records = read_step_log(log)
    assert [(r["run"], r["step"]) for r in records] == [(1, 1), (1, 2), (1, 3)] + [(2, s) for s in range(1, 6)]


def test_exit_at_step_ends_the_process_at_that_step():
    assert run_forked(lambda: [exit_at_step(2)(step) for step in (1, 2, 3)]) == 1
    assert run_forked(lambda: [exit_at_step(9)(step) for step in (1, 2, 3)]) == 0
