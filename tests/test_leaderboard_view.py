"""The Hub leaderboard view trusts nothing a submitter writes (issue 38): pinned groups, block sets and
anchors (leaderboard.json), per-condition and per-metric coverage, order by commit date, verification
and copies-excluded marks, and the banner of a repo without leaderboard.json.

The frames are built here as ``hub.results_repo.load_submissions`` returns them (submitted rows with
``stored_as``, ``committed_at``, ``verification``, ``verification_detail``, ``copies_excluded`` and
``attrs["leaderboard_config"]``); every number is checked against a plain numpy mean over the expected
blocks."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench import caveats, stats
from geofidelity_bench.comparability import group_id
from geofidelity_bench.evaluation import RESULT_COLUMNS
from geofidelity_bench.hub.leaderboard_config import LeaderboardConfig, PinnedGroup
from geofidelity_bench.hub.results_repo import SUBMISSION_COLUMNS
from geofidelity_bench.metrics.catalog import RESULT_METRIC_COLUMNS
from geofidelity_bench.report.leaderboard import LEGACY_BANNER, leaderboard_tables, leaderboard_view

try:  # the fake Hub fixtures: `online` (requests allowed, HF_TOKEN set) and `hub` (the server)
    from test_generation_hub import hub, online  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.test_generation_hub import hub, online  # noqa: F401

BLOCKS = [("b0", "rome"), ("b1", "rome"), ("b2", "oslo"), ("b3", "oslo"), ("b4", "lima"), ("b5", "lima"),
          ("b6", "lima")]
IDS = [b for b, _ in BLOCKS]
FP, ENC, PROTOCOL = "a" * 64, "e" * 64, "1"
N_RESAMPLES = 200


def rows_for(method, run_id, *, conditions=("L0", "L1"), blocks=BLOCKS, seed=0, committed="2026-01-01T00:00:00.000000Z",
             created="2026-01-01T00:00:00+00:00", verification="pending", detail="", copies_excluded=False,
             enc_hash=ENC, encoder="dinov2-base", stored_as="submission"):
    """The rows of one submitted run (or, with ``conditions=("anchor",)``, a group's anchors file)."""
    rng = np.random.default_rng(seed)
    anchor = conditions == ("anchor",)
    methods = stats.ANCHOR_METHODS if anchor else (method,)
    rows = []
    for m in methods:
        for cond in conditions:
            for block, city in blocks:
                row = {"method": m, "condition": cond, "block_id": block, "city": city, "country": "NA",
                       "stratum": "", "n_generated": 4, "n_reference": 3, "n_distinct": 4,
                       "n_copied": np.nan if anchor else 0.0, "encoder": encoder,
                       "n_candidates": 5, "chance_retrieval_acc": 0.2,
                       "chance_mrr": (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5}
                for col in RESULT_METRIC_COLUMNS:
                    row[col] = float(rng.uniform(0.05, 0.9))
                row["gaas"] = np.nan
                rows.append(row)
    df = pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS)
    keys = {"run_id": run_id, "benchmark_name": "demo", "benchmark_fingerprint": FP, "encoder_config_hash": enc_hash,
            "protocol_version": PROTOCOL, "segmenter": "", "group_id": group_id((FP, enc_hash, PROTOCOL)),
            "anchor_check": "" if anchor else "match", "anchor_check_detail": "", "library_version": "0.1.0",
            "created_at": created}
    for i, col in enumerate(SUBMISSION_COLUMNS):
        df.insert(i, col, keys[col])
    df["stored_as"] = "group_anchors" if anchor else stored_as
    df["committed_at"] = committed
    df["verification"] = "" if anchor else verification
    df["verification_detail"] = "" if anchor else detail
    df["copies_excluded"] = bool(copies_excluded)
    return df


def anchors(enc_hash=ENC, run_id="anchorrun", seed=100):
    return rows_for("", run_id, conditions=("anchor",), seed=seed, enc_hash=enc_hash)


def pin(enc_hash=ENC, encoder="dinov2-base", blocks=None, anchors_run_id="anchorrun"):
    key = (FP, enc_hash, PROTOCOL)
    blocks = blocks or {c: list(IDS) for c in ("L0", "L1", "L2", "C_WRONG_STREET")}
    return PinnedGroup(group_id(key), {"id": "demo", "name": "demo", "fingerprint": FP},
                       {"name": encoder, "weights": None, "config_hash": enc_hash}, PROTOCOL, None,
                       {"n_resamples": 5000, "seed": 42}, blocks, anchors_run_id, "0.1.0")


def frame(*parts, config=None):
    df = pd.concat(parts, ignore_index=True)
    df.attrs["leaderboard_config"] = config
    return df


def config_of(*groups, default=None, require_verified=False):
    return LeaderboardConfig({g.group_id: g for g in groups}, default or groups[0].group_id, require_verified)


def l1_mean(df, method, run_id, metric="cos_sim", blocks=IDS, condition="L1"):
    rows = df[(df["method"] == method) & (df["run_id"] == run_id) & (df["condition"] == condition)
              & df["block_id"].isin(blocks)]
    return float(np.mean(rows[metric].to_numpy(dtype=float)))


def t10_row(tables, method):
    t10 = tables["leaderboard"].data
    return t10[(t10["method"] == method) & (t10["group"] == "generator")].iloc[0]


def test_an_invented_block_is_ignored_and_never_makes_the_honest_submission_partial():
    group = pin()
    honest = rows_for("gen_a", "run_a", seed=1, verification="verified")
    hostile = rows_for("gen_evil", "run_evil", seed=2, verification="verified",
                       blocks=[*BLOCKS, ("fake_block", "rome")])
    hostile.loc[hostile["block_id"] == "fake_block", "cos_sim"] = 0.99  # the best score of all, on no real block
    df = frame(honest, hostile, anchors(), config=config_of(group))
    view = leaderboard_view(df)
    assert view.methods == ["gen_a", "gen_evil"] and view.apart == []
    assert "fake_block" not in view.blocks and view.blocks == IDS
    assert view.condition_blocks["L1"] == IDS
    (note,) = [n for n in view.notes if "fake_block" in n]
    assert "gen_evil (run run_evil)" in note and "L0: fake_block" in note and "L1: fake_block" in note
    assert not (view.rows["block_id"] == "fake_block").any()
    tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
    a, evil = t10_row(tables, "gen_a"), t10_row(tables, "gen_evil")
    assert a["n_blocks"] == 7 and evil["n_blocks"] == 7
    assert a["cos_sim"] == pytest.approx(l1_mean(df, "gen_a", "run_a"))
    assert evil["cos_sim"] == pytest.approx(l1_mean(df, "gen_evil", "run_evil"))  # the invented 0.99 is not counted
    assert "Ranked: 2 generator submission(s), each covering all 7 block(s) of the group" in view.header_lines()[0]
    # the config may come as an argument too
    assert leaderboard_view(frame(honest, hostile, anchors()), config=config_of(group)).methods == view.methods


def test_a_column_wide_nan_on_the_worst_blocks_is_partial_for_that_metric():
    group = pin()
    a = rows_for("gen_a", "run_a", seed=1)
    c = rows_for("gen_c", "run_c", seed=3)
    bad = rows_for("gen_bad", "run_bad", seed=4)
    l1 = bad.index[bad["condition"] == "L1"]
    bad.loc[l1, "cos_sim"] = (bad.loc[l1, "cos_sim"] + 0.3).clip(upper=0.99)  # without its worst blocks, it tops
    worst = bad.loc[l1].nsmallest(2, "cos_sim").index
    bad.loc[worst, "cos_sim"] = np.nan  # the other scores of those rows stay finite: the blocks still "count"
    anch = anchors()
    held = anch["method"] == "heldout_real"
    assert np.isfinite(anch.loc[held, "cos_sim"].to_numpy(dtype=float)).all()
    # where the held-out anchor itself has no local margin (b6), no submission needs one
    anch.loc[held & (anch["block_id"] == "b6"), "local_margin"] = np.nan
    a.loc[(a["condition"] == "L1") & (a["block_id"] == "b6"), "local_margin"] = np.nan
    df = frame(a, c, bad, anch, config=config_of(group))
    view = leaderboard_view(df)
    (apart,) = view.apart
    assert apart.method == "gen_bad" and apart.partial and apart.ranked_in == ["L0"]
    assert apart.partial_in == {"L1": "partial in L1: CosSim on 5 of 7 block(s)"}
    assert view.ranked == {"L1": ["gen_a", "gen_c"], "L0": ["gen_a", "gen_bad", "gen_c"]}
    assert not ((view.rows["method"] == "gen_bad") & (view.rows["condition"] == "L1")).any()
    tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
    t10 = tables["leaderboard"]
    assert "gen_bad" not in set(t10.data["method"]) and "gen_bad" not in t10.markdown
    assert any("gen_bad is listed apart under L1" in n and "CosSim on 5 of 7" in n for n in t10.notes)
    # the best CosSim of the clean ones is bolded, the 5-block mean (which would top them) is not there
    bold = [line for line in t10.markdown.splitlines() if "**" in line]
    best = max(l1_mean(df, "gen_a", "run_a"), l1_mean(df, "gen_c", "run_c"))
    assert bold and all("gen_bad" not in line for line in bold) and f"**{best:.3f}" in t10.markdown
    assert np.nanmean(bad.loc[l1, "cos_sim"].to_numpy(dtype=float)) > best
    # Table 5: gen_bad's L0 cell is its plain mean over 7 blocks, its L1 cell is left out
    t5 = tables["cos_sim_by_condition"].data.set_index("method")
    assert t5.loc["gen_bad", "L0"] == pytest.approx(l1_mean(df, "gen_bad", "run_bad", condition="L0"))
    assert np.isnan(t5.loc["gen_bad", "L1"])
    assert "CosSim on 5 of 7 block(s)" in view.apart_markdown()


def test_the_default_group_is_the_pinned_one_whatever_a_later_push_calls_its_encoder():
    main, clip = pin(), pin(enc_hash="c" * 64, encoder="clip-vit-b32")
    a = rows_for("gen_a", "run_a", seed=1, committed="2026-01-01T00:00:00.000000Z")
    b = rows_for("gen_b", "run_b", seed=2, enc_hash="c" * 64, encoder="clip-vit-b32",
                 committed="2026-02-01T00:00:00.000000Z")
    # a hostile push: "dinov2-base" with other weights (another config hash), the newest of all
    hostile = rows_for("gen_h", "run_h", seed=3, enc_hash="f" * 64, committed="2026-06-01T00:00:00.000000Z",
                       created="2099-01-01T00:00:00+00:00")
    df = frame(a, b, hostile, anchors(), anchors(enc_hash="c" * 64, seed=101), config=config_of(main, clip,
                                                                                               default=main.group_id))
    view = leaderboard_view(df)
    assert view.group.group_id == main.group_id and view.group.pinned == main
    assert view.methods == ["gen_a"] and "run_h" not in set(view.rows["run_id"])
    assert any(n.startswith("1 submission(s) in 1 group(s) that leaderboard.json does not pin") for n in view.notes)
    assert [g.group_id for g in view.others] == [clip.group_id]
    other = leaderboard_view(df, group=clip.group_id[:8])
    assert other.methods == ["gen_b"] and other.group.group_id == clip.group_id
    from geofidelity_bench.report.context import ReportError

    with pytest.raises(ReportError, match="0 groups match"):
        leaderboard_view(df, group=group_id((FP, "f" * 64, PROTOCOL)))
    # the pinned default, even when the clip group is the newest and largest
    df2 = frame(a, b, rows_for("gen_b2", "run_b2", seed=5, enc_hash="c" * 64, committed="2026-07-01T00:00:00.000000Z"),
                hostile, anchors(), anchors(enc_hash="c" * 64, seed=101), config=config_of(main, clip,
                                                                                         default=main.group_id))
    assert leaderboard_view(df2).group.group_id == main.group_id


def test_the_commit_date_decides_the_newest_run_never_created_at():
    old = rows_for("gen_a", "run_old", seed=1, committed="2026-01-01T00:00:00.000000Z",
                   created="2099-01-01T00:00:00+00:00")
    new = rows_for("gen_a", "run_new", seed=2, committed="2026-03-01T00:00:00.000000Z",
                   created="2026-02-01T00:00:00+00:00")
    for config in (config_of(pin()), None):  # pinned and legacy alike
        df = frame(old, new, anchors(), config=config)
        view = leaderboard_view(df)
        assert set(view.rows.loc[view.rows["condition"] != "anchor", "run_id"]) == {"run_new"}
        assert any("the newest submission run_new is shown (1 older: run_old)" in n for n in view.notes)
        tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
        assert t10_row(tables, "gen_a")["cos_sim"] == pytest.approx(l1_mean(df, "gen_a", "run_new"))
    # a legacy repo's default group: the newest by commit, whatever created_at says
    hostile = rows_for("gen_h", "run_h", seed=3, enc_hash="f" * 64, committed="2026-01-02T00:00:00.000000Z",
                       created="2099-12-31T00:00:00+00:00")
    view = leaderboard_view(frame(old, new, hostile, anchors(), anchors(enc_hash="f" * 64)))
    assert view.group.key[1] == ENC and view.methods == ["gen_a"]


def test_a_run_partial_in_l1_is_ranked_in_l0_only_and_the_header_agrees_with_table_10():
    a = rows_for("gen_a", "run_a", seed=1)
    x = pd.concat([rows_for("gen_x", "run_x", seed=2, conditions=("L0",)),
                   rows_for("gen_x", "run_x", seed=3, conditions=("L1",), blocks=BLOCKS[:1])], ignore_index=True)
    x.loc[x["condition"] == "L1", "cos_sim"] = 0.99  # its one L1 block would top the board
    for config in (config_of(pin()), None):
        df = frame(a, x, anchors(), config=config)
        view = leaderboard_view(df)
        assert view.methods == ["gen_a", "gen_x"]
        assert view.ranked == {"L1": ["gen_a"], "L0": ["gen_a", "gen_x"]}
        (apart,) = view.apart
        assert apart.method == "gen_x" and apart.ranked_in == ["L0"] and apart.n_blocks == 1
        assert apart.reasons == ["partial in L1: covers 1 of the group's 7 block(s)"]
        header = view.header_lines(N_RESAMPLES)
        ranked = [line for line in header if line.startswith("Ranked")]
        assert len(ranked) == 1 and "each covering all" not in ranked[0]
        assert "Ranked in L1: 1 generator submission(s) over the group's 7 block(s); in L0: 2 over 7" in ranked[0]
        assert ("Listed apart, never ranked or bolded: 1 partial, 0 not comparable, 0 copied. Listed apart by "
                "verification: 0 mismatch (the verifier's numbers differ).") in header
        tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
        t10 = tables["leaderboard"].data
        gen = t10[t10["group"] == "generator"]
        n, n_blocks = map(int, re.search(r"Ranked in L1: (\d+) generator submission\(s\) over the group's (\d+) block",
                                         ranked[0]).groups())
        assert len(gen) == n and set(gen["n_blocks"]) == {n_blocks}
        assert "gen_x" not in tables["leaderboard"].markdown
        assert not any("has no L1 rows" in note for note in tables["leaderboard"].notes)
        t5 = tables["cos_sim_by_condition"].data.set_index("method")
        assert t5.loc["gen_x", "L0"] == pytest.approx(l1_mean(df, "gen_x", "run_x", condition="L0"))
        assert t5.loc["gen_x", "L0_n_blocks"] == 7 and np.isnan(t5.loc["gen_x", "L1"])
        # Table 5's generator mean averages gen_x only where it is ranked (L0), and gen_a alone under L1
        assert t5.loc["generator_mean", "L1"] == pytest.approx(l1_mean(df, "gen_a", "run_a"))
        from geofidelity_bench.demo_app.hub_board import render_board

        md = render_board("tester/results", view, tables, n_resamples=N_RESAMPLES)
        assert f"- {ranked[-1]}" in md and "- gen_x: " in md and "(ranked in L0)" in md
        assert "| gen_x" in md.split("#### Listed apart")[1] and "partial in L1: covers 1 of the group's 7" in md


def test_require_verified_ranks_only_verified_and_a_mismatch_is_always_apart():
    v = rows_for("gen_v", "run_v", seed=1, verification="verified", detail="re-computed from 56 images")
    p = rows_for("gen_p", "run_p", seed=2, verification="pending",
                 detail="self-reported: no verification record yet")
    m = rows_for("gen_m", "run_m", seed=3, verification="mismatch",
                 detail="cos_sim L1/b3: submitted 0.812, verifier 0.404")
    for require in (True, False):
        df = frame(v, p, m, anchors(), config=config_of(pin(), require_verified=require))
        view = leaderboard_view(df)
        apart = {a.method: a for a in view.apart}
        assert apart["gen_m"].mismatch and not apart["gen_m"].partial
        assert any("cos_sim L1/b3: submitted 0.812, verifier 0.404" in r for r in apart["gen_m"].reasons)
        tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
        t10 = tables["leaderboard"]
        assert "gen_m" not in t10.markdown
        assert f"gen_v ({caveats.VERIFIED_MARK})" in t10.markdown
        assert t10_row(tables, "gen_v")["cos_sim"] == pytest.approx(l1_mean(df, "gen_v", "run_v"))
        if require:
            assert view.methods == ["gen_v"] and view.marks == {"gen_v": caveats.VERIFIED_MARK}
            assert apart["gen_p"].self_reported and apart["gen_p"].mark == caveats.SELF_REPORTED_MARK
            assert "gen_p" not in t10.markdown
            assert f"gen_p ({caveats.SELF_REPORTED_MARK})" in view.apart_markdown()
            assert ("Listed apart, never ranked or bolded: 0 partial, 0 not comparable, 0 copied. Listed apart by "
                    "verification: 1 mismatch (the verifier's numbers differ), 1 self-reported") in view.header_lines()[1]
        else:
            assert view.methods == ["gen_p", "gen_v"] and set(apart) == {"gen_m"}
            assert view.marks == {"gen_p": caveats.SELF_REPORTED_MARK, "gen_v": caveats.VERIFIED_MARK}
            assert f"gen_p ({caveats.SELF_REPORTED_MARK})" in t10.markdown
            assert t10_row(tables, "gen_p")["submission_marks"] == caveats.SELF_REPORTED_MARK
            assert "Verification: 1 of 2 ranked submission(s) ✓ verified, 1 ◇ self-reported." in view.header_lines()
            assert f"{caveats.SELF_REPORTED_LEGEND}." in view.header_lines()
        assert f"{caveats.MISMATCH_MARK}" in view.apart_markdown()


def test_a_run_scored_without_its_copies_is_ranked_and_marked_with_the_count():
    a = rows_for("gen_a", "run_a", seed=1, verification="verified")
    c = rows_for("gen_c", "run_c", seed=2, verification="verified", copies_excluded=True)
    c.loc[(c["condition"] == "L1") & (c["block_id"] == "b0"), "n_copied"] = 2
    c.loc[(c["condition"] == "L0") & (c["block_id"] == "b3"), "n_copied"] = 1
    y = rows_for("gen_y", "run_y", seed=3, verification="verified")  # --allow-copies: listed apart
    y.loc[(y["condition"] == "L1") & (y["block_id"] == "b1"), "n_copied"] = 1
    df = frame(a, c, y, anchors(), config=config_of(pin()))
    view = leaderboard_view(df)
    assert view.methods == ["gen_a", "gen_c"]
    assert view.copies_excluded == {"gen_c": 3}
    assert view.marks["gen_c"] == f"{caveats.VERIFIED_MARK}; {caveats.COPIES_EXCLUDED_MARK}: 3 image(s)"
    assert [(x.method, x.copied) for x in view.apart] == [("gen_y", True)]
    header = view.header_lines()
    assert any(line.startswith(caveats.COPIES_EXCLUDED_MARK) and "gen_c: 3 image(s)" in line for line in header)
    assert f"{caveats.COPIES_EXCLUDED_LEGEND}." in header
    assert "0 partial, 0 not comparable, 1 copied. Listed apart by verification: 0 mismatch" in header[1]
    tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
    row = t10_row(tables, "gen_c")
    assert row["n_copied_panels"] == 0 and "copies excluded: 3 image(s)" in row["label"]
    assert row["cos_sim"] == pytest.approx(l1_mean(df, "gen_c", "run_c"))
    assert caveats.COPIED_MARK not in tables["leaderboard"].markdown
    assert "copies excluded: 3 image(s)" in tables["leaderboard"].markdown
    # the generator mean counts it (scored without the copies), per block over gen_a and gen_c
    t10 = tables["leaderboard"].data
    l1 = df[df["method"].isin(["gen_a", "gen_c"]) & (df["condition"] == "L1")]
    per_block = l1.groupby("block_id")["cos_sim"].mean()
    assert t10.loc[t10["group"] == "generator_mean", "cos_sim"].iloc[0] == pytest.approx(per_block.mean())


def test_a_repo_without_leaderboard_json_carries_the_banner_first():
    from geofidelity_bench.demo_app.hub_board import render_board

    a = rows_for("gen_a", "run_a", seed=1)
    b = rows_for("gen_b", "run_b", seed=2, blocks=BLOCKS[:5])
    df = frame(a, b, anchors())
    assert df.attrs["leaderboard_config"] is None
    view = leaderboard_view(df)
    header = view.header_lines()
    assert header[0] == LEGACY_BANNER
    assert "self-reported and unverified" in header[0]
    assert "`geofidelity-bench leaderboard init --repo-id ORG/NAME --benchmark ID --encoder NAME`" in header[0]
    assert view.methods == ["gen_a"] and view.marks == {"gen_a": caveats.SELF_REPORTED_MARK}
    assert [(x.method, x.partial, x.n_blocks) for x in view.apart] == [("gen_b", True, 5)]
    tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
    assert t10_row(tables, "gen_a")["cos_sim"] == pytest.approx(l1_mean(df, "gen_a", "run_a"))
    md = render_board("tester/results", view, tables, n_resamples=N_RESAMPLES)
    first = md.splitlines()[0]
    assert first.startswith("> **This results repo has no leaderboard.json")
    assert "--repo-id tester/results --benchmark ID" in first
    assert md.index(first) < md.index("### Comparable group")
    assert f"- gen_a: {caveats.SELF_REPORTED_MARK} (ranked in L1, L0)" in md
    assert f"gen_a ({caveats.SELF_REPORTED_MARK})" in md
    assert "partial in L1: covers 5 of the group's 7 block(s)" in md
    # a pinned repo has no banner
    pinned = leaderboard_view(frame(a, b, anchors(), config=config_of(pin())))
    assert pinned.banner == "" and not pinned.header_lines()[0].startswith("This results repo")
    md = render_board("tester/results", pinned, leaderboard_tables(pinned, n_resamples=N_RESAMPLES))
    assert md.startswith("### Comparable group: demo (aaaaaaaaaaaa), encoder dinov2-base")


# -- one segmenter's GAAS in a legacy repo (case 9) ------------------------------------------------------------


def test_a_legacy_gaas_tie_goes_to_the_default_segmenter_and_is_said():
    """One submission per segmenter (a 1-to-1 tie): mask2former-vistas, the benchmark's default, is shown although
    segformer's config hash sorts first; segformer's GAAS is n/a and the header says which and why."""
    m2f_hash, segf_hash = "f" * 64, "0" * 64
    a = rows_for("gen_a", "run_a", seed=1).assign(segmenter=m2f_hash)
    b = rows_for("gen_b", "run_b", seed=2).assign(segmenter=segf_hash)
    for rows, seed in ((a, 11), (b, 12)):
        rows["gaas"] = np.random.default_rng(seed).uniform(0.05, 0.6, len(rows))
    infos = {"run_a": {"gaas": {"segmenter": "mask2former-vistas", "config_hash": m2f_hash}},
             "run_b": {"gaas": {"segmenter": "segformer-cityscapes", "config_hash": segf_hash}}}
    df = frame(a, b, anchors())
    view = leaderboard_view(df, run_infos=infos)
    assert view.gaas_segmenter == m2f_hash
    said = ("GAAS is shown for segmenter mask2former-vistas (ffffffffffff) (1 submission(s); a tie, broken in favour "
            "of the benchmark's default segmenter mask2former-vistas)")
    assert view.gaas_choice.startswith(said) and "segformer-cityscapes (000000000000): 1" in view.gaas_choice
    assert f"GAAS: {view.gaas_choice}." in view.header_lines()
    assert any("GAAS of gen_b: n/a (segmenter 000000000000, not the group's ffffffffffff" in n for n in view.notes)
    tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
    assert t10_row(tables, "gen_a")["gaas"] == pytest.approx(l1_mean(df, "gen_a", "run_a", metric="gaas"))
    assert np.isnan(t10_row(tables, "gen_b")["gaas"])
    # a segmenter column that holds the registry name (a run.json without a config hash) needs no run.json
    named = frame(a.assign(segmenter="mask2former-vistas"), b.assign(segmenter="segformer-cityscapes"), anchors())
    assert leaderboard_view(named).gaas_segmenter == "mask2former-vistas"
    # more submissions win whatever the names
    c = rows_for("gen_c", "run_c", seed=3).assign(segmenter=segf_hash, gaas=0.3)
    assert leaderboard_view(frame(a, b, c, anchors()), run_infos=infos).gaas_segmenter == segf_hash


# -- rows scored with --allow-unpromptable (case 8) ------------------------------------------------------------


def _with_unpromptable(rows, condition, block, value=0.99):
    """``rows`` plus a row of ``condition`` on ``block`` scored although the benchmark has no prompt for it (the
    best CosSim of all: it would top the board if ranked)."""
    rows = rows.copy()
    rows["unpromptable"] = 0.0
    extra = rows[(rows["condition"] == "L0") & (rows["block_id"] == block)].copy()
    extra["condition"], extra["cos_sim"], extra["unpromptable"] = condition, value, 1.0
    return pd.concat([rows[~((rows["condition"] == condition) & (rows["block_id"] == block))], extra],
                     ignore_index=True)


def test_unpromptable_rows_carry_their_mark_and_are_never_ranked():
    from geofidelity_bench.demo_app.hub_board import render_board

    honest = rows_for("gen_a", "run_a", seed=1)
    honest = honest[~((honest["condition"] == "L1") & (honest["block_id"] == "b6"))]  # no L1 prompt for b6
    forced = _with_unpromptable(rows_for("gen_u", "run_u", seed=2), "L1", "b6")
    l1_blocks = IDS[:6]
    pinned = pin(blocks={"L0": list(IDS), "L1": l1_blocks})
    for config in (config_of(pinned), None):  # pinned and legacy alike
        view = leaderboard_view(frame(honest, forced, anchors(), config=config))
        assert set(view.unpromptable) == {("gen_u", "run_u")}
        gen_rows = view.rows[view.rows["condition"] != "anchor"]
        assert not ((gen_rows["method"] == "gen_u") & (gen_rows["block_id"] == "b6")
                    & (gen_rows["condition"] == "L1")).any()
        assert (pd.to_numeric(gen_rows.get("unpromptable", pd.Series(dtype=float)), errors="coerce")
                .fillna(0) == 0).all()
        # the refused block is no block of L1 (legacy: the submissions' blocks minus the refused ones)
        assert view.condition_blocks["L1"] == l1_blocks
        assert view.ranked["L1"] == ["gen_a", "gen_u"] and view.apart == []
        header = view.header_lines(N_RESAMPLES)
        line = f"{caveats.UNPROMPTABLE_MARK}, never ranked or bolded: gen_u (run run_u) under L1 on 1 block(s): b6."
        assert line in header and f"{caveats.UNPROMPTABLE_LEGEND}." in header
        apart = view.apart_markdown()
        assert f"| gen_u {caveats.UNPROMPTABLE_MARK} | run_u | L1 |" in apart and "| 0.990 |" in apart
        tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
        assert t10_row(tables, "gen_u")["cos_sim"] == pytest.approx(l1_mean(forced, "gen_u", "run_u", blocks=l1_blocks))
        assert t10_row(tables, "gen_u")["n_blocks"] == 6
        md = render_board("tester/results", view, tables, n_resamples=N_RESAMPLES)
        assert f"| gen_u {caveats.UNPROMPTABLE_MARK}" in md.split("#### Listed apart")[1]


def test_push_results_refuses_unpromptable_rows_of_a_pinned_group(hub, online, tmp_path):
    """What reaches a pinned repo: the group's block set of a condition is the benchmark's promptable one, so an
    unpromptable panel names a block outside it and push-results refuses the run, uploading nothing."""
    try:
        import test_leaderboard_hub as lh
    except ImportError:  # tests/ imported as a package
        from tests import test_leaderboard_hub as lh
    from geofidelity_bench.hub.results_repo import SubmissionError

    def refused_b5(df, info):
        df["unpromptable"] = 0.0
        df.loc[(df["condition"] == "L1") & (df["block_id"] == "b5"), "unpromptable"] = 1.0
        return df, info

    first = lh.make_results(tmp_path / "r0", seed=0)
    blocks = {c: [b for b, _ in lh.BLOCKS] for c in ("L0", "C_WRONG_STREET")}
    blocks["L1"] = [b for b, _ in lh.BLOCKS if b != "b5"]
    lh.pin(first, hub, blocks=blocks)
    forced = lh.make_results(tmp_path / "forced", seed=1, method="gen_u", extra=refused_b5)
    before = dict(hub.files("dataset", lh.REPO))
    with pytest.raises(SubmissionError, match=r"name a block the pinned benchmark does not have in that condition, "
                                              r"e\.g\. L1/b5"):
        lh.push(forced, hub)
    assert dict(hub.files("dataset", lh.REPO)) == before
    # an honest run is taken; the repo's report opens with the leaderboard's lines, its coverage that of Table 10
    from geofidelity_bench.report.leaderboard import report_from_repo

    def no_l1_b5(df, info):  # what evaluate writes: no L1 panel where the benchmark has no L1 prompt
        return df[~((df["condition"] == "L1") & (df["block_id"] == "b5"))].reset_index(drop=True), info

    lh.push(lh.make_results(tmp_path / "honest", seed=2, method="gen_a", extra=no_l1_b5), hub)
    rep = report_from_repo(lh.REPO, tmp_path / "report", endpoint=hub.url, plots=False, n_resamples=N_RESAMPLES,
                           rank_resamples=20)
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    section = md.split("## Leaderboard\n", 1)[1].split("\n## ", 1)[0]
    (ranked,) = [x for x in rep["leaderboard_notes"] if x.startswith("Ranked")]
    assert f"- {ranked}" in section and rep["preamble"][1:] == rep["leaderboard_notes"]
    assert rep["leaderboard_coverage"]["L1"] == {"gen_a": 5} and rep["leaderboard_condition_blocks"]["L1"] == 5
    assert "in L1: 1 over 5" in ranked or "Ranked in L1: 1 generator submission(s) over the group's 5" in ranked
    board = pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")
    assert board.loc["gen_a", "n_blocks"] == 5


# -- the summary line states each ranked submission's coverage (case 10) ---------------------------------------


def test_the_ranked_line_states_the_coverage_table_10_counts():
    """A submission whose L1 rows hold only descriptive columns (similarities, diversity gap) on 6 of 7 blocks
    covers 1 block: it is partial there, never ranked as "covering all 7" beside a 1-block Table 10 row."""
    a = rows_for("gen_a", "run_a", seed=1)
    x = rows_for("gen_x", "run_x", seed=2)
    thin = (x["condition"] == "L1") & (x["block_id"] != "b0")
    x.loc[thin, list(LEADERBOARD_SCORES)] = np.nan
    for config in (config_of(pin(anchors_run_id="none")), None):  # no anchors: nothing else says a score is missing
        df = frame(a, x, config=config)
        view = leaderboard_view(df)
        assert view.ranked["L1"] == ["gen_a"]
        (apart,) = view.apart
        assert apart.method == "gen_x" and apart.partial_in == {"L1": "partial in L1: covers 1 of the group's 7 block(s)"}
        tables = leaderboard_tables(view, n_resamples=N_RESAMPLES)
        _check_ranked_line_against_table_10(view, tables)
    # the line itself never says "all" of a ranked submission that covers fewer (a view whose rows lost a block)
    view = leaderboard_view(frame(a, anchors(), config=config_of(pin())))
    lost = (view.rows["method"] == "gen_a") & (view.rows["condition"] == "L1") & (view.rows["block_id"] == "b6")
    view.rows.loc[lost, list(LEADERBOARD_SCORES)] = np.nan
    text = view.ranked_text()
    assert "each covering all" not in text and "gen_a covers only 6 of 7" in text
    assert view.coverage()["L1"] == {"gen_a": 6} and view.coverage()["L0"] == {"gen_a": 7}


LEADERBOARD_SCORES = ("cos_sim", "mmd", "dcsf", "gaas", "retrieval_acc", "mrr", "local_margin", "strongest_margin")


def _check_ranked_line_against_table_10(view, tables):
    """Every count the "Ranked" line states is Table 10's Blocks of the ranked rows (L1)."""
    (line,) = [x for x in view.header_lines(N_RESAMPLES) if x.startswith("Ranked")]
    t10 = tables["leaderboard"].data
    gen = t10[t10["group"] == "generator"]
    m = re.search(r"Ranked(?: in L1)?: (\d+) generator submission\(s\)(?:, each covering all| over the group's) "
                  r"(\d+) block\(s\)(?! \()", line)  # "(gen_x covers only k of n)" would follow
    assert m and "covers only" not in line, line
    assert len(gen) == int(m.group(1)) and set(gen["n_blocks"]) == {int(m.group(2))}
