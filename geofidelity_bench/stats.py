"""Statistics of GeoFidelity-Bench (docs/benchmark.md section 7, Statistics and analyses): paired bootstrap, city-balanced estimates,
leave-one-city-out, rank stability, control benefits, Spearman/AUROC with block-bootstrap CIs.

Conventions shared by every function here:

- **Pairing.** Two prompt conditions are compared on matched units, by default
  ``(method, block_id)``: the difference of a unit is ``value(cond_a) - value(cond_b)``.
  Units present in only one condition, and units with a NaN on either side, are dropped and
  *counted* (never silently); fewer than 2 remaining pairs is an error.
- **Bootstrap.** Percentile intervals from ``numpy.random.default_rng(seed)``; every result
  records ``seed``, ``n_resamples`` and ``confidence``. Resamples are drawn as one index
  matrix per chunk with ``rng.integers`` (no Python loop over resamples); the chunk size
  depends only on the sample size, so a given ``(data, seed, n_resamples)`` always gives the
  same interval.
- **Direction.** :data:`HIGHER_IS_BETTER` says which way each metric points (MMD, DCSF and
  GAAS are lower-is-better). Paired deltas are reported raw (``a - b``); *benefits*
  (:func:`control_benefits`) and *ranks* (:func:`rank_stability`) are direction-aware.
- **Errors.** Bad input raises ``ValueError`` naming the problem: length mismatch, NaN in a
  paired array, fewer than 2 pairs, an unknown metric column or a condition with no rows.

The module stays whole (about 1,100 lines) because it is one subject: every function applies the
four conventions above, and its sections (paired bootstrap, pairing of result rows, city-level
analyses, controls, correlation with block-bootstrap intervals) build on the same resampling and
validation helpers; split, each part would import the others' privates.

Example:
    >>> import numpy as np
    >>> r = paired_bootstrap(np.array([0.52, 0.61, 0.58, 0.49]), np.array([0.50, 0.55, 0.57, 0.50]))
    >>> round(r.mean, 4), r.n, r.seed
    (0.02, 4, 42)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .evaluation import ANCHOR_CONDITION, ANCHOR_METHODS, METRIC_COLUMNS, RESULT_COLUMNS
from .metrics import catalog

#: Metrics with a direction (from :mod:`geofidelity_bench.metrics.catalog`). ``diversity_gap`` and the
#: negative similarities (``sim_same_*``, ``sim_random_city``) have none: pass ``higher_is_better`` explicitly.
HIGHER_IS_BETTER: Mapping[str, bool] = dict(catalog.HIGHER_IS_BETTER)
LOWER_IS_BETTER = frozenset(m for m, hib in HIGHER_IS_BETTER.items() if not hib)
SANITY_CONDITION = "sanity"
SANITY_METHODS = ("sanity_augmented_heldout", "sanity_world")
DEFAULT_PAIR_KEYS = ("method", "block_id")

# Bootstrap work is done in chunks of about this many matrix elements (memory bound only).
_CHUNK_ELEMENTS = 4_000_000


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


def _as_1d(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _check_confidence(confidence: float) -> float:
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(confidence)


def _check_resamples(n_resamples: int) -> int:
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples}")
    return int(n_resamples)


def _percentile_ci(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = stats[np.isfinite(stats)]
    if finite.size == 0:
        return math.nan, math.nan
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(finite, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return float(lo), float(hi)


def _chunk_rows(n_cols: int, n_rows: int) -> int:
    return max(1, min(n_rows, _CHUNK_ELEMENTS // max(1, n_cols)))


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


# -- paired bootstrap ---------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapResult:
    """A paired bootstrap of the differences ``x - y``.

    Attributes:
        mean: mean difference.
        ci_low, ci_high: percentile interval of the resampled means.
        positive_share: share of differences > 0 (``n_positive / n``).
        n_positive: number of differences > 0.
        wilcoxon_p: two-sided Wilcoxon signed-rank p-value (``scipy.stats.wilcoxon`` defaults:
            zero differences dropped); NaN when undefined, with ``wilcoxon_reason``.
        wilcoxon_reason: why ``wilcoxon_p`` is NaN, else ``None``.
        n: number of pairs.
        seed, n_resamples, confidence: the bootstrap parameters.
    """

    mean: float
    ci_low: float
    ci_high: float
    positive_share: float
    wilcoxon_p: float
    n: int
    seed: int
    n_resamples: int
    confidence: float = 0.95
    n_positive: int = 0
    wilcoxon_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def wilcoxon_p(differences: Any) -> tuple[float, str | None]:
    """Two-sided Wilcoxon signed-rank p-value of paired differences, and why it is NaN if so.

    Uses ``scipy.stats.wilcoxon(d)`` with its defaults (``zero_method="wilcox"``: zero
    differences are dropped; exact or normal approximation chosen by scipy).
    All-zero differences give ``(nan, "all differences are zero")``.
    """
    from scipy import stats as sstats

    d = _as_1d(differences, "differences")
    if d.size == 0:
        return math.nan, "no differences"
    if not np.any(d != 0):
        return math.nan, "all differences are zero"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=RuntimeWarning)
            warnings.simplefilter("ignore", category=UserWarning)
            p = float(sstats.wilcoxon(d).pvalue)
    except ValueError as err:  # scipy refuses some degenerate inputs
        return math.nan, f"scipy.stats.wilcoxon: {err}"
    if not math.isfinite(p):
        return math.nan, "scipy.stats.wilcoxon returned a non-finite p-value"
    return p, None


def bootstrap_means(values: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """``n_resamples`` means of ``values`` resampled with replacement (vectorized)."""
    values = _as_1d(values, "values")
    n = values.size
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples, dtype=np.float64)
    step = _chunk_rows(n, n_resamples)
    for start in range(0, n_resamples, step):
        stop = min(start + step, n_resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = values[idx].mean(axis=1)
    return out


def paired_bootstrap(
    x: Any, y: Any, n_resamples: int = 5000, seed: int = 42, confidence: float = 0.95
) -> BootstrapResult:
    """Paired bootstrap of the mean difference ``x - y`` (docs/benchmark.md section 7, Statistics and analyses).

    Pairs are resampled with replacement ``n_resamples`` times; the interval is the
    percentile interval of the resampled mean differences.

    Args:
        x, y: paired values, same length (>= 2), no NaN.
        n_resamples: bootstrap resamples (default 5,000).
        seed: seed of ``numpy.random.default_rng`` (recorded in the result).
        confidence: interval level (default 0.95).

    Returns:
        :class:`BootstrapResult` with the mean, interval, share of positive differences and
        the Wilcoxon signed-rank p-value.

    Raises:
        ValueError: length mismatch, NaN/inf values, fewer than 2 pairs.

    Example:
        >>> r = paired_bootstrap([1.0, 2.0, 3.0], [0.0, 2.0, 1.0], n_resamples=1000)
        >>> r.mean, r.n_positive
        (1.0, 2)
    """
    x = _as_1d(x, "x")
    y = _as_1d(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.size} and {y.size}")
    bad = ~(np.isfinite(x) & np.isfinite(y))
    if bad.any():
        raise ValueError(
            f"{int(bad.sum())} of {x.size} pairs contain NaN or inf; drop them first "
            "(paired_deltas does this and counts them)"
        )
    if x.size < 2:
        raise ValueError(f"a paired bootstrap needs at least 2 pairs, got {x.size}")
    n_resamples = _check_resamples(n_resamples)
    confidence = _check_confidence(confidence)
    d = x - y
    means = bootstrap_means(d, n_resamples, seed)
    lo, hi = _percentile_ci(means, confidence)
    p, reason = wilcoxon_p(d)
    n_pos = int(np.sum(d > 0))
    return BootstrapResult(
        mean=float(d.mean()),
        ci_low=lo,
        ci_high=hi,
        positive_share=n_pos / d.size,
        wilcoxon_p=p,
        n=int(d.size),
        seed=int(seed),
        n_resamples=n_resamples,
        confidence=confidence,
        n_positive=n_pos,
        wilcoxon_reason=reason,
    )


@dataclass(frozen=True)
class MeanCI:
    """Mean of one sample with a percentile bootstrap interval."""

    mean: float
    ci_low: float
    ci_high: float
    n: int
    seed: int
    n_resamples: int
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bootstrap_mean_ci(values: Any, n_resamples: int = 5000, seed: int = 42, confidence: float = 0.95) -> MeanCI:
    """Mean of ``values`` (NaN dropped) with a percentile bootstrap interval over its items.

    With fewer than 2 finite values the interval is NaN (the mean is still reported).
    """
    v = _as_1d(values, "values")
    v = v[np.isfinite(v)]
    n_resamples = _check_resamples(n_resamples)
    confidence = _check_confidence(confidence)
    if v.size == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0, int(seed), n_resamples, confidence)
    if v.size < 2:
        return MeanCI(float(v.mean()), math.nan, math.nan, int(v.size), int(seed), n_resamples, confidence)
    lo, hi = _percentile_ci(bootstrap_means(v, n_resamples, seed), confidence)
    return MeanCI(float(v.mean()), lo, hi, int(v.size), int(seed), n_resamples, confidence)


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
    n_resamples = _check_resamples(n_resamples)
    confidence = _check_confidence(confidence)
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
    intervals = np.array([_percentile_ci(ranks[:, j].astype(float), confidence) for j in range(len(method_names))])
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


# -- correlation and discrimination ---------------------------------------------------------


def _weighted_midranks(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Midranks of ``values`` in the sample where row i appears ``weights[r, i]`` times.

    Args:
        values: (n,) finite values.
        weights: (R, n) non-negative frequency weights.

    Returns:
        (R, n) float ranks (1-based, ties averaged); meaningless where the weight is 0.
        With unit weights these equal ``scipy.stats.rankdata(values)``.
    """
    order = np.argsort(values, kind="mergesort")
    sv = values[order]
    n = sv.size
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    new_group[1:] = sv[1:] != sv[:-1]
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    ends = np.append(starts[1:], n) - 1
    ws = weights[:, order]
    cum = np.cumsum(ws, axis=1)
    before = np.where(starts > 0, cum[:, np.maximum(starts - 1, 0)], 0.0)
    total = cum[:, ends] - before
    mid = before + (total + 1.0) / 2.0
    ranks = np.empty_like(ws)
    ranks[:, order] = mid[:, group]
    return ranks


