"""Loop Lab autograder: release, grade and hand out the notebooks (instructor only)."""

import labutils  # noqa: F401  # first: it keeps slow imports nothing uses out of this process (labutils.lean_imports)
