"""The leaderboard: result rows (docs/benchmark.md section 7, Statistics and analyses) -> a sortable, filterable table and the report's plots."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import caveats
from ..benchmark import Benchmark
from ..errors import GeoFidelityError
from ..evaluation import ANCHOR_PANEL_SIZE, METRIC_COLUMNS, RESULT_COLUMNS, leaderboard_summary
from ..metrics.catalog import METRICS, heading
from ..metrics.retrieval import retrieval_chance
from ..report import METHOD_LABELS
from ..results import REQUIRED_COLUMNS, ResultsFolderError, check_encoders, encoders_of
from ..stats import HIGHER_IS_BETTER
from .texts import md_escape

ALL_CONDITIONS = "all conditions"
VIEWS = ("mean per method and condition", "one row per block")
#: (column, header) of the leaderboard, in order; arrows give the direction.
LEADERBOARD_METRICS = tuple(
    (c, heading(c))
    for c in ("cos_sim", "mmd", "dcsf", "gaas", "retrieval_acc", "mrr", "local_margin", "strongest_margin")
)
SORT_CHOICES = tuple(h for _, h in LEADERBOARD_METRICS) + ("method",)
#: Chance columns (docs/benchmark.md section 5): the header shown right after the score it belongs to.
CHANCE_COLUMNS = {"retrieval_acc": ("chance_retrieval_acc", "chance acc"), "mrr": ("chance_mrr", "chance MRR")}
#: The column of marks (repeated held-out photos, copied reference photos).
NOTES_HEADER = "notes"
_HEADER_TO_COLUMN = {h: c for c, h in LEADERBOARD_METRICS}
MAX_ROWS_SHOWN = 2000
#: Bad cells listed in the message that refuses a results table.
MAX_BAD_CELLS_SHOWN = 5


class ResultsError(GeoFidelityError, ValueError):
    """A results table the leaderboard cannot show."""


def check_results(df: pd.DataFrame, name: str = "results") -> pd.DataFrame:
    """The rows ready for the leaderboard: required columns present, one encoder, metric columns numeric,
    every score finite and within its range (:mod:`geofidelity_bench.metrics.catalog`).

    A table whose ``encoder`` column names two or more encoders is refused, by the report's own rule
    (:func:`geofidelity_bench.results.check_encoders`): scores from different encoders are not
    comparable, and the leaderboard's means would average them into one row.

    Missing metric columns are added as NaN (a results file from an older run may lack some);
    an empty cell (NaN: not computed) is fine. Rows are numbered as in the file (row 1 is the
    first line after the header).
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ResultsError(
            f"{name} has no column(s) {', '.join(missing)}; a results.csv from `geofidelity-bench evaluate` "
            f"has the columns {', '.join(RESULT_COLUMNS)}"
        )
    if df.empty:
        raise ResultsError(f"{name} has no rows")
    check_one_encoder(df, name)
    out = df.copy()
    for col in ("method", "condition", "block_id"):
        out[col] = out[col].astype(str)
    for col in METRIC_COLUMNS:
        if col not in out.columns:
            out[col] = np.nan
        else:
            out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    _check_values(out, name)
    if not any(np.isfinite(out[c].to_numpy(dtype=float)).any() for c in METRIC_COLUMNS):
        raise ResultsError(f"{name} has no numeric scores in any of the columns {', '.join(METRIC_COLUMNS)}")
    return out


def check_one_encoder(results: pd.DataFrame, name: str = "results") -> None:
    """Refuses rows of two or more encoders, naming them, by the report's rule
    (:func:`geofidelity_bench.results.check_encoders`): the app never averages scores of different encoders."""
    try:
        check_encoders(results, allow_mixed=False)
    except ResultsFolderError:
        raise ResultsError(
            f"{name} mixes encoders ({', '.join(encoders_of(results))}): scores from different encoders are not "
            "comparable, and the leaderboard never averages them into one row (`geofidelity-bench report` refuses "
            "the same file). Show one encoder at a time: keep only the rows of one encoder (the `encoder` column)."
        ) from None