def _weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Row-wise weighted Pearson r; x, y, w of shape (R, n). NaN for a constant resample."""
    sw = w.sum(axis=1, keepdims=True)
    mx = (w * x).sum(axis=1, keepdims=True) / sw
    my = (w * y).sum(axis=1, keepdims=True) / sw
    dx, dy = x - mx, y - my
    cov = (w * dx * dy).sum(axis=1)
    vx = (w * dx * dx).sum(axis=1)
    vy = (w * dy * dy).sum(axis=1)
    denom = np.sqrt(vx * vy)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / denom
    # a constant resample has no correlation (ranks of equal values are exactly equal)
    return np.clip(np.where(denom > 0, r, np.nan), -1.0, 1.0)


def _w_spearman(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _weighted_pearson(_weighted_midranks(x, w), _weighted_midranks(y, w), w)


def _w_auroc(w: np.ndarray, labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
    pos = labels.astype(bool)
    r = _weighted_midranks(scores, w)
    w1 = w[:, pos].sum(axis=1)
    w0 = w[:, ~pos].sum(axis=1)
    u = (w[:, pos] * r[:, pos]).sum(axis=1) - w1 * (w1 + 1.0) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = u / (w1 * w0)
    return np.where((w1 > 0) & (w0 > 0), auc, np.nan)


def _w_mean(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (w * x).sum(axis=1) / w.sum(axis=1)


def _w_positive_share(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return (w * (x > 0)).sum(axis=1) / w.sum(axis=1)


#: Named statistics for :func:`block_bootstrap_ci`: ``f(weights (R, n), *arrays) -> (R,)``.
BLOCK_STATISTICS: Mapping[str, Callable[..., np.ndarray]] = {
    "spearman": _w_spearman,
    "auroc": _w_auroc,
    "mean": _w_mean,
    "positive_share": _w_positive_share,
}


def _paired_finite(x: Any, y: Any, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    a = _as_1d(x, names[0])
    b = _as_1d(y, names[1])
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} must have the same length, got {a.size} and {b.size}")
    bad = ~(np.isfinite(a) & np.isfinite(b))
    if bad.any():
        raise ValueError(f"{int(bad.sum())} of {a.size} pairs contain NaN or inf; drop them first")
    if a.size < 2:
        raise ValueError(f"need at least 2 pairs, got {a.size}")
    return a, b


def _binary_labels(labels: Any) -> np.ndarray:
    lab = np.asarray(labels)
    if lab.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {lab.shape}")
    if lab.dtype == bool:
        return lab.astype(np.float64)
    labf = lab.astype(np.float64)
    if not np.all(np.isin(labf, (0.0, 1.0))):
        raise ValueError("labels must be boolean or 0/1")
    return labf


def spearman(x: Any, y: Any) -> float:
    """Spearman's rank correlation rho (average ranks for ties), as ``scipy.stats.spearmanr``.

    Returns NaN when either input is constant (no ranking to correlate).

    Raises:
        ValueError: length mismatch, NaN/inf, fewer than 2 pairs.

    Example:
        >>> spearman([1, 2, 3, 4], [10, 20, 30, 25])
        0.8
    """
    a, b = _paired_finite(x, y, ("x", "y"))
    return float(_w_spearman(np.ones((1, a.size)), a, b)[0])


def auroc(labels: Any, scores: Any) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties count 0.5.

    Equals the Mann-Whitney U statistic divided by ``n_pos * n_neg``.

    Raises:
        ValueError: length mismatch, labels not binary, NaN scores, or only one class present
            (the AUROC is undefined then; bootstrap resamples that lose a class are NaN instead
            and counted in ``n_undefined``).

    Example:
        >>> auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
        0.75
    """
    lab = _binary_labels(labels)
    sc = _as_1d(scores, "scores")
    if lab.shape != sc.shape:
        raise ValueError(f"labels and scores must have the same length, got {lab.size} and {sc.size}")
    if not np.all(np.isfinite(sc)):
        raise ValueError("scores contain NaN or inf")
    n_pos = int(lab.sum())
    if n_pos == 0 or n_pos == lab.size:
        raise ValueError(f"AUROC is undefined with a single class ({n_pos} positives of {lab.size})")
    return float(_w_auroc(np.ones((1, sc.size)), lab, sc)[0])


