"""make lab's notebook runner: executes solution notebooks, keeps the executed copies, writes summary.md."""

import json
import sys

import nbformat
import pytest

from labutils.reference.sequence import PARTS, SOLUTIONS, run_sequence


@pytest.mark.notebooks
def test_runs_the_named_notebooks_and_summarises_them(tmp_path):
    summary = run_sequence(tmp_path, mode="smoke", notebooks=["00_data_tour", "01_baseline"])
    text = summary.read_text()
    assert "| 00_data_tour |" in text and "Whole sequence:" in text
    assert (tmp_path / "notebooks" / "00_data_tour.ipynb").exists()
    assert (tmp_path / "00_data_tour.json").exists()  # written by the notebook itself through LAB_ARTIFACTS
    header = next(line for line in text.splitlines() if line.startswith("| notebook"))
    assert [c.strip() for c in header.split("|")[1:-1]][-6:] == list(PARTS)
    rows = {row["notebook"]: row for row in json.loads((tmp_path / "summary.json").read_text())["notebooks"]}
    baseline = rows["01_baseline"]
    parts = baseline["seconds"]
    assert parts["training"] > 0 and parts["kernel start and nbclient"] > 0  # measured, however fast the machine
    assert all(seconds >= 0 for seconds in parts.values()), parts  # no part was counted twice
    assert sum(parts.values()) == pytest.approx(baseline["wall_seconds"], rel=1e-9)
    assert f"| {baseline['wall_seconds']:.1f} |" in text  # the table shows what the JSON holds

def test_an_unknown_notebook_is_named_with_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"no such notebook\(s\) \['99_nope'\]: choose from"):
        run_sequence(tmp_path, notebooks=["99_nope"])


def test_a_cell_past_its_limit_is_named_with_the_flag_that_gives_it_longer(tmp_path, monkeypatch, capsys):
    """make lab on a busy machine: a cell that runs past the limit ends the run with one line naming the fix."""
    from nbclient.exceptions import CellTimeoutError

    from labutils.reference import cli, sequence

    def timed_out(path, out_dir, mode, cell_timeout):
        assert cell_timeout == 7  # the flag reaches the runner
        raise CellTimeoutError("A cell timed out while it was being executed, after 7 seconds.")

    monkeypatch.setattr(sequence, "execute_notebook", timed_out)
    assert cli.main(["lab", "--out", str(tmp_path), "--cell-timeout", "7", "01_baseline"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: 01_baseline: a cell ran past the 7 s cell limit") and "--cell-timeout 0" in err
    assert "Traceback" not in err


@pytest.mark.notebooks
def test_bench_cells_runs_the_chosen_cells_at_the_seed_and_settings_it_is_given():
    """benchmarks/bench_cells.py, which measures the sentences of the notebooks' text: a fresh kernel runs the
    notebook's set-up (its cells up to lesson.start, given the seed and settings, and its answers' definitions), then
    only the chosen cells."""
    sys.path.insert(0, str(SOLUTIONS.parents[1] / "benchmarks"))
    import bench_cells

    notebook = SOLUTIONS / "01_baseline.ipynb"
    setup = bench_cells.setup_cells(nbformat.read(notebook, as_version=4))
    assert setup == [1, 2, 5, 18], setup  # imports, lesson.start, train_one_epoch, evaluate: no check, no training
    assert bench_cells.seeded('cfg = lesson.start("01_baseline")', 3, {"subset": "512"}) == \
        'cfg = lesson.start("01_baseline", seed=3, subset=512)'
    outputs = bench_cells.run(SOLUTIONS / "00_data_tour.ipynb", [2, 4], seed=3, settings={"subset": "512"},
                              cell_timeout=300)
    assert set(outputs) == {2, 4}
    assert "seed               = 3" in outputs[2] and "subset             = 512" in outputs[2], outputs[2]
    assert "train (512, 28, 28)" in outputs[4], outputs[4]
