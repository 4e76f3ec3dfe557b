"""The class summary: summary.md (score distribution, every test's failures, the concepts missed by root cause, the
notes), the same as summary.html (rendered by :func:`autograder.course.sanitize.markdown_page`) and summary.png, for the instructor who reads one page instead of a folder of JSON."""

from __future__ import annotations

import io
import statistics
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from labutils import exercises
from labutils.atomic import write_atomically

from autograder.course import sanitize
from autograder.layout import ASSIGNMENT
from autograder.untrusted import md_code

from labutils.verdict import BY_HAND

from .journal import kill_point
from .record import StudentRecord, TestRecord


SUMMARY_HTML = "summary.html"  # summary.md rendered safely: students' text in it is shown, never run


def write_summary(out: Path, records: list[StudentRecord], test_max: dict, result) -> None:
    totals = [r.score for r in records]
    max_total = sum(m for m, _ in test_max.values())
    auto_total = sum(m for m, manual in test_max.values() if not manual)
    n = len(records)
    lines = [
        f"# Loop Lab grades: {ASSIGNMENT}",
        "",
        f"{n} student(s), graded {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {result.seconds:.0f} s; "
        f"maximum {max_total:g} points, of which {auto_total:g} autograded.",
        "",
    ]
    if not result.complete:
        lines += ["**Incomplete run:**", *[f"- {md_code(p)}" for p in result.problems], ""]
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
    for (nb, name), (max_points, manual) in sorted(test_max.items(), key=lambda kv: kv[1][1]):
        handed_in = [r for r in records if r.notebooks[nb].handed_in]
        absent = n - len(handed_in)
        tests = [t for r in handed_in for t in r.tests if t.notebook == nb and t.name == name]
        if manual:
            answered = sum(1 for t in tests if t.passed is None)
            graded = sum(1 for t in tests if t.by == BY_HAND and t.judged)  # a person gave its score
            lines.append(f"| {nb} | {name} (written) | {max_points:g} | | {absent} | "
                         f"{answered} answer(s) to grade by hand, {graded} graded, "
                         f"{len(tests) - answered - graded} left blank |")
            continue
        failed = failed_by_test[(nb, name)] = [t for t in tests if t.passed is False]
        failures[(nb, name)] = len(failed) + absent
        message = _most_common(failed)
        lines.append(f"| {nb} | {name} | {max_points:g} | {len(failed)}/{len(handed_in)} | {absent} | "
                     f"{message} |")
    for (nb, name), students in sorted(_missed_by_root_cause(records).items()):
        title = exercises.concept(nb, name)
        if title:
            concepts.append((nb, title, len(students), _most_common(failed_by_test.get((nb, name), []))))
    lines += _concepts_missed(concepts)
    noted = [(r.student, r.notes + [f"{nb}: {x}" for nb, v in r.notebooks.items() for x in v.notes
                                    if v.status != "missing"]) for r in records]
    noted = [(s, notes) for s, notes in noted if notes]
    if noted:
        lines += ["", "## Notes", ""]
        for student, notes in noted:
            lines += [f"- **{md_code(student)}**: " + "; ".join(md_code(first_line(x, 200)) for x in notes)]
    lines.append("")
    markdown = "\n".join(lines)
    write_atomically(out / "summary.md", markdown.encode())
    write_atomically(out / SUMMARY_HTML, sanitize.markdown_page(f"Loop Lab grades: {ASSIGNMENT}", markdown).encode())
    kill_point("summary")  # a test's: the summary written, its plot not yet
    _plot(out / "summary.png", totals, max_total, failures, n)


def _missed_by_root_cause(records: list[StudentRecord]) -> dict[tuple[str, str], set[str]]:
    """(notebook, graded test) -> the students who lost points because of it (their own failure, or a test of
    theirs it left unjudged: the verdict's ``blocked_by``)."""
    missed: dict[tuple[str, str], set[str]] = {}
    for r in records:
        for t in r.tests:
            if r.notebooks[t.notebook].handed_in and t.passed is False and t.kind == "auto":
                missed.setdefault((t.notebook, t.root_cause), set()).add(r.student)
    return missed


def _most_common(failed: list[TestRecord]) -> str:
    """The message of the ``failed`` tests' most common cause (their verdicts' blocked_by, else causes: data, not
    words), with how many share it, as a table cell: it quotes the students' code and exceptions, so it is code
    (:func:`~autograder.untrusted.md_code`), never markdown."""
    by_cause: dict[tuple, list[TestRecord]] = {}
    for t in failed:
        by_cause.setdefault((tuple(t.blocked_by), tuple(t.causes), t.judged), []).append(t)
    if not by_cause:
        return ""
    common = max(by_cause.values(), key=len)  # the first of the most common: records come in student order
    message = next((first_line(t.message) for t in common if t.message), "")
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


def _plot(path: Path, totals: list[float], max_total: float, failures: dict, n: int) -> None:
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
    write_atomically(path, image.getvalue())


def first_line(message: str, width: int = 140) -> str:
    line = next((l.strip() for l in message.splitlines() if l.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"

