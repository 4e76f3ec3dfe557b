"""Student-chosen text shown to the instructor (issue 28): a folder or file name, a note, a message reaches the
terminal, grading.log and summary.md only through :mod:`autograder.untrusted`, with every control character and
escape sequence escaped visibly and names in markdown as code. Fast: no grading run."""

from __future__ import annotations

import io

import pytest

from autograder.untrusted import md_code, shown

pytestmark = pytest.mark.autograder

C0 = [chr(c) for c in range(0x00, 0x20)] + ["\x7f"]  # with DEL
C1 = [chr(c) for c in range(0x80, 0xA0)]
SEQUENCES = {
    "OSC 52 clipboard": "\x1b]52;c;cm0gLXJmIH4K\x07",
    "OSC 52, ST-terminated": "\x1b]52;c;cm0gLXJmIH4K\x1b\\",
    "window title": "\x1b]0;you have been pwned\x07",
    "OSC 8 hyperlink": "\x1b]8;;https://evil.example/\x1b\\grades\x1b]8;;\x1b\\",
    "CSI clear screen": "\x1b[2J\x1b[H",
    "CSI colour": "\x1b[31;1mred\x1b[0m",
    "C1 CSI clear screen": "\x9b2J",
    "C1 OSC 52": "\x9d52;c;cm0K\x9c",
    "DCS": "\x1bP1$r0m\x1b\\",
    "bidi override": "alice\u202egpj.exe",
    "bidi isolates and marks": "\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u202a\u202b\u202c\u202d",
    "zero-width and BOM": "a\u200bb\u200dc\ufeff",
    "line and paragraph separators": "a\u2028b\u2029c\x85d",
    "forged log line": "bob\n[3/3 students] eve/01_x: 8/8",
    "lone surrogate (a non-UTF-8 file name)": "caf\udce9",
}
DANGEROUS = {*C0, *C1} | {c for s in SEQUENCES.values() for c in s if not c.isprintable()}


def harmless(text: str) -> bool:
    """Nothing in ``text`` that a terminal acts on, or that cannot be written as UTF-8."""
    text.encode("utf-8")  # a lone surrogate raises here (and crashes a print to a UTF-8 terminal)
    return all(c.isprintable() for c in text)


@pytest.mark.parametrize("char", C0 + C1, ids=lambda c: f"U+{ord(c):04X}")
def test_every_c0_and_c1_control_is_escaped_visibly(char):
    got = shown(f"a{char}b")
    assert harmless(got) and got.startswith("a\\") and got.endswith("b") and len(got) > 3


@pytest.mark.parametrize("name", SEQUENCES, ids=str)
def test_escape_sequences_lose_their_power(name):
    got = shown(SEQUENCES[name])
    assert harmless(got) and not set(got) & DANGEROUS
    assert "\\" in got  # the escape shows: the instructor sees that something was there


def test_printable_text_is_unchanged():
    text = "Zoë O'Brien-Łukasz 李 <b>|`x`| ☃"
    assert shown(text) == text


def test_long_text_is_capped_and_says_how_much_was_left_out():
    got = shown("x" * 10_000_000, limit=100)
    assert got == "x" * 100 + "… [9,999,900 characters cut]"


def test_a_message_of_several_lines_keeps_only_its_own_line_breaks():
    assert shown("one\x1b[2J\ntwo\r", keep_newlines=True) == "one\\x1b[2J\ntwo\\r"


@pytest.mark.parametrize("name", ["`", "``", "a`b", "`a`", "a ``` b", " ", "", "x|y"])
def test_names_in_markdown_are_one_code_span_whatever_backticks_they_hold(name):
    import mistune

    html = mistune.html(f"- {md_code(name)} end\n")
    inner = html.split("<code>", 1)[1].split("</code>", 1)[0]
    assert html.count("<code>") == 1 and inner.strip() == name.strip() and " end" in html


@pytest.mark.parametrize("text", ['<img src=x onerror="alert(1)">', "[grades](javascript:alert(1))",
                                  "<https://evil.example/>", "![x](https://evil.example/p.png)", "**bold** _it_",
                                  "<script>alert(1)</script>"])
def test_markup_in_a_name_is_only_text(text):
    import mistune

    html = mistune.create_markdown(plugins=["table"])(f"| a |\n|---|\n| {md_code(text, table=True)} |\n")
    assert "<img" not in html and "<a " not in html and "<script" not in html and "<strong" not in html
    assert "<code>" in html


def test_a_table_cell_is_not_split_by_a_pipe():
    assert md_code("a|b", table=True) == "` a\\|b `"


# --- where names are shown --------------------------------------------------------------------------------------------

HOSTILE = "eve\x1b]52;c;cm0K\x07\x1b[2J\u202e`[x](javascript:alert(1))`<img src=x onerror=alert(1)>\nforged"


def test_the_progress_log_and_terminal_get_no_control_character(tmp_path):
    from autograder.run.progress import Progress

    stream = io.StringIO()
    progress = Progress({"eve": 1}, 0.0, tmp_path / "grading.log", stream=stream)
    progress.log(f"SUBMISSIONS/{HOSTILE}: not graded\n  second line")
    for text in (stream.getvalue(), (tmp_path / "grading.log").read_text()):
        assert all(harmless(line) for line in text.splitlines())
        assert "\\x1b]52" in text and "second line" in text


def test_summary_md_shows_names_notes_and_messages_as_code(tmp_path):
    """A refused folder, a note with a student's file name and a failing test's message, all attacker-chosen."""
    import mistune

    from autograder.results.writers import summary
    from autograder_cases import records

    test = records.test("00_a", "test_x", 0, 1, message=f"raised `{HOSTILE}`")
    eve = records.student("eve", {"00_a": [test]}, notes=[f"{HOSTILE}.csv not copied"], notebook_notes=[HOSTILE])
    record = records.class_record([eve], problems=[f"{HOSTILE}: not graded: a link"])
    text = dict(summary.files(record))[summary.SUMMARY_MD].decode()
    assert all(harmless(line) for line in text.splitlines())
    html = mistune.create_markdown(plugins=["table"])(text)
    assert "<img" not in html and "<a " not in html and "javascript:alert" in html  # shown as text, not a link
    assert html.count("\\x1b]52") >= 3
