"""The checks engine: every correct variant passes, every buggy one fails exactly its check, each pasted into a notebook
cell is judged apart (as the grader's recheck judges it) exactly as in place, tracing changes nothing.

PyTorch is the oracle twice over: the checks compare the student's gradients to PyTorch's, and these tests compare a
traced run to an untraced one bit for bit.
"""

import contextlib
import copy
import inspect
import linecache
import os
import secrets

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.clip_grad as clip_grad_module
from torch.nn.utils import clip_grad_norm_

from labutils import checks, exercises
from labutils.checkpoint import compare_states
from labutils.checks import properties, world
from labutils.checks import (CheckReport, check_checkpoint, check_evaluate, check_normalize, check_param_groups,
                             check_resume, check_train_one_epoch, show_trace)
from labutils.models import SmallCNN
from labutils.trace import Tracer

import judging
import mutants

BUGGY, CORRECT, VARIANTS = mutants.BUGGY, mutants.CORRECT, mutants.VARIANTS
_REPORTS: dict = {}  # variant name -> its report: each mutant is checked once, however many tests read it
# The data of every report kept in _REPORTS, and of each variant judged apart beside it: drawn afresh for each test
# run (as the checks draw theirs), or the one a failure names.
CORPUS_SEED = int(os.environ.get("LOOPLAB_CORPUS_SEED") or secrets.randbits(31))
SEED_NOTE = f"(the corpus's data seed: LOOPLAB_CORPUS_SEED={CORPUS_SEED} runs these data again)"


def run_check(variant):
    """The variant's check report, computed once per corpus variant (a pasted or changed variant runs afresh)."""
    if variant.function is not getattr(next((v for v in VARIANTS if v.name == variant.name), None), "function", None):
        return mutants.run_check(variant)
    if variant.name not in _REPORTS:
        with world.seeded(CORPUS_SEED):
            _REPORTS[variant.name] = mutants.run_check(variant)
    return _REPORTS[variant.name]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """This module forks (the checks of labs 6 and 7, the observer of a report judged apart): one torch thread."""
    with judging.one_thread():
        yield


# --- the corpus ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", CORRECT, ids=lambda v: v.name)
def test_correct_variant_passes(variant):
    report = run_check(variant)
    assert report.passed, f"{report}\n{SEED_NOTE}"
    assert str(report).startswith("✓ ")


@pytest.mark.parametrize("variant", BUGGY, ids=lambda v: v.name)
def test_buggy_variant_fails_exactly_its_check(variant):
    """The mistake is the first failure reported; any other is a declared double mistake (DOUBLE_MISTAKES)."""

    report = run_check(variant)
    assert report.failures and report.failures[0].check == variant.expected_check, f"{report}\n{SEED_NOTE}"
    assert variant.expected_message in report.failures[0].message, f"{report}\n{SEED_NOTE}"
    allowed = DOUBLE_MISTAKES.get(variant.name, set())
    others = {p.id for f in report.failures[1:] for p in exercises.get(variant.exercise).owner(f.check)}
    others -= {p.id for p in exercises.get(variant.exercise).owner(variant.expected_check)}
    assert others <= allowed, str(report)
    assert not report.passed and str(report).startswith("✗ ")
    said = [str(f) for f in report.failures]
    assert len(said) == len(set(said)), f"a failure is said twice:\n{report}"


def test_corpus_is_large_enough_and_covers_the_exercises():
    assert len(BUGGY) >= 25 and len(CORRECT) >= 10
    exercises = {v.exercise for v in VARIANTS}
    assert exercises == {"normalize", "baseline", "evaluate", "scheduler", "clipping", "accumulation", "amp",
                         "checkpoint", "resume", "param_groups"}
    assert len({v.name for v in VARIANTS}) == len(VARIANTS)


def _from_source(variant):
    """The variant as a notebook would define it: its source, renamed to the contract's names, run in a fresh
    namespace under the allowed imports (registered in linecache as IPython does, so line reports still work)."""
    text = mutants.IMPORTS + "\n\n" + mutants.source(variant)
    filename = f"<cell {variant.name}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = {}
    exec(compile(text, filename, "exec"), namespace)
    names = mutants.CONTRACT_NAMES[variant.exercise]
    return variant._replace(function=tuple(namespace[n] for n in names) if len(names) > 1 else namespace[names[0]])


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_every_variant_pasted_into_a_notebook_cell_is_judged_apart_as_in_place(variant):
    """The variant's source as a notebook cell defines it (the contract's names), judged as the grader's recheck
    judges it (a forked observer runs the functions, a judge that never ran them replays its records), on the same
    data: the same report and the same verdict per property as the corpus's own functions in place."""
    pasted = _from_source(variant)
    for fn, name in zip(pasted.functions, mutants.CONTRACT_NAMES[variant.exercise]):
        assert fn.__name__ == name
    in_place = run_check(variant)
    with world.seeded(CORPUS_SEED):
        apart = judging.judged_apart(variant.exercise, pasted.functions)
    assert str(apart) == str(in_place), SEED_NOTE
    assert properties.verdicts(variant.exercise, apart) == properties.verdicts(variant.exercise, in_place), SEED_NOTE
    assert apart.passed == variant.correct, SEED_NOTE


