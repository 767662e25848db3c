"""What every table and plot of the report reads: its settings (which comparisons, which metrics),
its labels, its error, and :class:`Context`, the result rows prepared once for all tables."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .. import caveats, stats
from ..comparability import segmenter_of_run
from ..metrics.catalog import RESULT_METRICS, SIMILARITY_COLUMNS
from ..prompts import CONDITIONS
from ..results import ResultsFolderError, nan_reasons_from_run_info

#: Prompt-level comparisons of Table 6, as (a, b) for ``a - b``.
PROMPT_COMPARISONS = (("L1", "L0"), ("L2", "L1"), ("L2", "L0"), ("GPS_ONLY", "L0"))
DELTA_METRICS = ("cos_sim", "retrieval_acc", "mrr", "local_margin", "strongest_margin", "dcsf", "mmd", "gaas")
CONTROL_METRICS = DELTA_METRICS
LEADERBOARD_METRICS = ("cos_sim", "dcsf", "mmd", "gaas", "retrieval_acc", "mrr", "local_margin", "strongest_margin")
HIERARCHY_COLUMNS = SIMILARITY_COLUMNS
RANK_METRICS = ("cos_sim", "retrieval_acc")
MAIN_CONDITION = "L1"
#: Per-row columns beside the metrics that the tables read (NaN when a results.csv predates them).
CHANCE_COLUMNS = ("n_candidates", "chance_retrieval_acc", "chance_mrr")
PANEL_COLUMNS = ("n_generated", "n_distinct", "n_copied")
#: Anchor rows scored twice (two folders) count as the same when every metric agrees to this.
ANCHOR_TOLERANCE = 1e-6

#: The one label of every result metric (:mod:`geofidelity_bench.metrics.catalog`).
METRIC_LABELS = {m.column: m.label for m in RESULT_METRICS}
METHOD_LABELS = {
    "sdxl": "SDXL",
    "sd35_large": "SD 3.5 Large",
    "flux_dev": "FLUX.1-dev",
    "flux_schnell": "FLUX.1-schnell",
    "pixart_sigma": "PixArt-Σ",
    "hunyuan_dit": "HunyuanDiT",
    "heldout_real": "Held-out Real",
    "random_same_country": "Random-Same-Country",
    "random_global": "Random-Global",
    "sanity_augmented_heldout": "Sanity: augmented held-out",
    "sanity_world": "Sanity: world photos",
}
CONTROL_LABELS = {
    "C_WRONG_STREET": "Wrong street",
    "C_SHUFFLED_NEIGHBORHOOD": "Shuffled neighborhood",
    "C_WRONG_STREET_NEIGHBORHOOD": "Wrong street and neighborhood",
}


class ReportError(ResultsFolderError):
    """The inputs cannot make a report (missing columns, mixed encoders, repeated rows).

    A subclass of :class:`~geofidelity_bench.results.ResultsFolderError` (what reading a results
    folder raises), so ``except ResultsFolderError`` catches both.
    """



def confidence_label(confidence: float) -> str:
    """``0.95`` -> ``"95%"``; ``0.975`` -> ``"97.5%"``."""
    return f"{100 * float(confidence):.10g}%"


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


class Context:
    """The prepared inputs shared by the table builders."""

    def __init__(self, df: pd.DataFrame, run_infos: list[dict], *, seed: int, n_resamples: int,
                 rank_resamples: int, confidence: float):
        self.seed, self.n_resamples, self.confidence = seed, n_resamples, confidence
        self.rank_resamples = rank_resamples
        #: city key -> name, from the runs' run.json (``benchmark.city_names``); a key stands for itself otherwise
        self.city_names: dict[str, str] = {}
        for info in run_infos:
            bench = info.get("benchmark") if isinstance(info, dict) else None
            names = bench.get("city_names") if isinstance(bench, dict) else None
            if isinstance(names, dict):
                self.city_names.update({str(k): str(v) for k, v in names.items()})
        #: block id -> kind of its same-neighborhood negative (docs/benchmark.md section 8, Negatives), from the
        #: runs' run.json (``benchmark.same_neighborhood_negatives``); a block of no run is unknown
        self.same_neighborhood_kinds: dict[str, str] = {}
        for info in run_infos:
            bench = info.get("benchmark") if isinstance(info, dict) else None
            kinds = bench.get("same_neighborhood_negatives") if isinstance(bench, dict) else None
            if isinstance(kinds, dict):
                for kind, ids in kinds.items():
                    for block_id in ids if isinstance(ids, list) else []:
                        self.same_neighborhood_kinds[str(block_id)] = str(kind)
        df = df.copy()
        # the rows only: pandas deep-copies ``attrs`` (nan_reasons, the copy audit's per-image records)
        # into every frame derived from this one, which made each table operation cost milliseconds
        df.attrs = {}
        if "run" not in df.columns:
            df["run"] = "run0"
        for col in stats.METRIC_COLUMNS:
            if col not in df.columns:
                df[col] = np.nan
        if "city" not in df.columns:
            df["city"] = np.nan
        for col in (*CHANCE_COLUMNS, *PANEL_COLUMNS):
            if col not in df.columns:
                df[col] = np.nan
        # 1.0 for a panel scored with --allow-unpromptable (caveats.unpromptable_mask; NaN or absent: not)
        df["unpromptable"] = caveats.unpromptable_mask(df).to_numpy(dtype=float)
        dup_in_run = df.duplicated(["run", "method", "condition", "block_id"], keep=False)
        if dup_in_run.any():
            ex = df.loc[dup_in_run, ["method", "condition", "block_id"]].iloc[0].tolist()
            raise ReportError(
                f"{int(dup_in_run.sum())} result rows repeat a (method, condition, block_id) within one run, e.g. {ex}"
            )
        self.notes: list[str] = []
        # Only a GENERATED unit scored in several runs (the paper's control analysis: L1 in the prompt run
        # and in the control run) makes the run a pairing key. The anchors, which every evaluate run
        # scores, are deterministic: scored again, they are the same rows and break no pairing.
        generated_rows = df[df["condition"].isin(CONDITIONS)]
        self.duplicated = bool(generated_rows.duplicated(["method", "condition", "block_id"]).any())
        self.pair_keys = ("run", "method", "block_id") if self.duplicated else stats.DEFAULT_PAIR_KEYS
        if self.duplicated:
            self.notes.append(
                "some generated (method, condition, block) units appear in several runs: summaries average them, "
                "and paired comparisons pair within a run"
            )
        elif df["run"].nunique() > 1:
            self.notes.append(
                f"{df['run'].nunique()} runs are combined: each generated unit is scored in one run only, so paired "
                "comparisons pair (method, block) units across runs"
            )
        segmenter_of = {str(i["_run"]): segmenter_of_run(i) for i in run_infos
                        if isinstance(i, Mapping) and i.get("_run") is not None}
        self.notes += _repeated_anchor_notes(df, segmenter_of)
        known = set(CONDITIONS) | {stats.ANCHOR_CONDITION, stats.SANITY_CONDITION}
        unknown = sorted(set(map(str, df["condition"].dropna().unique())) - known)
        if unknown:
            self.notes.append(f"condition(s) {unknown} are not prompt conditions of the benchmark: their rows are shown "
                              "in the table 'Extra conditions' only")
        raw = df[df["condition"].isin(known)].copy()
        metric_cols = list(stats.METRIC_COLUMNS)
        first_cols = [c for c in ("city", "country", "stratum", "encoder") if c in df.columns]
        units = _units(raw, metric_cols, first_cols)
        # A row without a single finite score (a panel left with < 2 images) covers no block.
        empty = ~np.isfinite(units[metric_cols].to_numpy(dtype=float)).any(axis=1)
        if empty.any():
            shown = ", ".join("/".join(map(str, k)) for k in
                              units.loc[empty, ["method", "condition", "block_id"]].head(5).itertuples(index=False))
            self.notes.append(f"{int(empty.sum())} row(s) have no finite score (e.g. {shown}): they count as no block "
                              "in any table")
        # Panels scored with --allow-unpromptable: no prompt of the benchmark could have made them, so
        # they are split off every frame a table ranks or compares (Table 10 lists them apart, marked).
        refused = units["unpromptable"].to_numpy(dtype=float) > 0
        #: (method, condition, block) means of the panels scored although the benchmark refuses their prompt
        self.unpromptable_units = units[refused & ~empty].reset_index(drop=True)
        self.units = units[~refused & ~empty].reset_index(drop=True)
        keys = ["method", "condition", "block_id"]
        refused_keys = pd.MultiIndex.from_frame(units.loc[refused, keys]) if refused.any() else None
        self.raw = (raw[~pd.MultiIndex.from_frame(raw[keys]).isin(refused_keys)].copy() if refused_keys is not None
                    else raw)
        note = unpromptable_note(self.unpromptable_units)
        if note:
            self.notes.append(note)
        #: (method, condition, block) means of the rows whose condition is an extra (user-declared) one.
        self.extra_units = _units(df[~df["condition"].isin(known)], metric_cols, first_cols)
        self.generated = self.units[self.units["condition"].isin(CONDITIONS)]
        self.gen_raw = self.raw[self.raw["condition"].isin(CONDITIONS)]
        self.conditions = [c for c in CONDITIONS if c in set(self.generated["condition"])]
        self.run_infos = run_infos
        reasons = nan_reasons_from_run_info(run_infos)
        self.metric_na: dict[str, str] = {}
        for col in metric_cols:
            vals = self.units[col].to_numpy(dtype=float)
            if vals.size and not np.isfinite(vals).any():
                self.metric_na[col] = reasons.get(col, "no finite values in the results")

    def methods_under(self, condition: str) -> list[str]:
        return sorted(self.units.loc[self.units["condition"] == condition, "method"].unique())

    def has_condition(self, condition: str) -> bool:
        return bool((self.units["condition"] == condition).any())

    def n_cities(self, frame: pd.DataFrame) -> int:
        return int(frame["city"].dropna().nunique())

    def interval_caveat(self, frame: pd.DataFrame, columns: Sequence[str] | None = None) -> str | None:
        """:func:`~geofidelity_bench.caveats.interval_caveat` for intervals over the blocks and cities of ``frame``."""
        if frame.empty:
            return None
        if columns:
            cols = [c for c in columns if c in frame.columns]
            frame = frame[np.isfinite(frame[cols].to_numpy(dtype=float)).any(axis=1)] if cols else frame
        return caveats.interval_caveat(int(frame["block_id"].nunique()), self.n_cities(frame))

    def same_neighborhood_note(self, frame: pd.DataFrame, columns: Sequence[str] = ("sim_same_neighborhood",)) -> str | None:
        """:func:`~geofidelity_bench.caveats.same_neighborhood_note` for the blocks of ``frame`` with a finite
        value in one of ``columns`` (a same-neighborhood number): None unless they mix real same-neighborhood
        negatives with fallbacks."""
        cols = [c for c in columns if c in frame.columns]
        if frame.empty or not cols or not self.same_neighborhood_kinds:
            return None
        ok = np.isfinite(frame[cols].to_numpy(dtype=float)).any(axis=1)
        counts: dict[str, int] = {}
        for block_id in sorted(set(map(str, frame.loc[ok, "block_id"]))):
            kind = self.same_neighborhood_kinds.get(block_id, "unknown")
            counts[kind] = counts.get(kind, 0) + 1
        return caveats.same_neighborhood_note(counts)

    def pct(self) -> str:
        """The interval level as a percentage label (``95%``, ``80%``, ``97.5%``)."""
        return confidence_label(self.confidence)


def _units(frame: pd.DataFrame, metric_cols: list[str], first_cols: list[str]) -> pd.DataFrame:
    """One row per (method, condition, block): the mean of the metrics (and chance levels) over runs, the
    first of ``first_cols``, the fewest distinct images and the most copied images of its scorings."""
    grouped = frame.groupby(["method", "condition", "block_id"], sort=True, dropna=False)
    units = grouped[metric_cols + list(CHANCE_COLUMNS)].mean()
    units = units.join(grouped[["n_generated", "n_copied"]].max()).join(grouped[["n_distinct"]].min())
    if "unpromptable" in frame.columns:  # unpromptable in any of its scorings
        units = units.join(grouped[["unpromptable"]].max())
    if first_cols:
        units = units.join(grouped[first_cols].first())
    return units.reset_index()


def unpromptable_text(frame: pd.DataFrame) -> str:
    """``"tiny under L1 (3 block(s)), sdxl under L2 (1 block(s))"``: the (method, condition) of ``frame``'s units."""
    if frame.empty:
        return ""
    counts = frame.groupby(["method", "condition"], sort=True)["block_id"].nunique()
    return ", ".join(f"{method_label(m)} under {c} ({int(n)} block(s))" for (m, c), n in counts.items())


