"""How much of a notebook's output the grader keeps: one budget per cell and one for the whole notebook, which every
output, error, traceback and widget message is charged to before nbclient keeps it (issue 28).

What the kernel prints is kept in the worker's memory, then written to the journal, OUT/autograded/, the feedback
page and the student's JSON: each character several times. Before this budget an error bypassed the per-cell limit,
so outputs just under it plus 16 MB exceptions left 809 MB in OUT for one student and 1.9 GB in a worker. An error is
never dropped (it is what fails a test cell) but it is cut to :data:`ERROR_CHARS`, and to a line once the notebook's
budget is spent; the intake's cell limit (2,000 cells) then bounds what errors can add.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from labutils.quoting import capped

CHARGED = frozenset({"stream", "display_data", "execute_result", "update_display_data", "comm_open", "comm_msg"})
ERROR_CHARS = 20_000  # one error's name, value and traceback: a real traceback is 2-10 KB
SPENT_ERROR_CHARS = 1_000  # one error once the notebook's budget is spent: its name and the start of its value
NAME_CHARS = 200  # an exception's class name (an 8 MB one made a 23 MB student JSON)


def message_chars(msg: dict) -> int:
    """Characters (or bytes) an output or widget message would keep: its text, data, widget state and buffers."""
    return content_chars(msg.get("content", {})) + sum(len(b) for b in msg.get("buffers") or [])


def content_chars(content: dict) -> int:
    """Characters an output message's ``content`` would keep: its text, data and widget state."""
    size = len(content.get("text", "") or "")
    for key in ("data", "metadata", "state"):
        value = content.get(key)
        if isinstance(value, dict):
            size += sum(len(v) if isinstance(v, str) else len(json.dumps(v, default=str)) for v in value.values())
    return size


@dataclass
class OutputBudget:
    """Characters of output kept: ``cell_chars`` per cell, ``notebook_chars`` for the notebook (errors included)."""

    cell_chars: int
    notebook_chars: int
    used: dict[int, int] = field(default_factory=dict)  # cell index -> characters kept
    told: set[int] = field(default_factory=set)  # cells whose outputs say that the rest was cut
    notebook_spent: bool = False  # the notebook's budget ran out: a note for the student

    @property
    def total(self) -> int:
        return sum(self.used.values())

    def take(self, cell_index: int, size: int) -> bool:
        """Keep ``size`` more characters of cell ``cell_index``'s output? Charged only if kept."""
        if self.used.get(cell_index, 0) + size > self.cell_chars or self.total + size > self.notebook_chars:
            self.notebook_spent |= self.total + size > self.notebook_chars
            return False
        self.used[cell_index] = self.used.get(cell_index, 0) + size
        return True

    def first_cut(self, cell_index: int) -> bool:
        """Is this the cell's first output dropped (to be said once in its outputs)?"""
        first = cell_index not in self.told
        self.told.add(cell_index)
        return first

    def cleared(self, cell_index: int) -> None:
        """The cell's outputs were cleared (``clear_output``): what they held is no longer kept."""
        self.used[cell_index] = 0

    def is_recorded(self, content: dict, outputs: list) -> bool:
        """Is the error ``content`` (an execute reply's) among ``outputs`` already, its name cut as :meth:`trim_error`
        cuts it? nbgrader appends a reply's error whose name no output has (after a timeout)."""
        name = capped(content.get("ename", ""), NAME_CHARS)
        return any(o.get("output_type") == "error" and o.get("ename") == name for o in outputs)

    def trim_error(self, content: dict, cell_index: int) -> None:
        """Cut an error message's ``content`` in place to what the budget allows, and charge it (errors are always
        kept, so this may go over the budget by one short error per cell)."""
        room = ERROR_CHARS if self.total < self.notebook_chars else SPENT_ERROR_CHARS
        content["ename"] = capped(content.get("ename", ""), NAME_CHARS)
        content["evalue"] = capped(content.get("evalue", ""), room // 2)
        left, kept = room - len(content["evalue"]), []
        for line in reversed(content.get("traceback") or []):  # the last lines say where it was raised
            line = capped(line, max(left, 0))
            if left <= 0 or len(line) > left and kept:
                break
            kept.append(line)
            left -= len(line)
        content["traceback"] = kept[::-1]
        self.used[cell_index] = self.used.get(cell_index, 0) + room - left