# --- tracing changes nothing -----------------------------------------------------------------------------------------


def _amp_clip_accum_run(traced: bool):
    """Every instrumented feature at once: accumulation, autocast, GradScaler, clipping, a scheduler."""
    torch.manual_seed(0)
    model = SmallCNN(channels=(4, 8), dropout=0.3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=10)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    data = [(torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))) for _ in range(7)]
    tracer = Tracer(model, optimizer, scheduler, scaler) if traced else None
    if tracer:
        tracer.__enter__()
    try:
        model.train()
        for i, (x, y) in enumerate(data):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y) / 2
            scaler.scale(loss).backward()
            if i % 2 == 1 or i == len(data) - 1:
                scaler.unscale_(optimizer)
                clip_grad_norm_(model.parameters(), 0.5)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                optimizer.zero_grad()
    finally:
        if tracer:
            tracer.__exit__(None, None, None)
    return model, optimizer, tracer


def test_tracing_leaves_results_bit_identical():
    plain_model, plain_opt, _ = _amp_clip_accum_run(traced=False)
    traced_model, traced_opt, tracer = _amp_clip_accum_run(traced=True)
    for a, b in zip(plain_model.state_dict().values(), traced_model.state_dict().values()):
        assert torch.equal(a, b)
    assert compare_states(plain_opt.state_dict(), traced_opt.state_dict()) == []
    kinds = [e.kind for e in tracer.events]
    assert kinds.count("step") == 4 and kinds.count("clip") == 4 and kinds.count("backward") == 7


