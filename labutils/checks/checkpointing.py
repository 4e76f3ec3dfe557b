"""check_checkpoint (06_checkpointing): save mid-training, load into fresh objects, train on; the two runs must match
bit for bit, the file must appear atomically and load with ``weights_only=True``, and ``scaler=None`` must work.
"""

from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LinearLR

from .. import exercises
from ..checkpoint import capture_rng_state, compare_states, set_seed
from ..data import normalize
from ..trace import Tracer, file_digest
from .apart import traced_calls
from .calling import TracedCall, call_failure, could_not_check, isolated, judge_call, new_report, scratch, traced_call
from .report import CheckReport, Failure, NotJudged, beside, described, later_run
from .world import INIT_SCALE, random_images, run_seed, tiny_model


@dataclass
class _Objects:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    scaler: object


def _ckpt_objects(seed: int, scaler: bool = True) -> _Objects:
    set_seed(seed)  # every generator: a load that restores torch's alone leaves Python's and NumPy's elsewhere
    model = tiny_model(dropout=0.5, gain=1.0)  # dropout: the resumed run needs the RNG state too
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)  # moment estimates: optimizer state matters
    scheduler = LinearLR(optimizer, start_factor=1.0, end_factor=0.1, total_iters=10)
    # growth_interval=2: the loss scale has moved by the time of the save, so a missing scaler state shows
    grad_scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_interval=2) if scaler else None
    model.train()
    return _Objects(model, optimizer, scheduler, grad_scaler)


def _train_steps(o: _Objects, batches) -> None:
    for x, y in batches:
        o.optimizer.zero_grad()
        loss = F.cross_entropy(o.model(x), y)
        if o.scaler is not None:
            o.scaler.scale(loss).backward()
            o.scaler.step(o.optimizer)
            o.scaler.update()
        else:
            loss.backward()
            o.optimizer.step()
        o.scheduler.step()


def _state_of(o: _Objects) -> dict:
    return copy.deepcopy({"model": o.model.state_dict(), "optimizer": o.optimizer.state_dict(),
                          "scheduler": o.scheduler.state_dict(),
                          "scaler": o.scaler.state_dict() if o.scaler is not None else None,
                          "rng": capture_rng_state()})


# what a complete checkpoint holds: how to recognise it in any key layout, and how to describe it
_PARTS = {
    "model": ("the model's weights", "model.state_dict()"),
    "optimizer": ("the optimizer state (AdamW's moment estimates and step counts)", "optimizer.state_dict()"),
    "scheduler": ("the scheduler state (how far the learning-rate schedule has gone)", "scheduler.state_dict()"),
    "scaler": ("the GradScaler state (its current loss scale)", "scaler.state_dict()"),
    "rng": ("the RNG state of every generator (torch's, Python's, NumPy's: dropout masks and any other draw after "
            "resuming would differ)", "capture_rng_state()"),
    "step": ("the step number", "step"),
}


def _python_rng(obj) -> bool:
    """``random.getstate()`` as saved: (version, 625 ints, gauss) as a tuple or list, or as one int64 tensor."""
    if isinstance(obj, (tuple, list)) and len(obj) == 3 and obj[0] == 3:
        return isinstance(obj[1], (tuple, list, torch.Tensor)) and len(obj[1]) == 625
    return isinstance(obj, torch.Tensor) and obj.dtype == torch.int64 and obj.numel() == 626 and int(obj[0]) == 3


def _numpy_rng(obj) -> bool:
    """``np.random.get_state()`` as saved without NumPy arrays: its "MT19937" and its 624 keys, in a tuple, a list
    or a dict (any key names: capture_rng_state's, get_state(legacy=False)'s, a student's own)."""
    if isinstance(obj, dict):
        values = list(obj.values()) + [v for d in obj.values() if isinstance(d, dict) for v in d.values()]
    elif isinstance(obj, (tuple, list)) and len(obj) <= 6:
        values = list(obj)
    else:
        return False
    return any(v == "MT19937" for v in values if isinstance(v, str)) and any(
        isinstance(v, (tuple, list, torch.Tensor)) and len(v) == 624 for v in values)


