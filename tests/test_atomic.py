"""labutils.atomic: a file appears whole or not at all, and a failed write leaves the old one and no temp file."""

from __future__ import annotations

import os

import pytest

from labutils import atomic


def test_a_write_replaces_the_file_from_a_temp_file_in_its_folder(tmp_path, monkeypatch):
    path = tmp_path / "grades.csv"
    path.write_bytes(b"old")
    renames = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (renames.append((src, dst)), real_replace(src, dst)))
    atomic.write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    [(src, dst)] = renames
    assert os.path.dirname(src) == str(tmp_path) and dst == path  # same folder: the rename is atomic
    assert os.listdir(tmp_path) == ["grades.csv"]


def test_a_write_that_fails_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "summary.md"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic.atomic_file(path) as f:
            f.write(b"half of the new")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["summary.md"]
