"""Observe in one process, judge in another: what a check saw of a student's run, as data that cannot run code.

Why: under the grader, a hidden test must not be judged in a process that runs student code, since such code can
read anything there (the check's state, the result channel) and write a verdict of its own. So the grader's recheck
(:mod:`autograder.hidden.recheck`) runs every check twice, in lockstep:

- the **observer**, where the notebook's cells ran, calls the student's function as usual; after each call
  (:func:`labutils.checks.calling.traced_call`) it sends what the call left behind: the traced events, the return value,
  the error, the state of every object it was handed (model, optimizer, scheduler, scaler, the check's callbacks)
  and the files in the check's scratch folders;
- the **judge**, a process no student code ever ran in, runs the very same check on the same seeded objects, but in
  place of each call it takes the observer's record, puts it into its own objects and folders, and goes on with its
  own analysis: PyTorch's reference gradients, the comparisons, the verdict.

A forger in the observer can only send records; the judge recomputes everything from them, so forged evidence must
be the evidence of a correct loop (a loop's numbers, step by step), not a "passed".

The protocol, observer -> judge, one framed message each, every one a declared dataclass: per hidden test a
:class:`CheckBegin`, then an :class:`AfterCall` per call of a student function (its :class:`CallRecord`, with
:class:`ErrorFacts` when it raised), then a :class:`CheckEnd`. They travel as :mod:`labutils.messages` makes every
message between processes travel (the grader's channel too: one codec) and come back as the same dataclasses, their
fields checked against their declared types. What a field holds of the student's run (a tensor, a returned value, an
object's state) is carried by this module's value codec: plain values, tensors (raw bytes of an allowed dtype),
devices, dtypes and trace events; anything else arrives as an :class:`Opaque` that only says what it was. Nothing is
unpickled.
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import select
import struct
from dataclasses import dataclass
from pathlib import Path, PurePath

import torch

from .. import messages
from ..trace import Event

MAX_MESSAGE = 256 * 2**20  # one record: the tiny checks' runs are a few MB
MAX_FOLDER = 64 * 2**20  # files a run may leave in a check's scratch folders
MAX_DEPTH = 40
MAX_NODES = 2_000_000
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool)}


class EvidenceError(Exception):
    """The observer's record cannot be read, or does not belong to the call the judge is at."""


class ObserverStopped(EvidenceError):
    """The observer exited (a cell or the student's function exited or crashed) before sending what the judge needs."""


class Opaque:
    """A value that is not plain data (a student's own object): the judge sees only its kind, never the object."""

    def __init__(self, kind: str, text: str, length: int | None = None):
        self.kind, self.text, self.length = kind, text, length

    def __repr__(self) -> str:
        return self.text

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError(f"object of type {self.kind} has no len()")
        return self.length


def opaque(kind: str, text: str, length: int | None = None) -> Opaque:
    """An Opaque whose ``type(...).__name__`` is the original type's, so messages name what the student returned."""
    name = kind if kind.isidentifier() and len(kind) <= 60 else "object"
    return type(name, (Opaque,), {})(name, text[:200], length)


# --- the records: what crosses from the observer to the judge ------------------------------------------------------


@dataclass
class ErrorFacts:
    """An exception a student's function raised, as the judge may know it: the facts a message needs, never the
    object (capped: :func:`labutils.quoting.capped`)."""

    type: str  # its class name
    line: int | None  # the line of the student's function it was raised at, counted from the ``def`` (1)
    source: str  # that line's code
    text: str  # the first line of its message


@dataclass
class CallRecord:
    """What one call of a student's function did: :class:`labutils.checks.calling.TracedCall` as data."""

    events: list  # the trace (labutils.trace.Event), tensors included
    result: object  # what it returned, as the value codec carries it (an Opaque for a student's own object)
    reference: str | None  # the lab function it handed its work to, if any
    crashed: bool  # the check's SimulatedCrash came out, as intended
    moves: list  # the devices (torch.device) its code moved tensors to
    error: ErrorFacts | None


@dataclass
class AfterCall:
    """Sent after each call: the call, and what it left in everything it was handed."""

    run: CallRecord
    args: list  # per positional argument, its state (:func:`state_of`; None: nothing a call can change)
    kwargs: dict  # the same per keyword argument (the check's callbacks)
    rng: dict  # the process's random streams (:func:`rng_state`)
    folders: list  # per scratch folder of the check, its files (:func:`folder_files`; None: over 64 MB)


