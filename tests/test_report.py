"""Tests of geofidelity_bench.report and the `geofidelity-bench report` command, on synthetic
results folders whose expected numbers are recomputed here with plain pandas."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench import report as rp
from geofidelity_bench import results as rs
from geofidelity_bench.cli import main
from geofidelity_bench.stats import RESULT_COLUMNS

GAAS_REASON = "GAAS needs a semantic segmenter; none was given, so the gaas column is NaN"
FAST = dict(n_resamples=200, rank_resamples=100)
CONTROL_EFFECT = {"C_WRONG_STREET": 0.01, "C_SHUFFLED_NEIGHBORHOOD": 0.02, "C_WRONG_STREET_NEIGHBORHOOD": 0.03}


def synthetic_results(methods=("sdxl", "flux_dev", "pixart_sigma"), conditions=("L0", "L1"), anchors=True,
                      sanity=False, n_cities=4, blocks_per_city=3, encoder="dinov2-base", seed=0, countries=None):
    rng = np.random.default_rng(seed)
    effect = {"L0": 0.0, "L1": 0.04, "L2": 0.045, "GPS_ONLY": 0.0, **{c: 0.04 - e for c, e in CONTROL_EFFECT.items()}}
    rows = []
    for ci in range(n_cities):
        city = f"city{ci}"
        for b in range(blocks_per_city):
            block, base = f"{city}_b{b}", rng.normal(0.5, 0.05)
            units = [(m, c) for m in methods for c in conditions]
            units += [(m, "anchor") for m in ("heldout_real", "random_same_country", "random_global") if anchors]
            units += [(m, "sanity") for m in ("sanity_augmented_heldout", "sanity_world") if sanity]
            for m, cond in units:
                if cond == "anchor":
                    cs = {"heldout_real": 0.9, "random_same_country": 0.7, "random_global": 0.33}[m]
                elif cond == "sanity":
                    cs = {"sanity_augmented_heldout": 0.85, "sanity_world": 0.3}[m]
                else:
                    cs = base + effect[cond] + 0.02 * methods.index(m)
                cs += rng.normal(0, 0.02)
                st = 0.8 * cs
                neg = st - rng.normal(0.02, 0.03)
                rows.append({
                    "method": m, "condition": cond, "block_id": block, "city": city,
                    "country": countries[ci] if countries else f"C{ci}", "stratum": "major",
                    "n_generated": 4, "n_reference": 20, "cos_sim": cs,
                    "mmd": max(0.0, 0.6 - cs + rng.normal(0, 0.02)), "dcsf": max(0.0, 0.7 - cs + rng.normal(0, 0.02)),
                    "diversity_gap": rng.normal(0.05, 0.02), "gaas": np.nan,
                    "retrieval_acc": float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])), "mrr": rng.uniform(0.3, 1.0),
                    "sim_target": st, "sim_same_neighborhood": neg, "sim_same_city": neg - 0.02,
                    "sim_same_driving_side": rng.normal(0.2, 0.02), "sim_random_city": rng.normal(0.18, 0.02),
                    "local_margin": st - neg, "strongest_margin": st - neg, "encoder": encoder,
                    "n_distinct": 4, "n_copied": np.nan if cond == "anchor" else 0.0, "n_candidates": 5,
                    "chance_retrieval_acc": 1 / 5, "chance_mrr": (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5,
                })
    return pd.DataFrame(rows).reindex(columns=list(RESULT_COLUMNS))  # columns a row does not set (n_copied) stay NaN


def write_folder(path, df, run_info=None):
    path.mkdir(parents=True, exist_ok=True)
    df.to_csv(path / "results.csv", index=False)
    info = run_info if run_info is not None else {
        "encoder": {"name": str(df["encoder"].iloc[0])},
        "benchmark": {"fingerprint": "ab" * 32},
        "nan_reasons": [{"column": "gaas", "reason": GAAS_REASON, "n_rows": len(df), "rows": []}],
    }
    (path / "run.json").write_text(json.dumps(info))
    return path


@pytest.fixture(scope="module")
def l0_l1_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("rep")
    df = synthetic_results()
    folder = write_folder(base / "results", df)
    loaded, infos = rs.load_results([folder])
    rep = rp.build_report(loaded, base / "out", run_info=infos, **FAST)
    return df, rep, base / "out"


def test_report_contains_every_table_its_inputs_allow(l0_l1_report):
    _, rep, out = l0_l1_report
    tables = rep["tables"]
    for name in ("hierarchy", "cos_sim_by_condition", "prompt_deltas", "leave_one_city_out", "leaderboard",
                 "rank_stability", "city_by_method"):
        assert tables[name]["status"] == "ok", (name, tables[name].get("reason"))
        assert (out / tables[name]["csv"]).is_file()
    assert tables["controls"]["status"] == "skipped"
    assert tables["controls"]["reason"].startswith("no control rows")
    for name in ("clip_associations", "clip_name_sensitivity", "clip_no_retrieval"):
        assert tables[name]["status"] == "skipped" and "clip_alignment.csv" in tables[name]["reason"]
        assert not (out / "tables" / f"{name}.csv").exists()  # never faked
    md = (out / "report.md").read_text()
    assert "skipped: no control rows" in md
    assert md.count("skipped: no clip_alignment.csv") == 3
    assert "L2 - L1: skipped, no L2 rows" in md
    assert GAAS_REASON in md  # the n/a reason comes from run.json
    saved = json.loads((out / "report.json").read_text())
    assert saved["tables"]["controls"]["reason"] == tables["controls"]["reason"]
    assert saved["parameters"]["seed"] == 42 and saved["parameters"]["n_resamples"] == 200
    assert saved["parameters"]["rank_resamples"] == 100 and saved["parameters"]["encoders"] == ["dinov2-base"]
    assert saved["inputs"]["benchmark_fingerprints"] == ["ab" * 32]
    assert saved["metric_na"]["gaas"] == GAAS_REASON
    # every table of the paper's numbering is present, done or skipped
    for title in ("Table 4", "Table 5", "Table 6", "Table 7", "Table 8", "Table 9", "Table 10"):
        assert f"## {title}" in md


def test_report_numbers_match_pandas(l0_l1_report):
    df, rep, _ = l0_l1_report
    gen = df[df["condition"].isin(["L0", "L1"])]
    # Table 5
    t5 = pd.DataFrame(rep["tables"]["cos_sim_by_condition"]["rows"]).set_index("method")
    expected = gen.pivot_table(index="method", columns="condition", values="cos_sim", aggfunc="mean")
    for m in expected.index:
        assert t5.loc[m, "L0"] == pytest.approx(expected.loc[m, "L0"])
        assert t5.loc[m, "L1"] == pytest.approx(expected.loc[m, "L1"])
    # Table 10: generators under L1 and anchors
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")
    l1 = df[df["condition"] == "L1"].groupby("method")["cos_sim"].mean()
    for m, v in l1.items():
        assert t10.loc[m, "cos_sim"] == pytest.approx(v)
        assert t10.loc[m, "cos_sim_ci_low"] <= v <= t10.loc[m, "cos_sim_ci_high"]
    held = df[(df["condition"] == "anchor") & (df["method"] == "heldout_real")]
    assert t10.loc["heldout_real", "retrieval_acc"] == pytest.approx(held["retrieval_acc"].mean())
    assert t10.loc["heldout_real", "group"] == "anchor"
    assert t10.loc["generator_mean", "cos_sim"] == pytest.approx(l1.mean())
    assert t10.loc["sdxl", "gaas"] is None  # NaN column -> null in JSON, "n/a" in Markdown
    # Table 6, L1 - L0 on CosSim: matched and city-balanced
    t6 = pd.DataFrame(rep["tables"]["prompt_deltas"]["rows"])
    row = t6[(t6["comparison"] == "L1 - L0") & (t6["metric"] == "cos_sim")].iloc[0]
    wide = gen.pivot_table(index=["method", "block_id", "city"], columns="condition", values="cos_sim").reset_index()
    diff = wide["L1"] - wide["L0"]
    assert row["delta"] == pytest.approx(diff.mean())
    assert row["n_pairs"] == len(wide) and row["n_positive"] == int((diff > 0).sum())
    assert row["city_delta"] == pytest.approx(wide.assign(d=diff).groupby("city")["d"].mean().mean())
    assert row["n_cities"] == 4
    assert row["ci_low"] <= row["delta"] <= row["ci_high"]
    assert set(t6["comparison"]) == {"L1 - L0"} and "gaas" not in set(t6["metric"])
    # Table 4
    t4 = pd.DataFrame(rep["tables"]["hierarchy"]["rows"]).set_index("method")
    assert t4.loc["heldout_real", "sim_target"] == pytest.approx(held["sim_target"].mean())
    assert t4.loc["flux_dev", "sim_random_city"] == pytest.approx(
        df[(df["condition"] == "L1") & (df["method"] == "flux_dev")]["sim_random_city"].mean())


def test_leaderboard_markdown_shows_na_and_anchors(l0_l1_report):
    _, _, out = l0_l1_report
    md = (out / "report.md").read_text()
    board = md.split("## Table 10")[1].split("## ")[0]
    assert "Held-out Real" in board and "Random-Global" in board and "Generator mean" in board
    sdxl_line = next(line for line in board.splitlines() if line.startswith("| SDXL"))
    assert sdxl_line.split(" | ")[4] == "n/a"  # GAAS column
    assert "**" in board  # best generator marked


def test_plots_are_written_and_non_empty(l0_l1_report):
    _, rep, out = l0_l1_report
    for name in ("leaderboard", "cos_sim_by_condition", "hierarchy", "city_heatmap"):
        assert rep["plots"][name]["status"] == "ok"
        data = (out / "plots" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1024


def test_cli_report_writes_report_md(tmp_path, capsys):
    folder = write_folder(tmp_path / "results", synthetic_results(conditions=("L0", "L1", "C_WRONG_STREET")))
    rc = main(["report", "--results", str(folder), "--n-resamples", "200", "--rank-resamples", "50", "--no-plots"])
    assert rc == 0
    md = (folder / "report" / "report.md").read_text()  # default --out: <first results>/report
    assert "## Table 7" in md and "Wrong street" in md
    assert "controls" in capsys.readouterr().out
    out = tmp_path / "elsewhere"
    assert main(["report", "--results", str(folder), "--out", str(out), "--n-resamples", "100", "--seed", "7"]) == 0
    saved = json.loads((out / "report.json").read_text())
    assert saved["parameters"]["seed"] == 7 and (out / "plots" / "leaderboard.png").is_file()


def test_mixed_encoders_are_refused_unless_allowed(tmp_path, capsys):
    a = write_folder(tmp_path / "a", synthetic_results(encoder="dinov2-base"))
    b = write_folder(tmp_path / "b", synthetic_results(encoder="clip-vit-b32", seed=1))
    with pytest.raises(rs.ResultsFolderError, match="mix encoders"):
        rs.load_results([a, b])
    with pytest.raises(rp.ReportError, match="mix encoders"):
        rp.report_from_dirs([a, b], tmp_path / "r0")
    rc = main(["report", "--results", str(a), str(b), "--out", str(tmp_path / "r"), "--n-resamples", "50"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--allow-mixed-encoders" in err and "clip-vit-b32" in err
    rc = main(["report", "--results", str(a), str(b), "--out", str(tmp_path / "r"), "--n-resamples", "50",
               "--rank-resamples", "20", "--no-plots", "--allow-mixed-encoders"])
    assert rc == 0
    assert (tmp_path / "r" / "encoder_dinov2-base" / "report.md").is_file()
    assert (tmp_path / "r" / "encoder_clip-vit-b32" / "report.md").is_file()
    assert "encoder_clip-vit-b32/report.md" in (tmp_path / "r" / "report.md").read_text()


def test_anchor_only_results_skip_generator_tables(tmp_path):
    df = synthetic_results(conditions=(), sanity=True)
    rep = rp.build_report(df, tmp_path / "out", run_info={"gaas": GAAS_REASON}, **FAST)
    t = rep["tables"]
    assert t["prompt_deltas"]["status"] == "skipped" and "no L0 rows" in t["prompt_deltas"]["reason"]
    assert t["cos_sim_by_condition"]["status"] == "skipped"
    assert t["rank_stability"]["reason"] == "no L1 rows"
    assert t["leaderboard"]["status"] == "ok" and t["hierarchy"]["status"] == "ok"
    groups = {r["method"]: r["group"] for r in t["leaderboard"]["rows"]}
    assert groups["sanity_world"] == "sanity" and groups["heldout_real"] == "anchor"
    md = (tmp_path / "out" / "report.md").read_text()
    assert "skipped: no L0 rows" in md and GAAS_REASON in md
    assert rep["plots"]["cos_sim_by_condition"]["status"] == "skipped"


def test_runs_scoring_the_same_units_pair_within_run(tmp_path):
    prompt_run = synthetic_results(conditions=("L0", "L1"), seed=0)
    control_run = synthetic_results(conditions=("L1", "C_WRONG_STREET"), anchors=False, seed=5)
    a = write_folder(tmp_path / "prompts", prompt_run)
    b = write_folder(tmp_path / "controls", control_run)
    df, infos = rs.load_results([a, b])
    assert set(df["run"]) == {"prompts", "controls"}
    rep = rp.build_report(df, tmp_path / "out", run_info=infos, plots=False, **FAST)
    controls = pd.DataFrame(rep["tables"]["controls"]["rows"])
    row = controls[controls["metric"] == "cos_sim"].iloc[0]
    w = control_run.pivot_table(index=["method", "block_id"], columns="condition", values="cos_sim")
    assert row["benefit"] == pytest.approx((w["L1"] - w["C_WRONG_STREET"]).mean())  # L1 of the control run only
    assert row["n_pairs"] == len(w)
    deltas = pd.DataFrame(rep["tables"]["prompt_deltas"]["rows"])
    d = deltas[deltas["metric"] == "cos_sim"].iloc[0]
    gen = prompt_run[prompt_run["condition"].isin(["L0", "L1"])]
    w0 = gen.pivot_table(index=["method", "block_id"], columns="condition", values="cos_sim")
    assert d["delta"] == pytest.approx((w0["L1"] - w0["L0"]).mean()) and d["n_pairs"] == len(w0)
    # summaries average the two L1 scorings of a unit
    t5 = pd.DataFrame(rep["tables"]["cos_sim_by_condition"]["rows"]).set_index("method")
    both = pd.concat([prompt_run, control_run])
    per_unit = both[both["condition"] == "L1"].groupby(["method", "block_id"])["cos_sim"].mean()
    assert t5.loc["sdxl", "L1"] == pytest.approx(per_unit.loc["sdxl"].mean())


def test_load_results_errors_and_ids(tmp_path):
    with pytest.raises(rs.ResultsFolderError, match="does not exist"):
        rs.load_results([tmp_path / "nope"])
    with pytest.raises(rp.ReportError, match="does not exist"):
        rp.report_from_dirs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(rs.ResultsFolderError, match="no results.csv"):
        rs.load_results([tmp_path / "empty"])
    folder = write_folder(tmp_path / "na", synthetic_results(countries=["NA", "DE", "FR", "US"]), run_info={})
    df, infos = rs.load_results(folder)
    assert "NA" in set(df["country"]) and infos[0]["_run"] == "na"
    dup = pd.concat([df, df.iloc[:1]])
    with pytest.raises(rp.ReportError, match="repeat"):
        rp.build_report(dup, tmp_path / "out")
    with pytest.raises(rp.ReportError, match="required column"):
        rp.build_report(df.drop(columns="block_id"), tmp_path / "out")


def test_nan_reasons_from_dataframe_attrs_and_default(tmp_path):
    df = synthetic_results(conditions=("L1",), anchors=False)
    df.attrs["nan_reasons"] = [{"method": "sdxl", "condition": "L1", "block_id": "city0_b0", "column": "gaas",
                                "reason": "no segmenter in this run"}]
    df["mrr"] = np.nan
    rep = rp.build_report(df, tmp_path / "out", plots=False, **FAST)
    assert rep["metric_na"] == {"gaas": "no segmenter in this run", "mrr": "no finite values in the results"}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "`gaas`: no segmenter in this run" in md and "`mrr`: no finite values" in md
    assert rep["tables"]["prompt_deltas"]["reason"] == "no L0 rows, no L2 rows, no GPS_ONLY rows"


def test_extra_conditions_get_their_own_table_and_leave_the_others_unchanged(l0_l1_report, tmp_path):
    df, rep, _ = l0_l1_report
    extra = synthetic_results(methods=("sdxl",), conditions=("L1",), anchors=False, seed=3)
    extra["condition"] = "MY_STYLE"
    both = pd.concat([df, extra], ignore_index=True)
    loaded, infos = rs.load_results([write_folder(tmp_path / "results", both)])
    out = rp.build_report(loaded, tmp_path / "out", run_info=infos, **FAST)
    table = out["tables"]["extra_conditions"]
    assert table["status"] == "ok"
    rows = pd.read_csv(tmp_path / "out" / table["csv"])
    assert rows[["method", "condition"]].values.tolist() == [["sdxl", "MY_STYLE"]]
    assert rows["n_blocks"].iloc[0] == extra["block_id"].nunique()
    assert rows["cos_sim"].iloc[0] == pytest.approx(extra["cos_sim"].mean())
    assert any("MY_STYLE" in n and "Extra conditions" in n for n in out["notes"])
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Extra conditions" in md and "| SDXL | MY_STYLE |" in md
    # Every other table is what it is without the extra rows.
    for name, entry in rep["tables"].items():
        assert out["tables"][name]["status"] == entry["status"]
        if entry["status"] == "ok":
            pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "out" / entry["csv"]),
                                          pd.read_csv(Path(rep["out_dir"]) / entry["csv"]))
    assert "extra_conditions" not in rep["tables"]
