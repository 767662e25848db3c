"""Every view tells the same truth (issue 39): the printed leaderboard, the evaluate module's summary,
the app's Leaderboard and the report's Table 10 show the same means and block counts for the same rows,
checked against a plain loop over the rows on generated mixes of NaN rows, partial conditions, copied,
repeating and unpromptable panels.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geofidelity_bench.evaluation import RESULT_COLUMNS, covered, leaderboard_summary, summarize
from geofidelity_bench.metrics.catalog import HIGHER_IS_BETTER, LEADERBOARD_METRIC_COLUMNS
from geofidelity_bench.results import LEADERBOARD_COLUMNS, leaderboard_text

METHODS = ("gen_a", "gen_b", "gen_c")
CONDITIONS = ("L0", "L1", "L2")
BLOCKS = {"b1": "FR", "b2": "FR", "b3": "DE", "b4": "IT", "b5": "IT", "b6": "IT"}


@st.composite
def result_rows(draw) -> pd.DataFrame:
    """A results table: each (method, condition, block) present or not; each score finite or NaN, some rows
    all-NaN; some panels copied, repeating or unpromptable."""
    rows = []
    for method in METHODS:
        for condition in CONDITIONS:
            for block, country in BLOCKS.items():
                if not draw(st.booleans()):
                    continue
                all_nan = draw(st.integers(0, 5)) == 0
                row = {c: float("nan") for c in RESULT_COLUMNS}
                row.update(method=method, condition=condition, block_id=block, city=f"{country.lower()}-city",
                           country=country, stratum="", encoder="efficientnet-lite0",
                           n_generated=4.0, n_reference=6.0,
                           n_distinct=draw(st.sampled_from([4.0, 4.0, 4.0, 2.0])),
                           n_copied=draw(st.sampled_from([0.0, 0.0, 0.0, 0.0, 2.0])),
                           unpromptable=float(draw(st.integers(0, 6)) == 0),
                           n_candidates=5.0, chance_retrieval_acc=0.2, chance_mrr=0.4567)
                for col in LEADERBOARD_METRIC_COLUMNS:
                    if not all_nan and draw(st.integers(0, 4)) > 0:
                        row[col] = draw(st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 6)))
                rows.append(row)
    if not rows:
        rows.append({**{c: float("nan") for c in RESULT_COLUMNS}, "method": "gen_a", "condition": "L1",
                     "block_id": "b1", "city": "fr-city", "country": "FR", "stratum": "", "encoder": "x",
                     "unpromptable": 0.0, "n_copied": 0.0, "cos_sim": 0.5, "retrieval_acc": 1.0,
                     "chance_retrieval_acc": 0.2, "chance_mrr": 0.4567})
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def expected_rows(df: pd.DataFrame) -> dict[tuple, dict]:
    """The leaderboard computed by hand: per (method, condition, unpromptable), each score's mean over its
    finite values, the blocks where some leaderboard score is finite, chance over finite-retrieval rows."""
    out: dict[tuple, dict] = {}
    for rec in df.to_dict("records"):
        key = (rec["method"], rec["condition"], bool(rec["unpromptable"] == 1))
        e = out.setdefault(key, {"values": {c: [] for c in LEADERBOARD_METRIC_COLUMNS}, "blocks": set(),
                                 "chance": [], "copied": 0, "repeating": 0})
        finite_any = False
        for c in LEADERBOARD_METRIC_COLUMNS:
            if math.isfinite(rec[c]):
                e["values"][c].append(rec[c])
                finite_any = True
        if finite_any:
            e["blocks"].add(rec["block_id"])
        if math.isfinite(rec["retrieval_acc"]):
            e["chance"].append(rec["chance_retrieval_acc"])
        e["copied"] += int(rec["n_copied"] > 0)
        e["repeating"] += int(rec["n_distinct"] < rec["n_generated"] and finite_any)
    for e in out.values():
        e["means"] = {c: (sum(v) / len(v) if v else float("nan")) for c, v in e["values"].items()}
        e["chance_mean"] = sum(e["chance"]) / len(e["chance"]) if e["chance"] else float("nan")
    return out


def _same(a: float, b: float, tol: float = 1e-9) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def _fmt3(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.3f}"


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(result_rows())
def test_printed_table_and_summary_equal_a_plain_loop(df):
    want = expected_rows(df)
    got = leaderboard_summary(df)
    assert len(got) == len(want)
    tiers = []
    for r in got.to_dict("records"):
        key = (r["method"], r["condition"], bool(r["unpromptable"]))
        e = want[key]
        assert r["n_blocks"] == len(e["blocks"]), key
        for c in LEADERBOARD_METRIC_COLUMNS:
            assert _same(r[c], e["means"][c]), (key, c)
        assert _same(r["chance_retrieval_acc"], e["chance_mean"]), key
        assert r["n_copied_panels"] == e["copied"] and r["n_repeating"] == e["repeating"]
        assert r["ranked"] == (e["copied"] == 0 and not key[2])
        tiers.append(2 if key[2] else 1 if e["copied"] else 0)
    # ranked rows first (best CosSim first, n/a last), then copied rows, then unpromptable ones
    assert tiers == sorted(tiers)
    ranked = [r["cos_sim"] for r in got.to_dict("records") if r["ranked"]]
    finite = [x for x in ranked if math.isfinite(x)]
    assert finite == sorted(finite, reverse=HIGHER_IS_BETTER["cos_sim"]) and ranked[:len(finite)] == finite

    # summarize (the summaries, the evaluate module) counts blocks the same way when nothing is apart
    plain = summarize(df, ["method", "condition"])
    for r in plain.to_dict("records"):
        blocks = set(df[(df["method"] == r["method"]) & (df["condition"] == r["condition"])]
                     .dropna(how="all", subset=list(LEADERBOARD_METRIC_COLUMNS))["block_id"])
        assert r["n_blocks"] == len(blocks)

    # the printed table shows exactly these rows, numbers and counts, in this order, each with its marks
    text = leaderboard_text(df)
    body = text.split("\n")[2:2 + len(got)]
    for line, r in zip(body, got.to_dict("records")):
        cells = re.split(r"\s{2,}", line.strip())
        name = cells[0]
        assert name.split(" [")[0] == r["method"] and cells[1] == r["condition"]
        assert ("unpromptable" in name) == bool(r["unpromptable"])
        assert ("copied" in name) == bool(r["n_copied_panels"])
        assert cells[2] == str(len(want[(r["method"], r["condition"], bool(r["unpromptable"]))]["blocks"]))
        numbers = [c for c in cells[3:]]
        shown = []
        for col, _ in LEADERBOARD_COLUMNS:
            shown.append(_fmt3(r[col]))
            if col == "retrieval_acc":
                shown.append(_fmt3(r["chance_retrieval_acc"]))
            elif col == "mrr":
                shown.append(_fmt3(r["chance_mrr"]))
        assert numbers == shown


def _row(method, condition, block, *, cos, unpromptable=0.0):
    row = {c: float("nan") for c in RESULT_COLUMNS}
    row.update(method=method, condition=condition, block_id=block, city="c", country="FR", stratum="", encoder="e",
               n_generated=4.0, n_reference=6.0, n_distinct=4.0, n_copied=0.0, unpromptable=unpromptable,
               cos_sim=cos, retrieval_acc=0.5, chance_retrieval_acc=0.25, n_candidates=4.0, chance_mrr=0.52)
    return row


def test_printed_blocks_count_only_rows_with_a_score():
    """Case 4: 'blocks 7' for a mean over 3 blocks: the all-NaN rows are not blocks of the mean."""
    rows = [_row("gen", "L1", f"b{i}", cos=0.1 * i) for i in range(3)]
    rows += [{**_row("gen", "L1", f"b{i}", cos=float("nan")), "retrieval_acc": float("nan")} for i in range(3, 7)]
    text = leaderboard_text(pd.DataFrame(rows, columns=RESULT_COLUMNS))
    line = text.splitlines()[2]
    cells = re.split(r"\s{2,}", line.strip())
    assert cells[:4] == ["gen", "L1", "3", f"{np.mean([0.0, 0.1, 0.2]):.3f}"]


def test_printed_unpromptable_rows_are_marked_and_listed_after_every_promptable_row():
    """Case 8: a panel scored with --allow-unpromptable never heads the table, and says what it is."""
    rows = [_row("gen", "L1", "b1", cos=0.9, unpromptable=1.0), _row("gen", "L1", "b2", cos=0.2),
            _row("other", "L1", "b1", cos=0.3)]
    text = leaderboard_text(pd.DataFrame(rows, columns=RESULT_COLUMNS))
    body = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[2:5]]
    assert [(c[0], c[2], c[3]) for c in body] == [("other", "1", "0.300"), ("gen", "1", "0.200"),
                                                 ("gen [\u2205 unpromptable]", "1", "0.900")]
    assert "--allow-unpromptable" in text


def test_summary_files_keep_unpromptable_panels_apart(tmp_path):
    """results.csv summaries say what the printed table says: the unpromptable panel is its own row."""
    from geofidelity_bench.evaluation import summaries

    rows = [_row("gen", "L1", "b1", cos=0.9, unpromptable=1.0), _row("gen", "L1", "b2", cos=0.2),
            _row("gen", "L1", "b3", cos=0.4)]
    by_mc = summaries(pd.DataFrame(rows, columns=RESULT_COLUMNS))["by_method_condition"]
    got = {int(u): (int(n), round(c, 9)) for u, n, c in zip(by_mc["unpromptable"], by_mc["n_blocks"], by_mc["cos_sim"])}
    assert got == {0: (2, 0.3), 1: (1, 0.9)}


# -- folders of several runs: encoders and segmenters ------------------------------------------------------

SEGMENTERS = {"mask2former-vistas": "m" * 64, "segformer-cityscapes": "a" * 64}  # segformer's hash sorts first


def _run_json(encoder: str, segmenter: str | None) -> dict:
    gaas = ({"segmenter": segmenter, "config": {"name": segmenter}, "config_hash": SEGMENTERS[segmenter]}
            if segmenter else {"segmenter": None, "reason": "no segmenter was given"})
    return {"benchmark": {"name": "synthetic", "fingerprint": "f" * 64},
            "encoder": {"name": encoder, "config": {"name": encoder}, "config_hash": encoder * 16},
            "protocol": {"version": "1"}, "gaas": gaas}


@st.composite
def runs(draw) -> list[tuple[str, str | None, pd.DataFrame]]:
    """Two or three results folders of one benchmark: each its own generators under L1 (and the first the
    anchors), an encoder (sometimes another), a segmenter or none (GAAS then NaN), NaN and unpromptable rows."""
    out = []
    n = draw(st.integers(2, 3))
    for k in range(n):
        encoder = draw(st.sampled_from(["enc", "enc", "enc", "other"]))
        segmenter = draw(st.sampled_from([*SEGMENTERS, None]))
        rows = []
        methods = [f"gen{k}{j}" for j in range(draw(st.integers(1, 2)))]
        units = [(m, "L1") for m in methods] + ([(a, "anchor") for a in ("heldout_real", "random_global")] if k == 0
                                                 else [])
        for method, condition in units:
            for i, (block, country) in enumerate(BLOCKS.items()):
                if condition == "L1" and i and not draw(st.integers(0, 3)):  # every generator has a row
                    continue
                row = _row(method, condition, block, cos=draw(st.floats(-1, 1).map(lambda x: round(x, 6))),
                           unpromptable=float(condition == "L1" and draw(st.integers(0, 7)) == 0))
                row.update(country=country, city=f"{country.lower()}-city", encoder=encoder,
                           n_copied=0.0 if condition == "L1" else float("nan"))
                for col in ("mmd", "dcsf", "mrr", "local_margin", "strongest_margin"):
                    row[col] = draw(st.floats(0, 1).map(lambda x: round(x, 6)))
                row["gaas"] = draw(st.floats(0, 1).map(lambda x: round(x, 6))) if segmenter else float("nan")
                if draw(st.integers(0, 6)) == 0:  # a panel left without any score
                    for col in LEADERBOARD_METRIC_COLUMNS:
                        row[col] = float("nan")
                rows.append(row)
        out.append((encoder, segmenter, pd.DataFrame(rows, columns=RESULT_COLUMNS)))
    return out


def expected_gaas_segmenter(folders) -> str | None:
    """By hand: the segmenter whose GAAS most rows carry; a tie goes to mask2former-vistas (the default)."""
    counts: dict[str, int] = {}
    for _, seg, df in folders:
        if seg:
            counts[seg] = counts.get(seg, 0) + int(np.isfinite(df["gaas"].to_numpy(float)).sum())
    counts = {s: c for s, c in counts.items() if c}
    if not counts:
        return None
    most = max(counts.values())
    tied = [s for s, c in counts.items() if c == most]
    return "mask2former-vistas" if "mask2former-vistas" in tied else tied[0]


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_report_app_and_printed_table_agree_on_mixed_folders(folders):
    import json
    import tempfile
    from pathlib import Path

    from geofidelity_bench.demo_app.results import ResultsError, check_results
    from geofidelity_bench.report import ReportError, report_from_dirs

    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for k, (encoder, segmenter, df) in enumerate(folders):
            d = Path(tmp) / f"run{k}"
            d.mkdir()
            df.to_csv(d / "results.csv", index=False)
            (d / "run.json").write_text(json.dumps(_run_json(encoder, segmenter)))
            dirs.append(d)
        together = pd.concat([df for _, _, df in folders], ignore_index=True)
        if len({enc for enc, _, _ in folders}) > 1:
            # two encoders are never averaged: the report and the app refuse the same rows
            with pytest.raises(ReportError, match="encoder"):
                report_from_dirs(dirs, Path(tmp) / "report", plots=False, n_resamples=20, rank_resamples=10)
            with pytest.raises(ResultsError, match="encoders"):
                check_results(together, "results.csv")
            return
        rep = report_from_dirs(dirs, Path(tmp) / "report", plots=False, n_resamples=20, rank_resamples=10)
        csv = Path(tmp) / "report" / "tables" / "leaderboard.csv"
        t10 = pd.read_csv(csv) if csv.is_file() else None  # skipped when no row has a score
    # GAAS from one segmenter only: the others' GAAS is n/a before any number is shown
    chosen = expected_gaas_segmenter(folders)
    shown = []
    for _, seg, df in folders:
        df = df.copy()
        if seg != chosen:
            df["gaas"] = float("nan")
        shown.append(df)
    shown = pd.concat(shown, ignore_index=True)
    summary = leaderboard_summary(shown[shown["condition"] == "L1"])
    summary = summary[summary["n_blocks"] > 0]  # a row without any score: n/a in the printed table, not in Table 10
    if t10 is None:
        assert summary.empty and not covered(together[together["condition"] == "anchor"]).any()
        return
    gen = t10[t10["group"] == "generator"]
    assert len(gen) == len(summary)
    for r in summary.to_dict("records"):
        row = gen[(gen["method"] == r["method"]) & (gen["unpromptable"].astype(bool) == bool(r["unpromptable"]))]
        assert len(row) == 1, (r["method"], r["unpromptable"])
        row = row.iloc[0]
        assert int(row["n_blocks"]) == r["n_blocks"]
        for col in LEADERBOARD_METRIC_COLUMNS:
            assert _same(float(row[col]), float(r[col]), 1e-9), (r["method"], col)
        assert not (r["unpromptable"] and bool(row["ranked"]))
    if chosen is not None and len({seg for _, seg, df in folders if seg and np.isfinite(df["gaas"]).any()}) > 1:
        text = json.dumps(rep, default=str)
        assert f"GAAS is shown for segmenter {chosen}" in text


@pytest.mark.parametrize("segmenters, change, noted", [
    (("mask2former-vistas", "segformer-cityscapes"), "gaas", False),  # another segmenter's GAAS: by design
    (("mask2former-vistas", None), "gaas", False),  # a run without a segmenter has no GAAS to compare
    (("mask2former-vistas", "mask2former-vistas"), "gaas", True),  # one segmenter, two GAAS: not the same build
    (("mask2former-vistas", "segformer-cityscapes"), "cos_sim", True),  # another encoder build
])
def test_anchors_differ_note_compares_gaas_within_one_segmenter(tmp_path, segmenters, change, noted):
    import json

    from geofidelity_bench.report import report_from_dirs

    dirs = []
    for k, seg in enumerate(segmenters):
        rows = [_row(a, "anchor", b, cos=0.3) for a in ("heldout_real", "random_global") for b in BLOCKS]
        for r in rows:
            r["gaas"] = (0.1 if k == 0 or change != "gaas" else 0.4) if seg else float("nan")
            if change == "cos_sim" and k == 1:
                r["cos_sim"] = 0.35
        rows.append(_row(f"gen{k}", "L1", "b1", cos=0.5))
        d = tmp_path / f"run{k}"
        d.mkdir()
        pd.DataFrame(rows, columns=RESULT_COLUMNS).to_csv(d / "results.csv", index=False)
        (d / "run.json").write_text(json.dumps(_run_json("enc", seg)))
        dirs.append(d)
    report_from_dirs(dirs, tmp_path / "report", plots=False, n_resamples=20, rank_resamples=10)
    md = (tmp_path / "report" / "report.md").read_text()
    assert ("the real-image anchors differ between the runs" in md) == noted
