"""The class summary: summary.md (score distribution, every test's failures, the concepts missed by root cause, the
notes), the same as summary.html (rendered by :func:`autograder.course.sanitize.markdown_page`) and summary.png, for the instructor who reads one page instead of a folder of JSON."""

from __future__ import annotations

import io
import statistics
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone

from autograder.course import sanitize
from autograder.layout import ASSIGNMENT
from autograder.untrusted import md_code

from labutils.verdict import BY_HAND

from ..record import ClassRecord, StudentRecord, TestRecord

SUMMARY_MD = "summary.md"
SUMMARY_HTML = "summary.html"  # summary.md rendered safely: students' text in it is shown, never run
SUMMARY_PNG = "summary.png"


def files(record: ClassRecord) -> Iterator[tuple[str, bytes]]:
    """summary.md, summary.html, then summary.png (its figure drawn only when it is its turn)."""
    markdown, failures = _markdown(record)
    yield SUMMARY_MD, markdown.encode()
    yield SUMMARY_HTML, sanitize.markdown_page(f"Loop Lab grades: {ASSIGNMENT}", markdown).encode()
    yield SUMMARY_PNG, _plot([r.score for r in record.students], record.max_score, failures, len(record.students))


def _markdown(record: ClassRecord) -> tuple[str, dict]:
    """The summary's text, and each autograded test's count of students failing it or not handing it in."""
    records = record.students
    totals = [r.score for r in records]
    max_total = record.max_score
    auto_total = sum(t.max_points for t in record.tests if not t.written)
    n = len(records)
    lines = [
        f"# Loop Lab grades: {ASSIGNMENT}",
        "",
        f"{n} student(s), graded {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {record.run.seconds:.0f} s; "
        f"maximum {max_total:g} points, of which {auto_total:g} autograded.",
        "",
    ]
    if not record.complete:
        lines += ["**Incomplete run:**", *[f"- {md_code(p)}" for p in record.problems], ""]
    if totals:
        lines += [
            "## Score distribution",
            "",
            f"mean {statistics.mean(totals):.2f}, median {statistics.median(totals):g}, "
            f"min {min(totals):g}, max {max(totals):g} (of {max_total:g})",
            "",
            "| score | students |",
            "|---:|---:|",
            *[f"| {score:g} | {count} |" for score, count in sorted(Counter(totals).items())],
            "",
        ]
    lines += ["## Tests", "",
              "Failures count the students who handed the notebook in; the message is that of their most common "
              "cause (the checks that cost the points, or the test to fix first). Written answers are graded by hand "
              "in the gradebook (0 in grades.csv until then).", "",
              "| notebook | test | points | failed | not handed in | most common message |",
              "|---|---|---:|---:|---:|---|"]
    failures, failed_by_test, concepts = {}, {}, []
    for facts in sorted(record.tests, key=lambda f: f.written):
        nb, name, max_points = facts.notebook, facts.name, facts.max_points
        handed_in = [r for r in records if r.notebook(nb).handed_in]
        absent = n - len(handed_in)
        tests = [t for r in handed_in for t in r.tests if t.notebook == nb and t.name == name]
        if facts.written:
            answered = sum(1 for t in tests if t.passed is None)
            graded = sum(1 for t in tests if t.verdict.by == BY_HAND and t.verdict.judged)  # a person gave its score
            lines.append(f"| {nb} | {name} (written) | {max_points:g} | | {absent} | "
                         f"{answered} answer(s) to grade by hand, {graded} graded, "
                         f"{len(tests) - answered - graded} left blank |")
            continue
        failed = failed_by_test[(nb, name)] = [t for t in tests if t.passed is False]
        failures[(nb, name)] = len(failed) + absent
        message = _most_common(failed)
        lines.append(f"| {nb} | {name} | {max_points:g} | {len(failed)}/{len(handed_in)} | {absent} | "
                     f"{message} |")
    concept_of = {(f.notebook, f.name): f.concept for f in record.tests}
    for (nb, name), students in sorted(_missed_by_root_cause(records).items()):
        title = concept_of.get((nb, name))
        if title:
            concepts.append((nb, title, len(students), _most_common(failed_by_test.get((nb, name), []))))
    lines += _concepts_missed(concepts)
    noted = [(r.student, r.notes + [f"{v.notebook}: {x}" for v in r.notebooks for x in v.notes
                                    if v.status != "missing"]) for r in records]
    noted = [(s, notes) for s, notes in noted if notes]
    if noted:
        lines += ["", "## Notes", ""]
        for student, notes in noted:
            lines += [f"- **{md_code(student)}**: " + "; ".join(md_code(first_line(x, 200)) for x in notes)]
    lines.append("")
    return "\n".join(lines), failures


