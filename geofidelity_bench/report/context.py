"""What every table and plot of the report reads: its settings (which comparisons, which metrics),
its labels, its error, and :class:`Context`, the result rows prepared once for all tables."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .. import stats
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



def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


class Context:
    """The prepared inputs shared by the table builders."""

    def __init__(self, df: pd.DataFrame, run_infos: list[dict], *, seed: int, n_resamples: int,
                 rank_resamples: int, confidence: float):
        self.seed, self.n_resamples, self.confidence = seed, n_resamples, confidence
        self.rank_resamples = rank_resamples
        df = df.copy()
        if "run" not in df.columns:
            df["run"] = "run0"
        for col in stats.METRIC_COLUMNS:
            if col not in df.columns:
                df[col] = np.nan
        if "city" not in df.columns:
            df["city"] = np.nan
        dup_in_run = df.duplicated(["run", "method", "condition", "block_id"], keep=False)
        if dup_in_run.any():
            ex = df.loc[dup_in_run, ["method", "condition", "block_id"]].iloc[0].tolist()
            raise ReportError(
                f"{int(dup_in_run.sum())} result rows repeat a (method, condition, block_id) within one run, e.g. {ex}"
            )
        self.notes: list[str] = []
        self.duplicated = bool(df.duplicated(["method", "condition", "block_id"]).any())
        self.pair_keys = ("run", "method", "block_id") if self.duplicated else stats.DEFAULT_PAIR_KEYS
        if self.duplicated:
            self.notes.append(
                "some (method, condition, block) units appear in several runs: summaries average them, and paired "
                "comparisons pair within a run"
            )
        known = set(CONDITIONS) | {stats.ANCHOR_CONDITION, stats.SANITY_CONDITION}
        unknown = sorted(set(map(str, df["condition"].dropna().unique())) - known)
        if unknown:
            self.notes.append(f"condition(s) {unknown} are not prompt conditions of the benchmark: their rows are shown "
                              "in the table 'Extra conditions' only")
        self.raw = df[df["condition"].isin(known)].copy()
        metric_cols = list(stats.METRIC_COLUMNS)
        first_cols = [c for c in ("city", "country", "stratum", "encoder") if c in df.columns]
        self.units = _units(self.raw, metric_cols, first_cols)
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


def _units(frame: pd.DataFrame, metric_cols: list[str], first_cols: list[str]) -> pd.DataFrame:
    """One row per (method, condition, block): the mean of the metrics over runs, the first of ``first_cols``."""
    grouped = frame.groupby(["method", "condition", "block_id"], sort=True, dropna=False)
    units = grouped[metric_cols].mean()
    if first_cols:
        units = units.join(grouped[first_cols].first())
    return units.reset_index()


def method_means(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    g = frame.groupby("method", sort=True)
    out = g[list(columns)].mean()
    out.insert(0, "n_blocks", g["block_id"].nunique())
    return out.reset_index()


def generator_mean(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Mean over blocks of the per-block average across generators."""
    per_block = frame.groupby("block_id")[list(columns)].mean()
    return per_block.mean()

