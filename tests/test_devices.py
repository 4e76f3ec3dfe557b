"""labutils.devices: auto picks CUDA, else MPS, else the CPU; LAB_DEVICE replaces auto; a device the machine lacks is
one line that says how to fix it. CUDA and MPS are faked present or absent, so these run on any machine."""

import os
import subprocess
import sys
import time

import pytest
import torch

from labutils import devices, lesson
from labutils.devices import DEVICE_ENV, DeviceError
from labutils.reference import cli


@pytest.fixture
def machine(monkeypatch):
    """Fake what torch sees: ``machine(cuda=2, mps=True)``. LAB_DEVICE starts unset."""
    monkeypatch.delenv(DEVICE_ENV, raising=False)

    def fake(cuda: int = 0, mps: bool = False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "Fake GPU")
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    return fake


@pytest.mark.parametrize("cuda, mps, expected", [(0, False, "cpu"), (0, True, "mps"), (1, False, "cuda"),
                                                 (2, True, "cuda")])
def test_auto_picks_cuda_then_mps_then_cpu(machine, cuda, mps, expected):
    machine(cuda=cuda, mps=mps)
    chosen = devices.choose("auto")
    assert chosen.device == torch.device(expected)
    assert chosen.reason.startswith("auto: ")
    assert ("Fake GPU" in chosen.reason) == (expected == "cuda")  # the student sees which GPU


@pytest.mark.parametrize("env, expected", [("cpu", "cpu"), ("cuda", "cuda"), ("CUDA:1", "cuda:1"), ("mps", "mps"),
                                           ("auto", "cuda")])
def test_lab_device_replaces_auto(machine, monkeypatch, env, expected):
    machine(cuda=2, mps=True)
    monkeypatch.setenv(DEVICE_ENV, env)
    chosen = devices.choose("auto")
    assert chosen.device == torch.device(expected)
    if env != "auto":
        assert chosen.reason == f"LAB_DEVICE={env.lower()}"


def test_a_device_written_in_the_config_wins_over_lab_device(machine, monkeypatch):
    """As a command line wins over the environment: --device cpu stays cpu whatever LAB_DEVICE says."""
    machine(cuda=1)
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    assert devices.resolve("cpu") == torch.device("cpu")
    assert devices.resolve(torch.device("cuda", 0)) == torch.device("cuda:0")  # a torch.device is taken as given


@pytest.mark.parametrize("cuda, mps, env, says", [
    (0, False, "cuda", "LAB_DEVICE='cuda' asks for a CUDA GPU, but"),
    (2, False, "cuda:2", "LAB_DEVICE='cuda:2' asks for GPU 2, but torch sees 2 (cuda:0 to cuda:1)"),
    (1, False, "mps", "LAB_DEVICE='mps' asks for Apple's MPS"),
    (1, True, "gpu", "LAB_DEVICE='gpu' is not a device the lab trains on: use auto, cpu, cuda, cuda:1 or mps"),
    (1, True, "xpu", "LAB_DEVICE='xpu' is not a device the lab trains on"),
])
def test_a_missing_device_is_one_line_with_the_fix_never_a_cpu_fallback(machine, monkeypatch, cuda, mps, env, says):
    machine(cuda=cuda, mps=mps)
    monkeypatch.setenv(DEVICE_ENV, env)
    with pytest.raises(DeviceError) as caught:
        devices.choose("auto")
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert caught.value._render_traceback_() == [f"DeviceError: {message}"]  # what a notebook shows: that line only
    if "asks for" in says:
        assert message.endswith("unset LAB_DEVICE (auto picks what is there) or set LAB_DEVICE=cpu")


