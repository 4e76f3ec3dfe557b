"""Reading submissions safely (issue 16, doors 3, 5, 6 and 7): no link followed, no special file read, every folder
graded or refused with its reason, absurd notebooks refused before anything parses them. Fast: no grading run (the
black-box class of tests/test_doors.py grades the same attackers end to end)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.course.submissions import Limits, SubmissionsError, check_notebook, discover, screen_notebook

IDS = ["00_a", "01_b"]


def notebook_text(cells: int = 1, **metadata) -> str:
    """A valid notebook of ``cells`` one-line code cells, as plain JSON: nbformat would check each new cell against
    its schema (~10 CPU s for 50,000), and these hold exactly new_code_cell's fields."""
    # ids of their own: 50,000 random ones collide now and then, and nbformat warns
    nb = nbformat.v4.new_notebook()
    nb.cells = [{"cell_type": "code", "id": f"cell-{i}", "metadata": {}, "execution_count": None, "outputs": [],
                 "source": f"x = {i}"} for i in range(cells)]
    nb.cells[0]["metadata"].update(metadata)
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False)


@pytest.fixture
def world(tmp_path):
    """SUBMISSIONS beside an instructor's folder full of answers (what a link would lead to)."""
    answers = tmp_path / "answers"
    answers.mkdir()
    for nb in IDS:
        (answers / f"{nb}.ipynb").write_text(notebook_text())
    (answers / "secret.txt").write_text("the answers\n")
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    (subs / "ann" / "00_a.ipynb").write_text(notebook_text())
    return tmp_path, answers, subs


def find(subs: Path, tmp: Path, **kw):
    found = discover(subs, IDS, intake=tmp / "intake", **kw)
    return {s.student: s for s in found.submissions}, found.refused


def test_symbolic_links_are_not_followed(world):
    tmp, answers, subs = world
    for name in ("abs", "rel", "nbs"):
        (subs / name).mkdir()
    (subs / "abs" / "loop_lab").symlink_to(answers)
    (subs / "rel" / "loop_lab").symlink_to(os.path.relpath(answers, subs / "rel"))
    (subs / "nbs" / "00_a.ipynb").symlink_to(answers / "00_a.ipynb")
    (subs / "nbs" / "01_b.ipynb").symlink_to(os.path.relpath(answers / "01_b.ipynb", subs / "nbs"))
    (subs / "nbs" / "data.txt").symlink_to(answers / "secret.txt")
    (subs / "top").symlink_to(answers)
    students, refused = find(subs, tmp)
    for name in ("abs", "rel"):
        assert not students[name].notebooks and not students[name].extra_files
        assert any(n.startswith("loop_lab is a symbolic link (to ") for n in students[name].notes), students[name].notes
    nbs = students["nbs"]
    assert not nbs.notebooks and not nbs.extra_files
    assert all("is a symbolic link" in nbs.unreadable[nb] for nb in IDS), nbs.unreadable
    assert any(n.startswith("data.txt is a symbolic link") for n in nbs.notes)
    assert [r for r in refused if r.startswith("top: not graded: it is a symbolic link")], refused
    assert students["ann"].notebooks  # the honest student beside them


def test_hard_links_are_refused(world):
    tmp, answers, subs = world
    (subs / "hal").mkdir()
    os.link(answers / "00_a.ipynb", subs / "hal" / "00_a.ipynb")
    os.link(answers / "secret.txt", subs / "hal" / "data.txt")
    hal = find(subs, tmp)[0]["hal"]
    assert "00_a.ipynb is a hard link" in hal.unreadable["00_a"] and not hal.notebooks
    assert any(n.startswith("data.txt is a hard link") for n in hal.notes) and not hal.extra_files


FENCED = """
import json, sys
from pathlib import Path
from autograder.course.submissions import discover
found = discover(Path(sys.argv[1]), ["00_a", "01_b"], intake=Path(sys.argv[2]))
print(json.dumps({s.student: {"unreadable": s.unreadable, "notes": s.notes, "extra": s.extra_files}
                  for s in found.submissions}))
"""


def _fence():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # reading /dev/zero would end here, not in the machine


