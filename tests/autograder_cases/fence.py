"""A test's own pids and memory cgroup, around a bomb or a whole hostile run: the layer under test nests inside it,
so a regression fails the test, not the machine."""

from __future__ import annotations

import errno
import time
import uuid

from autograder.sandbox import isolation


class Fence:
    def __init__(self, name: str, pids: int, memory_mb: int):
        self.dirs = {c: isolation.CGROUP_ROOT / c / f"looplab-{name}-fence-{uuid.uuid4().hex[:8]}"
                     for c in ("pids", "memory")}
        for folder in self.dirs.values():
            folder.mkdir()
        (self.dirs["pids"] / "pids.max").write_text(str(pids))
        (self.dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_mb << 20))

    def enter_command(self) -> str:
        """Python that moves the process running it into the fence."""
        return "".join(f"open({str(d / 'cgroup.procs')!r}, 'w').write(str(__import__('os').getpid()))\n"
                       for d in self.dirs.values())

    def prefix(self) -> list[str]:
        """A shell that enters the fence, then execs the command after it."""
        joins = "; ".join(f"echo $$ > {d / 'cgroup.procs'}" for d in self.dirs.values())
        return ["/bin/sh", "-c", f'{joins}; exec "$@"', "fence"]

    def remove(self, wait_s: float = 30) -> None:
        """Remove the fence and what the test left in it; a cgroup whose last processes are still dying (a fork
        bomb's children, killed a moment ago; longer on a loaded machine) is busy for a while: waited for, up to
        ``wait_s``."""
        deadline = time.monotonic() + wait_s
        for folder in self.dirs.values():
            for child in [*sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True), folder]:
                while True:
                    try:
                        child.rmdir()
                        break
                    except OSError as exc:
                        if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                            raise
                        time.sleep(0.2)
