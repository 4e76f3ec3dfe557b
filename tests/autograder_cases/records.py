"""Two grading runs of the same class compared student by student: what may differ between runs (timings, where OUT
is) left out, and a failure that shows the differing tests whole (pytest's diff of a record cuts them)."""

from __future__ import annotations

import json
from pathlib import Path


def comparable(out: Path, student: str) -> dict:
    """The student's JSON in ``out`` without what differs between two runs: timings and where OUT is."""
    record = json.loads((out / f"{student}.json").read_text())
    for nb in record["notebooks"].values():
        nb.pop("seconds", None)
        nb.pop("timings", None)
        if nb.get("feedback"):
            nb["feedback"] = str(Path(nb["feedback"]).relative_to(out))
    return record


def assert_same_record(out: Path, reference: Path, student: str) -> None:
    """The student's JSON in ``out`` equals the reference's."""
    got, want = comparable(out, student), comparable(reference, student)
    differing = [(a, b) for a, b in zip(got["tests"], want["tests"]) if a != b]
    assert got == want, f"{student}: {len(differing)} test(s) differ:\n" + "\n".join(
        f"got      {a}\nexpected {b}" for a, b in differing[:3])
