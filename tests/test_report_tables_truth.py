"""Issue 39, the report's tables and plots: every view tells the same truth.

Each test builds the real report from synthetic result rows (``test_report.synthetic_results``) and
recomputes what a table or plot must say with plain pandas, loops or scipy; figures are read back
after the real plot code drew them.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from geofidelity_bench import caveats, evaluation
from geofidelity_bench import report as rp
from geofidelity_bench import results as rs

from test_report import FAST, synthetic_results, write_folder
from test_report_plots import figures  # noqa: F401 (a fixture: the figures the report draws)

LEADERBOARD = ["cos_sim", "dcsf", "mmd", "gaas", "retrieval_acc", "mrr", "local_margin", "strongest_margin"]




def _report(tmp_path, df, name="out", clip_scores=None, **kw):
    folder = write_folder(tmp_path / f"results_{name}", df)
    loaded, infos = rs.load_results([folder])
    rep = rp.build_report(loaded, tmp_path / name, run_info=infos, clip_scores=clip_scores, **{**FAST, **kw})
    return rep, (tmp_path / name / "report.md").read_text()


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}")[1].split("\n## ")[0]


def _rows(md_section: str) -> list[list[str]]:
    """The body rows of the first Markdown table of a section, as cells."""
    lines = [x for x in md_section.splitlines() if x.startswith("| ")]
    return [[c.strip() for c in x[1:-1].split(" | ")] for x in lines[2:]]  # after the header and the rule


def _label(row: list[str]) -> str:
    return row[0]


# -- case 6: every interval header follows --confidence ---------------------------------------------


def _clip_scores(df: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Per-panel CLIP scores of the L1 rows (clip_alignment.csv's columns), random but well-formed."""
    from geofidelity_bench import clip_alignment as ca

    rng = np.random.default_rng(seed)
    rows = []
    for r in df[df["condition"] == "L1"].itertuples():
        s = {"method": r.method, "condition": r.condition, "block_id": r.block_id, "city": r.city}
        for text in ca.TEXT_KINDS:
            s[ca.score_column(text)] = base = rng.normal(0.3, 0.02)
            for alt in ca.ALTERATIONS:
                s[ca.score_column(text, alt)] = base - rng.normal(0.002, 0.003)
        rows.append(s)
    return pd.DataFrame(rows)


def test_table9_header_follows_the_confidence(tmp_path):
    df = synthetic_results(conditions=("L1",))
    rep, md = _report(tmp_path, df, clip_scores=_clip_scores(df), confidence=0.8, plots=False)
    assert rep["tables"]["clip_name_sensitivity"]["status"] == "ok"
    t9 = _section(md, "Table 9")
    assert "Mean difference (80% CI)" in t9
    assert "95%" not in md


# -- case 8: --allow-unpromptable rows are marked, listed apart and never ranked ---------------------


def _with_unpromptable() -> pd.DataFrame:
    """sdxl and flux_dev under L0 and L1 on 12 blocks; pixart_sigma under L0 on 12 blocks and under L1
    on 3 blocks scored with --allow-unpromptable, with the best CosSim of all."""
    df = synthetic_results(conditions=("L0", "L1"))
    df["unpromptable"] = 0.0
    pix_l1 = (df["method"] == "pixart_sigma") & (df["condition"] == "L1")
    refused = ["city0_b0", "city1_b1", "city2_b2"]
    df = df[~pix_l1 | df["block_id"].isin(refused)].copy()
    pix_l1 = (df["method"] == "pixart_sigma") & (df["condition"] == "L1")
    df.loc[pix_l1, "unpromptable"] = 1.0
    df.loc[pix_l1, ["cos_sim", "retrieval_acc"]] = [0.99, 1.0]
    return df.reset_index(drop=True)