_GENERATORS = {"torch_rng": "torch's", "python_rng": "Python's", "numpy_rng": "NumPy's"}


def _find_parts(ckpt, model_keys: set, step: int) -> dict:
    """Where in the saved structure each part is, by its shape, not its key name: {part: path}. The RNG state is
    found whole (capture_rng_state()'s dict) or generator by generator, however the student captured each."""
    found, rng_size = {}, torch.get_rng_state().numel()

    def is_part(obj):
        if isinstance(obj, dict):
            keys = set(obj)
            if model_keys <= keys:
                return "model"
            if {"state", "param_groups"} <= keys:
                return "optimizer"
            if {"last_epoch", "base_lrs"} <= keys:
                return "scheduler"
            if {"scale", "_growth_tracker"} <= keys:
                return "scaler"
            if {"python", "numpy", "torch"} <= keys:
                return "rng"  # capture_rng_state(): every generator
        if isinstance(obj, torch.Tensor) and obj.dtype == torch.uint8 and obj.numel() == rng_size:
            return "torch_rng"  # torch.get_rng_state()
        if _python_rng(obj):
            return "python_rng"
        if _numpy_rng(obj):
            return "numpy_rng"
        return None

    def walk(obj, path):
        part = is_part(obj)
        if part is not None:
            found.setdefault(part, path)
            return
        if isinstance(obj, dict):
            for k, value in obj.items():
                walk(value, path + (k,))
        elif isinstance(obj, (list, tuple)):
            for i, value in enumerate(obj):
                walk(value, path + (i,))
        elif isinstance(obj, numbers.Integral) and not isinstance(obj, bool) and obj == step:
            found.setdefault("step", path)
        elif isinstance(obj, torch.Tensor) and obj.numel() == 1 and obj.dtype == torch.int64 and obj.item() == step:
            found.setdefault("step", path)

    walk(ckpt, ())
    if "rng" not in found and all(g in found for g in _GENERATORS):  # every generator, each captured by hand
        found["rng"] = tuple(found[g] for g in _GENERATORS)
    return found


_ARGS = exercises.get("checkpoint")


@dataclass


class CkptCtx:
    path: Path
    save: TracedCall
    load: TracedCall | None = None
    saved: dict | None = None
    loaded: dict | None = None
    final_a: dict | None = None
    final_b: dict | None = None
    ckpt: object = None
    parts: dict = field(default_factory=dict)
    none_problem: str | None = None
    step: int = _ARGS.argument("step").values[0]  # not the 3 steps trained: the number saved is the caller's


def _ck_atomic(c: CkptCtx):
    if not c.path.exists():
        return NotJudged(f"save_checkpoint wrote no {c.path.name}, so there is no write to judge")
    final = str(c.path)
    for e in c.save.events:
        if e.kind == "save" and e.info["target"] and Path(e.info["target"]).resolve() == c.path.resolve():
            return [Failure("atomic", f"torch.save wrote straight to {c.path.name}: a crash during the write leaves a "
                            "truncated file under the real name (and the previous checkpoint is already gone). Save "
                            "to a temp file in the same folder, then os.replace(tmp, path); make it with "
                            "tempfile.mkstemp(dir=folder, prefix=f'.{name}.', suffix='.tmp'), which the lab's crash "
                            "clean-up removes (a fixed name such as path + '.tmp' is never cleaned up).",
                            None, beside(c.save.events, 0, len(c.save.events), _CKPT_ORDER, c.save.events.index(e),
                                         "your save_checkpoint"))]
    first = next((e for e in c.save.events if e.info.get("exists", {}).get(final)), None)
    if first is None or first.kind != "replace" or Path(first.info["dst"]).resolve() != c.path.resolve():
        return [Failure("atomic", f"{c.path.name} came into existence without os.replace/os.rename (it was written in "
                        "place): a crash during the write leaves a truncated checkpoint. Write a temp file in the same "
                        "folder, then os.replace(tmp, path).")]
    if Path(first.info["src"]).resolve() == c.path.resolve():
        return [Failure("atomic", f"{c.path.name} was written in place, then renamed onto itself: a crash during the "
                        "write leaves a truncated checkpoint. Write a temp file in the same folder, then "
                        "os.replace(tmp, path).")]
    if Path(first.info["src"]).resolve().parent != c.path.resolve().parent:
        return [Failure("atomic", f"the temp file was in {Path(first.info['src']).parent}, not beside the checkpoint: "
                        "a rename is only atomic within one file system. Put the temp file in the same folder.")]
    last = [e for e in c.save.events if e.kind == "replace" and Path(e.info["dst"]).resolve() == c.path.resolve()]
    if last[-1].info.get("digest") != file_digest(c.path):  # the file the check reads is not what the rename put
        return [Failure("atomic", f"after os.replace put {c.path.name} in place, it was written again in place (its "  # there
                        "bytes changed after the rename): a crash during that write leaves a truncated checkpoint. "
                        "Write every byte to the temp file before os.replace(tmp, path), and touch the path no more.")]
    return []


