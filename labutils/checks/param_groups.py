"""check_param_groups (08_stretch): AdamW parameter groups that decay conv and linear weights and nothing else."""

from __future__ import annotations

from collections import Counter

import torch

from .. import exercises
from ..models import SmallCNN
from ..trace import Tracer
from .calling import call_failure, could_not_check, isolated, new_report, traced_call
from .report import CheckReport, Failure, NotJudged, described, later_run
from .world import run_seed


@could_not_check("param_groups")
def check_param_groups(fn) -> CheckReport:
    """``param_groups(model, weight_decay)``: AdamW groups, decay on conv/linear weights, 0.0 on every ndim <= 1."""
    report = new_report("param_groups", ["return_value", "coverage", "weight_decay", "no_decay"], fn)
    if report.failures:  # not callable as the contract calls it
        return report
    with isolated():
        torch.manual_seed(run_seed())
        model = SmallCNN(channels=(2, 4), batchnorm=True)  # conv weights, BN scales and shifts, linear weights, biases
    for wd in exercises.get("param_groups").argument("weight_decay").values:  # two values: its own number shows
        with later_run(report):  # both judged, whatever the first showed: a number of its own behind another mistake
            _judge(report, fn, model, wd)
    return report


def _judge(report: CheckReport, fn, model, wd: float) -> bool:
    names = {id(p): n for n, p in model.named_parameters()}
    run = traced_call(fn, (model, wd), Tracer(forbidden=exercises.get("param_groups").forbidden), result=_read_groups)
    stopped = call_failure("param_groups", fn, run)
    if stopped:
        report.failures.append(stopped)
        return False
    groups = run.result
    if not (isinstance(groups, (list, tuple)) and groups and all(isinstance(g, dict) and "params" in g
                                                                 for g in groups)):
        report.failures.append(Failure("return_value", f"param_groups returned {described(groups)}; the contract "
                                       "returns a list of dicts, each with a 'params' list (and a 'weight_decay')."))
        return False
    odd = next((i for i, g in enumerate(groups) if not isinstance(g["params"], list)), None)
    if odd is not None:
        params = described(groups[odd]["params"])
        report.failures.append(Failure("return_value", f"group {odd + 1}'s 'params' is {params}: torch.optim takes a "
                                       "list (or any ordered iterable) of parameters there."))
        return False
    report.judge("return_value", [])
    ok = report.judge("coverage", _coverage(groups, model, names))
    return _judge_decay(report, groups, names, wd) and ok


def _read_groups(groups):
    """The returned groups with each group's ``params`` read into a list, as ``torch.optim`` reads them (a tensor is
    one parameter; a generator, ``filter()`` or any iterable is read once): everything else stays as returned."""
    if not isinstance(groups, (list, tuple)):
        return groups
    read = []
    for group in groups:
        if isinstance(group, dict) and "params" in group:
            params = group["params"]
            if isinstance(params, torch.Tensor):
                params = [params]
            elif not isinstance(params, (list, str, bytes, dict, set, frozenset)) and hasattr(params, "__iter__"):
                params = list(params)  # a generator, filter(), a tuple: torch.optim takes any ordered iterable
            group = {**group, "params": params}
        read.append(group)
    return tuple(read) if isinstance(groups, tuple) else read


def _coverage(groups: list[dict], model, names: dict) -> list[Failure] | NotJudged:
    seen = Counter(id(p) for g in groups for p in g["params"])
    twice = [names.get(i, "?") for i, c in seen.items() if c > 1]
    missing = [n for n, p in model.named_parameters() if id(p) not in seen]
    strangers = [i for i in seen if i not in names]
    coverage = (f"{twice[0]} is in more than one group" if twice else
                f"{missing[0]} is in no group" + (f" (nor are {len(missing) - 1} more)" if len(missing) > 1 else "")
                if missing else "a tensor that is not a parameter of the model is in a group" if strangers else None)
    if coverage:
        return [Failure("coverage", coverage + ": every trainable parameter must be in exactly one group.")]
    if sum(1 for g in groups if g["params"]) < 2:  # what list(model.parameters()) in one group also "covers"
        # AdamW without param_groups does that: no evidence yet, and the one mistake is no_decay's (the split)
        return NotJudged("every parameter is in one group, as AdamW(model.parameters()) holds them without any "
                         "param_groups: nothing is split yet (put the conv/linear weights in one group and the biases "
                         "and norm parameters in another)", needs=("no_decay",))
    return []


def _judge_decay(report: CheckReport, groups: list[dict], names: dict, wd: float) -> bool:
    """The decay of every parameter the groups hold (judged even when some are missing): conv/linear weights by
    ``wd`` (``weight_decay``), biases and norm parameters by 0.0 while the weights are decayed (``no_decay``)."""
    default = torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults["weight_decay"]
    found = {"weight_decay": [], "no_decay": []}
    decayed_weights = False
    for group in groups:
        decay = group.get("weight_decay", default)
        for p in group["params"]:
            if id(p) not in names:
                continue
            kind = "no_decay" if p.ndim <= 1 else "weight_decay"
            decayed_weights |= kind == "weight_decay" and decay != 0.0
            want = 0.0 if p.ndim <= 1 else wd
            if decay == want or found[kind]:
                continue
            if p.ndim > 1 and decay != 0.0:
                message = (f"param_groups decayed {names[id(p)]} by {decay}, not by the weight_decay={wd} it was "
                           "given: use the weight_decay argument in the decayed group.")
            else:
                why = ("a bias or normalisation parameter (ndim <= 1) must not be decayed" if p.ndim <= 1 else
                       f"conv/linear weights get weight_decay={wd}")
                unset = ("" if "weight_decay" in group else
                         f" (the group sets none, so AdamW uses its default {default})")
                message = f"{names[id(p)]} has weight_decay={decay}{unset}: {why}."
            found[kind].append(Failure(kind, message))
    held = {p.ndim <= 1 for g in groups for p in g["params"] if id(p) in names}
    decays = {group.get("weight_decay", default) for group in groups if group["params"]}
    if False not in held:
        weight_decay = NotJudged("no conv or linear weight is in any group")
    elif decays == {wd}:  # AdamW(model.parameters(), weight_decay=wd) does that by default: no evidence of groups
        weight_decay = NotJudged(f"every parameter is decayed by weight_decay={wd}, which is what AdamW does without "
                                 "any groups: nothing shows the grouping yet (biases and norm parameters get 0.0)",
                                 needs=("no_decay",))
    else:
        weight_decay = found["weight_decay"]
    decay_ok = report.judge("weight_decay", weight_decay)
    if True not in held:
        no_decay = NotJudged("no bias or normalisation parameter is in any group")
    elif not found["no_decay"] and not decayed_weights:
        no_decay = NotJudged("no weight is decayed, so leaving biases and norms undecayed shows nothing: decay the "
                             "conv/linear weights by weight_decay in a group of their own")
    else:
        no_decay = found["no_decay"]
    return report.judge("no_decay", no_decay) and decay_ok
