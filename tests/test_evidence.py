"""Issue 16, door 2: a hidden test is judged in a process no student code ran in, from evidence it cannot forge into
a verdict (labutils/checks/evidence.py and the modules it names, autograder/hidden/recheck.py).

- The codec carries plain data, tensors, trace events and the check's sentinels, and refuses everything else (a
  pickle is never unpickled).
- Every variant of the mutation corpus, correct and buggy, is judged apart (observer child, judge parent) exactly
  as it is judged in place (tests/test_checks.py, beside the in-place report it reuses); every cheating answer earns
  there what it implements.
- A forger in the observer who sends records of its own gets what those records show: a made-up run of a loop that
  did nothing earns nothing, and a record that does not fit the check fails it.
- Through a real zygote and sandbox: a notebook that writes verdict lines and records to every descriptor it has, and
  tries the judge's descriptors through /proc, scores nothing; the same test cells on a correct loop pass. A cell's
  forked sleeper that holds the pipes does not hold the judge, nor the grader waiting for the reply.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import traceback
from pathlib import Path

import pytest
import torch

from labutils import checks, exercises
from labutils.checks import error_facts, evidence, properties, records, state, wire
from labutils.trace import Event
from autograder.sandbox import isolation

import judging
import mutants
import stubs
from autograder_cases import zygote_recheck


# --- the codec -------------------------------------------------------------------------------------------------------


class StudentThing:
    def __len__(self):
        return 3


def test_records_round_trip_plain_data_tensors_events_and_parameters():
    model = torch.nn.Linear(3, 2)
    tensors = [torch.randn(2, 3), torch.randn(4).to(torch.bfloat16), torch.arange(5), torch.zeros(0, 3),
               torch.tensor([True, False]), torch.randn(3, dtype=torch.float64).requires_grad_()]
    folder = "/tmp/some-check-folder"
    value = {
        "tensors": tensors, "tuple": (1, 2.5, None, "x"), 7: {"int keys": True}, "bytes": b"\x00\x01",
        "path": Path(folder) / "step-000002.pt", "text": f"saved to {folder}/last.pt", "dtype": torch.bfloat16,
        "device": torch.device("cpu"), "event": Event("step", 1, {"lr": [0.1]}, {"grads": [tensors[0], None]}),
        "param": model.weight, "student": StudentThing(), "sentinel": properties,
    }
    refs = state.parameter_refs((model,))
    data = wire.encode(value, {id(t): list(r) for r, t in refs.items()}, {folder: "\x00folder0\x00"},
                           {"THE_MODULE": properties})
    other = torch.nn.Linear(3, 2)
    back = wire.decode(data, state.parameter_refs((other,)), {"\x00folder0\x00": "/tmp/judge-folder"},
                           {"THE_MODULE": properties})
    for a, b in zip(tensors, back["tensors"]):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.detach(), b.detach())
    assert back["tensors"][-1].requires_grad
    assert back["tuple"] == (1, 2.5, None, "x") and back[7] == {"int keys": True} and back["bytes"] == b"\x00\x01"
    assert back["path"] == Path("/tmp/judge-folder/step-000002.pt")
    assert back["text"] == "saved to /tmp/judge-folder/last.pt"
    assert back["dtype"] is torch.bfloat16 and back["device"] == torch.device("cpu")
    assert isinstance(back["event"], Event) and back["event"].info == {"lr": [0.1]}
    assert torch.equal(back["event"].data["grads"][0], tensors[0]) and back["event"].data["grads"][1] is None
    assert back["param"] is other.weight, "a parameter of a module the call was handed comes back as the judge's own"
    assert isinstance(back["student"], wire.Opaque) and type(back["student"]).__name__ == "StudentThing"
    assert back["sentinel"] is properties


class Bomb:
    def __reduce__(self):
        return (os.system, (f"touch {tempfile.gettempdir()}/looplab-unpickled",))


@pytest.mark.parametrize("payload", [
    pickle.dumps(Bomb()), b"", b"\x05\x00\x00\x00\x00\x00\x00\x00{}", b'{"type": "CheckLine", "body": {}}\n',
    wire.encode({"x": 1})[:-1] + b"\x00\x00",
    wire.encode(torch.ones(3))[:-4],
], ids=["pickle", "empty", "short", "check-line", "trailing", "truncated-tensor"])
def test_anything_else_is_refused_and_never_run(payload):
    marker = Path(tempfile.gettempdir()) / "looplab-unpickled"
    marker.unlink(missing_ok=True)
    with pytest.raises(records.EvidenceError):
        wire.decode(payload)
    assert not marker.exists()


@pytest.mark.parametrize("tree", [{"T": [0, "float32", [2], False, False]}, {"Z": 1}, {"y": "complex128"},
                                  {"P": [0, "weight"]}, {"d": [[{"l": []}, 1]]}, [1, 2]])
def test_malformed_trees_are_refused(tree):
    import json
    import struct

    body = json.dumps(tree).encode()
    with pytest.raises(records.EvidenceError):
        wire.decode(struct.pack("<II", len(body), 0) + body)


def test_a_record_larger_than_the_limit_is_refused_before_it_is_read():
    r, w = os.pipe()
    os.write(w, (wire.MAX_MESSAGE + 1).to_bytes(8, "little"))
    with pytest.raises(records.EvidenceError, match="bytes"):
        wire.receive(r)
    os.close(r), os.close(w)


def test_a_stream_that_ends_inside_a_frame_is_refused():
    for partial in (b"\x05\x00\x00", (10).to_bytes(8, "little") + b"four"):
        r, w = os.pipe()
        os.write(w, partial)
        os.close(w)
        with pytest.raises(records.EvidenceError, match="inside a record"):
            wire.receive(r)
        os.close(r)


def test_the_end_of_a_check_that_stopped_early_is_kept_for_its_turn():
    """A check the observer left before a call the judge is at (sys.exit in the student's function): the judge's
    call fails, and the check's end is still there for the judge to read, so the next check is not misread."""
    end = records.CheckEnd(call=["01_baseline", "train_one_epoch", "steps"], tampered=[], error="SystemExit: 0")
    r, w = os.pipe()
    wire.send(w, wire.encode(end))
    os.close(w)
    judge = evidence.Judge(r)
    with pytest.raises(records.EvidenceError, match="ended before this call"):
        judge.record((), {})
    assert judge.message() == end and judge.message() is None
    os.close(r)


# --- the cheating answers judged apart ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _one_data_seed():
    """The observer (a fork of this process) and the judge build their checks' data from one seed, as the recheck's
    do from the seed its judge draws (autograder.hidden.recheck.data_seed)."""
    from labutils.checks import world

    with world.seeded(20240917):
        yield


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with judging.one_thread():
        yield


@pytest.mark.parametrize("cheat", stubs.CHEATS, ids=lambda c: c.name)
def test_a_cheating_answer_earns_through_the_judge_exactly_what_it_really_does(cheat):
    """Issue 43: as the grader judges it (an observer that runs it, a judge that never did), each answer of a student
    who has read the checks earns what it implements and nothing more; its memory-keeping calls run apart in the
    observer, and their records reach the judge as any other."""
    report = judging.judged_apart(cheat.exercise, cheat.functions())
    assert {p for p, v in properties.verdicts(cheat.exercise, report).items() if v.passed} == set(cheat.earns), \
        str(report)


# --- forgers in the observer ------------------------------------------------------------------------------------


NOTHING_RAN = {"events": [], "result": None, "reference": None, "crashed": False, "moves": [], "error": None}


def _forge_runs(record: dict, calls: int = 4):
    """An observer that sends a CallRecord of ``record``'s fields (the others as :data:`NOTHING_RAN`) for every call,
    with the objects left untouched (a run that was never made)."""
    from labutils.checks import world
    from labutils.checks.train_run import train_case

    def body(fd):
        case = train_case("baseline", world.run_seed())
        observer = evidence.Observer(fd)
        for _ in range(calls):
            observer.after_call(records.CallRecord(**{**NOTHING_RAN, **record}), case.args, {})

    return body


def test_a_made_up_run_of_a_loop_that_did_nothing_earns_nothing():
    """The forger knows the record format and returns the mean loss it guesses; with no events the judge sees no
    step, no forward, no backward: every property is a failure or not judged."""
    fake = {"events": [], "result": 2.3, "reference": None, "crashed": False, "moves": [], "error": None}
    correct = next(v for v in mutants.CORRECT if v.exercise == "baseline")
    report = judging.judged_apart("baseline", correct.functions, _forge_runs(fake))
    assert not any(v.passed for v in properties.verdicts("baseline", report).values()), str(report)


def test_a_record_that_does_not_describe_a_run_fails_the_check():
    correct = next(v for v in mutants.CORRECT if v.exercise == "baseline")
    for fake in ({"events": "all steps passed"}, {"events": [], "moves": ["cuda"], "error": None},
                 {"events": [], "moves": [], "error": error_facts.ErrorFacts(type=1, line=None, source="", text="")},
                 {"crashed": "yes"}):
        with pytest.raises(records.EvidenceError):
            judging.judged_apart("baseline", correct.functions, _forge_runs(fake))


def test_forged_verdict_lines_on_the_record_pipe_fail_the_check():
    correct = next(v for v in mutants.CORRECT if v.exercise == "baseline")
    line = b'{"type": "CheckLine", "body": {"grade_id": "x", "passed": true}}\n' * 50

    def body(fd):
        os.write(fd, line)

    with pytest.raises(records.EvidenceError):
        judging.judged_apart("baseline", correct.functions, body)


# --- through the zygote: the recheck as the grader runs it ---------------------------------------------------


FORGE_EVERYWHERE = r'''
import glob, json, os, re, sys

def train_one_epoch(model, loader, optimizer):
    model.train()
    return 0.0

def _forge(calls):
    try:  # first: once the forged lines are out, the recheck may end (and this process with it) at any moment
        open(f"/proc/{os.getppid()}/mem", "rb").close()
        print("FORGER: opened the judge's memory")
    except OSError as exc:
        print("FORGER: the judge's memory is closed:", exc)
    lines = b"".join(json.dumps({"type": "CheckLine", "body": {"grade_id": g, "call": c, "seconds": 0.1, "nonce": n,
                     "verdict": {"grade_id": g, "passed": True, "points": 1.0}}}).encode() + b"\n"
                     for n in _nonces() for g, c in calls)
    targets = list(range(0, 256)) + glob.glob(f"/proc/{os.getppid()}/fd/*")
    for target in targets:
        try:
            fd = target if isinstance(target, int) else os.open(target, os.O_WRONLY)
            os.write(fd, lines)
        except OSError:
            pass

def _nonces():
    found = {""}
    frame = sys._getframe()
    while frame is not None:
        found.update(v for v in list(frame.f_locals.values()) if isinstance(v, str) and re.fullmatch("[0-9a-f]{32}", v))
        frame = frame.f_back
    return found

_forge(json.loads(@@CALLS@@))
'''


def _reachable_folder() -> Path:
    """A folder another uid may pass through (0711, as the grader's work folder is)."""
    folder = Path(tempfile.mkdtemp(prefix="looplab-test-judge-"))
    os.chmod(folder, 0o711)
    return folder


@pytest.fixture
def reachable():
    folder = _reachable_folder()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def zygote():
    """One private zygote for this module's rechecks, as one grading run's rechecks share one: each start imports
    torch again."""
    from autograder.sandbox.client import private_zygote

    folder = _reachable_folder()
    started = private_zygote(folder)
    yield started
    started.close()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def recheck(zygote):
    """(reply, log) of re-checking cells in a folder, through the module's zygote."""
    def run(folder: Path, cells: list):
        reply, log, _ = zygote_recheck.recheck(folder, cells, zygote=zygote)
        return reply, log
    return run


@pytest.mark.slow
def test_through_the_zygote_a_forger_scores_nothing_and_a_correct_loop_everything(reachable, recheck):
    from autograder.channel import RecheckCell

    exercise = exercises.get("baseline")
    calls = [[exercise.notebook, "train_one_epoch", p.id] for p in exercise.properties]
    correct = next(v for v in mutants.CORRECT if v.exercise == "baseline")
    import json

    def cells(solution: str) -> list:
        return [RecheckCell(index=0, source=mutants.IMPORTS), RecheckCell(index=1, source=solution),
                RecheckCell(index=2, grade_id="baseline-tests", checks=calls)]

    forger = FORGE_EVERYWHERE.replace("@@CALLS@@", repr(json.dumps([["baseline-tests", c] for c in calls])))
    (reachable / "forger").mkdir()
    (reachable / "honest").mkdir()
    os.chmod(reachable / "forger", 0o711), os.chmod(reachable / "honest", 0o711)
    forged, forged_log = recheck(reachable / "forger", cells(forger))
    honest, honest_log = recheck(reachable / "honest", cells(mutants.source(correct)))
    assert honest.status == "exited" and len(honest.lines) == len(calls), honest_log[-3000:]
    assert all(line.verdict.passed for line in honest.lines), [line.verdict.message for line in honest.lines]
    assert forged.status == "exited", forged_log[-3000:]
    assert len(forged.lines) == len(calls), (forged.lines, forged_log[-3000:])
    assert not any(line.verdict.passed for line in forged.lines), [line.verdict.message[:200] for line in forged.lines]
    assert "the judge's memory is closed" in forged_log, forged_log[-2000:]


@pytest.mark.slow
def test_a_recheck_the_oom_killer_stops_at_its_tasks_memory_limit_says_so(reachable, zygote):
    """A run's share of memory is each task cgroup's limit: a re-run that goes past it is stopped there by the OOM
    killer (not the zygote or the grader), and the reply says so (the grader then knows it was memory: a notebook's
    own doing where the share is ample, the machine's where it is short, autograder.run.machine)."""
    from autograder.channel import RecheckCell

    if "cgroup" not in zygote.ready.isolation or zygote.ready.isolation["cgroup"]:
        pytest.skip(f"no task cgroups here: {zygote.ready.isolation.get('cgroup')}")
    train = exercises.get("baseline")
    reply, log, _ = zygote_recheck.recheck(reachable, [
        RecheckCell(index=0, source="hog = b'x' * (400 << 20)"),  # 400 MB written, in a task that may hold 96
        RecheckCell(index=1, grade_id="train", checks=[[train.notebook, "train_one_epoch", train.properties[0].id]])],
        zygote=zygote, task_memory_mb=96)
    assert reply.oom_killed and reply.status == "exited", (reply, log[-2000:])
    assert [line.verdict.causes for line in reply.lines] == [["stopped"]], reply.lines


@pytest.mark.slow
def test_a_function_that_exits_during_its_check_costs_only_its_own_tests(reachable, recheck):
    """sys.exit() inside train_one_epoch ends that check in the observer; the evaluate test after it is still
    judged, and passes."""
    from autograder.channel import RecheckCell

    train, evaluate = exercises.get("baseline"), exercises.get("evaluate")
    exits = f"def {train.functions[0].call}:\n    import sys\n    sys.exit(0)\n"
    correct = next(v for v in mutants.CORRECT if v.exercise == "evaluate")
    reply, log = recheck(reachable, [
        RecheckCell(index=0, source=mutants.IMPORTS), RecheckCell(index=1, source=exits),
        RecheckCell(index=2, source=mutants.source(correct)),
        RecheckCell(index=3, grade_id="train", checks=[[train.notebook, "train_one_epoch", p.id]
                                                       for p in train.properties]),
        RecheckCell(index=4, grade_id="evaluate", checks=[[evaluate.notebook, "evaluate", p.id]
                                                          for p in evaluate.properties])])
    verdicts = {(line.grade_id, line.call[-1]): line.verdict.passed for line in reply.lines}
    assert len(verdicts) == len(train.properties) + len(evaluate.properties), log[-2000:]
    assert not any(v for (grade_id, _), v in verdicts.items() if grade_id == "train"), verdicts
    assert all(v for (grade_id, _), v in verdicts.items() if grade_id == "evaluate"), (verdicts, reply.lines)
    first, *later = [line.verdict.message for line in reply.lines if line.grade_id == "train"]
    assert "did not return in the grader's re-run" in first, first
    for message in later:  # as the kernel says it: the judge remembers the check that never returned
        assert "did not return in the graded test above it (SystemExit)" in message, message


@pytest.mark.slow
def test_an_observer_that_exits_while_its_child_holds_the_pipe_stops_the_judge_at_once(reachable, recheck):
    """The judge watches the observer's pidfd: a sleeper forked by a cell keeps the record pipe open, and the judge
    still sees the end when the observer exits, and says the test stopped (not a wait until the time limit)."""
    import time

    from autograder.channel import RecheckCell

    exercise = exercises.get("baseline")
    call = [exercise.notebook, "train_one_epoch", exercise.properties[0].id]
    exits = "import os, time\nif os.fork() == 0:\n    time.sleep(120)\n    os._exit(0)\nos._exit(0)"
    started = time.monotonic()
    reply, log = recheck(reachable, [RecheckCell(index=0, source=exits),
                                      RecheckCell(index=1, grade_id="baseline-tests", checks=[call])])
    assert time.monotonic() - started < 60, log[-2000:]
    assert reply.status == "exited" and [line.verdict.passed for line in reply.lines] == [False], (reply, log[-2000:])
    assert "stopped before it finished" in reply.lines[0].verdict.message


@pytest.mark.slow
def test_a_forked_child_holding_the_recheck_pipe_does_not_hold_the_grader(reachable, zygote):
    """A notebook cell that forks a sleeper (which inherits the recheck's verdict pipe) must not keep the zygote
    reading until the sleeper wakes: the reply comes when the recheck itself exits."""
    import json

    from autograder.channel import RecheckCell

    sleeper = ("import os, time\nif os.fork() == 0:\n    time.sleep(120)\n    os._exit(0)\nprint('forked')\n"
               "print('processes:', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    reply, log, seconds = zygote_recheck.recheck(reachable, [  # a test after the cell: the judge waits for it
        RecheckCell(index=0, source=sleeper),
        RecheckCell(index=1, grade_id="t", checks=[["01_baseline", "train_one_epoch"]])], timeout=100, cell_timeout=30,
        zygote=zygote)
    assert reply.status == "exited", (reply, log[-2000:])
    assert seconds < 60, f"the zygote waited {seconds:.0f} s for the sleeper"
    if not isolation.probe()["pid"]:  # the task's namespace: the judge (PID 1), its observer and the sleeper only
        seen = next(line for line in log.splitlines() if "processes:" in line)
        processes = json.loads(seen.split(":", 1)[1])
        assert processes[0] == 1 and len(processes) == 3, seen


