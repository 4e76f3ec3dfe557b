"""The README describes the code that is there: its table of labutils modules names every module, and no other."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tabled_modules(readme: str) -> set[str]:
    """The modules and folders named in the first column of the README's labutils table."""
    section = readme.split("## The reference implementation: `labutils`", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name.removesuffix("/") for row in rows for name in re.findall(r"`([^`]+)`", row)}


def test_the_labutils_table_names_every_module():
    """Every module and package of labutils (but __init__ and __main__) has a row, and every row a module"""
    present = {p.stem if p.is_file() else p.name for p in (ROOT / "labutils").iterdir()
               if (p.suffix == ".py" and not p.stem.startswith("__")) or (p / "__init__.py").exists()}
    tabled = {name.removesuffix(".py") for name in tabled_modules((ROOT / "README.md").read_text())}
    assert present - tabled == set(), f"labutils modules missing from the README's table: {sorted(present - tabled)}"
    assert tabled - present == set(), f"the README's table names modules that do not exist: {sorted(tabled - present)}"


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
