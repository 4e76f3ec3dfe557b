"""A student's text quoted within a budget: its first ``limit`` characters and how many more there were, never all.

Why one function: a check's message (``labutils.checks``), an error kept in a graded notebook's outputs
(``autograder/run/budget.py``) and a name shown to the instructor (``autograder/untrusted.py``) all quote text a
student chose, and each copy of it is kept again downstream: an 8 MB exception class name once made a 23 MB student
JSON. It lives in labutils, not in the grader, because the checks run in the notebooks, where the grader is not
installed (the grader imports labutils, never the reverse), and it imports nothing, so the grader's lowest floor can.
"""

from __future__ import annotations

STUDENT_CHARS = 300  # one piece of a student's code quoted in a message: a class name, a line, an exception's text


def capped(text: object, limit: int = STUDENT_CHARS) -> str:
    """``text`` as a string cut to ``limit`` characters, saying how many were cut."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit:,} characters cut]"
