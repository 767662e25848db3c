"""The report's tables (paper Tables 4-10 and the extra ones), one builder per table.

Each ``table_*`` takes the prepared :class:`~geofidelity_bench.report.context.Context` and
returns a :class:`Table`: its data (written as CSV and JSON) and its Markdown, or the one-line
reason it was skipped.

One subject, kept whole: every paper table with the formatting helpers they all share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import caveats, stats
from ..metrics.catalog import heading
from ..prompts import CONDITIONS, CONTROL_CONDITIONS
from ..results import CLIP_FILE
from .context import (
    CHANCE_COLUMNS,
    CONTROL_LABELS,
    CONTROL_METRICS,
    DELTA_METRICS,
    HIERARCHY_COLUMNS,
    LEADERBOARD_METRICS,
    MAIN_CONDITION,
    METRIC_LABELS,
    PROMPT_COMPARISONS,
    RANK_METRICS,
    Context,
    chance_means,
    copied_count,
    finite_blocks,
    generator_mean,
    is_copied,
    marked_label,
    marks,
    method_label,
    method_means,
    repeats_count,
    unpromptable_text,
)


@dataclass
class Table:
    """One report table, or the reason it was skipped."""

    name: str
    title: str
    data: pd.DataFrame | None = None
    reason: str | None = None
    caption: str = ""
    notes: list[str] = field(default_factory=list)
    markdown: str = ""

    @property
    def ok(self) -> bool:
        return self.data is not None



def _fmt(x: Any, digits: int = 3, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(float(x)):
            return "n/a"
        return f"{float(x):+.{digits}f}" if signed else f"{float(x):.{digits}f}"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return str(x)


def _fmt_ci(est: Any, lo: Any, hi: Any, digits: int = 3, signed: bool = True) -> str:
    if not _finite(est):
        return "n/a"
    s = _fmt(est, digits, signed)
    if _finite(lo) and _finite(hi):
        s += f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"
    return s


def _fmt_p(p: Any) -> str:
    """Every p-value of the report in one format: three decimals (``0.078``, ``1.000``), ``<0.001`` below."""
    if not _finite(p):
        return "n/a"
    return "<0.001" if float(p) < 0.001 else f"{float(p):.3f}"


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)




# Table 4 -------------------------------------------------------------------------------------


def table_hierarchy(ctx: Context) -> Table:
    t = Table("hierarchy", "Table 4: reference hierarchy",
              caption="Mean image-to-panel cosine similarity of query panels to the target block and to each negative "
                      "type, averaged over blocks where that negative exists. Held-out Real: the held-out real "
                      "queries; generators: their panels under L1. Higher is more similar.")
    cols = list(HIERARCHY_COLUMNS)
    held = ctx.units[(ctx.units["condition"] == stats.ANCHOR_CONDITION) & (ctx.units["method"] == "heldout_real")]
    gen = ctx.generated[ctx.generated["condition"] == MAIN_CONDITION]
    if held.empty and gen.empty:
        t.reason = f"no heldout_real anchor rows and no {MAIN_CONDITION} rows"
        return t
    rows = []
    if not held.empty:
        m = method_means(held, cols).iloc[0]
        rows.append({"query_set": marked_label("Held-out Real", held), "method": "heldout_real",
                     "condition": stats.ANCHOR_CONDITION, "n_blocks": int(m["n_blocks"]),
                     "n_blocks_repeating": repeats_count(held), **{c: m[c] for c in cols}})
    else:
        t.notes.append("no heldout_real anchor rows: the held-out row is omitted")
    if not gen.empty:
        for _, m in method_means(gen, cols).iterrows():
            part = gen[gen["method"] == m["method"]]
            rows.append({"query_set": marked_label(method_label(m["method"]), part), "method": m["method"],
                         "condition": MAIN_CONDITION, "n_blocks": int(m["n_blocks"]),
                         "n_copied_panels": copied_count(part)[0], **{c: m[c] for c in cols}})
        clean = _without_copied(gen)
        methods = clean["method"].nunique()
        if methods > 1:
            gm = generator_mean(clean, cols)
            rows.append({"query_set": f"{methods}-generator mean", "method": "generator_mean",
                         "condition": MAIN_CONDITION, "n_blocks": finite_blocks(clean, cols),
                         **{c: gm[c] for c in cols}})
        _note_copied_left_out(t, gen)
    else:
        t.notes.append(f"no {MAIN_CONDITION} rows: generator rows are omitted")
    t.data = pd.DataFrame(rows)
    query_sets = ([("heldout_real", held)] if not held.empty else [])
    query_sets += [(m, gen[gen["method"] == m]) for m in (t.data["method"] if not gen.empty else [])
                   if m not in ("heldout_real", "generator_mean")]
    if not gen.empty and (clean := _without_copied(gen))["method"].nunique() > 1:
        query_sets.append(("generator_mean", clean))
    labels = dict(zip(t.data["method"], t.data["query_set"]))
    t.data.attrs["plot"] = [dict(_common_block_means(ctx, frame, cols), method=m, label=labels[m])
                            for m, frame in query_sets]
    headers = ["Query set", *(METRIC_LABELS[c] for c in cols), "Blocks"]
    body = [[r["query_set"], *(_fmt(r[c]) for c in cols), _fmt(r["n_blocks"])] for r in rows]
    t.markdown = _md_table(headers, body)
    shown = pd.concat([held, gen])
    gaps = _column_gaps(shown, cols)
    _note_unequal_blocks(t, [held, gen], columns=cols, per_column=bool(gaps))
    t.notes += gaps
    _note_thin_anchor(t, held)
    _note_same_neighborhood(t, ctx, shown, ["sim_same_neighborhood"])
    _note_unpromptable_left_out(t, ctx, [MAIN_CONDITION])
    return t


#: The negatives a column needs (a block without any of them has no value): the same-city alternatives of
#: the local margin are its same-neighborhood and same-city negatives.
_NEEDS_NEGATIVES = {"local_margin": ("same_neighborhood", "same_city")}


def _column_gaps(frame: pd.DataFrame, cols: Sequence[str]) -> list[str]:
    """One note per set of blocks that some shown columns lack: those columns average fewer blocks than the
    rows cover. A block lacks a column where it has no value on any row of ``frame``; the reason is the
    missing negative where there is one (caveats.missing_negative_blocks). Columns without any value (n/a
    throughout, e.g. GAAS without a segmenter) are not counted."""
    cols = [c for c in cols if c in frame.columns]
    if frame.empty or not cols:
        return []
    values = frame[cols].to_numpy(dtype=float)
    covered = frame[np.isfinite(values).any(axis=1)]
    n_all = int(covered["block_id"].nunique())
    has = covered.assign(**{c: np.isfinite(covered[c].to_numpy(dtype=float)) for c in cols}).groupby("block_id")[
        cols].any()
    gaps: dict[tuple[str, ...], list[str]] = {}
    for c in cols:
        if not has[c].any():
            continue
        blocks = tuple(sorted(map(str, has.index[~has[c].to_numpy()])))
        if blocks:
            gaps.setdefault(blocks, []).append(c)
    notes = []
    for blocks, columns in gaps.items():
        roles: list[str] = []
        for c in columns:
            needs = ((c.removeprefix("sim_"),) if c.startswith("sim_") and c != "sim_target"
                     else _NEEDS_NEGATIVES.get(c, ()))
            if needs and all(set(blocks) <= set(caveats.missing_negative_blocks(covered, r)) for r in needs):
                roles += [r for r in needs if r not in roles]
            else:
                roles = []
                break
        why = (f"no {' or '.join(r.replace('_', '-') for r in roles)} negative" if roles else "no value there")
        notes.append(f"{' and '.join(METRIC_LABELS[c] for c in columns)}: every row averages at most "
                     f"{n_all - len(blocks)} of the {n_all} block(s): {_block_list(blocks)} "
                     f"{'has' if len(blocks) == 1 else 'have'} {why}")
    return notes


def _note_same_neighborhood(t: Table, ctx: Context, frame: pd.DataFrame, columns: Sequence[str]) -> None:
    """Says when the same-neighborhood numbers of ``frame`` mix real same-neighborhood negatives and fallbacks."""
    note = ctx.same_neighborhood_note(frame, columns)
    if note:
        t.notes.append(note)


def _common_block_means(ctx: Context, frame: pd.DataFrame, cols: Sequence[str]) -> dict[str, Any]:
    """The means of ``cols`` over ONE set of blocks (hierarchy.png): the blocks where every column
    that has a value somewhere has one. A column without any value is n/a; the blocks left out are
    named with the columns they lack. Per block, the mean over the frame's rows (several methods)."""
    per_block = frame.groupby("block_id")[list(cols)].mean()
    values = per_block.to_numpy(dtype=float)
    shown = [c for j, c in enumerate(cols) if np.isfinite(values[:, j]).any()]
    finite = np.isfinite(per_block[shown].to_numpy(dtype=float)) if shown else np.zeros((len(per_block), 0), bool)
    keep = finite.all(axis=1) if shown else np.zeros(len(per_block), bool)
    out: dict[str, Any] = {
        "blocks": sorted(map(str, per_block.index[keep])),
        "n_blocks_with_rows": int(len(per_block)),
        "left_out": {str(b): [c for c, ok in zip(shown, row) if not ok]
                     for b, row, k in zip(per_block.index, finite, keep) if not k},
    }
    for c in cols:
        v = per_block.loc[keep, c].to_numpy(dtype=float) if c in shown else np.array([])
        ci = stats.bootstrap_mean_ci(v, n_resamples=ctx.n_resamples, seed=ctx.seed, confidence=ctx.confidence)
        out[c], out[f"{c}_ci_low"], out[f"{c}_ci_high"] = ci.mean, ci.ci_low, ci.ci_high
    return out


