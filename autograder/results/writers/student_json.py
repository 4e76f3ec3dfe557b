"""``OUT/<student>.json``: everything one student gets back, machine-readable (every test with its points, its
message and its verdict's data). The file's format is kept: fields are only ever added at the end."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

from ..record import ClassRecord, NotebookRecord, StudentRecord, TestRecord
from .feedback import has_page, page_name
from .numbers import points


def files(record: ClassRecord) -> Iterator[tuple[str, bytes]]:
    for student in record.students:
        yield f"{student.student}.json", (json.dumps(as_json(record, student), indent=1) + "\n").encode()


def as_json(record: ClassRecord, student: StudentRecord) -> dict:
    return {"student": student.student, "assignment": record.assignment, "score": points(student.score),
            "raw_score": points(student.raw_score), "late_penalty": points(student.late_penalty),
            "max_score": points(student.max_score), "graded": student.graded, "notes": student.notes,
            "notebooks": {nb.notebook: _notebook(student, nb) for nb in student.notebooks},
            "tests": [_test(t) for t in student.tests]}


def _notebook(student: StudentRecord, nb: NotebookRecord) -> dict:
    return {"status": nb.status, "score": points(nb.score), "raw_score": points(nb.raw_score),
            "late_penalty": points(nb.late_penalty), "late": dataclasses.asdict(nb.late) if nb.late else None,
            "max_score": points(nb.max_score), "seconds": nb.seconds, "timings": nb.timings, "notes": nb.notes,
            "feedback": page_name(student.student, nb.notebook) if has_page(nb) else None}


def _test(test: TestRecord) -> dict:
    v = test.verdict
    return {"notebook": test.notebook, "name": test.name, "kind": test.kind, "points": points(test.points),
            "max_points": points(test.max_points), "passed": test.passed, "message": v.message, "judged": v.judged,
            "blocked_by": list(v.blocked_by), "causes": list(v.causes), "concept": v.concept, "by": v.by,
            "hidden": test.facts.hidden}