def _check_values(results: pd.DataFrame, name: str) -> None:
    """Refuses a table with an infinite score or one outside its range, naming row and column."""
    bad: list[tuple[int, str, float]] = []
    for col in METRIC_COLUMNS:
        values = results[col].to_numpy(dtype=float)
        wrong = ~(np.isnan(values) | METRICS[col].in_range(values))
        bad += [(int(i), col, float(values[i])) for i in np.flatnonzero(wrong)]
    if bad:
        bad.sort()
        cells = [
            f"row {i + 1}, column {col}: {v} is not a finite number" if not math.isfinite(v)
            else f"row {i + 1}, column {col}: {v:g} is outside {METRICS[col].range}"
            for i, col, v in bad[:MAX_BAD_CELLS_SHOWN]
        ]
        more = f" (and {len(bad) - MAX_BAD_CELLS_SHOWN} more)" if len(bad) > MAX_BAD_CELLS_SHOWN else ""
        raise ResultsError(
            f"{name} has {len(bad)} impossible score(s): " + "; ".join(cells) + more
            + ". Fix or remove those rows (an empty cell means a score that was not computed)."
        )


def candidate_chance(candidates: dict[str, str]) -> tuple[float, float]:
    """Chance (accuracy, MRR) of a candidate line-up ``role -> block id`` (``"target"`` included), under
    the metric's rule: one candidate per role, ties count against the target
    (:func:`geofidelity_bench.metrics.retrieval_chance`, the function behind results.csv's chance columns)."""
    chance = retrieval_chance(candidates)
    return chance.accuracy, chance.mrr


def block_candidates(bench: Benchmark, block_id: str) -> dict[str, str]:
    """The retrieval line-up of a block: ``"target"`` and every negative role present -> block id."""
    out = {"target": block_id}
    out.update({role: neg for role, neg in bench.negatives(block_id).items() if neg is not None})
    return out


def annotate_results(results: pd.DataFrame, benchmark=None) -> pd.DataFrame:
    """``results`` with the columns the leaderboard's caveats read, tolerating results written before them.

    ``n_candidates``, ``chance_retrieval_acc``, ``chance_mrr`` (results.csv columns since issue 28)
    and ``n_distinct`` are added as NaN when missing. With ``benchmark`` (only when the results are
    known to come from that benchmark), missing chance values are computed from each block's
    retrieval line-up (:func:`geofidelity_bench.metrics.retrieval_chance`) and a missing
    ``n_distinct`` of a held-out anchor row from the block's held-out photos (cycled to the panel
    size); nothing is filled for other benchmarks, whose chance is then "unknown".
    """
    out = results.copy()
    out.attrs = dict(results.attrs)
    for col in ("n_candidates", "chance_retrieval_acc", "chance_mrr", "n_distinct", "n_copied"):
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float) if col in out.columns else np.nan
    if benchmark is None:
        return out
    for i, bid in zip(out.index, out["block_id"].astype(str)):
        if bid not in benchmark:
            continue
        if np.isnan(out.at[i, "chance_retrieval_acc"]) or np.isnan(out.at[i, "chance_mrr"]):
            candidates = block_candidates(benchmark, bid)
            acc, mrr = candidate_chance(candidates)
            out.loc[i, ["n_candidates", "chance_retrieval_acc", "chance_mrr"]] = [len(candidates), acc, mrr]
        if out.at[i, "method"] == caveats.HELDOUT_METHOD and np.isnan(out.at[i, "n_distinct"]):
            held = {r.reference_id for r in benchmark.heldout(bid)}
            out.at[i, "n_distinct"] = float(min(len(held), ANCHOR_PANEL_SIZE))
    return out