@dataclass
class CheckBegin:
    """Sent before each hidden test's check: the student's functions as the judge stands them in, or why not."""

    call: list[str]  # the literal arguments of the test's verify(...) call: notebook, function, property
    problem: str | None  # why the functions cannot be checked (not defined, not callable): the test fails so
    fresh: bool  # the check runs now (False: a report of the same functions already judges it)
    functions: list  # per contract function, [name, its signature as [name, kind, has a default] per parameter]


@dataclass
class CheckEnd:
    """Sent after each hidden test's check, however it ended."""

    call: list[str]
    tampered: list[str]  # the guarded functions the check saw patched (the test fails)
    error: str | None  # what stopped the check (a sys.exit in the student's function, a cell's alarm)


RECORDS = {cls.__name__: cls for cls in (CheckBegin, AfterCall, CheckEnd)}


# --- the codec ------------------------------------------------------------------------------------------------------


class _Encoder:
    def __init__(self, refs: dict[int, list], paths: dict[str, str], constants: dict[int, str]):
        self.refs, self.paths, self.constants = refs, paths, constants
        self.buffers: list[bytes] = []
        self.nodes = 0

    def text(self, value: str) -> str:
        for real, token in self.paths.items():
            value = value.replace(real, token)
        return value

    def __call__(self, value, depth: int = 0):
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            return {"O": ["object", "a structure too deep or too large to look at", None]}
        if id(value) in self.constants:
            return {"C": self.constants[id(value)]}
        if value is None or type(value) in (bool, str, int, float):
            return self.text(value) if type(value) is str else value
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            return float(value)
        if isinstance(value, str):
            return self.text(str.__str__(value))
        if isinstance(value, (bytes, bytearray)):
            self.buffers.append(bytes(value))
            return {"b": len(self.buffers) - 1}
        if isinstance(value, PurePath):
            return {"p": self.text(os.fspath(value))}
        if isinstance(value, torch.dtype):
            return {"y": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"v": str(value)}
        if isinstance(value, Event):
            return {"E": [self(value.kind), self(value.step), self(value.info, depth + 1), self(value.data, depth + 1)]}
        if isinstance(value, (list, tuple)):  # MAX_NODES bounds how much of it is read
            items = [self(v, depth + 1) for v in list(value)]
            return {"t": items} if isinstance(value, tuple) else {"l": items}
        if isinstance(value, dict):
            return {"d": [[self(k, depth + 1), self(v, depth + 1)] for k, v in list(value.items())]}
        kind = type(value).__name__[:100]  # the judge names it "object" past 60 characters anyway
        try:
            length = len(value) if isinstance(value, (set, frozenset)) else None
        except Exception:
            length = None
        return {"O": [kind, f"a {kind}", length]}

    def tensor(self, t: torch.Tensor):
        ref = self.refs.get(id(t))
        if ref is not None:
            return {"P": ref}
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES or t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
            return {"O": ["Tensor", f"a tensor of shape {tuple(t.shape)} ({t.dtype}, {t.layout})", None]}
        data = t.detach().to("cpu").contiguous().reshape(-1)
        self.buffers.append(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
        return {"T": [len(self.buffers) - 1, name, list(t.shape), bool(t.requires_grad),
                      isinstance(t, torch.nn.Parameter)]}


class _Decoder:
    def __init__(self, buffers: list[bytes], refs: dict, paths: dict[str, str], constants: dict[str, object]):
        self.buffers, self.refs, self.paths, self.constants = buffers, refs, paths, constants

    def text(self, value: str) -> str:
        for token, real in self.paths.items():
            value = value.replace(token, real)
        return value

    def __call__(self, node):
        if node is None or type(node) in (bool, int, float):
            return node
        if type(node) is str:
            return self.text(node)
        if type(node) is not dict or len(node) != 1:
            raise EvidenceError(f"not a record: {type(node).__name__}")
        (tag, body), = node.items()
        if tag == "l":
            return [self(v) for v in body]
        if tag == "t":
            return tuple(self(v) for v in body)
        if tag == "d":
            out = {}
            for key, value in body:
                key = self(key)
                try:
                    out[key] = self(value)
                except TypeError:  # an unhashable key
                    raise EvidenceError("a dict key that is not plain data") from None
            return out
        if tag == "T":
            return self.tensor(*body)
        if tag == "b":
            return bytes(self.buffers[body])
        if tag == "P":
            if tuple(body) not in self.refs:
                raise EvidenceError(f"a parameter the judge's objects do not have: {body}")
            return self.refs[tuple(body)]
        if tag == "p":
            return Path(self.text(body))
        if tag == "y":
            if body not in DTYPES:
                raise EvidenceError(f"dtype {body!r}")
            return DTYPES[body]
        if tag == "v":
            return torch.device(str(body))
        if tag == "E":
            kind, step, info, data = (self(v) for v in body)
            if not (isinstance(kind, str) and isinstance(step, int) and isinstance(info, dict)
                    and isinstance(data, dict)):
                raise EvidenceError("a malformed trace event")
            return Event(kind, step, info, data)
        if tag == "C":
            if body not in self.constants:
                raise EvidenceError(f"constant {body!r}")
            return self.constants[body]
        if tag == "O":
            kind, text, length = body
            return opaque(str(kind), str(text), length if type(length) is int else None)
        raise EvidenceError(f"unknown tag {tag!r}")

    def tensor(self, index, dtype, shape, requires_grad, parameter):
        if dtype not in DTYPES or not all(type(n) is int and n >= 0 for n in shape) or type(index) is not int:
            raise EvidenceError("a malformed tensor")
        data = self.buffers[index]
        dtype = DTYPES[dtype]
        numel = 1
        for n in shape:
            numel *= n
        if numel * dtype.itemsize != len(data):
            raise EvidenceError(f"a tensor of shape {shape} with {len(data)} bytes")
        t = (torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape) if data
             else torch.empty(shape, dtype=dtype))
        if parameter:
            return torch.nn.Parameter(t, requires_grad=bool(requires_grad) and t.is_floating_point())
        return t.requires_grad_(bool(requires_grad) and t.is_floating_point())


