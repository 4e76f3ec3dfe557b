"""The nbgrader course: its configuration, the release of the notebooks, the student handout, the course a grading run
leaves for formgrader, the submissions taken in safely, and the preprocessors that make a notebook gradable.
"""
