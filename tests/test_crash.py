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


def test_the_spawned_child_of_a_cuda_machine_gets_a_notebook_function_by_value(tmp_path, monkeypatch):
    """On CUDA the child is spawned (a fork cannot use CUDA): a closure, as a notebook cell's function is, still
    runs there, crashes where told and logs from its own process."""
    from labutils import crash

    monkeypatch.setattr(crash, "start_method", lambda: "spawn")
    log = tmp_path / "steps.jsonl"
    steps = 3

    def notebook_cell_function(crash_at_step=None):  # a closure over `log` and `steps`: not picklable by name
        recorder = StepRecorder(log, crash_at_step=crash_at_step)
        for step in range(1, steps + 1):
            recorder(step, loss=float(torch.get_num_threads()))  # the child trains on one thread

    assert run_forked(notebook_cell_function, crash_at_step=2) == 1
    assert run_forked(notebook_cell_function) == 0
    records = read_step_log(log)
    assert [(r["run"], r["step"]) for r in records] == [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]
    assert {r["loss"] for r in records} == {1.0}
