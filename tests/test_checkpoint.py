"""Checkpoints: atomic, complete, verified, rotated, and recoverable."""

import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from labutils import checkpoint as ckpt
from labutils.models import SmallCNN
from labutils.optim import make_scheduler


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
    path = ckpt.save_checkpoint(tmp_path / ckpt.last_name(3), **original, step=3, position={"epoch": 0})
    assert path.name == "step-000003.pt" and (tmp_path / "step-000003.pt.sha256").exists()
    raw = torch.load(path, weights_only=True)  # only tensors and plain values: safe to load
    assert {"model", "optimizer", "scheduler", "scaler", "step", "rng", "torch_version", "num_threads"} <= raw.keys()
    train_steps(original, 4, seed=2)

    restored = objects(seed=99)  # different initial weights, overwritten by the load
    state = ckpt.restore_checkpoint(path, **restored)
    assert state["step"] == 3 and state["position"] == {"epoch": 0}
    train_steps(restored, 4, seed=2)
    for a, b in zip(original["model"].parameters(), restored["model"].parameters()):
        assert torch.equal(a, b)
    assert restored["scaler"].get_scale() == original["scaler"].get_scale()
    assert restored["scheduler"].get_last_lr() == original["scheduler"].get_last_lr()


def test_a_write_that_dies_half_way_leaves_the_previous_checkpoint_loadable(tmp_path):
    ckpt.save_checkpoint(tmp_path / ckpt.last_name(1), **objects(), step=1)
    script = textwrap.dedent(f"""
        import os, torch
        from labutils import checkpoint as ckpt
        from labutils.models import SmallCNN
        real_save = torch.save
        def dying_save(obj, f, *a, **k):
            f.write(b"PK\\x03\\x04 half a checkpoint")
            f.flush()
            os._exit(1)  # power cut in the middle of the write
        torch.save = dying_save
        m = SmallCNN(channels=(4, 8))
        ckpt.save_checkpoint({str(tmp_path / ckpt.last_name(1))!r}, model=m,
                             optimizer=torch.optim.AdamW(m.parameters()), step=2)
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 1
    restored = objects(seed=5)
    state = ckpt.load_latest_valid(tmp_path, **restored, log=lambda *_: None)
    assert state is not None and state["step"] == 1  # the old file is intact under its name


def test_a_flipped_byte_is_caught_and_loading_falls_back_to_the_previous(tmp_path):
    o = objects()
    ckpt.save_checkpoint(tmp_path / ckpt.last_name(10), **o, step=10)
    newest = ckpt.save_checkpoint(tmp_path / ckpt.last_name(20), **o, step=20)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01  # inside tensor data: torch.load alone would not notice
    newest.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="step-000020.pt: sha256 does not match"):
        state = ckpt.load_latest_valid(tmp_path, **objects(seed=3), log=lambda *_: None)
    assert state["step"] == 10


def test_a_truncated_or_mismatching_newest_checkpoint_falls_back(tmp_path):
    ckpt.save_checkpoint(tmp_path / ckpt.last_name(10), **objects(), step=10)
    ckpt.save_checkpoint(tmp_path / ckpt.last_name(20), **objects(channels=(8, 8)), step=20)  # another model
    truncated = ckpt.save_checkpoint(tmp_path / ckpt.last_name(30), **objects(), step=30)
    truncated.write_bytes(truncated.read_bytes()[:1000])
    (tmp_path / "step-000030.pt.sha256").unlink()  # no checksum: the truncation itself must be detected
    with pytest.warns(UserWarning) as warned:
        state = ckpt.load_latest_valid(tmp_path, **objects(seed=3), log=lambda *_: None)
    assert state["step"] == 10
    messages = " ".join(str(w.message) for w in warned)
    assert "step-000030.pt: cannot be read" in messages and "step-000020.pt: does not fit this run" in messages


def test_no_valid_checkpoint_means_a_fresh_start_said_out_loud(tmp_path):
    said = []
    assert ckpt.load_latest_valid(tmp_path, **objects(), log=said.append) is None
    assert said == [f"starting fresh: no checkpoint in {tmp_path}"]


def test_rotation_keeps_the_newest_k(tmp_path):
    o = objects()
    for step in (100, 200, 300, 400):
        ckpt.save_checkpoint(tmp_path / ckpt.last_name(step), **o, step=step)
        ckpt.rotate(tmp_path, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-000300.pt", "step-000400.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-000300.pt", "step-000300.pt.sha256", "step-000400.pt", "step-000400.pt.sha256"]  # no temp files left


def test_a_different_thread_count_is_warned_about(tmp_path):
    o = objects()
    path = ckpt.save_checkpoint(tmp_path / "x.pt", **o, step=1)
    state = torch.load(path, weights_only=True)
    state["num_threads"] = torch.get_num_threads() + 7
    ckpt.atomic_save(state, path)
    with pytest.warns(UserWarning, match="threads"):
        ckpt.restore_checkpoint(path, **o)