def test_tracer_puts_everything_back(tmp_path):
    model = SmallCNN(channels=(2, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    scaler = torch.amp.GradScaler("cpu")
    classes = [type(o) for o in (model, optimizer, scheduler, scaler)]
    before = (clip_grad_module._clip_grads_with_norm_, torch.save, torch.load, os.replace, os.rename)
    with Tracer(model, optimizer, scheduler, scaler, files=True, forbidden=exercises.get("baseline").forbidden):
        F.cross_entropy(model(torch.randn(2, 1, 28, 28)), torch.tensor([1, 2])).backward()
        torch.save(scheduler.state_dict(), tmp_path / "s.pt")  # a traced scheduler's state stays plain data
        assert torch.load(tmp_path / "s.pt", weights_only=True)["last_epoch"] == 0
    import labutils.reference.loop

    assert before == (clip_grad_module._clip_grads_with_norm_, torch.save, torch.load, os.replace, os.rename)
    assert classes == [type(o) for o in (model, optimizer, scheduler, scaler)]
    assert labutils.reference.loop.train_one_epoch.__module__ == "labutils.reference.loop"
    assert labutils.reference.loop.train_one_epoch.__code__.co_name == "train_one_epoch"  # its code given back
    assert not model._forward_pre_hooks and not optimizer._optimizer_step_pre_hooks
    assert all(not m._forward_hooks for m in model.modules())
    assert not {"train", "zero_grad"} & set(vars(model)) and "zero_grad" not in vars(optimizer)
    assert not {"scale", "unscale_", "step", "update"} & set(vars(scaler))
    assert all(not p._backward_hooks and not getattr(p, "_post_accumulate_grad_hooks", None)
               for p in model.parameters())


def test_how_a_forward_ran_is_read_from_the_modules_and_tensors_not_from_queries(monkeypatch):
    """Every module's own mode, and autograd, inference mode and autocast from the layers' outputs: patching
    torch.is_grad_enabled, torch.is_autocast_enabled or the top module's training flag changes nothing."""
    from labutils.trace import modes

    model, x = SmallCNN(channels=(2, 4), dropout=0.5), torch.randn(2, 1, 28, 28)
    object.__setattr__(model, "training", False)  # the top module only: Dropout still drops
    assert modes(model) is None and modes(model.eval()) is False and modes(model.train()) is True
    with Tracer(model) as tracer:
        with monkeypatch.context() as patched:  # what a student's function may do for the length of its call
            patched.setattr(torch, "is_grad_enabled", lambda: False)
            patched.setattr(torch, "is_autocast_enabled", lambda *a: True)
            patched.setattr(torch, "is_inference_mode_enabled", lambda: True)
            object.__setattr__(model, "training", False)
            model(x)
        with torch.no_grad():
            model.eval()(x)
        with torch.inference_mode():
            model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
        model.bfloat16()(x.bfloat16())  # a model cast to bfloat16 is not autocast
    facts = [(e.info["training"], e.info["grad"], e.info["inference"], e.info["autocast"]) for e in tracer.events
             if e.kind == "forward"]
    assert facts == [(None, True, False, None), (False, False, False, None), (False, False, True, None),
                     (False, True, False, torch.bfloat16), (False, True, False, None)]


def test_a_forbidden_helper_is_caught_under_any_name_and_as_a_copy_of_its_code():
    """An alias bound before the check is the same function object (its code raises for the call); a copy of its
    code object under another name computes the same instructions (seen when a hook fires inside it)."""
    import types

    import labutils.evaluation as lab

    alias = lab.evaluate
    inner = lab.evaluate.__wrapped__
    copy = types.FunctionType(inner.__code__.replace(co_name="mine", co_firstlineno=1), inner.__globals__, "mine",
                              inner.__defaults__)

    def by_alias(model, loader, device):
        return alias(model, loader, device)

    def by_copy(model, loader, device):
        with torch.no_grad():
            return copy(model, loader, device)

    for fn in (by_alias, by_copy):
        report = check_evaluate(fn)
        assert report.failures[0].check == "uses_reference" and ".evaluate, the lab's own" in str(report), str(report)
        assert not any(v.passed for v in properties.verdicts("evaluate", report).values())
    assert lab.evaluate.__wrapped__.__code__ is inner.__code__ and inner.__code__.co_name == "evaluate"


def test_a_copy_made_during_tracing_behaves_like_the_original():
    model = SmallCNN(channels=(2, 4))
    with Tracer(model) as tracer:
        twin = copy.deepcopy(model)  # e.g. an EMA copy made inside a student's loop
        twin.eval()
        assert model.training and not twin.training  # switching the copy leaves the original alone
    assert [e.kind for e in tracer.events] == []  # and the copy's calls are not the traced model's


@pytest.mark.parametrize("spelling", ["torch.nn.utils", "nn.utils", "imported"])
def test_clipping_is_seen_however_it_was_imported(spelling):
    clip = {"torch.nn.utils": torch.nn.utils.clip_grad_norm_, "nn.utils": nn.utils.clip_grad_norm_,
            "imported": clip_grad_norm_}[spelling]
    model = SmallCNN(channels=(2, 4))
    with Tracer(model) as tracer:
        F.cross_entropy(model(torch.randn(2, 1, 28, 28)), torch.tensor([1, 2])).backward()
        norm = clip(model.parameters(), 1e-3)
    (event,) = [e for e in tracer.events if e.kind == "clip"]
    assert event.info["norm_before"] == pytest.approx(norm.item()) and event.info["norm_after"] <= 1e-3 * 1.001


def test_clearing_is_seen_however_it_was_done():
    model = SmallCNN(channels=(2, 4))
    x, y = torch.randn(2, 1, 28, 28), torch.tensor([1, 2])
    clears = [lambda: model.zero_grad(), lambda: model.zero_grad(set_to_none=False),
              lambda: [setattr(p, "grad", None) for p in model.parameters()],
              lambda: [p.grad.zero_() for p in model.parameters()], lambda: None]
    with Tracer(model) as tracer:
        for clear in clears:
            F.cross_entropy(model(x), y).backward()
            clear()
        F.cross_entropy(model(x), y).backward()
    fresh = [e.info["fresh"] for e in tracer.events if e.kind == "backward"]
    assert fresh == [True, True, True, True, True, False]  # only the backward after "no clearing" accumulates


# --- reports, signatures, errors -------------------------------------------------------------------------------------


def _canonical_baseline():
    return mutants.correct.baseline_canonical


def test_report_text_and_assert_passed():
    report = check_train_one_epoch(_canonical_baseline(), "baseline")
    assert isinstance(report, CheckReport) and report.passed
    assert str(report).startswith("✓ train_one_epoch (01_baseline) passed all 12 checks (signature, uses_reference")
    assert repr(report) == str(report) and report.assert_passed() is report
    assert [e.kind for e in report.trace][:4] == ["mode", "zero_grad", "forward", "backward"]

    failed = check_train_one_epoch(mutants.buggy.step_before_backward, "baseline")
    with pytest.raises(AssertionError, match=r"\[order\] optimizer.step\(\) ran before loss.backward\(\) at step 1"):
        failed.assert_passed()
    assert failed.failures[0].step == 1
    assert "expected order" in str(failed) and "<--" in str(failed)  # the trace beside the expected order
    assert "Not checked until that is fixed: zero_grad." in str(failed)
    assert "[gradient] not judged: no optimizer step had a clean window" in str(failed)


def test_parameters_in_a_different_order_are_named():
    def train_one_epoch(model, optimizer, loader, device):
        return 0.0

    report = check_train_one_epoch(train_one_epoch, "baseline")
    assert [f.check for f in report.failures] == ["signature"]
    assert "different order" in report.failures[0].message


def test_not_a_function_and_unknown_exercise():
    assert check_evaluate(None).failures[0].check == "signature"
    with pytest.raises(ValueError, match="exercise='clip' is unknown"):
        check_train_one_epoch(_canonical_baseline(), "clip")


def test_a_reference_imported_before_the_check_is_still_caught():
    from labutils.reference.loop import train_one_epoch as reference  # bound before the check wraps the attribute

    def train_one_epoch(model, loader, optimizer, device):
        scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=0)
        return reference(model, loader, optimizer, scheduler, device=device)

    report = check_train_one_epoch(train_one_epoch, "baseline")
    assert [f.check for f in report.failures] == ["uses_reference"]


def test_amp_loop_must_also_work_without_a_scaler():
    """The amp exercise also runs with scaler=None; a loop that only works with a scaler fails there, and the message
    names the line that needed the scaler (the corpus mutant amp_scaler_required)."""
    fn = mutants.buggy.amp_scaler_required
    line = next(i for i, text in enumerate(inspect.getsourcelines(fn)[0], 1) if "scaler.scale(loss)" in text)
    report = check_train_one_epoch(fn, "amp")
    assert [f.check for f in report.failures] == ["scaler_none"]  # its own property: the scaler path is fine
    assert report.failures[0].message.startswith(
        f"with scaler=None, train_one_epoch raised AttributeError at line {line}")


def test_checks_leave_the_callers_state_alone():
    torch.manual_seed(123)
    rng, threads = torch.get_rng_state(), torch.get_num_threads()
    with torch.no_grad():
        assert check_train_one_epoch(_canonical_baseline(), "baseline").passed
        assert not torch.is_grad_enabled()
    with torch.inference_mode():
        assert check_train_one_epoch(_canonical_baseline(), "baseline").passed
    assert torch.equal(rng, torch.get_rng_state()) and torch.get_num_threads() == threads


def test_show_trace_prints_numbered_events(capsys):
    show_trace(_canonical_baseline(), "baseline", steps=1)
    out = capsys.readouterr().out
    assert "  1. model.train()" in out and "  3. forward batch 1/5  (train mode, grad on)" in out
    assert "end of step 1" in out and "more events" in out
    show_trace(_canonical_baseline(), "baseline", steps=None)
    assert "optimizer.step() #5" in capsys.readouterr().out


def test_public_api_names():
    for name in ("check_normalize", "check_train_one_epoch", "check_evaluate", "check_checkpoint", "check_resume",
                 "check_param_groups", "show_trace", "CheckReport"):
        assert callable(getattr(checks, name))
    assert inspect.signature(check_checkpoint).parameters.keys() == {"save_fn", "load_fn"}
    for fn in (check_normalize, check_evaluate, check_resume, check_param_groups):
        assert len(inspect.signature(fn).parameters) == 1


def test_a_loop_that_never_ends_is_stopped():
    def train_one_epoch(model, loader, optimizer, device):
        model.train()
        while True:  # forgot to stop after one pass
            for x, y in loader:
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()

    report = check_train_one_epoch(train_one_epoch, "baseline")
    assert [f.check for f in report.failures] == ["exception"]
    assert "does the loop ever end?" in report.failures[0].message


# --- graded properties: a single mistake costs only its property (labutils/checks/properties.py) ------------------


def _failing_properties(variant) -> set[str]:

    report = run_check(variant)
    return {p for p, v in properties.verdicts(variant.exercise, report).items() if not v.passed}


# Mutants whose one mistake really shows in a second property's numbers (not a dependency of the checks): the
# per-batch averaging of evaluate also averages the accuracy per batch; clipping or backward on the scaled loss also
# logs scaled norms (and the run without a scaler shows the same mistake). A softmax before the loss and a clip
# before backward are not here: the mean of the loop's own loss and the norms clip_grad_norm_ returned are what the
# contract asks the loop to report, so only the gradient and the clip are wrong.
DOUBLE_MISTAKES = {
    "evaluate_per_batch": {"accuracy"},
    "clip_before_unscale": {"loop"},
    "backward_without_scale": {"autocast", "loop", "scaler_none", "unscale"},
}
# the mutants that lose only their own property: 46 of 67 when "not judged" stopped earning points (issue 15), 53 of
# 72 since the lab 7 and device checks were split, 55 of 74 since 05 forces a skipped step (and judges the mean loss
# in its run without a scaler when the scaler run shows none) and varies the device, 61 of 83 since lab 7 judges
# the first batch after resuming on its own and each property only on evidence that isolates it, and labs 1 to 5
# judge a returned value whatever its type (issue 31), 69 of 89 since a missing division, a missing model.eval(), a
# clip inside the window or by another norm_type cost only their own property (issue 45), 71 of 89 since a softmax
# before the loss no longer costs the mean loss and a clip before backward no longer costs the norms: a change that
# makes more mistakes cost others fails
ONLY_OWN_AT_LEAST = 71


def _expected_properties(variant) -> set[str]:

    exercise = exercises.get(variant.exercise)
    if variant.expected_check in properties.GLOBAL:
        return {p.id for p in exercise.properties}  # it could not be judged at all
    expected = {p.id for p in exercise.owner(variant.expected_check)}
    assert len(expected) == 1, f"{variant.expected_check} must belong to exactly one property: {expected}"
    return expected


@pytest.mark.parametrize("variant", BUGGY, ids=lambda v: v.name)
def test_buggy_variant_fails_its_property_and_costs_others_only_what_is_unjudgeable(variant):
    """Its own property fails with the message; any other it costs is a declared double mistake, or "not judged"
    with a message that names the graded test to fix first."""

    report = run_check(variant)
    verdicts = properties.verdicts(variant.exercise, report)
    expected = _expected_properties(variant)
    failing = {p for p, v in verdicts.items() if not v.passed}
    assert expected <= failing
    prop = sorted(expected)[0]
    assert variant.expected_message in verdicts[prop].message

    for other in sorted(failing - expected - DOUBLE_MISTAKES.get(variant.name, set())):
        message = verdicts[other].message
        assert "not judged" in message and message.startswith("✗"), f"{other}: {message}"
        assert not verdicts[other].judged and verdicts[other].blocked_by, f"{other}: {verdicts[other]}"
        assert expected & set(exercises.get(variant.exercise).property(other).needs), \
            f"{other} is left unjudged by a mistake in {expected}: its Property in the registry must say it needs it"


def test_most_single_mistakes_cost_only_their_own_property():
    """Reported, and held: per mutant, the properties it loses and whether the first message names its mistake (the
    corpus report, printed with -s); the share that lose exactly their own property (a dependency the checks cannot
    avoid costs the dependent property as "not judged") only rises, and no first message is about another property."""
    only_own, rows = [], []
    for v in BUGGY:
        lost, own = _failing_properties(v), _expected_properties(v)
        first = run_check(v).failures[0]
        names = first.check == v.expected_check and v.expected_message in first.message
        rows.append(f"{v.name:40} {'own only' if lost == own else 'also ' + ', '.join(sorted(lost - own)):48} "
                    f"first message {'names its mistake' if names else 'is about ' + first.check}")
        only_own += [v.name] if lost == own else []
    print("\n".join(rows) + f"\n{len(only_own)} of {len(BUGGY)} single-mistake mutants lose only their own property")
    assert len(only_own) >= ONLY_OWN_AT_LEAST
    assert all(row.endswith("names its mistake") for row in rows), "\n".join(rows)


@pytest.mark.parametrize("variant", CORRECT, ids=lambda v: v.name)
def test_correct_variant_passes_every_property(variant):
    assert _failing_properties(variant) == set()


def test_every_stage_belongs_to_a_property():

    for variant in CORRECT:
        owned = {c for p in exercises.get(variant.exercise).properties for c in p.checks}
        report = run_check(variant)
        assert set(report.checks) - {"signature", "uses_reference"} <= owned, variant.exercise


def test_a_property_that_could_not_be_judged_earns_nothing_and_names_the_fix():

    step_before_backward = next(v for v in BUGGY if v.name == "step_before_backward")
    verdict = properties.judge("baseline", "gradient", run_check(step_before_backward))
    assert not verdict.passed and verdict.message.startswith("✗ test_train_one_epoch_gradient: not judged")
    assert not verdict.judged and verdict.blocked_by == ["test_train_one_epoch_steps"]  # data, not words
    no_zero_grad = next(v for v in BUGGY if v.name == "no_zero_grad")  # step 1 had fresh gradients: judged there
    assert properties.judge("baseline", "gradient", run_check(no_zero_grad)).passed


def test_one_check_run_per_set_of_functions(monkeypatch):

    calls = []
    real = checks.check_normalize
    monkeypatch.setattr(checks, "check_normalize", lambda fn: calls.append(fn) or real(fn))
    fn = CORRECT[0].function
    cache: dict = {}
    first = properties.report_for("normalize", (fn,), checks, cache)
    assert properties.report_for("normalize", (fn,), checks, cache) is first and len(calls) == 1

    def other(images):
        return fn(images)

    properties.report_for("normalize", (other,), checks, cache)
    assert len(calls) == 2


def test_a_redefined_helper_runs_the_check_again():

    namespace = {}
    exec("def helper(images):\n    return images.float()\n\ndef normalize_images(images):\n    return helper(images)\n",
         namespace)
    cache: dict = {}
    first = properties.report_for("normalize", (namespace["normalize_images"],), checks, cache)
    assert not first.passed
    exec("from labutils.data import MEAN, STD\ndef helper(images):\n    return ((images / 255 - MEAN) / STD)"
         ".unsqueeze(1).float()\n", namespace)
    assert properties.report_for("normalize", (namespace["normalize_images"],), checks, cache).passed


# --- every mistake that can be judged is reported in the same run (issue 31) ------------------------------------------


def test_a_tensor_return_does_not_hide_the_per_batch_average():
    """Two independent mistakes in what train_one_epoch returns: both are named in one run, not one per run."""
    def train_one_epoch(model, loader, optimizer, device):
        model.train()
        losses = []
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        return sum(losses) / len(losses)  # a tensor, and the average of the per-batch means

    report = check_train_one_epoch(train_one_epoch, "baseline")
    assert [f.check for f in report.failures] == ["return_value", "per_sample"], str(report)
    assert "Not checked until that is fixed" not in str(report)


def test_a_tensor_loss_does_not_hide_the_norms():
    """Lab 03: a mean loss returned as a tensor costs the loop property; the norms beside it are still judged."""

    def train_one_epoch(model, loader, optimizer, scheduler, max_norm, device):
        loss, norms = mutants.correct.clipping_canonical(model, loader, optimizer, scheduler, max_norm, device)
        return torch.tensor(loss), norms

    verdicts = properties.verdicts("clipping", check_train_one_epoch(train_one_epoch, "clipping"))
    assert {p for p, v in verdicts.items() if not v.passed} == {"loop"}, verdicts


def test_a_swapped_pair_is_called_swapped_not_a_percentage():
    """(accuracy, loss) instead of (loss, accuracy): the message says so; "a percentage?" only when it is one."""
    def evaluate(model, loader, device):
        loss, accuracy = mutants.correct.evaluate_canonical(model, loader, device)
        return accuracy, loss

    message = check_evaluate(evaluate).failures[0].message
    assert "(loss, accuracy)" in message and "swapped" in message and "percentage" not in message, message
    percentage = check_evaluate(mutants.buggy.evaluate_percentage).failures[0].message
    assert "is a percentage" in percentage and "?" not in percentage, percentage


@pytest.mark.parametrize("variant", BUGGY, ids=lambda v: v.name)
def test_no_message_contradicts_itself(variant):
    """"as if save_every=7, not the save_every=7 it was given" names no mistake: a value said to be wrong differs
    from the one given."""
    import re

    for failure in run_check(variant).failures:
        for name, said, given in re.findall(r"as if (\w+)=([^,\s]+), not the \1=([^\s]+) it was given",
                                            failure.message):
            assert said != given, failure.message


def test_the_atomic_hint_names_a_temp_file_the_crash_clean_up_removes(tmp_path):
    """Lab 06's hint must not suggest a fixed path + '.tmp' (the lab's clean-up never removes one): the name it
    suggests is one remove_stale_temp_files recognises."""
    import tempfile

    from labutils.checkpoint import TEMP_PATTERN

    in_place = next(v for v in BUGGY if v.name == "checkpoint_in_place")
    message = run_check(in_place).failures[0].message
    assert "tempfile.mkstemp(dir=folder, prefix=f'.{name}.', suffix='.tmp')" in message, message
    fd, name = tempfile.mkstemp(dir=tmp_path, prefix=".step-000037.pt.", suffix=".tmp")
    os.close(fd)
    assert TEMP_PATTERN.match(os.path.basename(name))


# --- lab 8's ungraded exercises have checks too (issue 31) ------------------------------------------------------------


def _accelerate_loop(clip=True):
    def train_one_epoch_accelerate(accelerator, model, loader, optimizer, scheduler, max_norm):
        model.train()
        total, seen, norms = 0.0, 0, []
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            norm = accelerator.clip_grad_norm_(model.parameters(), max_norm if clip else 1e9)
            optimizer.step()
            scheduler.step()
            norms.append(norm.item())
            total += loss.item() * len(y)
            seen += len(y)
        return total / seen, norms
    return train_one_epoch_accelerate


def test_the_accelerate_loop_is_checked():
    report = checks.check_train_one_epoch_accelerate(_accelerate_loop())
    assert report.passed and str(report).startswith("✓ train_one_epoch_accelerate (08_stretch)"), str(report)
    failed = checks.check_train_one_epoch_accelerate(_accelerate_loop(clip=False))
    assert [f.check for f in failed.failures][:1] == ["clip"], str(failed)


def test_evaluate_without_eval_mode_is_checked():
    def evaluate_without_eval_mode(model, loader, device):
        loss, accuracy = 0.0, 0
        with torch.no_grad():
            for x, y in loader:
                logits = model(x.to(device))
                loss += F.cross_entropy(logits, y.to(device), reduction="sum").item()
                accuracy += (logits.argmax(dim=1) == y.to(device)).sum().item()
        model.train()
        return loss / len(loader.dataset), accuracy / len(loader.dataset)

    assert checks.check_evaluate_without_eval_mode(evaluate_without_eval_mode).passed
    kept = checks.check_evaluate_without_eval_mode(mutants.correct.evaluate_canonical)
    assert [f.check for f in kept.failures] == ["eval_mode"] and "leave model.eval() out" in str(kept), str(kept)
    wrong = checks.check_evaluate_without_eval_mode(mutants.buggy.evaluate_percentage)
    assert "accuracy" in [f.check for f in wrong.failures], str(wrong)


def test_lab_8_names_its_own_notebook_for_lab_5s_loop():
    report = check_train_one_epoch(mutants.correct.amp_canonical, "amp", notebook="08_stretch")
    assert str(report).startswith("✓ train_one_epoch (08_stretch, lab 5's loop)"), str(report)


@pytest.mark.parametrize("constants", [(0.1307, 0.3081), (0.5, 0.5), (0.485, 0.229)], ids=["mnist", "half", "imagenet"])
def test_other_normalisation_constants_are_named(constants):
    """MNIST's 0.1307/0.3081 (or any other pair) in lab 00: the message names the constants that were used."""
    mean, std = constants

    def normalize_images(images):
        return ((images.float() / 255 - mean) / std).unsqueeze(1)

    message = check_normalize(normalize_images).failures[0].message
    assert f"mean {mean:.4g} and std {std:.4g} were used" in message, message


def test_the_trailing_group_expected_order_shows_the_micro_batches_that_remain():
    """Lab 04: 5 micro-batches at accum_steps=2 leave one for the trailing group; its expected order shows one."""
    drops = next(v for v in BUGGY if v.name == "drops_trailing_group")
    details = run_check(drops).failures[0].details
    assert details.count("backward()") == 2, details  # the student's one backward, and the one expected


def test_lab_8_evaluates_the_accelerate_model_at_the_precision_of_the_plain_one():
    """The notebook's comparison cell: the same weights must give the same accuracy. accelerate's unwrap_model keeps
    its bf16 autocast wrapper unless told not to, which made 64.26% against 64.65% for one set of weights."""
    import contextlib
    import io
    import json
    import re

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from labutils import evaluation
    from labutils.data import make_loader
    from labutils.checks.world import random_images

    cell = next("".join(c["source"]) for c in json.load(open("solutions/loop_lab/08_stretch.ipynb"))["cells"]
                if c["cell_type"] == "code" and "unwrap_model" in "".join(c["source"]))
    torch.manual_seed(0)
    plain_model = SmallCNN(channels=(4, 8))
    acc_model = copy.deepcopy(plain_model)
    images = random_images(64, 1)
    val_loader = make_loader(images, torch.randint(0, 10, (64,)), 16, shuffle=False)
    try:
        accelerator = Accelerator(cpu=True, mixed_precision="bf16")
        acc_model = accelerator.prepare(acc_model)
        namespace = {"evaluation": evaluation, "plain_model": plain_model, "acc_model": acc_model,
                     "accelerator": accelerator, "val_loader": val_loader, "short_loader": [0] * 100,
                     "plain_loss": 1.0, "acc_loss": 1.0}
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(cell, namespace)
    finally:
        AcceleratorState._reset_state(True)
    plain = namespace["plain_val_loss"], namespace["plain_acc"]
    assert plain == (namespace["acc_val_loss"], namespace["acc_acc"]), out.getvalue()
    assert len(set(re.findall(r"val acc ([\d.]+%)", out.getvalue()))) == 1, out.getvalue()


# --- lab 7 judges the loop alone, whatever the student's own lab 6 pair does (issue 31) ----------------------------


@pytest.mark.parametrize("loop, pair", [
    ("resume_canonical", ("save_no_rng", "load_no_rng")),
    ("resume_canonical", ("save_canonical", "load_forgets_scheduler")),
    ("resume_canonical", ("save_hardcoded_step", "load_canonical")),
    ("resume_helpers", ("save_no_rng", "load_no_rng"))])
def test_a_lab_6_mistake_costs_lab_7_nothing(loop, pair):
    """A correct train_resumable whose notebook holds a buggy lab 6 pair earns every lab 7 point: the check lends the
    loop, and every helper of the notebook that saves or loads, a correct pair of its own, so a lab 6 mistake is never
    blamed on the loop (it was graded in lab 6); the notebook's own pair is back after the check."""
    save, load = (getattr(mutants.b, name, None) or getattr(mutants.c, name) for name in pair)
    variant = next(v for v in CORRECT if v.name == loop)
    pair_source = mutants.source(mutants.Variant("pair", "checkpoint", (save, load)))
    namespace = {}
    exec(mutants.IMPORTS + "\n" + pair_source + "\n\n" + mutants.source(variant), namespace)
    verdicts = checks.properties.verdicts("resume", check_resume(namespace["train_resumable"]))
    assert all(v.passed for v in verdicts.values()), verdicts
    assert namespace["save_checkpoint"].__code__.co_filename == "<string>"  # the notebook's own, put back


# --- a check that fails inside itself says "could not check", never the student's failure (issue 45) ----------------


def _canonical(exercise_id: str):
    return next(v for v in CORRECT if v.exercise == exercise_id and v.name.endswith("_canonical"))


@pytest.mark.parametrize("exercise_id", sorted({v.exercise for v in CORRECT}))
def test_an_exception_inside_a_check_is_could_not_check_and_earns_nothing(exercise_id, monkeypatch):
    """An exception raised by the check's own code (injected where every check records a verdict) is reported as
    "could not check", judged False, 0 points on every property: never a failed property, never a pass."""
    from labutils.checks.report import CheckReport

    def broken(self, check, failures):
        raise ZeroDivisionError("injected into the check")

    monkeypatch.setattr(CheckReport, "judge", broken)
    report = mutants.run_check(_canonical(exercise_id))
    assert not report.passed and report.broken and not report.failures, str(report)
    assert "could not check" in str(report) and "ZeroDivisionError" in str(report), str(report)
    assert "labutils/checks/" in report.broken and "tell your instructor" in report.broken, report.broken
    for prop in exercises.get(exercise_id).properties:
        verdict = properties.judge(exercise_id, prop.id, report)
        assert not verdict.passed and not verdict.judged and verdict.points == 0, verdict
        assert "could not check" in verdict.message and verdict.causes == ["check_error"], verdict.message


def test_could_not_check_names_the_students_line_that_was_running():
    """When the check's exception came through the student's own code (an object of theirs the check reads), the
    message names that line; the student's own exceptions in their function stay their failures."""
    from labutils.checks.calling import could_not_check

    class Groups(list):
        def __iter__(self):
            raise KeyError("student's iterator")

    @could_not_check("param_groups")
    def check(fn):
        return list(fn())

    report = check(lambda: Groups([1]))
    assert "could not check param_groups" in report.broken and "KeyError" in report.broken, report.broken
    assert "while your code ran line 2 of __iter__ (`raise KeyError(\"student's iterator\")`)" in report.broken, \
        report.broken


# --- lab 8's accelerate loop, checked through the accelerator (issue 45) ----------------------------------------------


def _accelerate_variant(backward="accelerator", clip="accelerator", accumulate=False):
    def train_one_epoch_accelerate(accelerator, model, loader, optimizer, scheduler, max_norm):
        model.train()
        total, seen, norms = 0.0, 0, []
        for x, y in loader:
            with accelerator.accumulate(model) if accumulate else contextlib.nullcontext():
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss) if backward == "accelerator" else loss.backward()
                norm = (accelerator.clip_grad_norm_(model.parameters(), max_norm) if clip == "accelerator" else
                        clip_grad_norm_(model.parameters(), max_norm))
                optimizer.step()
                scheduler.step()
            norms.append(norm.item())
            losses = accelerator.gather_for_metrics(loss.detach().repeat(len(y))) if accumulate else None
            total += (losses.sum().item() if accumulate else loss.item() * len(y))
            seen += len(y)
        return total / seen, norms
    return train_one_epoch_accelerate


