"""Loop Lab reference implementation: data, model, the training loop, checkpoints, plots and checks."""

from . import lean_imports, versions

lean_imports.skip()  # before anything imports nbformat: seconds of CPU per process (see the module)

versions.check()  # one line naming the supported torch and how to install it, not a deep traceback later