_CKPT_ORDER = ["torch.save(state, tmp)  (tmp beside path)", "os.replace(tmp, path)"]


def _ck_loadable(c: CkptCtx):
    if not c.path.exists():
        return [Failure("contents", f"save_checkpoint wrote nothing at the path it was given ({c.path.name}).")]
    try:
        c.ckpt = torch.load(c.path, weights_only=True)
    except Exception as exc:
        return [Failure("loadable", f"torch.load(path, weights_only=True) cannot read the checkpoint "
                        f"({type(exc).__name__}): it holds a pickled object, not only tensors and plain values. Save "
                        "state_dict()s and numbers, never the model or optimizer objects themselves.")]
    return []


def _ck_contents(c: CkptCtx):
    if not isinstance(c.ckpt, dict):
        return [Failure("contents", f"the checkpoint is a {type(c.ckpt).__name__}; save one dict holding every part.")]
    c.parts = _find_parts(c.ckpt, set(c.saved["model"]), c.step)
    found = ", ".join(str(k) for k in c.ckpt) or "nothing"
    failures = []
    for part, (what, how) in _PARTS.items():
        held = [name for g, name in _GENERATORS.items() if g in c.parts]
        if part == "rng" and part not in c.parts and held:
            missing = [name for g, name in _GENERATORS.items() if g not in c.parts]
            failures.append(Failure("contents", f"the checkpoint holds the RNG state of {' and '.join(held)} "
                                    f"generator{'s' if len(held) > 1 else ''} only: {' and '.join(missing)} would not "
                                    "come back (nor CUDA's, on a GPU). Save capture_rng_state() and restore it with "
                                    "restore_rng_state() in load_checkpoint."))
        elif part not in c.parts:
            failures.append(Failure("contents", f"the checkpoint is missing {what} (its keys: {found}): a resumed run "
                                    f"would differ from one that never stopped. Save {how} in it and restore it in "
                                    "load_checkpoint."))
    return failures + _wrong_values(c)


def _at(ckpt, path: tuple):
    for key in path:
        ckpt = ckpt[key]
    return ckpt


def _sequence(value, n: int):
    """The first list, tuple or tensor of ``n`` numbers inside ``value`` (a generator's state), as ints; None."""
    if isinstance(value, torch.Tensor):
        return [int(v) for v in value.reshape(-1).tolist()] if value.numel() == n else None
    if isinstance(value, (list, tuple)) and len(value) == n and all(isinstance(v, numbers.Integral) for v in value):
        return [int(v) for v in value]
    for item in (value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()):
        found = _sequence(item, n)
        if found is not None:
            return found
    return None


def _generators(c: CkptCtx) -> dict:
    """The saved state of each generator, capture_rng_state()'s dict or captured by hand under keys of its own."""
    path = c.parts["rng"]
    if path and all(isinstance(p, tuple) for p in path):  # one path per generator (_find_parts)
        return {g: _at(c.ckpt, p) for g, p in zip(_GENERATORS, path)}
    whole = _at(c.ckpt, path)
    return {"torch_rng": whole["torch"], "python_rng": whole["python"], "numpy_rng": whole["numpy"]}


