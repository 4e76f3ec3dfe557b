"""The template course a grading run grades against (gradebook, source/ and release/) is made once per version of the
assignment and grader, and copied by every later run (autograder.course.release.template_course); the copy holds the
hidden tests, so no kernel may read where it is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder import layout
from autograder.channel import RunConfig
from autograder.course import release
from autograder.course.nbgrader_setup import prepare_tools
from autograder.layout import ASSIGNMENT
from autograder.sandbox.client import base_policy

from autograder_cases import toy

pytestmark = pytest.mark.autograder


@pytest.fixture(autouse=True)
def tools():
    prepare_tools()  # as a grading run does first: nbgrader's gradebook stamp without the alembic command


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "grader-cache"
    monkeypatch.setenv("LOOPLAB_GRADER_CACHE", str(folder))
    return folder


def _course_files(course: Path) -> list[str]:
    return sorted(str(p.relative_to(course)) for p in course.rglob("*") if p.is_file())


def test_a_template_course_is_made_once_per_version_and_copied_after(tmp_path, cache, monkeypatch):
    source = toy.write_source(tmp_path / "source")
    made = release.template_course(source, tmp_path / "first", json.dumps(["v1"]))
    assert made == [toy.NOTEBOOK]
    files = _course_files(tmp_path / "first")
    assert {"gradebook.db", f"source/{ASSIGNMENT}/{toy.NOTEBOOK}.ipynb", f"release/{ASSIGNMENT}/{toy.NOTEBOOK}.ipynb"
            } <= set(files)
    assert [p.stat().st_mode & 0o777 for p in cache.glob("courses")] == [0o700]

    def never(*args):
        raise AssertionError("generated again for a version the cache holds")

    monkeypatch.setattr(release, "generate_gradebook", never)
    assert release.template_course(source, tmp_path / "second", json.dumps(["v1"])) == made
    assert _course_files(tmp_path / "second") == files
    assert (tmp_path / "second" / "gradebook.db").read_bytes() == (tmp_path / "first" / "gradebook.db").read_bytes()
    with pytest.raises(AssertionError, match="generated again"):  # another version is made anew
        release.template_course(source, tmp_path / "third", json.dumps(["v2"]))


def test_without_a_writable_cache_the_course_is_still_made(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("LOOPLAB_GRADER_CACHE", str(blocked / "cache"))
    source = toy.write_source(tmp_path / "source")
    assert release.template_course(source, tmp_path / "course", "v") == [toy.NOTEBOOK]
    assert (tmp_path / "course" / "gradebook.db").is_file()


def test_no_kernel_may_read_the_grader_cache(monkeypatch):
    """The cached courses hold the hidden tests: the cache is under no folder a kernel's sandbox may read or list,
    the data's cache among them."""
    from labutils import data_files

    monkeypatch.delenv("LOOPLAB_GRADER_CACHE", raising=False)
    cache = layout.grader_cache_dir().resolve()
    run = RunConfig(template_db="", work_dir="/nowhere", cell_timeout=1, notebook_timeout=1, memory_mb=4096,
                    threads=1, data_dirs=[str(data_files.DEBIAN_DIR), str(data_files.cache_dir())], cache_dir=str(data_files.cache_dir()))
    policy = base_policy(run)
    readable = [Path(p).resolve() for p in [*policy.read_dirs, *policy.list_dirs, *policy.read_files]]
    assert not [p for p in readable if cache == p or cache.is_relative_to(p)], readable