def _missed_by_root_cause(records: list[StudentRecord]) -> dict[tuple[str, str], set[str]]:
    """(notebook, graded test) -> the students who lost points because of it (their own failure, or a test of
    theirs it left unjudged: the verdict's ``blocked_by``)."""
    missed: dict[tuple[str, str], set[str]] = {}
    for r in records:
        for t in r.tests:
            if r.notebook(t.notebook).handed_in and t.passed is False and t.kind == "auto":
                missed.setdefault((t.notebook, t.root_cause), set()).add(r.student)
    return missed


def _most_common(failed: list[TestRecord]) -> str:
    """The message of the ``failed`` tests' most common cause (their verdicts' blocked_by, else causes: data, not
    words), with how many share it, as a table cell: it quotes the students' code and exceptions, so it is code
    (:func:`~autograder.untrusted.md_code`), never markdown."""
    by_cause: dict[tuple, list[TestRecord]] = {}
    for t in failed:
        by_cause.setdefault((tuple(t.verdict.blocked_by), tuple(t.verdict.causes), t.verdict.judged), []).append(t)
    if not by_cause:
        return ""
    common = max(by_cause.values(), key=len)  # the first of the most common: records come in student order
    message = next((first_line(t.verdict.message) for t in common if t.verdict.message), "")
    return f"{md_code(message, table=True)} ({len(common)}x)" if message else f"({len(common)}x)"


def _concepts_missed(concepts: list[tuple[str, str, int, str]]) -> list[str]:
    """The concepts the class missed, most missed first: what to teach again, in the words of the lab's registry.
    ``concepts``: (notebook, concept, students who lost its points, their most common message)."""
    if not concepts:
        return []
    return ["", "## Concepts missed", "",
            "Each graded test checks one concept the lab teaches; the students who handed the notebook in and lost "
            "points because of it (its own failure, or a test it left \"not judged\"), most missed first.", "",
            "| notebook | concept | students | most common message |", "|---|---|---:|---|",
            *[f"| {nb} | {title} | {n} | {message} |"
              for nb, title, n, message in sorted(concepts, key=lambda row: (-row[2], row[0], row[1]))]]


def _plot(totals: list[float], max_total: float, failures: dict, n: int) -> bytes:
    from matplotlib.figure import Figure  # no pyplot: nothing interactive here, and its import cost 0.3 s per run

    fig = Figure(figsize=(12, max(4, 0.3 * len(failures) + 1)))
    ax1, ax2 = fig.subplots(1, 2)
    bins = range(0, int(max_total) + 2)
    ax1.hist(totals, bins=bins, align="left", rwidth=0.8, color="tab:blue")
    ax1.set_xlabel(f"total score (of {max_total:g})")
    ax1.set_ylabel("students")
    ax1.set_title("Score distribution")
    labels = [f"{nb}: {name}" for nb, name in failures]
    ax2.barh(labels, list(failures.values()), color="tab:red")
    ax2.invert_yaxis()
    ax2.set_xlim(0, max(n, 1))
    ax2.set_xlabel(f"students failing or not handing in (of {n})")
    ax2.set_title("Failures per test")
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    return image.getvalue()


def first_line(message: str, width: int = 140) -> str:
    line = next((l.strip() for l in message.splitlines() if l.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"

