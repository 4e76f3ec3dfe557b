"""The hidden tests: what a graded cell's ``verify(...)`` does, the recheck that re-runs them outside the student's
kernel, and the snapshot that tells whether student code patched the modules a check uses.
"""

from .verifier import verify

__all__ = ["verify"]
