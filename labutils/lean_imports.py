"""Imports that cost seconds for nothing this lab uses, kept out of every process that imports labutils or autograder.

``jsonschema`` imports ``rfc3987_syntax`` when it is installed (Jupyter's ``jupyter-events`` installs it, through
``jsonschema[format-nongpl]``), and that module builds a Lark grammar at import: 1.3-1.9 s of CPU (measured) in every
process that imports ``nbformat``, that is each grading process, worker and command of the autograder, and each test
worker. It serves only the ``iri`` formats of a format checker; no schema read here (nbformat's, nbgrader's) uses
them. A process that imported it already keeps it.
"""

from __future__ import annotations

import sys

SKIPPED = ("rfc3987_syntax",)


def skip() -> None:
    """Mark each of :data:`SKIPPED` as absent (``import`` then raises ImportError, which jsonschema expects of an
    optional module), unless this process imported it already."""
    for name in SKIPPED:
        sys.modules.setdefault(name, None)
