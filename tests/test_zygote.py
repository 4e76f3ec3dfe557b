"""The zygote's preload: what kernels inherit from it must be whole."""

from __future__ import annotations

import sys


def test_a_preload_that_fails_halfway_leaves_no_half_initialised_module(tmp_path, monkeypatch, capsys):
    """A package whose import fails after importing a submodule (which holds the aborted package) is forgotten whole,
    submodule included, so a forked kernel imports it afresh instead of meeting "partially initialized module"."""
    from autograder.sandbox import zygote

    package = tmp_path / "halfway_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import sub\nraise RuntimeError('a passing failure')\n")
    (package / "sub.py").write_text("import halfway_pkg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert zygote._import_or_forget("halfway_pkg") is False
    assert not [name for name in sys.modules if name.startswith("halfway_pkg")]
    assert "could not preload halfway_pkg: RuntimeError('a passing failure')" in capsys.readouterr().err
    (package / "__init__.py").write_text("from . import sub\n")
    assert zygote._import_or_forget("halfway_pkg") is True and "halfway_pkg.sub" in sys.modules