def test_unpromptable_rows_are_marked_listed_last_and_never_ranked(tmp_path, figures):
    df = _with_unpromptable()
    rep, md = _report(tmp_path, df)
    board = _section(md, "Table 10")
    rows = _rows(board)
    pix = [r for r in rows if _label(r).startswith("PixArt")]
    assert len(pix) == 1 and caveats.UNPROMPTABLE_MARK in _label(pix[0])
    assert rows[-1] is pix[0] and not any("**" in c for c in pix[0])  # after every other row, never bold
    # bold goes to the best promptable generator (plain pandas)
    l1 = df[(df["condition"] == "L1") & (df["unpromptable"] == 0)]
    best = l1.groupby("method")["cos_sim"].mean().idxmax()
    label = {"sdxl": "SDXL", "flux_dev": "FLUX.1-dev"}[best]
    assert next(r for r in rows if _label(r) == label)[1].startswith("**")
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"])
    pix_row = t10[t10["method"] == "pixart_sigma"].iloc[0]
    assert pix_row["unpromptable"] and pix_row["n_blocks"] == 3 and pix_row["cos_sim"] == pytest.approx(0.99)
    # not in the generator mean: the mean over blocks of the per-block mean of sdxl and flux_dev
    mean = t10[t10["method"] == "generator_mean"].iloc[0]
    per_block = {}
    for r in l1.itertuples():
        per_block.setdefault(r.block_id, []).append(r.cos_sim)
    assert mean["cos_sim"] == pytest.approx(np.mean([np.mean(v) for v in per_block.values()]))
    assert caveats.UNPROMPTABLE_LEGEND in board
    # never ranked: rank stability leaves it out and names it
    rank = rep["tables"]["rank_stability"]
    assert "pixart_sigma" not in {r["method"] for r in rank["rows"]}
    assert any(caveats.UNPROMPTABLE_MARK in n and "PixArt-Σ under L1 (3 block(s))" in n for n in rank["notes"])
    # never compared: Table 6 pairs only the promptable L1 panels with L0
    t6 = pd.DataFrame(rep["tables"]["prompt_deltas"]["rows"])
    cos = t6[(t6["comparison"] == "L1 - L0") & (t6["metric"] == "cos_sim")].iloc[0]
    assert cos["n_pairs"] == len(l1)
    assert any("PixArt-Σ under L1" in n for n in rep["tables"]["prompt_deltas"]["notes"])
    for name in ("hierarchy", "city_by_method"):
        assert any(caveats.UNPROMPTABLE_MARK in n for n in rep["tables"][name]["notes"]), name
    assert "pixart_sigma" not in {r["method"] for r in rep["tables"]["hierarchy"]["rows"]}
    # the plot: the row's label carries the mark, its bars are drawn apart (dotted), never as a ranked row
    fig = figures["leaderboard"]
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert caveats.UNPROMPTABLE_MARK in next(x for x in labels if x.startswith("PixArt"))
    assert len([p for p in fig.axes[0].patches if p.get_gid() == "unpromptable"]) == 1
    # the summary CSV keeps them as a row of their own
    summary = pd.DataFrame(rep["tables"]["summary_method_condition"]["rows"])
    row = summary[(summary["method"] == "pixart_sigma") & (summary["condition"] == "L1")]
    assert len(row) == 1 and bool(row["unpromptable"].iloc[0]) and row["n_blocks"].iloc[0] == 3


# -- case 10: a row over fewer blocks is listed after the rows over the common blocks -----------------


def test_a_generator_over_fewer_blocks_is_listed_after_the_common_blocks_and_never_bold(tmp_path):
    df = synthetic_results(conditions=("L1",))
    pix = (df["method"] == "pixart_sigma")
    df = df[~pix | df["block_id"].isin(["city0_b0", "city0_b1"])].copy()
    pix = (df["method"] == "pixart_sigma")
    df.loc[pix, "cos_sim"] = 0.99  # it would be first and bold by CosSim
    metric_cols = list(rs.RESULT_METRIC_COLUMNS)
    df.loc[pix & (df["block_id"] == "city0_b1"), metric_cols] = np.nan  # a row without a finite score
    rep, md = _report(tmp_path, df, plots=False)
    rows = _rows(_section(md, "Table 10"))
    labels = [_label(r) for r in rows]
    pix_i = next(i for i, x in enumerate(labels) if x.startswith("PixArt"))
    assert labels[pix_i] == f"PixArt-Σ ({caveats.fewer_blocks_note(1, 12)})"
    assert pix_i > max(labels.index(a) for a in ("Random-Same-Country", "Random-Global"))
    assert not any("**" in c for c in rows[pix_i]) and rows[pix_i][-1] == "1"  # Blocks: finite scores only
    l1 = df[(df["condition"] == "L1") & df["method"].isin(["sdxl", "flux_dev"])]
    best = {"sdxl": "SDXL", "flux_dev": "FLUX.1-dev"}[l1.groupby("method")["cos_sim"].mean().idxmax()]
    assert labels[0] == best and rows[0][1].startswith("**")
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")
    assert t10.loc["generator_mean", "cos_sim"] == pytest.approx(l1.groupby("block_id")["cos_sim"].mean().mean())
    notes = " ".join(rep["tables"]["leaderboard"]["notes"])
    assert "PixArt-Σ (1 of 12; only city0_b0)" in notes
    # the same generator is not ranked by rank stability either
    assert "pixart_sigma" not in {r["method"] for r in rep["tables"]["rank_stability"]["rows"]}


