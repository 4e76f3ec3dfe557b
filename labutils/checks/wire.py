"""The wire format of the observer's records: the value codec, and framing on a pipe.

A record (one of :data:`labutils.checks.records.RECORDS`) travels as :mod:`labutils.messages` makes every message
between processes travel, with this module's codec for what a field holds of the student's run: plain values,
tensors (raw bytes of an allowed dtype), devices, dtypes and trace events; anything else arrives as an
:class:`Opaque` that only says what it was. Nothing is unpickled, and what is read is bounded (:data:`MAX_MESSAGE`,
:data:`MAX_DEPTH`, :data:`MAX_NODES`). Each record is one length-framed message on a pipe (:func:`send`,
:func:`receive`).
"""

from __future__ import annotations

import json
import numbers
import os
import select
import struct
from pathlib import Path, PurePath

import torch

from .. import messages
from ..trace import Event
from .records import RECORDS, EvidenceError

MAX_MESSAGE = 256 * 2**20  # one record: the tiny checks' runs are a few MB
MAX_DEPTH = 40
MAX_NODES = 2_000_000
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool)}


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
