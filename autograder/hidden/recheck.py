"""Re-run a notebook's hidden tests outside the student's kernel: observed where student code runs, judged where none
ever did.

Runs in a sandboxed fork of the zygote (:mod:`autograder.sandbox.zygote`), whose modules were imported before any
student code existed. That process becomes the **judge**: it makes itself impossible to trace or read
(``PR_SET_DUMPABLE`` 0), forks the **observer**, and never runs a line of the notebook.

- The observer closes the judge's result descriptor, then re-executes the notebook's code cells in order, skipping
  the instructor's test cells; at each test cell it runs the hidden checks on the student's functions, on pristine
  modules: every attribute of torch, numpy, labutils, the checks and a few stdlib modules (and of the classes they
  define) is put back to its start-up value before the check, and compared again after it (a function that patched
  them while being checked is named). Each call of a student function is sent to the judge as a record
  (:mod:`labutils.checks.evidence`): what was traced, returned, raised, and left in the objects and folders it was
  given.
- The judge runs the same checks on its own objects, with each call's record in place of the call, judges, and
  writes one :class:`~autograder.channel.CheckLine` per hidden test to the zygote's pipe, the one descriptor the
  observer never had.

So student code can send the judge evidence, never a verdict: forged records must be those of a correct run, step by
step, or they judge as what they are. A record that does not fit the check, an observer that dies or hangs, and a
check the observer never reached are failures with the reason.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import inspect
import os
import signal
import sys
import time

from autograder.hidden import verifier
from autograder.channel import CheckLine, RecheckSpec, decode, encode
from autograder.process import fork_child
from labutils import verdict
from labutils.checks import evidence, world
from labutils.checks.records import CheckBegin, CheckEnd, EvidenceError
from labutils.verdict import Verdict
from .snapshot import Snapshot

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


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
    """Judge the spec's hidden tests on what an observer child saw; one JSON line per check to ``out_fd``.

    Every line carries ``nonce`` (made by the zygote right before the fork, never written anywhere).
    """
    with open(spec_path, "rb") as f:
        spec = decode(f.read(), RecheckSpec)
    libc = ctypes.CDLL(None)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # the observer can neither ptrace nor read this process
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != os.getcwd()]  # nothing it writes is imported
    sys.dont_write_bytecode = True  # nor does it leave a cache file where the observer could later replace it
    records_r, records_w = os.pipe()
    secret = os.urandom(16)  # the checks' data of this student's run (data_seed): drawn here, before the fork

    def observer() -> None:
        os.close(records_r)
        os.close(out_fd)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # dies with the judge
        observe(spec, records_w, secret)

    pid = fork_child(observer)
    os.close(records_w)
    observer = os.pidfd_open(pid)
    try:
        judge(spec, records_r, out_fd, nonce, observer, secret)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.close(observer)
        os.waitpid(pid, 0)


# --- the observer: student code runs here ---------------------------------------------------------------------------


def data_seed(secret: bytes, index: int) -> int:
    """The seed of the data the ``index``-th hidden check of a recheck runs on (labutils.checks.world.seeded): the
    observer and the judge derive the same one from the ``secret`` the judge drew before forking the observer, so they
    build the same data; no student knows it before the run, and every student's run has its own."""
    return int.from_bytes(hashlib.sha256(secret + index.to_bytes(4, "little")).digest()[:4], "little") & 0x7FFFFFFF


