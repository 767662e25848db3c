"""The paper's tables and plots from evaluation results (paper Tables 4-10).

Input: result rows (SPEC section 7), from one or more results folders written by
``geofidelity-bench evaluate`` / ``demo`` (``results.csv``, ``run.json`` and, optionally,
``clip_alignment.csv`` from :func:`geofidelity_bench.clip_alignment.run_clip_alignment`).

Output folder::

    report.md            every table (Markdown), parameters, and one line per skipped table
    report.json          the same tables as records, every parameter (seeds, resamples,
                         confidence, pairing keys, encoders, inputs) and every skip reason
    tables/<name>.csv    one CSV per table that was produced
    plots/<name>.png     leaderboard.png, cos_sim_by_condition.png, hierarchy.png, city_heatmap.png

Tables (``name``: content):

- ``hierarchy`` (Table 4): mean ``sim_*`` of held-out real queries and of each generator under
  L1 (and their mean) to the target and to each negative type.
- ``cos_sim_by_condition`` (Table 5): mean CosSim per generator and condition.
- ``prompt_deltas`` (Table 6): L1-L0, L2-L1, L2-L0, GPS_ONLY-L0 on every metric: matched
  (method, block) delta with a paired bootstrap interval, positives, Wilcoxon p, and the
  city-balanced delta with cities positive. ``leave_one_city_out``: L1-L0 CosSim without
  each city.
- ``controls`` (Table 7): L1 versus each control; benefits sign-flipped for lower-is-better
  metrics so that positive means "the correct names help".
- ``clip_associations``, ``clip_name_sensitivity``, ``clip_no_retrieval`` (Tables 8-9):
  only when CLIP scores are available.
- ``leaderboard`` (Table 10): generators under L1, their mean, the real-image anchors (and
  demo sanity methods) on CosSim, DCSF, MMD, GAAS, retrieval, MRR and both margins, with
  bootstrap intervals over blocks. ``rank_stability``: city-bootstrap ranks under L1.
- ``city_by_method``: mean CosSim per city and method (L1 generators and held-out real).

A table whose inputs are missing is skipped with a one-line reason (``skipped: no L0 rows``),
never filled with placeholders. A metric that is NaN throughout (e.g. GAAS without a
segmenter) is shown as ``n/a`` with the reason found in ``run.json`` where there is one.

Averages: a generator's score is the mean over its blocks; "generator mean" rows are the mean
over blocks of the per-block average across generators (equal to the mean of the generator
means when all generators cover the same blocks). When several folders score the same
(method, condition, block) (e.g. L1 in both a prompt run and a control run), summaries
average the duplicates and paired comparisons pair within a run (``run`` joins the pairing
keys), as in the paper's control analysis.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .errors import GeoFidelityError
from .provenance import library_versions
from . import stats
from .prompts import CONDITIONS, CONTROL_CONDITIONS

RESULTS_FILE = "results.csv"
RUN_FILE = "run.json"
CLIP_FILE = "clip_alignment.csv"
#: Versions recorded in report.json.
REPORT_DISTRIBUTIONS = ("geofidelity-bench", "numpy", "pandas", "scipy", "matplotlib")
REQUIRED_COLUMNS = ("method", "condition", "block_id")
STRING_COLUMNS = ("method", "condition", "block_id", "city", "country", "stratum", "encoder")
NUMERIC_COLUMNS = ("n_generated", "n_reference") + tuple(stats.METRIC_COLUMNS)

#: Prompt-level comparisons of Table 6, as (a, b) for ``a - b``.
PROMPT_COMPARISONS = (("L1", "L0"), ("L2", "L1"), ("L2", "L0"), ("GPS_ONLY", "L0"))
DELTA_METRICS = ("cos_sim", "retrieval_acc", "mrr", "local_margin", "strongest_margin", "dcsf", "mmd", "gaas")
CONTROL_METRICS = DELTA_METRICS
LEADERBOARD_METRICS = ("cos_sim", "dcsf", "mmd", "gaas", "retrieval_acc", "mrr", "local_margin", "strongest_margin")
HIERARCHY_COLUMNS = ("sim_target", "sim_same_neighborhood", "sim_same_city", "sim_same_driving_side", "sim_random_city")
RANK_METRICS = ("cos_sim", "retrieval_acc")
MAIN_CONDITION = "L1"

METRIC_LABELS = {
    "cos_sim": "CosSim",
    "mmd": "MMD",
    "dcsf": "DCSF",
    "diversity_gap": "Diversity gap",
    "gaas": "GAAS",
    "retrieval_acc": "Retrieval",
    "mrr": "MRR",
    "sim_target": "Same block",
    "sim_same_neighborhood": "Same city (1)",
    "sim_same_city": "Same city (2)",
    "sim_same_driving_side": "Same drive",
    "sim_random_city": "Random",
    "local_margin": "Local margin",
    "strongest_margin": "Strongest margin",
}
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


class ReportError(GeoFidelityError, ValueError):
    """The inputs cannot make a report (missing files or columns, mixed encoders)."""


# -- loading --------------------------------------------------------------------------------


def read_results_csv(path: str | os.PathLike) -> pd.DataFrame:
    """Reads a ``results.csv`` keeping ids as strings (a country ``NA`` stays ``NA``)."""
    path = Path(path)
    header = pd.read_csv(path, nrows=0).columns
    na = {c: ["", "nan", "NaN", "NA", "N/A", "null", "None"] for c in header if c in NUMERIC_COLUMNS}
    na.update({c: [""] for c in header if c not in NUMERIC_COLUMNS})
    df = pd.read_csv(
        path,
        dtype={c: str for c in header if c in STRING_COLUMNS},
        keep_default_na=False,
        na_values=na,
    )
    for col in NUMERIC_COLUMNS:
        if col in df.columns:
            try:
                df[col] = pd.to_numeric(df[col], errors="raise").astype(float)
            except (ValueError, TypeError) as err:
                raise ReportError(f"{path}: column {col!r} is not numeric ({err})") from None
    return df


def load_results(
    dirs: str | os.PathLike | Iterable[str | os.PathLike], *, allow_mixed_encoders: bool = False
) -> tuple[pd.DataFrame, list[dict]]:
    """Reads and concatenates the ``results.csv`` of one or more results folders.

    Each row gets a ``run`` column naming its folder. Each folder's ``run.json`` (``{}`` when
    absent) is returned with ``_dir``, ``_run`` and, when the folder has one, ``_clip_alignment``
    (the path of its ``clip_alignment.csv``) added.

    Raises:
        ReportError: a folder or its results.csv is missing, required columns are missing, or
            the folders use different encoders and ``allow_mixed_encoders`` is false.
    """
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise ReportError("no results folder given")
    names = [d.resolve().name or str(d) for d in dirs]
    labels = names if len(set(names)) == len(names) else [f"{i}:{n}" for i, n in enumerate(names)]
    frames, infos = [], []
    for folder, label in zip(dirs, labels):
        csv = folder / RESULTS_FILE
        if not folder.is_dir():
            raise ReportError(f"results folder {folder} does not exist")
        if not csv.is_file():
            raise ReportError(f"{folder} has no {RESULTS_FILE} (write one with `geofidelity-bench evaluate` or `demo`)")
        df = read_results_csv(csv)
        missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
        if missing:
            raise ReportError(f"{csv} lacks required column(s) {missing}")
        df["run"] = label
        frames.append(df)
        info: dict[str, Any] = {}
        run_json = folder / RUN_FILE
        if run_json.is_file():
            try:
                info = json.loads(run_json.read_text(encoding="utf-8"))
            except json.JSONDecodeError as err:
                raise ReportError(f"{run_json} is not valid JSON: {err}") from None
            if not isinstance(info, dict):
                raise ReportError(f"{run_json} must hold a JSON object")
        info = dict(info, _dir=str(folder), _run=label)
        if (folder / CLIP_FILE).is_file():
            info["_clip_alignment"] = str(folder / CLIP_FILE)
        infos.append(info)
    df = pd.concat(frames, ignore_index=True)
    _check_encoders(df, allow_mixed_encoders)
    return df, infos


def _encoders(df: pd.DataFrame) -> list[str]:
    if "encoder" not in df.columns:
        return []
    return sorted(map(str, df["encoder"].dropna().unique()))


def _check_encoders(df: pd.DataFrame, allow_mixed: bool) -> None:
    encoders = _encoders(df)
    if len(encoders) > 1 and not allow_mixed:
        raise ReportError(
            f"the results mix encoders {encoders}: scores from different encoders are not comparable. "
            "Report one encoder at a time, or pass --allow-mixed-encoders (allow_mixed_encoders=True) "
            "to write one sub-report per encoder"
        )


def load_clip_scores(run_infos: Sequence[Mapping]) -> pd.DataFrame | None:
    """Concatenates the ``clip_alignment.csv`` files named by ``load_results``' run infos."""
    frames = []
    for info in run_infos:
        path = info.get("_clip_alignment")
        if path:
            header = pd.read_csv(path, nrows=0).columns
            na = {c: ["", "nan", "NaN"] if c.startswith("clip_") or c == "n_images" else [""] for c in header}
            df = pd.read_csv(path, dtype={c: str for c in ("method", "condition", "block_id", "city") if c in header},
                             keep_default_na=False, na_values=na)
            df["run"] = info.get("_run")
            frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else None


