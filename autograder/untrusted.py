"""Showing what a student chose (a folder or file name, a note, an exception's text) to the instructor: in the
terminal, ``grading.log`` and ``summary.md``, every such text passes through here (issue 28).

Raw, a name is an attack on whoever reads it: an escape sequence in a folder name writes the instructor's clipboard
(OSC 52), sets the window title, hides a hyperlink (OSC 8) or clears the screen (CSI 2J); a bidi override makes
``exe.txt`` read as ``txt.exe``; a line break forges a log line; ``<img onerror>`` or ``[x](javascript:...)`` runs when
summary.md is rendered. :func:`shown` writes every character a terminal would act on as a visible escape (``\\x1b``,
``\\u202e``), so an escape sequence loses its ESC or CSI and is only text; :func:`md_code` puts that inside a markdown
code span, where nothing is a tag, a link or emphasis.
"""

from __future__ import annotations

import re

from labutils.quoting import capped

SHOWN_LIMIT = 1_000  # characters of one student text shown; the rest is counted, not printed
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    """``char`` as Python writes it in a string literal: ``\\n``, ``\\x1b``, ``\\u202e``, ``\\U000e0001``."""
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                                else f"\\U{code:08x}")


def shown(text: object, limit: int | None = SHOWN_LIMIT, keep_newlines: bool = False) -> str:
    """``text`` safe for a terminal or log line: at most ``limit`` characters (the rest counted), and every character
    that is not printable (C0 and C1 controls, DEL, ESC and so every escape sequence, bidi overrides and isolates,
    zero-width and other format characters, line and paragraph separators, lone surrogates) escaped visibly.
    ``keep_newlines``: for a message the grader composed of several lines (each already made of shown parts);
    ``limit`` None: no cap (a sink such as the log, whose parts were capped where they were composed)."""
    text = str(text) if limit is None else capped(text, limit)  # the count of what was cut is printable as it is
    if keep_newlines:
        return "\n".join(_visible(line) for line in text.split("\n"))
    return _visible(text)


def _visible(text: str) -> str:
    return text if text.isprintable() else "".join(c if c.isprintable() else _escape(c) for c in text)


_BACKTICKS = re.compile(r"`+")


def md_code(text: object, limit: int = SHOWN_LIMIT, table: bool = False) -> str:
    """``text`` as a markdown inline code span: :func:`shown`, then fenced by one backtick more than its longest run
    of backticks and padded with a space (CommonMark strips one each side), so the name inside cannot close it;
    ``table``: ``|`` escaped as ``\\|`` too (a table cell, where a pipe would end the cell even in code)."""
    body = shown(text, limit)
    if table:
        body = body.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(body)), default=0) + 1)
    return f"{fence} {body} {fence}"
