"""Which device a run trains on: chosen once, at the start, and handed down to everything that moves tensors.

``device="auto"`` (LabConfig's default) takes a CUDA GPU when torch sees one, else Apple's MPS, else the CPU.
``LAB_DEVICE`` (cpu, cuda, cuda:1, mps) replaces ``auto`` without editing a notebook; a device written in the config
itself (``python -m labutils train --device cpu``) wins over it, as a command line wins over the environment.

Asking for a device this machine lacks is a mistake the student can fix in one line, so it is said in one line
(:class:`DeviceError`), never a traceback and never a silent fall back to the CPU: a run that quietly trains on the
CPU while the student believes it is on the GPU is worse than one that stops.

Also here: what a GPU needs from the rest of the lab (pinned host memory for its batches, waiting for its queue
before reading a clock, deterministic kernels for lab 7's bit-exact resume).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

DEVICE_ENV = "LAB_DEVICE"
AUTO = "auto"
KNOWN = ("cpu", "cuda", "mps")  # the device types the lab trains on


class DeviceError(ValueError):
    """A device the machine does not have, or a name that is not a device: one line saying what to do instead.

    ``_render_traceback_`` is IPython's hook for an exception's own display: a notebook shows this one line, not a
    traceback through labutils that a student would read as a bug in the lab."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


@dataclass(frozen=True)
class Choice:
    """The device a run uses and why (what the first cell of every notebook prints)."""

    device: torch.device
    reason: str


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def _cuda_name(index: int) -> str:
    try:
        return torch.cuda.get_device_name(index)
    except Exception:  # a faked or half-working device: the name is only decoration
        return "a CUDA GPU"


def _parse(spec: str, origin: str) -> torch.device:
    """``spec`` as a torch.device of a type the lab knows, or one line saying what to write instead."""
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in KNOWN:
        raise DeviceError(f"{origin}={spec!r} is not a device the lab trains on: use auto, cpu, cuda, cuda:1 or mps")
    return device


def _check_present(device: torch.device, origin: str) -> None:
    """Raise :class:`DeviceError` when ``device`` is not on this machine: no silent CPU fall back."""
    fix = f"unset {DEVICE_ENV} (auto picks what is there) or set {DEVICE_ENV}=cpu"
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = "this torch was built without CUDA" if torch.version.cuda is None else "torch sees no CUDA GPU"
            raise DeviceError(f"{origin}={str(device)!r} asks for a CUDA GPU, but {why}: {fix}")
        if device.index is not None and device.index >= count:
            raise DeviceError(f"{origin}={str(device)!r} asks for GPU {device.index}, but torch sees {count} "
                              f"(cuda:0 to cuda:{count - 1}): {fix}")
    if device.type == "mps" and not _mps_available():
        raise DeviceError(f"{origin}={str(device)!r} asks for Apple's MPS, which this machine or torch does not "
                          f"have: {fix}")


def _detect() -> Choice:
    """``auto``: CUDA, else MPS, else CPU, with the reason the notebook prints."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return Choice(torch.device("cuda"), f"auto: CUDA found ({_cuda_name(0)})")
    if _mps_available():
        return Choice(torch.device("mps"), "auto: no CUDA GPU, Apple MPS found")
    return Choice(torch.device("cpu"), "auto: no CUDA GPU or Apple MPS on this machine")


def choose(requested="auto") -> Choice:
    """The device for a config's ``device`` (``auto``, a string or a torch.device) and why; ``LAB_DEVICE`` replaces
    ``auto``. Raises :class:`DeviceError` for a device this machine lacks."""
    if isinstance(requested, torch.device):
        requested = str(requested)
    spec, origin = requested.strip().lower(), "device"
    if spec == AUTO:
        env = os.environ.get(DEVICE_ENV, "").strip().lower()
        if not env or env == AUTO:
            return _detect()
        spec, origin = env, DEVICE_ENV
    device = _parse(spec, origin)
    _check_present(device, origin)
    return Choice(device, f"{origin}={spec}" + (" (asked for)" if origin == "device" else ""))


def resolve(requested="auto") -> torch.device:
    """Just the device of :func:`choose`."""
    return choose(requested).device


def pin_memory(device) -> bool:
    """Page-locked host batches only help a CUDA device: they let ``.to(device, non_blocking=True)`` copy while the
    GPU still computes the previous step. On a CPU or MPS they only cost memory."""
    return torch.device(device).type == "cuda"


def synchronize(device) -> None:
    """Wait until the device has finished the work queued so far. GPU calls return before the GPU is done, so a
    clock read without this measures the queueing, not the work; on a CPU it does nothing."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def deterministic() -> None:
    """Deterministic kernels, so that two runs of the same steps end bit-identical (lab 7's resume).

    On a CPU the lab's kernels already are. On CUDA, cuDNN may pick a different convolution algorithm per run and
    some backward kernels add with atomics in whatever order the threads finish; cuBLAS needs a fixed workspace
    (``CUBLAS_WORKSPACE_CONFIG``, read when its handle is made, so set before the first matrix product).
    ``warn_only``: an operation without a deterministic kernel warns instead of stopping the lab, and the notebook
    then measures the difference instead of claiming none."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