def test_a_lone_generator_over_one_block_comes_after_the_anchors(tmp_path):
    df = synthetic_results(methods=("sdxl",), conditions=("L1",))
    df = df[(df["method"] != "sdxl") | (df["block_id"] == "city1_b2")]
    rep, md = _report(tmp_path, df, plots=False)
    labels = [_label(r) for r in _rows(_section(md, "Table 10"))]
    assert labels[-1] == f"SDXL ({caveats.fewer_blocks_note(1, 12)})"
    assert labels[0].startswith("Held-out Real")


# -- the views agree ----------------------------------------------------------------------------------


def test_table10_generator_rows_agree_with_the_leaderboard_summary(tmp_path):
    """Table 10's means and Blocks of every generator row are evaluation.leaderboard_summary's for the same
    (method, condition, unpromptable): NaN rows, copied panels, fewer blocks and unpromptable rows included."""
    df = _with_unpromptable()
    metric_cols = list(rs.RESULT_METRIC_COLUMNS)
    df.loc[(df["method"] == "sdxl") & (df["condition"] == "L1") & (df["block_id"] == "city3_b0"), metric_cols] = np.nan
    df.loc[(df["method"] == "flux_dev") & (df["condition"] == "L1") & (df["block_id"] == "city2_b1"), "n_copied"] = 2
    df.loc[(df["method"] == "flux_dev") & (df["block_id"] == "city1_b0"), ["retrieval_acc", "mrr"]] = np.nan
    rep, _ = _report(tmp_path, df, plots=False)
    t10 = pd.DataFrame(rep["tables"]["leaderboard"]["rows"])
    gen = t10[t10["group"] == "generator"]
    assert len(gen) == 3
    summary = evaluation.leaderboard_summary(df)
    summary = summary[summary["condition"] == "L1"].set_index(["method", "unpromptable"])
    for _, r in gen.iterrows():
        want = summary.loc[(r["method"], bool(r["unpromptable"]))]
        assert r["n_blocks"] == want["n_blocks"], r["method"]
        for m in LEADERBOARD:
            got = np.nan if r[m] is None else r[m]
            assert got == pytest.approx(want[m], nan_ok=True), (r["method"], m)
    # and the plain count: a block counts where the row has a finite leaderboard score
    sdxl = df[(df["method"] == "sdxl") & (df["condition"] == "L1")]
    assert gen.set_index("method").loc["sdxl", "n_blocks"] == sum(
        any(np.isfinite(float(v)) for v in row) for row in sdxl[LEADERBOARD].itertuples(index=False))


# -- case 11: a query set that shares no block with the reference says so -----------------------------


def test_hierarchy_legend_says_no_block_in_common(tmp_path, figures):
    df = synthetic_results(methods=("sdxl",), conditions=("L1",))
    # city1_b2 has no same-neighborhood and no same-city negative (the demo's Berlin block) ...
    df.loc[df["block_id"] == "city1_b2", ["sim_same_neighborhood", "sim_same_city"]] = np.nan
    # ... and it is the generator's only block
    df = df[(df["method"] != "sdxl") | (df["block_id"] == "city1_b2")]
    _report(tmp_path, df)
    legend = [t.get_text() for t in figures["hierarchy"].axes[0].get_legend().get_texts()]
    held = df[df["method"] == "heldout_real"].dropna(subset=["sim_same_neighborhood", "sim_same_city"])
    assert legend[0] == f"Held-out Real: {held['block_id'].nunique()} blocks"
    assert legend[1].startswith("SDXL: 1 block (")
    assert "no block in common with Held-out Real's 11" in legend[1] and "1 of 11" not in legend[1]


# -- case 12: columns over fewer blocks, and a "same-country" anchor that is not ------------------------