def _summary_notes(row: dict) -> str:
    """The marks of one :func:`~geofidelity_bench.evaluation.leaderboard_summary` row, counted as the printed
    table counts them (``results.leaderboard_text``): panels repeating photos and panels holding copied
    images of the row's ``n_blocks`` blocks, and whether the row was scored although unpromptable."""
    n = int(row["n_blocks"])
    marks = []
    counts = ((caveats.REPEATS_MARK, int(row["n_repeating"])), (caveats.COPIED_MARK, int(row["n_copied_panels"])))
    for mark, k in counts:
        if k:
            marks.append(mark + ("" if k == n == 1 else f" ({k} of {n} blocks)"))
    if row["unpromptable"]:
        marks.append(caveats.UNPROMPTABLE_MARK)
    return "; ".join(marks)


def leaderboard_notes(results: pd.DataFrame) -> str:
    """What a reader must be told under the leaderboard (Markdown): chance, repeating held-out anchors, copies."""
    lines = []
    chance = pd.to_numeric(results.get("chance_retrieval_acc", pd.Series(dtype=float)), errors="coerce")
    if chance.notna().any():
        lines.append(
            "**Chance:** the *chance acc* and *chance MRR* columns are what a panel of random images scores on the "
            "same blocks (mean over the blocks with a retrieval score, as in the printed table): each block's target "
            "plus one candidate per negative role; a block filling two roles ranks twice and ties count against the "
            "target. A retrieval score near its chance level says nothing about the block.")
    else:
        lines.append("**Chance:** unknown for these results (no chance columns, and not known to come from this "
                     "app's benchmark); with 3-5 candidates per block, chance accuracy is 0.2-0.33.")
    if "n_distinct" in results and "method" in results:
        held = results[results["method"].astype(str) == caveats.HELDOUT_METHOD]
        thin = caveats.thin_anchor_blocks(results)
        n_blocks = int(held["block_id"].nunique())
        note = caveats.thin_anchor_note(len(thin), n_blocks)
        if note:
            lines.append(f"**{caveats.REPEATS_MARK}:** {note}. Blocks: {', '.join(thin)}.")
    mask = caveats.copied_mask(results)
    if mask.any():
        n_images = int(pd.to_numeric(results.loc[mask, "n_copied"], errors="coerce").sum())
        lines.append(f"**{caveats.copied_note(int(mask.sum()), n_images)}.**")
    if caveats.unpromptable_mask(results).any():
        lines.append(f"**{caveats.UNPROMPTABLE_LEGEND}.**")
    note = same_country_note(results)
    if note:  # block ids of an uploaded file: shown literally
        lines.append(f"**{md_escape(note)}.**")
    return "\n\n".join(lines)


def same_country_note(results: pd.DataFrame) -> str | None:
    """What the random-same-country anchor is on the blocks whose country has no other block
    (:func:`geofidelity_bench.caveats.same_country_fallback_note`), when ``results`` show that anchor."""
    if "method" not in results or not (results["method"].astype(str) == "random_same_country").any():
        return None
    blocks = caveats.same_country_fallback_blocks(results)
    return caveats.same_country_fallback_note(blocks, int(results["block_id"].nunique()))


def provenance_text(run_info: dict | None, own_info: dict) -> str:
    """Which benchmark, encoder and protocol produced the shown results, and whether the app's own scores
    (the Score tab) may be compared with them (:mod:`geofidelity_bench.comparability`)."""
    from ..comparability import comparability_of_run, not_comparable_reason

    if not run_info:
        return ("Benchmark fingerprint, encoder config and protocol: **unknown** (no run.json next to the results), "
                "so these scores cannot be checked against the ones this app computes.")
    theirs, ours = comparability_of_run(run_info), comparability_of_run(own_info)
    name = (run_info.get("benchmark") or {}).get("name") if isinstance(run_info.get("benchmark"), dict) else None
    text = f"Produced on benchmark `{name or '?'}` ({theirs.short()})."
    why = not_comparable_reason(ours, theirs)
    if why:
        text += f" **Not comparable** with the scores this app computes ({why})."
    return text


