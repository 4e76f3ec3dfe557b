"""A hidden-test recheck through a private zygote, confined as the grader confines one: for tests that try the
recheck itself (the judge, its pipes, its processes) without grading a whole notebook."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path


def recheck(folder: Path, cells: list, timeout: float = 120, cell_timeout: float = 60, started=None, zygote=None,
            task_memory_mb: int | None = None):
    """(reply, the recheck's log, seconds the request took) of re-checking ``cells`` (RecheckCell) in ``folder``
    (one another uid may pass through: 0711). ``started(zygote)`` is called once the zygote is up. ``zygote``: a
    private one the caller started and closes (tests that share one import torch once, as the grader's rechecks do).
    ``task_memory_mb``: the real memory its task's cgroup may hold (a run's share, autograder.run.machine)."""
    from autograder import channel
    from autograder.channel import RecheckReply, RecheckRequest, RecheckSpec, RunConfig
    from autograder.sandbox.client import base_policy, kernel_env, private_zygote

    folders = {name: folder / name for name in ("cwd", "home", "tmp")}
    for f in folders.values():
        f.mkdir()
    spec = folder / "spec.json"
    spec.write_bytes(channel.encode(RecheckSpec(cells=cells, cell_timeout=cell_timeout)))
    run = RunConfig(template_db="", work_dir=str(folder), cell_timeout=cell_timeout, notebook_timeout=timeout,
                    memory_mb=6144, threads=1, task_memory_mb=task_memory_mb)
    own = [str(f) for f in folders.values()]
    policy = dataclasses.replace(base_policy(run), write_dirs=own, own_paths=[*own, str(spec)],
                                 read_files=[*base_policy(run).read_files, str(spec)])
    borrowed = zygote is not None
    if not borrowed:
        zygote = private_zygote(folder)
    if started is not None:
        started(zygote)
    try:
        started = time.monotonic()
        reply = zygote.request(RecheckRequest(
            spec=str(spec), cwd=own[0], env=kernel_env(folders["home"], folders["tmp"], run), policy=policy,
            log=str(folder / "recheck.log"), timeout=timeout), RecheckReply, timeout=timeout + 30)
        seconds = time.monotonic() - started
    finally:
        if not borrowed:
            zygote.close()
    return reply, (folder / "recheck.log").read_text(), seconds
