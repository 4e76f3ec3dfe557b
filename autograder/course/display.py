"""The display copy of a graded notebook: what formgrader and the feedback page show, rebuilt from an allow-list.

The autograded notebook is the student's: its cells, and its outputs, which the student's kernel sent as it liked
(any mimetype, any metadata, any stream name). nbconvert's templates put several of those fields into the page
unescaped (an image's base64 text, a width, a cell tag, the notebook's title), so cleaning the HTML alone is not
enough. :func:`display_copy` builds a new notebook that holds only what a grader needs to read, each field checked
for its type and the text made safe with :mod:`.sanitize`:

- markdown cells and ``text/markdown`` outputs: rendered and cleaned (``render=True``) or shown as typed, as inert
  blocks formgrader renders in linear time; raw cells as typed;
- code cells: source, execution count, outputs; the nbgrader metadata (the gradebook's, restored by grading);
- outputs: streams, errors, and of rich outputs only ``text/plain``, raster images that are base64 and cleaned
  ``text/html``; JavaScript, SVG, LaTeX, widgets and everything else are dropped, with a line saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat import v4

from labutils.atomic import write_atomically

from . import sanitize

KERNEL_METADATA = {  # this lab's notebooks are Python: nothing the student's kernel said about itself is kept
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    "language_info": {"name": "python", "pygments_lexer": "ipython3", "file_extension": ".py",
                      "mimetype": "text/x-python", "codemirror_mode": {"name": "ipython", "version": 3}},
}
IMAGES = ("image/png", "image/jpeg", "image/gif")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")
_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
TIMED_OUT = "This text took too long to render (nbconvert's markdown), so it is shown as typed."


def display_copy(nb: nbformat.NotebookNode, *, render: bool, note: str = "") -> nbformat.NotebookNode:
    """The notebook a person may open: ``nb``'s cells and outputs through the allow-list (the module's docstring).
    ``render=False`` shows markdown as typed, in linear time, each cell under ``note`` (say why, e.g.
    :data:`TIMED_OUT`)."""
    copy = v4.new_notebook(metadata=dict(KERNEL_METADATA))
    for cell in nb.get("cells", []):
        copy.cells.append(_cell(cell, render, note))
    return copy


def write_display_copy(source: Path, dest: Path, *, render: bool, note: str = "") -> None:
    """:func:`display_copy` of the notebook at ``source`` written to ``dest`` atomically (a run killed meanwhile
    leaves the previous copy, never half of one)."""
    nb = nbformat.read(source, as_version=4)
    text = nbformat.writes(display_copy(nb, render=render, note=note))
    write_atomically(dest, (text if text.endswith("\n") else text + "\n").encode("utf-8"))  # as nbformat.write


def _shown_markdown(source: str, render: bool, note: str) -> str:
    clean = sanitize.markdown_html(source) if render else sanitize.plain_html(source, note)
    return sanitize.inert_block(clean)


def _cell(cell, render: bool, note: str) -> nbformat.NotebookNode:
    source = _text(cell.get("source"))
    kind = cell.get("cell_type")
    if kind == "code":
        new = v4.new_code_cell(source, outputs=[_output(o, render, note) for o in cell.get("outputs", []) or []],
                               execution_count=_count(cell.get("execution_count")))
    else:  # markdown, raw, or anything invented: shown, never run or passed through
        new = v4.new_markdown_cell(_shown_markdown(source, render and kind == "markdown", note))
    nbgrader = cell.get("metadata", {}).get("nbgrader")
    if isinstance(nbgrader, dict):  # the gradebook's (grading restores it): formgrader's score boxes hang on it
        new.metadata["nbgrader"] = nbgrader
    if isinstance(cell.get("id"), str) and _CELL_ID.match(cell["id"]):
        new.id = cell["id"]
    return new


def _output(output, render: bool, note: str) -> nbformat.NotebookNode:
    kind = output.get("output_type")
    if kind == "stream":
        name = output.get("name") if output.get("name") in ("stdout", "stderr") else "stdout"
        return v4.new_output("stream", name=name, text=_text(output.get("text")))
    if kind == "error":
        return v4.new_output("error", ename=_text(output.get("ename")), evalue=_text(output.get("evalue")),
                             traceback=[_text(line) for line in output.get("traceback") or []])
    data = _rich_data(output.get("data") or {}, render, note)
    if kind == "execute_result":
        return v4.new_output("execute_result", data=data, execution_count=_count(output.get("execution_count")))
    return v4.new_output("display_data", data=data)


def _rich_data(data: dict, render: bool, note: str) -> dict:
    """A display's mimebundle through the allow-list; what was dropped is named in its ``text/plain``."""
    kept = {}
    if isinstance(data.get("text/html"), (str, list)):
        text, left_out = sanitize.cut(_text(data["text/html"]))
        kept["text/html"] = sanitize.clean_html(text) + sanitize.cut_note(left_out)
    elif isinstance(data.get("text/markdown"), (str, list)):
        kept["text/html"] = _shown_markdown(_text(data["text/markdown"]), render, note)  # an inert block is HTML too
    for mime in IMAGES:
        if isinstance(data.get(mime), str) and _BASE64.match(data[mime]):
            kept[mime] = data[mime]
    plain = _text(data.get("text/plain", ""))
    dropped = sorted(set(data) - set(kept) - {"text/plain", "text/markdown"})
    if dropped:
        plain = (plain + "\n" if plain else "") + f"[not shown: {', '.join(dropped)} output]"
    if plain or not kept:
        kept["text/plain"] = sanitize.cut(plain)[0]
    return kept


def _text(value) -> str:
    """nbformat's multiline text (a string or a list of strings) as one string; anything else as empty."""
    if isinstance(value, list):
        return "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