def observe(spec: RecheckSpec, fd: int, secret: bytes = b"") -> None:
    """Execute the cells; at each test cell run its checks, sending every call's record (and a begin and an end per
    check) to ``fd``; the ``index``-th check on the data of :func:`data_seed`."""
    snapshot = Snapshot()  # taken before any student code: this fork's modules are the zygote's pristine ones
    restore, tampered, run_check = snapshot.restore, snapshot.tampered, verifier.run_check
    import labutils.checks as checks
    from labutils.checks import properties

    observer = evidence.Observer(fd)
    shell = make_shell()
    cache: dict = {}  # one check run shared by the tests of one function (a local: no cell can reach it)
    signal.signal(signal.SIGALRM, _on_alarm)
    cell_timeout = float(spec.cell_timeout or 0)
    dirty = False  # a student cell ran since the modules were last put back (the snapshot was taken just now)
    index = 0
    for cell in spec.cells:
        if cell.grade_id is not None:
            for call in cell.checks:
                call, index = tuple(call), index + 1
                if dirty:  # before _begin too: it asks the checks whether the report is cached
                    restore()
                    dirty = False
                begin = _begin(call, shell.user_ns, cache)
                observer.message(begin)
                # only a fresh check runs student code: it alone needs the modules looked at and put back after it
                # (a cached report is judged without running anything; each of these takes 0.02-0.08 s)
                fresh, error, changed = begin.problem is None and begin.fresh, None, []
                if begin.problem is None:
                    try:
                        with evidence.playing(observer), world.seeded(data_seed(secret, index)):
                            run_check(call, shell.user_ns, checks, cache, guard=False)  # guarded here, once
                    except BaseException as exc:  # sys.exit in the function, a cell's alarm: the end says so
                        error = f"{type(exc).__name__}: {exc}"[:300]
                if fresh:
                    changed = tampered()
                    restore()
                    if changed:  # the judge fails this test; the next test of the function runs its check again
                        properties.forget(verifier.contract(call[0], call[1]).id, cache)
                observer.message(CheckEnd(call=list(call), tampered=changed, error=error))
        elif cell.run:
            if cell_timeout:
                signal.setitimer(signal.ITIMER_REAL, cell_timeout)
            try:
                shell.run_cell(cell.source, store_history=False, silent=False)
            except BaseException as exc:  # run_cell catches user errors; this is for a timeout outside its guard
                print(f"recheck: cell {cell.index} stopped: {exc!r}", file=sys.stderr)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            dirty = True


def _begin(call: tuple, namespace: dict, cache: dict) -> CheckBegin:
    """What the judge needs before a check: the functions' signatures, or why they cannot be checked."""
    from labutils.checks import properties

    fns, problem = verifier.find_functions(call[0], call[1], namespace)
    fresh = True
    if fns:
        fresh = not properties.is_cached(verifier.contract(call[0], call[1]).id, tuple(fns), cache)
    return CheckBegin(call=list(call), problem=problem, fresh=fresh,
                      functions=[[getattr(e, "name", ""), signature_facts(fn)] for e, fn in
                                 zip(verifier.contract(call[0], call[1]).functions, fns)])


def signature_facts(fn) -> list | None:
    """[name, kind, has a default] per parameter, or None when Python cannot tell (a builtin)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [[p.name, int(p.kind), p.default is not p.empty] for p in sig.parameters.values()]


# --- the judge: no student code ever runs here ----------------------------------------------------------------------


class Observed:
    """Stands in, in the judge, for a student function that exists only in the observer: its signature, no code."""

    def __init__(self, name: str, signature):
        self.__name__ = name
        self.__signature__ = _rebuilt(signature) if signature is not None else "unknown"

    def __call__(self, *args, **kwargs):
        raise EvidenceError("the judge never runs student code")


def _rebuilt(signature) -> inspect.Signature:
    params = [inspect.Parameter(str(name), inspect._ParameterKind(int(kind)),
                                default=None if has_default else inspect.Parameter.empty)
              for name, kind, has_default in signature]
    return inspect.Signature(params)


def judge(spec: RecheckSpec, fd: int, out_fd: int, nonce: str, observer: int | None = None,
          secret: bytes = b"") -> None:
    """Judge every hidden test of ``spec`` in order from the observer's records on ``fd`` (``observer``: its pidfd);
    verdicts to ``out_fd``; the ``index``-th check on the data of :func:`data_seed`, as the observer's."""
    import labutils.checks as checks

    records = evidence.Judge(fd, observer)
    out = os.fdopen(out_fd, "wb", buffering=0)
    cache: dict = {}
    functions: dict[str, dict] = {}  # exercise id -> the stand-ins of its last fresh check (a cached report's key)
    index = 0
    for cell in spec.cells:
        for call in cell.checks if cell.grade_id is not None else ():
            call, index = tuple(call), index + 1
            started = time.monotonic()
            try:
                with world.seeded(data_seed(secret, index)):
                    verdict = _judge_one(records, call, checks, cache, functions)
            except evidence.ObserverStopped:
                verdict = failed(call[0], call[1], call[2], _stopped(call), "stopped")
            except EvidenceError as exc:
                verdict = not_judged(call, _unreadable(call, exc), "evidence")
            out.write(encode(CheckLine(grade_id=cell.grade_id, call=list(call), verdict=verdict,
                                       seconds=round(time.monotonic() - started, 3), nonce=nonce)))
    out.close()