@dataclass(frozen=True)
class BlockBootstrapResult:
    """A statistic with a block-bootstrap percentile interval.

    ``n_undefined`` counts resamples where the statistic was undefined (NaN: a constant
    resample for Spearman, a single class for AUROC); the interval uses the others.
    """

    statistic: str
    estimate: float
    ci_low: float
    ci_high: float
    n: int
    n_blocks: int
    n_undefined: int
    seed: int
    n_resamples: int
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def block_bootstrap_ci(
    statistic: str | Callable[..., np.ndarray],
    *arrays: Any,
    blocks: Any,
    n_resamples: int = 5000,
    seed: int = 42,
    confidence: float = 0.95,
) -> BlockBootstrapResult:
    """A statistic of row-aligned arrays with a block (cluster) bootstrap interval.

    Each resample draws blocks with replacement and keeps all rows of a drawn block together
    (e.g. all methods of a block); a block drawn k times contributes its rows k times. The
    statistic is computed on frequency weights, vectorized over resamples.

    Args:
        statistic: ``"spearman"`` (arrays ``x, y``), ``"auroc"`` (``labels, scores``),
            ``"mean"`` (``x``), ``"positive_share"`` (``x``), or a callable
            ``f(weights, *arrays) -> (R,)`` where ``weights`` has shape (R, n).
        *arrays: 1-D arrays of equal length n, finite.
        blocks: length-n block labels (rows with the same label are resampled together).

    Returns:
        :class:`BlockBootstrapResult`; the estimate is the statistic on the full data.

    Raises:
        ValueError: unknown statistic, length mismatch, NaN, fewer than 2 blocks.
    """
    if isinstance(statistic, str):
        try:
            fn = BLOCK_STATISTICS[statistic]
        except KeyError:
            known = sorted(BLOCK_STATISTICS)
            raise ValueError(f"unknown statistic {statistic!r}; one of {known} or a callable") from None
        name = statistic
    else:
        fn, name = statistic, getattr(statistic, "__name__", "custom")
    if not arrays:
        raise ValueError("block_bootstrap_ci needs at least one data array")
    n_resamples = _check_resamples(n_resamples)
    confidence = _check_confidence(confidence)
    blocks = np.asarray(blocks)
    n = blocks.shape[0] if blocks.ndim == 1 else -1
    if blocks.ndim != 1:
        raise ValueError(f"blocks must be one-dimensional, got shape {blocks.shape}")
    data = []
    for i, arr in enumerate(arrays):
        a = _binary_labels(arr) if (name == "auroc" and i == 0) else _as_1d(arr, f"array {i}")
        if a.size != n:
            raise ValueError(f"array {i} has length {a.size}, blocks has {n}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"array {i} contains NaN or inf; drop those rows first")
        data.append(a)
    _, codes = np.unique(blocks, return_inverse=True)
    n_blocks = int(codes.max()) + 1 if n else 0
    if n_blocks < 2:
        raise ValueError(f"a block bootstrap needs at least 2 blocks, got {n_blocks}")
    estimate = float(fn(np.ones((1, n)), *data)[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_blocks, size=(n_resamples, n_blocks))
    flat = (idx + (np.arange(n_resamples) * n_blocks)[:, None]).ravel()
    mult = np.bincount(flat, minlength=n_resamples * n_blocks).reshape(n_resamples, n_blocks).astype(np.float64)
    stats = np.empty(n_resamples)
    step = _chunk_rows(4 * n, n_resamples)
    for start in range(0, n_resamples, step):
        stop = min(start + step, n_resamples)
        stats[start:stop] = fn(mult[start:stop][:, codes], *data)
    lo, hi = _percentile_ci(stats, confidence)
    return BlockBootstrapResult(
        statistic=name,
        estimate=estimate,
        ci_low=lo,
        ci_high=hi,
        n=int(n),
        n_blocks=n_blocks,
        n_undefined=int((~np.isfinite(stats)).sum()),
        seed=int(seed),
        n_resamples=n_resamples,
        confidence=confidence,
    )


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
