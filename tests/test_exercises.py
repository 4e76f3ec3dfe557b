"""The exercise registry (labutils/exercises.py) is the one definition of every contract: the checks, the hidden
tests, the mutant corpus and docs/exercises.md agree with it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.hidden import verifier
from labutils import checks, exercises

import mutants

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "exercises.md"
# each exercise's autograded points before the split into properties (issue 10): the total must not change
POINTS = {"normalize": 2, "baseline": 4, "evaluate": 4, "scheduler": 3, "clipping": 3, "accumulation": 4, "amp": 4,
          "checkpoint": 5, "resume": 5, "param_groups": 3}


def test_docs_agree_with_the_registry():
    assert exercises.render_docs(DOCS.read_text()) == DOCS.read_text(), \
        "docs/exercises.md differs from the registry: run python -m labutils.exercises --write docs/exercises.md"
    for e in exercises.EXERCISES:
        for f in e.functions:
            assert f"| {e.notebook} | `{f}` | {f.contract} |" in DOCS.read_text()


def test_the_docs_command_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "exercises.md"
    stale.write_text(DOCS.read_text().replace("param_groups(model, weight_decay)", "param_groups(model)"))
    command = [sys.executable, "-m", "labutils.exercises", str(stale)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1 and "differs from the exercise registry" in result.stderr
    assert subprocess.run(command + ["--write"], cwd=ROOT).returncode == 0
    assert stale.read_text() == DOCS.read_text()


def test_registry_shape():
    assert {e.id: e.points for e in exercises.EXERCISES} == POINTS
    assert [n.id for n in exercises.NOTEBOOKS] == sorted(p.stem for p in (ROOT / "solutions/loop_lab").glob("*.ipynb"))
    for e in exercises.EXERCISES:
        assert callable(getattr(checks, e.check_name)), e.check
        assert e.notebook in {n.id for n in exercises.NOTEBOOKS}
        assert len({p.id for p in e.properties}) == len(e.properties)
        for a in e.arguments:
            assert len(set(map(repr, a.values))) >= 2, f"{e.id}: {a.name} must be varied over two values"
            assert a.property in {p.id for p in e.properties}
    assert checks.TRAIN_EXERCISES == ("baseline", "scheduler", "clipping", "accumulation", "amp")


def test_everything_about_an_exercise_is_in_the_registry():
    """Each exercise names what it may not call, each notebook its grading cost and run settings, in one record."""
    assert len({e.id for e in exercises.EXERCISES}) == len(exercises.EXERCISES)
    assert all(e.forbidden for e in exercises.EXERCISES)
    notebooks = [n.id for n in exercises.NOTEBOOKS]
    assert len(set(notebooks)) == len(notebooks) and set(notebooks) == {e.notebook for e in exercises.EXERCISES}
    assert exercises.notebook("06_checkpointing").fast == {"epochs": 2, "save_every": 5}


def test_lookups_fail_loudly():
    assert exercises.find("06_checkpointing", "load_checkpoint").id == "checkpoint"
    assert exercises.find("01_baseline", "evaluate").id == "evaluate"
    with pytest.raises(ValueError, match="no hidden test for 'nope'"):
        exercises.find("01_baseline", "nope")
    with pytest.raises(ValueError, match="exercise='nope' is unknown"):
        exercises.get("nope")
    with pytest.raises(ValueError, match="has no graded property 'nope'"):
        exercises.get("accumulation").property("nope")


def test_a_graded_test_names_its_concept():
    assert exercises.concept("04_accumulation", "test_train_one_epoch_trailing") == \
        "train_one_epoch also steps the trailing partial window"
    assert exercises.concept("01_baseline", "written_answer") is None  # hand-graded cells are not in the registry


def test_grading_cost_orders_the_notebooks():
    assert exercises.grading_cost("01_baseline") == 1.0 and exercises.grading_cost("99_unknown") == 1.0
    assert max((n.id for n in exercises.NOTEBOOKS), key=exercises.grading_cost) == "00_data_tour"


def test_signatures_come_from_the_registry():
    resume = exercises.function("resume")
    assert str(resume.signature) == ("(model, optimizer, scheduler, train_loader, epochs, ckpt_dir, save_every, "
                                     "device, on_step=None)")
    for variant in mutants.CORRECT:
        e = exercises.get(variant.exercise)
        for fn, contract in zip(variant.functions, e.functions):
            assert verifier.signature_problem(fn, contract) is None, variant.name
            inspect.signature(fn).bind(*contract.params)

    def two_args(model, loader):
        pass

    problem = verifier.signature_problem(two_args, exercises.function("baseline"))
    assert "the contract is train_one_epoch(model, loader, optimizer, device)" in problem


def test_the_grader_side_does_not_import_torch():
    code = "import sys, labutils.exercises; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_mutant_names_come_from_the_registry():
    assert mutants.CONTRACT_NAMES["checkpoint"] == ("save_checkpoint", "load_checkpoint")
    assert set(mutants.CONTRACT_NAMES) == {e.id for e in exercises.EXERCISES}


@pytest.mark.parametrize("exercise", ["clipping", "accumulation", "amp"])
def test_every_max_norm_clips_every_step(exercise):
    """The registry's max_norm values sit below every step's gradient norm, whatever data a run draws: a loop that
    does not clip at max_norm (or clips at a number of its own) changes every step, so the check sees it."""
    from labutils.checks.calling import isolated
    from labutils.checks.train_run import step_norms, train_case

    for which in (0, 1):
        for seed in range(8):  # measured over 200 seeds: every step's norm is at least 2.5 times max_norm
            with isolated():  # one thread, as the checks run: tiny tensors
                case = train_case(exercise, seed, which=which)
                assert case.max_norm == exercises.get(exercise).argument("max_norm").values[which]
                assert case.max_norm < min(step_norms(case)) / 2, seed


def test_hardcoded_values_are_caught_by_name():
    """The issue's example: a loop that clips at 2.0 whatever max_norm it gets fails 03 and 05, naming max_norm."""
    variants = {v.name: v for v in mutants.BUGGY}
    for name in ("clipping_hardcoded_max_norm", "amp_hardcoded_max_norm"):
        report = mutants.run_check(variants[name])
        assert not report.passed and "clipped at 2, not at the max_norm=1.37 it was given" in str(report)


