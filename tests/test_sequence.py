"""make lab's notebook runner: executes solution notebooks, keeps the executed copies, writes summary.md."""

import pytest

from labutils.reference.sequence import run_sequence


@pytest.mark.notebooks
def test_runs_the_named_notebooks_and_summarises_them(tmp_path):
    summary = run_sequence(tmp_path, mode="smoke", notebooks=["00_data_tour"])
    text = summary.read_text()
    assert "| 00_data_tour |" in text and "Whole sequence:" in text
    assert (tmp_path / "notebooks" / "00_data_tour.ipynb").exists()
    assert (tmp_path / "00_data_tour.json").exists()  # written by the notebook itself through LAB_ARTIFACTS


def test_an_unknown_notebook_is_named_with_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"no such notebook\(s\) \['99_nope'\]: choose from"):
        run_sequence(tmp_path, notebooks=["99_nope"])