# -- metric notes ---------------------------------------------------------------------------


def nan_reasons_from_run_info(run_infos: Sequence[Mapping]) -> dict[str, str]:
    """Why metric columns are NaN, as stated by ``run.json``.

    Understands ``nan_reasons`` as a list of ``{"column", "reason", ...}`` records (what
    ``geofidelity-bench evaluate`` writes, and what ``evaluate_panels`` leaves in
    ``df.attrs["nan_reasons"]``) or a ``{metric: reason}`` mapping; failing those, a top-level
    string entry named after a metric (e.g. ``"gaas": "not computed: ..."``).
    """
    out: dict[str, list[str]] = {}

    def add(metric: Any, reason: Any) -> None:
        if isinstance(metric, str) and metric in stats.METRIC_COLUMNS and reason:
            lst = out.setdefault(metric, [])
            if str(reason) not in lst:
                lst.append(str(reason))

    for info in run_infos:
        reasons = info.get("nan_reasons")
        if isinstance(reasons, Mapping):
            for metric, reason in reasons.items():
                add(metric, reason)
        elif isinstance(reasons, list):
            for rec in reasons:
                if isinstance(rec, Mapping):
                    add(rec.get("column") or rec.get("metric"), rec.get("reason"))
    for info in run_infos:  # a bare top-level note only where no nan_reasons record explains the column
        for metric in stats.METRIC_COLUMNS:
            if metric not in out and isinstance(info.get(metric), str):
                add(metric, info[metric])
    return {m: "; ".join(r) for m, r in out.items()}


