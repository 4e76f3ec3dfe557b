"""Who a submission belongs to: what a student id is, and when two names are one student (issue 42).

A student's identity is a fact the grade rests on, like the work and the hand-in time, and the folder name it comes
from is chosen by whoever made the folder. So it is taken exactly or not at all:

- A folder is graded under its own name, and only if that name already is a valid id (:func:`why_not_an_id`):
  ASCII letters and digits and ``_.@+-``, starting and ending with a letter or digit, so that it is never read as a
  command-line option (``--remove-files`` in ``tar czf feedback.tgz *``), a hidden file or a spreadsheet formula
  (``+1+1``, ``@h3+1``). Any other name is refused by name: renaming it (``é.absent@x`` to ``absent@x``) could turn it
  into another student's id, and with it their roster row.
- Two names that differ only in what an LMS or a file system ignores are one student for them: case (logins and
  emails match whatever their case; macOS's disks fold it), Unicode compatibility forms (NFKC: ``ﬁ`` is ``fi``, a
  full-width ``Ａ`` is ``A``) and white space around or inside. :func:`key` is that normalisation, written once;
  :func:`clashes` finds the names that share a key, which every reader of ids (the submissions, a times file, an LMS
  roster) refuses to guess between.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import TypeVar

ID_RULE = "ASCII letters, digits and _.@+- only, starting and ending with a letter or digit"
T = TypeVar("T")
_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.@+-]*[A-Za-z0-9])?")


def why_not_an_id(name: str) -> str | None:
    """Why ``name`` cannot be a student id as it is (None: it can)."""
    if _ID.fullmatch(name):
        return None
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "_.@+-"))})
    if bad:
        return f"it holds {', '.join(repr(c) for c in bad[:5])}{' ...' if len(bad) > 5 else ''} ({ID_RULE})"
    return f"it starts or ends with {name[0]!r} ({ID_RULE})" if name else "it is empty"


def key(name: str) -> str:
    """``name`` as an LMS or a case-folding disk compares it: NFKC, case folded, white space trimmed and collapsed.
    Two names with one key are one student to some reader, so they are never told apart by guessing."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())
    return " ".join(folded.split())


def clashes(named: Iterable[tuple[T, str]]) -> dict[str, list[T]]:
    """{key: the items whose names share it} for every key held by more than one item: ``named`` pairs each item (a
    folder name, a roster row's number) with its name, so a name written twice (two roster rows) clashes too."""
    found: dict[str, list[T]] = {}
    for item, name in named:
        found.setdefault(key(name), []).append(item)
    return {k: items for k, items in found.items() if len(items) > 1}
