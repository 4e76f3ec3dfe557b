"""make lab's notebook runner: executes solution notebooks, keeps the executed copies, writes summary.md."""

import json

import pytest

from labutils.reference.sequence import PARTS, run_sequence


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