# -- tables ---------------------------------------------------------------------------------


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
    if not _finite(p):
        return "n/a"
    return f"{float(p):.2g}" if p >= 1e-3 else f"{float(p):.1e}"


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


def _label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


class _Context:
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
            self.notes.append(f"rows with unknown condition(s) {unknown} are left out of every table")
        self.raw = df[df["condition"].isin(known)].copy()
        metric_cols = list(stats.METRIC_COLUMNS)
        first_cols = [c for c in ("city", "country", "stratum", "encoder") if c in df.columns]
        grouped = self.raw.groupby(["method", "condition", "block_id"], sort=True, dropna=False)
        units = grouped[metric_cols].mean()
        if first_cols:
            units = units.join(grouped[first_cols].first())
        self.units = units.reset_index()
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


def _method_means(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    g = frame.groupby("method", sort=True)
    out = g[list(columns)].mean()
    out.insert(0, "n_blocks", g["block_id"].nunique())
    return out.reset_index()


def _generator_mean(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """Mean over blocks of the per-block average across generators."""
    per_block = frame.groupby("block_id")[list(columns)].mean()
    return per_block.mean()


# Table 4 -------------------------------------------------------------------------------------


def table_hierarchy(ctx: _Context) -> Table:
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
        m = _method_means(held, cols).iloc[0]
        rows.append({"query_set": "Held-out Real", "method": "heldout_real", "condition": stats.ANCHOR_CONDITION,
                     "n_blocks": int(m["n_blocks"]), **{c: m[c] for c in cols}})
    else:
        t.notes.append("no heldout_real anchor rows: the held-out row is omitted")
    if not gen.empty:
        for _, m in _method_means(gen, cols).iterrows():
            rows.append({"query_set": _label(m["method"]), "method": m["method"], "condition": MAIN_CONDITION,
                         "n_blocks": int(m["n_blocks"]), **{c: m[c] for c in cols}})
        methods = gen["method"].nunique()
        if methods > 1:
            gm = _generator_mean(gen, cols)
            rows.append({"query_set": f"{methods}-generator mean", "method": "generator_mean",
                         "condition": MAIN_CONDITION, "n_blocks": int(gen["block_id"].nunique()),
                         **{c: gm[c] for c in cols}})
    else:
        t.notes.append(f"no {MAIN_CONDITION} rows: generator rows are omitted")
    t.data = pd.DataFrame(rows)
    headers = ["Query set", *(METRIC_LABELS[c] for c in cols), "Blocks"]
    body = [[r["query_set"], *(_fmt(r[c]) for c in cols), _fmt(r["n_blocks"])] for r in rows]
    t.markdown = _md_table(headers, body)
    return t


# Table 5 -------------------------------------------------------------------------------------


def table_cos_sim_by_condition(ctx: _Context) -> Table:
    t = Table("cos_sim_by_condition", "Table 5: CosSim by prompt condition",
              caption="Mean CosSim over blocks per generator and condition. Higher is better.")
    if ctx.generated.empty:
        t.reason = "no generated rows (only anchors or sanity methods)"
        return t
    if "cos_sim" in ctx.metric_na:
        t.reason = f"cos_sim is n/a ({ctx.metric_na['cos_sim']})"
        return t
    pivot = ctx.generated.pivot_table(index="method", columns="condition", values="cos_sim", aggfunc="mean")
    pivot = pivot.reindex(columns=ctx.conditions)
    counts = ctx.generated.groupby("method")["block_id"].nunique()
    data = pivot.reset_index()
    data.insert(1, "n_blocks", data["method"].map(counts).astype(int))
    if len(pivot) > 1:
        means = {c: ctx.generated[ctx.generated["condition"] == c].groupby("block_id")["cos_sim"].mean().mean()
                 for c in ctx.conditions}
        data = pd.concat([data, pd.DataFrame([{"method": "generator_mean",
                                                "n_blocks": int(ctx.generated["block_id"].nunique()), **means}])],
                         ignore_index=True)
    t.data = data
    headers = ["Model", *ctx.conditions]
    body = [[_label(r["method"]) if r["method"] != "generator_mean" else "Generator mean",
             *(_fmt(r[c]) for c in ctx.conditions)] for _, r in data.iterrows()]
    t.markdown = _md_table(headers, body)
    return t


# Table 6 -------------------------------------------------------------------------------------


def _missing_conditions(ctx: _Context, conds: Iterable[str]) -> list[str]:
    return [c for c in conds if not ctx.has_condition(c)]


def table_prompt_deltas(ctx: _Context) -> Table:
    t = Table("prompt_deltas", "Table 6: prompt-condition deltas",
              caption=f"Paired differences a - b over matched (method, block) units: mean with a "
                      f"{ctx.n_resamples}-resample percentile bootstrap {ctx.confidence:.0%} interval (seed "
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
    headers = ["Comparison", "Metric", "Matched delta (95% CI)", "Positives", "Wilcoxon p",
               "City-balanced delta (95% CI)", "Cities with positive delta"]
    body = []
    for _, r in data.iterrows():
        arrow = "↑" if r["higher_is_better"] else "↓"
        label = f"{METRIC_LABELS[r['metric']]} {arrow}"
        if not _finite(r.get("delta")):
            body.append([r["comparison"], label, "n/a", "n/a", "n/a", "n/a", "n/a"])
            t.notes.append(f"{r['comparison']} {r['metric']}: {r.get('note')}")
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
    if "city_note" in data.columns and data["city_note"].notna().any():
        t.notes.append("city-balanced: " + str(data["city_note"].dropna().iloc[0]))
    t.markdown = _md_table(headers, body)
    return t


def table_leave_one_city_out(ctx: _Context) -> Table:
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
    return t


# Table 7 -------------------------------------------------------------------------------------


def table_controls(ctx: _Context) -> Table:
    t = Table("controls", "Table 7: prompt-specificity controls",
              caption=f"Paired {MAIN_CONDITION}-versus-control benefits over matched (method, block) units; for MMD, "
                      "DCSF and GAAS (lower is better) the sign is flipped (control - L1), so a positive benefit "
                      f"always means the correct names help. {ctx.n_resamples}-resample bootstrap, seed {ctx.seed}.")
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
    headers = ["Control prompt", "Metric", "Control", MAIN_CONDITION, "Benefit (95% CI)", "Positive", "Wilcoxon p",
               "Pairs"]
    body = [[CONTROL_LABELS.get(r["control"], r["control"]),
             f"{METRIC_LABELS[r['metric']]} {'↑' if r['higher_is_better'] else '↓'}",
             _fmt(r["mean_control"]), _fmt(r["mean_reference"]),
             _fmt_ci(r["benefit"], r["ci_low"], r["ci_high"]),
             f"{r['positive_share']:.1%}", _fmt_p(r["wilcoxon_p"]), _fmt(int(r["n_pairs"]))]
            for _, r in data.iterrows()]
    t.markdown = _md_table(headers, body)
    return t


# Tables 8-9 ----------------------------------------------------------------------------------


def tables_clip(ctx: _Context, clip_scores: pd.DataFrame | None) -> list[Table]:
    from .clip_alignment import ALTERATION_LABELS, OUTCOME_LABELS, alignment_analysis

    t8 = Table("clip_associations", "Table 8: CLIP text alignment versus geographic fidelity",
               caption=f"Spearman rho between per-panel CLIP image-text cosine ({MAIN_CONDITION} panels) and each "
                       "geographic outcome, and the AUROC of the CLIP score for all images retrieving the target; "
                       f"{ctx.n_resamples}-resample block-bootstrap intervals (all methods of a block together).")
    t9 = Table("clip_name_sensitivity", "Table 9: CLIP sensitivity to local names",
               caption="Original-minus-altered CLIP cosine with the images held fixed and the street, the "
                       "neighborhood or both replaced by the control donors' names; block-bootstrap intervals.")
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
            ["Text", "Altered", "Mean difference (95% CI)", "Panels with positive difference", "Panels"],
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


def table_leaderboard(ctx: _Context) -> Table:
    t = Table("leaderboard", "Table 10: leaderboard with real-image anchors",
              caption=f"Generators under {MAIN_CONDITION} and the real-image anchors: mean over blocks with a "
                      f"{ctx.n_resamples}-resample percentile bootstrap {ctx.confidence:.0%} interval over blocks "
                      f"(seed {ctx.seed}). ↑ higher is better, ↓ lower is better; bold: best generator.")
    metrics = [m for m in LEADERBOARD_METRICS]
    gen = ctx.generated[ctx.generated["condition"] == MAIN_CONDITION]
    anchors = ctx.units[ctx.units["condition"] == stats.ANCHOR_CONDITION]
    sanity = ctx.units[ctx.units["condition"] == stats.SANITY_CONDITION]
    if gen.empty and anchors.empty and sanity.empty:
        t.reason = f"no {MAIN_CONDITION} rows and no anchor rows"
        return t
    if gen.empty:
        t.notes.append(f"no {MAIN_CONDITION} rows: generator rows are omitted")
    if anchors.empty:
        t.notes.append("no anchor rows (heldout_real, random_same_country, random_global)")

    def row_for(group: str, method: str, condition: str, frame: pd.DataFrame, values: pd.DataFrame) -> dict:
        row = {"group": group, "method": method, "condition": condition, "n_blocks": int(frame["block_id"].nunique())}
        for m in metrics:
            ci = stats.bootstrap_mean_ci(values[m].to_numpy(dtype=float), n_resamples=ctx.n_resamples,
                                         seed=ctx.seed, confidence=ctx.confidence)
            row.update({m: ci.mean, f"{m}_ci_low": ci.ci_low, f"{m}_ci_high": ci.ci_high})
        return row

    rows = []
    gen_methods = sorted(gen["method"].unique())
    for method in gen_methods:
        f = gen[gen["method"] == method]
        rows.append(row_for("generator", method, MAIN_CONDITION, f, f))
    if len(gen_methods) > 1:
        per_block = gen.groupby("block_id")[metrics].mean().reset_index()
        rows.append(row_for("generator_mean", "generator_mean", MAIN_CONDITION, gen, per_block))
    present_anchor = [m for m in stats.ANCHOR_METHODS if m in set(anchors["method"])]
    present_anchor += sorted(set(anchors["method"]) - set(stats.ANCHOR_METHODS))
    for method in present_anchor:
        f = anchors[anchors["method"] == method]
        rows.append(row_for("anchor", method, stats.ANCHOR_CONDITION, f, f))
    for method in sorted(sanity["method"].unique()):
        f = sanity[sanity["method"] == method]
        rows.append(row_for("sanity", method, stats.SANITY_CONDITION, f, f))
    data = pd.DataFrame(rows)
    gen_rows = data[data["group"] == "generator"]
    if len(gen_rows):
        order = gen_rows.sort_values("cos_sim", ascending=False, kind="mergesort", na_position="last").index
        data = pd.concat([data.loc[order], data[data["group"] != "generator"]]).reset_index(drop=True)
    t.data = data
    best: dict[str, float] = {}
    gen_rows = data[data["group"] == "generator"]
    if len(gen_rows) > 1:
        for m in metrics:
            vals = gen_rows[m].to_numpy(dtype=float)
            if np.isfinite(vals).any():
                best[m] = np.nanmax(vals) if stats.HIGHER_IS_BETTER[m] else np.nanmin(vals)
    for m, why in ctx.metric_na.items():
        if m in metrics:
            t.notes.append(f"{METRIC_LABELS[m]}: n/a ({why})")
    arrows = {m: "↑" if stats.HIGHER_IS_BETTER[m] else "↓" for m in metrics}
    headers = ["Model", *(f"{METRIC_LABELS[m]} {arrows[m]}" for m in metrics), "Blocks"]
    body = []
    for _, r in data.iterrows():
        name = "Generator mean" if r["group"] == "generator_mean" else _label(r["method"])
        cells = []
        for m in metrics:
            s = _fmt_ci(r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"], signed=False)
            if r["group"] == "generator" and m in best and _finite(r[m]) and float(r[m]) == best[m]:
                s = f"**{s}**"
            cells.append(s)
        body.append([name, *cells, _fmt(r["n_blocks"])])
    t.markdown = _md_table(headers, body)
    return t


def table_rank_stability(ctx: _Context) -> Table:
    t = Table("rank_stability", f"Rank stability under {MAIN_CONDITION}",
              caption=f"City bootstrap ({ctx.rank_resamples} resamples, seed {ctx.seed}) of generator ranks under "
                      f"{MAIN_CONDITION}: probability of rank 1 and {ctx.confidence:.0%} rank interval (1 = best).")
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
    units = ctx.units[ctx.units["condition"] == MAIN_CONDITION]
    for metric in RANK_METRICS:
        if metric in ctx.metric_na:
            t.notes.append(f"{metric}: n/a ({ctx.metric_na[metric]})")
            continue
        try:
            r = stats.rank_stability(units, metric, MAIN_CONDITION, n_resamples=ctx.rank_resamples, seed=ctx.seed,
                                     confidence=ctx.confidence)
        except ValueError as err:
            t.notes.append(f"{metric}: {err}")
            continue
        frames.append(r.table.assign(metric=metric, n_cities=r.n_cities))
    if not frames:
        t.reason = "no rankable metric"
        return t
    data = pd.concat(frames, ignore_index=True)
    t.data = data
    body = [[METRIC_LABELS[r["metric"]], _label(r["method"]), _fmt(r["score"]), _fmt(int(r["rank"])),
             f"{r['rank1_prob']:.2f}", f"[{int(r['rank_ci_low'])}, {int(r['rank_ci_high'])}]"]
            for _, r in data.iterrows()]
    t.markdown = _md_table(["Metric", "Model", "Score", "Rank", "P(rank 1)", "Rank interval"], body)
    return t


def table_city_by_method(ctx: _Context) -> Table:
    t = Table("city_by_method", f"CosSim per city ({MAIN_CONDITION} generators and held-out real)",
              caption="Mean CosSim over the blocks of each city.")
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
    t.markdown = _md_table(["City", *(_label(c) for c in cols)],
                           [[city, *(_fmt(v) for v in r.to_numpy())] for city, r in pivot.iterrows()])
    return t


def table_summary(ctx: _Context) -> Table:
    t = Table("summary_method_condition", "Mean of every metric per method and condition",
              caption="Means over blocks (CSV only; see the tables above for intervals).")
    if ctx.units.empty:
        t.reason = "no rows"
        return t
    g = ctx.units.groupby(["method", "condition"], sort=True)
    data = g[list(stats.METRIC_COLUMNS)].mean()
    data.insert(0, "n_blocks", g["block_id"].nunique())
    t.data = data.reset_index()
    return t


# -- plots ----------------------------------------------------------------------------------


def _figure(width: float, height: float):
    # The Agg canvas directly, not pyplot: no global backend switch, no GUI, thread-safe.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return str(path)


def plot_leaderboard(table: pd.DataFrame, path: Path, metric_na: Mapping[str, str] = {}) -> str | None:
    metrics = [m for m in ("cos_sim", "retrieval_acc", "dcsf", "gaas") if m not in metric_na
               and np.isfinite(table[m].to_numpy(dtype=float)).any()]
    if not metrics:
        return None
    n = len(table)
    fig = _figure(3.6 * len(metrics), 0.9 + 0.35 * n)
    colors = {"generator": "#4C72B0", "generator_mean": "#2F4B7C", "anchor": "#999999", "sanity": "#DD8452"}
    labels = ["Generator mean" if g == "generator_mean" else _label(m) for g, m in zip(table["group"], table["method"])]
    y = np.arange(n)[::-1]
    for i, m in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        v = table[m].to_numpy(dtype=float)
        lo = table[f"{m}_ci_low"].to_numpy(dtype=float)
        hi = table[f"{m}_ci_high"].to_numpy(dtype=float)
        err = np.vstack([np.where(np.isfinite(lo), v - lo, 0), np.where(np.isfinite(hi), hi - v, 0)])
        ax.barh(y, np.nan_to_num(v), xerr=err, color=[colors.get(g, "#4C72B0") for g in table["group"]],
                capsize=2, ecolor="black")
        ax.set_yticks(y)
        ax.set_yticklabels(labels if i == 0 else [""] * n, fontsize=8)
        ax.set_title(f"{METRIC_LABELS[m]} {'↑' if stats.HIGHER_IS_BETTER[m] else '↓'}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_cos_sim_by_condition(table: pd.DataFrame, conditions: Sequence[str], path: Path) -> str | None:
    if not conditions:
        return None
    fig = _figure(max(5.0, 1.1 * len(conditions) + 2.5), 4.0)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(conditions))
    for _, r in table.iterrows():
        name = "Generator mean" if r["method"] == "generator_mean" else _label(r["method"])
        style = dict(color="black", linewidth=2.5) if r["method"] == "generator_mean" else {}
        ax.plot(x, r[list(conditions)].to_numpy(dtype=float), marker="o", label=name, **style)
    ax.set_xticks(x)
    ax.set_xticklabels(conditions, rotation=20, fontsize=8)
    ax.set_ylabel("CosSim (mean over blocks)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, path)


def plot_hierarchy(table: pd.DataFrame, path: Path) -> str | None:
    cols = list(HIERARCHY_COLUMNS)
    fig = _figure(7.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    n = len(table)
    width = 0.8 / max(n, 1)
    x = np.arange(len(cols))
    for i, (_, r) in enumerate(table.iterrows()):
        ax.bar(x + (i - (n - 1) / 2) * width, np.nan_to_num(r[cols].to_numpy(dtype=float)), width, label=r["query_set"])
    ax.set_xticks(x)
    ax.set_xticklabels([METRIC_LABELS[c] for c in cols], fontsize=8)
    ax.set_ylabel("mean image-to-panel cosine")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_city_heatmap(table: pd.DataFrame, path: Path) -> str | None:
    values = table.drop(columns="city").to_numpy(dtype=float)
    if values.size == 0:
        return None
    cities, methods = list(table["city"]), [_label(c) for c in table.columns if c != "city"]
    fig = _figure(1.2 + 0.9 * len(methods), 1.0 + 0.35 * len(cities))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis")
    ax.set_xticks(np.arange(len(methods)))
    ax.set_xticklabels(methods, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(cities)))
    ax.set_yticklabels(cities, fontsize=8)
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white")
    fig.colorbar(im, ax=ax, label="CosSim")
    return _save(fig, path)


# -- writing --------------------------------------------------------------------------------


def _json_clean(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, pd.DataFrame):
        return _json_clean(obj.to_dict(orient="records"))
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(float(obj)) else None
    if isinstance(obj, (str, int)) or obj is None:
        return obj
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)


def _as_infos(run_info: Any) -> list[dict]:
    if run_info is None:
        return []
    if isinstance(run_info, Mapping):
        return [dict(run_info)]
    return [dict(r) for r in run_info]


def _methods_of(units: pd.DataFrame, condition: str) -> list[str]:
    return sorted(map(str, units.loc[units["condition"] == condition, "method"].unique()))


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8")


def _safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._") or "encoder"


def build_report(
    results_df: pd.DataFrame,
    out_dir: str | os.PathLike,
    *,
    run_info: Mapping | Sequence[Mapping] | None = None,
    seed: int = 42,
    n_resamples: int = 5000,
    confidence: float = 0.95,
    rank_resamples: int = 2000,
    clip_scores: pd.DataFrame | None = None,
    allow_mixed_encoders: bool = False,
    plots: bool = True,
    title: str = "GeoFidelity-Bench report",
) -> dict:
    """Writes ``report.md``, ``report.json``, ``tables/*.csv`` and ``plots/*.png`` to ``out_dir``.

    Args:
        results_df: result rows (SPEC section 7 columns; a ``run`` column is optional).
        out_dir: output folder (created).
        run_info: the ``run.json`` of the results (a dict) or a list of them (as returned by
            :func:`load_results`); used for the parameters section and n/a reasons.
        seed, n_resamples, confidence: every bootstrap (paired, city, block).
        rank_resamples: city bootstraps of the rank-stability table.
        clip_scores: per-panel CLIP scores (:func:`geofidelity_bench.clip_alignment.score_panels`);
            default: the ``clip_alignment.csv`` files named in ``run_info`` (``_clip_alignment``).
        allow_mixed_encoders: with several encoders in ``results_df``, write one sub-report per
            encoder (``out_dir/encoder_<name>/``) and an index; otherwise raise.
        plots: write the PNG plots.

    Returns:
        The content of ``report.json`` (tables as records, parameters, skip reasons), plus
        ``"out_dir"``.

    Raises:
        ReportError: mixed encoders without ``allow_mixed_encoders``, missing required
            columns, or a (method, condition, block) repeated within one run.
    """
    out = Path(out_dir)
    infos = _as_infos(run_info)
    if not isinstance(results_df, pd.DataFrame):
        raise ReportError(f"results_df must be a pandas DataFrame, got {type(results_df).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in results_df.columns]
    if missing:
        raise ReportError(f"results lack required column(s) {missing}")
    if results_df.empty:
        raise ReportError("results are empty")
    if clip_scores is None:
        clip_scores = load_clip_scores(infos)
    encoders = _encoders(results_df)
    _check_encoders(results_df, allow_mixed_encoders)
    params = {"seed": int(seed), "n_resamples": int(n_resamples), "rank_resamples": int(rank_resamples),
              "confidence": float(confidence), "interval": "percentile bootstrap",
              "rng": "numpy.random.default_rng(seed), one fresh generator per estimate",
              "prompt_comparisons": [f"{a} - {b}" for a, b in PROMPT_COMPARISONS],
              "delta_metrics": list(DELTA_METRICS), "control_metrics": list(CONTROL_METRICS),
              "leaderboard_condition": MAIN_CONDITION, "leaderboard_metrics": list(LEADERBOARD_METRICS),
              "lower_is_better": sorted(stats.LOWER_IS_BETTER), "encoders": encoders}
    if len(encoders) > 1:
        return _build_mixed(results_df, out, infos, encoders, params, clip_scores, title, plots)
    reason_sources = list(infos)
    if isinstance(results_df.attrs.get("nan_reasons"), (list, Mapping)):
        reason_sources.append({"nan_reasons": results_df.attrs["nan_reasons"]})
    ctx = _Context(results_df, reason_sources, seed=seed, n_resamples=n_resamples, rank_resamples=rank_resamples,
                   confidence=confidence)
    params["pair_keys"] = list(ctx.pair_keys)
    tables: list[Table] = [
        table_hierarchy(ctx),
        table_cos_sim_by_condition(ctx),
        table_prompt_deltas(ctx),
        table_leave_one_city_out(ctx),
        table_controls(ctx),
        *tables_clip(ctx, clip_scores),
        table_leaderboard(ctx),
        table_rank_stability(ctx),
        table_city_by_method(ctx),
        table_summary(ctx),
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    by_name = {t.name: t for t in tables}
    table_json: dict[str, Any] = {}
    for t in tables:
        entry: dict[str, Any] = {"title": t.title, "status": "ok" if t.ok else "skipped"}
        if t.ok:
            rel = f"tables/{t.name}.csv"
            t.data.to_csv(out / rel, index=False)
            entry.update(csv=rel, caption=t.caption, notes=t.notes, rows=t.data)
        else:
            entry.update(reason=t.reason)
        table_json[t.name] = entry
    plot_json: dict[str, Any] = {}
    if plots:
        plot_json = _write_plots(ctx, by_name, out)
    inputs = {
        "n_rows": int(len(results_df)),
        "runs": infos,
        "methods": sorted(map(str, ctx.units["method"].unique())),
        "generated_conditions": ctx.conditions,
        "anchor_methods": _methods_of(ctx.units, stats.ANCHOR_CONDITION),
        "sanity_methods": _methods_of(ctx.units, stats.SANITY_CONDITION),
        "n_blocks": int(ctx.units["block_id"].nunique()),
        "n_cities": ctx.n_cities(ctx.units),
        "clip_alignment": clip_scores is not None and len(clip_scores) > 0,
        "benchmark_fingerprints": sorted({str(i["benchmark"]["fingerprint"]) for i in infos
                                          if isinstance(i.get("benchmark"), Mapping)
                                          and i["benchmark"].get("fingerprint")}),
    }
    report = {"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params, "inputs": inputs,
              "metric_na": ctx.metric_na, "notes": ctx.notes, "tables": table_json, "plots": plot_json}
    report = _json_clean(report)
    _write_json(out / "report.json", report)
    (out / "report.md").write_text(_markdown(title, report, tables), encoding="utf-8")
    report["out_dir"] = str(out)
    return report


def _write_plots(ctx: _Context, tables: Mapping[str, Table], out: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}

    def run(name: str, table: str, fn) -> None:
        t = tables[table]
        if not t.ok:
            res[name] = {"status": "skipped", "reason": f"table {table} skipped: {t.reason}"}
            return
        path = fn(t.data, out / "plots" / f"{name}.png")
        res[name] = ({"status": "ok", "png": f"plots/{name}.png"} if path
                     else {"status": "skipped", "reason": "nothing to plot"})

    run("leaderboard", "leaderboard", lambda d, p: plot_leaderboard(d, p, ctx.metric_na))
    run("cos_sim_by_condition", "cos_sim_by_condition", lambda d, p: plot_cos_sim_by_condition(d, ctx.conditions, p))
    run("hierarchy", "hierarchy", plot_hierarchy)
    run("city_heatmap", "city_by_method", plot_city_heatmap)
    return res


def _markdown(title: str, report: Mapping, tables: Sequence[Table]) -> str:
    p, inp = report["parameters"], report["inputs"]
    lines = [f"# {title}", ""]
    lines += [
        f"- encoder: {', '.join(p['encoders']) or 'not recorded'}",
        f"- inputs: {inp['n_rows']} result rows; {inp['n_blocks']} blocks in {inp['n_cities']} cities; methods "
        f"{', '.join(inp['methods'])}; generated conditions {', '.join(inp['generated_conditions']) or 'none'}",
        "- runs: " + (", ".join(f"{r['_run']} ({r.get('_dir', '')})" if r.get("_run") else "run info given directly"
                                for r in inp["runs"]) or "no run.json"),
    ]
    if inp["benchmark_fingerprints"]:
        lines.append(f"- benchmark fingerprint: {', '.join(f[:16] for f in inp['benchmark_fingerprints'])}")
    lines += [
        f"- statistics: {p['interval']} {p['confidence']:.0%} intervals, {p['n_resamples']} resamples, "
        f"seed {p['seed']} ({p['rng']}); rank stability {p['rank_resamples']} city resamples; pairs matched by "
        f"({', '.join(p.get('pair_keys', []))})",
        f"- lower is better: {', '.join(p['lower_is_better'])}; every other reported metric: higher is better",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
        "",
    ]
    for metric, why in report["metric_na"].items():
        lines.append(f"- n/a: `{metric}`: {why}")
    for note in report["notes"]:
        lines.append(f"- note: {note}")
    if report["metric_na"] or report["notes"]:
        lines.append("")
    for t in tables:
        if t.name == "summary_method_condition":
            if t.ok:
                lines += [f"## {t.title}", "", "CSV only: `tables/summary_method_condition.csv`.", ""]
            continue
        lines += [f"## {t.title}", ""]
        if not t.ok:
            lines += [f"skipped: {t.reason}", ""]
            continue
        lines += [t.caption, "", t.markdown, ""]
        for note in t.notes:
            lines.append(f"- {note}")
        if t.notes:
            lines.append("")
        lines += [f"CSV: `tables/{t.name}.csv`", ""]
    plots = report.get("plots") or {}
    if plots:
        lines += ["## Plots", ""]
        for name, entry in plots.items():
            if entry.get("status") == "ok":
                lines += [f"![{name}]({entry['png']})", ""]
            else:
                lines += [f"- {name}: skipped: {entry.get('reason')}"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _build_mixed(results_df, out: Path, infos, encoders, params, clip_scores, title, plots) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    subs = {}
    for enc in encoders:
        sub_df = results_df[results_df["encoder"] == enc]
        runs = set(sub_df["run"]) if "run" in sub_df.columns else None
        sub_infos = [i for i in infos if runs is None or i.get("_run") in runs]
        sub_clip = clip_scores
        if clip_scores is not None and runs is not None and "run" in clip_scores.columns:
            sub_clip = clip_scores[clip_scores["run"].isin(runs)]
        folder = f"encoder_{_safe_name(enc)}"
        rep = build_report(sub_df, out / folder, run_info=sub_infos, seed=params["seed"],
                           n_resamples=params["n_resamples"], confidence=params["confidence"],
                           rank_resamples=params["rank_resamples"], clip_scores=sub_clip, plots=plots,
                           title=f"{title}: encoder {enc}")
        subs[enc] = {"folder": folder, "report_md": f"{folder}/report.md",
                     "tables": {k: v["status"] for k, v in rep["tables"].items()}}
    report = _json_clean({"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params,
                          "notes": ["the results mix encoders; one sub-report per encoder (scores across encoders "
                                    "are not comparable)"],
                          "inputs": {"n_rows": int(len(results_df)), "runs": infos}, "sub_reports": subs})
    _write_json(out / "report.json", report)
    lines = [f"# {title}", "", "The results mix encoders, whose scores are not comparable; one report per encoder:", ""]
    lines += [f"- `{enc}`: [{s['report_md']}]({s['report_md']})" for enc, s in subs.items()]
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report["out_dir"] = str(out)
    return report


def report_from_dirs(
    dirs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike | None = None,
    *,
    allow_mixed_encoders: bool = False,
    **kwargs: Any,
) -> dict:
    """:func:`load_results` then :func:`build_report`; ``out_dir`` defaults to ``<first dir>/report``."""
    df, infos = load_results(dirs, allow_mixed_encoders=allow_mixed_encoders)
    out = Path(out_dir) if out_dir is not None else Path(list(dirs)[0]) / "report"
    return build_report(df, out, run_info=infos, allow_mixed_encoders=allow_mixed_encoders, **kwargs)


__all__ = [
    "CLIP_FILE",
    "PROMPT_COMPARISONS",
    "RESULTS_FILE",
    "RUN_FILE",
    "ReportError",
    "Table",
    "build_report",
    "load_clip_scores",
    "load_results",
    "nan_reasons_from_run_info",
    "read_results_csv",
    "report_from_dirs",
]
