"""The one sanitiser for what a student wrote when a person's browser shows it: HTML, markdown, and the
Content-Security-Policy of every page we write or serve.

A student's written answer, a cell's ``text/html`` or ``text/markdown`` output and a check's message are an attacker's
text: shown raw they run script with the instructor's Jupyter login (issue 28). Everything here is built on nh3 (the
maintained Rust ``ammonia`` sanitiser) with an allow-list: no script, no event handler, no ``javascript:`` link, no
iframe, no SVG, no ``<style>``, no ``style``/``class``/``id`` attribute, and no remote resource (an image only from a
``data:`` raster URL, so opening a page never sends a request anywhere).

Markdown becomes an *inert block*: the cleaned HTML on one line, wrapped in a ``<div>``, with ``\\`` and ``$``
written as character references. Any markdown renderer passes such a block through untouched (an HTML block ends at
a blank line and it has none), and nbconvert's math regexes, which are quadratic on unclosed ``\\begin{x}``, find
nothing to scan: formgrader renders it in linear time, as often as it is opened. Math is shown as its TeX text.
"""

from __future__ import annotations

import html
import re

import nh3

DISPLAY_CHARS = 100_000  # of one answer or output shown to a person; the rest is cut with a note (intake caps files)

# nh3's default tags without image maps (``area`` carries a link nh3 does not see as one)
TAGS = frozenset(nh3.ALLOWED_TAGS) - {"area", "map"}
# a link is followed only by a click, never by opening the page; data: only for an <img> (:func:`_local_image`)
URL_SCHEMES = frozenset({"http", "https", "mailto", "data"})
_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*\Z")

# Pages we write (feedback, summary.html): nothing runs, nothing is fetched but the page's own inline CSS and data:
# images. A meta tag, since these pages are also opened from disk, where no server sends a header.
PAGE_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
            "base-uri 'none'; form-action 'none'")
# The course's Jupyter server (formgrader, JupyterLab): JupyterLab and nbgrader's pages need their own inline and
# eval'd scripts, so scripts are the sanitiser's job there; the policy keeps every fetch, image, style, font and frame
# on the server itself (CSP does not cover a script navigating the window away).
SERVER_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
              "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
              "connect-src 'self'; frame-src 'self' blob:; worker-src 'self' blob:; object-src 'none'; "
              "base-uri 'self'; form-action 'self'; frame-ancestors 'self'")


def _local_image(tag: str, attribute: str, value: str) -> str | None:
    """nh3's attribute filter: an ``<img>`` keeps its ``src`` only when it is a data: raster image (a remote or
    server-relative one would be fetched the moment the page opens); no other attribute holds a data: URL."""
    if tag == "img" and attribute == "src":
        return value if _DATA_IMAGE.match(value) else None
    return None if value.strip().lower().startswith("data:") else value


_IMAGE_WITHOUT_SOURCE = re.compile(r'<img(?: (?!src=)[a-z-]+="[^"]*")*>')  # nh3's output: attributes quoted


def clean_html(text: str) -> str:
    """``text`` (a student's HTML) with only inert, local markup left; an image whose source was removed says so."""
    clean = nh3.clean(text, tags=set(TAGS), clean_content_tags={"script", "style", "template", "textarea", "title"},
                      attribute_filter=_local_image, url_schemes=set(URL_SCHEMES), strip_comments=True)
    return _IMAGE_WITHOUT_SOURCE.sub("<em>[image not shown: not embedded in the notebook]</em>", clean)


def cut(text: str, limit: int = DISPLAY_CHARS) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, and how many were left out."""
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def cut_note(left_out: int) -> str:
    """The note shown where an answer or output was cut."""
    return (f'<p><em>[{left_out:,} more characters not shown: the full text is in the submitted notebook]</em></p>'
            if left_out else "")


def markdown_html(source: str) -> str:
    """``source`` (markdown) rendered as nbconvert renders a notebook (math kept as its TeX text) and cleaned. Slow
    on hostile input (nbconvert's math regex): call it only under :func:`autograder.process.within`."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    text, left_out = cut(source)
    return clean_html(markdown2html_mistune(text)) + cut_note(left_out)


def plain_html(source: str, note: str = "") -> str:
    """``source`` shown as it was typed (no markdown, no HTML), in linear time: the fallback when rendering took too
    long, with ``note`` saying so."""
    text, left_out = cut(source)
    lead = f"<p><em>{html.escape(note)}</em></p>" if note else ""
    return f'{lead}<pre style="white-space: pre-wrap">{html.escape(text)}</pre>{cut_note(left_out)}'


def inert_block(clean: str) -> str:
    """Cleaned HTML as a markdown cell's source that every markdown renderer passes through as it is and that
    nbconvert's math regexes have nothing to match in (see the module's docstring)."""
    body = (clean.replace("\r", "").replace("\\", "&#92;").replace("$", "&#36;").replace("\n", "&#10;"))
    return f'<div class="looplab-shown">{body}</div>'


def markdown_page(title: str, markdown: str) -> str:
    """A whole HTML page of ``markdown`` that we wrote around students' text (``summary.md``): raw HTML in it shown
    as text, links cleaned, under :data:`PAGE_CSP`. Rendered by mistune alone (linear; no math), tables included."""
    import mistune

    body = clean_html(mistune.create_markdown(escape=True, plugins=["table"])(markdown))
    return with_page_csp(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
                         f"<style>{PAGE_CSS}</style></head>\n<body>\n{body}</body></html>\n")


PAGE_CSS = ("body { font-family: sans-serif; max-width: 70em; margin: 1em auto; padding: 0 1em; } "
            "table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; } "
            "code { background: #f4f4f4; }")

_HEAD = re.compile(r"<head(\s[^>]*)?>", re.I)


def with_page_csp(page: str) -> str:
    """An HTML page we wrote with :data:`PAGE_CSP` as the first thing in its ``<head>`` (once), so that it holds
    before any script or stylesheet the page names."""
    meta = f'<meta http-equiv="Content-Security-Policy" content="{PAGE_CSP}">'
    if meta in page:
        return page
    found = _HEAD.search(page)
    if not found:
        raise ValueError("the page has no <head>: cannot give it a Content-Security-Policy")
    return page[:found.end()] + meta + page[found.end():]