def unpromptable_note(frame: pd.DataFrame) -> str | None:
    """What the report does with the units of ``frame`` scored with --allow-unpromptable (None when none)."""
    if frame.empty:
        return None
    return (f"{caveats.UNPROMPTABLE_MARK}: {unpromptable_text(frame)} scored with --allow-unpromptable although the "
            "benchmark has no prompt of that condition for those blocks: listed apart (marked, never bold, never "
            "ranked) in Table 10 and left out of every other table")


def _repeated_anchor_notes(df: pd.DataFrame, segmenter_of: Mapping[str, str] | None = None) -> list[str]:
    """Anchor and sanity rows scored in several runs must agree (they are deterministic for one
    benchmark, encoder config and protocol); a note names any that do not.

    GAAS is compared only between runs of the same segmenter (``segmenter_of``: run label -> the
    segmenter key of its run.json, :func:`~geofidelity_bench.comparability.segmenter_of_run`): another
    segmenter's GAAS, or none, is another number by design, not a sign of another encoder or pipeline."""
    fixed = df[df["condition"].isin([stats.ANCHOR_CONDITION, stats.SANITY_CONDITION])]
    if fixed.empty or fixed["run"].nunique() < 2:
        return []
    cols = [c for c in stats.METRIC_COLUMNS if c in fixed.columns and c != "gaas"]
    keys = ["method", "condition", "block_id"]

    def spread_of(frame: pd.DataFrame, by: list[str], columns: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
        grouped = frame.groupby(by)[columns]
        return (grouped.agg(lambda s: float(s.max() - s.min()) if s.notna().any() else 0.0),
                grouped.agg(lambda s: s.isna().any() and s.notna().any()))

    spread, nan_mismatch = spread_of(fixed, keys, cols)
    if "gaas" in fixed.columns:
        seg = fixed["run"].astype(str).map(dict(segmenter_of or {})).fillna("")
        g_spread, g_nan = spread_of(fixed.assign(_segmenter=seg.to_numpy()), [*keys, "_segmenter"], ["gaas"])
        spread["gaas"] = g_spread["gaas"].groupby(level=keys).max().reindex(spread.index).fillna(0.0)
        nan_mismatch["gaas"] = g_nan["gaas"].groupby(level=keys).any().reindex(spread.index).fillna(False)
    bad = (spread > ANCHOR_TOLERANCE).any(axis=1) | nan_mismatch.any(axis=1)
    if not bad.any():
        return []
    worst = spread.loc[bad].max(axis=1)
    example = "/".join(map(str, worst.idxmax()))
    runs = sorted(map(str, fixed["run"].unique()))
    return [f"**the real-image anchors differ between the runs** {', '.join(runs)} on {int(bad.sum())} row(s) (largest "
            f"difference {float(worst.max()):.3g}, {example}): anchors are deterministic for one benchmark, encoder "
            "config and protocol, so these runs were made with another encoder build or pipeline; their anchor rows "
            "are averaged here, and their generated rows may not be comparable"]


def finite_blocks(frame: pd.DataFrame, columns: Sequence[str]) -> int:
    """The blocks of ``frame`` with a finite value in at least one of ``columns``."""
    cols = [c for c in columns if c in frame.columns]
    if frame.empty or not cols:
        return 0
    ok = np.isfinite(frame[cols].to_numpy(dtype=float)).any(axis=1)
    return int(frame.loc[ok, "block_id"].nunique())


def method_means(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    g = frame.groupby("method", sort=True)
    out = g[list(columns)].mean()
    out.insert(0, "n_blocks", [finite_blocks(part, columns) for _, part in g])
    return out.reset_index()


# -- marks: what a reader must see next to a row --------------------------------------------------


def repeats_count(frame: pd.DataFrame) -> int:
    """Blocks of ``frame`` whose panel repeats photos (``n_distinct < n_generated``) and has a score: k of the
    blocks a row averages, as every view counts them (``evaluation.leaderboard_summary``)."""
    if frame.empty or "n_distinct" not in frame.columns:
        return 0
    from ..evaluation import covered

    return int(frame.loc[[caveats.repeats_photos(g, d) and ok for g, d, ok in
                          zip(frame["n_generated"], frame["n_distinct"], covered(frame))], "block_id"].nunique())


def copied_count(frame: pd.DataFrame) -> tuple[int, int]:
    """(panels, images) of ``frame`` that the copy audit flagged."""
    if frame.empty:
        return 0, 0
    mask = caveats.copied_mask(frame)
    return int(mask.sum()), int(pd.to_numeric(frame.loc[mask, "n_copied"], errors="coerce").sum())


def is_copied(frame: pd.DataFrame) -> bool:
    return copied_count(frame)[0] > 0


def marks(frame: pd.DataFrame) -> str:
    """The unpromptable, copied and repeating-photos marks of the units ``frame`` behind a row ("" when none);
    "of n blocks" counts the blocks with a score, as the row's Blocks column does."""
    n = finite_blocks(frame, LEADERBOARD_METRICS) if not frame.empty else 0
    out = []
    refused = (int(frame.loc[frame["unpromptable"].to_numpy(dtype=float) > 0, "block_id"].nunique())
               if not frame.empty and "unpromptable" in frame.columns else 0)
    if refused:
        out.append(caveats.UNPROMPTABLE_MARK + (f" in {refused} of {n} blocks" if refused < n else ""))
    panels, _ = copied_count(frame)
    if panels:
        out.append(f"{caveats.COPIED_MARK} in {panels} of {len(frame)} panels")
    repeats = repeats_count(frame)
    if repeats:
        out.append(f"{caveats.REPEATS_MARK} in {repeats} of {n} blocks")
    return "; ".join(out)


def marked_label(label: str, frame: pd.DataFrame) -> str:
    """``label`` followed by :func:`marks` of the units ``frame`` behind it."""
    m = marks(frame)
    return f"{label} ({m})" if m else label


def chance_means(frame: pd.DataFrame) -> dict[str, float]:
    """The mean chance levels (and candidates) over the blocks of ``frame`` with a finite retrieval accuracy."""
    ok = frame[np.isfinite(frame["retrieval_acc"].to_numpy(dtype=float))] if not frame.empty else frame
    return {c: float(ok[c].mean()) if len(ok) else float("nan") for c in CHANCE_COLUMNS}


def generator_mean(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Mean over blocks of the per-block average across generators."""
    per_block = frame.groupby("block_id")[list(columns)].mean()
    return per_block.mean()

