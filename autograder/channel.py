"""Every message that crosses a process boundary in grading, and the one way they travel: one JSON line each.

The hops: grade -> pool -> worker (:class:`RunConfig` once, then :class:`Task`; back :class:`WorkerReady`, then one
:class:`Result` per task), worker -> zygote (:class:`KernelRequest`, :class:`RecheckRequest`, :class:`KillAll`,
:class:`Exit`; back :class:`KernelStarted`, :class:`RecheckReply`, :class:`Killed`, :class:`RequestFailed`; first
:class:`ZygoteReady`), worker -> recheck child (:class:`RecheckSpec`, in a file), recheck child -> zygote
(:class:`CheckLine`, one per hidden test).

A message is a dataclass; a graded test's verdict travels as :class:`labutils.verdict.Verdict` inside
:class:`CheckLine` and :class:`CellScore`. :func:`encode` turns a message into a line at the boundary and
:func:`decode` back into the same dataclass right after (nested dataclasses included), so no hop reads or writes
dict keys. The dataclass <-> JSON codec is :mod:`labutils.messages`, which the recheck's observer -> judge
records share (``labutils`` cannot import the grader). An executor other than the local pool (Dask) moves the same
:class:`Task` and :class:`Result` objects.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from labutils import messages
from labutils.verdict import Verdict


# --- grade -> pool -> worker -------------------------------------------------------------------------------------------


@dataclass
class ExtraFile:
    """A data file a student handed in beside the notebooks, copied next to the notebook when it runs."""

    name: str  # path relative to the student's folder
    path: str  # absolute path to read it from


@dataclass
class Task:
    """Grade one student's notebook."""

    id: str  # "<student>--<notebook>": unique in a run, names the task's scratch folder
    student: str
    notebook: str  # notebook id, e.g. "01_baseline"
    path: str  # the submitted .ipynb
    extra_files: list[ExtraFile] = field(default_factory=list)


@dataclass
class RunConfig:
    """What every task of a run shares; a worker gets it once, before its first task."""

    template_db: str  # the instructor's gradebook, copied into each task's course folder
    work_dir: str  # scratch space for the tasks' folders
    cell_timeout: int
    notebook_timeout: int
    memory_mb: int
    threads: int  # torch threads per kernel; 0: the executor sizes it (autograder.run.machine)
    data_dirs: list[str] = field(default_factory=list)  # readable by student code: FashionMNIST and its cache
    cache_dir: str = ""
    require_isolation: bool = False  # refuse to grade when a confinement layer cannot be applied here
    permissions: str = "not checked"  # closure.check's finding for this run's files: "" (verified) or why not
    task_memory_mb: int | None = None  # real memory of each task's cgroup (autograder.run.machine); None: memory_mb
    memory_short: bool = False  # that share is below what an honest notebook may need: an OOM kill is the machine's


@dataclass
class CellScore:
    """One graded cell of a notebook after autograding: nbgrader's bookkeeping and the cell's :class:`Verdict` (its
    points, whether it passed and why, as data; its ``message`` is what a student reads)."""

    name: str  # grade_id
    kind: str  # auto | manual (a written answer, graded by hand)
    auto_score: float | None
    needs_manual_grade: bool
    verdict: Verdict
    in_notebook: bool | None = None  # passed when the kernel ran it, before the recheck (None: a written answer)

    @property
    def points(self) -> float:
        return self.verdict.points

    @property
    def max_points(self) -> float:
        return self.verdict.max_points

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def message(self) -> str:
        return self.verdict.message


@dataclass
class Result:
    """One graded (student, notebook): scores, notes, timings; ``status`` graded | error."""

    id: str
    student: str
    notebook: str
    status: str = "graded"
    tests: list[CellScore] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why it could not be graded
    traceback: str | None = None
    feedback: str | None = None  # the HTML feedback file, where the task ran
    autograded: str | None = None  # the autograded notebook, where the task ran
    timings: dict[str, float] = field(default_factory=dict)  # seconds: kernel_s, recheck_s, autograde_s, ...

    @classmethod
    def failed(cls, task: Task, error: str, traceback: str | None = None) -> Result:
        return cls(id=task.id, student=task.student, notebook=task.notebook, status="error", error=error,
                   traceback=traceback)


@dataclass
class WorkerReady:
    zygote_s: float  # how long the worker waited for its zygote


# --- worker -> zygote --------------------------------------------------------------------------------------------------


@dataclass
class ZygoteReady:
    preloaded: list[str]
    seconds: float  # the imports and the data, once
    vm_mb: int  # address space after the imports: every kernel starts at least this big
    data_dirs: list[str]
    cache_dir: str
    isolation: dict[str, str] = field(default_factory=dict)  # layer -> "" (applied to every kernel) or why not