def _wrong_values(c: CkptCtx) -> list[Failure]:
    """Every part found (by its shape) holds the state it is named for, as it was when save_checkpoint was called:
    a dict with the right keys and placeholder values (zeros, empty lists, another run's state) is not a checkpoint.
    The generators are compared state by state, in any layout (capture_rng_state()'s, or captured by hand)."""
    failures = []
    for part in ("model", "optimizer", "scheduler", "scaler", "rng"):
        if part not in c.parts or c.saved.get(part) is None:
            continue
        saved = c.saved[part]
        if part == "rng":
            held, want = _generators(c), {"torch_rng": [int(v) for v in saved["torch"].tolist()],
                                          "python_rng": [int(v) for v in saved["python"].tolist()[1:]],
                                          "numpy_rng": [int(v) for v in saved["numpy"]["keys"].tolist()]}
            whole = _sequence(held["python_rng"], 626)  # capture_rng_state()'s one tensor: the version, then them
            held["python_rng"] = whole[1:] if whole is not None else held["python_rng"]
            diffs = [_GENERATORS[g] + " generator" for g in _GENERATORS if _sequence(held[g], len(want[g])) != want[g]]
        else:
            value = _at(c.ckpt, c.parts[part])
            if part == "model":
                value = {k: value[k] for k in saved}  # the model's keys (a layout may keep more beside them)
            diffs = compare_states(saved, value)
        if diffs:
            what, how = _PARTS[part]
            failures.append(Failure("contents", f"the checkpoint has a place for {what}, but not the state it had "
                                    f"when save_checkpoint was called ({diffs[0]} differs): a dict with the right "
                                    f"keys is not enough. Save {how} itself, at the moment of the save."))
    return failures


def _ck_restore(c: CkptCtx):
    if c.load is None or not c.load.complete:
        return None
    fixes = {"model": "model.load_state_dict(...)", "optimizer": "optimizer.load_state_dict(...)",
             "scheduler": "scheduler.load_state_dict(...)", "scaler": "scaler.load_state_dict(...)",
             "rng": "labutils.checkpoint.restore_rng_state(...)"}
    for part, fix in fixes.items():
        if compare_states(c.saved[part], c.loaded[part]):
            return [Failure("restore", f"after load_checkpoint, {_PARTS[part][0]} differs from what was saved: "
                            f"restore it with {fix}.")]
    return []


def _ck_safe_load(c: CkptCtx):
    """Every torch.load in load_checkpoint passes weights_only=True: its default is True only from torch 2.6 on, and
    the lab allows older versions, where loading a file can run code. Only a load it saw is faulted: the restore
    property's evidence is the training on, this only adds a condition to it."""
    loads = [e for e in (c.load.events if c.load is not None else []) if e.kind == "load"]
    if any(e.info.get("weights_only") is not True for e in loads):
        return [Failure("safe_load", "load_checkpoint called torch.load without weights_only=True: pass it "
                        "explicitly (torch.load(path, weights_only=True)); its default is True only from torch 2.6 "
                        "on, and with older versions loading a file can run code.")]
    return []


def _ck_return_value(c: CkptCtx):
    """The step returned is evidence only when the file on disk holds that step: a load that returns a number kept
    in memory (a global, the check's own held pair of lab 7) read nothing back."""
    if c.load is None or not c.load.complete:
        return None
    if c.ckpt is None or "step" not in _find_parts(c.ckpt, set(c.saved["model"]), c.step):
        return NotJudged(f"the checkpoint on disk holds no step={c.step} (or cannot be read), so a returned step "
                         "was not read back from it")
    got = c.load.result
    if isinstance(got, numbers.Integral) and not isinstance(got, bool) and got == c.step:
        return []
    return [Failure("return_value", f"load_checkpoint returned {described(got)}; the contract returns the saved step "
                    f"as an int (here {c.step}).")]


