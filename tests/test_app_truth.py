"""The app tells the printed table's and the report's truth (issue 39, the app's side of cases 2, 4, 8, 12):
no average across encoders, "blocks" and means as every other view counts them, rows scored with
--allow-unpromptable marked and never ranked with promptable rows, and the random-same-country anchor of a
block that is the only one of its country never called "same country".

The leaderboard's numbers are checked against a plain loop over the rows and against
``results.leaderboard_text``, on generated frames mixing NaN rows, partial rows, copied, repeating and
unpromptable panels."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image

pytest.importorskip("gradio", reason="the app needs gradio (pip install -e '.[app]')")

try:
    from test_app import app_data  # noqa: F401  (the session's AppData of the demo benchmark)
except ImportError:  # tests/ imported as a package
    from tests.test_app import app_data  # noqa: F401

from geofidelity_bench import caveats
from geofidelity_bench.evaluation import METRIC_COLUMNS, RESULT_COLUMNS
from geofidelity_bench.metrics.catalog import LEADERBOARD_METRIC_COLUMNS
from geofidelity_bench.report import METHOD_LABELS

ANCHORS = ("heldout_real", "random_same_country", "random_global")
GENERATORS = ("sdxl", "flux_dev", "my_model")
#: a value inside each score's range (docs/benchmark.md section 5), drawn per row
RANGES = {"cos_sim": (0.0, 1.0), "mmd": (0.0, 0.5), "dcsf": (0.0, 0.6), "diversity_gap": (-0.2, 0.2),
          "gaas": (0.0, 0.8), "mrr": (0.25, 1.0), "local_margin": (-0.3, 0.3), "strongest_margin": (-0.3, 0.3)}


def _row(**values) -> dict:
    row = {c: np.nan for c in RESULT_COLUMNS}
    row.update(values)
    return row


def mixed_results(seed: int) -> pd.DataFrame:
    """A results table of one encoder over 7 blocks (one of them alone in its country): the three anchors
    and three generators in two conditions, with all-NaN rows, rows missing some scores, copied panels,
    repeating panels and (block, condition) pairs scored although unpromptable."""
    rng = np.random.default_rng(seed)
    blocks = {"it1": "IT", "it2": "IT", "se1": "SE", "se2": "SE", "se3": "SE", "de1": "DE", "fr1": "FR"}
    chance = {b: (1 / n, float(np.mean([1 / k for k in range(1, n + 1)])))
              for b, n in zip(blocks, rng.integers(3, 6, size=len(blocks)))}
    unpromptable = {(b, c): rng.random() < 0.25 for b in blocks for c in ("L0", "L1")}
    rows = []
    for method in ANCHORS + GENERATORS:
        for condition in (("anchor",) if method in ANCHORS else ("L0", "L1")):
            for block, country in blocks.items():
                scores = {c: float(rng.uniform(*RANGES.get(c, (0.0, 1.0)))) for c in METRIC_COLUMNS}
                scores["retrieval_acc"] = float(rng.integers(0, 5)) / 4
                fate = rng.random()
                if fate < 0.12:  # a panel left too small: every score NaN
                    scores = dict.fromkeys(METRIC_COLUMNS, np.nan)
                elif fate < 0.3:  # some scores missing (no retrieval, no same-city negative, no GAAS)
                    for c in rng.choice(METRIC_COLUMNS, size=int(rng.integers(1, 5)), replace=False):
                        scores[str(c)] = np.nan
                distinct = 4 if rng.random() < 0.75 else int(rng.integers(1, 4))
                copied = float(rng.integers(1, 4)) if method not in ANCHORS and rng.random() < 0.12 else 0.0
                flag = (1.0 if unpromptable[(block, condition)] else 0.0) if method not in ANCHORS else np.nan
                rows.append(_row(method=method, condition=condition, block_id=block, city=block[:2], country=country,
                                 n_generated=4.0, n_distinct=float(distinct), n_copied=copied, unpromptable=flag,
                                 n_candidates=round(1 / chance[block][0]), chance_retrieval_acc=chance[block][0],
                                 chance_mrr=chance[block][1], encoder="dinov2-base", **scores))
    return pd.DataFrame(rows)


def _finite(value) -> bool:
    return value is not None and isinstance(value, float) and math.isfinite(value)


def plain_summary(df: pd.DataFrame) -> list[dict]:
    """The leaderboard's rows by a plain loop over the result rows, in their order: ranked rows best CosSim
    first (NaN last, ties by method and condition), then rows with copied panels, then unpromptable rows."""
    groups: dict[tuple, list[dict]] = {}
    for r in df.to_dict("records"):
        unpromptable = _finite(r.get("unpromptable")) and r["unpromptable"] > 0
        groups.setdefault((r["method"], r["condition"], unpromptable), []).append(r)
    out = []
    for (method, condition, unpromptable), rows in groups.items():
        entry = {"method": method, "condition": condition, "unpromptable": unpromptable}
        entry["blocks"] = len({r["block_id"] for r in rows
                               if any(_finite(r[c]) for c in LEADERBOARD_METRIC_COLUMNS)})
        for c in METRIC_COLUMNS:
            values = [r[c] for r in rows if _finite(r[c])]
            entry[c] = sum(values) / len(values) if values else float("nan")
        with_retrieval = [r for r in rows if _finite(r["retrieval_acc"])]
        for c in ("chance_retrieval_acc", "chance_mrr"):
            values = [r[c] for r in with_retrieval if _finite(r[c])]
            entry[c] = sum(values) / len(values) if values else float("nan")
        entry["repeating"] = sum(1 for r in rows if r["n_distinct"] < r["n_generated"]
                                 and any(_finite(r[c]) for c in LEADERBOARD_METRIC_COLUMNS))
        entry["copied"] = sum(1 for r in rows if _finite(r["n_copied"]) and r["n_copied"] > 0)
        entry["tier"] = 2 if unpromptable else (1 if entry["copied"] else 0)
        out.append(entry)
    return sorted(out, key=lambda e: (e["tier"], not _finite(e["cos_sim"]),
                                      -e["cos_sim"] if _finite(e["cos_sim"]) else 0.0, e["method"], e["condition"]))


def _expected_notes(entry: dict) -> str:
    marks = []
    for mark, k in ((caveats.REPEATS_MARK, entry["repeating"]), (caveats.COPIED_MARK, entry["copied"])):
        if k:
            marks.append(mark + ("" if k == entry["blocks"] == 1 else f" ({k} of {entry['blocks']} blocks)"))
    if entry["unpromptable"]:
        marks.append(caveats.UNPROMPTABLE_MARK)
    return "; ".join(marks)


def printed_rows(text: str) -> list[dict[str, str]]:
    """The rows of ``results.leaderboard_text`` as header -> cell (cells are separated by 2+ spaces)."""
    lines = text.splitlines()
    headers = re.split(r"\s{2,}", lines[0].strip())
    rows = []
    for line in lines[2:]:
        if line.startswith("blocks:"):  # the legend under the table
            break
        cells = re.split(r"\s{2,}", line.strip())
        assert len(cells) == len(headers), line
        rows.append(dict(zip(headers, cells)))
    return rows


@pytest.mark.parametrize("seed", range(8))
def test_app_leaderboard_is_a_plain_loop_and_the_printed_table(seed):
    """Issue 39 cases 4 and 8: the app's summary rows, blocks, means, chance levels, marks and order are a
    plain loop's over the rows and the printed table's (results.leaderboard_text) cell for cell."""
    from geofidelity_bench.demo_app import results as lb
    from geofidelity_bench.results import CHANCE_TEXT_COLUMNS, LEADERBOARD_COLUMNS, leaderboard_text

    df = lb.check_results(mixed_results(seed), "results.csv")  # what an upload of this file gives the app
    expected = plain_summary(df)
    assert any(e["unpromptable"] for e in expected) and any(e["copied"] for e in expected)
    assert any(e["blocks"] < 7 for e in expected if not e["unpromptable"])  # NaN rows cover no block

    table = lb.leaderboard_table(df)
    assert len(table) == len(expected)
    # "#" is a rank: the ranked rows (neither copied nor unpromptable) 1, 2, ... in order, the others none
    ranked = [e["tier"] == 0 for e in expected]
    assert sum(ranked) and not all(ranked)
    assert [None if pd.isna(v) else int(v) for v in table["#"]] == [
        i if r else None for i, r in zip(np.cumsum(ranked), ranked)]
    for (_, got), want in zip(table.iterrows(), expected):
        assert (got["method"], got["condition"]) == (METHOD_LABELS.get(want["method"], want["method"]),
                                                      want["condition"])
        assert got["blocks"] == want["blocks"]
        assert got["notes"] == _expected_notes(want)
        for col, header in lb.LEADERBOARD_METRICS + tuple(lb.CHANCE_COLUMNS.values()):
            value = float(got[header])
            assert (math.isnan(value) and math.isnan(want[col])) or value == pytest.approx(want[col], abs=1e-12), \
                (want["method"], want["condition"], col)

    # the printed table: the same rows in the same order, every shown number the same string
    shown = lb.display_table(table)
    printed = printed_rows(leaderboard_text(df))
    assert len(printed) == len(shown)
    text_header = dict(LEADERBOARD_COLUMNS + CHANCE_TEXT_COLUMNS)
    app_header = dict(lb.LEADERBOARD_METRICS + tuple(lb.CHANCE_COLUMNS.values()))
    for (_, app_row), text_row, want in zip(shown.iterrows(), printed, expected):
        assert text_row["method"].split(" [")[0] == want["method"] and text_row["condition"] == want["condition"]
        assert text_row["blocks"] == str(app_row["blocks"])
        for col in app_header:
            assert text_row[text_header[col]] == app_row[app_header[col]], (want["method"], col)
        assert (f"[{caveats.UNPROMPTABLE_MARK}]" in text_row["method"]) == (caveats.UNPROMPTABLE_MARK in app_row["notes"])
        assert (f"[{caveats.COPIED_MARK}]" in text_row["method"]) == (caveats.COPIED_MARK in app_row["notes"])


@pytest.mark.parametrize("seed", range(4))
def test_unpromptable_rows_are_marked_and_after_every_promptable_row_in_every_order(seed):
    """Issue 39 case 8: in the summary and the per-block view, whatever the sort, a row scored with
    --allow-unpromptable carries the mark and comes after every promptable row (of its block, per block);
    the notes under the table carry the legend."""
    from geofidelity_bench.demo_app import results as lb

    df = lb.check_results(mixed_results(seed))
    unp = caveats.unpromptable_mask(df)
    assert unp.any() and not unp.all()
    for view in lb.VIEWS:
        for sort_by in lb.SORT_CHOICES:
            for best_first in (True, False):
                table = lb.leaderboard_table(df, sort_by=sort_by, best_first=best_first, view=view)
                marked = table["notes"].str.contains(caveats.UNPROMPTABLE_MARK, regex=False).to_numpy()
                groups = [table] if view == lb.VIEWS[0] else [rows for _, rows in table.groupby("block_id")]
                for rows in groups:
                    m = rows["notes"].str.contains(caveats.UNPROMPTABLE_MARK, regex=False).to_numpy()
                    assert not m[: int((~m).sum())].any(), (view, sort_by, best_first)
                if view == lb.VIEWS[1]:  # one row per result row: the mark on exactly the unpromptable ones
                    assert len(table) == len(df) and int(marked.sum()) == int(unp.sum())
                    keyed = df.assign(_u=unp).set_index(["method", "condition", "block_id"])["_u"]
                    labels = {METHOD_LABELS.get(m, m): m for m in df["method"]}
                    for _, r in table.iterrows():
                        assert keyed[(labels[r["method"]], r["condition"], r["block_id"])] == (
                            caveats.UNPROMPTABLE_MARK in r["notes"])
                else:
                    summary_unp = {(e["method"], e["condition"]) for e in plain_summary(df) if e["unpromptable"]}
                    assert int(marked.sum()) == len(summary_unp)
                if view == lb.VIEWS[0] and sort_by != "method":  # copied rows after the ranked ones
                    copied = table["notes"].str.contains(caveats.COPIED_MARK, regex=False).to_numpy() & ~marked
                    ranked = ~copied & ~marked
                    assert not ranked[int(ranked.sum()):].any()
    notes = lb.leaderboard_notes(df)
    assert caveats.UNPROMPTABLE_LEGEND in notes
    assert caveats.UNPROMPTABLE_LEGEND not in lb.leaderboard_notes(df[~unp])


def test_app_refuses_results_of_two_encoders_as_the_report_does(tmp_path):
    """Issue 39 case 2: a results.csv with dinov2-base and clip-vit-b32 rows of the same 6 blocks was one
    "SDXL L1" row averaging both; the app refuses it, naming the file and the encoders, like `report`."""
    from geofidelity_bench.demo_app import results as lb
    from geofidelity_bench.demo_app.uploads import UploadError, read_uploaded_results
    from geofidelity_bench.results import ResultsFolderError, check_encoders

    rows = [_row(method="sdxl", condition="L1", block_id=f"b{i}", encoder=enc, n_generated=4.0, n_distinct=4.0,
                 cos_sim=0.4 + 0.05 * i + (0.2 if enc == "clip-vit-b32" else 0.0), retrieval_acc=0.5, mrr=0.6)
            for enc in ("dinov2-base", "clip-vit-b32") for i in range(6)]
    df = pd.DataFrame(rows)
    with pytest.raises(ResultsFolderError):  # the report's rule refuses this file
        check_encoders(df, allow_mixed=False)
    path = tmp_path / "mixed.csv"
    df.to_csv(path, index=False)
    with pytest.raises(UploadError, match=r"mixed\.csv mixes encoders \(clip-vit-b32, dinov2-base\)"):
        read_uploaded_results(str(path), upload_root=tmp_path)
    with pytest.raises(lb.ResultsError, match="mixes encoders"):
        lb.leaderboard_table(df)  # never averaged, whichever way the rows arrive
    # one encoder alone is shown, its own 6 blocks
    one = lb.check_results(df[df["encoder"] == "dinov2-base"], "one.csv")
    table = lb.leaderboard_table(one)
    assert table["blocks"].tolist() == [6]
    assert table["CosSim ↑"].iloc[0] == pytest.approx(np.mean([0.4 + 0.05 * i for i in range(6)]), abs=1e-12)


def test_same_country_anchor_that_falls_back_is_never_called_same_country(app_data):
    """Issue 39 case 12: Berlin is the demo's only German block, so its random-same-country anchor draws from
    all other blocks; the leaderboard notes, the Explore tab and the Score tab say so (the note of
    caveats.same_country_fallback_note) and never call it "same country" there; other blocks keep the name."""
    from geofidelity_bench.demo_app import figures, results as lb
    from geofidelity_bench.demo_app.texts import about_markdown, md_escape
    from geofidelity_bench.demo_app.ui import _metadata_markdown, _scores_markdown
    from geofidelity_bench.evaluation import anchor_panels

    bench = app_data.benchmark
    # by hand: the blocks alone in their country, and that their anchor really is drawn from other countries
    alone = sorted(b.block_id for b in bench.blocks if sum(o.country == b.country for o in bench.blocks) == 1)
    assert alone == ["berlin_am_lustgarten"]
    panel = anchor_panels(bench)[("random_same_country", "anchor", "berlin_am_lustgarten")]
    country = {r.reference_id: b.country for b in bench.blocks for r in bench.references_of(b.block_id)}
    assert {country[r.reference_id] for r in panel} - {"DE"}
    note = caveats.same_country_fallback_note(alone, len(bench.blocks))

    assert md_escape(note) in lb.leaderboard_notes(app_data.results)
    no_anchor = app_data.results[app_data.results["method"] != "random_same_country"]
    assert "same-country" not in lb.leaderboard_notes(no_anchor)  # said where the anchor shows, only there

    berlin, lund = _metadata_markdown(app_data, "berlin_am_lustgarten"), _metadata_markdown(app_data, "lund_seg1")
    assert md_escape(note) in berlin and "random_same_country (all other blocks)" in berlin
    assert "same-country" not in lund and "(all other blocks)" not in lund

    from geofidelity_bench.demo_app.texts import anchor_labels

    for block, falls_back in (("berlin_am_lustgarten", True), ("lund_seg2", False)):
        # images that copy no photo of the benchmark (a copy is never scored as a visitor's result)
        rng = np.random.default_rng(12)
        images = [Image.fromarray(rng.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)).resize((128, 96))
                  for _ in range(2)]
        scored = app_data.score(block, images)
        assert scored.scored and not scored.copies_left_out
        assert (scored.same_country_note == note) if falls_back else scored.same_country_note is None
        md = _scores_markdown(scored)
        assert ("random photos from the same country" in md) != falls_back
        assert ("random photos from all other blocks" in md) == falls_back
        assert (md_escape(note) in md) == falls_back
        assert scored.as_json()["same_country_note"] == (note if falls_back else None)
        fig = figures.anchor_figure(scored.row, scored.anchors, block_id=block,
                                    labels=anchor_labels(falls_back, short=True))
        ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        assert ("same country = all blocks" in ticks) == falls_back and ("same country" in ticks) != falls_back
    assert "of all other blocks when no other" in about_markdown()
