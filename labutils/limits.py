"""What this process may use: the CPU time and memory of the cgroup it runs in, not the host's.

Why: in a container the host's CPU count and memory say nothing about what a process is given. Gradescope's default
container has 768 MB and half a virtual CPU on a host with many of both; a JupyterHub pod on Kubernetes may have two
CPUs of a 64-core node. So the limits are read where the kernel enforces them: ``/proc/self/cgroup`` names this
process's cgroup in each hierarchy, ``/proc/self/mountinfo`` where each hierarchy is mounted (a container sees its own
cgroup as the root of the mount), and the tightest limit of that cgroup and every ancestor visible above it counts:

- cgroup v1: ``memory.limit_in_bytes`` (the memory controller), ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``;
- cgroup v2: ``memory.max``, ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD").

What the cgroup uses now is its usage less the page cache it can drop (``inactive_file``), as Docker and Kubernetes
count a container's working set. Without a memory limit the machine's ``MemAvailable`` is reported; the CPUs are
those this process may run on (``sched_getaffinity``), fewer where a quota allows less. The grader sizes its pool from
them (:mod:`autograder.run.machine`); a notebook's CPU threads never exceed the quota (:mod:`labutils.threads`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

UNLIMITED = 1 << 60  # a v1 limit at least this large is no limit (the kernel's "max" is 2^63 rounded to a page)


@dataclass(frozen=True)
class Limits:
    """What this process and its children may use."""

    cpus: float  # CPU-seconds per second: the cgroup's quota, else the CPUs this process may run on
    memory_mb: int | None  # the cgroup's memory limit (the tightest of its own and its ancestors'); None: none
    used_mb: int  # what the cgroup holds now (the machine, without a limit), page cache it can drop left out
    free_mb: int  # what the run may still take: the limit less what is used, else the machine's MemAvailable
    cgroup: str = ""  # "v1", "v2" or "" (none found): where the limits were read

    def describe(self) -> str:
        memory = f"{self.memory_mb} MB" if self.memory_mb is not None else "no memory limit"
        where = f"cgroup {self.cgroup}" if self.cgroup else "no cgroup limit found"
        return f"{self.cpus:g} CPU, {memory} ({where}; {self.free_mb} MB free)"



@dataclass(frozen=True)
class _Mount:
    root: str  # the cgroup the mount shows as its top (a container's own, with a cgroup namespace or a bind)
    point: Path
    v2: bool
    controllers: frozenset[str]


def _mounts(mountinfo: str, fs: Path) -> list[_Mount]:
    """The cgroup file systems of ``mountinfo`` (``/proc/self/mountinfo``'s text), their paths under ``fs``."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        fstype, options = fields[dash + 1], fields[dash + 3] if len(fields) > dash + 3 else ""
        if fstype not in ("cgroup", "cgroup2"):
            continue
        point = fs / fields[4].lstrip("/")
        found.append(_Mount(fields[3], point, fstype == "cgroup2", frozenset(options.split(","))))
    return found


def _folders(proc_cgroup: str, mounts: list[_Mount], controller: str) -> tuple[str, list[Path]]:
    """("v1"/"v2", this process's cgroup folder for ``controller`` and each ancestor up to the mount's top), or
    ("", []) when no mounted hierarchy has it."""
    paths = {}
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        paths["" if not names else names] = path
    for mount in mounts:
        if mount.v2:
            path = paths.get("")
        else:
            path = next((p for names, p in paths.items() if controller in names.split(",")), None)
            if controller not in mount.controllers:
                continue
        if path is None:
            continue
        rel = os.path.relpath(path, mount.root) if path.startswith(mount.root) else "."
        folder = (mount.point / rel).resolve() if rel != "." else mount.point
        chain = [folder, *[p for p in folder.parents if p.is_relative_to(mount.point)]]
        if mount.v2 and not any((f / f"{controller}.max").exists() for f in chain):
            continue  # the unified hierarchy without this controller (a v1/v2 hybrid)
        return ("v2" if mount.v2 else "v1"), chain
    return "", []


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _memory_limit(kind: str, chain: list[Path]) -> int | None:
    """The tightest memory limit of ``chain``, in bytes; None for none."""
    limits = []
    for folder in chain:
        text = _read(folder / ("memory.limit_in_bytes" if kind == "v1" else "memory.max"))
        if text and text != "max" and int(text) < UNLIMITED:
            limits.append(int(text))
    return min(limits, default=None)


def _stat(folder: Path) -> dict[str, int]:
    text = _read(folder / "memory.stat") or ""
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if len(line.split()) == 2)}


def _memory_used(kind: str, folder: Path) -> int:
    """What the cgroup ``folder`` holds, in bytes, less the page cache it can drop."""
    usage = _read(folder / ("memory.usage_in_bytes" if kind == "v1" else "memory.current"))
    stat = _stat(folder)
    inactive = stat.get("total_inactive_file" if kind == "v1" else "inactive_file", 0)
    return max(0, int(usage or 0) - inactive)


def _cpu_quota(kind: str, chain: list[Path]) -> float | None:
    """The tightest CPU quota of ``chain``, in CPUs; None for none."""
    quotas = []
    for folder in chain:
        if kind == "v1":
            quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
        else:
            quota, _, period = (_read(folder / "cpu.max") or "max").partition(" ")
        if quota and quota not in ("max", "-1") and period and int(period) > 0:
            quotas.append(int(quota) / int(period))
    return min(quotas, default=None)


def _meminfo(text: str) -> dict[str, int]:
    return {line.split(":")[0]: int(line.split()[1]) * 1024 for line in text.splitlines() if line.endswith("kB")}


def read_limits(proc: Path = Path("/proc/self"), fs: Path = Path("/"), cpus_allowed: int | None = None) -> Limits:
    """This process's :class:`Limits` (``proc``, ``fs``: another ``/proc/self`` and root, for the tests)."""
    try:
        mounts = _mounts((proc / "mountinfo").read_text(), fs)
        proc_cgroup = (proc / "cgroup").read_text()
    except OSError:
        mounts, proc_cgroup = [], ""
    memory_kind, memory_chain = _folders(proc_cgroup, mounts, "memory")
    cpu_kind, cpu_chain = _folders(proc_cgroup, mounts, "cpu")
    cpus = float(cpus_allowed or len(os.sched_getaffinity(0)))
    quota = _cpu_quota(cpu_kind, cpu_chain) if cpu_kind else None
    if quota is not None:
        cpus = min(cpus, quota)
    limit = _memory_limit(memory_kind, memory_chain) if memory_kind else None
    meminfo = _meminfo(_read(proc.parent / "meminfo") or "")
    if limit is not None:
        used = _memory_used(memory_kind, memory_chain[0])
        free = max(0, limit - used)
    else:
        total, available = meminfo.get("MemTotal", 0), meminfo.get("MemAvailable", 0)
        used, free = total - available, available
    kinds = sorted({kind for kind, found in ((memory_kind, limit), (cpu_kind, quota)) if found is not None})
    return Limits(cpus=round(cpus, 3), memory_mb=None if limit is None else limit >> 20, used_mb=used >> 20,
                  free_mb=free >> 20, cgroup="+".join(kinds))
