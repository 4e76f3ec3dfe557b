"""``python -m labutils``: the instructor's command line (:mod:`labutils.reference.cli`)."""

import sys

try:
    from .reference.cli import main
except ModuleNotFoundError as exc:
    if exc.name is None or not exc.name.startswith("labutils.reference"):
        raise
    sys.exit("python -m labutils is the instructor's command line and is not part of the student handout; "
             "open the notebooks with `jupyter lab notebooks/` instead.")

sys.exit(main())
