"""Running the tasks of a grading run: one (student, notebook) task graded in a sandboxed kernel, and the executors
that run many of them (local worker processes, a Dask cluster), with the run's progress.
"""
