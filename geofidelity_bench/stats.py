"""The paper's analyses of result tables (docs/benchmark.md section 7, Statistics and analyses):
paired deltas between prompt conditions, city-balanced estimates, leave-one-city-out, rank
stability, control benefits; built on the bootstrap primitives of :mod:`geofidelity_bench.bootstrap`
(paired bootstrap, bootstrap mean intervals, Spearman/AUROC with block-bootstrap intervals), whose
names are re-exported here.

Conventions shared by every function here:

- **Pairing.** Two prompt conditions are compared on matched units, by default
  ``(method, block_id)``: the difference of a unit is ``value(cond_a) - value(cond_b)``.
  Units present in only one condition, and units with a NaN on either side, are dropped and
  *counted* (never silently); fewer than 2 remaining pairs is an error.
- **Bootstrap.** Percentile intervals from ``numpy.random.default_rng(seed)``; every result
  records ``seed``, ``n_resamples`` and ``confidence`` (:mod:`geofidelity_bench.bootstrap`).
- **Direction.** :data:`HIGHER_IS_BETTER` says which way each metric points (MMD, DCSF and
  GAAS are lower-is-better). Paired deltas are reported raw (``a - b``); *benefits*
  (:func:`control_benefits`) and *ranks* (:func:`rank_stability`) are direction-aware.
- **Errors.** Bad input raises ``ValueError`` naming the problem: length mismatch, NaN in a
  paired array, fewer than 2 pairs, an unknown metric column or a condition with no rows.

Example:
    >>> import numpy as np
    >>> r = paired_bootstrap(np.array([0.52, 0.61, 0.58, 0.49]), np.array([0.50, 0.55, 0.57, 0.50]))
    >>> round(r.mean, 4), r.n, r.seed
    (0.02, 4, 42)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .bootstrap import (  # noqa: F401  (the primitives, re-exported: their home is bootstrap.py)
    BLOCK_STATISTICS,
    BlockBootstrapResult,
    BootstrapResult,
    MeanCI,
    auroc,
    block_bootstrap_ci,
    bootstrap_mean_ci,
    bootstrap_means,
    check_confidence,
    check_resamples,
    paired_bootstrap,
    percentile_ci,
    spearman,
    wilcoxon_p,
)
from .evaluation import ANCHOR_CONDITION, ANCHOR_METHODS, METRIC_COLUMNS, RESULT_COLUMNS
from .metrics import catalog

#: Metrics with a direction (from :mod:`geofidelity_bench.metrics.catalog`). ``diversity_gap`` and the
#: negative similarities (``sim_same_*``, ``sim_random_city``) have none: pass ``higher_is_better`` explicitly.
HIGHER_IS_BETTER: Mapping[str, bool] = dict(catalog.HIGHER_IS_BETTER)
LOWER_IS_BETTER = frozenset(m for m, hib in HIGHER_IS_BETTER.items() if not hib)
SANITY_CONDITION = "sanity"
SANITY_METHODS = ("sanity_augmented_heldout", "sanity_world")
DEFAULT_PAIR_KEYS = ("method", "block_id")


def metric_higher_is_better(metric: str, higher_is_better: bool | None = None) -> bool:
    """The direction of ``metric``; an explicit ``higher_is_better`` wins.

    Raises:
        ValueError: the metric has no known direction and none was given.
    """
    if higher_is_better is not None:
        return bool(higher_is_better)
    try:
        return HIGHER_IS_BETTER[metric]
    except KeyError:
        raise ValueError(
            f"metric {metric!r} has no known direction (known: {sorted(HIGHER_IS_BETTER)}); "
            "pass higher_is_better=True or False"
        ) from None


# -- validation helpers -------------------------------------------------------------------


def _check_metric(df: pd.DataFrame, metric: str) -> None:
    if metric not in df.columns:
        known = [c for c in df.columns if c in METRIC_COLUMNS] or list(df.columns)
        raise ValueError(f"unknown metric {metric!r}: the results have no such column (metric columns: {known})")


def _check_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} needs column(s) {missing}, which the results do not have")


def _check_conditions(df: pd.DataFrame, conditions: Iterable[str]) -> None:
    _check_columns(df, ["condition"], "pairing by condition")
    present = set(df["condition"].dropna().unique())
    for cond in conditions:
        if cond not in present:
            raise ValueError(f"no rows with condition {cond!r} (conditions present: {sorted(map(str, present))})")


def _filter_methods(df: pd.DataFrame, methods: Sequence[str] | None) -> pd.DataFrame:
    if methods is None:
        return df
    methods = list(methods)
    present = set(df["method"].unique())
    missing = [m for m in methods if m not in present]
    if missing:
        raise ValueError(f"unknown method(s) {missing} (methods present: {sorted(map(str, present))})")
    return df[df["method"].isin(methods)]


# -- pairing result rows ------------------------------------------------------------------


@dataclass(frozen=True)
class Pairing:
    """Rows of two conditions matched by ``keys``.

    Attributes:
        pairs: one row per matched unit: the key columns, ``city`` (when the results have it),
            ``a``, ``b`` and ``diff = a - b``; NaN pairs already removed.
        n_only_a, n_only_b: units present only under ``cond_a`` / only under ``cond_b``.
        n_nan_dropped: matched units dropped because the metric is NaN on either side.
    """

    metric: str
    cond_a: str
    cond_b: str
    keys: tuple[str, ...]
    pairs: pd.DataFrame = field(repr=False, compare=False)
    n_only_a: int = 0
    n_only_b: int = 0
    n_nan_dropped: int = 0

    @property
    def n_pairs(self) -> int:
        return int(len(self.pairs))

    def counts(self) -> dict[str, int]:
        return {
            "n_pairs": self.n_pairs,
            "n_only_a": self.n_only_a,
            "n_only_b": self.n_only_b,
            "n_nan_dropped": self.n_nan_dropped,
        }


def pair_conditions(
    df: pd.DataFrame,
    metric: str,
    cond_a: str,
    cond_b: str,
    *,
    methods: Sequence[str] | None = None,
    by: Sequence[str] = DEFAULT_PAIR_KEYS,
    min_pairs: int = 2,
) -> Pairing:
    """Matches the rows of ``cond_a`` and ``cond_b`` by ``by`` (default ``(method, block_id)``).

    Raises:
        ValueError: unknown metric, a condition without rows, duplicate units within a
            condition, or fewer than ``min_pairs`` usable pairs (the message gives the counts).
    """
    keys = tuple(by)
    _check_metric(df, metric)
    _check_columns(df, keys, "pairing")
    _check_conditions(df, [cond_a, cond_b])
    df = _filter_methods(df, methods) if methods is not None else df
    extra = ["city"] if "city" in df.columns and "city" not in keys else []
    sides = {}
    for label, cond in (("a", cond_a), ("b", cond_b)):
        sub = df.loc[df["condition"] == cond, [*keys, *extra, metric]]
        dup = sub.duplicated(list(keys), keep=False)
        if dup.any():
            example = tuple(sub.loc[dup, list(keys)].iloc[0])
            raise ValueError(
                f"condition {cond!r} has {int(dup.sum())} rows sharing a unit {keys}, e.g. {example}; "
                "each unit must appear once per condition (pair within a run by adding 'run' to by=)"
            )
        sides[label] = sub.rename(columns={metric: label})
    a, b = sides["a"], sides["b"]
    merged = a.merge(b.drop(columns=extra), on=list(keys), how="outer", indicator=True)
    n_only_a = int((merged["_merge"] == "left_only").sum())
    n_only_b = int((merged["_merge"] == "right_only").sum())
    both = merged[merged["_merge"] == "both"].drop(columns="_merge")
    finite = np.isfinite(both["a"].to_numpy(dtype=float)) & np.isfinite(both["b"].to_numpy(dtype=float))
    n_nan = int((~finite).sum())
    pairs = both[finite].copy()
    pairs["a"] = pairs["a"].astype(float)
    pairs["b"] = pairs["b"].astype(float)
    pairs["diff"] = pairs["a"] - pairs["b"]
    pairs = pairs.sort_values(list(keys), kind="mergesort").reset_index(drop=True)
    if len(pairs) < min_pairs:
        raise ValueError(
            f"{metric}: {cond_a} - {cond_b} has {len(pairs)} usable paired unit(s) {keys}, need at least "
            f"{min_pairs} ({n_only_a} only in {cond_a}, {n_only_b} only in {cond_b}, {n_nan} dropped for NaN)"
        )
    return Pairing(metric, cond_a, cond_b, keys, pairs, n_only_a, n_only_b, n_nan)


@dataclass(frozen=True)
class PairedDelta:
    """``cond_a - cond_b`` on ``metric``, paired by unit, with its bootstrap and pairing counts."""

    metric: str
    cond_a: str
    cond_b: str
    result: BootstrapResult
    n_pairs: int
    n_only_a: int
    n_only_b: int
    n_nan_dropped: int
    keys: tuple[str, ...] = DEFAULT_PAIR_KEYS
    pairs: pd.DataFrame = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    # the bootstrap numbers, one attribute away
    @property
    def mean(self) -> float:
        return self.result.mean

    @property
    def ci_low(self) -> float:
        return self.result.ci_low

    @property
    def ci_high(self) -> float:
        return self.result.ci_high

    @property
    def positive_share(self) -> float:
        return self.result.positive_share

    @property
    def wilcoxon_p(self) -> float:
        return self.result.wilcoxon_p

    def to_dict(self) -> dict[str, Any]:
        d = {
            "metric": self.metric,
            "comparison": f"{self.cond_a} - {self.cond_b}",
            "cond_a": self.cond_a,
            "cond_b": self.cond_b,
            "pair_keys": list(self.keys),
            "n_pairs": self.n_pairs,
            "n_only_a": self.n_only_a,
            "n_only_b": self.n_only_b,
            "n_nan_dropped": self.n_nan_dropped,
        }
        d.update(self.result.to_dict())
        return d


def paired_deltas(
    df: pd.DataFrame,
    metric: str,
    cond_a: str,
    cond_b: str,
    *,
    methods: Sequence[str] | None = None,
    by: Sequence[str] = DEFAULT_PAIR_KEYS,
    n_resamples: int = 5000,
    seed: int = 42,
    confidence: float = 0.95,
) -> PairedDelta:
    """Paired difference ``cond_a - cond_b`` of ``metric`` over matched (method, block) units.

    Units only in one condition and units with a NaN metric are dropped and counted in the
    result (``n_only_a``, ``n_only_b``, ``n_nan_dropped``).

    Example:
        >>> df = pd.DataFrame({"method": ["m"] * 4, "block_id": ["b1", "b2"] * 2,
        ...                    "condition": ["L1", "L1", "L0", "L0"], "cos_sim": [0.6, 0.5, 0.5, 0.45]})
        >>> r = paired_deltas(df, "cos_sim", "L1", "L0", n_resamples=100)
        >>> round(r.mean, 3), r.n_pairs
        (0.075, 2)
    """
    pairing = pair_conditions(df, metric, cond_a, cond_b, methods=methods, by=by)
    res = paired_bootstrap(
        pairing.pairs["a"].to_numpy(),
        pairing.pairs["b"].to_numpy(),
        n_resamples=n_resamples,
        seed=seed,
        confidence=confidence,
    )
    return PairedDelta(
        metric=metric,
        cond_a=cond_a,
        cond_b=cond_b,
        result=res,
        n_pairs=pairing.n_pairs,
        n_only_a=pairing.n_only_a,
        n_only_b=pairing.n_only_b,
        n_nan_dropped=pairing.n_nan_dropped,
        keys=pairing.keys,
        pairs=pairing.pairs,
    )


# -- city-level analyses ------------------------------------------------------------------


@dataclass(frozen=True)
class CityBalanced:
    """City-balanced ``cond_a - cond_b``: each city weighs the same.

    Attributes:
        mean, ci_low, ci_high: mean over cities of the city deltas, with a percentile
            interval from resampling cities.
        n_cities, n_cities_positive: cities, and cities whose delta is > 0.
        per_city: city, n_pairs, mean_a, mean_b, delta.
        result: the :class:`BootstrapResult` over city means (also has Wilcoxon across cities).
    """

    metric: str
    cond_a: str
    cond_b: str
    mean: float
    ci_low: float
    ci_high: float
    n_cities: int
    n_cities_positive: int
    n_pairs: int
    seed: int
    n_resamples: int
    confidence: float
    result: BootstrapResult
    per_city: pd.DataFrame = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "comparison": f"{self.cond_a} - {self.cond_b}",
            "mean": self.mean,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n_cities": self.n_cities,
            "n_cities_positive": self.n_cities_positive,
            "n_pairs": self.n_pairs,
            "wilcoxon_p_cities": self.result.wilcoxon_p,
            "seed": self.seed,
            "n_resamples": self.n_resamples,
            "confidence": self.confidence,
        }


def _city_table(pairs: pd.DataFrame) -> pd.DataFrame:
    if "city" not in pairs.columns:
        raise ValueError("city-level analyses need a 'city' column in the results")
    grouped = pairs.groupby("city", sort=True)
    return pd.DataFrame(
        {
            "n_pairs": grouped.size(),
            "mean_a": grouped["a"].mean(),
            "mean_b": grouped["b"].mean(),
        }
    ).assign(delta=lambda t: t["mean_a"] - t["mean_b"]).reset_index()


def city_balanced(
    df: pd.DataFrame,
    metric: str,
    cond_a: str,
    cond_b: str,
    n_resamples: int = 5000,
    seed: int = 42,
    *,
    confidence: float = 0.95,
    methods: Sequence[str] | None = None,
    by: Sequence[str] = DEFAULT_PAIR_KEYS,
) -> CityBalanced:
    """City-balanced delta: mean within (city, condition) first, then bootstrap over cities.

    Units are paired first (as in :func:`paired_deltas`) so that both condition means of a
    city cover the same (method, block) units; the city delta is
    ``mean_a(city) - mean_b(city)``, the estimate their unweighted mean over cities, and the
    interval a percentile bootstrap over cities.

    Raises:
        ValueError: as :func:`paired_deltas`, or fewer than 2 cities.
    """
    pairing = pair_conditions(df, metric, cond_a, cond_b, methods=methods, by=by)
    table = _city_table(pairing.pairs)
    if len(table) < 2:
        raise ValueError(f"a city-balanced estimate needs at least 2 cities, got {len(table)}")
    res = paired_bootstrap(
        table["mean_a"].to_numpy(),
        table["mean_b"].to_numpy(),
        n_resamples=n_resamples,
        seed=seed,
        confidence=confidence,
    )
    return CityBalanced(
        metric=metric,
        cond_a=cond_a,
        cond_b=cond_b,
        mean=res.mean,
        ci_low=res.ci_low,
        ci_high=res.ci_high,
        n_cities=int(len(table)),
        n_cities_positive=int((table["delta"] > 0).sum()),
        n_pairs=pairing.n_pairs,
        seed=int(seed),
        n_resamples=res.n_resamples,
        confidence=res.confidence,
        result=res,
        per_city=table,
    )


def leave_one_city_out(
    df: pd.DataFrame,
    metric: str,
    cond_a: str,
    cond_b: str,
    *,
    methods: Sequence[str] | None = None,
    by: Sequence[str] = DEFAULT_PAIR_KEYS,
) -> pd.DataFrame:
    """The matched delta ``cond_a - cond_b`` recomputed with each city removed.

    Returns:
        One row per city: ``city_removed``, ``n_pairs`` (remaining), ``delta`` (mean paired
        difference without that city), ``change`` (``delta`` minus the all-city delta) and
        ``positive_share``. ``df.attrs`` holds ``delta_all`` and ``n_pairs_all``.

    Raises:
        ValueError: as :func:`paired_deltas`, or fewer than 2 cities.
    """
    pairing = pair_conditions(df, metric, cond_a, cond_b, methods=methods, by=by)
    pairs = pairing.pairs
    if "city" not in pairs.columns:
        raise ValueError("leave-one-city-out needs a 'city' column in the results")
    cities = sorted(pairs["city"].unique())
    if len(cities) < 2:
        raise ValueError(f"leave-one-city-out needs at least 2 cities, got {len(cities)}")
    full = float(pairs["diff"].mean())
    rows = []
    for city in cities:
        rest = pairs.loc[pairs["city"] != city, "diff"].to_numpy()
        delta = float(rest.mean())
        rows.append(
            {
                "city_removed": city,
                "n_pairs": int(rest.size),
                "delta": delta,
                "change": delta - full,
                "positive_share": float(np.mean(rest > 0)),
            }
        )
    out = pd.DataFrame(rows)
    out.attrs.update(metric=metric, comparison=f"{cond_a} - {cond_b}", delta_all=full, n_pairs_all=pairing.n_pairs)
    return out


RANK_WEIGHTINGS = ("city", "block")


@dataclass(frozen=True)
class RankStability:
    """Method ranks under one condition across city bootstraps.

    ``table`` columns: method, n_blocks, n_cities (the method's), score (city-balanced: the mean
    over the method's cities of its per-city means; block-weighted: the mean over its blocks),
    rank (on the full data; 1 = best), rank1_prob, rank_ci_low, rank_ci_high (the percentile
    ``confidence`` interval of the bootstrap ranks, as for every bootstrap here), mean_rank.
    ``weighting`` is ``"city"`` (default) or ``"block"``.
    """

    metric: str
    condition: str
    higher_is_better: bool
    n_cities: int
    n_resamples: int
    seed: int
    confidence: float
    table: pd.DataFrame = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    weighting: str = "city"

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "condition": self.condition,
            "higher_is_better": self.higher_is_better,
            "weighting": self.weighting,
            "n_cities": self.n_cities,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "confidence": self.confidence,
            "table": self.table.to_dict(orient="records"),
        }


def _ranks_from_scores(scores: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """(R, m) scores -> (R, m) competition ranks ("min": ties share the best rank), 1 = best.

    A NaN score (a method with no block in the resample) ranks after every finite one.
    """
    key = -scores if higher_is_better else scores.copy()
    key = np.where(np.isfinite(key), key, np.inf)
    return 1 + (key[:, None, :] < key[:, :, None]).sum(axis=2)


def rank_stability(
    df: pd.DataFrame,
    metric: str,
    condition: str,
    n_resamples: int = 2000,
    seed: int = 42,
    higher_is_better: bool | None = None,
    *,
    methods: Sequence[str] | None = None,
    confidence: float = 0.95,
    weighting: str = "city",
) -> RankStability:
    """How stable the ranking of methods under ``condition`` is when cities are resampled
    (docs/benchmark.md section 7, Statistics and analyses).

    Cluster bootstrap: each resample draws cities with replacement (a city drawn twice counts
    twice). With ``weighting="city"`` (the default, as the paper's city-balanced analyses) each
    method is first averaged within each city (``groupby([city, method]).mean()``) and its score
    in a resample is the mean of its city means over the drawn cities, so every city weighs the
    same whatever its number of blocks. With ``weighting="block"`` a method's score is the mean
    over all its blocks in the drawn cities (cities with more blocks weigh more). Ranks are
    direction-aware (rank 1 = best; lower-is-better metrics rank ascending), ties share the best
    rank, a method without a block in the drawn cities ranks last; rank intervals are percentile
    intervals of the bootstrap ranks.

    Raises:
        ValueError: unknown metric, condition or weighting, no direction known for the metric,
            fewer than 2 methods or 2 cities with finite values.
    """
    if weighting not in RANK_WEIGHTINGS:
        raise ValueError(f"weighting must be one of {RANK_WEIGHTINGS}, got {weighting!r}")
    _check_metric(df, metric)
    _check_conditions(df, [condition])
    _check_columns(df, ["method", "city"], "rank stability")
    hib = metric_higher_is_better(metric, higher_is_better)
    n_resamples = check_resamples(n_resamples)
    confidence = check_confidence(confidence)
    sub = df[df["condition"] == condition]
    sub = _filter_methods(sub, methods) if methods is not None else sub
    sub = sub[np.isfinite(sub[metric].to_numpy(dtype=float)) & sub["city"].notna()]
    method_names = sorted(sub["method"].unique())
    cities = sorted(sub["city"].unique())
    if len(method_names) < 2:
        raise ValueError(
            f"rank stability needs at least 2 methods with finite {metric} under {condition}, got {len(method_names)}"
        )
    if len(cities) < 2:
        raise ValueError(f"rank stability needs at least 2 cities, got {len(cities)}")
    sums = sub.pivot_table(index="city", columns="method", values=metric, aggfunc="sum", fill_value=0.0)
    counts = sub.pivot_table(index="city", columns="method", values=metric, aggfunc="count", fill_value=0)
    sums = sums.reindex(index=cities, columns=method_names, fill_value=0.0).to_numpy(dtype=float)
    counts = counts.reindex(index=cities, columns=method_names, fill_value=0).to_numpy(dtype=float)
    if weighting == "city":
        # one unit per (city, method): the city mean, present where the method has a block there
        present = (counts > 0).astype(float)
        sums = np.where(counts > 0, sums / np.maximum(counts, 1.0), 0.0)
        weights = present
    else:
        weights = counts
    n_c = len(cities)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_c, size=(n_resamples, n_c))
    mult = np.zeros((n_resamples, n_c))
    np.add.at(mult, (np.repeat(np.arange(n_resamples), n_c), idx.ravel()), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = (mult @ sums) / (mult @ weights)
        full = sums.sum(axis=0) / weights.sum(axis=0)
    ranks = _ranks_from_scores(scores, hib)
    full_rank = _ranks_from_scores(full[None, :], hib)[0]
    intervals = np.array([percentile_ci(ranks[:, j].astype(float), confidence) for j in range(len(method_names))])
    table = pd.DataFrame(
        {
            "method": method_names,
            "n_blocks": counts.sum(axis=0).astype(int),
            "n_cities": (counts > 0).sum(axis=0).astype(int),
            "score": full,
            "rank": full_rank,
            "rank1_prob": (ranks == 1).mean(axis=0),
            "rank_ci_low": intervals[:, 0],
            "rank_ci_high": intervals[:, 1],
            "mean_rank": ranks.mean(axis=0),
        }
    ).sort_values(["rank", "method"], kind="mergesort").reset_index(drop=True)
    return RankStability(metric, condition, hib, n_c, n_resamples, int(seed), confidence, table, weighting)


# -- controls -----------------------------------------------------------------------------


def control_benefits(
    df: pd.DataFrame,
    metric: str,
    *,
    reference: str = "L1",
    controls: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    by: Sequence[str] = DEFAULT_PAIR_KEYS,
    higher_is_better: bool | None = None,
    n_resamples: int = 5000,
    seed: int = 42,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Benefit of the correct names: ``reference`` (L1) versus each control, paired by unit.

    ``benefit = L1 - control`` for higher-is-better metrics and ``control - L1`` for
    lower-is-better ones (MMD, DCSF, GAAS), so a positive benefit always means "the correct
    names help". The interval, positive share and Wilcoxon p refer to the benefit.

    Args:
        controls: control conditions; default: those of
            :data:`geofidelity_bench.prompts.CONTROL_CONDITIONS` present in ``df``.

    Returns:
        One row per control: control, metric, higher_is_better, sign (+1 or -1), n_pairs,
        mean_reference, mean_control (over the paired units), benefit, ci_low, ci_high,
        positive_share, n_positive, wilcoxon_p, wilcoxon_reason, n_only_reference,
        n_only_control, n_nan_dropped, seed, n_resamples, confidence.

    Raises:
        ValueError: unknown metric or direction, no reference rows, no control rows, or a
            control without enough pairs.
    """
    from .prompts import CONTROL_CONDITIONS

    _check_metric(df, metric)
    hib = metric_higher_is_better(metric, higher_is_better)
    _check_conditions(df, [reference])
    if controls is None:
        present = set(df["condition"].unique())
        controls = [c for c in CONTROL_CONDITIONS if c in present]
        if not controls:
            raise ValueError(f"no control rows (none of {list(CONTROL_CONDITIONS)} is present)")
    else:
        _check_conditions(df, controls)
    sign = 1 if hib else -1
    rows = []
    for control in controls:
        pairing = pair_conditions(df, metric, reference, control, methods=methods, by=by)
        ref = pairing.pairs["a"].to_numpy()
        ctl = pairing.pairs["b"].to_numpy()
        better, worse = (ref, ctl) if hib else (ctl, ref)
        res = paired_bootstrap(better, worse, n_resamples, seed, confidence)
        rows.append(
            {
                "control": control,
                "metric": metric,
                "higher_is_better": hib,
                "sign": sign,
                "n_pairs": pairing.n_pairs,
                "mean_reference": float(ref.mean()),
                "mean_control": float(ctl.mean()),
                "benefit": res.mean,
                "ci_low": res.ci_low,
                "ci_high": res.ci_high,
                "positive_share": res.positive_share,
                "n_positive": res.n_positive,
                "wilcoxon_p": res.wilcoxon_p,
                "wilcoxon_reason": res.wilcoxon_reason,
                "n_only_reference": pairing.n_only_a,
                "n_only_control": pairing.n_only_b,
                "n_nan_dropped": pairing.n_nan_dropped,
                "seed": int(seed),
                "n_resamples": res.n_resamples,
                "confidence": res.confidence,
            }
        )
    return pd.DataFrame(rows)


__all__ = [
    "ANCHOR_CONDITION",
    "ANCHOR_METHODS",
    "BLOCK_STATISTICS",
    "BlockBootstrapResult",
    "BootstrapResult",
    "CityBalanced",
    "HIGHER_IS_BETTER",
    "LOWER_IS_BETTER",
    "METRIC_COLUMNS",
    "MeanCI",
    "PairedDelta",
    "Pairing",
    "RESULT_COLUMNS",
    "RANK_WEIGHTINGS",
    "RankStability",
    "SANITY_CONDITION",
    "SANITY_METHODS",
    "auroc",
    "block_bootstrap_ci",
    "bootstrap_mean_ci",
    "bootstrap_means",
    "city_balanced",
    "control_benefits",
    "leave_one_city_out",
    "metric_higher_is_better",
    "pair_conditions",
    "paired_bootstrap",
    "paired_deltas",
    "rank_stability",
    "spearman",
    "wilcoxon_p",
]
