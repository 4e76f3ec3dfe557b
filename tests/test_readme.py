"""The README is a newcomer's five minutes and every other fact has one page in docs/: the README stays short and
links every page, no page narrates history, and docs/architecture.md's table of labutils modules names every module
and no other."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


DOCS = ROOT / "docs"


def tabled_modules(page: str) -> set[str]:
    """The modules and folders named in the first column of the labutils table of docs/architecture.md."""
    section = page.split("## The reference implementation: `labutils`", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name.removesuffix("/") for row in rows for name in re.findall(r"`([^`]+)`", row)}


def test_the_labutils_table_names_every_module():
    """Every module and package of labutils (but __init__ and __main__) has a row, and every row a module"""
    present = {p.stem if p.is_file() else p.name for p in (ROOT / "labutils").iterdir()
               if (p.suffix == ".py" and not p.stem.startswith("__")) or (p / "__init__.py").exists()}
    tabled = {name.removesuffix(".py") for name in tabled_modules((DOCS / "architecture.md").read_text())}
    assert present - tabled == set(), f"labutils modules missing from docs/architecture.md's table: {sorted(present - tabled)}"
    assert tabled - present == set(), f"docs/architecture.md's table names modules that do not exist: {sorted(tabled - present)}"


def test_the_suite_starts_its_longest_modules_first():
    """make test keeps the collection order (tests/conftest.py: LONGEST_FIRST), which names only modules that exist: a
    renamed one would drop out of the order and might run alone at the end; and it writes bytecode, whatever the
    machine's PYTHONDONTWRITEBYTECODE says"""
    import conftest

    command = next(line for line in (ROOT / "Makefile").read_text().splitlines() if "-m pytest" in line)
    assert "--dist loadfile" in command and "--no-loadscope-reorder" in command, command
    assert command.split()[0] == "PYTHONDONTWRITEBYTECODE=", command  # its ~110 Python processes share compiled code
    modules = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    assert set(conftest.LONGEST_FIRST) <= modules, sorted(set(conftest.LONGEST_FIRST) - modules)


def test_the_readme_is_short_and_links_every_page_of_the_docs():
    """A newcomer reads the README in five minutes (under 150 lines), and finds every docs/ page from it"""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150, len(readme.splitlines())
    linked = set(re.findall(r"\]\(docs/([^)#]+)", readme))
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages - linked == set(), f"docs pages the README does not link: {sorted(pages - linked)}"
    assert linked - pages == set(), f"the README links pages that do not exist: {sorted(linked - pages)}"


def test_no_page_narrates_history():
    """Docs hold today's facts: no commit hash, no CI run told by its commit, no issue number"""
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        text = page.read_text()
        hashes = [h for h in re.findall(r"`([0-9a-f]{7,40})`", text) if not h.isdigit()]
        assert not hashes, f"{page.name} quotes commit hashes: {hashes}"
        assert not re.search(r"\bissue \d+", text, re.IGNORECASE), f"{page.name} narrates an issue"