def _ck_exact_resume(c: CkptCtx):
    if c.load is None or not c.load.complete:
        return None
    diffs = compare_states(c.final_a, c.final_b)
    if diffs:
        return [Failure("exact_resume", f"after loading, the same steps did not reproduce the run that never stopped "
                        f"(first difference: {diffs[0]}). Save and restore every state the steps depend on.")]
    return []


def _ck_scaler_none(c: CkptCtx):
    if isinstance(c.none_problem, NotJudged):
        return c.none_problem
    return [Failure("scaler_none", c.none_problem)] if c.none_problem else []


CKPT_STAGES = (
    ("atomic", _ck_atomic, ()),
    ("loadable", _ck_loadable, ()),
    ("contents", _ck_contents, ("loadable",)),
    ("restore", _ck_restore, ("contents",)),
    ("safe_load", _ck_safe_load, ()),
    ("return_value", _ck_return_value, ()),
    ("exact_resume", _ck_exact_resume, ("contents", "restore")),
    ("scaler_none", _ck_scaler_none, ("loadable",)),
)


@dataclass
class _Save:
    """One save the check makes: the objects it saves (trained on the check's batches), where, at which step, and
    the call once made."""

    objects: _Objects
    path: Path | str
    step: int
    tracer: Tracer
    call: TracedCall | None = None

    def args(self) -> tuple:
        o = self.objects
        return (self.path, o.model, o.optimizer, o.scheduler, o.scaler, self.step)


def _saves(tmp: Path, seed: int, batches, path: Path, step: int) -> list[_Save]:
    """The check's three saves, ready to be made: the main one (watched for the atomic write), one with
    scaler=None, and one with the second step and a str path in a sub-folder. Each one's objects are made and
    trained right before the next's; the main one's last, so the random streams at its save are those its own
    training left."""
    forbidden = exercises.get("checkpoint").forbidden
    varied = _ARGS.varied()
    (tmp / "varied" / varied["path"]).parent.mkdir(parents=True, exist_ok=True)
    plans = [(seed + 2, False, batches[:2], tmp / "no-scaler.pt", 2, Tracer(forbidden=forbidden)),
             (seed + 4, True, batches[:3], str(tmp / "varied" / varied["path"]), varied["step"],  # a str path too
              Tracer(forbidden=forbidden)),
             (seed, True, batches[:3], path, step, Tracer(files=True, watch=[path], forbidden=forbidden))]
    saves = []
    for s, scaler, trained, where, at, tracer in plans:
        objects = _ckpt_objects(s, scaler=scaler)
        _train_steps(objects, trained)
        saves.append(_Save(objects, where, at, tracer))
    return [saves[2], saves[0], saves[1]]  # the main save first: it starts from the streams the check left


def _make_saves(save_fn, saves: list[_Save]) -> None:
    """Make ``saves`` one after another in one process of their own (labutils.checks.apart): the loads of the check
    then run where no save ever ran, so only the files can restore. One process for the three: a fork costs more
    than a save."""
    runs = traced_calls([(save_fn, s.args(), s.tracer, None, None) for s in saves], apart=True)
    for save, run in zip(saves, runs):
        save.call = run


def _without_scaler(save_fn, load_fn, save: _Save, seed: int) -> str | None:
    """The contract allows scaler=None: saving and loading must work then too."""
    a, path = save.objects, Path(save.path)
    stopped = call_failure("save_checkpoint", save_fn, save.call, " with scaler=None")
    if stopped:
        return stopped.message
    b = _ckpt_objects(seed + 1, scaler=False)
    if not path.exists():
        return NotJudged("with scaler=None, save_checkpoint wrote no file")
    load = traced_call(load_fn, (path, b.model, b.optimizer, b.scheduler, None),
                       Tracer(forbidden=exercises.get("checkpoint").forbidden))
    stopped = call_failure("load_checkpoint", load_fn, load, " with scaler=None")
    if stopped:
        return stopped.message
    if compare_states(a.model.state_dict(), b.model.state_dict()):
        return "with scaler=None, load_checkpoint did not restore the model's weights."
    return None