def test_a_notebook_shows_the_device_error_as_one_line_not_a_traceback(tmp_path):
    """IPython's own display of the exception (the hook a Jupyter kernel uses): one line, no frames. In a process of
    its own, so that no IPython shell (and its history file) outlives the test."""
    script = ("from IPython.core.interactiveshell import InteractiveShell\n"
              "InteractiveShell.instance().run_cell('from labutils.devices import DeviceError\\n"
              "raise DeviceError(\"LAB_DEVICE=cuda asks for ...\")')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "IPYTHONDIR": str(tmp_path)})
    assert proc.stdout.strip() == "DeviceError: LAB_DEVICE=cuda asks for ...", proc.stdout + proc.stderr


def test_lesson_start_says_which_device_and_precision_and_why(machine, monkeypatch, capsys):
    machine(cuda=0)
    monkeypatch.setenv("LAB_MODE", "smoke")
    monkeypatch.delenv("LAB_AMP", raising=False)
    monkeypatch.setattr("labutils.amp.cpu_has_bf16_instructions", lambda: False)
    cfg = lesson.start("05_amp")
    out = capsys.readouterr().out
    assert cfg.device == "cpu"  # resolved once, here: every cell below reads it
    assert "device: cpu (auto: no CUDA GPU or Apple MPS on this machine)" in out
    assert "precision: float32, autocast off (amp='auto' on a CPU without bf16 instructions" in out


def test_lesson_start_stops_on_a_missing_device(machine, monkeypatch):
    machine(cuda=0)
    monkeypatch.setenv("LAB_MODE", "smoke")
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(DeviceError, match="asks for a CUDA GPU"):
        lesson.start("01_baseline")


def test_the_cli_says_a_missing_device_in_one_line_and_exits_2(machine, monkeypatch, capsys):
    machine(cuda=0)
    monkeypatch.setenv(DEVICE_ENV, "cuda:1")
    assert cli.main(["train", "--subset", "64", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: LAB_DEVICE='cuda:1' asks for a CUDA GPU")


def test_only_a_cuda_device_gets_pinned_batches():
    assert devices.pin_memory("cuda:1") and devices.pin_memory(torch.device("cuda"))
    assert not devices.pin_memory("cpu") and not devices.pin_memory(torch.device("mps"))


def test_the_checks_gpu_run_is_for_notebooks_never_for_grading(machine, monkeypatch):
    """A grade must not depend on the grading machine's hardware: under the grader (evidence.ROLE set) the checks
    never run the student's function on a GPU, even where CUDA is present."""
    from labutils.checks import evidence, on_gpu

    machine(cuda=1)
    assert on_gpu.available()
    monkeypatch.setattr(evidence, "ROLE", object())
    assert not on_gpu.available()
    built = []
    assert on_gpu.failures("evaluate", None, lambda folder: built.append(folder)) == [] and built == []


def test_grading_trains_on_the_cpu_even_where_a_gpu_is(machine, monkeypatch, capsys):
    machine(cuda=1)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert lesson.start("01_baseline").device == "cpu"
    assert "device: cpu (grading runs on the CPU, whatever this machine has)" in capsys.readouterr().out


def test_every_function_that_takes_device_is_checked_with_a_string_and_a_torch_device():
    """The contract says "a torch.device or a string": the main run passes a string, the varied run a torch.device
    with an index (what a loop giving autocast the device itself, or moving tensors to "cpu", fails on)."""
    from labutils import exercises

    taking = [e for e in exercises.EXERCISES if any("device" in f.params for f in e.functions)]
    assert {e.id for e in taking} == {"baseline", "evaluate", "scheduler", "clipping", "accumulation", "amp", "resume"}
    for e in taking:
        assert e.defaults()["device"] == "cpu"
        assert e.varied()["device"] == torch.device("cpu", 0) and isinstance(e.varied()["device"], torch.device)


# --- CPU threads: the cores other work leaves free (labutils.threads) -----------------------------------------------

STAT_BEFORE = "cpu  20 0 20 160 0 0 0 0\ncpu0 10 0 10 80 0 0 0 0 0 0\ncpu1 10 0 10 80 0 0 0 0 0 0\nintr 5\n"
# cpu0: 100 ticks, all of them busy (a spinning process); cpu1: 100 ticks, 10 busy
STAT_AFTER = "cpu  ...\ncpu0 110 0 10 80 0 0 0 0 0 0\ncpu1 15 0 15 170 0 0 0 0 0 0\nintr 9\n"


def test_busy_cores_are_read_from_proc_stat_per_core():
    from labutils import threads

    before, after = threads.cpu_times(STAT_BEFORE, {0, 1}), threads.cpu_times(STAT_AFTER, {0, 1})
    assert before == {0: (20, 100), 1: (20, 100)}
    assert threads.busy_cores(before, after) == pytest.approx(1.1)
    assert threads.cpu_times(STAT_AFTER, {1}) == {1: (30, 200)}  # only the cores this process may run on


@pytest.mark.parametrize("cores, busy, default, expected", [
    (2, 0.0, 2, 2), (2, 0.4, 2, 2), (2, 0.6, 2, 1), (2, 1.0, 2, 1), (2, 2.0, 2, 1), (8, 1.2, 4, 4), (8, 5.0, 4, 3)])
def test_threads_are_the_free_cores_never_more_than_torchs_default_and_at_least_one(cores, busy, default, expected):
    from labutils import threads

    assert threads.free_threads(cores, busy, default) == expected


def test_a_busy_core_beside_the_notebook_leaves_it_one_thread_less(monkeypatch):
    """A real spinning process on a core this process may use is seen as busy (other tests' work only adds to it)."""
    from labutils import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if not threads.STAT.exists() or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs /proc/stat and two cores")
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(torch, "get_num_threads", lambda: cores)  # torch's default: a thread per core
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # spinning by now
        choice = threads.choose()
    finally:
        spinner.kill()
        spinner.wait()
    assert choice.threads < cores and "busy with other work when this notebook started" in choice.reason, choice


def test_lesson_start_says_its_cpu_threads_and_grading_keeps_the_graders(machine, monkeypatch, capsys):
    monkeypatch.setenv("LAB_MODE", "smoke")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    lesson.start("01_baseline")
    assert "CPU threads: 1 (OMP_NUM_THREADS)" in capsys.readouterr().out
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    lesson.start("01_baseline")
    assert "CPU threads" not in capsys.readouterr().out


@pytest.mark.parametrize("quota, expected", [(0.5, 1), (64.0, None)])
def test_threads_never_exceed_the_cgroups_cpu_quota(monkeypatch, quota, expected):
    """A pod with a CPU limit on a large machine: torch's default counts the machine's cores, the quota is what runs."""
    from labutils import threads
    from labutils.limits import Limits

    if not threads.STAT.exists():
        pytest.skip("needs /proc/stat")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(threads, "read_limits", lambda: Limits(cpus=quota, memory_mb=None, used_mb=0, free_mb=0))
    choice = threads.choose()
    if expected is None:
        assert "quota" not in choice.reason and 1 <= choice.threads <= 2, choice
    else:
        assert choice.threads == expected and "its cgroup's quota" in choice.reason, choice


def test_a_moments_spike_is_not_load(monkeypatch):
    """One core fully busy in the first interval only (a browser redrawing as the cell starts), idle in the second:
    the quieter interval counts, and the notebook keeps both threads."""
    from labutils import threads
    from labutils.limits import Limits

    spike = "cpu0 110 0 10 80 0 0 0 0 0 0\ncpu1 10 0 10 180 0 0 0 0 0 0\n"
    quiet = "cpu0 111 0 10 179 0 0 0 0 0 0\ncpu1 11 0 10 279 0 0 0 0 0 0\n"
    readings = iter([STAT_BEFORE, spike, quiet])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "STAT", type("Stat", (), {"read_text": lambda self: next(readings)})())
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(threads, "read_limits", lambda: Limits(cpus=2.0, memory_mb=None, used_mb=0, free_mb=0))
    assert threads.choose().threads == 2