# Table 5 -------------------------------------------------------------------------------------


def table_cos_sim_by_condition(ctx: Context) -> Table:
    t = Table("cos_sim_by_condition", "Table 5: CosSim by prompt condition",
              caption=f"Mean CosSim over blocks per generator and condition, with a {ctx.n_resamples:,}-resample "
                      f"percentile bootstrap {ctx.pct()} interval over blocks (seed {ctx.seed}); "
                      "(n): the blocks each cell averages. Higher is better.")
    if ctx.generated.empty:
        t.reason = "no generated rows (only anchors or sanity methods)"
        return t
    if "cos_sim" in ctx.metric_na:
        t.reason = f"cos_sim is n/a ({ctx.metric_na['cos_sim']})"
        return t
    gen = ctx.generated
    rows = []
    frames = [(m, gen[gen["method"] == m]) for m in sorted(gen["method"].unique())]
    clean = _without_copied(gen)
    if clean["method"].nunique() > 1:
        per_block = clean.groupby(["condition", "block_id"], as_index=False)["cos_sim"].mean()
        frames.append(("generator_mean", per_block))
    for method, frame in frames:
        row: dict[str, Any] = {"method": method,
                               "n_blocks": finite_blocks(frame if method != "generator_mean" else clean, ["cos_sim"]),
                               "copied": method != "generator_mean" and is_copied(frame)}
        for cond in ctx.conditions:
            values = frame.loc[frame["condition"] == cond, "cos_sim"].to_numpy(dtype=float)
            ci = stats.bootstrap_mean_ci(values, n_resamples=ctx.n_resamples, seed=ctx.seed,
                                         confidence=ctx.confidence)
            row.update({cond: ci.mean, f"{cond}_ci_low": ci.ci_low, f"{cond}_ci_high": ci.ci_high,
                        f"{cond}_n_blocks": ci.n})
        rows.append(row)
    data = pd.DataFrame(rows)
    t.data = data
    anchors = ctx.units[ctx.units["condition"] == stats.ANCHOR_CONDITION]
    # the real-image anchors: reference lines of cos_sim_by_condition.png (their mean over their blocks)
    t.data.attrs["anchors"] = [
        {"method": m, "label": method_label(m), "cos_sim": float(np.nanmean(v)) if np.isfinite(v).any() else np.nan,
         "n_blocks": int(np.isfinite(v).sum())}
        for m in [a for a in stats.ANCHOR_METHODS if a in set(anchors["method"])]
        for v in [anchors.loc[anchors["method"] == m, "cos_sim"].to_numpy(dtype=float)]]
    headers = ["Model", *ctx.conditions]
    body = [[marked_label(method_label(r["method"]), gen[gen["method"] == r["method"]])
             if r["method"] != "generator_mean" else "Generator mean",
             *(_fmt_ci(r[c], r[f"{c}_ci_low"], r[f"{c}_ci_high"], signed=False) + f" ({int(r[f'{c}_n_blocks'])})"
               if _finite(r[c]) else "n/a" for c in ctx.conditions)] for _, r in data.iterrows()]
    t.markdown = _md_table(headers, body)
    block_sets = {c: frozenset(gen.loc[gen["condition"] == c, "block_id"]) for c in ctx.conditions}
    if len(set(block_sets.values())) > 1:
        common = frozenset.intersection(*block_sets.values())
        t.notes.append("not comparable across conditions: the conditions cover different blocks ("
                       + ", ".join(f"{c} {len(b)}" for c, b in block_sets.items())
                       + f"; {len(common)} in common), so a difference between columns mixes the prompt's effect "
                       "with a change of blocks; Table 6 pairs matched blocks")
    for cond in ctx.conditions:
        _note_unequal_blocks(t, [gen[gen["condition"] == cond]], columns=["cos_sim"], where=f"under {cond}")
    _note_copied_left_out(t, gen)
    _note_interval(t, ctx, gen, ["cos_sim"])
    _note_unpromptable_left_out(t, ctx)
    fallback_blocks, n_country_blocks = _same_country_fallback(ctx, anchors)
    if fallback_blocks:  # cos_sim_by_condition.png draws the random-same-country anchor
        t.notes.append(caveats.same_country_fallback_note(fallback_blocks, n_country_blocks))
        for a in t.data.attrs["anchors"]:
            if a["method"] == "random_same_country":
                a["caveat"] = f"no other block of its country on {len(fallback_blocks)} of {n_country_blocks}"
    return t


