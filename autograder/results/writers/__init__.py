"""The writers of the class record (:class:`autograder.results.record.ClassRecord`): one module per output, each a
function of the record, none reading another's file. Those a grading run leaves in OUT yield ``(name, bytes)``
pairs that :func:`autograder.results.collect.publish` writes; the exports return what they write."""
