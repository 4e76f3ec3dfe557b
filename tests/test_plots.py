"""Every plot returns a Figure and writes a PNG."""

import pytest

from labutils import plots


def test_plots_return_figures_and_save_pngs(tmp_path):
    history = [{"epoch": e, "train_loss": 1 / e, "val_loss": 1.2 / e, "val_acc": 0.8 + e / 100} for e in (1, 2, 3)]
    step_log = [{"step": s, "loss": 2 / s, "run": 1} for s in range(1, 31)]
    step_log += [{"step": s, "loss": 2 / s, "run": 2} for s in range(21, 41)]  # redone after the crash
    figures = {
        "hist": plots.plot_grad_norms([0.2, 0.5, 1.5, 0.7], max_norm=1.0, path=tmp_path / "hist.png"),
        "lr": plots.plot_lr([1e-4, 1e-3, 5e-4], path=tmp_path / "lr.png"),
        "curves": plots.plot_curves(history, path=tmp_path / "curves.png"),
        "compare": plots.plot_compare_curves({"a": history, "b": history}, path=tmp_path / "compare.png"),
        "resume": plots.plot_resume_curve(step_log, crash_step=30, resume_step=20, path=tmp_path / "resume.png"),
        "speed": plots.plot_throughput({"fp32": 4000, "bf16": 5000}, path=tmp_path / "speed.png"),
    }
    for name, fig in figures.items():
        assert fig.axes, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["hist.png", "lr.png", "curves.png", "compare.png", "resume.png", "speed.png"])
    assert "25.0% clipped" in figures["hist"].axes[0].get_title()
    assert "crash after step 30" in [t.get_text() for t in figures["resume"].axes[0].get_legend().get_texts()]


def test_clipped_share_needs_norms():
    assert plots.clipped_share([0.5, 2.0], 1.0) == 0.5
    with pytest.raises(ValueError, match="no gradient norms"):
        plots.clipped_share([], 1.0)