def test_the_accelerate_loop_is_checked_through_the_accelerator():
    """accelerate's accumulate() and gather_for_metrics() are correct there; loss.backward() and a plain
    clip_grad_norm_ are not (both break fp16), even where the check's one-CPU accelerator makes them equal; a part of
    accelerate the check's accelerator lacks is "could not check", not the student's AttributeError."""
    report = checks.check_train_one_epoch_accelerate(_accelerate_variant(accumulate=True))
    assert report.passed, str(report)
    for backward, clip, said in (("loss", "accelerator", "called loss.backward() itself"),
                                 ("accelerator", "torch", "called torch.nn.utils.clip_grad_norm_ itself")):
        failed = checks.check_train_one_epoch_accelerate(_accelerate_variant(backward, clip))
        assert [f.check for f in failed.failures] == ["accelerator"] and said in failed.failures[0].message, \
            str(failed)

    def uses_more(accelerator, model, loader, optimizer, scheduler, max_norm):
        accelerator.save_state("somewhere")

    lacking = checks.check_train_one_epoch_accelerate(uses_more)
    assert lacking.broken and "could not check" in lacking.broken and "'save_state'" in lacking.broken, str(lacking)


@pytest.mark.parametrize("name, wrong", [
    ("softmax_before_cross_entropy", ("mean_loss", "Add loss.item() * len(y)")),
    ("clip_before_backward", ("norms", "append what clip_grad_norm_ returns"))])
