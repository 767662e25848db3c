"""Bootstrap primitives on arrays (docs/benchmark.md section 7, Statistics and analyses): the paired
bootstrap of two matched samples (with the Wilcoxon signed-rank test), the bootstrap interval of a
mean, Spearman and AUROC, and the block bootstrap that resamples whole blocks (one subject, kept
whole) for any weighted statistic.

Pure numpy (scipy for the Wilcoxon test, imported when called); nothing here knows a result row,
a metric or a condition: :mod:`geofidelity_bench.stats` applies these to result tables (pairing
rows by condition, city-level analyses, rank stability, control benefits) and re-exports every
public name here.

- **Bootstrap.** Percentile intervals from ``numpy.random.default_rng(seed)``; every result
  records ``seed``, ``n_resamples`` and ``confidence``. Resamples are drawn as one index matrix
  per chunk with ``rng.integers`` (no Python loop over resamples); the chunk size depends only on
  the sample size (:func:`chunk_rows`), so a given ``(data, seed, n_resamples)`` always gives the
  same interval.
- **Errors.** Bad input raises ``ValueError`` naming the problem: length mismatch, NaN in a paired
  array, fewer than 2 pairs (or blocks), a bad confidence or number of resamples
  (:func:`check_confidence`, :func:`check_resamples`).

Example:
    >>> import numpy as np
    >>> r = paired_bootstrap(np.array([0.52, 0.61, 0.58, 0.49]), np.array([0.50, 0.55, 0.57, 0.50]))
    >>> round(r.mean, 4), r.n, r.seed
    (0.02, 4, 42)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

import numpy as np

# Bootstrap work is done in chunks of about this many matrix elements (memory bound only).
_CHUNK_ELEMENTS = 4_000_000


def as_1d(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def check_confidence(confidence: float) -> float:
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(confidence)


def check_resamples(n_resamples: int) -> int:
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples}")
    return int(n_resamples)


def percentile_ci(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = stats[np.isfinite(stats)]
    if finite.size == 0:
        return math.nan, math.nan
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(finite, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return float(lo), float(hi)


def chunk_rows(n_cols: int, n_rows: int) -> int:
    return max(1, min(n_rows, _CHUNK_ELEMENTS // max(1, n_cols)))


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

    d = as_1d(differences, "differences")
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
    values = as_1d(values, "values")
    n = values.size
    rng = np.random.default_rng(seed)
    out = np.empty(n_resamples, dtype=np.float64)
    step = chunk_rows(n, n_resamples)
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
    x = as_1d(x, "x")
    y = as_1d(y, "y")
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
    n_resamples = check_resamples(n_resamples)
    confidence = check_confidence(confidence)
    d = x - y
    means = bootstrap_means(d, n_resamples, seed)
    lo, hi = percentile_ci(means, confidence)
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
    v = as_1d(values, "values")
    v = v[np.isfinite(v)]
    n_resamples = check_resamples(n_resamples)
    confidence = check_confidence(confidence)
    if v.size == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0, int(seed), n_resamples, confidence)
    if v.size < 2:
        return MeanCI(float(v.mean()), math.nan, math.nan, int(v.size), int(seed), n_resamples, confidence)
    lo, hi = percentile_ci(bootstrap_means(v, n_resamples, seed), confidence)
    return MeanCI(float(v.mean()), lo, hi, int(v.size), int(seed), n_resamples, confidence)


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
    a = as_1d(x, names[0])
    b = as_1d(y, names[1])
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
    sc = as_1d(scores, "scores")
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
    n_resamples = check_resamples(n_resamples)
    confidence = check_confidence(confidence)
    blocks = np.asarray(blocks)
    n = blocks.shape[0] if blocks.ndim == 1 else -1
    if blocks.ndim != 1:
        raise ValueError(f"blocks must be one-dimensional, got shape {blocks.shape}")
    data = []
    for i, arr in enumerate(arrays):
        a = _binary_labels(arr) if (name == "auroc" and i == 0) else as_1d(arr, f"array {i}")
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
    step = chunk_rows(4 * n, n_resamples)
    for start in range(0, n_resamples, step):
        stop = min(start + step, n_resamples)
        stats[start:stop] = fn(mult[start:stop][:, codes], *data)
    lo, hi = percentile_ci(stats, confidence)
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
    "BLOCK_STATISTICS",
    "BlockBootstrapResult",
    "BootstrapResult",
    "MeanCI",
    "as_1d",
    "auroc",
    "block_bootstrap_ci",
    "bootstrap_mean_ci",
    "bootstrap_means",
    "check_confidence",
    "check_resamples",
    "chunk_rows",
    "paired_bootstrap",
    "percentile_ci",
    "spearman",
    "wilcoxon_p",
]