def _note_left_out(t: Table, ctx: Context, shown: set) -> None:
    """Names the evaluated generators a main-condition table leaves out (they have no L1 rows; one with only
    unpromptable L1 rows is named by the unpromptable note instead)."""
    refused = ctx.unpromptable_units
    shown = set(shown) | set(refused.loc[refused["condition"] == MAIN_CONDITION, "method"])
    for method in sorted(set(ctx.generated["method"]) - shown):
        conds = sorted(set(ctx.generated.loc[ctx.generated["method"] == method, "condition"]),
                       key=list(CONDITIONS).index)
        t.notes.append(f"left out: {method_label(method)} has no {MAIN_CONDITION} rows (evaluated under "
                       f"{', '.join(conds)}); generate and evaluate {MAIN_CONDITION} to rank it")


def _note_unequal_blocks(t: Table, frames: Sequence[pd.DataFrame], what: str = "rows",
                         columns: Sequence[str] | None = None, where: str = "", per_column: bool = False) -> None:
    """States the blocks the rows of ``t`` average over, and flags rows over different block sets.

    ``frames``: the unit rows (``method``, ``block_id``) behind the table's rows; ``columns``: the
    metrics the table shows (a unit counts as a block only where one of them is finite; default:
    every metric); ``where``: which part of the table the note is about (``"under L0"``);
    ``per_column``: some columns average fewer blocks than the rows cover (another note says which).
    """
    cols = list(columns) if columns is not None else list(stats.METRIC_COLUMNS)
    kept = []
    for f in frames:
        if f.empty:
            continue
        present = [c for c in cols if c in f.columns]
        kept.append(f[np.isfinite(f[present].to_numpy(dtype=float)).any(axis=1)] if present else f)
    frames = [f for f in kept if not f.empty]
    if not frames:
        return
    units = pd.concat([f[["method", "block_id"]] for f in frames], ignore_index=True)
    sets = units.groupby("method")["block_id"].agg(frozenset)
    if sets.empty:
        return
    prefix = f"{where}: " if where else ""
    if sets.nunique() == 1:
        if not where:
            t.notes.append(f"every {what[:-1]} covers the same {len(sets.iloc[0])} block(s); a column averages "
                           "the blocks where it has a value (below)" if per_column else
                           f"every {what[:-1]} averages the same {len(sets.iloc[0])} block(s)")
        return
    common = frozenset.intersection(*sets.to_list())
    sizes = ", ".join(f"{method_label(m)} {len(b)}" for m, b in sets.items())
    t.notes.append(f"{prefix}**not comparable across {what}**: the {what} average different blocks ({sizes}; "
                   f"{len(common)} in common); a difference between {what} mixes the methods with a change of blocks. "
                   "Evaluate every method on the same blocks to compare them")


