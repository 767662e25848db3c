"""What a reader of the report sees: every table states its blocks and flags rows over different
blocks, Table 5 and its plot carry bootstrap intervals and counts per condition, rank stability
is city-balanced, the plots have legends and captions and are sized from their content."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from test_report import FAST, synthetic_results

from geofidelity_bench import caveats
from geofidelity_bench import report as rp
from geofidelity_bench import stats


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """Three generators on 12 blocks, except ``pixart_sigma``, which has L1 on one block only."""
    df = synthetic_results(conditions=("L0", "L1", "GPS_ONLY"))
    keep = ~((df["method"] == "pixart_sigma") & (df["condition"] == "L1") & (df["block_id"] != "city0_b0"))
    keep &= ~((df["condition"] == "GPS_ONLY") & df["block_id"].str.startswith("city3"))
    df = df[keep].reset_index(drop=True)
    out = tmp_path_factory.mktemp("reading") / "out"
    rep = rp.build_report(df, out, **FAST)
    return df, rep, out


def test_table5_has_per_condition_intervals_and_counts(uneven):
    df, rep, out = uneven
    t5 = pd.read_csv(out / "tables" / "cos_sim_by_condition.csv").set_index("method")
    for method in ("sdxl", "pixart_sigma"):
        for cond in ("L0", "L1", "GPS_ONLY"):
            values = df[(df["method"] == method) & (df["condition"] == cond)]["cos_sim"].to_numpy()
            ci = stats.bootstrap_mean_ci(values, n_resamples=FAST["n_resamples"], seed=42)
            assert t5.loc[method, cond] == pytest.approx(values.mean())
            assert t5.loc[method, f"{cond}_n_blocks"] == len(values)
            if len(values) > 1:
                assert (t5.loc[method, f"{cond}_ci_low"], t5.loc[method, f"{cond}_ci_high"]) == pytest.approx(
                    (ci.ci_low, ci.ci_high))
            else:
                assert np.isnan(t5.loc[method, f"{cond}_ci_low"])
    assert t5.loc["sdxl", "GPS_ONLY_n_blocks"] == 9
    md = (out / "report.md").read_text()
    assert "not comparable across conditions" in md and "GPS_ONLY 9" in md


def test_tables_flag_rows_over_different_blocks(uneven, tmp_path):
    _, rep, _ = uneven
    for name in ("leaderboard", "hierarchy"):
        notes = " ".join(rep["tables"][name]["notes"])
        assert "not comparable across rows" in notes and "PixArt-Σ 1" in notes, name
    # rank stability ranks only the generators over the common blocks (Table 10's bold): PixArt is named apart
    notes = " ".join(rep["tables"]["rank_stability"]["notes"])
    assert f"left out: PixArt-Σ ({caveats.fewer_blocks_note(1, 12)})" in notes
    assert "pixart_sigma" not in {r["method"] for r in rep["tables"]["rank_stability"]["rows"]}
    even = rp.build_report(synthetic_results(), tmp_path / "even", **FAST)
    notes = " ".join(even["tables"]["leaderboard"]["notes"])
    assert "not comparable" not in notes and "every row averages the same 12 block(s)" in notes


def test_rank_stability_table_is_city_balanced_and_says_so(uneven):
    df, rep, out = uneven
    t = rep["tables"]["rank_stability"]
    assert "city-balanced" in t["caption"] and {r["weighting"] for r in t["rows"]} == {"city"}
    l1 = df[df["condition"] == "L1"]
    city_means = l1.groupby(["method", "city"])["cos_sim"].mean().groupby("method").mean()
    rows = {r["method"]: r for r in t["rows"] if r["metric"] == "cos_sim"}
    assert set(rows) == {"sdxl", "flux_dev"}  # pixart_sigma: L1 on 1 of 12 blocks, not ranked with them
    for method in rows:
        assert rows[method]["score"] == pytest.approx(city_means[method])
        assert rows[method]["n_blocks"] == 12 and rows[method]["method_n_cities"] == 4


def test_plots_have_captions_and_readable_sizes(uneven):
    _, rep, out = uneven
    md = (out / "report.md").read_text()
    assert "whiskers are bootstrap 95% intervals over blocks" in md or "whiskers their bootstrap 95% intervals" in md
    for name in ("leaderboard", "cos_sim_by_condition", "city_heatmap"):
        entry = rep["plots"][name]
        assert entry["status"] == "ok" and entry["caption"] in md
    with Image.open(out / "plots" / "city_heatmap.png") as im:
        assert im.size[0] >= 450 and im.size[1] >= 300
    report_json = json.loads((out / "report.json").read_text())
    assert report_json["plots"]["leaderboard"]["caption"].startswith("Leaderboard under L1")



def test_cli_says_which_evaluated_method_a_table_leaves_out(tmp_path, capsys):
    from test_report import write_folder

    from geofidelity_bench.cli import main

    df = synthetic_results()
    df = df[~((df["method"] == "pixart_sigma") & (df["condition"] == "L1"))]
    folder = write_folder(tmp_path / "results", df)
    assert main(["report", "--results", str(folder), "--n-resamples", "100", "--rank-resamples", "50",
                 "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "left out: PixArt-Σ has no L1 rows (evaluated under L0)" in out
    lines = out.splitlines()
    assert lines[lines.index(next(l for l in lines if l.startswith("leaderboard "))) + 1].strip().startswith(
        "left out: PixArt-Σ")
