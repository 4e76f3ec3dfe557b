"""The zygote's preload: what kernels inherit from it must be whole; and what it counts as left running after a task."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_preload_that_fails_halfway_leaves_no_half_initialised_module(tmp_path, monkeypatch, capsys):
    """A package whose import fails after importing a submodule (which holds the aborted package) is forgotten whole,
    submodule included, so a forked kernel imports it afresh instead of meeting "partially initialized module"."""
    from autograder.sandbox import zygote

    package = tmp_path / "halfway_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import sub\nraise RuntimeError('a passing failure')\n")
    (package / "sub.py").write_text("import halfway_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert zygote._import_or_forget("halfway_pkg") is False
    assert not [name for name in sys.modules if name.startswith("halfway_pkg")]
    assert "could not preload halfway_pkg: RuntimeError('a passing failure')" in capsys.readouterr().err
    (package / "__init__.py").write_text("from . import sub\n")
    assert zygote._import_or_forget("halfway_pkg") is True and "halfway_pkg.sub" in sys.modules


def test_an_optimizer_the_zygote_cannot_prewarm_is_said(monkeypatch, capsys):
    """Every torch optimizer is built once before kernels fork (the first one imports torch._dynamo); one that
    cannot be is named in the zygote's log, not passed over in silence (a recheck would later see torch change), and
    each of torch's own is built without a word."""
    import torch

    from autograder.sandbox import zygote

    class Refuses(torch.optim.SGD):
        def __init__(self, params):
            raise ValueError("not with these parameters")

    monkeypatch.setattr(torch.optim, "Refuses", Refuses, raising=False)
    zygote._prewarm_optimizers()
    assert capsys.readouterr().err.splitlines() == [
        "zygote: could not prewarm Refuses: ValueError('not with these parameters')"]


def test_a_fork_of_the_frozen_heap_copies_no_page_to_collect_it():
    """The zygote freezes what its imports made before it forks: a fork's full garbage collection then walks none of
    it, so it copies none of its pages (without it: 0.27 s of CPU and 24,000 page faults per kernel, torch loaded)."""
    import gc
    import os
    import resource

    from autograder.sandbox import zygote

    heap = [{"n": i} for i in range(300_000)]  # what the imports leave: long-lived objects the fork inherits

    def faults_of_a_forks_collection() -> int:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            gc.collect()
            os.write(wfd, str(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before).encode())
            os._exit(0)
        os.close(wfd)
        os.waitpid(pid, 0)
        with os.fdopen(rfd) as reply:
            return int(reply.read())

    try:
        unfrozen = faults_of_a_forks_collection()
        zygote._freeze_heap()
        frozen = faults_of_a_forks_collection()
    finally:
        gc.unfreeze()
    assert len(heap) == 300_000 and unfrozen > 2_000 and frozen < unfrozen / 10, (unfrozen, frozen)


def test_a_zygote_reads_the_users_data_cache_instead_of_decompressing_its_own(tmp_path, monkeypatch):
    """Each run's zygote has a HOME of its own; the data cache stays the user's (decompressed once), unless it can
    neither hold the data nor be made, and then it is one in the zygote's HOME."""
    from autograder.sandbox import client, zygote
    from labutils import data_files

    cache, home = tmp_path / "cache", tmp_path / "zygote-home"
    monkeypatch.setenv("LAB_CACHE_DIR", str(cache))
    data_files.stage(data_files.find_raw_dir(), cache)
    assert data_files.staged(cache)
    assert client.zygote_env(home)["LAB_CACHE_DIR"] == str(cache)
    # in the zygote: a kernel may read the data, not the rest of the user's cache
    assert str(cache / "FashionMNIST") in zygote._data_locations()["data_dirs"]
    assert str(cache) not in zygote._data_locations()["data_dirs"]
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LAB_CACHE_DIR", str(tmp_path / "a-file" / "cache"))  # cannot be made
    assert client.zygote_env(home)["LAB_CACHE_DIR"] == str(home / ".cache" / "loop_lab")


def test_a_zygote_nobody_waited_for_is_killed_at_once_not_let_finish_its_warm_up(tmp_path):
    """A run with nothing left to grade closes its zygote while it still imports torch: it is killed then, with
    whatever it started, instead of burning its whole warm-up before it sees its control socket closed."""
    import os
    import signal

    from autograder.sandbox.client import SharedZygote

    zygote = SharedZygote(tmp_path)
    zygote.close()
    assert zygote.proc.returncode == -signal.SIGKILL  # killed: it had not finished its warm-up, nor exited by itself
    try:
        os.killpg(zygote.proc.pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("a process of the zygote's session outlived close()")


def test_a_process_already_dead_is_not_counted_as_left_running():
    """After each task the zygote kills what is left below it, and the task's notes say how many processes the notebook
    left running. One that is already exiting is not: a SIGKILLed kernel still tearing down its memory on a loaded
    machine (the likely reason a resumed run's solution notebook was once noted "1 process(es) left running"), or, as
    here, a zombie not yet reaped. A sleeping child is counted, and killed."""
    script = textwrap.dedent("""
        import os, signal, time
        from autograder.sandbox import policy

        dead = os.fork()
        if dead == 0:
            os._exit(0)
        alive = os.fork()
        if alive == 0:
            time.sleep(60)
            os._exit(0)
        deadline = time.monotonic() + 30
        while open(f"/proc/{dead}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        print(policy.kill_descendants(os.getpid()))
        print(os.waitpid(alive, 0)[1] == signal.SIGKILL, os.waitpid(dead, 0)[1] == 0)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "True", "True"]
