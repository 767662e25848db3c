"""Issue 31 section 3: the report's plots read without guessing. Each test draws the real plot
through ``build_report`` and reads the real figure back (its bars, lines and texts); expected
numbers are recomputed here with plain pandas from the synthetic rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench import caveats
from geofidelity_bench import report as rp
from geofidelity_bench import results as rs
from geofidelity_bench.report import plots as report_plots

from test_report import FAST, GAAS_REASON, synthetic_results, write_folder

SIMS = ["sim_target", "sim_same_neighborhood", "sim_same_city", "sim_same_driving_side", "sim_random_city"]


@pytest.fixture
def figures(monkeypatch):
    """The figures the report draws, by plot name, read after the real plot code drew them."""
    kept = {}
    save = report_plots._save

    def keep(fig, path, layout=True):
        kept[path.stem] = fig
        return save(fig, path, layout)

    monkeypatch.setattr(report_plots, "_save", keep)
    return kept


def _report(tmp_path, df, city_names=None):
    info = {"encoder": {"name": "dinov2-base"}, "benchmark": {"fingerprint": "ab" * 32},
            "nan_reasons": [{"column": "gaas", "reason": GAAS_REASON, "n_rows": len(df), "rows": []}]}
    if city_names:
        info["benchmark"]["city_names"] = city_names
    folder = write_folder(tmp_path / "results", df, info)
    loaded, infos = rs.load_results([folder])
    return rp.build_report(loaded, tmp_path / "out", run_info=infos, **FAST)


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text") and callable(a.get_text))]


def test_hierarchy_bars_average_one_set_of_blocks_with_intervals_and_say_n_a(tmp_path, figures):
    df = synthetic_results(methods=("sdxl",), conditions=("L1",))
    held = df["method"] == "heldout_real"
    # one block has no same-neighborhood / same-city negative (the demo's Berlin block)
    df.loc[held & (df["block_id"] == "city1_b2"), ["sim_same_neighborhood", "sim_same_city"]] = np.nan
    # the generator has no same-city value anywhere: its bar is n/a, not 0
    df.loc[df["method"] == "sdxl", "sim_same_city"] = np.nan
    rep = _report(tmp_path, df)
    assert rep["plots"]["hierarchy"]["status"] == "ok"
    fig = figures["hierarchy"]
    ax = fig.axes[0]
    assert ax.get_title().startswith("Reference hierarchy")
    bars = [c for c in ax.containers if type(c).__name__ == "BarContainer"]
    assert len(bars) == 2  # held-out real, sdxl
    # held-out: every bar over the 11 blocks that have every negative (independent: plain pandas)
    h = df[held & (df["block_id"] != "city1_b2")]
    assert [p.get_height() for p in bars[0].patches] == pytest.approx([h[c].mean() for c in SIMS])
    assert h[SIMS].notna().all().all() and h["block_id"].nunique() == 11
    # sdxl: same_city has no value -> a bar of height 0 that reads "n/a"; the others over all 12 blocks
    g = df[df["method"] == "sdxl"]
    heights = [p.get_height() for p in bars[1].patches]
    assert heights[2] == 0
    assert [heights[i] for i in (0, 1, 3, 4)] == pytest.approx([g[SIMS[i]].mean() for i in (0, 1, 3, 4)])
    missing = [t for t in ax.texts if t.get_gid() == "missing_bar"]
    assert [t.get_text() for t in missing] == ["n/a"]
    assert missing[0].get_position()[0] == pytest.approx(bars[1].patches[2].get_x() + bars[1].patches[2].get_width() / 2)
    # intervals: a whisker per finite bar, around its bar
    assert all(len(c.errorbar.lines[2][0].get_segments()) == 5 for c in bars)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == f"Held-out Real: 11 blocks ({caveats.fewer_blocks_note(11, 12)})"
    assert legend[1] == "SDXL: 12 blocks"
    foot = next(t.get_text() for t in fig.texts if t.get_gid() == "footnote")
    assert "city1_b2" in foot


def test_city_heatmap_names_cities_counts_blocks_fixes_its_scale_and_marks_missing_cells(tmp_path, figures):
    df = synthetic_results(methods=("sdxl",), conditions=("L1",), n_cities=3)
    df = df[~((df["method"] == "sdxl") & (df["city"] == "city2"))]  # no sdxl row in city2
    df = df[~((df["method"] == "sdxl") & (df["block_id"] == "city0_b0"))]  # sdxl on 2 of city0's 3 blocks
    names = {"city0": "Zero Town", "city1": "Uno City", "city2": "Dos Ville"}
    _report(tmp_path, df, city_names=names)
    ax = figures["city_heatmap"].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["Zero Town (3 blocks)", "Uno City (3 blocks)", "Dos Ville (3 blocks)"]
    image = ax.get_images()[0]
    assert image.get_clim() == (0.0, 1.0)  # not stretched over the values' spread
    cells = [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.texts if t.get_gid() == "missing_cell"] == ["n/a"]
    sdxl0 = df[(df["method"] == "sdxl") & (df["city"] == "city0")]["cos_sim"].mean()
    assert f"{sdxl0:.2f}\n(2 of 3)" in cells
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| Zero Town |" in md


def test_leaderboard_marks_a_row_over_fewer_blocks_and_tells_zero_from_missing(tmp_path, figures):
    df = synthetic_results(methods=("sdxl", "flux_dev"), conditions=("L1",))
    df = df[~((df["method"] == "flux_dev") & ~df["block_id"].isin(["city0_b0", "city0_b1"]))]  # 2 of 12 blocks
    df.loc[df["method"] == "sdxl", "retrieval_acc"] = 0.0
    df.loc[df["method"] == "flux_dev", "mrr"] = np.nan
    rep = _report(tmp_path, df)
    fig = figures["leaderboard"]
    axes = {a.get_title().split(" ")[0]: a for a in fig.axes}
    rows = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    flux = next(r for r in rows if r.startswith("FLUX.1-dev"))
    assert caveats.fewer_blocks_note(2, 12) in flux
    assert not any(caveats.FEWER_BLOCKS_MARK in r for r in rows if not r.startswith("FLUX.1-dev"))
    order = [r.split(" (")[0] for r in rows]
    retrieval = axes["Retrieval"]
    zero = [t for t in retrieval.texts if t.get_gid() == "value_label"]
    assert [t.get_text().strip() for t in zero] == ["0.00"]
    y_sdxl = retrieval.get_yticks()[order.index("SDXL")]
    assert zero[0].get_position()[1] == pytest.approx(y_sdxl)
    mrr = [t.get_text().strip() for t in axes["MRR"].texts if t.get_gid() == "value_label"]
    assert mrr == ["n/a"]
    # the faded bar is the fewer-blocks row's, in every panel
    cos = axes["CosSim"]
    alphas = {round(p.get_y() + p.get_height() / 2): p.get_alpha() for p in cos.patches}
    assert alphas[round(cos.get_yticks()[order.index("FLUX.1-dev")])] == pytest.approx(0.45)
    assert alphas[round(cos.get_yticks()[order.index("SDXL")])] is None
    assert caveats.FEWER_BLOCKS_MARK in rep["plots"]["leaderboard"]["caption"]


def test_condition_plot_draws_the_anchors_and_marks_points_over_fewer_blocks(tmp_path, figures):
    df = synthetic_results(methods=("sdxl",), conditions=("L0", "L1"))
    df = df[~((df["condition"] == "L1") & (df["block_id"] != "city3_b0"))]  # L1 on 1 block, as on the demo
    _report(tmp_path, df)
    ax = figures["cos_sim_by_condition"].axes[0]
    anchors = {ln.get_label().split(" (")[0]: ln.get_ydata()[0] for ln in ax.get_lines() if ln.get_gid() == "anchor"}
    for method, label in (("heldout_real", "Held-out Real"), ("random_same_country", "Random-Same-Country"),
                          ("random_global", "Random-Global")):
        assert anchors[label] == pytest.approx(df.loc[df["method"] == method, "cos_sim"].mean())
    hollow = [ln for ln in ax.get_lines() if ln.get_gid() == "fewer_blocks"]
    assert len(hollow) == 1
    x, y = hollow[0].get_xdata()[0], hollow[0].get_ydata()[0]
    assert x == pytest.approx(1.0)  # the L1 column
    assert y == pytest.approx(df.loc[(df["method"] == "sdxl") & (df["condition"] == "L1"), "cos_sim"].mean())
    assert any(t == "n=1 \u2020" for t in _texts(ax))
    assert any(caveats.FEWER_BLOCKS_MARK in t.get_text() for t in ax.get_legend().get_texts())


def test_run_json_records_the_city_names():
    from types import SimpleNamespace

    from geofidelity_bench.benchmark import load_benchmark

    bench = load_benchmark("demo")
    encoder = SimpleNamespace(name="x", dim=1, config={}, config_hash="h")
    rec = rs.run_record(bench, encoder, pd.DataFrame())
    assert rec["benchmark"]["city_names"] == {k: c.name for k, c in bench.cities.items()}
    json.dumps(rec["benchmark"])
