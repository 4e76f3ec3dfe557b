"""Run a command as a child subreaper, so that whatever it leaves behind, however detached, stays below this process.

``python reaper.py STDOUT STDERR -- COMMAND...``: runs COMMAND (its output to the two files); when it exits, prints
one JSON line ``{"returncode", "seconds", "left"}`` where ``left`` is every process still below this one (orphans of
the run are re-parented here, whatever sessions they made). Each line ``list`` on stdin prints ``{"left"}`` again;
end of stdin kills what is left, by pid, and exits. A test uses it to prove that nothing of a run outlives it.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


def below(root: int) -> list[dict]:
    """Every living process below ``root`` (zombies left out), with its command line and its name (``comm``: a
    grader's workers are its forks, named ``looplab-worker``, with the grader's command line)."""
    children: dict[int, list[int]] = {}
    state: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                after = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(after[1]), []).append(int(entry.name))
            state[int(entry.name)] = after[0]
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            if state[pid] != "Z":
                found.append({"pid": pid, "cmdline": _cmdline(pid), "comm": _comm(pid)})
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return "?"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _reap() -> None:
    """Collect the orphans that died here (they would be listed as zombies otherwise)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _say(message: dict) -> None:
    print(json.dumps(message), flush=True)


def main(argv: list[str]) -> None:
    stdout, stderr, sep, *command = argv
    assert sep == "--", "usage: reaper.py STDOUT STDERR -- COMMAND..."
    ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    started = time.monotonic()
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        code = subprocess.call(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    _reap()
    _say({"returncode": code, "seconds": round(time.monotonic() - started, 1), "left": below(os.getpid())})
    for line in sys.stdin:
        _reap()
        if line.strip() == "list":
            _say({"left": below(os.getpid())})
    for _ in range(20):  # the end: kill what is left (it may have children of its own on the way)
        _reap()
        left = below(os.getpid())
        if not left:
            return
        for process in left:
            try:
                os.kill(process["pid"], 9)
            except OSError:
                pass
        time.sleep(0.2)


if __name__ == "__main__":
    main(sys.argv[1:])
