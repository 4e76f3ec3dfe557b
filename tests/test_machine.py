"""What a grading run may use is read from the cgroup it runs in (v1 and v2, a container's view and a host's), not
from the host's CPU count: each layout is written as files, as the kernel shows them, and read back."""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder.run.machine import size_pool
from labutils.limits import UNLIMITED, Limits, read_limits

MEMINFO = "MemTotal:       24684092 kB\nMemFree:  1000 kB\nMemAvailable:   20939364 kB\n"
V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 {root} /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 {root} /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 {root} /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_CGROUP = "9:pids:{path}\n4:memory:{path}\n1:cpu,cpuacct:{path}\n0::/\n"


def write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


def fake(tmp_path: Path, mountinfo: str, cgroup: str) -> Path:
    """A /proc/self of its own under ``tmp_path`` (and /proc/meminfo beside it); returns it."""
    proc = tmp_path / "proc" / "self"
    write(proc, {"mountinfo": mountinfo, "cgroup": cgroup})
    (proc.parent / "meminfo").write_text(MEMINFO)
    return proc


def v1_memory(limit: int, usage: int, inactive: int) -> dict[str, str]:
    return {"memory.limit_in_bytes": str(limit), "memory.usage_in_bytes": str(usage),
            "memory.stat": f"cache 1\nrss 2\ntotal_inactive_file {inactive}\n"}


def test_v1_a_containers_own_cgroup_at_the_mounts_top(tmp_path):
    """Docker without a cgroup namespace: /proc/self/cgroup names /docker/ID, the mount shows that cgroup as its top;
    Gradescope's default container: 768 MB and half a CPU."""
    proc = fake(tmp_path, V1_MOUNTS.format(root="/docker/abc"), V1_CGROUP.format(path="/docker/abc"))
    cg = tmp_path / "sys" / "fs" / "cgroup"
    write(cg / "memory", v1_memory(768 << 20, 300 << 20, 100 << 20))
    write(cg / "cpu,cpuacct", {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"})
    limits = read_limits(proc, tmp_path, cpus_allowed=16)
    assert limits == Limits(cpus=0.5, memory_mb=768, used_mb=200, free_mb=568, cgroup="v1")


def test_v1_the_tightest_limit_of_the_cgroup_and_its_ancestors(tmp_path):
    """A host's view: the grader's cgroup is below a limited one; the ancestor's limit and quota count."""
    proc = fake(tmp_path, V1_MOUNTS.format(root="/"), V1_CGROUP.format(path="/course/grader"))
    cg = tmp_path / "sys" / "fs" / "cgroup"
    write(cg / "memory", v1_memory(UNLIMITED + 4096, 0, 0))
    write(cg / "memory" / "course", v1_memory(2048 << 20, 0, 0))
    write(cg / "memory" / "course" / "grader", v1_memory(9223372036854771712, 512 << 20, 0))
    write(cg / "cpu,cpuacct" / "course", {"cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000"})
    write(cg / "cpu,cpuacct" / "course" / "grader", {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    limits = read_limits(proc, tmp_path, cpus_allowed=4)
    assert (limits.cpus, limits.memory_mb, limits.used_mb, limits.free_mb) == (1.5, 2048, 512, 1536)


def test_v2_memory_max_and_cpu_max(tmp_path):
    proc = fake(tmp_path, "40 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n", "0::/job/grader\n")
    cg = tmp_path / "sys" / "fs" / "cgroup"
    write(cg / "job", {"memory.max": str(1024 << 20), "cpu.max": "max 100000"})
    write(cg / "job" / "grader", {"memory.max": "max", "cpu.max": "200000 100000", "memory.current": str(400 << 20),
                                  "memory.stat": f"anon 1\ninactive_file {100 << 20}\n"})
    limits = read_limits(proc, tmp_path, cpus_allowed=8)
    assert limits == Limits(cpus=2.0, memory_mb=1024, used_mb=300, free_mb=724, cgroup="v2")


def test_no_limit_the_machines_own_memory_and_cpus(tmp_path):
    proc = fake(tmp_path, "22 27 0:21 / /proc rw - proc proc rw\n", "0::/\n")
    limits = read_limits(proc, tmp_path, cpus_allowed=2)
    assert limits == Limits(cpus=2.0, memory_mb=None, used_mb=(24684092 - 20939364) >> 10,
                            free_mb=20939364 >> 10, cgroup="")


@pytest.mark.parametrize("limits, requested, tasks, expect", [
    (Limits(0.5, 768, 470, 298, "v1"), None, 9, (1, 1, 250, False)),  # Gradescope's default: one at a time
    (Limits(2.0, 768, 470, 298, "v1"), None, 9, (1, 1, 250, False)),  # two CPUs, memory for one notebook
    (Limits(2.0, 768, 470, 298, "v1"), 4, 9, (1, 1, 250, False)),  # -j 4 asked: memory allows one
    (Limits(2.0, 4096, 470, 3626, "v1"), None, 9, (2, 1, 1765, False)),
    (Limits(2.0, None, 3000, 20000, ""), None, 9, (2, 1, 6144, False)),  # capped by the run's --memory-limit
    (Limits(8.0, None, 3000, 20000, ""), None, 1, (1, 1, 6144, False)),  # one task, one worker: threads as for 8
    (Limits(0.5, 768, 600, 168, "v1"), None, 9, (1, 1, 120, True)),  # short: below what an honest notebook needs
])
def test_the_pool_is_sized_by_the_cpu_quota_and_the_free_memory(limits, requested, tasks, expect):
    size = size_pool(limits, requested, tasks, memory_mb=6144)
    assert (size.jobs, size.threads, size.task_memory_mb, size.short) == expect


def test_the_torch_threads_depend_on_the_cpus_and_jobs_asked_only():
    """A float's rounding, so a check's figures (a gradient norm in a message), must not change with how many tasks a
    run has left (a resumed run, a late student) or how much memory was free: only with the CPUs and -j."""
    for cpus, requested in ((2.0, None), (2.0, 2), (4.0, 2), (0.5, None)):
        threads = {size_pool(Limits(cpus, memory, 0, free, "v1" if memory else ""), requested, tasks).threads
                   for tasks in (1, 2, 9) for memory, free in ((768, 298), (4096, 3626), (None, 20000))}
        assert len(threads) == 1, (cpus, requested, threads)
