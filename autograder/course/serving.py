"""What the Jupyter server that serves a graded course lets a page do: read, and grade in formgrader; nothing else.

A page script that ran in the TA's browser (the sanitiser is the defence against that, :mod:`.sanitize`) would act
with the TA's login on the server's whole API. ``OUT/jupyter_server_config.json``
(:func:`autograder.course.formgrader.server_config`) puts these classes in place, so that through that server no
file of the course can be written, renamed or deleted (``nbgrader_config.py``, which the server runs on every
formgrader call, the gradebook, the feedback), no kernel or terminal can be started (code run as the TA), and every
page carries :data:`autograder.course.sanitize.SERVER_CSP`; and ``nbgrader_config.py`` makes nbgrader's own
autograde refuse (:class:`RefuseAutograde`). Formgrader's own API, which writes scores to the
gradebook, stays: it is the job.
"""

from __future__ import annotations

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from nbgrader.preprocessors import NbGraderPreprocessor
from tornado import web

READ_ONLY = ("this course folder is read-only in this Jupyter server (it serves formgrader): change its files from "
             "a shell, or start `jupyter lab` elsewhere")
AUTOGRADE_HERE = ("autograde this course with `python -m autograder grade SUBMISSIONS --out OUT` (it runs the "
                  "students' code confined); nbgrader's own autograde would run it as you, unconfined")
NO_KERNELS = ("no kernel runs in the server that serves formgrader (a page could run code as you): open notebooks "
              "to run from another folder's `jupyter lab`")


class ReadOnlyCourse(AsyncLargeFileManager):
    """The course's files as the contents API serves them: listed and read, never changed."""

    async def save(self, model, path=""):
        raise web.HTTPError(403, READ_ONLY)

    async def delete_file(self, path):
        raise web.HTTPError(403, READ_ONLY)

    async def rename_file(self, old_path, new_path):
        raise web.HTTPError(403, READ_ONLY)

    async def create_checkpoint(self, path):
        raise web.HTTPError(403, READ_ONLY)

    async def restore_checkpoint(self, checkpoint_id, path):
        raise web.HTTPError(403, READ_ONLY)

    async def delete_checkpoint(self, checkpoint_id, path):
        raise web.HTTPError(403, READ_ONLY)


class NoKernels(AsyncMappingKernelManager):
    """No kernel starts: grading a written answer needs none, and a kernel is code run as the TA."""

    async def start_kernel(self, *args, **kwargs):
        raise web.HTTPError(403, NO_KERNELS)



class RefuseAutograde(NbGraderPreprocessor):
    """nbgrader's own autograde (formgrader's Autograde button, ``nbgrader autograde`` in OUT) refuses here: it would
    run the students' code unconfined, as the TA."""

    def preprocess(self, nb, resources):
        raise RuntimeError(AUTOGRADE_HERE)
