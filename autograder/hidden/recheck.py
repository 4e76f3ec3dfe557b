"""Re-run a notebook's hidden tests outside the student's kernel, on pristine imports.

Runs in a sandboxed fork of the zygote (:mod:`autograder.sandbox.zygote`), whose modules were imported before any student
code existed. It re-executes the notebook's code cells in order, skipping the instructor's test cells, and at each test
cell that needs it runs the hidden check:

1. the check function is the one captured at start-up (the notebook may have replaced ``labutils.checks.*``);
2. right before the check, every attribute of torch, numpy, labutils, the checks and a few stdlib modules (and of the
   classes they define) is put back to its start-up value, so a cell that monkeypatched them gains nothing;
3. right after, the same attributes are compared again: a student function that patched torch or labutils while it
   was being checked fails, with the name of what it changed.

Results are :class:`~autograder.channel.CheckLine` messages written to a pipe the zygote reads; a process that dies
or hangs yields no line, which the grader counts as a failure.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from autograder.hidden import verifier as hidden
from autograder.channel import CheckLine, RecheckSpec, decode, encode
from .snapshot import Snapshot


class CellTimeout(Exception):
    """A re-executed cell ran past the per-cell limit."""


def _on_alarm(signum, frame):
    raise CellTimeout("cell ran past the time limit")


def make_shell():
    """A plain (kernel-less) IPython shell, so cells with magics run as they did in the kernel."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    return InteractiveShell.instance(config=config)


def run(spec_path: str, out_fd: int, nonce: str = "") -> None:
    """Execute the spec's cells, run the hidden checks at test cells, write one JSON line per check to ``out_fd``.

    Every line carries ``nonce`` (made by the zygote right before the fork, never written anywhere), so a notebook
    that prints look-alike result lines to the pipe and exits is not believed.
    """
    snapshot = Snapshot()  # taken before any student code: this fork's modules are the zygote's pristine ones
    # bound now, before any student code runs: later changes to these classes or modules cannot reach them
    restore, tampered, run_check, monotonic = snapshot.restore, snapshot.tampered, hidden.run_check, time.monotonic
    line_of, verdict = encode, CheckLine
    import labutils.checks as checks_module

    checks = sys.modules["labutils.checks"]
    assert checks is checks_module
    out = os.fdopen(out_fd, "wb", buffering=0)
    write = out.write
    with open(spec_path, "rb") as f:
        spec = decode(f.read(), RecheckSpec)
    shell = make_shell()
    cache: dict = {}  # one check run shared by the tests of one function (a local: no cell can reach it)
    signal.signal(signal.SIGALRM, _on_alarm)
    cell_timeout = float(spec.cell_timeout or 0)
    for cell in spec.cells:
        if cell.grade_id is not None:
            for call in cell.checks:
                call = tuple(call)
                started = monotonic()
                restore()
                passed, message = run_check(call, shell.user_ns, checks, cache)
                changed = tampered()
                if changed:
                    passed = False
                    message = (
                        f"{call[1]} changed {', '.join(sorted(changed)[:5])} while it was being checked; "
                        "functions that modify torch or labutils are not accepted."
                    )
                restore()
                write(line_of(verdict(grade_id=cell.grade_id, call=list(call), passed=passed is True,
                                      message=str(message), seconds=round(monotonic() - started, 3), nonce=nonce)))
        elif cell.run:
            if cell_timeout:
                signal.setitimer(signal.ITIMER_REAL, cell_timeout)
            try:
                shell.run_cell(cell.source, store_history=False, silent=False)
            except BaseException as exc:  # run_cell catches user errors; this is for a timeout outside its guard
                print(f"recheck: cell {cell.index} stopped: {exc!r}", file=sys.stderr)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    out.close()