def empty_metrics(results: pd.DataFrame) -> list[str]:
    """Headers of the leaderboard metrics that are missing (NaN) in every row."""
    return [h for c, h in LEADERBOARD_METRICS if not np.isfinite(results[c].to_numpy(dtype=float)).any()]


def conditions_of(results: pd.DataFrame) -> list[str]:
    return [ALL_CONDITIONS] + sorted(map(str, results["condition"].unique()))


def leaderboard_table(
    results: pd.DataFrame,
    *,
    condition: str = ALL_CONDITIONS,
    sort_by: str = "CosSim ↑",
    best_first: bool = True,
    view: str = VIEWS[0],
) -> pd.DataFrame:
    """The leaderboard rows for one condition (or all), sorted by a metric, best first by default.

    ``sort_by`` is a header of :data:`LEADERBOARD_METRICS` (or a column name) or ``"method"``;
    "best" follows the metric's direction (lower first for MMD, DCSF and GAAS).

    The summary view's rows and numbers are :func:`geofidelity_bench.evaluation.leaderboard_summary`'s,
    as in the printed table and the report: "blocks" counts the blocks with a finite score, rows scored with
    ``--allow-unpromptable`` are apart (marked, after every promptable row), rows with copied panels after
    the ranked ones when sorted by a score. Rows of two encoders are refused (never averaged).
    """
    check_one_encoder(results)
    if condition and condition != ALL_CONDITIONS:
        known = set(map(str, results["condition"].unique()))
        if condition not in known:
            raise ResultsError(f"unknown condition {condition!r}; this table has {', '.join(sorted(known))}")
        results = results[results["condition"].astype(str) == condition]
    if view not in VIEWS:
        raise ResultsError(f"unknown view {view!r}; choose one of {', '.join(VIEWS)}")
    sort_col = _HEADER_TO_COLUMN.get(sort_by, sort_by)
    if sort_col != "method" and sort_col not in dict(LEADERBOARD_METRICS):
        raise ResultsError(f"cannot sort by {sort_by!r}; choose one of {', '.join(SORT_CHOICES)}")
    metric_cols = [c for c, _ in LEADERBOARD_METRICS]
    chance_cols = [c for c, _ in CHANCE_COLUMNS.values()]
    results = annotate_results(results) if any(c not in results for c in chance_cols) else results
    if view == VIEWS[0]:
        # the one aggregation of every view (the printed table, the report's Table 10, the evaluate module):
        # blocks with a finite score, NaN-skipping means, chance over the blocks with a retrieval score
        summary = leaderboard_summary(results, sort_by=sort_col if sort_col in metric_cols else "cos_sim")
        table = summary[["method", "condition", "n_blocks", *metric_cols, *chance_cols]].rename(
            columns={"n_blocks": "blocks"})
        table[NOTES_HEADER] = [_summary_notes(r) for r in summary.to_dict("records")]
        unpromptable = summary["unpromptable"].astype(bool).to_numpy()
        copied = (summary["n_copied_panels"] > 0).to_numpy()
    else:
        cols = ["method", "condition", "block_id"] + [c for c in ("city",) if c in results.columns] + metric_cols
        table = results[cols + chance_cols].copy()
        repeats = [caveats.repeats_photos(g, d) for g, d in zip(results["n_generated"] if "n_generated" in results
                                                                 else [np.nan] * len(results), results["n_distinct"])]
        copied = caveats.copied_mask(results).to_numpy()
        unpromptable = caveats.unpromptable_mask(results).to_numpy()
        table[NOTES_HEADER] = ["; ".join(m for m, on in ((caveats.REPEATS_MARK, r), (caveats.COPIED_MARK, c),
                                                          (caveats.UNPROMPTABLE_MARK, u)) if on)
                               for r, c, u in zip(repeats, copied, unpromptable)]
    # each chance column right after its score; the marks right after the row's identity, where they are seen
    order = [c for c in table.columns if c not in set(chance_cols) | {NOTES_HEADER}]
    for score, (chance, _) in CHANCE_COLUMNS.items():
        order.insert(order.index(score) + 1, chance)
    order.insert(order.index(metric_cols[0]), NOTES_HEADER)
    table = table[order]
    if sort_col == "method":
        ascending = best_first
    else:
        ascending = not HIGHER_IS_BETTER.get(sort_col, True)
        if not best_first:
            ascending = not ascending
    # a panel that copies the benchmark's photos never heads the table: ranked by a score, copied rows come
    # after the ranked ones; rows scored although unpromptable come after every promptable row, in any order
    tier = np.where(unpromptable, 2, np.where(copied & (sort_col != "method"), 1, 0))
    table = (table.assign(_tier=tier, _ranked=~(copied | unpromptable))
             .sort_values(["_tier", sort_col, "method", "condition"], ascending=[True, ascending, True, True],
                          na_position="last", kind="mergesort")
             .drop(columns="_tier")
             .reset_index(drop=True))
    # the numbers stay unrounded: display_table formats them exactly as the printed table does. "#" is a rank:
    # a row that is not ranked (copied, unpromptable) has none (<NA>)
    if view != VIEWS[0]:  # one row per block: the rows of a block together, ranked within their block
        table = table.sort_values("block_id", kind="mergesort").reset_index(drop=True)
    ranked = table.pop("_ranked").to_numpy(dtype=bool)
    within = (pd.Series(ranked, index=table.index).groupby(table["block_id"], sort=False) if view != VIEWS[0]
              else pd.Series(ranked, index=table.index))
    ranks = within.cumsum().to_numpy()  # the ranked rows before and at each row (of its block)
    table.insert(0, "#", pd.array(np.where(ranked, ranks, 0), dtype="Int64"))
    table.loc[~ranked, "#"] = pd.NA
    table["method"] = [METHOD_LABELS.get(m, m) if m in METHOD_LABELS else m for m in table["method"]]
    table = table.rename(columns={**dict(LEADERBOARD_METRICS), **dict(CHANCE_COLUMNS.values())})
    return table.head(MAX_ROWS_SHOWN)


