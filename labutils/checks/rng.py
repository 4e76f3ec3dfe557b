"""The process's random streams (torch's, Python's and NumPy's) as plain data and back.

A load_checkpoint restores them and the check's next dropout mask reads them, so what a call left there is part of
what it did: the grader's observer sends them after each call (:class:`labutils.checks.records.AfterCall`) and the
judge takes them over; a check also starts calls from streams it kept (``labutils.checks.apart.traced_calls``).
Not :func:`labutils.checkpoint.capture_rng_state`: that checkpoint format refuses a cached ``random.gauss`` value,
which a student's code may leave and the judge must take over as it is.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state() -> dict:
    """The process's random streams now."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss]}


def set_rng_state(state: dict) -> None:
    """Put the streams :func:`rng_state` read back into this process."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))