def test_table4_names_the_blocks_a_column_lacks_and_the_same_country_fallback_is_said(tmp_path, figures):
    df = synthetic_results(methods=("sdxl", "flux_dev"), conditions=("L1",))
    lone = "city1_b2"
    df.loc[df["block_id"] == lone, ["sim_same_neighborhood", "sim_same_city", "local_margin"]] = np.nan
    df.loc[df["block_id"] == lone, "country"] = "DE"  # the only block of its country
    rep, md = _report(tmp_path, df)
    t4 = _section(md, "Table 4")
    assert "every row averages the same 12 block(s)" not in t4
    # independent: the blocks without a value of each negative on any row
    lacking = sorted(b for b, part in df.groupby("block_id") if part["sim_same_city"].isna().all())
    assert lacking == [lone]
    assert (f"sim: same neighborhood and sim: same city: every row averages at most 11 of the 12 block(s): {lone} "
            "has no same-neighborhood or same-city negative") in t4
    # Table 10: the local margin (target minus the closest same-city alternative) has no value there either
    t10 = _section(md, "Table 10")
    assert "every row averages the same 12 block(s)" not in t10
    assert (f"Local margin: every row averages at most 11 of the 12 block(s): {lone} has no same-neighborhood or "
            "same-city negative") in t10
    note = caveats.same_country_fallback_note([lone], 12)
    assert note in _section(md, "Table 10") and note in _section(md, "Table 5")
    labels = [t.get_text() for t in figures["leaderboard"].axes[0].get_yticklabels()]
    assert "no other block of its country on 1 of 12 blocks" in next(x for x in labels if x.startswith("Random-Same"))
    lines = [ln.get_label() for ln in figures["cos_sim_by_condition"].axes[0].get_lines() if ln.get_gid() == "anchor"]
    assert "no other block of its country on 1 of 12" in next(x for x in lines if x.startswith("Random-Same"))
    # without a lone block, nothing is said
    _, md2 = _report(tmp_path, synthetic_results(methods=("sdxl", "flux_dev"), conditions=("L1",)), name="b",
                     plots=False)
    assert "same-country\" anchor" not in md2 and "every row averages the same 12 block(s)" in _section(md2, "Table 4")


# -- case 14: rank stability's rank 1 and Table 10's bold differ: say why -------------------------------


def test_rank_stability_and_table10_say_why_their_best_differ(tmp_path):
    df = synthetic_results(methods=("sdxl", "flux_dev"), conditions=("L1",), n_cities=2, blocks_per_city=5)
    df = df[~df["block_id"].isin(["city0_b1", "city0_b2", "city0_b3", "city0_b4"])].copy()  # city0: 1 block
    gen = df["condition"] == "L1"
    sdxl, flux = gen & (df["method"] == "sdxl"), gen & (df["method"] == "flux_dev")
    df.loc[sdxl, "retrieval_acc"] = np.where(df.loc[sdxl, "city"] == "city0", 1.0, 0.2)
    df.loc[flux, "retrieval_acc"] = 0.5
    df.loc[sdxl, "cos_sim"], df.loc[flux, "cos_sim"] = 0.5, 0.6  # CosSim: both agree on FLUX
    rep, md = _report(tmp_path, df, plots=False)
    # independent numbers: the mean over blocks, and the mean of the city means
    block_mean, city_mean = {}, {}
    for method in ("sdxl", "flux_dev"):
        rows = df[gen & (df["method"] == method)]
        block_mean[method] = sum(rows["retrieval_acc"]) / len(rows)
        cities = {}
        for r in rows.itertuples():
            cities.setdefault(r.city, []).append(r.retrieval_acc)
        city_mean[method] = sum(sum(v) / len(v) for v in cities.values()) / len(cities)
    assert city_mean["sdxl"] > city_mean["flux_dev"] and block_mean["sdxl"] < block_mean["flux_dev"]
    ranks = pd.DataFrame(rep["tables"]["rank_stability"]["rows"])
    top = ranks[(ranks["metric"] == "retrieval_acc") & (ranks["rank"] == 1)]["method"].tolist()
    assert top == ["sdxl"]
    board_row = next(r for r in _rows(_section(md, "Table 10")) if _label(r) == "FLUX.1-dev")
    assert board_row[5].startswith("**")  # Table 10 bolds FLUX on retrieval
    for name in ("rank_stability", "leaderboard"):
        note = next(n for n in rep["tables"][name]["notes"] if n.startswith("Retrieval accuracy: rank stability"))
        assert (f"city-balanced score: SDXL {city_mean['sdxl']:.3f}, FLUX.1-dev {city_mean['flux_dev']:.3f}") in note
        assert (f"mean over blocks: SDXL {block_mean['sdxl']:.3f}, FLUX.1-dev {block_mean['flux_dev']:.3f}") in note
        assert "blocks per city: city0 1, city1 5" in note
        assert not any(n.startswith("CosSim: rank stability") for n in rep["tables"][name]["notes"])