def test_fifos_devices_and_sockets_are_refused_unread(world):
    """A fifo would block a reader forever and a /dev/zero device fill its memory: discover runs fenced (2 GB of
    address space, 60 s), so a regression fails this test, not the machine."""
    tmp, _, subs = world
    folder = subs / "sam"
    folder.mkdir()
    os.mkfifo(folder / "00_a.ipynb")
    os.mkfifo(folder / "data.fifo")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(folder / "data.sock"))
    if os.geteuid() == 0:
        os.mknod(folder / "01_b.ipynb", stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's numbers
    proc = subprocess.run([sys.executable, "-c", FENCED, str(subs), str(tmp / "intake")], capture_output=True,
                          text=True, timeout=60, preexec_fn=_fence)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sam = json.loads(proc.stdout)["sam"]
    assert "is a fifo (named pipe), not a regular file" in sam["unreadable"]["00_a"]
    if os.geteuid() == 0:
        assert "is a device, not a regular file" in sam["unreadable"]["01_b"]
    assert any(n.startswith("data.fifo is a fifo") for n in sam["notes"])
    assert any(n.startswith("data.sock is a socket") for n in sam["notes"]) and not sam["extra"]


def test_every_folder_is_graded_or_refused_with_its_reason(world):
    tmp, _, subs = world
    for name in ("...h2", "a b", "a_b", ".git", "__MACOSX"):
        (subs / name).mkdir()
    for name in ("...h2", "a b", "a_b"):
        (subs / name / "00_a.ipynb").write_text(notebook_text())
    (subs / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (subs / "stray.ipynb").write_text(notebook_text())
    students, refused = find(subs, tmp)
    assert sorted(students) == ["a_b", "ann"]  # "a b" is not renamed into a_b's id
    assert [r.split(":")[0] for r in refused] == ["...h2", "a b", "stray.ipynb"]  # not .git, not __MACOSX
    assert "its name starts with a dot" in refused[0]
    assert "its name is not a valid student id: it holds ' '" in refused[1]
    assert "outside any student's folder" in refused[2]


def test_nothing_to_grade_says_why(world):
    tmp, _, subs = world
    os.rename(subs / "ann", subs / ".ann")
    with pytest.raises(SubmissionsError, match=r"no student folders .*\.ann: not graded: its name starts with a dot"):
        find(subs, tmp)


def test_a_student_named_submitted_hides_no_one(world):
    tmp, _, subs = world
    (subs / "submitted").mkdir()
    (subs / "submitted" / "00_a.ipynb").write_text(notebook_text())
    assert sorted(find(subs, tmp)[0]) == ["ann", "submitted"]  # a flat folder of that name is a student
    course = tmp / "course"
    for rel in ("submitted/cy/loop_lab", "source/loop_lab", "eve"):
        (course / rel).mkdir(parents=True)
        (course / rel / "00_a.ipynb").write_text(notebook_text())
    students, refused = find(course, tmp)
    assert sorted(students) == ["cy"]
    assert len(refused) == 1 and refused[0].startswith("eve: not graded: SUBMISSIONS is read as an nbgrader course")


def test_what_is_graded_is_the_copy_taken_in(world):
    tmp, _, subs = world
    (subs / "ann" / "data").mkdir()
    (subs / "ann" / "data" / "x.csv").write_text("1,2\n")
    ann = find(subs, tmp)[0]["ann"]
    copy = ann.notebooks["00_a"]
    assert copy.is_relative_to(tmp / "intake" / "ann") and copy.read_bytes() == (subs / "ann" / "00_a.ipynb").read_bytes()
    assert ann.extra_files == [{"name": "data/x.csv", "path": str(tmp / "intake" / "ann" / "data" / "x.csv")}]
    (subs / "ann" / "00_a.ipynb").write_text("swapped after the check")
    assert json.loads(copy.read_text())["cells"]


def test_a_folder_too_deep_or_too_full_is_read_up_to_its_limits(world):
    tmp, _, subs = world
    deep = subs / "ann" / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "x.txt").write_text("x")
    for i in range(5):
        (subs / "ann" / f"f{i}.txt").write_text("y")
    ann = find(subs, tmp, limits=Limits(folder_depth=2, files=4))[0]["ann"]
    assert "a/b/c/ not read: more than 2 folders deep" in ann.notes
    assert any("later files not read: more than 4 files" in n for n in ann.notes) and len(ann.extra_files) == 3


# --- absurd notebooks -----------------------------------------------------------------------------------------------------


def _deep(depth: int) -> str:
    return notebook_text(deep="@@").replace('"@@"', "[" * depth + "]" * depth)


@pytest.mark.parametrize("depth", [10_000, 100])  # past Python's own JSON reader, and past the limit only
def test_deep_json_is_refused_without_a_recursion_error(tmp_path, depth):
    path = tmp_path / "00_a.ipynb"
    path.write_text(_deep(depth))
    assert check_notebook(path).startswith("is nested more than 64 levels deep")


def test_a_notebook_nested_as_deep_as_a_real_one_is_accepted(tmp_path):
    path = tmp_path / "00_a.ipynb"
    path.write_text(_deep(30))
    assert check_notebook(path) is None


def test_too_many_cells_or_bytes_are_refused(tmp_path):
    path = tmp_path / "00_a.ipynb"
    path.write_text(notebook_text(cells=50_000))
    assert check_notebook(path).startswith("has 50,000 cells: more than the 2,000 a notebook of this lab may have")
    path.write_text(notebook_text(cells=40))
    assert check_notebook(path) is None
    assert "more than the 1,000 bytes a notebook may be; clear its outputs" in check_notebook(
        path, Limits(notebook_bytes=1_000))


def test_huge_outputs_are_cleared_before_grading(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('x' * 5000)", execution_count=1)])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 5000)]
    data = nbformat.writes(nb).encode()
    kept, notes = screen_notebook(data, Limits(output_bytes=10_000))
    assert kept == data and notes == []  # under the limit: the very bytes handed in
    cleared, notes = screen_notebook(data, Limits(output_bytes=1_000))
    cell = nbformat.reads(cleared.decode(), as_version=4).cells[0]
    assert cell.outputs == [] and cell.source == "print('x' * 5000)"
    assert notes and notes[0].startswith("its outputs (5,0") and "were cleared before grading" in notes[0]


# --- names an attacker chooses (issue 28) ------------------------------------------------------------------------------

HOSTILE_FOLDERS = ["--remove-files", "+1+1", "@h3+1", "-x", "=cmd|' \\C calc'!A0"]  # '/' cannot be in a name


def test_a_folder_is_graded_under_its_own_name_or_refused_by_name(world):
    """Issue 42 (issue 28 renamed these): a folder named like a command-line option or a formula, or with a character
    an id cannot hold, is refused by its name, never renamed: `é.absent@x` became `absent@x`, the id of a student who
    handed in nothing, and took their LMS row; a trailing space made a second `vic.tim@x` and got both refused."""
    tmp, _, subs = world
    for name in HOSTILE_FOLDERS + ["é.absent@x.example", "vic.tim@x.example ", "vic.tim@x.example", "ﬁona"]:
        (subs / name).mkdir()
        (subs / name / "00_a.ipynb").write_text(notebook_text())
    students, refused = find(subs, tmp)
    assert sorted(students) == ["ann", "vic.tim@x.example"]  # the real student is graded
    named = {r.split(": not graded: ")[0]: r.split(": not graded: ")[1] for r in refused}
    assert sorted(named) == sorted(HOSTILE_FOLDERS + ["é.absent@x.example", "vic.tim@x.example ", "ﬁona"])
    assert all(why.startswith("its name is not a valid student id: ") and why.endswith("never renamed for you, "
               "which could make it someone else's") for why in named.values())
    assert "it holds 'é'" in named["é.absent@x.example"] and "starts or ends with '-'" in named["-x"]
    made = [p.name for p in (tmp / "intake").rglob("*")]
    assert made and not [name for name in made if name.startswith("-") or "absent" in name]


def test_folders_one_student_to_an_lms_are_both_refused(world):
    """`Vic.Tim@x` and `vic.tim@x` are two folders here and one student to an LMS (emails and logins match whatever
    their case) and to a case-insensitive disk: neither is graded, both are named, and the message says how to tell
    them apart."""
    tmp, _, subs = world
    for name in ("Vic.Tim@x.example", "vic.tim@x.example"):
        (subs / name).mkdir()
        (subs / name / "00_a.ipynb").write_text(notebook_text())
    students, refused = find(subs, tmp)
    assert sorted(students) == ["ann"]
    assert [r.split(":")[0] for r in refused] == ["Vic.Tim@x.example", "vic.tim@x.example"]
    assert all("folders 'Vic.Tim@x.example' and 'vic.tim@x.example' differ only in case" in r and "--mapping"
               in r for r in refused)


def test_a_single_notebooks_student_must_be_a_valid_id(tmp_path):
    (tmp_path / "My Downloads").mkdir()
    (tmp_path / "My Downloads" / "00_a.ipynb").write_text(notebook_text())
    with pytest.raises(SubmissionsError, match="the folder holding the notebook 'My Downloads' is not a valid "
                                               "student id.*--student ID"):
        discover(tmp_path / "My Downloads" / "00_a.ipynb", IDS, intake=tmp_path / "intake")
    with pytest.raises(SubmissionsError, match="--student '-x' is not a valid student id"):
        discover(tmp_path / "My Downloads" / "00_a.ipynb", IDS, "-x", intake=tmp_path / "intake")
    got = discover(tmp_path / "My Downloads" / "00_a.ipynb", IDS, "ann", intake=tmp_path / "intake")
    assert got.submissions[0].student == "ann"


def test_data_files_named_like_options_are_not_taken_in(world):
    """A data file or folder whose name starts with '-' would become a file of that name in OUT's course."""
    tmp, _, subs = world
    (subs / "ann" / "-rf").write_text("x")
    (subs / "ann" / "--data").mkdir()
    (subs / "ann" / "--data" / "x.csv").write_text("1\n")
    (subs / "ann" / "ok.csv").write_text("1\n")
    ann = find(subs, tmp)[0]["ann"]
    assert [e["name"] for e in ann.extra_files] == ["ok.csv"]
    assert any(n.startswith("-rf not copied: its name starts with '-'") for n in ann.notes)
    assert any(n.startswith("--data/ not read: its name starts with '-'") for n in ann.notes)
    assert not [p for p in (tmp / "intake").rglob("*") if p.name.startswith("-")]


def test_a_cell_too_big_is_refused_with_the_cell_named(tmp_path):
    """A 50 MB written answer costs its student that notebook, not the class minutes of rendering."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", id="a"),
                                         nbformat.v4.new_markdown_cell("y" * 5_000, id="b")])
    path = tmp_path / "00_a.ipynb"
    path.write_text(nbformat.writes(nb))
    assert check_notebook(path) is None
    why = check_notebook(path, Limits(cell_bytes=4_000))
    assert why.startswith("has a cell of 5,000 bytes (cell 2, markdown): more than the 4,000 bytes a cell may be")