def encode(value, refs=None, paths=None, constants=None) -> bytes:
    """``value`` (one of :data:`RECORDS`, or any value) as bytes: a JSON tree (tensors by reference to raw buffers)
    and the buffers."""
    encoder = _Encoder(refs or {}, paths or {}, {id(v): k for k, v in (constants or {}).items()})
    tree = messages.to_json(value, encoder) if type(value).__name__ in RECORDS else encoder(value)
    tree = json.dumps(tree, separators=(",", ":")).encode()
    head = struct.pack("<II", len(tree), len(encoder.buffers)) + b"".join(
        struct.pack("<Q", len(b)) for b in encoder.buffers)
    return head + tree + b"".join(encoder.buffers)


def decode(data: bytes, refs=None, paths=None, constants=None):
    """The value :func:`encode` wrote; :class:`EvidenceError` for anything else."""
    try:
        size, count = struct.unpack_from("<II", data)
        lengths = struct.unpack_from(f"<{count}Q", data, 8)
        start = 8 + 8 * count
        tree = json.loads(data[start: start + size])
        buffers, at = [], start + size
        for n in lengths:
            buffers.append(data[at: at + n])
            at += n
        if at != len(data):
            raise EvidenceError("trailing bytes")
    except (struct.error, ValueError, RecursionError) as exc:
        raise EvidenceError(f"unreadable record ({type(exc).__name__})") from None
    decoder = _Decoder(buffers, refs or {}, paths or {}, constants or {})
    try:
        if type(tree) is dict and set(tree) == {"type", "body"}:
            return messages.from_json(tree, RECORDS, decoder, checked=True)
        return decoder(tree)
    except (IndexError, KeyError, ValueError, TypeError, RecursionError, RuntimeError) as exc:
        raise EvidenceError(f"malformed record ({type(exc).__name__}: {exc})") from None


# --- framing on a pipe ----------------------------------------------------------------------------------------------


