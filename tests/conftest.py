"""Per-lab pytest markers (``pytest -m lab04``), derived from the exercise registry (labutils/exercises.py).

A test gets the marker of every notebook its parameters name: a notebook id ("04_accumulation"), an exercise id
("accumulation"), or an object with an ``exercise`` attribute (a mutant corpus variant).

Also: the suite runs on the CPU (``LAB_DEVICE=cpu`` unless given) with one torch thread in each xdist worker, and
the ``cuda`` tests are skipped, with one reason, where torch sees no CUDA GPU.
"""

from __future__ import annotations

import os

import pytest

from labutils import exercises


def pytest_configure(config):
    # the suite's expectations are the CPU's: on a machine with a GPU, device="auto" would pick it for every run and
    # notebook the tests start. The GPU has its own tests (-m cuda, tests/test_cuda.py), which set LAB_DEVICE
    # themselves; a LAB_DEVICE given on the command line is kept.
    os.environ.setdefault("LAB_DEVICE", "cpu")
    # One torch thread in each xdist worker: `-n auto` (the Makefile) runs one worker per core, and a second thread
    # in each only fights the other worker for the other core (OpenMP's idle threads spin). Measured with
    # `pytest --durations=0` over the whole suite: tests/test_loop.py 11.4 -> 0.9 s, test_lesson.py 12.8 -> 5.8 s.
    # Only this process: what the tests start (a grader, a kernel, a training run) keeps its own threads.
    if hasattr(config, "workerinput"):
        import torch

        torch.set_num_threads(1)
    for notebook in exercises.NOTEBOOKS:
        marker = exercises.lab_marker(notebook.id)
        config.addinivalue_line("markers", f"{marker}: tests of {notebook.id} (its exercises and notebook)")


def _notebooks(value) -> set[str]:
    """The notebooks a test parameter names."""
    notebook_ids = {n.id for n in exercises.NOTEBOOKS}
    exercise_ids = {e.id: e.notebook for e in exercises.EXERCISES}
    value = getattr(value, "exercise", value)
    if isinstance(value, str):
        if value in notebook_ids:
            return {value}
        if value in exercise_ids:
            return {exercise_ids[value]}
    return set()


# The modules that take longest, run first: `--dist loadfile --no-loadscope-reorder` (the Makefile) hands modules to
# xdist workers in collection order, so one of these started last would run alone at the end (xdist's own order, by
# number of tests, started the 451 quick tests of test_checks first and left test_autograder to the middle). Seconds
# of each module in a quiet suite on the 2-core AVX-512 machine (wall, `pytest --durations=0` summed per module):
# autograder 185, dask 152, checks ~130 (76, and the corpus judged apart that test_evidence held), gradescope 111,
# confinement_class 97, grade_resume 95, notebooks 62, hostile 60, formgrader 44, student_lab 44, doors 41,
# handout_setup 35, stubs 26, deadlines_exports 22, resume 21, evidence ~21, verdict_data 19, confinement 19,
# sample_exercise 17, grade_postgres 17. A module not listed (each under 15 s) keeps its place after them.
LONGEST_FIRST = ("test_autograder.py", "test_grade_dask.py", "test_checks.py", "test_gradescope.py",
                 "test_confinement_class.py", "test_grade_resume.py", "test_notebooks.py", "test_hostile.py",
                 "test_formgrader.py", "test_student_lab.py", "test_doors.py", "test_handout_setup.py", "test_stubs.py",
                 "test_deadlines_exports.py", "test_resume.py", "test_evidence.py", "test_verdict_data.py",
                 "test_confinement.py", "test_sample_exercise.py", "test_grade_postgres.py")


def _longest_first(items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a module's own order is kept


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    no_gpu = _no_gpu_reason(items)
    for item in items:
        if no_gpu and item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.skip(reason=no_gpu))
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        names = set()
        for value in callspec.params.values():
            names |= _notebooks(value)
        for notebook in sorted(names):
            item.add_marker(exercises.lab_marker(notebook))


@pytest.fixture(scope="session")
def autograder_cli():
    """``autograder_cli(*args, cwd=, env=, timeout=)``: ``python -m autograder ARGS`` as ``subprocess.run`` with
    captured text gives it back, run in a fork of one warm process of this worker's (tests/forked_graders.py: its
    imports and its zygote paid once). For tests of what a command grades, writes and says; tests of how the grader's
    processes live and die start real ones."""
    import forked_graders

    server = forked_graders.GraderServer()
    yield server.run
    server.close()


@pytest.fixture(scope="session")
def tiny_class(tmp_path_factory, request, autograder_cli):
    """The browser tests' tiny class (tests/browser/grading.py), graded by ``python -m autograder grade`` once per
    test run: under xdist the first worker to ask grades it into the run's shared temp folder (a file lock keeps the
    others waiting) and every worker reads that one course. Tests that change the course change a copy (copy_of)."""
    from browser.grading import shared_class
    if not hasattr(request.config, "workerinput"):  # not an xdist worker: this session's own folder
        return shared_class(tmp_path_factory.mktemp("tiny-class") / "class", autograder_cli)
    return shared_class(tmp_path_factory.getbasetemp().parent / "tiny-class", autograder_cli)


def _no_gpu_reason(items) -> str | None:
    """Why the ``cuda`` tests cannot run here, or None where they can. torch is imported only when one is selected;
    the question is asked once, so every skipped test gives the same reason."""
    if not any(item.get_closest_marker("cuda") for item in items):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return f"no CUDA GPU here (torch {torch.__version__}: torch.cuda.is_available() is False)"


@pytest.fixture(autouse=True)
def _worker_threads_kept():
    """``lesson.start`` gives a notebook's process the cores other work leaves free (labutils.threads); a test that
    calls it in this process leaves the worker its one thread afterwards."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
