"""labutils.lean_imports: the imports that cost seconds of CPU for nothing stay out of every process of ours."""

from __future__ import annotations

import subprocess
import sys

from labutils import lean_imports

# what each kind of process imports first: the grader and every command (its local workers are its forks), the
# zygote, Gradescope's
ENTRY_POINTS = ("autograder.cli", "autograder.sandbox.zygote", "autograder.gradescope")
PROBE = """
import importlib, sys
for name in {entry_points!r}:
    importlib.import_module(name)
import nbgrader.api, nbformat  # what pulled jsonschema, and with it each skipped module, into every process
print(sorted(name for name in {skipped!r} if sys.modules.get(name) is not None))
"""


def test_no_entry_point_imports_what_is_skipped():
    """Each entry point imports labutils (which marks the skipped modules absent) before anything imports nbformat;
    a new entry point that did not would pay seconds in every process it starts."""
    probe = PROBE.format(entry_points=ENTRY_POINTS, skipped=lean_imports.SKIPPED)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["[]"]


def test_a_skipped_module_imported_before_is_kept(monkeypatch):
    """A process that imported one already (a user's own code) keeps it: skip() never removes a loaded module."""
    loaded = object()
    monkeypatch.setitem(sys.modules, lean_imports.SKIPPED[0], loaded)
    lean_imports.skip()
    assert sys.modules[lean_imports.SKIPPED[0]] is loaded