def test_a_mistake_elsewhere_is_not_blamed_on_what_the_loop_reports(name, wrong):
    """A softmax before F.cross_entropy: the loop averages its own loss per sample as asked, so the message is about
    the softmax only, never "add loss.item() * len(y)". A clip before backward: the loop logs what clip_grad_norm_
    returned, as asked, so the message is about the clip's place only, never "append what clip_grad_norm_ returns"."""
    variant = next(v for v in BUGGY if v.name == name)
    report = run_check(variant)
    prop, advice = wrong
    assert properties.verdicts(variant.exercise, report)[prop].passed
    assert not any(advice in f.message for f in report.failures), [f.message for f in report.failures]
    assert [f.check for f in report.failures] == [variant.expected_check], [f.message for f in report.failures]


def test_not_judged_names_the_test_that_failed_not_one_that_is_itself_waiting():
    """backward without scaler.scale: the scaler test fails on evidence; the loop test is only "not judged" behind
    it, and so are autocast and unscale. They name the scaler test to fix first, the end of the chain, never the
    loop test that says "not judged" itself."""
    variant = next(v for v in BUGGY if v.name == "backward_without_scale")
    verdicts = properties.verdicts(variant.exercise, run_check(variant))
    assert verdicts["scaler"].judged and not verdicts["scaler"].passed
    for waiting in ("autocast", "unscale", "loop"):
        assert verdicts[waiting].blocked_by == ["test_train_one_epoch_scaler"], verdicts[waiting]
        assert "Fix test_train_one_epoch_scaler first" in verdicts[waiting].message


@pytest.mark.parametrize("name", ["evaluate_percentage", "resume_saves_every_step"])
def test_one_mistake_is_said_once_even_when_two_stages_or_two_runs_see_it(name):
    """A percentage seen by the return value's range and by the accuracy's own check, and a save_every ignored in
    the first run and in the run with varied arguments: one message each, the first run's."""
    variant = next(v for v in BUGGY if v.name == name)
    failures = run_check(variant).failures
    assert [f.check for f in failures] == [variant.expected_check], [f.message for f in failures]


def test_resuming_one_step_late_is_not_called_not_resuming():
    """The off-by-one loop loads the newest checkpoint and goes on one step too late: the exactness it cannot be
    judged on yet says that, not that nothing was loaded."""
    variant = next(v for v in BUGGY if v.name == "resume_off_by_one")
    exact = properties.verdicts(variant.exercise, run_check(variant))["exact"]
    assert not exact.judged and "with the step after it" in exact.message, exact.message