@dataclass
class Policy:
    """What a sandboxed process may touch. Paths that do not exist are skipped."""

    write_dirs: list[str] = field(default_factory=list)  # read, write, create, delete beneath
    read_dirs: list[str] = field(default_factory=list)  # read and execute beneath
    read_files: list[str] = field(default_factory=list)  # read single files (a package's allowed modules)
    list_dirs: list[str] = field(default_factory=list)  # may list (not read files beneath): a package folder
    write_files: list[str] = field(default_factory=list)  # e.g. /dev/null
    bind_ports: list[int] = field(default_factory=list)  # the kernel's ZMQ ports; every other bind/connect fails
    memory_mb: int | None = None  # address space (RLIMIT_AS)
    task_memory_mb: int | None = None  # real memory of the task's cgroup; None: memory_mb
    cpu_seconds: int | None = None
    file_size_mb: int | None = 1024
    scratch_mb: int = 1024  # the task's private tmpfs: /dev/shm, HOME, TMPDIR and the notebook folder's writes
    pids_max: int = 512  # processes and threads of the task (its cgroup)
    own_paths: list[str] = field(default_factory=list)  # the task's own folders and files: handed to its uid
    passable_below: str | None = None  # the run's work folder: without a mount namespace, the folders between it and
    # own_paths are opened for passing (isolation.open_ancestors)


@dataclass
class KernelRequest:
    """Fork an ipykernel in its own session, confined by ``policy``."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    policy: Policy
    log: str
    threads: int = 1


@dataclass
class KernelStarted:
    pid: int


@dataclass
class RecheckRequest:
    """Fork a recheck (:mod:`autograder.hidden.recheck`) of the cells in the spec file, confined by ``policy``."""

    spec: str
    cwd: str
    env: dict[str, str]
    policy: Policy
    log: str
    timeout: float
    threads: int = 1


@dataclass
class RecheckCell:
    """A code cell to run again (``source``), or a test cell whose hidden checks run in its place (``grade_id``)."""

    index: int
    source: str = ""
    run: bool = True  # False: it timed out or never ran in the kernel, so it is not run here either
    grade_id: str | None = None
    checks: list[list[str]] = field(default_factory=list)  # the literal arguments of each verify(...) call


@dataclass
class RecheckSpec:
    """The recheck's input, written to a file its sandbox may read."""

    cells: list[RecheckCell]
    cell_timeout: float


@dataclass
class CheckLine:
    """One hidden test's verdict, written by the recheck child; believed only with the zygote's nonce."""

    grade_id: str  # the test cell it answers
    call: list[str]
    verdict: Verdict  # as the judge made it (labutils.checks.properties.judge)
    seconds: float
    nonce: str = ""


@dataclass
class RecheckReply:
    status: str  # exited | timeout
    pid: int
    lines: list[CheckLine] = field(default_factory=list)  # the nonce checked and cleared
    oom_killed: bool = False  # the OOM killer stopped it at its task's memory limit


@dataclass
class KillAll:
    """Kill every process below the zygote (it is a subreaper: escaped daemons too)."""


@dataclass
class Killed:
    killed: int  # the processes below the zygote that were still running (not already dying) when killed


@dataclass
class Exit:
    pass


@dataclass
class RequestFailed:
    error: str


MESSAGES = {cls.__name__: cls for cls in (
    ExtraFile, Task, RunConfig, CellScore, Result, WorkerReady, ZygoteReady, KernelRequest, KernelStarted,
    RecheckRequest, RecheckCell, RecheckSpec, CheckLine, RecheckReply, KillAll, Killed, Exit, RequestFailed, Policy)}


class ChannelError(ValueError):
    """A line that is not a message of this channel."""


# --- the boundary ------------------------------------------------------------------------------------------------------


def encode(message, id: int | None = None) -> bytes:
    """One message as one JSON line; ``id`` ties a request and its reply (the zygote's channel)."""
    if type(message).__name__ not in MESSAGES:
        raise TypeError(f"{type(message).__name__} is not a channel message")
    envelope = messages.to_json(message)
    if id is not None:
        envelope["id"] = id
    return (json.dumps(envelope) + "\n").encode()


def decode(line: bytes | str, expect: type | tuple[type, ...] | None = None):
    """The message a line of :func:`encode` carries; :class:`ChannelError` when it is anything else (or not one of
    ``expect``)."""
    return decode_tagged(line, expect)[1]


def decode_tagged(line: bytes | str, expect: type | tuple[type, ...] | None = None) -> tuple[int | None, object]:
    """(the line's id or None, its message): :func:`decode` for a channel whose replies answer numbered requests."""
    try:
        raw = json.loads(line)
        tag = raw.pop("id", None) if isinstance(raw, dict) else None
        message = messages.from_json(raw, MESSAGES)
        if tag is not None and (not isinstance(tag, int) or isinstance(tag, bool)):
            raise TypeError(f"the id is {tag!r}, not a number")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ChannelError(f"not a channel message: {str(line)[:200]!r} ({type(exc).__name__}: {exc})") from None
    if expect is not None and not isinstance(message, expect):
        raise ChannelError(f"expected {expect}, got {type(message).__name__}")
    return tag, message


def send(stream, message, id: int | None = None) -> None:
    """Write one message to a binary file-like ``stream`` and flush it."""
    stream.write(encode(message, id))
    stream.flush()


def receive(stream, expect=None):
    """The next message on a binary file-like ``stream``; EOFError when it is closed."""
    line = stream.readline()
    if not line:
        raise EOFError("the channel closed")
    return decode(line, expect)


class LineReader:
    """Messages from a pipe read without blocking (the pool watches several at once)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buffer = b""

    def read(self) -> list | None:
        """The complete messages available now; None when the other end has closed."""
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [decode(line) for line in lines if line.strip()]
