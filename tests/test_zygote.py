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


def test_an_optimizer_the_zygote_cannot_prewarm_is_said(monkeypatch, capsys):
    """Every torch optimizer is built once before kernels fork (the first one imports torch._dynamo); one that
    cannot be is named in the zygote's log, not passed over in silence (a recheck would later see torch change), and
    each of torch's own is built without a word."""
    import torch

    from autograder.sandbox import zygote

    class Refuses(torch.optim.SGD):
        def __init__(self, params):
            raise ValueError("not with these parameters")

    monkeypatch.setattr(torch.optim, "Refuses", Refuses, raising=False)
    zygote._prewarm_optimizers()
    assert capsys.readouterr().err.splitlines() == [
        "zygote: could not prewarm Refuses: ValueError('not with these parameters')"]
