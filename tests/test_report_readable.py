"""Issue 28, the report side: chance next to every retrieval number, held-out anchors that repeat
photos say so, copied panels are marked and never win, and the aggregation bugs of part 7.

Expected numbers are recomputed here with plain pandas from the synthetic rows; the copy audit
records are written by hand following contract C2 (run.json ``near_copies`` / ``copy_audit``).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from geofidelity_bench import caveats
from geofidelity_bench import report as rp
from geofidelity_bench import results as rs
from geofidelity_bench.cli import main
from geofidelity_bench.report import plots as report_plots

from test_report import FAST, synthetic_results, write_folder

CHANCE_RED = (0xC4, 0x4E, 0x52)


def _with_chance(df: pd.DataFrame, seed: int = 3) -> pd.DataFrame:
    """Blocks with 3, 4 or 5 candidates; some with one block in two roles (chance 1/3 with 4 candidates)."""
    from geofidelity_bench.metrics import retrieval_chance

    roles = [{"same_city": "x", "random_city": "y"},
             {"same_neighborhood": "x", "same_city": "x", "random_city": "y"},
             {"same_neighborhood": "w", "same_city": "x", "same_driving_side": "y", "random_city": "z"}]
    out = df.copy()
    for i, block in enumerate(sorted(out["block_id"].unique())):
        c = retrieval_chance({"target": "t", **roles[i % 3]})
        sel = out["block_id"] == block
        out.loc[sel, ["n_candidates", "chance_retrieval_acc", "chance_mrr"]] = [c.n_candidates, c.accuracy, c.mrr]
    return out


def _report(tmp_path, df, run_info=None, name="out", **kw):
    folder = write_folder(tmp_path / f"results_{name}", df, run_info)
    loaded, infos = rs.load_results([folder])
    rep = rp.build_report(loaded, tmp_path / name, run_info=infos, **{**FAST, **kw})
    return rep, (tmp_path / name / "report.md").read_text(), tmp_path / name


def _board(md: str) -> str:
    return md.split("## Table 10")[1].split("\n## ")[0]


def _red_pixels(png) -> int:
    arr = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return int((np.abs(arr - np.array(CHANCE_RED)).sum(axis=2) < 40).sum())


# -- part 2: chance --------------------------------------------------------------------------------


def test_table10_shows_the_chance_level_each_row_averages(tmp_path):
    df = _with_chance(synthetic_results())
    # a block without a finite retrieval score does not enter the row's chance mean
    drop = (df["method"] == "sdxl") & (df["block_id"] == "city0_b0") & (df["condition"] == "L1")
    df.loc[drop, ["retrieval_acc", "mrr"]] = np.nan
    rep, md, out = _report(tmp_path, df)
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")
    for method, cond in (("sdxl", "L1"), ("flux_dev", "L1"), ("heldout_real", "anchor")):
        rows = df[(df["method"] == method) & (df["condition"] == cond) & df["retrieval_acc"].notna()]
        assert t10.loc[method, "chance_retrieval_acc"] == pytest.approx(rows["chance_retrieval_acc"].mean())
        assert t10.loc[method, "chance_mrr"] == pytest.approx(rows["chance_mrr"].mean())
    board = _board(md)
    header = board.splitlines()[4]
    assert "Retrieval accuracy by chance" in header and "MRR by chance" in header
    line = next(x for x in board.splitlines() if x.startswith("| Held-out Real"))
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[header.split("|")[1:-1].index(" Retrieval accuracy by chance ")] == \
        f"{df[df['method'] == 'heldout_real']['chance_retrieval_acc'].mean():.3f}"
    # the sentence on how a block filling two roles is counted
    assert "fills two negative roles (4 of 12 block(s) here)" in board
    assert "1 / (distinct candidate blocks), not 1 / candidates" in board


def test_leaderboard_plot_draws_a_dashed_chance_line_on_retrieval_and_mrr(tmp_path):
    df = _with_chance(synthetic_results())
    rep, _, out = _report(tmp_path, df)
    png = out / rep["plots"]["leaderboard"]["png"]
    assert _red_pixels(png) > 100
    assert "chance level" in rep["plots"]["leaderboard"]["caption"]
    # without recorded chance (an older results.csv) no line is drawn, and the report says why
    old = synthetic_results().drop(columns=["n_candidates", "chance_retrieval_acc", "chance_mrr"])
    rep2, md2, out2 = _report(tmp_path, old, name="old")
    assert _red_pixels(out2 / rep2["plots"]["leaderboard"]["png"]) == 0
    assert "chance levels are not recorded" in _board(md2)


def test_an_older_results_csv_reads_the_new_columns_as_nan(tmp_path):
    old = synthetic_results().drop(columns=list(rs.ADDED_COLUMNS))
    folder = write_folder(tmp_path / "old", old)
    df = rs.read_results_csv(folder / "results.csv")
    for col in rs.ADDED_COLUMNS:
        assert col in df.columns and df[col].isna().all()


# -- part 3: thin anchors --------------------------------------------------------------------------


def test_held_out_anchors_that_repeat_photos_are_marked_counted_and_explained(tmp_path):
    df = synthetic_results()
    held = df["method"] == "heldout_real"
    thin = held & df["block_id"].isin(["city0_b0", "city1_b2", "city3_b1"])
    df.loc[thin, "n_distinct"] = 1
    rep, md, out = _report(tmp_path, df)
    mark = f"{caveats.REPEATS_MARK} in 3 of 12 blocks"
    board = _board(md)
    assert next(x for x in board.splitlines() if x.startswith("| Held-out Real")).startswith(f"| Held-out Real ({mark})")
    assert caveats.thin_anchor_note(3, 12) in board
    for section in ("## Table 4", "## CosSim per city"):
        part = md.split(section)[1].split("\n## ")[0]
        assert mark in part and caveats.thin_anchor_note(3, 12) in part
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")
    assert t10.loc["heldout_real", "n_blocks_repeating"] == 3 and t10.loc["sdxl", "n_blocks_repeating"] == 0
    assert "Random-Global (" not in board  # rows that do not repeat are not marked


# -- part 1: copied panels -------------------------------------------------------------------------


def _copied_run(df):
    """pixart_sigma copied three reference photos of city0_b0 and city1_b1 under L1 (hand-written C2 records)."""
    records = [
        {"method": "pixart_sigma", "condition": "L1", "block_id": "city0_b0", "file": "pixart_sigma/L1/city0_b0/00.jpg",
         "reference_id": "city0_b0__ref7", "reference_block_id": "city0_b0", "hash_distance": 3, "cosine": 0.9931,
         "exact": False, "flagged": True},
        {"method": "pixart_sigma", "condition": "L1", "block_id": "city0_b0", "file": "pixart_sigma/L1/city0_b0/01.jpg",
         "reference_id": "city0_b0__ref2", "reference_block_id": "city0_b0", "hash_distance": 0, "cosine": 1.0,
         "exact": True, "flagged": True},
        {"method": "pixart_sigma", "condition": "L1", "block_id": "city1_b1", "file": "pixart_sigma/L1/city1_b1/03.jpg",
         "reference_id": "world_17", "reference_block_id": "world", "hash_distance": 5, "cosine": None,
         "exact": False, "flagged": True},
    ]
    df = df.copy()
    sel = (df["method"] == "pixart_sigma") & (df["condition"] == "L1")
    df.loc[sel & (df["block_id"] == "city0_b0"), "n_copied"] = 2
    df.loc[sel & (df["block_id"] == "city1_b1"), "n_copied"] = 1
    df.loc[df["method"] == "pixart_sigma", "cos_sim"] += 0.3  # it would win every CosSim ranking
    info = {"encoder": {"name": "dinov2-base"}, "benchmark": {"fingerprint": "ab" * 32},
            "copy_audit": {"thresholds": {"hash_distance": 8, "cosine": 0.95}, "method": "phash + embedding NN",
                           "compared_with": "every reference photo and the world pool", "n_audited": 96,
                           "n_flagged": 3, "excluded": False, "images": records},
            "near_copies": records}
    return df, info, records


def test_copied_generator_is_marked_listed_and_never_the_best(tmp_path):
    df, info, records = _copied_run(synthetic_results())
    rep, md, out = _report(tmp_path, df, info)
    section = md.split("## Copied reference photos")[1].split("\n## ")[0]
    for r in records:
        assert os.path.basename(r["file"]) in section and r["reference_id"] in section
    # one line per panel: flagged k of n, its files, the photos matched (by block), distance and cosine ranges
    assert ("| pixart_sigma / L1 / city0_b0 | 2 of 4 | pixart_sigma/L1/city0_b0/: 00.jpg, 01.jpg | "
            "city0_b0__ref7, city0_b0__ref2 (city0_b0) | 0-3 | 0.9931-1.0000 | 1 of 2 |") in section
    assert ("| pixart_sigma / L1 / city1_b1 | 1 of 4 | pixart_sigma/L1/city1_b1/03.jpg | world_17 (world) | 5 | n/a | "
            "0 of 1 |") in section
    assert caveats.copied_note(2, 3) in section
    board = _board(md)
    lines = [x for x in board.splitlines() if x.startswith("| ")]
    pix = next(x for x in lines if x.startswith("| PixArt"))
    assert f"{caveats.COPIED_MARK} in 2 of 12 panels" in pix and "**" not in pix
    # bold goes to the best clean generator, which is listed first
    gen_lines = [x for x in lines[2:] if x.split(" | ")[0][2:].split(" (")[0] in ("SDXL", "FLUX.1-dev", "PixArt-Σ")]
    assert gen_lines[-1] is pix and "**" in gen_lines[0].split(" | ")[1]
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")
    clean = df[(df["condition"] == "L1") & df["method"].isin(["sdxl", "flux_dev"])]
    assert t10.loc["generator_mean", "cos_sim"] == pytest.approx(clean.groupby("block_id")["cos_sim"].mean().mean())
    # never ranked
    ranks = pd.DataFrame(rep["tables"]["rank_stability"]["rows"])
    assert "pixart_sigma" not in set(ranks["method"])
    # Table 5 and the plots carry the mark
    t5 = md.split("## Table 5")[1].split("\n## ")[0]
    assert caveats.COPIED_MARK in next(x for x in t5.splitlines() if x.startswith("| PixArt"))
    assert rep["copy_audit"]["images"][0]["hash_distance"] == 3


def test_a_run_without_a_copy_audit_says_so(tmp_path):
    _, md, _ = _report(tmp_path, synthetic_results())
    assert "## Copied reference photos\n\nnot recorded" in md


# -- part 7 ----------------------------------------------------------------------------------------


def test_folders_that_both_hold_the_anchors_pair_across_folders(tmp_path):
    full = synthetic_results(conditions=("L0", "L1", "C_WRONG_STREET"))
    anchors = full[full["condition"] == "anchor"]
    l0 = pd.concat([full[full["condition"] == "L0"], anchors])
    l1 = pd.concat([full[full["condition"] == "L1"], anchors])
    ctl = pd.concat([full[full["condition"] == "C_WRONG_STREET"], anchors])
    folders = [write_folder(tmp_path / n, d) for n, d in (("l0", l0), ("l1", l1), ("ctl", ctl))]
    rep = rp.report_from_dirs(folders, tmp_path / "out", plots=False, **FAST)
    assert rep["tables"]["prompt_deltas"]["status"] == "ok"
    t6 = pd.DataFrame(rep["tables"]["prompt_deltas"]["rows"])
    row = t6[(t6["comparison"] == "L1 - L0") & (t6["metric"] == "cos_sim")].iloc[0]
    gen = full[full["condition"] != "anchor"]
    wide = gen.pivot_table(index=["method", "block_id"], columns="condition", values="cos_sim")
    assert row["n_pairs"] == len(wide) and row["delta"] == pytest.approx((wide["L1"] - wide["L0"]).mean())
    assert rep["tables"]["controls"]["status"] == "ok"
    t7 = pd.DataFrame(rep["tables"]["controls"]["rows"])
    c = t7[t7["metric"] == "cos_sim"].iloc[0]
    assert c["benefit"] == pytest.approx((wide["L1"] - wide["C_WRONG_STREET"]).mean()) and c["n_pairs"] == len(wide)
    assert rep["parameters"]["pair_keys"] == ["method", "block_id"]
    assert not any("anchors differ" in n for n in rep["notes"])


def test_anchors_that_differ_between_folders_are_named(tmp_path):
    full = synthetic_results(conditions=("L0", "L1"))
    anchors = full[full["condition"] == "anchor"]
    other = anchors.copy()
    other.loc[other.index[:2], "cos_sim"] += 0.01
    a = write_folder(tmp_path / "a", pd.concat([full[full["condition"] == "L0"], anchors]))
    b = write_folder(tmp_path / "b", pd.concat([full[full["condition"] == "L1"], other]))
    rep = rp.report_from_dirs([a, b], tmp_path / "out", plots=False, **FAST)
    note = next(n for n in rep["notes"] if "anchors differ" in n)
    assert "2 row(s)" in note and "0.01" in note


def test_rows_without_a_finite_score_cover_no_block(tmp_path):
    df = synthetic_results()
    dead = (df["method"] == "sdxl") & (df["condition"] == "L1") & (df["block_id"] == "city2_b1")
    metric_cols = [c for c in rs.RESULT_METRIC_COLUMNS]
    df.loc[dead, metric_cols] = np.nan
    rep, md, _ = _report(tmp_path, df)
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")
    assert t10.loc["sdxl", "n_blocks"] == 11 and t10.loc["flux_dev", "n_blocks"] == 12
    t4 = pd.DataFrame(rep["tables"]["hierarchy"]["rows"]).set_index("method")
    assert t4.loc["sdxl", "n_blocks"] == 11
    board = _board(md)
    assert "every row averages the same 12 block(s)" not in board
    assert "not comparable across rows" in board and "SDXL 11" in board
    assert any("1 row(s) have no finite score" in n for n in rep["notes"])


def _info(config_hash, fingerprint="ab" * 32, encoder="dinov2-base"):
    return {"encoder": {"name": encoder, "config_hash": config_hash}, "benchmark": {"fingerprint": fingerprint},
            "protocol": {"version": "1"}}


def test_folders_that_are_not_comparable_are_never_ranked_together(tmp_path, capsys):
    a = write_folder(tmp_path / "a", synthetic_results(methods=("sdxl",)), _info("1" * 64))
    b = write_folder(tmp_path / "b", synthetic_results(methods=("flux_dev",), anchors=False, seed=1), _info("2" * 64))
    with pytest.raises(rp.ReportError, match="not comparable") as err:
        rp.report_from_dirs([a, b], tmp_path / "r0", **FAST)
    assert "another encoder config" in str(err.value) and str(a) in str(err.value)
    assert main(["report", "--results", str(a), str(b), "--out", str(tmp_path / "r"), "--n-resamples", "50",
                 "--no-plots"]) == 2
    assert "not comparable" in capsys.readouterr().err
    rep = rp.report_from_dirs([a, b], tmp_path / "r", allow_mixed_encoders=True, plots=False, **FAST)
    assert len(rep["sub_reports"]) == 2
    for sub in rep["sub_reports"].values():
        sub_rep = json.loads((tmp_path / "r" / sub["folder"] / "report.json").read_text())
        methods = {r["method"] for r in sub_rep["tables"]["leaderboard"]["rows"]}
        assert "generator_mean" not in methods and not {"sdxl", "flux_dev"} <= methods
    # the same encoder config in two folders: one report
    c = write_folder(tmp_path / "c", synthetic_results(methods=("flux_dev",), anchors=False, seed=1), _info("1" * 64))
    rep = rp.report_from_dirs([a, c], tmp_path / "r2", plots=False, **FAST)
    assert "generator_mean" in {r["method"] for r in rep["tables"]["leaderboard"]["rows"]}


def test_every_interval_label_follows_the_confidence(tmp_path, monkeypatch):
    texts = []
    save = report_plots._save

    def keep_texts(fig, path, layout=True):  # the real figure, read after the real plot code drew it
        texts.extend(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
        return save(fig, path, layout)

    monkeypatch.setattr(report_plots, "_save", keep_texts)
    df = synthetic_results(conditions=("L0", "L1", "C_WRONG_STREET"))
    rep, md, out = _report(tmp_path, df, confidence=0.8)
    assert "95%" not in md and "95 %" not in md
    assert "80% CI" in md and "80% interval" in md
    assert "95%" not in json.dumps(rep["plots"]) and "95%" not in json.dumps(
        {k: v.get("caption") for k, v in rep["tables"].items()})
    assert texts and not any("95%" in t for t in texts)
    assert any("80% interval" in t for t in texts) and any("80% CI" in t for t in texts)


def test_direction_line_does_not_call_similarities_higher_is_better(tmp_path):
    _, md, _ = _report(tmp_path, synthetic_results())
    assert "every other reported metric: higher is better" not in md
    line = next(x for x in md.splitlines() if x.startswith("- higher is better"))
    higher, rest = line.split("lower is better", 1)
    assert "sim_same_city" not in higher and "sim_random_city" not in higher and "diversity_gap" not in higher
    assert "no direction" in rest and "sim_same_city" in rest and "sim_random_city" in rest


def test_table5_says_when_generators_cover_different_blocks(tmp_path, monkeypatch):
    df = synthetic_results()
    df = df[~((df["method"] == "flux_dev") & df["block_id"].isin(["city0_b0", "city0_b1"]))]
    titles = []
    save = report_plots._save

    def keep(fig, path, layout=True):
        titles.extend(ax.get_title() for ax in fig.axes)
        return save(fig, path, layout)

    monkeypatch.setattr(report_plots, "_save", keep)
    rep, md, _ = _report(tmp_path, df)
    t5 = md.split("## Table 5")[1].split("\n## ")[0]
    assert "under L1: **not comparable across rows**" in t5 and "FLUX.1-dev 10" in t5
    assert "under L0: **not comparable across rows**" in t5
    assert any("not comparable" in t for t in titles)


@pytest.mark.parametrize("n_cities,blocks_per_city,thin", [(4, 3, True), (3, 4, True), (5, 2, False)])
def test_thin_intervals_carry_the_caveat(tmp_path, n_cities, blocks_per_city, thin):
    df = synthetic_results(n_cities=n_cities, blocks_per_city=blocks_per_city)
    rep, md, _ = _report(tmp_path, df, plots=False)
    expected = caveats.interval_caveat(n_cities * blocks_per_city, n_cities)
    for name in ("leaderboard", "cos_sim_by_condition", "prompt_deltas", "rank_stability"):
        notes = " ".join(rep["tables"][name]["notes"])
        assert (expected is not None and expected in notes) == thin, name


def test_printed_leaderboard_shows_chance_and_marks():
    df = _with_chance(synthetic_results())
    df.loc[(df["method"] == "heldout_real") & (df["block_id"] == "city0_b0"), "n_distinct"] = 1
    df.loc[(df["method"] == "sdxl") & (df["condition"] == "L1") & (df["block_id"] == "city0_b1"), "n_copied"] = 2
    text = rs.leaderboard_text(df)
    header = text.splitlines()[0].split()
    assert header[header.index("Retr^") + 1] == "Retr@chance" and header[header.index("MRR^") + 1] == "MRR@chance"
    line = next(x for x in text.splitlines() if x.startswith("heldout_real"))
    held = df[df["method"] == "heldout_real"]
    assert f"{held['chance_retrieval_acc'].mean():.3f}" in line and f"{held['chance_mrr'].mean():.3f}" in line
    assert f"[{caveats.REPEATS_MARK} 1/12]" in line
    sdxl = next(x for x in text.splitlines() if x.startswith("sdxl") and " L1 " in x)
    assert caveats.COPIED_MARK in sdxl
    assert "@chance:" in text


def test_printed_leaderboard_lists_copied_rows_last_even_with_the_best_cos_sim():
    df = _with_chance(synthetic_results())
    copied = (df["method"] == "sdxl") & (df["condition"] == "L1")
    df.loc[copied, "cos_sim"] = 0.999  # a copy scores like the block's own photos
    df.loc[copied & (df["block_id"] == "city0_b1"), "n_copied"] = 2
    methods = set(df["method"])
    rows = [x.split()[:2] for x in rs.leaderboard_text(df).splitlines()[2:] if x and x.split()[0] in methods]
    assert rows[-1][0] == "sdxl" and rows[0][0] != "sdxl"
    clean = df[~copied].groupby(["method", "condition"])["cos_sim"].mean().sort_values(ascending=False)
    assert rows[0][0] == clean.index[0][0]  # the best clean row heads the table


def test_folders_of_two_benchmarks_are_refused_or_split_naming_both_fingerprints(tmp_path, capsys):
    """Two benchmark fingerprints that share their first 12 characters: the short form alone cannot
    tell them apart, so the message and the index name both in full (issue 29)."""
    fp_a, fp_b = "ab" * 32, "ab" * 6 + "cd" * 26
    a = write_folder(tmp_path / "a", synthetic_results(methods=("sdxl", "flux_dev")), _info("1" * 64, fp_a))
    b = write_folder(tmp_path / "b", synthetic_results(methods=("flux_dev",), seed=1), _info("1" * 64, fp_b))
    with pytest.raises(rp.ReportError, match="not comparable") as err:
        rp.report_from_dirs([a, b], tmp_path / "r0", **FAST)
    assert f"benchmark fingerprint: {fp_a} ({a}), {fp_b} ({b})" in str(err.value)
    assert main(["report", "--results", str(a), str(b), "--out", str(tmp_path / "r1"), "--n-resamples", "50",
                 "--no-plots"]) == 2
    assert fp_b in capsys.readouterr().err and not (tmp_path / "r1").exists()
    rep = rp.report_from_dirs([a, b], tmp_path / "r", allow_mixed_encoders=True, plots=False, **FAST)
    subs = sorted(rep["sub_reports"].values(), key=lambda s: s["runs"])
    assert [(s["runs"], s["benchmark_fingerprint"]) for s in subs] == [(["a"], fp_a), (["b"], fp_b)]
    index = (tmp_path / "r" / "report.md").read_text()
    assert f"{fp_a} ({a})" in index and f"{fp_b} ({b})" in index
    for sub, fp, other in ((subs[0], fp_a, fp_b), (subs[1], fp_b, fp_a)):
        md = (tmp_path / "r" / sub["report_md"]).read_text()
        assert f"- benchmark fingerprint: {fp}\n" in md and other not in md
    sub_b = json.loads((tmp_path / "r" / subs[1]["folder"] / "report.json").read_text())
    assert "sdxl" not in {r["method"] for r in sub_b["tables"]["leaderboard"]["rows"]}