def test_hidden_property_tests_share_one_check_run_through_the_cache():
    """verify(notebook, function, property): every property of an exercise reads one run of its check, kept in the
    cache dict the grader's recheck passes (a module-level cache would be emptied by its restore)."""
    variants = {v.name: v for v in mutants.VARIANTS}
    runs = []

    class Checks:  # the real checks, counted
        def check_train_one_epoch(self, fn, exercise):
            runs.append(exercise)
            return checks.check_train_one_epoch(fn, exercise)

    namespace = {"train_one_epoch": variants["drops_trailing_group"].function}
    cache: dict = {}
    results = {p.id: verifier.run_check(("04_accumulation", "train_one_epoch", p.id), namespace, Checks(), cache)
               for p in exercises.get("accumulation").properties}
    assert runs == ["accumulation"]
    assert {p for p, v in results.items() if not v.passed} == {"trailing"}
    assert "the trailing partial group was dropped" in results["trailing"].message
    assert verifier.describe(("04_accumulation", "train_one_epoch", "trailing")) == \
        "the hidden test test_train_one_epoch_trailing of train_one_epoch"
    with pytest.raises(ValueError, match="no graded property 'nope'"):
        verifier.verify("04_accumulation", "train_one_epoch", "nope")


def test_verify_calls_reads_the_property():
    source = '"""Check x"""\n### BEGIN HIDDEN TESTS\nverify("04_accumulation", "train_one_epoch", "trailing")\n'
    assert verifier.verify_calls(source) == [("04_accumulation", "train_one_epoch", "trailing")]


def _graded_cells(path: Path) -> list[tuple[str, float, str]]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [(c.metadata.nbgrader["grade_id"], float(c.metadata.nbgrader["points"]), c.source) for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
            and not c.metadata.nbgrader.get("solution")]


@pytest.mark.parametrize("folder", ["solutions/loop_lab", "notebooks"])
def test_notebook_graded_cells_match_the_registry(folder):
    """One locked graded cell per property, with the registry's points and grade_id, its docstring the property's
    title; in the solutions the hidden part calls verify(notebook, function, property)."""
    for notebook in exercises.NOTEBOOKS:
        cells = _graded_cells(ROOT / folder / f"{notebook.id}.ipynb")
        want = [(e.grade_id(p.id), float(p.points), e, p) for e in exercises.of_notebook(notebook.id)
                for p in e.properties]
        assert [(g, pts) for g, pts, _ in cells] == [(g, pts) for g, pts, _, _ in want], notebook.id
        for (_, _, source), (_, _, e, p) in zip(cells, want):
            assert source.startswith(f'"""Check that {p.title}"""\n'), source
            assert f'checks.assert_property("{e.id}", "{p.id}", ' in source
            if folder == "solutions/loop_lab":
                assert verifier.verify_calls(source) == [(e.notebook, e.functions[0].name, p.id)]