#: How a number of the leaderboard reads: one format for every score and chance column, "n/a" when missing.
NUMBER_FORMAT = "{:.3f}"
MISSING = "n/a"


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as the page shows it: every score and chance column as text in one format
    (``0.900``, never ``0.9`` next to ``0.884``), a missing value as ``n/a`` (never a blank cell)."""
    out = table.copy()
    numeric = [h for _, h in LEADERBOARD_METRICS] + [h for _, h in CHANCE_COLUMNS.values()]
    for col in (c for c in numeric if c in out.columns):
        values = pd.to_numeric(out[col], errors="coerce").astype(float)
        out[col] = [NUMBER_FORMAT.format(v) if math.isfinite(v) else MISSING for v in values]
    if NOTES_HEADER in out:
        out[NOTES_HEADER] = out[NOTES_HEADER].fillna("")
    if "#" in out:  # a rank, or nothing for a row that is not ranked (copied, unpromptable)
        out["#"] = ["" if pd.isna(v) else int(v) for v in out["#"]]
    return out


#: The score a card of the leaderboard shows first (bold) when the table is sorted by method.
KEY_DEFAULT = "CosSim ↑"


def leaderboard_cards(shown: pd.DataFrame, sort_by: str | None = None) -> str:
    """The leaderboard on a phone (HTML): one card per row of :func:`display_table`'s table, its rank and method,
    condition, blocks (or "not ranked") and marks on top, then every score and chance level under its name,
    the score the table is sorted by first and bold. Every value is escaped."""
    import html

    key = sort_by if sort_by in shown.columns and sort_by != "method" else KEY_DEFAULT
    numbers = [h for _, h in LEADERBOARD_METRICS] + [h for _, h in CHANCE_COLUMNS.values()]
    # each chance level right after its score (as in the table), the key score first
    order = [h for h in shown.columns if h in numbers]
    if key in order:
        order.remove(key)
        order.insert(0, key)
    ident = [c for c in ("condition", "block_id", "city", "blocks") if c in shown.columns]
    cards = []
    for _, row in shown.iterrows():
        rank = row.get("#", "")
        ranked = rank not in ("", None)
        head = f'<span class="gfb-card-rank">#{html.escape(str(rank))}</span> ' if ranked else ""
        sub = " · ".join([f"{html.escape(str(row[c]))} blocks" if c == "blocks" else html.escape(str(row[c]))
                          for c in ident] + ([] if ranked else ['<span class="gfb-not-ranked">not ranked</span>']))
        notes = str(row.get(NOTES_HEADER, "") or "")
        parts = [f'<div class="gfb-card{"" if ranked else " gfb-unranked"}">',
                 f'<div class="gfb-card-head">{head}<span class="gfb-card-method">{html.escape(str(row["method"]))}'
                 f'</span></div>', f'<div class="gfb-card-sub">{sub}</div>']
        if notes:
            parts.append(f'<div class="gfb-card-notes">{html.escape(notes)}</div>')
        parts.append("<dl>")
        for h in order:
            cls = ' class="gfb-key"' if h == key else ""
            parts.append(f"<dt{cls}>{html.escape(h)}</dt><dd{cls}>{html.escape(str(row[h]))}</dd>")
        parts.append("</dl></div>")
        cards.append("".join(parts))
    return '<div class="gfb-cards-list">' + "".join(cards) + "</div>"


def report_images(results: pd.DataFrame, run_info: dict | list[dict] | None = None,
                  **options: Any) -> tuple[list[tuple[Any, str]], str]:
    """The report's plots (PIL images with captions) and its Markdown, built in a temporary folder
    (``options``: bootstrap settings of :func:`geofidelity_bench.report.build_report`).

    Nothing is left on disk: the PNGs are decoded into memory before the folder is removed.
    A report that cannot be built gives no plots and a one-line reason.
    """
    from PIL import Image

    from ..report import ReportError, build_report

    captions = {
        "leaderboard": "Leaderboard with real-image anchors (mean over blocks, bootstrap 95% intervals)",
        "cos_sim_by_condition": "CosSim by prompt condition",
        "hierarchy": "Similarity to the target block and to each negative type",
        "city_heatmap": "CosSim per city and method",
    }
    with tempfile.TemporaryDirectory(prefix="geofidelity-app-report-") as tmp:
        try:
            build_report(results, tmp, run_info=run_info, allow_mixed_encoders=True,
                         title="GeoFidelity-Bench leaderboard report", **options)
        except (ReportError, ValueError) as err:
            return [], f"The report could not be built: {err}"
        root = Path(tmp)
        images = []
        order = list(captions)
        pngs = sorted(root.rglob("plots/*.png"),
                      key=lambda p: (str(p.parent), order.index(p.stem) if p.stem in order else len(order), p.stem))
        for png in pngs:
            with Image.open(png) as img:
                img.load()
                copy = img.convert("RGB")
            where = png.parent.parent.relative_to(root)
            caption = captions.get(png.stem, png.stem)
            if str(where) not in ("", "."):
                caption += f" ({where})"
            images.append((copy, caption))
        md_files = sorted(root.rglob("report.md"))
        markdown = "\n\n".join(p.read_text(encoding="utf-8") for p in md_files)
    return images, markdown


def finite_or_none(value: Any) -> Any:
    """JSON-safe scalar: NaN/inf -> None, numpy scalars -> Python."""
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