RECORDS = [
    records.CheckBegin(call=["01_baseline", "train_one_epoch", "steps"], problem=None, fresh=True,
                        functions=[["train_one_epoch", [["model", 1, False]]]]),
    records.AfterCall(run=records.CallRecord(events=[Event("step", 1, {"lr": [0.1]}, {})], result=(2.5, [1.0]),
                                               reference=None, crashed=False, moves=[torch.device("cpu")],
                                               error=error_facts.ErrorFacts(type="KeyError", line=3, source="x[k]",
                                                                         text="'k'")),
                       args=[None, {"state": {"w": torch.ones(2)}}], kwargs={}, rng={"torch": torch.zeros(3)},
                       folders=[{"a.pt": b"\x00"}]),
    records.CheckEnd(call=["01_baseline", "train_one_epoch", "steps"], tampered=["torch.optim.SGD.step"],
                      error=None),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_records_are_declared_types_and_come_back_as_their_own_type(record):
    """Every observer -> judge message is a dataclass of records.RECORDS: decoded into the same type, nested ones too"""
    back = wire.decode(wire.encode(record))
    assert type(back) is type(record) and type(back).__name__ in records.RECORDS
    assert str(back) == str(record)  # tensors compare by value in their repr
    if isinstance(back, records.AfterCall):
        assert type(back.run) is records.CallRecord and type(back.run.error) is error_facts.ErrorFacts


def test_a_record_with_a_field_of_another_type_or_name_is_refused():
    import json
    import struct

    good = json.loads(wire.encode(RECORDS[2])[8:])
    for body in ({**good["body"], "call": "01_baseline"}, {**good["body"], "error": 3}, {**good["body"], "x": 1},
                 {k: v for k, v in good["body"].items() if k != "call"}):
        tree = json.dumps({"type": "CheckEnd", "body": body}).encode()
        with pytest.raises(records.EvidenceError):
            wire.decode(struct.pack("<II", len(tree), 0) + tree)
    with pytest.raises(records.EvidenceError):  # a channel message is not a record
        tree = json.dumps({"type": "CheckLine", "body": {}}).encode()
        wire.decode(struct.pack("<II", len(tree), 0) + tree)


# --- evidence that does not fit is "could not check", never a tampering accusation (issue 45) ----------------------


def _judge_one_from(observer_body, call):
    """The judge's verdict on ``call`` (recheck._judge_one) from what ``observer_body(fd)`` wrote."""
    from autograder.hidden import recheck

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            observer_body(w)
        except BaseException:
            traceback.print_exc()
        os._exit(0)
    os.close(w)
    try:
        return recheck._judge_one(evidence.Judge(r), tuple(call), checks, {}, {})
    finally:
        while wire.receive(r) is not None:
            pass
        os.close(r)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("passing", [True, False], ids=["pass", "fail"])
def test_calls_the_judge_did_not_replay_are_not_called_tampering(passing):
    """An honest observer's check, with one more call's record than the judge's check makes: the judge keeps a
    failing verdict as it is, turns a pass into "could not check" (0 points, not judged), and accuses no one."""
    from autograder.hidden.recheck import _begin

    variant = next(v for v in mutants.VARIANTS if v.exercise == "param_groups" and v.correct == passing)
    call = ["08_stretch", "param_groups", "coverage"]

    def body(fd):
        observer, cache = evidence.Observer(fd), {}
        observer.message(_begin(tuple(call), {"param_groups": variant.function}, cache))
        with evidence.playing(observer):
            properties.report_for("param_groups", variant.functions, checks, cache)
            checks.check_param_groups(variant.function)  # calls the judge's check does not make
        observer.message(records.CheckEnd(call=call, tampered=[], error=None))

    verdict = _judge_one_from(body, call)
    assert not verdict.passed and verdict.points == 0, verdict
    assert "grader's channels" not in verdict.message and "tamper" not in verdict.message, verdict.message
    if passing:
        assert not verdict.judged and verdict.causes == ["evidence"] and "could not check" in verdict.message, verdict