def test_the_scaffold_prints_the_graded_cells_the_solutions_hold(autograder_cli):
    """``python -m autograder cells ID`` prints a notebook (valid nbformat) whose cells are, source and metadata,
    the exercise's graded cells in its solutions notebook, each heading right before its test."""
    import json

    import nbformat

    from autograder.course.scaffold import graded_cells

    for exercise in exercises.EXERCISES:
        proc = autograder_cli("cells", exercise.id, timeout=60)
        assert proc.returncode == 0, proc.stderr
        printed = nbformat.reads(proc.stdout, as_version=4)
        nbformat.validate(printed)
        assert json.loads(proc.stdout)["cells"] == graded_cells(exercise.id)
        solution = nbformat.read(ROOT / "solutions" / "loop_lab" / f"{exercise.notebook}.ipynb", as_version=4)
        ids = [c.get("id") for c in solution.cells]
        for cell in printed.cells:
            assert cell.id in ids, f"{exercise.notebook} has no cell {cell.id}"
            held = solution.cells[ids.index(cell.id)]
            assert (held.cell_type, held.source, held.metadata) == (cell.cell_type, cell.source, cell.metadata)
        for heading, test in zip(printed.cells[::2], printed.cells[1::2]):
            assert ids.index(test.id) == ids.index(heading.id) + 1, f"{heading.id} is not right before its test"


def test_the_visible_part_runs_one_check_per_exercise(monkeypatch):
    from labutils.checks import properties

    runs = []
    real = checks.check_normalize
    monkeypatch.setattr(checks, "check_normalize", lambda fn: runs.append(fn) or real(fn))
    monkeypatch.setenv(exercises.GRADER_ENV, exercises.GRADED_OUTSIDE[exercises.GRADER_ENV])
    wrong = next(v for v in mutants.BUGGY if v.exercise == "normalize" and v.expected_check == "values")
    properties.forget("normalize")
    checks.assert_property("normalize", "shape_dtype", wrong.function)
    with pytest.raises(AssertionError, match="test_normalize_images_values"):
        checks.assert_property("normalize", "values", wrong.function)
    assert runs == [wrong.function]


def test_a_run_that_never_returned_is_not_waited_for_again(monkeypatch):
    from labutils.checks import properties

    runs = []

    def interrupted(fn):
        runs.append(fn)
        raise KeyboardInterrupt  # what a cell time limit does to the kernel

    monkeypatch.setattr(checks, "check_normalize", interrupted)
    fn = mutants.CORRECT[0].function
    properties.forget("normalize")
    with pytest.raises(KeyboardInterrupt):
        checks.assert_property("normalize", "shape_dtype", fn)
    with pytest.raises(AssertionError, match="did not return in the graded test above it .CellTimeoutError"):
        checks.assert_property("normalize", "values", fn)
    assert len(runs) == 1
    properties.forget("normalize")


def test_lab_markers_come_from_the_registry():
    """pytest -m lab04 selects the tests whose parameters name 04_accumulation or its exercise."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "lab04", "tests/test_checks.py",
               "-p", "no:cacheprovider"]
    out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT).stdout
    selected = [line for line in out.splitlines() if "::" in line]
    assert selected and all("accumulation" in line or "loss_not_divided" in line or "drops_trailing" in line
                            or "steps_every" in line or "zero_grad_every" in line or "reports_scaled" in line
                            or "scheduler_per_micro" in line or "clip_every_micro" in line
                            for line in selected), selected
    assert any("drops_trailing_group" in line for line in selected)
    assert not any("baseline_canonical" in line for line in selected)
    markers = subprocess.run([sys.executable, "-m", "pytest", "--markers", "-p", "no:cacheprovider"],
                             capture_output=True, text=True, cwd=ROOT).stdout
    assert "@pytest.mark.lab04: tests of 04_accumulation" in markers


def test_a_replaced_check_is_left_to_the_grader(monkeypatch, capsys):
    """A notebook that replaces labutils.checks gets no verdict in its kernel under the grader (the grader re-judges
    on pristine modules); outside the grader it is told what happened."""
    from labutils.checks import properties

    class Fake:
        passed = True

    monkeypatch.setattr(checks, "check_normalize", lambda fn: Fake())
    properties.forget("normalize")
    with pytest.raises(AssertionError, match="not a CheckReport"):
        checks.assert_property("normalize", "values", mutants.CORRECT[0].function)
    monkeypatch.setenv(exercises.GRADER_ENV, exercises.GRADED_OUTSIDE[exercises.GRADER_ENV])
    checks.assert_property("normalize", "values", mutants.CORRECT[0].function)
    assert "judged by the grader" in capsys.readouterr().out
    properties.forget("normalize")


def test_every_property_says_what_it_is_judged_on_and_what_it_needs():
    for e in exercises.EXERCISES:
        for p in e.properties:
            assert p.evidence and p.id not in p.needs, (e.id, p.id)
            assert set(p.needs) <= {q.id for q in e.properties}, (e.id, p.id, p.needs)
            assert p.why, (e.id, p.id)  # and why a student who has read the checks cannot fake it (issue 43)
