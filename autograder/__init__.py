"""Loop Lab autograder: release, grade and hand out the notebooks (instructor only)."""
