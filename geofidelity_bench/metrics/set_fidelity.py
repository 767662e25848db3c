"""Set-level fidelity: unbiased MMD^2 with a median-heuristic RBF kernel, the diversity gap,
and DCSF (SPEC section 5).

All three compare a generated panel ``gen`` (n, d) with a reference gallery ``ref`` (m, d) of
RAW embeddings. Each call is a handful of BLAS operations on the pooled (n + m) x (n + m)
Gram matrix; nothing loops over images in Python.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_matrix, check_same_dim, require_rows
from .panel import diversity_unchecked

#: Squared distances at or below this fraction of (|x_i|^2 + |x_j|^2), measured after
#: centering the pooled set, are treated as exactly 0. The Gram-matrix identity
#: |x-y|^2 = |x|^2 + |y|^2 - 2 x.y leaves rounding noise of order 1e-15 of that scale for
#: duplicate rows (the held-out anchor repeats images); without this they would count as
#: "strictly positive" distances in the median heuristic.
DUPLICATE_RTOL = 1e-12


def _checked_pair(gen: ArrayLike, ref: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    g = as_matrix(gen, "gen")
    r = as_matrix(ref, "ref")
    check_same_dim(g, "gen", r, "ref")
    return g, r


def pooled_sq_dists(pooled: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between all rows of ``pooled`` (validated float64).

    Uses one Gram matrix of the centered rows (distances do not change under a shift, and
    centering shrinks the cancellation in |x|^2 + |y|^2 - 2 x.y). The diagonal is set to
    exactly 0, negatives from rounding are clamped to 0, and pairs within
    :data:`DUPLICATE_RTOL` of zero are zeroed so duplicates are exactly 0.
    """
    z = pooled - pooled.mean(axis=0)
    sq = np.einsum("ij,ij->i", z, z)
    scale = sq[:, None] + sq[None, :]
    d2 = scale - 2.0 * (z @ z.T)
    d2[d2 <= DUPLICATE_RTOL * scale] = 0.0
    np.fill_diagonal(d2, 0.0)
    return d2


def _median_gamma(d2: np.ndarray) -> float:
    """1 / median of the strictly positive off-diagonal entries; NaN if there are none."""
    upper = d2[np.triu_indices(d2.shape[0], k=1)]
    positive = upper[upper > 0.0]
    if positive.size == 0:
        return float("nan")
    return float(1.0 / np.median(positive))


def median_heuristic_gamma(gen: ArrayLike, ref: ArrayLike) -> float:
    r"""The RBF bandwidth :func:`mmd2` uses by default.

    .. math::
        \gamma = 1 / \operatorname{median}\{\lVert z_i - z_j \rVert^2 > 0 : i < j\},
        \quad Z = \mathrm{gen} \cup \mathrm{ref}

    Only distinct pairs (i != j) enter, and only strictly positive distances, so duplicated
    images do not drag the median to 0. (Counting each unordered pair once or twice gives the
    same median.)

    Args:
        gen: generated embeddings, shape (n, d).
        ref: reference embeddings, shape (m, d).

    Returns:
        gamma > 0, or NaN when every pooled point is identical (no positive distance).

    Example:
        >>> median_heuristic_gamma([[0.0], [1.0]], [[3.0]])  # distances 1, 9, 4
        0.25
    """
    g, r = _checked_pair(gen, ref)
    return _median_gamma(pooled_sq_dists(np.vstack([g, r])))


def mmd2_with_reason(
    gen: ArrayLike, ref: ArrayLike, gamma: float | None = None
) -> tuple[float, str | None]:
    r"""Unbiased MMD^2 with an RBF kernel, plus the reason when it is undefined.

    .. math::
        \widehat{\mathrm{MMD}}^2 = \frac{1}{n(n-1)} \sum_{i \ne j} k(g_i, g_j)
        + \frac{1}{m(m-1)} \sum_{i \ne j} k(r_i, r_j)
        - \frac{2}{nm} \sum_{i,j} k(g_i, r_j),
        \qquad k(x, y) = e^{-\gamma \lVert x - y \rVert^2}

    on raw embeddings, reported as ``max(0, MMD^2)``. With ``gamma=None`` the bandwidth is
    :func:`median_heuristic_gamma` of the pooled set, recomputed on every call. If every
    pooled point is identical there is no positive distance, every kernel value is 1 for any
    gamma, and MMD^2 is 0.

    Args:
        gen: generated embeddings, shape (n, d).
        ref: reference embeddings, shape (m, d).
        gamma: RBF bandwidth (> 0), or None for the median heuristic.

    Returns:
        ``(value, None)``, or ``(nan, reason)`` when n < 2 or m < 2 (the within-set averages
        over i != j are empty); ``reason`` is a sentence naming the short set.

    Raises:
        ValueError: on non-2-D, empty or non-finite input, mismatched dimensions, or a
            gamma that is not a positive finite number.

    Example:
        >>> mmd2_with_reason([[0.0]], [[1.0], [2.0]])
        (nan, 'gen has 1 row; MMD^2 needs at least 2 rows in each set')
        >>> value, reason = mmd2_with_reason([[0.0], [1.0]], [[0.0], [1.0]])
        >>> value, reason
        (0.0, None)
    """
    g, r = _checked_pair(gen, ref)
    if gamma is not None:
        gamma = float(gamma)
        if not (np.isfinite(gamma) and gamma > 0.0):
            raise ValueError(f"gamma must be a positive finite number or None; got {gamma}")
    for arr, name in ((g, "gen"), (r, "ref")):
        n = arr.shape[0]
        if n < 2:
            rows = "row" if n == 1 else "rows"
            return float("nan"), f"{name} has {n} {rows}; MMD^2 needs at least 2 rows in each set"
    return _mmd2_unchecked(g, r, gamma), None