def send(fd: int, payload: bytes) -> None:
    data = struct.pack("<Q", len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def receive(fd: int, writer: int | None = None) -> bytes | None:
    """The next framed record, or None at the end of the stream: every writer closed it, or the process ``writer``
    (a pidfd) exited, whatever its children still hold open. A stream that ends inside a frame is an error."""
    head = _read_exactly(fd, 8, writer, started=False)
    if head is None:
        return None
    (size,) = struct.unpack("<Q", head)
    if size > MAX_MESSAGE:
        raise EvidenceError(f"a record of {size} bytes (at most {MAX_MESSAGE})")
    return _read_exactly(fd, size, writer, started=True)


def _read_exactly(fd: int, n: int, writer: int | None, started: bool) -> bytes | None:
    """``n`` bytes; at the end of the stream, None when no byte of the frame was read yet, else EvidenceError."""
    chunks, left = [], n
    while left:
        ready = [fd] if writer is None else select.select([fd, writer], [], [])[0]
        chunk = os.read(fd, min(left, 1 << 20)) if fd in ready else b""  # not ready: the writer exited, pipe empty
        if not chunk:
            if started or left != n:
                raise EvidenceError("the stream ended inside a record")
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- what a call left behind ------------------------------------------------------------------------------------------


def _stateful(value) -> str | None:
    if isinstance(value, torch.nn.Module):
        return "module"
    if isinstance(value, torch.optim.Optimizer):
        return "optimizer"
    if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
        return "scheduler"
    if isinstance(value, torch.amp.GradScaler):
        return "scaler"
    if getattr(value, "observed", None):
        return "callback"
    return None


def parameter_refs(args: tuple) -> dict[tuple, torch.Tensor]:
    """(argument position, name) -> each parameter and buffer of the modules among ``args``: a returned or logged
    parameter travels as which one it is, so identity checks (param_groups) hold in the judge."""
    refs = {}
    for pos, value in enumerate(args):
        if isinstance(value, torch.nn.Module):
            for name, t in list(value.named_parameters()) + list(value.named_buffers()):
                refs.setdefault((pos, name), t)
    return refs


def state_of(value):
    """What a call may have changed in an object it was handed, as plain data."""
    kind = _stateful(value)
    if kind == "module":
        return {"state": value.state_dict(), "training": {n: m.training for n, m in value.named_modules()},
                "requires_grad": {n: p.requires_grad for n, p in value.named_parameters()}}
    if kind in ("optimizer", "scheduler", "scaler"):
        return value.state_dict()
    if kind == "callback":
        return {name: getattr(value, name) for name in value.observed}
    return None


def restore_state(value, state) -> None:
    """Put the observer's record of ``value`` into the judge's own object."""
    kind = _stateful(value)
    if kind is None or state is None:
        return
    if kind == "module":
        value.load_state_dict(state["state"])
        for name, module in value.named_modules():
            module.training = bool(state["training"].get(name, module.training))
        for name, p in value.named_parameters():
            p.requires_grad_(bool(state["requires_grad"].get(name, p.requires_grad)))
    elif kind == "scheduler":
        own = value.state_dict()
        value.load_state_dict({k: v for k, v in state.items() if k in own})
    elif kind == "callback":
        for name in value.observed:
            setattr(value, name, state[name])
    else:
        value.load_state_dict(state)


def rng_state() -> dict:
    """The process's random streams (a load_checkpoint restores them; the check's next dropout mask reads them).
    Not :func:`labutils.checkpoint.capture_rng_state`: that checkpoint format refuses a cached ``random.gauss``
    value, which a student's code may leave and the judge must take over as it is."""
    import random

    import numpy as np

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, gauss]}


def set_rng_state(state: dict) -> None:
    import random

    import numpy as np

    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def folder_files(folder: Path) -> dict | None:
    """Relative path -> bytes of every regular file under ``folder`` (empty folders as None); None when too big."""
    files, total = {}, 0
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            continue
        if path.is_dir():
            files[rel] = None
        elif path.is_file():
            total += path.stat().st_size
            if total > MAX_FOLDER:
                return None
            files[rel] = path.read_bytes()
    return files


def make_folder_match(folder: Path, files: dict) -> None:
    """Make ``folder`` hold exactly ``files`` (as :func:`folder_files` listed them), and nothing outside it."""
    for rel in files:
        parts = PurePath(rel).parts
        if not parts or PurePath(rel).is_absolute() or ".." in parts:
            raise EvidenceError(f"a file outside the folder: {rel!r}")
    try:
        for path in sorted(folder.rglob("*"), reverse=True):
            if str(path.relative_to(folder)) not in files or path.is_symlink():
                path.unlink() if not path.is_dir() or path.is_symlink() else os.rmdir(path)
        for rel, data in sorted(files.items()):
            target = folder / rel
            if data is None:
                target.mkdir(parents=True, exist_ok=True)
            elif isinstance(data, (bytes, bytearray)):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            else:
                raise EvidenceError(f"file {rel!r} is not bytes")
    except OSError as exc:
        raise EvidenceError(f"the folder's files: {exc}") from None


# --- the two roles --------------------------------------------------------------------------------------------------


CONSTANTS: dict[str, object] = {}  # a check's sentinel objects by name (resumable's NO_LOSS): they travel as names