def _without_copied(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the methods that have a copied panel in it (they are never a model's result)."""
    if frame.empty:
        return frame
    copied = {m for m, part in frame.groupby("method") if is_copied(part)}
    return frame[~frame["method"].isin(copied)]


def _note_copied_left_out(t: Table, frame: pd.DataFrame) -> None:
    copied = sorted(m for m, part in frame.groupby("method") if is_copied(part)) if not frame.empty else []
    if copied:
        t.notes.append(f"{caveats.COPIED_MARK}: {', '.join(method_label(m) for m in copied)} copied reference photos "
                       "(section 'Copied reference photos'): never bold, never ranked, and left out of the generator "
                       "mean")


def _note_thin_anchor(t: Table, held: pd.DataFrame) -> None:
    """What a held-out anchor that repeats photos means (caveats.thin_anchor_note)."""
    if held.empty:
        return
    note = caveats.thin_anchor_note(repeats_count(held), int(held["block_id"].nunique()))
    if note:
        t.notes.append(f"{caveats.REPEATS_MARK}: {note}")


def _note_interval(t: Table, ctx: Context, frame: pd.DataFrame, columns: Sequence[str] | None = None) -> None:
    note = ctx.interval_caveat(frame, columns)
    if note:
        t.notes.append(f"**{note}**")


# Table 6 -------------------------------------------------------------------------------------


def _missing_conditions(ctx: Context, conds: Iterable[str]) -> list[str]:
    return [c for c in conds if not ctx.has_condition(c)]


def table_prompt_deltas(ctx: Context) -> Table:
    t = Table("prompt_deltas", "Table 6: prompt-condition deltas",
              caption=f"Paired differences a - b over matched (method, block) units: mean with a "
                      f"{ctx.n_resamples:,}-resample percentile bootstrap {ctx.pct()} interval (seed "
                      f"{ctx.seed}), positive differences, Wilcoxon signed-rank p; city-balanced: mean within each "
                      "city first, then a bootstrap over cities. Deltas are raw: for MMD, DCSF and GAAS (lower is "
                      "better) a negative delta is an improvement.")
    rows = []
    available = []
    for a, b in PROMPT_COMPARISONS:
        missing = _missing_conditions(ctx, (a, b))
        if missing:
            t.notes.append(f"{a} - {b}: skipped, no {' and no '.join(missing)} rows")
            continue
        available.append((a, b))
        for metric in DELTA_METRICS:
            if metric in ctx.metric_na:
                continue
            row: dict[str, Any] = {"comparison": f"{a} - {b}", "cond_a": a, "cond_b": b, "metric": metric,
                                   "higher_is_better": stats.HIGHER_IS_BETTER[metric]}
            try:
                r = stats.paired_deltas(ctx.gen_raw, metric, a, b, by=ctx.pair_keys, n_resamples=ctx.n_resamples,
                                        seed=ctx.seed, confidence=ctx.confidence)
            except ValueError as err:
                row.update(note=str(err))
                rows.append(row)
                continue
            row.update(n_pairs=r.n_pairs, delta=r.mean, ci_low=r.ci_low, ci_high=r.ci_high,
                       n_positive=r.result.n_positive, positive_share=r.positive_share, wilcoxon_p=r.wilcoxon_p,
                       wilcoxon_reason=r.result.wilcoxon_reason, n_only_a=r.n_only_a, n_only_b=r.n_only_b,
                       n_nan_dropped=r.n_nan_dropped)
            try:
                cb = stats.city_balanced(ctx.gen_raw, metric, a, b, n_resamples=ctx.n_resamples, seed=ctx.seed,
                                         confidence=ctx.confidence, by=ctx.pair_keys)
                row.update(city_delta=cb.mean, city_ci_low=cb.ci_low, city_ci_high=cb.ci_high,
                           n_cities=cb.n_cities, n_cities_positive=cb.n_cities_positive)
            except ValueError as err:
                row.update(city_note=str(err))
            rows.append(row)
    if not available:
        needed = sorted({c for pair in PROMPT_COMPARISONS for c in pair} - set(ctx.conditions),
                        key=list(CONDITIONS).index)
        t.reason = "no " + (" rows, no ".join(needed)) + " rows"
        t.notes = []
        return t
    if not rows:
        t.reason = "every metric is n/a"
        return t
    data = pd.DataFrame(rows)
    t.data = data
    for m, why in ctx.metric_na.items():
        if m in DELTA_METRICS:
            t.notes.append(f"{m}: n/a ({why})")
    headers = ["Comparison", "Metric", f"Matched delta ({ctx.pct()} CI)", "Positives", "Wilcoxon p",
               f"City-balanced delta ({ctx.pct()} CI)", "Cities with positive delta"]
    body = []
    # a row without a delta is not printed: one note per comparison and reason names its metrics
    no_delta: dict[tuple[str, str], list[str]] = {}
    for _, r in data.iterrows():
        label = heading(r["metric"])
        if not _finite(r.get("delta")):
            reason = str(r.get("note"))
            reason = reason[len(f"{r['metric']}: "):] if reason.startswith(f"{r['metric']}: ") else reason
            no_delta.setdefault((r["comparison"], reason), []).append(METRIC_LABELS[r["metric"]])
            continue
        cities = (f"{int(r['n_cities_positive'])} / {int(r['n_cities'])}" if _finite(r.get("n_cities")) else "n/a")
        body.append([
            r["comparison"], label,
            _fmt_ci(r["delta"], r["ci_low"], r["ci_high"]),
            f"{int(r['n_positive'])} / {int(r['n_pairs'])}",
            _fmt_p(r["wilcoxon_p"]),
            _fmt_ci(r.get("city_delta"), r.get("city_ci_low"), r.get("city_ci_high")),
            cities,
        ])
    skipped = [f"{comparison}: no delta for {', '.join(labels)}: {reason}"
               for (comparison, reason), labels in no_delta.items()]
    if not body:
        t.data, t.notes = None, []
        t.reason = "no comparison has enough matched pairs (" + "; ".join(skipped) + ")"
        return t
    t.notes += skipped
    if "city_note" in data.columns and data["city_note"].notna().any():
        t.notes.append("city-balanced: " + str(data["city_note"].dropna().iloc[0]))
    t.markdown = _md_table(headers, body)
    _note_interval(t, ctx, ctx.gen_raw[ctx.gen_raw["condition"].isin({c for pair in available for c in pair})])
    _note_unpromptable_left_out(t, ctx, {c for pair in available for c in pair})
    return t


def table_leave_one_city_out(ctx: Context) -> Table:
    a, b = PROMPT_COMPARISONS[0]
    t = Table("leave_one_city_out", f"Leave-one-city-out: {a} - {b} CosSim",
              caption=f"The matched {a} - {b} CosSim delta recomputed without each city (Appendix D).")
    missing = _missing_conditions(ctx, (a, b))
    if missing:
        t.reason = "no " + " and no ".join(missing) + " rows"
        return t
    if "cos_sim" in ctx.metric_na:
        t.reason = f"cos_sim is n/a ({ctx.metric_na['cos_sim']})"
        return t
    try:
        data = stats.leave_one_city_out(ctx.gen_raw, "cos_sim", a, b, by=ctx.pair_keys)
    except ValueError as err:
        t.reason = str(err)
        return t
    t.data = data
    delta_all = _fmt(data.attrs["delta_all"], signed=True)
    t.notes.append(f"all cities: delta {delta_all} over {data.attrs['n_pairs_all']} pairs")
    body = [[r["city_removed"], _fmt(r["n_pairs"]), _fmt(r["delta"], signed=True), _fmt(r["change"], signed=True)]
            for _, r in data.iterrows()]
    t.markdown = _md_table(["City removed", "Pairs", "Delta", "Change"], body)
    _note_unpromptable_left_out(t, ctx, [a, b])
    return t


# Table 7 -------------------------------------------------------------------------------------


def table_controls(ctx: Context) -> Table:
    t = Table("controls", "Table 7: prompt-specificity controls",
              caption=f"Paired {MAIN_CONDITION}-versus-control benefits over matched (method, block) units; for MMD, "
                      "DCSF and GAAS (lower is better) the sign is flipped (control - L1), so a positive benefit "
                      f"always means the correct names help. {ctx.n_resamples:,}-resample percentile bootstrap "
                      f"{ctx.pct()} intervals, seed {ctx.seed}.")
    controls = [c for c in CONTROL_CONDITIONS if ctx.has_condition(c)]
    if not ctx.has_condition(MAIN_CONDITION) and not controls:
        t.reason = f"no {MAIN_CONDITION} rows and no control rows"
        return t
    if not ctx.has_condition(MAIN_CONDITION):
        t.reason = f"no {MAIN_CONDITION} rows"
        return t
    if not controls:
        t.reason = "no control rows (" + ", ".join(CONTROL_CONDITIONS) + ")"
        return t
    frames = []
    for metric in CONTROL_METRICS:
        if metric in ctx.metric_na:
            continue
        for control in controls:
            try:
                frames.append(stats.control_benefits(
                    ctx.gen_raw, metric, reference=MAIN_CONDITION, controls=[control], by=ctx.pair_keys,
                    n_resamples=ctx.n_resamples, seed=ctx.seed, confidence=ctx.confidence))
            except ValueError as err:
                t.notes.append(f"{control} {metric}: {err}")
    if not frames:
        t.reason = "no control has enough paired units"
        return t
    data = pd.concat(frames, ignore_index=True)
    order = {c: i for i, c in enumerate(CONTROL_CONDITIONS)}
    data = data.sort_values(["control", "metric"], key=lambda s: s.map(order) if s.name == "control"
                            else s.map({m: i for i, m in enumerate(CONTROL_METRICS)}), kind="mergesort")
    data = data.reset_index(drop=True)
    t.data = data
    for m, why in ctx.metric_na.items():
        if m in CONTROL_METRICS:
            t.notes.append(f"{m}: n/a ({why})")
    headers = ["Control prompt", "Metric", "Control", MAIN_CONDITION, f"Benefit ({ctx.pct()} CI)", "Positive",
               "Wilcoxon p", "Pairs"]
    body = [[CONTROL_LABELS.get(r["control"], r["control"]),
             heading(r["metric"]),
             _fmt(r["mean_control"]), _fmt(r["mean_reference"]),
             _fmt_ci(r["benefit"], r["ci_low"], r["ci_high"]),
             f"{r['positive_share']:.1%}", _fmt_p(r["wilcoxon_p"]), _fmt(int(r["n_pairs"]))]
            for _, r in data.iterrows()]
    t.markdown = _md_table(headers, body)
    _note_interval(t, ctx, ctx.gen_raw[ctx.gen_raw["condition"].isin([MAIN_CONDITION, *controls])])
    _note_unpromptable_left_out(t, ctx, [MAIN_CONDITION, *controls])
    return t


# Tables 8-9 ----------------------------------------------------------------------------------


def tables_clip(ctx: Context, clip_scores: pd.DataFrame | None) -> list[Table]:
    from ..clip_alignment import ALTERATION_LABELS, OUTCOME_LABELS, alignment_analysis

    t8 = Table("clip_associations", "Table 8: CLIP text alignment versus geographic fidelity",
               caption=f"Spearman rho between per-panel CLIP image-text cosine ({MAIN_CONDITION} panels) and each "
                       "geographic outcome, and the AUROC of the CLIP score for all images retrieving the target; "
                       f"{ctx.n_resamples:,}-resample block-bootstrap {ctx.pct()} intervals (all methods of a block "
                       "together).")
    t9 = Table("clip_name_sensitivity", "Table 9: CLIP sensitivity to local names",
               caption="Original-minus-altered CLIP cosine with the images held fixed and the street, the "
                       f"neighborhood or both replaced by the control donors' names; block-bootstrap {ctx.pct()} "
                       "intervals.")
    tq = Table("clip_no_retrieval", "CLIP top quartile versus retrieval failure",
               caption="Share of panels with no image retrieving the target, among the top CLIP quartile and among "
                       "all panels.")
    tables = [t8, t9, tq]
    if clip_scores is None or len(clip_scores) == 0:
        for t in tables:
            t.reason = f"no {CLIP_FILE} in the results folder(s) (write one with `geofidelity-bench clip-alignment`)"
        return tables
    try:
        out = alignment_analysis(clip_scores, ctx.raw, condition=MAIN_CONDITION, n_resamples=ctx.n_resamples,
                                 seed=ctx.seed, confidence=ctx.confidence)
    except ValueError as err:
        for t in tables:
            t.reason = str(err)
        return tables
    assoc, sens, none = out["associations"], out["name_sensitivity"], out["no_retrieval"]
    t8.data = assoc
    texts = [x for x in ("prompt", "location") if x in set(assoc["text"])]
    text_labels = {"prompt": "Exact prompt", "location": "Location-only text"}
    body = []
    for outcome in dict.fromkeys(assoc["outcome"]):
        cells = []
        for text in texts:
            r = assoc[(assoc["outcome"] == outcome) & (assoc["text"] == text)].iloc[0]
            cells.append(_fmt_ci(r["estimate"], r["ci_low"], r["ci_high"], signed=False))
            if isinstance(r.get("reason"), str) and r.get("reason"):
                t8.notes.append(f"{outcome} / {text}: {r['reason']}")
        body.append([OUTCOME_LABELS.get(outcome, outcome), *cells])
    t8.markdown = _md_table(["Geographic outcome", *(text_labels[x] for x in texts)], body)
    t8.notes.append(f"{int(assoc['n_panels'].max())} panels")
    if sens.empty:
        t9.reason = "no panel has altered texts (blocks without names or without donors)"
    else:
        t9.data = sens
        t9.markdown = _md_table(
            ["Text", "Altered", f"Mean difference ({ctx.pct()} CI)", "Panels with positive difference", "Panels"],
            [[text_labels.get(r["text"], r["text"]), ALTERATION_LABELS.get(r["alteration"], r["alteration"]),
              _fmt_ci(r["mean_difference"], r["ci_low"], r["ci_high"], digits=4),
              f"{r['positive_share']:.1%}" if _finite(r["positive_share"]) else "n/a", _fmt(int(r["n_panels"]))]
             for _, r in sens.iterrows()])
    if none.empty:
        tq.reason = "no panel has both a CLIP score and a retrieval accuracy"
    else:
        tq.data = none
        tq.markdown = _md_table(
            ["Text", "No retrieving image: top CLIP quartile", "No retrieving image: all panels"],
            [[text_labels.get(r["text"], r["text"]), f"{r['share_no_retrieval_top']:.1%} of {int(r['n_top'])}",
              f"{r['share_no_retrieval_all']:.1%} of {int(r['n_all'])}"] for _, r in none.iterrows()])
    return tables


# Table 10 ------------------------------------------------------------------------------------


def _ranked_generators(gen: pd.DataFrame) -> tuple[list[str], dict[str, int], int]:
    """Which generators of ``gen`` (promptable units of one condition) a table may rank against each other.

    Returns (ranked, blocks, n_most): ``blocks`` per method (those with a finite leaderboard score,
    :func:`~geofidelity_bench.report.context.finite_blocks`), ``n_most`` the most blocks of a generator
    that copied no reference photo, and ``ranked`` those clean generators over ``n_most`` blocks. A
    generator over fewer blocks is not comparable with them: never ranked or bolded above them."""
    blocks = {str(m): finite_blocks(part, LEADERBOARD_METRICS) for m, part in gen.groupby("method")}
    clean = set(map(str, _without_copied(gen)["method"]))
    n_most = max((blocks[m] for m in clean), default=0)
    ranked = sorted(m for m in clean if n_most > 0 and blocks[m] == n_most)
    return ranked, blocks, n_most


def _block_list(blocks: Iterable[str], limit: int = 5) -> str:
    blocks = sorted(map(str, blocks))
    return ", ".join(blocks[:limit]) + (f" and {len(blocks) - limit} more" if len(blocks) > limit else "")


def _note_unpromptable_left_out(t: Table, ctx: Context, conditions: Iterable[str] | None = None) -> None:
    """Names the panels scored with --allow-unpromptable that the table ``t`` leaves out (its conditions)."""
    units = ctx.unpromptable_units
    if conditions is not None:
        units = units[units["condition"].isin(list(conditions))]
    if not units.empty:
        t.notes.append(f"{caveats.UNPROMPTABLE_MARK}: left out: {unpromptable_text(units)} (scored with "
                       "--allow-unpromptable although the benchmark has no such prompt for those blocks): never "
                       "ranked or compared with promptable rows; Table 10 lists them apart")


def _same_country_fallback(ctx: Context, anchors: pd.DataFrame) -> tuple[list[str], int]:
    """(blocks, n_blocks): the blocks of the random-same-country anchor rows of ``anchors`` whose "same-country"
    anchor draws from all other blocks (caveats.same_country_fallback_blocks, read from every row), and the
    blocks of those rows."""
    rows = anchors[anchors["method"] == "random_same_country"] if not anchors.empty else anchors
    if rows.empty:
        return [], 0
    shown = set(map(str, rows["block_id"]))
    return [b for b in caveats.same_country_fallback_blocks(ctx.raw) if b in shown], len(shown)


def _same_country_note(ctx: Context, anchors: pd.DataFrame) -> str | None:
    """caveats.same_country_fallback_note for the random-same-country anchor rows of ``anchors`` (None if none)."""
    return caveats.same_country_fallback_note(*_same_country_fallback(ctx, anchors))


def _city_balanced_scores(units: pd.DataFrame, metric: str) -> pd.Series:
    """Per method: the mean of its city means of ``metric`` (each city weighs the same; rank stability's score)."""
    ok = units[np.isfinite(units[metric].to_numpy(dtype=float)) & units["city"].notna()]
    return ok.groupby(["method", "city"])[metric].mean().groupby("method").mean()


def _best(scores: pd.Series, metric: str) -> list[str]:
    """The methods with the best of ``scores`` (direction-aware; several on a tie)."""
    scores = scores[np.isfinite(scores.to_numpy(dtype=float))]
    if scores.empty:
        return []
    best = scores.max() if stats.HIGHER_IS_BETTER[metric] else scores.min()
    return sorted(map(str, scores.index[scores.to_numpy(dtype=float) == best]))


def _rank_disagreement_note(units: pd.DataFrame, metric: str, rank1: Sequence[str] | None = None,
                            city_names: Mapping[str, str] | None = None) -> str | None:
    """Why rank stability's rank 1 (city-balanced) and Table 10's bold (mean over blocks) differ on ``metric``
    for the ranked generators ``units`` (None when they agree). ``rank1``: rank stability's rank-1 methods
    (default: the best city-balanced score)."""
    ok = units[np.isfinite(units[metric].to_numpy(dtype=float))]
    if ok["method"].nunique() < 2:
        return None
    block_means = ok.groupby("method")[metric].mean()
    city_scores = _city_balanced_scores(ok, metric)
    bold = _best(block_means, metric)
    first = sorted(map(str, rank1)) if rank1 is not None else _best(city_scores, metric)
    if not bold or not first or set(bold) == set(first):
        return None
    shown = list(dict.fromkeys([*first, *bold]))

    def each(scores: pd.Series) -> str:
        return ", ".join(f"{method_label(m)} {_fmt(float(scores.get(m, np.nan)))}" for m in shown)

    per_city = ok.drop_duplicates("block_id").groupby("city")["block_id"].nunique()
    cities = ", ".join(f"{(city_names or {}).get(str(c), c)} {int(n)}" for c, n in per_city.items())
    even = per_city.nunique() == 1
    return (f"{METRIC_LABELS[metric]}: rank stability's rank 1 is {' and '.join(map(method_label, first))} "
            f"(city-balanced score: {each(city_scores)}) while Table 10 bolds {' and '.join(map(method_label, bold))} "
            f"(mean over blocks: {each(block_means)}). Both are right: the city-balanced score is the mean of a "
            f"generator's city means, so each of the {len(per_city)} cities weighs the same; Table 10's mean is over "
            f"blocks, so a city weighs by its blocks (blocks per city: {cities})"
            + ("" if not even else "; the cities have as many blocks each, so the two differ by the blocks a "
               "generator lacks in some city"))


def table_leaderboard(ctx: Context) -> Table:
    t = Table("leaderboard", "Table 10: leaderboard with real-image anchors",
              caption=f"Generators under {MAIN_CONDITION} and the real-image anchors: mean over blocks with a "
                      f"{ctx.n_resamples:,}-resample percentile bootstrap {ctx.pct()} interval over blocks "
                      f"(seed {ctx.seed}); the whiskers of leaderboard.png are these intervals. Blocks: the blocks "
                      "each row averages (a block counts where the row has a finite score). Chance: the retrieval "
                      "accuracy and MRR of images that carry no information about the place, under each block's own "
                      "candidates, averaged over the blocks of the row's retrieval mean. ↑ higher is better, "
                      f"↓ lower is better; bold: best generator among those over the common blocks; rows marked "
                      f"{caveats.FEWER_BLOCKS_MARK} or {caveats.UNPROMPTABLE_MARK} are listed after them.")
    metrics = [m for m in LEADERBOARD_METRICS]
    gen = ctx.generated[ctx.generated["condition"] == MAIN_CONDITION]
    refused = ctx.unpromptable_units[ctx.unpromptable_units["condition"] == MAIN_CONDITION]
    anchors = ctx.units[ctx.units["condition"] == stats.ANCHOR_CONDITION]
    sanity = ctx.units[ctx.units["condition"] == stats.SANITY_CONDITION]
    if gen.empty and anchors.empty and sanity.empty and refused.empty:
        t.reason = f"no {MAIN_CONDITION} rows and no anchor rows"
        return t
    if gen.empty:
        t.notes.append(f"no {MAIN_CONDITION} rows" + (" of promptable panels" if not refused.empty else "")
                       + ": generator rows are omitted")
    if anchors.empty:
        t.notes.append("no anchor rows (heldout_real, random_same_country, random_global)")
    _note_left_out(t, ctx, set(gen["method"]) | set(refused["method"]))

    row_blocks: list[set] = []  # per row: the blocks it averages (a finite leaderboard score)

    def row_for(group: str, method: str, condition: str, frame: pd.DataFrame, values: pd.DataFrame,
                unpromptable: bool = False) -> dict:
        ok = np.isfinite(values[metrics].to_numpy(dtype=float)).any(axis=1)
        row_blocks.append(set(map(str, values.loc[ok, "block_id"])))
        panels, images = copied_count(frame) if group != "generator_mean" else (0, 0)
        row = {"group": group, "method": method, "condition": condition,
               "label": ("Generator mean" if group == "generator_mean"
                         else marked_label(method_label(method), frame)),
               "marks": marks(frame) if group != "generator_mean" else "",
               "n_blocks": finite_blocks(values, metrics), "n_copied_panels": panels, "n_copied_images": images,
               "n_blocks_repeating": repeats_count(frame) if group != "generator_mean" else 0,
               "unpromptable": unpromptable}
        for m in metrics:
            ci = stats.bootstrap_mean_ci(values[m].to_numpy(dtype=float), n_resamples=ctx.n_resamples,
                                         seed=ctx.seed, confidence=ctx.confidence)
            row.update({m: ci.mean, f"{m}_ci_low": ci.ci_low, f"{m}_ci_high": ci.ci_high})
        row.update(chance_means(values))
        return row

    ranked_methods, _, _ = _ranked_generators(gen)
    rows = []
    for method in sorted(gen["method"].unique()):
        f = gen[gen["method"] == method]
        rows.append(row_for("generator", method, MAIN_CONDITION, f, f))
    ranked_units = gen[gen["method"].isin(ranked_methods)]
    if len(ranked_methods) > 1:
        per_block = ranked_units.groupby("block_id")[metrics + list(CHANCE_COLUMNS)].mean().reset_index()
        rows.append(row_for("generator_mean", "generator_mean", MAIN_CONDITION, ranked_units, per_block))
    present_anchor = [m for m in stats.ANCHOR_METHODS if m in set(anchors["method"])]
    present_anchor += sorted(set(anchors["method"]) - set(stats.ANCHOR_METHODS))
    for method in present_anchor:
        f = anchors[anchors["method"] == method]
        rows.append(row_for("anchor", method, stats.ANCHOR_CONDITION, f, f))
    for method in sorted(sanity["method"].unique()):
        f = sanity[sanity["method"] == method]
        rows.append(row_for("sanity", method, stats.SANITY_CONDITION, f, f))
    for method in sorted(refused["method"].unique()):
        f = refused[refused["method"] == method]
        rows.append(row_for("generator", method, MAIN_CONDITION, f, f, unpromptable=True))
    data = pd.DataFrame(rows)
    data["_blocks"] = row_blocks
    # Rows over fewer blocks than the table's most are not comparable with the others: marked, and
    # listed after every row over the common blocks; unpromptable rows come last (never ranked).
    promptable = ~data["unpromptable"].astype(bool)
    counts = data["n_blocks"].to_numpy(dtype=float)
    n_most = int(np.nanmax(counts[promptable.to_numpy()])) if promptable.any() else 0
    data["fewer_blocks"] = promptable & (data["n_blocks"] < n_most)
    data["ranked"] = (data["group"] == "generator") & promptable & data["method"].isin(ranked_methods)
    data["label"] = [f"{label} ({caveats.fewer_blocks_note(int(n), n_most)})" if few else label
                     for label, n, few in zip(data["label"], data["n_blocks"], data["fewer_blocks"])]
    group_order = {"generator": 0, "generator_mean": 1, "anchor": 2, "sanity": 3}
    is_gen = data["group"] == "generator"
    data = data.assign(
        _tier=np.where(~promptable, 2, np.where(data["fewer_blocks"], 1, 0)),
        _group=data["group"].map(group_order).fillna(4),
        _copied=is_gen & (data["n_copied_panels"] > 0),
        # generators best CosSim first (a copy after every clean one); anchors and sanity keep their order
        _score=np.where(is_gen, -data["cos_sim"].astype(float), 0.0),
        _pos=np.arange(len(data)),
    ).sort_values(["_tier", "_group", "_copied", "_score", "_pos"], kind="mergesort", na_position="last")
    blocks_of = data.pop("_blocks").tolist()
    data = data.drop(columns=["_tier", "_group", "_copied", "_score", "_pos"]).reset_index(drop=True)
    fallback_blocks, n_country_blocks = _same_country_fallback(ctx, anchors)
    fallback = caveats.same_country_fallback_note(fallback_blocks, n_country_blocks)
    # what a plot label says beside the row (the random-same-country anchor on a country of one block)
    data["caveat"] = [f"no other block of its country on {len(fallback_blocks)} of {n_country_blocks} blocks"
                      if m == "random_same_country" and g == "anchor" and fallback_blocks else ""
                      for m, g in zip(data["method"], data["group"])]
    t.data = data
    best: dict[str, float] = {}
    # bold only among the ranked generators: clean (a copy of the benchmark's photos is never the best
    # generator), promptable, and over the common blocks
    ranked = data[data["ranked"]]
    if len(ranked) > 1:
        for m in metrics:
            vals = ranked[m].to_numpy(dtype=float)
            if np.isfinite(vals).any():
                best[m] = np.nanmax(vals) if stats.HIGHER_IS_BETTER[m] else np.nanmin(vals)
    for m, why in ctx.metric_na.items():
        if m in metrics:
            t.notes.append(f"{METRIC_LABELS[m]}: n/a ({why})")
    chance_for = {"retrieval_acc": "chance_retrieval_acc", "mrr": "chance_mrr"}
    headers = []
    for m in metrics:
        headers.append(heading(m))
        if m in chance_for:
            headers.append(f"{METRIC_LABELS[m]} by chance")
    headers = ["Model", *headers, "Blocks"]
    body = []
    for _, r in data.iterrows():
        cells = []
        for m in metrics:
            s = _fmt_ci(r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"], signed=False)
            if r["ranked"] and m in best and _finite(r[m]) and float(r[m]) == best[m]:
                s = f"**{s}**"
            cells.append(s)
            if m in chance_for:
                cells.append(_fmt(r[chance_for[m]]))
        body.append([r["label"], *cells, _fmt(r["n_blocks"])])
    t.markdown = _md_table(headers, body)
    _note_chance(t, pd.concat([gen, anchors, sanity]))
    gaps = _column_gaps(pd.concat([gen, anchors, sanity]), metrics)
    _note_unequal_blocks(t, [gen, anchors, sanity], columns=metrics, per_column=bool(gaps))
    t.notes += gaps
    _note_fewer_blocks(t, data, blocks_of, n_most)
    _note_thin_anchor(t, anchors[anchors["method"] == caveats.HELDOUT_METHOD])
    _note_copied_left_out(t, gen)
    _note_interval(t, ctx, pd.concat([gen, anchors, sanity]), metrics)
    _note_same_neighborhood(t, ctx, pd.concat([gen, anchors, sanity]), ["local_margin"])
    if fallback:
        t.notes.append(fallback)
    for metric in RANK_METRICS:
        if metric not in ctx.metric_na and len(ranked_methods) > 1:
            note = _rank_disagreement_note(ranked_units, metric, city_names=ctx.city_names)
            if note:
                t.notes.append(note)
    if not refused.empty:
        t.notes.append(caveats.UNPROMPTABLE_LEGEND)
    return t


def _note_fewer_blocks(t: Table, data: pd.DataFrame, blocks_of: Sequence[set], n_most: int) -> None:
    """Names the rows of Table 10 over fewer blocks than the most (``blocks_of``: each row's blocks), and the
    blocks they lack."""
    few = [i for i, f in enumerate(data["fewer_blocks"]) if f]
    if not few:
        return
    common = set().union(*(b for b, u in zip(blocks_of, data["unpromptable"]) if not u))
    parts = []
    for i in few:
        r = data.iloc[i]
        name = "Generator mean" if r["group"] == "generator_mean" else method_label(r["method"])
        own, lacking = blocks_of[i], common - blocks_of[i]
        which = f"only {_block_list(own)}" if len(own) <= len(lacking) else f"lacks {_block_list(lacking)}"
        parts.append(f"{name} ({int(r['n_blocks'])} of {n_most}; {which})")
    t.notes.append(f"{caveats.FEWER_BLOCKS_MARK}: {'; '.join(parts)}: listed after the rows over the {n_most} "
                   "blocks, never bold and not in the generator mean; not comparable with them")


def _note_chance(t: Table, frame: pd.DataFrame) -> None:
    """How the chance columns are counted, and where a block fills two negative roles."""
    if frame.empty:
        return
    if not np.isfinite(frame["chance_retrieval_acc"].to_numpy(dtype=float)).any():
        t.notes.append("chance levels are not recorded in these results (written before chance was recorded): "
                       "re-run `geofidelity-bench evaluate` to get them")
        return
    blocks = frame.drop_duplicates("block_id")
    k = blocks["n_candidates"].to_numpy(dtype=float)
    acc = blocks["chance_retrieval_acc"].to_numpy(dtype=float)
    with np.errstate(divide="ignore"):
        two_roles = int(np.sum(np.isfinite(k) & (np.round(1 / acc) < k)))
    t.notes.append(caveats.chance_counting_note(int(np.nanmin(k)), int(np.nanmax(k)), two_roles,
                                                int(len(blocks))))


def _fmt_rank(x: Any) -> str:
    return _fmt(int(x)) if float(x).is_integer() else _fmt(float(x), 1)


def table_rank_stability(ctx: Context) -> Table:
    t = Table("rank_stability", f"Rank stability under {MAIN_CONDITION}",
              caption=f"City bootstrap ({ctx.rank_resamples} resamples, seed {ctx.seed}) of generator ranks under "
                      f"{MAIN_CONDITION}, city-balanced as in the paper: each generator is averaged within each city "
                      "first and every drawn city weighs the same (a city drawn twice counts twice); score: the mean "
                      f"of its city means. Probability of rank 1 and {ctx.pct()} percentile interval of the "
                      "bootstrap ranks (1 = best). Blocks and cities: those the generator has.")
    gen = ctx.gen_raw[ctx.gen_raw["condition"] == MAIN_CONDITION]
    if gen.empty:
        t.reason = f"no {MAIN_CONDITION} rows"
        return t
    n_methods, n_cities = gen["method"].nunique(), ctx.n_cities(gen)
    if n_methods < 2:
        t.reason = f"needs at least 2 generators under {MAIN_CONDITION}, got {n_methods}"
        return t
    if n_cities < 2:
        t.reason = f"needs at least 2 cities, got {n_cities}"
        return t
    frames = []
    all_units = ctx.units[ctx.units["condition"] == MAIN_CONDITION]
    _note_left_out(t, ctx, set(all_units["method"]))
    _note_unpromptable_left_out(t, ctx, [MAIN_CONDITION])
    # a generator that copied reference photos is never ranked (caveats.copied_note), nor one over fewer
    # blocks than the others (Table 10 lists it apart): the same generators as Table 10's bold
    ranked_methods, blocks, n_most = _ranked_generators(all_units)
    _note_copied_left_out(t, all_units)
    fewer = sorted(m for m in set(map(str, _without_copied(all_units)["method"])) if m not in ranked_methods)
    if fewer:
        t.notes.append("left out: " + ", ".join(f"{method_label(m)} ({caveats.fewer_blocks_note(blocks[m], n_most)})"
                                                for m in fewer)
                       + f": a generator over fewer blocks than the others' {n_most} is not ranked with them "
                       "(Table 10 lists it after them)")
    units = all_units[all_units["method"].isin(ranked_methods)]
    if units["method"].nunique() < 2:
        t.reason = (f"needs at least 2 generators under {MAIN_CONDITION} that copied no reference photo and cover "
                    f"the same number of blocks, got {units['method'].nunique()}")
        return t
    for metric in RANK_METRICS:
        if metric in ctx.metric_na:
            t.notes.append(f"{metric}: n/a ({ctx.metric_na[metric]})")
            continue
        try:
            r = stats.rank_stability(units, metric, MAIN_CONDITION, n_resamples=ctx.rank_resamples, seed=ctx.seed,
                                     confidence=ctx.confidence, weighting="city")
        except ValueError as err:
            t.notes.append(f"{metric}: {err}")
            continue
        frames.append(r.table.rename(columns={"n_cities": "method_n_cities"})
                      .assign(metric=metric, n_cities=r.n_cities, weighting=r.weighting))
        note = _rank_disagreement_note(units, metric, r.table.loc[r.table["rank"] == 1, "method"].tolist(),
                                       city_names=ctx.city_names)
        if note:
            t.notes.append(note)
    if not frames:
        t.reason = "no rankable metric"
        return t
    data = pd.concat(frames, ignore_index=True)
    t.data = data
    body = [[METRIC_LABELS[r["metric"]], method_label(r["method"]), _fmt(r["score"]), _fmt(int(r["rank"])),
             f"{r['rank1_prob']:.2f}", f"[{_fmt_rank(r['rank_ci_low'])}, {_fmt_rank(r['rank_ci_high'])}]",
             _fmt(int(r["n_blocks"])), _fmt(int(r["method_n_cities"]))]
            for _, r in data.iterrows()]
    t.markdown = _md_table(["Metric", "Model", "Score (city-balanced)", "Rank", "P(rank 1)", "Rank interval",
                            "Blocks", "Cities"], body)
    _note_unequal_blocks(t, [units], columns=RANK_METRICS)
    _note_interval(t, ctx, units, RANK_METRICS)
    return t


def table_city_by_method(ctx: Context) -> Table:
    t = Table("city_by_method", f"CosSim per city ({MAIN_CONDITION} generators and held-out real)",
              caption="Mean CosSim over the blocks of each city; Blocks: the city's blocks with a row.")
    if "cos_sim" in ctx.metric_na:
        t.reason = f"cos_sim is n/a ({ctx.metric_na['cos_sim']})"
        return t
    frame = ctx.units[((ctx.units["condition"] == MAIN_CONDITION) |
                       ((ctx.units["condition"] == stats.ANCHOR_CONDITION) & (ctx.units["method"] == "heldout_real")))]
    frame = frame[frame["city"].notna()]
    if frame.empty:
        t.reason = f"no {MAIN_CONDITION} rows and no heldout_real anchor rows with a city"
        return t
    pivot = frame.pivot_table(index="city", columns="method", values="cos_sim", aggfunc="mean")
    cols = [m for m in pivot.columns if m != "heldout_real"]
    cols += ["heldout_real"] if "heldout_real" in pivot.columns else []
    pivot = pivot[cols]
    t.data = pivot.reset_index()
    n_blocks = frame.groupby("city")["block_id"].nunique().reindex(pivot.index)
    labels = [marked_label(method_label(c), frame[frame["method"] == c]) for c in cols]
    # plot labels: the marks on a second line (the heatmap's labels are rotated)
    t.data.attrs["labels"] = {c: method_label(c) + (f"\n{mk}" if (mk := marks(frame[frame["method"] == c])) else "")
                              for c in cols}
    t.data.attrs["city_names"] = {city: ctx.city_names.get(str(city), str(city)) for city in pivot.index}
    t.data.attrs["n_blocks"] = {city: int(n_blocks[city]) for city in pivot.index}
    scored = frame[np.isfinite(frame["cos_sim"].to_numpy(dtype=float))]
    t.data.attrs["cell_blocks"] = {(city, m): int(n) for (city, m), n
                                   in scored.groupby(["city", "method"])["block_id"].nunique().items()}
    t.markdown = _md_table(["City", *labels, "Blocks"],
                           [[ctx.city_names.get(str(city), str(city)), *(_fmt(v) for v in r.to_numpy()),
                             _fmt(int(n_blocks[city]))]
                            for city, r in pivot.iterrows()])
    _note_unequal_blocks(t, [frame], what="columns", columns=["cos_sim"])
    _note_thin_anchor(t, frame[frame["method"] == caveats.HELDOUT_METHOD])
    _note_copied_left_out(t, frame[frame["condition"] == MAIN_CONDITION])
    _note_unpromptable_left_out(t, ctx, [MAIN_CONDITION])
    return t


def table_summary(ctx: Context) -> Table:
    t = Table("summary_method_condition", "Mean of every metric per method and condition",
              caption="Means over blocks (CSV only; see the tables above for intervals).")
    units = pd.concat([ctx.units, ctx.unpromptable_units], ignore_index=True)
    if units.empty:
        t.reason = "no rows"
        return t
    # unpromptable: panels scored with --allow-unpromptable, a row of their own (never mixed with promptable ones)
    units["unpromptable"] = units["unpromptable"].fillna(0).astype(float) > 0
    g = units.groupby(["method", "condition", "unpromptable"], sort=True)
    data = g[list(stats.METRIC_COLUMNS)].mean()
    data.insert(0, "n_blocks", g["block_id"].nunique())
    t.data = data.reset_index()
    return t


def table_extra_conditions(ctx: Context) -> Table:
    """Rows of conditions beyond the benchmark's prompt conditions (``evaluate --extra-conditions``): never dropped."""
    t = Table("extra_conditions", "Extra conditions",
              caption="Conditions that are not prompt conditions of the benchmark (declared with --extra-conditions): "
                      "mean over blocks per method and condition. They enter no other table.")
    if ctx.extra_units.empty:
        t.reason = "no rows with extra conditions"
        return t
    metrics = list(LEADERBOARD_METRICS)
    rows = []
    for (method, condition), part in ctx.extra_units.groupby(["method", "condition"], sort=True):
        rows.append({"method": method, "condition": condition, "n_blocks": finite_blocks(part, metrics),
                     **part[metrics].mean().to_dict(), **chance_means(part),
                     "label": marked_label(method_label(method), part)})
    t.data = pd.DataFrame(rows)
    chance_for = {"retrieval_acc": "chance_retrieval_acc", "mrr": "chance_mrr"}
    headers = ["Model", "Condition"]
    for m in metrics:
        headers += [heading(m)] + ([f"{METRIC_LABELS[m]} by chance"] if m in chance_for else [])
    body = []
    for _, r in t.data.iterrows():
        cells = [r["label"], str(r["condition"])]
        for m in metrics:
            cells += [_fmt(r[m])] + ([_fmt(r[chance_for[m]])] if m in chance_for else [])
        body.append([*cells, _fmt(r["n_blocks"])])
    t.markdown = _md_table([*headers, "Blocks"], body)
    _note_chance(t, ctx.extra_units)
    return t
