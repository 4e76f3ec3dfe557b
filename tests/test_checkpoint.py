"""Checkpoints: atomic, complete, verified, rotated, and recoverable (the reference's writer, the shipped helpers)."""

import io
import multiprocessing
import os
import random
import warnings

import numpy as np
import pytest
import torch

from labutils import checkpoint as ckpt
from labutils.models import SmallCNN
from labutils.reference import checkpoint as ref
from labutils.reference.optim import make_scheduler

# The writers these tests kill or watch run in children of a fork server that imported this module's imports once
# and ran nothing else: a fresh interpreter per writer would import torch again, and a fork of this process would
# inherit its state (torch's thread pool, CUDA) that a child cannot use. Not this module itself: the server starts
# without tests/ on its path (Python 3.11's forkserver drops the parent's), and each child imports it, cheaply.
# torch._dynamo: what a process's first optimizer imports (~2 CPU s).
WRITERS = multiprocessing.get_context("forkserver")
WRITERS.set_forkserver_preload(["numpy", "pytest", "torch", "torch._dynamo", "labutils.checkpoint", "labutils.models",
                                "labutils.reference.checkpoint", "labutils.reference.optim"])


def objects(seed=0, channels=(4, 8)):
    torch.manual_seed(seed)
    model = SmallCNN(channels=channels, dropout=0.2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = make_scheduler(optimizer, "onecycle", total_steps=20)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return {"model": model, "optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}


def train_steps(o, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x, y = torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)
        o["optimizer"].zero_grad()
        o["scaler"].scale(torch.nn.functional.cross_entropy(o["model"](x), y)).backward()  # dropout draws RNG
        o["scaler"].step(o["optimizer"])
        o["scaler"].update()
        o["scheduler"].step()


def test_rng_state_round_trips_for_python_numpy_and_torch():
    state = ckpt.capture_rng_state()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    ckpt.restore_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_checkpoint_is_complete_and_resume_is_exact(tmp_path):
    original = objects()
    train_steps(original, 3)
    path = ref.save_checkpoint(tmp_path / ckpt.last_name(3), **original, step=3, position={"epoch": 0})
    assert path.name == "step-000003.pt" and (tmp_path / "step-000003.pt.sha256").exists()
    raw = torch.load(path, weights_only=True)  # only tensors and plain values: safe to load
    assert {"model", "optimizer", "scheduler", "scaler", "step", "rng", "torch_version", "num_threads"} <= raw.keys()
    train_steps(original, 4, seed=2)

    restored = objects(seed=99)  # different initial weights, overwritten by the load
    state = ref.restore_checkpoint(path, **restored)
    assert state["step"] == 3 and state["position"] == {"epoch": 0}
    train_steps(restored, 4, seed=2)
    for a, b in zip(original["model"].parameters(), restored["model"].parameters()):
        assert torch.equal(a, b)
    assert restored["scaler"].get_scale() == original["scaler"].get_scale()
    assert restored["scheduler"].get_last_lr() == original["scheduler"].get_last_lr()


def _dying_write(path: str) -> None:
    """A writer whose torch.save dies half-way through the file: a power cut in the middle of the write."""
    def dying_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        f.flush()
        os._exit(1)

    torch.save = dying_save  # this child's torch only
    m = SmallCNN(channels=(4, 8))
    ref.save_checkpoint(path, model=m, optimizer=torch.optim.AdamW(m.parameters()), step=2)


def test_a_write_that_dies_half_way_leaves_the_previous_checkpoint_loadable(tmp_path):
    ref.save_checkpoint(tmp_path / ckpt.last_name(1), **objects(), step=1)
    writer = WRITERS.Process(target=_dying_write, args=(str(tmp_path / ckpt.last_name(1)),))
    writer.start()
    writer.join()
    assert writer.exitcode == 1
    restored = objects(seed=5)
    state = ref.load_latest_valid(tmp_path, **restored, log=lambda *_: None)
    assert state is not None and state["step"] == 1  # the old file is intact under its name


def test_a_flipped_byte_is_caught_and_loading_falls_back_to_the_previous(tmp_path):
    o = objects()
    ref.save_checkpoint(tmp_path / ckpt.last_name(10), **o, step=10)
    newest = ref.save_checkpoint(tmp_path / ckpt.last_name(20), **o, step=20)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside tensor data: torch.load alone would not notice
    newest.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="step-000020.pt: sha256 does not match"):
        state = ref.load_latest_valid(tmp_path, **objects(seed=3), log=lambda *_: None)
    assert state["step"] == 10


def test_a_truncated_or_mismatching_newest_checkpoint_falls_back(tmp_path):
    ref.save_checkpoint(tmp_path / ckpt.last_name(10), **objects(), step=10)
    ref.save_checkpoint(tmp_path / ckpt.last_name(20), **objects(channels=(8, 8)), step=20)  # another model
    truncated = ref.save_checkpoint(tmp_path / ckpt.last_name(30), **objects(), step=30)
    truncated.write_bytes(truncated.read_bytes()[:1000])
    (tmp_path / "step-000030.pt.sha256").unlink()  # no checksum: the truncation itself must be detected
    with pytest.warns(UserWarning) as warned:
        state = ref.load_latest_valid(tmp_path, **objects(seed=3), log=lambda *_: None)
    assert state["step"] == 10
    messages = " ".join(str(w.message) for w in warned)
    assert "step-000030.pt: cannot be read" in messages and "step-000020.pt: does not fit this run" in messages


def test_no_valid_checkpoint_means_a_fresh_start_said_out_loud(tmp_path):
    said = []
    assert ref.load_latest_valid(tmp_path, **objects(), log=said.append) is None
    assert said == [f"starting fresh: no checkpoint in {tmp_path}"]


def test_rotation_keeps_the_newest_k(tmp_path):
    o = objects()
    for step in (100, 200, 300, 400):
        ref.save_checkpoint(tmp_path / ckpt.last_name(step), **o, step=step)
        ckpt.rotate(tmp_path, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-000300.pt", "step-000400.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-000300.pt", "step-000300.pt.sha256", "step-000400.pt", "step-000400.pt.sha256"]  # no temp files left


def test_a_different_thread_count_is_warned_about(tmp_path):
    o = objects()
    path = ref.save_checkpoint(tmp_path / "x.pt", **o, step=1)
    state = torch.load(path, weights_only=True)
    state["num_threads"] = torch.get_num_threads() + 7
    ref.atomic_save(state, path)
    with pytest.warns(UserWarning, match="threads"):
        ref.restore_checkpoint(path, **o)


# --- no debris after a crash -----------------------------------------------------------------------------------------

def _stalling_run(folder: str, step: int, conn) -> None:
    """One run: resume as lab 7's loop does (latest_checkpoint), then save the next step, stalling half-way through
    the write until told to go on through ``conn`` (or killed there)."""
    real_save = torch.save

    def stalling_save(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        f.write(data[: len(data) // 2])
        f.flush()
        conn.send("mid-write")
        conn.recv()
        f.write(data[len(data) // 2:])

    torch.save = stalling_save  # this child's torch only
    latest = ckpt.latest_checkpoint(folder)
    conn.send(f"resumed from {latest.name if latest else None}")
    model = SmallCNN(channels=(4, 8))
    ref.save_checkpoint(f"{folder}/{ckpt.last_name(step)}", model, torch.optim.AdamW(model.parameters()), step=step)
    conn.send("saved")


def start_stalling_run(folder, step):
    """A writer process and our end of its pipe, returned once it is half-way through writing ``step``'s checkpoint,
    with what it said when it resumed."""
    ours, theirs = WRITERS.Pipe()
    proc = WRITERS.Process(target=_stalling_run, args=(str(folder), step, theirs))
    proc.start()
    theirs.close()  # the writer's end: a writer that dies makes our recv raise, not wait
    said = [ours.recv(), ours.recv()]
    assert said[1] == "mid-write", said
    return proc, ours, said[0]


def temp_files(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.slow
def test_writers_killed_mid_save_leave_no_temp_files_once_the_next_run_resumes(tmp_path):
    ref.save_checkpoint(tmp_path / ckpt.last_name(1), **objects(), step=1)
    for step in (2, 3, 4):  # three runs, each SIGKILLed in the middle of writing its checkpoint
        proc, conn, resumed = start_stalling_run(tmp_path, step)
        assert resumed == "resumed from step-000001.pt"  # the half-written files never count as checkpoints
        proc.kill()
        proc.join()
        assert proc.exitcode == -9
        conn.close()
        (left,) = temp_files(tmp_path)  # the kill leaves this run's half-written file; its start removed the last's
        assert left.startswith(f".step-{step:06d}.pt.")

    state = ref.load_latest_valid(tmp_path, **objects(seed=3), log=lambda *_: None)  # the next run resumes
    assert state["step"] == 1
    assert temp_files(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001.pt", "step-000001.pt.sha256"]


@pytest.mark.slow
def test_a_temp_file_a_live_writer_is_writing_is_left_alone(tmp_path):
    ref.save_checkpoint(tmp_path / ckpt.last_name(1), **objects(), step=1)
    proc, conn, _ = start_stalling_run(tmp_path, 2)
    try:
        (live,) = temp_files(tmp_path)
        assert ckpt.remove_stale_temp_files(tmp_path) == []
        assert ref.load_latest_valid(tmp_path, **objects(seed=3), log=lambda *_: None)["step"] == 1
        assert ckpt.latest_checkpoint(tmp_path).name == "step-000001.pt"
        assert temp_files(tmp_path) == [live]  # three resumes later, still there
        conn.send("go on")
        assert conn.recv() == "saved"
        proc.join()
        assert proc.exitcode == 0
    finally:
        proc.kill()
        proc.join()
        conn.close()
    assert temp_files(tmp_path) == []  # the writer finished its own file: renamed into place
    model = SmallCNN(channels=(4, 8))
    with warnings.catch_warnings():  # the writer's torch thread count may not be this process's: not tested here
        warnings.simplefilter("ignore", UserWarning)
        state = ref.restore_checkpoint(tmp_path / "step-000002.pt", model=model,
                                        optimizer=torch.optim.AdamW(model.parameters()))
    assert state["step"] == 2  # the writer we left alone wrote a complete, verified checkpoint


def test_only_unlocked_files_of_the_writers_pattern_are_removed(tmp_path):
    dead = tmp_path / ".step-000007.pt.abc_1234.tmp"  # a writer's, but nobody holds its lock: its writer is dead
    dead_checksum = tmp_path / ".step-000007.pt.sha256.k9x0_q2z.tmp"
    student = tmp_path / ".step-000007.pt.tmp"  # lab 6's own fixed-name writer takes no lock: never ours to delete
    other = tmp_path / "notes.abc_1234.tmp"
    for path in (dead, dead_checksum, student, other):
        path.write_bytes(b"partial")
    removed = ckpt.remove_stale_temp_files(tmp_path)
    assert removed == sorted([dead, dead_checksum])
    assert sorted(p.name for p in tmp_path.iterdir()) == [".step-000007.pt.tmp", "notes.abc_1234.tmp"]


def test_a_locked_temp_file_is_left_alone_in_this_process_too(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    held = tmp_path / ".best.pt.abc_1234.tmp"
    with open(held, "wb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # as atomic_save holds it while writing
        assert ckpt.remove_stale_temp_files(tmp_path) == []
    assert ckpt.remove_stale_temp_files(tmp_path) == [held]  # its holder is gone


def test_the_reference_loop_clears_dead_writers_temp_files_when_a_run_starts(tmp_path):
    from labutils.config import LabConfig
    from labutils.reference.loop import fit

    dead = tmp_path / ".step-000100.pt.abc_1234.tmp"
    dead.write_bytes(b"half a checkpoint")
    said = []
    fit(LabConfig(subset=256, epochs=1, ckpt_dir=str(tmp_path), save_every=1, keep_last=1, progress=False),
        log=said.append)
    assert not dead.exists() and temp_files(tmp_path) == []
    assert said[0] == f"removed 1 temp file(s) left by writers that died mid-save in {tmp_path}"