class Role:
    """What :func:`labutils.checks.calling.traced_call` does around a call under the grader's recheck; else None."""

    def __init__(self, fd: int):
        self.fd = fd
        self.folders: list[Path] = []  # the check's scratch folders alive now, in the order they were made

    def paths(self) -> dict[str, str]:
        """Folder paths and the tokens that stand for them in records (the two processes' folders differ)."""
        return {str(f): f"\x00folder{i}\x00" for i, f in enumerate(self.folders)}

    @contextlib.contextmanager
    def folder(self, path: Path):
        self.folders.append(path)
        try:
            yield path
        finally:
            self.folders.remove(path)


class Observer(Role):
    """In the process that runs student code: send a record of each call."""

    def after_call(self, run: CallRecord, args: tuple, kwargs: dict) -> None:
        record = AfterCall(run=run, args=[state_of(a) for a in args], rng=rng_state(),
                           kwargs={k: state_of(v) for k, v in kwargs.items()},
                           folders=[folder_files(f) for f in self.folders])
        send(self.fd, encode(record, {id(t): list(ref) for ref, t in parameter_refs(args).items()}, self.paths(),
                             CONSTANTS))

    def message(self, record: CheckBegin | CheckEnd) -> None:
        send(self.fd, encode(record))


class Judge(Role):
    """In the process that judges: take each call's record in place of the call. ``observer``: its pidfd, so that
    its end is seen even while a process it forked holds the pipe open."""

    def __init__(self, fd: int, observer: int | None = None):
        super().__init__(fd)
        self.observer = observer
        self.pending: bytes | None = None  # a message read ahead of its turn: the end of a check, kept for it

    def _next(self) -> bytes | None:
        data, self.pending = self.pending, None
        return data if data is not None else receive(self.fd, self.observer)

    def record(self, args: tuple, kwargs: dict) -> CallRecord:
        data = self._next()
        if data is None:
            raise ObserverStopped("the observer stopped before this call")
        try:
            return replay(data, args, kwargs, self.folders)
        except _CheckEnded:  # its check ended before this call: the end is for later
            self.pending = data
            raise EvidenceError("the observer's check ended before this call") from None


    def message(self) -> CheckBegin | CheckEnd | None:
        """The next begin or end of a check (None: the observer stopped); a call's record here is an error."""
        data = self._next()
        record = None if data is None else decode(data)
        if record is not None and not isinstance(record, (CheckBegin, CheckEnd)):
            raise EvidenceError("the observer sent something other than the begin or end of a check here")
        return record


class _CheckEnded(EvidenceError):
    """A check's end where a call's record was due."""


def replay(data: bytes, args: tuple, kwargs: dict, folders: list, match_folders: bool = True) -> CallRecord:
    """The call whose record ``data`` is (:meth:`Observer.after_call`'s, made in another process), put into this
    process's own ``args``, ``kwargs``, random streams and scratch ``folders`` (those a process forked from this
    one already shares: ``match_folders`` False); its :class:`CallRecord`."""
    tokens = {f"\x00folder{i}\x00": str(f) for i, f in enumerate(folders)}
    items = decode(data, parameter_refs(args), tokens, CONSTANTS)
    if isinstance(items, CheckEnd):
        raise _CheckEnded("a check's end")
    if not isinstance(items, AfterCall):
        raise EvidenceError("the observer sent something other than a call's record here")
    if len(items.args) != len(args) or set(items.kwargs) != set(kwargs) or len(items.folders) != len(folders):
        raise EvidenceError("the observer's call was not this one")
    for value, state in [*zip(args, items.args), *((kwargs[k], s) for k, s in items.kwargs.items())]:
        try:
            restore_state(value, state)
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as exc:
            raise EvidenceError(f"the state of a {type(value).__name__} after the call: {exc}") from None
    try:
        set_rng_state(items.rng)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as exc:
        raise EvidenceError(f"the random state after the call: {exc}") from None
    for folder, files in zip(folders, items.folders):
        if not isinstance(files, dict):
            raise EvidenceError("the run left more than 64 MB in its folder")
        if match_folders:
            make_folder_match(folder, files)
    return items.run


ROLE: Role | None = None


@contextlib.contextmanager
def playing(role: Role):
    """Calls made inside are observed (:class:`Observer`) or replayed (:class:`Judge`)."""
    global ROLE
    ROLE = role
    try:
        yield role
    finally:
        ROLE = None