def _mmd2_unchecked(g: np.ndarray, r: np.ndarray, gamma: float | None) -> float:
    n, m = g.shape[0], r.shape[0]
    d2 = pooled_sq_dists(np.vstack([g, r]))
    if gamma is None:
        gamma = _median_gamma(d2)
        if np.isnan(gamma):  # all points identical: every kernel value is 1
            return 0.0
    k = np.exp(-gamma * d2)
    kxx = k[:n, :n]
    kyy = k[n:, n:]
    kxy = k[:n, n:]
    # The diagonals of kxx and kyy are exactly 1 (d2 diagonal is exactly 0).
    within_gen = (kxx.sum() - n) / (n * (n - 1))
    within_ref = (kyy.sum() - m) / (m * (m - 1))
    cross = kxy.mean()
    return float(max(0.0, within_gen + within_ref - 2.0 * cross))


def mmd2(gen: ArrayLike, ref: ArrayLike, gamma: float | None = None) -> float:
    r"""Unbiased MMD^2 (RBF kernel, median-heuristic gamma), clamped at 0. Lower is better.

    .. math::
        \max\Big(0,\ \frac{1}{n(n-1)} \sum_{i \ne j} k(g_i, g_j)
        + \frac{1}{m(m-1)} \sum_{i \ne j} k(r_i, r_j)
        - \frac{2}{nm} \sum_{i,j} k(g_i, r_j)\Big),
        \qquad k(x, y) = e^{-\gamma \lVert x - y \rVert^2}

    See :func:`mmd2_with_reason` for the details; this returns only the value, NaN when
    n < 2 or m < 2 (call :func:`mmd2_with_reason` to get the reason).

    Args:
        gen: generated embeddings, shape (n, d).
        ref: reference embeddings, shape (m, d).
        gamma: RBF bandwidth (> 0), or None for 1 / median of the pooled positive squared
            distances between distinct points.

    Returns:
        max(0, MMD^2) as a Python float, or NaN when a set has fewer than 2 rows.

    Raises:
        ValueError: as :func:`mmd2_with_reason`.

    Example:
        >>> # 2 e^-1 - 2 (2 e^-4 + e^-9 + e^-1) / 4
        >>> round(mmd2([[0.0], [1.0]], [[2.0], [3.0]], gamma=1.0), 4)
        0.5334
        >>> mmd2([[1.0, 2.0], [3.0, 4.0]], [[3.0, 4.0], [1.0, 2.0]])  # same set
        0.0
    """
    return mmd2_with_reason(gen, ref, gamma)[0]


def _checked_sets(gen: ArrayLike, ref: ArrayLike, purpose: str) -> tuple[np.ndarray, np.ndarray]:
    g, r = _checked_pair(gen, ref)
    require_rows(g, "gen", 2, purpose)
    require_rows(r, "ref", 2, purpose)
    return g, r


def diversity_gap(gen: ArrayLike, ref: ArrayLike) -> float:
    r"""How much less varied the generated set is than the reference: Div(ref) - Div(gen).

    .. math::
        \Delta_{\mathrm{Div}} = \mathrm{Div}(X_r) - \mathrm{Div}(X_g)

    with Div from :func:`~geofidelity_bench.metrics.panel.diversity`. Positive means the
    generator collapses variety; negative means it is more varied than the gallery.

    Args:
        gen: generated embeddings, shape (n, d), n >= 2.
        ref: reference embeddings, shape (m, d), m >= 2.

    Returns:
        The gap, in [-2, 2], as a Python float.

    Raises:
        ValueError: on invalid input or fewer than 2 rows in either set.

    Example:
        >>> diversity_gap([[1.0, 0.0], [2.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])  # 1 - 0
        1.0
    """
    g, r = _checked_sets(gen, ref, "the diversity gap")
    return diversity_unchecked(r) - diversity_unchecked(g)


def dcsf(gen: ArrayLike, ref: ArrayLike) -> float:
    r"""Diversity-corrected set fidelity (DCSF). Lower is better; 0 for identical sets.

    .. math::
        \mathrm{DCSF} = \max(0, \widehat{\mathrm{MMD}}^2)
        + \tfrac12 \max\big(0, \mathrm{Div}(X_r) - \mathrm{Div}(X_g)\big)

    MMD^2 as in :func:`mmd2` with the median-heuristic gamma; only a LOSS of diversity is
    penalized.

    Args:
        gen: generated embeddings, shape (n, d), n >= 2.
        ref: reference embeddings, shape (m, d), m >= 2.

    Returns:
        DCSF >= 0 as a Python float.

    Raises:
        ValueError: on invalid input or fewer than 2 rows in either set (unlike
            :func:`mmd2`, DCSF does not return NaN).

    Example:
        >>> gen = [[2.0, 0.0], [2.0, 0.0]]  # no variety: Div = 0
        >>> ref = [[0.0, 1.0], [1.0, 0.0]]  # orthogonal: Div = 1
        >>> # positive squared distances 1, 1, 2, 5, 5 -> gamma = 1/2;
        >>> # MMD^2 = 1 + e^-1 - (e^-2.5 + e^-0.5) = 0.6793; DCSF = 0.6793 + 0.5 * (1 - 0)
        >>> round(dcsf(gen, ref), 4)
        1.1793
    """
    g, r = _checked_sets(gen, ref, "DCSF")
    gap = diversity_unchecked(r) - diversity_unchecked(g)
    return _mmd2_unchecked(g, r, None) + 0.5 * max(0.0, gap)