def failed(notebook_id: str, function_name: str, property_id: str, message: str, cause: str) -> Verdict:
    """The verdict on the hidden test (notebook, function, property) that could not be judged as it should."""
    return verdict.failed(verifier.contract(notebook_id, function_name).id, property_id, message, cause)


def not_judged(call: tuple, message: str, cause: str) -> Verdict:
    """0 points, *not judged*: the grader could not judge the hidden test ``call`` (nothing shows the student's
    fault, nor a tampering)."""
    return dataclasses.replace(failed(*call, message, cause), judged=False)


def _judge_one(records: evidence.Judge, call: tuple, checks, cache: dict, functions: dict) -> Verdict:
    begin = records.message()
    if begin is None:
        raise evidence.ObserverStopped("before the test")
    if not isinstance(begin, CheckBegin) or begin.call != list(call):
        raise EvidenceError("the observer is not at this test")
    if begin.problem is not None:
        _end(records)
        return failed(*call, str(begin.problem), "signature")
    exercise = verifier.contract(call[0], call[1])
    if begin.fresh or exercise.id not in functions:
        functions[exercise.id] = {str(name): Observed(str(name), sig) for name, sig in begin.functions}
    with evidence.playing(records):
        judged = verifier.run_check(call, functions[exercise.id], checks, cache, guard=False)
    end, extra = _end(records)
    if end.tampered:
        return failed(*call, verifier.tampered_message(call[1], end.tampered), "tampered")
    if end.error and not judged.passed:  # as in the kernel, this exercise's later tests say it never returned
        from labutils.checks import properties

        fns, _ = verifier.find_functions(call[0], call[1], functions[exercise.id])
        properties.never_returned(exercise.id, tuple(fns), end.error.partition(":")[0], cache)
        return failed(*call, f"{call[1]} did not return in the grader's re-run of the notebook ({end.error}): fix "
                      "that first, then it is judged.", "stopped")
    if extra and judged.passed:  # a pass on part of the evidence is no pass; extra records alone prove no tampering
        return not_judged(call, _unreadable(call, "the re-run made calls its check here did not"), "evidence")
    return judged


def _end(records: evidence.Judge) -> tuple[CheckEnd, bool]:
    """The observer's end of the current check, and whether records the judge did not use came before it."""
    extra = False
    while True:
        try:
            item = records.message()
        except EvidenceError:
            extra = True
            continue
        if item is None:
            raise evidence.ObserverStopped("inside the check")
        if isinstance(item, CheckEnd):
            return item, extra
        extra = True


def _stopped(call: tuple) -> str:
    return (f"{verifier.describe(call)} stopped before it finished (the re-run of the notebook's cells, or of "
            f"{call[1]} itself, exited or crashed): no points for it. Run the notebook top to bottom.")


def _unreadable(call: tuple, why) -> str:
    """Evidence that does not fit its check: said as what was observed, never as tampering (a bug of the check or of
    its evidence looks the same; only the observer's own module snapshot is positive evidence: CheckEnd.tampered)."""
    return (f"could not check {verifier.describe(call)}: the evidence the grader's re-run of the notebook sent does "
            f"not fit its check ({why}), so it earns no points yet. If the notebook runs top to bottom without "
            "errors, tell your instructor: the check may be at fault.")