def _varied(save_fn, load_fn, save: _Save, folder: Path, seed: int) -> list[Failure]:
    """Save and load once more with the second step and a str path in a sub-folder: a pair that writes a name or a
    step of its own shows here, and a load that restores only its first call."""
    step, path = save.step, Path(save.path)
    given = f" with step={step}, path={str(path)!r}"
    stopped = call_failure("save_checkpoint", save_fn, save.call, given)
    if stopped:
        return [stopped]
    if not path.exists():
        written = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        return [Failure("contents", f"save_checkpoint did not write the path={str(path)!r} it was given (the folder "
                        f"holds {written or 'nothing'}): save to path itself.")]
    if _ck_loadable(CkptCtx(path, save.call)):  # the loadable property's mistake, which the first save showed already
        return [Failure("loadable", f"torch.load(path, weights_only=True) cannot read the checkpoint{given}.")]
    b = _ckpt_objects(seed + 1)
    load = traced_call(load_fn, (str(path), b.model, b.optimizer, b.scheduler, b.scaler),
                       Tracer(forbidden=exercises.get("checkpoint").forbidden))
    stopped = call_failure("load_checkpoint", load_fn, load, given)
    if stopped:
        return [stopped]
    found = []  # each judged on its own: every load must restore, not only the first
    if compare_states(save.objects.model.state_dict(), b.model.state_dict()):
        found.append(Failure("restore", f"load_checkpoint{given} did not restore the model's weights: every call "
                             "must restore what the file holds."))
    if not (isinstance(load.result, numbers.Integral) and not isinstance(load.result, bool) and load.result == step):
        found.append(Failure("return_value", f"load_checkpoint returned {described(load.result)}, not the "
                             f"step={step} that save_checkpoint was given: save the step argument and return what "
                             "was saved."))
    return found


@could_not_check("save_checkpoint / load_checkpoint")
def check_checkpoint(save_fn, load_fn) -> CheckReport:
    """Save mid-training with ``save_fn``, keep training; load into fresh objects with ``load_fn``, train the same
    steps; everything must match bit for bit, and the file must appear atomically."""
    names = [s for s, _, _ in CKPT_STAGES]
    report = new_report("checkpoint", names, save_fn, load_fn)
    if report.failures:  # not callable as the contract calls them
        return report
    forbidden = exercises.get("checkpoint").forbidden
    seed = run_seed()  # fresh data, weights and states: a checkpoint made in advance holds none of them
    with isolated(), scratch() as tmp:
        torch.manual_seed(seed)
        batches = [(normalize(random_images(4, seed + i)), torch.randint(0, 10, (4,))) for i in range(6)]
        path = Path(tmp) / _ARGS.argument("path").values[0]
        saves = _saves(Path(tmp), seed, batches, path, _ARGS.argument("step").values[0])
        a = saves[0].objects
        c = CkptCtx(path, save=TracedCall([]), saved=_state_of(a))  # as the saves find them
        _make_saves(save_fn, saves)
        c.save = saves[0].call
        report.trace = c.save.events
        stopped = call_failure("save_checkpoint", save_fn, c.save)
        if stopped:
            report.failures.append(stopped)
            return report
        _train_steps(a, batches[3:])  # the run that never stopped
        c.final_a = _state_of(a)
        b = _ckpt_objects(seed + 1)  # fresh objects, other weights, another RNG stream: a new process
        c.load = traced_call(load_fn, (c.path, b.model, b.optimizer, b.scheduler, b.scaler),
                             Tracer(files=True, forbidden=forbidden))
        if c.load.complete:
            c.loaded = _state_of(b)
            _train_steps(b, batches[3:])
            c.final_b = _state_of(b)
        c.none_problem = _without_scaler(save_fn, load_fn, saves[1], seed + 2)
        judge_call(report, "load_checkpoint", load_fn, c.load, CKPT_STAGES, c, names)
        # the step and path it must honour, at their second values, whatever the first run showed
        varied = _varied(save_fn, load_fn, saves[2], Path(tmp) / "varied", seed + 4)
    with later_run(report):
        report.failures += varied
    return report
