"""make lab's notebook runner: executes solution notebooks, keeps the executed copies, writes summary.md."""

import pytest

from labutils.reference.sequence import run_sequence


@pytest.mark.notebooks
def test_runs_the_named_notebooks_and_summarises_them(tmp_path):
    summary = run_sequence(tmp_path, mode="smoke", notebooks=["00_data_tour", "01_baseline"])
    text = summary.read_text()
    assert "| 00_data_tour |" in text and "Whole sequence:" in text
    assert (tmp_path / "notebooks" / "00_data_tour.ipynb").exists()
    assert (tmp_path / "00_data_tour.json").exists()  # written by the notebook itself through LAB_ARTIFACTS
    header, *rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ")]
    columns = [c.strip() for c in header]
    assert columns[-6:] == ["training", "evaluation", "subprocesses", "figures", "other cells",
                            "kernel start and nbclient"]
    baseline = dict(zip(columns, (c.strip() for c in rows[1])))
    wall = float(baseline["notebook wall time (s)"])
    parts = [float(baseline[c]) for c in columns[-6:]]
    assert float(baseline["training"]) > 0 and float(baseline["kernel start and nbclient"]) > 0
    assert abs(sum(parts) - wall) <= 3  # the parts add up to the wall time, up to the rounding of each


def test_an_unknown_notebook_is_named_with_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"no such notebook\(s\) \['99_nope'\]: choose from"):
        run_sequence(tmp_path, notebooks=["99_nope"])
