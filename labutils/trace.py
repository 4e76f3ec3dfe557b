"""Record what a training loop does, in order, without changing a single number it computes.

The checks in :mod:`labutils.checks` need to know what happened inside a student's loop: when the gradients were
cleared, which batch each forward saw and in which mode, when backward added to ``.grad``, what the gradients were at
the moment of ``optimizer.step()``. Reading the source would reject correct loops written differently, so instead a
:class:`Tracer` watches the objects the loop is handed:

- only hooks and per-object wrappers (a forward pre-hook, tensor hooks on the parameters, optimizer step hooks, and
  ``model.train`` / ``zero_grad`` / ``scheduler.step`` / scaler methods routed through a one-off subclass of that one
  object), so how the student imported or spelled anything does not matter;
- clearing is observed on the gradients themselves (a parameter hook sees ``.grad`` just before backward adds to it),
  so ``optimizer.zero_grad()``, ``model.zero_grad()``, ``set_to_none=False`` and ``p.grad = None`` all count;
- clipping is seen inside ``torch.nn.utils.clip_grad``, the module that ``clip_grad_norm_`` looks its helpers up in at
  call time, so ``torch.nn.utils.clip_grad_norm_``, ``nn.utils.clip_grad_norm_`` and ``from torch.nn.utils import
  clip_grad_norm_`` look the same;
- each backward keeps what it added to ``.grad`` (the gradient before and after it), so a check can judge the gradient
  of every micro-batch on its own, whatever was left in ``.grad`` before; a ``torch.autograd.grad`` call is seen by the
  same parameter hooks, and adds nothing to ``.grad`` (the loop assigns it);
- the gradient a step uses is read from ``.grad`` itself at the first thing that uses it after the last backward
  (``unscale_``, clipping, the step), so ``.grad`` assigned, divided by the window or summed by hand counts as it is;
- ``optimizer.step(closure)`` is recorded after its closure ran (its forward and backward belong to that step);
- ``devices=True`` records the devices the loop's own code moves tensors to (``Tensor.to``, seen from outside torch
  and labutils; ``Tensor.cpu`` / ``Tensor.cuda`` on the batches of a loader passed through :func:`mark_batches`), so a
  loop that ignores its ``device`` argument shows even on a machine with only a CPU;
- the hooks only read and copy, and everything is put back on exit: parameters come out bit-identical.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.utils.clip_grad as clip_grad_module

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}

# What a tensor is, read through the C type's own descriptors: a student who patches torch.is_grad_enabled,
# torch.is_autocast_enabled or torch.Tensor.requires_grad for the length of a call changes nothing read here
# (a built-in type's attributes cannot be replaced).
_TENSOR = torch._C.TensorBase.__dict__
_REQUIRES_GRAD, _DTYPE, _IS_INFERENCE = _TENSOR["requires_grad"], _TENSOR["dtype"], _TENSOR["is_inference"]
_REDUCED = (torch.bfloat16, torch.float16)


def _tensor_facts(t) -> tuple[bool, bool, torch.dtype]:
    """(requires grad, is an inference tensor, dtype) of ``t``, as the tensor itself holds them."""
    return bool(_REQUIRES_GRAD.__get__(t)), bool(_IS_INFERENCE(t)), _DTYPE.__get__(t)


def _own(module) -> dict:
    return object.__getattribute__(module, "__dict__")


def modes(model) -> bool | None:
    """True when every module of ``model`` is in train mode, False when every one is in eval mode, None when they
    differ: each module's own ``training`` as ``Module.train()`` set it (the top module's flag alone, set by hand,
    leaves Dropout and BatchNorm as they were), walked through ``_modules`` itself."""
    seen, stack = set(), [model]
    while stack:
        state = _own(stack.pop())
        seen.add(bool(state.get("training", True)))
        stack += [m for m in state.get("_modules", {}).values() if m is not None]
    return seen.pop() if len(seen) == 1 else None


def mode_words(training) -> str:
    return {True: "train mode", False: "eval mode"}.get(training, "mixed modes")


def _fingerprint(code) -> tuple:
    """What a code object computes, whatever its name, file or line: a copy made with ``code.replace(co_name=...)``
    or pasted from the same source has the same instructions and names."""
    return code.co_code, code.co_names


def _stub_code(name: str, freevars: tuple) -> types.CodeType:
    """Code that raises ``ReferenceCalled(name)`` whatever it is called with, with the free variables ``freevars`` (a
    function's ``__code__`` is replaced only by code with as many): every alias of the function runs it."""
    lines = ["def _outer():", *(f"    {v} = None" for v in freevars), "    def _stub(*args, **kwargs):",
             *([f"        ({', '.join(freevars)},)"] if freevars else []),
             f"        raise __import__('labutils.trace', fromlist=['x']).ReferenceCalled({name!r})", "    return _stub"]
    namespace: dict = {}
    exec(compile("\n".join(lines), "<forbidden>", "exec"), namespace)  # noqa: S102 (our own text)
    return namespace["_outer"]().__code__


class TooManyEvents(BaseException):
    """Raised when a traced run goes on far longer than its data allows (a loop that never ends); a BaseException so
    that a student's ``except Exception`` cannot swallow it."""


class ReferenceCalled(BaseException):
    """Raised when graded code calls the lab's reference implementation. A BaseException, so that a student's
    ``except Exception`` cannot swallow it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass
class Event:
    """One thing the loop did. ``info`` holds small plain values shown to students; ``data`` holds the tensors the
    checks need (the forward's input, the gradients and parameters at step time)."""

    kind: str
    step: int  # optimizer steps completed before this event
    info: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict, repr=False)

    def describe(self) -> str:
        i, kind = self.info, self.kind
        if kind == "mode":
            return "model.train()" if i["training"] else "model.eval()"
        if kind == "zero_grad":
            return f"{i['by']}()" + ("" if i["set_to_none"] else "  (set_to_none=False)")
        if kind == "forward":
            where = f"batch {i['batch']}" if "batch" in i else f"{i['n']} samples"
            kept = f", {i['graphs']} earlier graphs still alive" if i.get("graphs", 0) > 1 else ""
            grad = "grad on" if i["grad"] else ("inference_mode" if i["inference"] else "no_grad")
            amp = f", autocast {_DTYPE_NAMES.get(i['autocast'], i['autocast'])}" if i["autocast"] else ""
            return f"forward {where}  ({mode_words(i['training'])}, {grad}{amp}{kept})"
        if kind == "backward" and not i.get("into_grad", True):
            return "gradients computed (torch.autograd.grad: .grad left to the loop)"
        if kind == "backward":
            return "loss.backward()  " + ("(.grad was empty)" if i["fresh"] else "(added to .grad already there)")
        if kind == "scale":
            return f"scaler.scale(loss)  (scale {i['scale']:g})"
        if kind == "unscale":
            return "scaler.unscale_(optimizer)" + ("  by scaler.step" if i["inside_step"] else "")
        if kind == "clip":
            after = f" -> {i['norm_after']:.4g}" if "norm_after" in i else ""
            return f"clip_grad_norm_  norm {i['norm_before']:.4g}{after}  (max_norm {i['max_norm']:g})"
        if kind == "step" and i.get("noop"):
            return "optimizer.step()  (no parameter had a gradient yet: it changed nothing, and is not counted)"
        if kind == "step" and i.get("skipped"):
            return f"optimizer.step() #{i['number']} skipped by scaler.step  (inf/nan gradients)"
        if kind == "step":
            inside = "  via scaler.step" if i["via_scaler"] else ""
            return f"optimizer.step() #{i['number']}  (lr {i['lr'][0]:.4g}, grad norm {i['grad_norm']:.4g}){inside}"
        if kind == "scheduler":
            return f"scheduler.step()  (lr {i['lr_before'][0]:.4g} -> {i.get('lr_after', ['?'])[0]:.4g})"
        if kind in ("scaler_step", "scaler_update"):
            return {"scaler_step": "scaler.step(optimizer)", "scaler_update": "scaler.update()"}[kind]
        if kind == "save":
            return f"torch.save(..., {_short(i['target'])})"
        if kind == "load":
            return f"torch.load({_short(i['target'])})"
        if kind == "replace":
            return f"{i['fn']}({_short(i['src'])}, {_short(i['dst'])})"
        if kind == "reference":
            return f"called {i['name']}  (the lab's reference implementation)"
        return f"{kind} {i}"


def _short(target) -> str:
    return "<open file>" if target is None else Path(target).name


def global_norm(grads) -> float:
    """The L2 norm of all gradients taken together, as ``clip_grad_norm_`` computes it (None entries skipped)."""
    norms = [torch.linalg.vector_norm(g.detach().float()) for g in grads if g is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def file_digest(path) -> str | None:
    """The SHA-256 of a file's bytes (None: no such file)."""
    import hashlib

    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def format_events(events: list[Event], start: int = 0, stop: int | None = None) -> list[str]:
    """Numbered one-line descriptions (numbers are positions in the whole trace, from 1)."""
    stop = len(events) if stop is None else stop
    return [f"{n + 1:3d}. {events[n].describe()}" for n in range(start, stop)]


OWN_CODE = tuple(str(Path(m).parent) + os.sep for m in (torch.__file__, __file__))  # torch/, labutils/


def _called_by_the_loop() -> bool:
    """Whether the caller of the wrapper that calls this is the loop's own code (not torch's, not the lab's)."""
    return not sys._getframe(2).f_code.co_filename.startswith(OWN_CODE)


BATCH_MARK = "_looplab_batch"  # set on every tensor a loader passed through mark_batches yields


def mark_batches(loader):
    """Mark every tensor ``loader`` yields, so a Tracer with ``devices=True`` sees the loop moving a batch with
    ``.cpu()`` / ``.cuda()`` (its device argument ignored) and tells it from the ``.cpu()`` of an output it collects.
    Returns ``loader`` (a DataLoader: its ``collate_fn`` is wrapped)."""
    collate = loader.collate_fn

    def collate_marked(items):
        batch = collate(items)
        for tensor in batch if isinstance(batch, (tuple, list)) else (batch,):
            if isinstance(tensor, torch.Tensor):
                setattr(tensor, BATCH_MARK, True)
        return batch

    loader.collate_fn = collate_marked
    return loader


_ACTIVE: list = []  # the tracers recording now, innermost last
_RENAMES: list = []  # the tracers recording files now, innermost last: the audit hook hands each rename to it
_AUDITING: list = []  # [True] once the audit hook is installed (an audit hook stays for the process's life)


def current() -> "Tracer | None":
    """The innermost tracer recording now: what a stand-in a check lends the loop (lab 8's accelerator) marks the
    loop's events through."""
    return _ACTIVE[-1] if _ACTIVE else None


def _on_audit(event: str, args: tuple) -> None:
    """``sys.audit``'s hook: a rename the tracer's own wrappers did not see (``from os import replace`` bound before
    the wrapper, ``Path.rename``...) still reaches the innermost tracer recording files. Costs a string comparison."""
    if event == "os.rename" and _RENAMES:
        _RENAMES[-1]._audited_rename(*args[:2])


class _Graph:
    """Put in a training forward's output's autograd node (``grad_fn.metadata``): alive while anything still holds
    that forward's graph (a loss tensor kept in a sum or a list), gone once the graph is freed."""


def _layers(model) -> list:
    """The modules of ``model`` that hold a weight matrix or kernel of their own (conv, linear: the layers autocast
    runs in its reduced dtype; norm layers stay in float32 under it)."""
    found, stack = [], [model]
    while stack:
        module = stack.pop()
        state = _own(module)
        if any(p is not None and p.ndim >= 2 for p in state.get("_parameters", {}).values()):
            found.append(module)
        stack += [m for m in state.get("_modules", {}).values() if m is not None]
    return found


class Tracer:
    """Context manager that records an ordered list of :class:`Event` while a loop runs on the objects given.

    Any of ``model``, ``optimizer``, ``scheduler``, ``scaler`` may be None. ``files=True`` also records
    ``torch.save`` / ``torch.load`` / ``os.replace`` / ``os.rename`` (these are module functions, so they are patched
    for the duration; a rename through a name bound before, ``from os import replace``, is seen by an audit hook),
    and after each of them whether the paths in ``watch`` exist. ``forbidden`` names functions
    as ``"module:attr"``: calling one, by any reference, raises :class:`ReferenceCalled`. ``max_events`` stops a
    run that never ends with :class:`TooManyEvents`. ``outputs=True`` keeps each forward's output (``data["out"]``);
    ``devices=True`` records in :attr:`moves` every device the loop's code moved a tensor to. Each forward counts the
    earlier forwards whose graph is still alive (``info["graphs"]``): a loop that keeps its loss tensors keeps them all.
    """

    def __init__(self, model=None, optimizer=None, scheduler=None, scaler=None, *, files: bool = False,
                 watch=(), forbidden=(), max_events: int | None = None, outputs: bool = False, devices: bool = False):
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.params = [p for p in model.parameters() if p.requires_grad] if model is not None else []
        self.files, self.watch, self.forbidden = files, [Path(w) for w in watch], tuple(forbidden)
        self.max_events, self.outputs, self.devices = max_events, outputs, devices
        self.events: list[Event] = []
        self.moves: list[torch.device] = []  # devices the loop's own code moved tensors to, in order
        self.steps = 0  # optimizer steps completed
        self._undo: list = []
        self._backward: Event | None = None  # the backward pass being recorded, if any
        self._seen: set[int] = set()  # parameters that already got their gradient in that pass
        self._raw: dict[int, torch.Tensor] = {}  # each parameter's .grad as the loop left it for its next step
        self._unread = False  # gradients were computed since _raw was last read
        self._in_scaler_step = False
        self._codes: dict = {}  # code object -> name of a forbidden function
        self._prints: dict = {}  # _fingerprint of its code -> its name
        self._forward: Event | None = None  # the forward being recorded (its layers' outputs say how it ran)
        self._layers: list = []  # (requires grad, inference, autocast dtype) of each of its layers' outputs
        self._graphs: list = []  # a weak reference per training forward's graph (_Graph)
        self._renaming = False  # inside the os.replace / os.rename wrapper, which records the rename itself
        self._pending: Event | None = None  # a rename seen by the audit hook, whose "exists" is read at the next event

    # --- recording ---------------------------------------------------------------------------------------------------

    def record(self, kind: str, info: dict | None = None, data: dict | None = None) -> Event:
        self._backward = None  # any other event ends the backward pass being recorded
        self._settle()
        if self.max_events is not None and len(self.events) >= self.max_events:
            raise TooManyEvents(f"the check stopped it after {self.max_events} events, far more than its data needs: "
                                "does the loop ever end?")
        event = Event(kind, self.steps, info or {}, data or {})
        self.events.append(event)
        return event

    def _check_forbidden(self) -> None:
        """Walk up the stack: is the lab's reference implementation doing this work (however it was imported, or its
        code object copied under another name)?"""
        if not self._codes:
            return
        frame = sys._getframe(2)
        while frame is not None:
            name = self._codes.get(frame.f_code) or self._prints.get(_fingerprint(frame.f_code))
            if name is not None:
                self.record("reference", {"name": name})
                raise ReferenceCalled(name)
            frame = frame.f_back

    # --- model -------------------------------------------------------------------------------------------------------

    def _on_forward(self, module, args):
        """A forward begins: its mode is every module's own (:func:`modes`); whether autograd, inference mode and
        autocast were on is read from what its layers' outputs are (:meth:`_on_layer`), never from a query."""
        self._check_forbidden()
        x = args[0] if args else None
        self._forward = self.record("forward", {"training": modes(module), "grad": None, "inference": None,
                                                "autocast": None, "n": len(x) if isinstance(x, torch.Tensor) and
                                                x.ndim else 0,
                                                "graphs": sum(ref() is not None for ref in self._graphs)}, {"x": x})
        self._layers = []

    def _on_layer(self, module, args, output) -> None:
        """A layer with parameters (conv, linear) of the forward being recorded produced ``output``: under autograd
        it requires grad, under inference_mode it is an inference tensor, under autocast its dtype is the reduced
        one while the layer's weights stay float32 (a model cast to bfloat16 is not autocast)."""
        if self._forward is None or not isinstance(output, torch.Tensor):
            return
        weights = [p for p in _own(module).get("_parameters", {}).values() if p is not None]
        grad, inference, dtype = _tensor_facts(output)
        cast = dtype in _REDUCED and all(_DTYPE.__get__(w) == torch.float32 for w in weights)
        self._layers.append((grad, inference, dtype if cast else None))
        info = self._forward.info
        info["grad"] = any(g for g, _, _ in self._layers)
        info["inference"] = all(i for _, i, _ in self._layers)
        casts = {c for _, _, c in self._layers}
        info["autocast"] = casts.pop() if len(casts) == 1 else None

    def _after_forward(self, module, args, output):
        forward, self._forward = self._forward, None
        if forward is not None and not self._layers and isinstance(output, torch.Tensor):
            grad, inference, _ = _tensor_facts(output)  # a model without parameters: its output is all there is
            forward.info.update(grad=grad, inference=inference)
        forwards = [e for e in self.events[-1:] if e.kind == "forward"]
        if forwards and isinstance(output, torch.Tensor):
            if self.outputs:
                forwards[0].data["out"] = output.detach().clone()
            if output.grad_fn is not None:  # how many earlier graphs are still alive, the next forward counts
                graph = _Graph()
                output.grad_fn.metadata["looplab_graph"] = graph
                self._graphs.append(weakref.ref(graph))

    def _on_grad(self, index: int, grad):
        """Runs when backward (or torch.autograd.grad) has computed this parameter's gradient, before any is added
        to ``.grad``."""
        if self._backward is None or index in self._seen:
            self._backward = self.record("backward", {"fresh": True, "into_grad": False})
            self._seen = set()
        backward = self._backward
        self._seen.add(index)
        self._unread = True
        current = self.params[index].grad
        if current is not None and bool(current.any()):
            backward.data.setdefault("before", {})[index] = current.detach().clone()

    def _after_accumulate(self, index: int, param) -> None:
        """Runs when backward added this parameter's gradient to ``.grad`` (never for torch.autograd.grad)."""
        if self._backward is not None:
            backward = self._backward
            backward.info["into_grad"] = True
            if index in backward.data.get("before", {}):
                backward.info["fresh"] = False  # something was left in .grad: this backward accumulated onto it
            backward.data.setdefault("after", {})[index] = param.grad.detach().clone()

    def _read_grads(self) -> None:
        """The gradients the loop left for its step, read at the first thing that uses them after they were computed
        (unscale_, clipping, the step), before any of these changes them."""
        if self._unread:
            self._raw = {i: p.grad.detach().clone() for i, p in enumerate(self.params) if p.grad is not None}
            self._unread = False

    # --- optimizer ---------------------------------------------------------------------------------------------------

    def _before_step(self, optimizer, args, kwargs):
        self._check_forbidden()
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # args: (optimizer, closure?)
        if closure is None:
            self._record_step(optimizer, skipped=False)
            return None
        recorded = []

        def traced_closure(*c_args, **c_kwargs):  # step(closure): the step uses what the closure computed
            out = closure(*c_args, **c_kwargs)
            if not recorded:
                recorded.append(self._record_step(optimizer, skipped=False))
            return out

        if "closure" in kwargs:
            return args, {**kwargs, "closure": traced_closure}
        return (args[0], traced_closure, *args[2:]), kwargs

    def _record_step(self, optimizer, skipped: bool) -> Event:
        """An optimizer step with what it was about to apply; ``skipped``: scaler.step found inf/nan gradients and
        did not call optimizer.step(), which the checks still count as the loop's step (its window, its norm)."""
        self._read_grads()
        grads = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        return self.record("step", {"number": self.steps + 1, "lr": [g["lr"] for g in optimizer.param_groups],
                             "via_scaler": self._in_scaler_step or skipped, "grad_norm": global_norm(grads),
                             "skipped": skipped},
                    {"grads": grads, "params": [p.detach().clone() for p in self.params], "raw": dict(self._raw)})

    def _after_step(self, optimizer, args, kwargs):
        self.steps += 1

    # --- methods routed through the tracer: (original bound method, *args) -> result -------------------------------

    def _train(self, original, mode=True):  # model.eval() calls self.train(False), so this sees both
        self.record("mode", {"training": bool(mode)})
        return original(mode)

    def _zero_grad(self, who: str):
        def zero_grad(original, *args, **kwargs):
            set_to_none = kwargs.get("set_to_none", args[0] if args else True)
            self.record("zero_grad", {"by": who, "set_to_none": bool(set_to_none)})
            return original(*args, **kwargs)

        return zero_grad

    def _scheduler_step(self, original, *args, **kwargs):
        def lrs():
            return [g["lr"] for g in self.scheduler.optimizer.param_groups]

        event = self.record("scheduler", {"lr_before": lrs()})
        out = original(*args, **kwargs)
        event.info["lr_after"] = lrs()
        return out

    def _scale(self, original, outputs):
        """The scale the scaler multiplies by, read from its own tensor (a get_scale() of the student's answers
        nothing here)."""
        held = _own(self.scaler).get("_scale")
        scale = _own(self.scaler).get("_init_scale", 1.0) if held is None else _TENSOR["item"](held)
        self.record("scale", {"scale": float(scale)})
        return original(outputs)

    def _unscale(self, original, optimizer):
        self._read_grads()
        self.record("unscale", {"inside_step": self._in_scaler_step})
        return original(optimizer)

    def _scaler_step(self, original, optimizer, *args, **kwargs):
        self.record("scaler_step")
        self._in_scaler_step, before = True, self.steps  # the optimizer.step() it makes is marked as via the scaler
        try:
            out = original(optimizer, *args, **kwargs)
        finally:
            self._in_scaler_step = False
        if self.steps == before and optimizer is self.optimizer:
            self._record_step(optimizer, skipped=True)
            self.steps += 1  # numbered as the loop's step, so the trace and the checks' messages agree
        return out

    def _scaler_update(self, original, *args, **kwargs):
        self.record("scaler_update")
        return original(*args, **kwargs)

    # --- module functions: clipping, files, devices -------------------------------------------------------------------

    def _to(self, original):
        def to(tensor, *args, **kwargs):
            if _called_by_the_loop():  # torch's and the lab's own .to() calls are not the loop's choice
                try:
                    device = torch._C._nn._parse_to(*args, **kwargs)[0]
                except (TypeError, RuntimeError):
                    device = None
                if device is not None:
                    self.moves.append(device)
            return original(tensor, *args, **kwargs)

        return to

    def _batch_move(self, original, kind: str):
        """``Tensor.cpu`` / ``Tensor.cuda``: a move the loop chose only when it is a loader's batch (``x.cpu()`` ignores
        the device it was given); ``logits.argmax(1).cpu()`` to collect an output is not a move to a device."""

        def move(tensor, *args, **kwargs):
            if getattr(tensor, BATCH_MARK, False) and _called_by_the_loop():
                index = args[0] if args else kwargs.get("device")
                self.moves.append(torch.device(kind) if index is None else
                                  torch.device(kind, index) if isinstance(index, int) else torch.device(index))
            return original(tensor, *args, **kwargs)

        return move

    def _clip_with_norm(self, original):
        def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            self._read_grads()
            event = self.record("clip", {"norm_before": float(total_norm), "max_norm": float(max_norm)})
            out = original(params, max_norm, total_norm, foreach)
            event.info["norm_after"] = global_norm([p.grad for p in params])
            return out

        return clip_grads_with_norm_

    def _exists(self) -> dict:
        return {str(path): path.exists() for path in self.watch}

    def _settle(self) -> None:
        """What the watched paths look like after a rename the audit hook saw (it runs before the rename does)."""
        if self._pending is not None:
            self._pending.info["exists"] = self._exists()
            self._digest(self._pending)
            self._pending = None

    def _digest(self, event: Event) -> None:
        """A rename onto a watched path: what it put there, to compare with what stays there."""
        if any(Path(event.info["dst"]).resolve() == w.resolve() for w in self.watch):
            event.info["digest"] = file_digest(event.info["dst"])

    def _audited_rename(self, src, dst) -> None:
        if self._renaming:
            return
        try:
            info = {"fn": "a rename", "src": os.fsdecode(src), "dst": os.fsdecode(dst)}
        except TypeError:  # a descriptor, not a path
            return
        self._pending = self.record("replace", info)

    def _file_op(self, original, kind: str, fn_name: str):
        def target_of(f):
            if isinstance(f, (str, os.PathLike)):
                return os.fspath(f)
            name = getattr(f, "name", None)  # an open file: its path, unless it came from os.fdopen
            return name if isinstance(name, str) else None

        def wrapped(*args, **kwargs):
            self._check_forbidden()
            if kind == "replace":
                info = {"fn": fn_name, "src": os.fspath(args[0]), "dst": os.fspath(args[1])}
            else:
                f = args[1] if kind == "save" else (args[0] if args else kwargs.get("f"))
                info = {"target": target_of(f)}
                if kind == "load":  # its default changed in torch 2.6: a load that relies on it is unsafe before
                    info["weights_only"] = kwargs.get("weights_only")
            event = self.record(kind, info)
            self._renaming = kind == "replace"
            try:
                out = original(*args, **kwargs)
            finally:
                self._renaming = False
            event.info["exists"] = self._exists()
            if kind == "replace":
                self._digest(event)
            return out

        return wrapped

    # --- install and restore -----------------------------------------------------------------------------------------

    def _set_attr(self, obj, name: str, value) -> None:
        """Replace a module attribute; the original comes back on exit."""
        had, previous = name in vars(obj), vars(obj).get(name)
        setattr(obj, name, value)
        self._undo.append(lambda: setattr(obj, name, previous) if had else delattr(obj, name))

    def _route(self, obj, wrappers: dict) -> None:
        """Send some of ``obj``'s methods through ``wrappers`` by giving ``obj`` a one-off subclass of its class.

        Why not instance attributes: an LR scheduler's state_dict() is its whole ``__dict__`` (a wrapper would end up
        in the student's checkpoint), and ``copy.deepcopy`` of the object would share a wrapper bound to the original.
        A copy made during the run keeps the subclass, whose methods then behave exactly like the original class's.
        """
        cls = obj.__class__

        def routed(name, wrapper):
            original = getattr(cls, name)

            def method(self_, *args, **kwargs):
                if self_ is not obj:
                    return original(self_, *args, **kwargs)
                return wrapper(functools.partial(original, self_), *args, **kwargs)

            method.__name__ = name
            return method

        namespace = {"__module__": cls.__module__, **{n: routed(n, w) for n, w in wrappers.items()}}
        obj.__class__ = type(cls.__name__, (cls,), namespace)
        self._undo.append(lambda: setattr(obj, "__class__", cls))

    def _forbid(self, spec: str) -> None:
        module_name, attr = spec.split(":")
        try:
            module = importlib.import_module(module_name)
        except Exception:  # missing or broken (the lab's reference may be absent from a handout): nothing to forbid
            return
        fn = getattr(module, attr, None)
        if fn is None:
            return
        name = f"{module_name}.{attr}"
        inner = inspect.unwrap(fn)
        code = getattr(inner, "__code__", None)
        self._codes[code] = name
        if code is not None:
            self._prints[_fingerprint(code)] = name
            # the function object itself raises: an alias bound before the check (from m import f as g) is the same
            # object, so calling it by any name stops here, with or without a hook firing inside it
            inner.__code__ = _stub_code(name, code.co_freevars)
            self._undo.append(lambda: setattr(inner, "__code__", code))

        def forbidden(*args, **kwargs):
            self.record("reference", {"name": name})
            raise ReferenceCalled(name)

        self._set_attr(module, attr, forbidden)

    def __enter__(self) -> "Tracer":
        try:
            self._install()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        _ACTIVE.append(self)
        self._undo.insert(0, lambda: _ACTIVE.remove(self))
        return self

    def _install(self) -> None:
        for spec in self.forbidden:
            self._forbid(spec)
        self._codes.pop(None, None)
        handles = []
        model, optimizer = self.model, self.optimizer
        if model is not None:
            handles.append(model.register_forward_pre_hook(self._on_forward))
            handles.append(model.register_forward_hook(self._after_forward))
            for layer in _layers(model):  # how each forward ran, from its layers' outputs
                handles.append(layer.register_forward_hook(self._on_layer))
            for i, p in enumerate(self.params):
                handles.append(p.register_hook(functools.partial(self._on_grad, i)))
                handles.append(p.register_post_accumulate_grad_hook(functools.partial(self._after_accumulate, i)))
            self._route(model, {"train": self._train, "zero_grad": self._zero_grad("model.zero_grad")})
        if optimizer is not None:
            handles.append(optimizer.register_step_pre_hook(self._before_step))
            handles.append(optimizer.register_step_post_hook(self._after_step))
            self._route(optimizer, {"zero_grad": self._zero_grad("optimizer.zero_grad")})
        if self.scheduler is not None:
            self._route(self.scheduler, {"step": self._scheduler_step})
        if self.scaler is not None:
            self._route(self.scaler, {"scale": self._scale, "unscale_": self._unscale, "step": self._scaler_step,
                                      "update": self._scaler_update})
        if hasattr(clip_grad_module, "_clip_grads_with_norm_"):  # torch >= 2.6; older: clipping is judged by values
            self._set_attr(clip_grad_module, "_clip_grads_with_norm_",
                           self._clip_with_norm(clip_grad_module._clip_grads_with_norm_))
        if self.devices:
            self._set_attr(torch.Tensor, "to", self._to(torch.Tensor.to))
            self._set_attr(torch.Tensor, "cpu", self._batch_move(torch.Tensor.cpu, "cpu"))
            self._set_attr(torch.Tensor, "cuda", self._batch_move(torch.Tensor.cuda, "cuda"))
        if self.files:
            self._set_attr(torch, "save", self._file_op(torch.save, "save", "torch.save"))
            self._set_attr(torch, "load", self._file_op(torch.load, "load", "torch.load"))
            self._set_attr(os, "replace", self._file_op(os.replace, "replace", "os.replace"))
            self._set_attr(os, "rename", self._file_op(os.rename, "replace", "os.rename"))
            if not _AUDITING:
                sys.addaudithook(_on_audit)
                _AUDITING.append(True)
            _RENAMES.append(self)
            self._undo.append(lambda: _RENAMES.remove(self))
        self._undo.extend(h.remove for h in handles)

    def __exit__(self, *exc) -> None:
        self._settle()
        while self._undo:
            self._undo.pop()()
        self._backward = None
