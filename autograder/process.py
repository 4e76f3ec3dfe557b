"""How a forked child of the grader ends: it runs its body and leaves with ``os._exit`` (0, or 1 with the traceback on
stderr). It never returns into the code it was forked from: an exception that unwound into the zygote's request loop
would leave a second zygote serving requests."""

from __future__ import annotations

import os
import traceback
from typing import Callable, NoReturn


def child_runs(body: Callable[[], object]) -> NoReturn:
    """Run ``body`` in this forked child, then exit it."""
    code = 1
    try:
        body()
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)
