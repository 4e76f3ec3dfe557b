"""Loop Lab reference implementation: data, model, the training loop, checkpoints, plots and checks."""

from . import versions

versions.check()  # one line naming the supported torch and how to install it, not a deep traceback later