# -- case 15: Table 6 prints no all-n/a row, one bullet per reason, one p-value format ------------------


def test_table6_drops_rows_without_a_delta_and_merges_their_reasons(tmp_path):
    df = synthetic_results(methods=("sdxl", "flux_dev"), conditions=("L0", "L1"))
    l2 = synthetic_results(methods=("pixart_sigma",), conditions=("L2",), anchors=False, seed=3)
    rep, md = _report(tmp_path, pd.concat([df, l2], ignore_index=True), plots=False)
    t6 = _section(md, "Table 6")
    rows = _rows(t6)
    assert rows and not any(all(c == "n/a" for c in r[2:]) for r in rows)
    assert {r[0] for r in rows} == {"L1 - L0"}
    data = pd.DataFrame(rep["tables"]["prompt_deltas"]["rows"])
    for comparison in ("L2 - L1", "L2 - L0"):
        skipped = data[(data["comparison"] == comparison) & data["delta"].isna()]
        assert len(skipped) == 7  # every metric but GAAS (n/a throughout)
        bullets = [x for x in t6.splitlines() if x.startswith(f"- {comparison}")]
        assert len(bullets) == 1
        assert all(rp.METRIC_LABELS[m] in bullets[0] for m in skipped["metric"])


def test_every_p_value_has_one_format(tmp_path):
    df = synthetic_results(methods=("sdxl", "flux_dev"), conditions=("L0", "L1", "C_WRONG_STREET"))
    l0 = df[df["condition"] == "L0"].set_index(["method", "block_id"])
    # CosSim L1 - L0: differences +-k/100 in pairs, so the signed ranks balance (p = 1)
    order = list(l0.index)
    diffs = {key: (1 if i % 2 == 0 else -1) * (i // 2 + 1) / 100 for i, key in enumerate(order)}
    l1 = (df["condition"] == "L1")
    df.loc[l1, "cos_sim"] = [l0.loc[(m, b), "cos_sim"] + diffs[(m, b)]
                             for m, b in zip(df.loc[l1, "method"], df.loc[l1, "block_id"])]
    df.loc[l1, "mmd"] = [l0.loc[(m, b), "mmd"] + 0.1 + i / 1000 for i, (m, b) in
                         enumerate(zip(df.loc[l1, "method"], df.loc[l1, "block_id"]))]  # all positive: p tiny
    rep, md = _report(tmp_path, df, plots=False)
    cells = {}
    for title, col in (("Table 6", 4), ("Table 7", 6)):
        for r in _rows(_section(md, title)):
            assert re.fullmatch(r"<0\.001|[01]\.\d{3}|n/a", r[col]), (title, r)
            cells[(title, r[0], r[1].split(" ")[0])] = r[col]
    # independent p-values: scipy.stats.wilcoxon on the paired differences
    wide = df[df["condition"].isin(["L0", "L1"])].pivot_table(index=["method", "block_id"], columns="condition",
                                                              values=["cos_sim", "mmd"])
    p_cos = sstats.wilcoxon(wide[("cos_sim", "L1")] - wide[("cos_sim", "L0")]).pvalue
    p_mmd = sstats.wilcoxon(wide[("mmd", "L1")] - wide[("mmd", "L0")]).pvalue
    assert p_cos == pytest.approx(1.0) and p_mmd < 0.001
    assert cells[("Table 6", "L1 - L0", "CosSim")] == "1.000"
    assert cells[("Table 6", "L1 - L0", "MMD²")] == "<0.001"
    p_mrr = sstats.wilcoxon(wide_mrr := (df[df["condition"] == "L1"].set_index(["method", "block_id"])["mrr"]
                                         - df[df["condition"] == "L0"].set_index(["method", "block_id"])["mrr"])).pvalue
    assert len(wide_mrr) == 24
    assert cells[("Table 6", "L1 - L0", "MRR")] == ("<0.001" if p_mrr < 0.001 else f"{p_mrr:.3f}")
