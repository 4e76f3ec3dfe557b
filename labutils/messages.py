"""Messages between processes: a dataclass, turned into JSON at the boundary and back into the same dataclass right
after (nested dataclasses included), so that no hop reads or writes a dict's keys.

One definition for both protocols: the grader's channel (``autograder/channel.py``: tasks, results, the zygote's
requests) and the recheck's observer -> judge records (``labutils/checks/records.py``), whose fields also hold
tensors and whatever a student's function returned: it passes its own codec for those as ``leaf``. It lives in
labutils because the checks' side of the recheck is here, and labutils never imports the grader.
"""

from __future__ import annotations

import dataclasses
import types
import typing


def _same(value):
    return value


def to_json(message, leaf=_same) -> dict:
    """``message`` (a dataclass) as ``{"type": its class name, "body": its fields}``; ``leaf`` encodes what is neither
    a dataclass, a list nor None (JSON's own values as they are, by default)."""
    return {"type": type(message).__name__, "body": _fields(type(message), message, leaf)}


def from_json(raw, messages: dict[str, type], leaf=_same, checked: bool = False):
    """The message :func:`to_json` made, rebuilt as one of ``messages`` (class name -> class). TypeError or KeyError
    when it is anything else: an unknown type, an unknown field, a missing one; ``checked``: also a value that is not
    of its field's declared type (for a writer that may lie: the recheck's observer)."""
    if not isinstance(raw, dict) or set(raw) != {"type", "body"}:
        raise TypeError("not a message: it needs a type and a body, and nothing else")
    message = _build(messages[raw["type"]], raw["body"], leaf)
    if checked and not _fits(type(message), message):
        raise TypeError(f"a {raw['type']} whose fields are not of their declared types")
    return message


def build(cls, data, leaf=_same):
    """``data`` (decoded JSON, no envelope) as the dataclass ``cls``: how a file written from a message's fields (the
    grader's journal) is read back into it."""
    return _build(cls, data, leaf)


def _fields(cls, value, leaf) -> dict:
    """A dataclass's fields as JSON, each as its declared type says."""
    if not isinstance(value, cls):
        raise TypeError(f"{type(value).__name__} where a {cls.__name__} is declared")
    hints = typing.get_type_hints(cls)
    return {f.name: _walk(hints[f.name], getattr(value, f.name), leaf, _fields) for f in dataclasses.fields(cls)}


def _build(cls, data, leaf):
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} needs an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
    return cls(**{name: _walk(hints[name], value, leaf, _build) for name, value in data.items()})


def _walk(hint, value, leaf, dataclass_step):
    """``value`` as ``hint`` says, both ways: optionals and lists looked through, a dataclass handed to
    ``dataclass_step`` (:func:`_fields` to write, :func:`_build` to read), anything else to ``leaf``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _walk(inner[0], value, leaf, dataclass_step) if len(inner) == 1 else leaf(value)
    if origin is list:
        (inner,) = typing.get_args(hint)
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"a list is declared, got {type(value).__name__}")
        return [_walk(inner, v, leaf, dataclass_step) for v in value]
    if dataclasses.is_dataclass(hint):
        return dataclass_step(hint, value, leaf)
    return leaf(value)


def _fits(hint, value) -> bool:
    """Is ``value`` of the declared type ``hint``? (``object`` and unparameterised containers: any content.)"""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(a, value) for a in typing.get_args(hint))
    if origin is list:
        (inner,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(inner, v) for v in value)
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return isinstance(value, hint) and all(_fits(hints[f.name], getattr(value, f.name))
                                               for f in dataclasses.fields(hint))
    if hint is object:
        return True
    if hint is type(None):
        return value is None
    return type(value) is (origin or hint)  # exactly: a bool is not an int here, a str subclass not a str
