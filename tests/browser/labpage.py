"""What a person does in JupyterLab, as Playwright calls: open a notebook, replace a cell's code, run cells with
Shift+Enter, read an output, take a screenshot.

Only the page is used (clicks, keys, what is on screen), never JupyterLab's JavaScript objects, so a test fails where
a person would get stuck. Code goes into a cell as one paste (``insert_text``): typing it key by key would let the
editor's auto-indent and bracket closing rewrite it, which is not what a student who pastes or types carefully gets.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from playwright.sync_api import Locator, Page, expect

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "artifacts" / "ui"  # git-ignored; look at them after a run
KERNEL_START_S = 90  # torch's first import on a loaded 2-core machine


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=path)
    return path


def open_notebook(page: Page, url: str) -> None:
    """Open a notebook URL and wait until its cells are shown and its kernel is idle."""
    page.goto(url)
    page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for(timeout=60_000)
    wait_idle(page)


def wait_idle(page: Page, timeout_s: float = KERNEL_START_S) -> None:
    """Until the notebook's kernel reports idle (the status bar's execution indicator)."""
    indicator = page.locator(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator").first
    expect(indicator).to_have_attribute("data-status", "idle", timeout=timeout_s * 1000)


def cells(page: Page) -> Locator:
    return page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell")


def cell_index(page: Page, pattern: str, timeout_s: float = 30) -> int:
    """The index of the first cell whose source matches ``pattern`` (a regex), as the notebook shows it (cells far
    below are drawn a moment after the notebook opens: keep looking until ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sources = cells(page).evaluate_all("els => els.map(el => el.querySelector('.cm-content, "
                                           ".jp-RenderedMarkdown')?.innerText ?? '')")
        for i, text in enumerate(sources):
            if re.search(pattern, text, re.MULTILINE):
                return i
        if time.monotonic() > deadline:
            raise LookupError(f"no cell matches {pattern!r}")
        page.wait_for_timeout(250)


def set_source(page: Page, index: int, source: str) -> None:
    """Replace cell ``index``'s code: click into it, select all, paste ``source``; leave edit mode."""
    editor = cells(page).nth(index).locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    page.keyboard.press("Escape")
    expect(editor).to_contain_text(source.strip().splitlines()[0])


def set_markdown(page: Page, index: int, text: str) -> None:
    """Replace markdown cell ``index``'s text (a written answer): double-click, select all, paste, render."""
    cell = cells(page).nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-RenderedMarkdown").dblclick()
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)
    page.keyboard.press("Control+Enter")  # render it, stay on the cell
    expect(cell.locator(".jp-RenderedMarkdown")).to_contain_text(text.split()[0])


def select(page: Page, index: int) -> None:
    """Make cell ``index`` the active one, in command mode (as a click on its left margin does)."""
    cell = cells(page).nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    expect(cell).to_have_class(re.compile(r"\bjp-mod-active\b"))


def run_cells(page: Page, first: int, last: int, timeout_s: float = KERNEL_START_S) -> None:
    """Shift+Enter from cell ``first`` through ``last``, then wait until the kernel is done with them."""
    select(page, first)
    for _ in range(first, last + 1):
        page.keyboard.press("Shift+Enter")
    expect(cells(page).nth(last + 1)).to_have_class(re.compile(r"\bjp-mod-active\b"))
    wait_idle(page, timeout_s)


def output_text(page: Page, index: int) -> str:
    return cells(page).nth(index).locator(".jp-OutputArea").inner_text()


def stderr_outputs(page: Page) -> list[str]:
    """The text of every stderr output in the notebook (warnings a student would have to read past)."""
    return page.locator('.jp-NotebookPanel:visible .jp-OutputArea-output'
                        '[data-mime-type="application/vnd.jupyter.stderr"]').all_inner_texts()


def wait_output(page: Page, index: int, text: str, timeout_s: float = 60) -> str:
    """Cell ``index``'s output once it contains ``text``; scrolled into view for the screenshot."""
    area = cells(page).nth(index).locator(".jp-OutputArea")
    expect(area).to_contain_text(text, timeout=timeout_s * 1000)
    area.scroll_into_view_if_needed()
    return area.inner_text()
