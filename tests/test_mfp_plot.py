"""The MFP histograms' value axes (docs/benchmark.md section 10, Plot; issue 39, case 17): every tick
label reads as its own value, with no offset text ("1e-5+9.999e-1") or shared multiplier ("1e-7")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench import mfp as R


def _scores(n: int = 12, seed: int = 0) -> pd.DataFrame:
    """Per-pair scores as near-identical maps give them: G within 2e-5 of 1, a spatial MSE near 1e-7."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "pair": [f"t{i:02d}.png" for i in range(n)],
        "global_score": 1 - rng.uniform(1e-6, 2e-5, n),
        "spatial_distance": rng.uniform(1e-3, 3e-3, n),
        "spatial_mse": rng.uniform(1e-7, 3e-7, n),
        "loss": rng.uniform(1e-4, 3e-4, n),
        "ssim": rng.uniform(0.4, 0.9, n),
        "psnr": rng.uniform(15, 30, n),
    })


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_axes_have_no_offset_text_and_every_label_reads_as_its_tick(seed, tmp_path):
    import matplotlib.pyplot as plt

    df = _scores(seed=seed)
    fig = R.mfp_figure(df)
    try:
        fig.canvas.draw()  # tick labels and offset texts are only set when drawn
        panels = [ax for ax in fig.axes if ax.get_ylabel() == "pairs"]
        assert len(panels) == 6
        for ax in panels:
            title = ax.get_title().splitlines()[0]
            assert ax.xaxis.get_offset_text().get_text() == "", (title, ax.xaxis.get_offset_text().get_text())
            assert ax.yaxis.get_offset_text().get_text() == "", title
            low, high = ax.get_xlim()
            ticks = [(t.get_loc(), t.label1.get_text()) for t in ax.xaxis.get_major_ticks()
                     if low <= t.get_loc() <= high]
            locs = np.array([loc for loc, _ in ticks])
            spacing = float(np.diff(locs).min())
            labels = [text.replace("\N{MINUS SIGN}", "-") for _, text in ticks]
            assert len(ticks) >= 2 and len(set(labels)) == len(labels), (title, labels)
            for loc, text in zip(locs, labels):
                assert abs(float(text) - loc) <= spacing / 100, (title, loc, text)
        g_axis = next(ax for ax in panels if ax.get_title().startswith("global score G"))
        g_labels = [t.get_text() for t in g_axis.get_xticklabels() if t.get_text()]
        assert all(t.startswith(("0.9999", "1.0000")) for t in g_labels), g_labels
        fig.savefig(tmp_path / "mfp.png", dpi=100)
    finally:
        plt.close(fig)


def test_plain_tick_labels_against_hand_written_values():
    assert R.plain_tick_labels([0.99998, 0.999984, 0.999988, 0.999992]) == [
        "0.999980", "0.999984", "0.999988", "0.999992"]
    assert R.plain_tick_labels([0.0, 0.5, 1.0]) == ["0.0", "0.5", "1.0"]
    assert R.plain_tick_labels([15.0, 20.0, 25.0]) == ["15", "20", "25"]
    assert R.plain_tick_labels([1.2e-7, 1.6e-7, 2.0e-7]) == ["1.2e-07", "1.6e-07", "2.0e-07"]
    assert R.plain_tick_labels([-0.2, 0.0, 0.2]) == ["-0.2", "0.0", "0.2"]
