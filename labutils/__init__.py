"""Loop Lab reference implementation: data, model, the training loop, checkpoints, plots and checks."""

from . import lean_imports, versions

lean_imports.skip()  # before anything imports nbformat: seconds of CPU per process (see the module)

# below the floor: one line naming the supported torch and how to install it, not a deep traceback later; newer than
# every checked release: one line on stderr saying which were checked, and the lab runs
versions.check()
