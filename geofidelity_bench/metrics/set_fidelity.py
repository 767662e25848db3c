"""Set-level fidelity: unbiased MMD^2 with a median-heuristic RBF kernel, the diversity gap,
and DCSF (docs/benchmark.md section 5, Metrics).

All three compare a generated panel ``gen`` (n, d) with a reference gallery ``ref`` (m, d) of
RAW embeddings; :func:`set_fidelity` computes them (and both diversities) in one pass. The
pooled (n + m) x (n + m) distance matrix is assembled block by block: the gallery's own block
comes from a :class:`~geofidelity_bench.metrics.reference.PreparedReference` (pass one as
``ref`` to reuse it across comparisons), the gen-gen and gen-ref blocks are a few small BLAS
products per call; nothing loops over images in Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_matrix, check_same_dim, max_abs, require_rows, rescaled, unsafe_exponent
from .panel import diversity_unchecked
from .reference import (  # DUPLICATE_RTOL is re-exported here, where it always lived
    DUPLICATE_RTOL,  # noqa: F401
    PreparedReference,
    clamped_sq_dists,
    prepare_reference,
)


def _checked_pair(
    gen: ArrayLike, ref: ArrayLike | PreparedReference
) -> tuple[np.ndarray, PreparedReference, int]:
    """``gen`` validated, ``ref`` prepared (validated) and the dimensions checked, in that order.

    Also the power of two ``e`` both sets were divided by: 0, unless their magnitudes would
    overflow or underflow squared distances (1e154 and beyond, say); the median-heuristic
    MMD^2 does not change under a common rescaling, and a given gamma is rescaled by 4**e.
    """
    g = as_matrix(gen, "gen")
    r = prepare_reference(ref, "ref")
    check_same_dim(g, "gen", r.rows, "ref")
    e = unsafe_exponent(max(max_abs(g), r.max_abs))
    if e:
        g, r = rescaled(g, e), prepare_reference(rescaled(r.rows, e), "ref")
    return g, r, e


@lru_cache(maxsize=64)
def _upper(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, k=1)


class _PooledDistances:
    """The pooled (gen + ref) squared distances of one comparison, by block.

    ``gen`` is centered on the gallery mean, like ``ref.centered``, so ``gen_gen`` (n, n)
    and ``gen_ref`` (n, m) come from two small Gram products with the same shift; the
    gallery's own pairs are precomputed in ``ref``. Clamping as in :func:`clamped_sq_dists`.
    """

    __slots__ = ("gen_gen", "gen_ref", "ref")

    def __init__(self, g: np.ndarray, ref: PreparedReference):
        z = g - ref.mean
        sq = np.einsum("ij,ij->i", z, z)
        self.gen_gen = clamped_sq_dists(z, sq, z, sq)
        np.fill_diagonal(self.gen_gen, 0.0)
        self.gen_ref = clamped_sq_dists(z, sq, ref.centered, ref.sq_norms)
        self.ref = ref

    def median_gamma(self) -> float:
        """1 / median of the strictly positive squared distances over ALL distinct pooled pairs
        (gen-gen, gen-ref, ref-ref); NaN if there are none."""
        new = np.concatenate([self.gen_gen[_upper(self.gen_gen.shape[0])], self.gen_ref.ravel()])
        new = np.sort(new[new > 0.0])  # a few hundred values; the gallery's thousands are sorted
        median = _median_of_union(self.ref.sorted_positive_pair_sq_dists, new)
        return math.nan if math.isnan(median) else 1.0 / median

    def mmd2(self, gamma: float) -> float:
        """max(0, unbiased MMD^2) with RBF bandwidth ``gamma`` (n >= 2 and m >= 2)."""
        n, m = self.gen_ref.shape
        # The diagonal of gen_gen is exactly 0, so its kernel values are exactly 1.
        within_gen = (np.exp(-gamma * self.gen_gen).sum() - n) / (n * (n - 1))
        within_ref = 2.0 * np.exp(-gamma * self.ref.pair_sq_dists).sum() / (m * (m - 1))
        cross = np.exp(-gamma * self.gen_ref).sum() / (n * m)
        return float(max(0.0, within_gen + within_ref - 2.0 * cross))


def _median_of_union(a: np.ndarray, b: np.ndarray) -> float:
    """``np.median(np.concatenate([a, b]))`` for two ASCENDING arrays, without merging them.

    ``b``'s elements sit at positions ``searchsorted(a, b) + arange(len(b))`` of the merged
    order (before equal elements of ``a``); every other position holds the next element of
    ``a``. NaN when both are empty.
    """
    total = a.size + b.size
    if total == 0:
        return math.nan
    at_b = np.searchsorted(a, b, side="left") + np.arange(b.size)
    half = total // 2
    wanted = [half] if total % 2 else [half - 1, half]
    values = []
    for k, j in zip(wanted, np.searchsorted(at_b, wanted).tolist()):  # j: b's before k
        values.append(float(b[j]) if j < b.size and at_b[j] == k else float(a[k - j]))
    return values[0] if len(values) == 1 else (values[0] + values[1]) / 2.0


def median_heuristic_gamma(gen: ArrayLike, ref: ArrayLike | PreparedReference) -> float:
    r"""The RBF bandwidth :func:`mmd2` uses by default.

    .. math::
        \gamma = 1 / \operatorname{median}\{\lVert z_i - z_j \rVert^2 > 0 : i < j\},
        \quad Z = \mathrm{gen} \cup \mathrm{ref}

    Only distinct pairs (i != j) enter, and only strictly positive distances, so duplicated
    images do not drag the median to 0. (Counting each unordered pair once or twice gives the
    same median.)

    Args:
        gen: generated embeddings, shape (n, d).
        ref: reference embeddings, shape (m, d), or a :class:`PreparedReference` of them
            (its gallery-gallery distances are reused; the median is still over all pooled
            pairs).

    Returns:
        gamma > 0, or NaN when every pooled point is identical (no positive distance).

    Example:
        >>> median_heuristic_gamma([[0.0], [1.0]], [[3.0]])  # distances 1, 9, 4
        0.25
    """
    g, r, e = _checked_pair(gen, ref)
    with np.errstate(over="ignore", under="ignore"):  # inf or 0 where gamma has no float64
        return float(np.ldexp(_PooledDistances(g, r).median_gamma(), -2 * e))


def mmd2_with_reason(
    gen: ArrayLike, ref: ArrayLike | PreparedReference, gamma: float | None = None
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

    The pooled distance matrix is assembled from blocks: gen-gen and gen-ref computed here,
    ref-ref taken from a :class:`PreparedReference` (prepared on the fly from an array), so
    passing a prepared gallery skips its O(m^2 d) part.

    Args:
        gen: generated embeddings, shape (n, d).
        ref: reference embeddings, shape (m, d), or a :class:`PreparedReference` of them.
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
    g, r, e = _checked_pair(gen, ref)
    if gamma is not None:
        gamma = float(gamma)
        if not (np.isfinite(gamma) and gamma > 0.0):
            raise ValueError(f"gamma must be a positive finite number or None; got {gamma}")
        with np.errstate(over="ignore", under="ignore"):
            scaled = float(np.ldexp(gamma, 2 * e))
        if not (np.isfinite(scaled) and scaled > 0.0):
            raise ValueError(
                f"gamma={gamma} cannot be applied to embeddings of magnitude about 2**{e}: the kernel values "
                "are not representable in float64; rescale the embeddings or use gamma=None"
            )
        gamma = scaled
    reason = _short_set_reason(g, r)
    if reason is not None:
        return math.nan, reason
    return _mmd2_unchecked(g, r, gamma), None


def _short_set_reason(g: np.ndarray, r: PreparedReference) -> str | None:
    """Why MMD^2 is undefined (a set with fewer than 2 rows), or None."""
    for n, name in ((g.shape[0], "gen"), (r.n_rows, "ref")):
        if n < 2:
            rows = "row" if n == 1 else "rows"
            return f"{name} has {n} {rows}; MMD^2 needs at least 2 rows in each set"
    return None


def _mmd2_unchecked(g: np.ndarray, r: PreparedReference, gamma: float | None) -> float:
    """max(0, MMD^2) for validated sets of at least 2 rows each."""
    pooled = _PooledDistances(g, r)
    if gamma is None:
        gamma = pooled.median_gamma()
        if math.isnan(gamma):  # all points identical: every kernel value is 1
            return 0.0
    return pooled.mmd2(gamma)


def mmd2(
    gen: ArrayLike, ref: ArrayLike | PreparedReference, gamma: float | None = None
) -> float:
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
        ref: reference embeddings, shape (m, d), or a :class:`PreparedReference` of them.
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


def _checked_sets(
    gen: ArrayLike, ref: ArrayLike | PreparedReference, purpose: str
) -> tuple[np.ndarray, PreparedReference]:
    g, r, _ = _checked_pair(gen, ref)
    require_rows(g, "gen", 2, purpose)
    require_rows(r.rows, "ref", 2, purpose)
    return g, r


def _gap_terms(g: np.ndarray, div_ref: float) -> tuple[float, float]:
    """(Div(gen), Div(ref) - Div(gen)) for a validated ``g`` of at least 2 rows."""
    div_gen = diversity_unchecked(g)
    return div_gen, div_ref - div_gen


def _dcsf_value(mmd: float, gap: float) -> float:
    """DCSF from max(0, MMD^2) and the diversity gap: only a LOSS of diversity is penalized."""
    return mmd + 0.5 * max(0.0, gap)


@dataclass(frozen=True)
class SetFidelity:
    """Everything set-level about one generated panel vs one gallery (:func:`set_fidelity`).

    Attributes:
        mmd2: max(0, unbiased MMD^2), median-heuristic gamma (as :func:`mmd2`); NaN when a
            set has fewer than 2 rows.
        mmd2_reason: why ``mmd2`` (and ``dcsf``) is NaN, else None (as
            :func:`mmd2_with_reason`).
        div_gen: Div(gen); NaN when n < 2.
        div_ref: Div(ref); NaN when m < 2.
        diversity_gap: ``div_ref - div_gen`` (as :func:`diversity_gap`); NaN when either is.
        dcsf: ``mmd2 + 0.5 * max(0, diversity_gap)`` (as :func:`dcsf`); NaN with ``mmd2``.
    """

    mmd2: float
    mmd2_reason: str | None
    div_gen: float
    div_ref: float
    diversity_gap: float
    dcsf: float


def set_fidelity(gen: ArrayLike, ref: ArrayLike | PreparedReference) -> SetFidelity:
    r"""MMD^2, both diversities, the diversity gap and DCSF of one comparison, computed once.

    Equal to calling :func:`mmd2_with_reason`, :func:`diversity_gap` and :func:`dcsf`
    separately (which share this code), but the pooled distances, the median-heuristic gamma
    and Div are each computed a single time. Pass a :class:`PreparedReference` as ``ref`` when
    the same gallery is compared many times.

    Unlike :func:`dcsf` and :func:`diversity_gap`, a set with fewer than 2 rows is not an
    error: the undefined values are NaN and ``mmd2_reason`` says why.

    Args:
        gen: generated embeddings, shape (n, d), n >= 1.
        ref: reference embeddings, shape (m, d), m >= 1, or a :class:`PreparedReference`.

    Returns:
        A :class:`SetFidelity`.

    Raises:
        ValueError: on non-2-D, empty or non-finite input, or mismatched dimensions.

    Example:
        >>> fid = set_fidelity([[2.0, 0.0], [2.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]])
        >>> round(fid.mmd2, 4), fid.mmd2_reason, fid.div_gen, fid.div_ref, round(fid.dcsf, 4)
        (0.6793, None, 0.0, 1.0, 1.1793)
        >>> set_fidelity([[1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]).mmd2_reason
        'gen has 1 row; MMD^2 needs at least 2 rows in each set'
    """
    g, r, _ = _checked_pair(gen, ref)
    return _set_fidelity_unchecked(g, r)


def _set_fidelity_unchecked(g: np.ndarray, r: PreparedReference) -> SetFidelity:
    if g.shape[0] >= 2:
        div_gen, gap = _gap_terms(g, r.diversity)
    else:
        div_gen = gap = math.nan
    reason = _short_set_reason(g, r)
    if reason is not None:
        return SetFidelity(math.nan, reason, div_gen, r.diversity, gap, math.nan)
    mmd = _mmd2_unchecked(g, r, None)
    return SetFidelity(mmd, None, div_gen, r.diversity, gap, _dcsf_value(mmd, gap))


def diversity_gap(gen: ArrayLike, ref: ArrayLike | PreparedReference) -> float:
    r"""How much less varied the generated set is than the reference: Div(ref) - Div(gen).

    .. math::
        \Delta_{\mathrm{Div}} = \mathrm{Div}(X_r) - \mathrm{Div}(X_g)

    with Div from :func:`~geofidelity_bench.metrics.panel.diversity`. Positive means the
    generator collapses variety; negative means it is more varied than the gallery.

    Args:
        gen: generated embeddings, shape (n, d), n >= 2.
        ref: reference embeddings, shape (m, d), m >= 2, or a :class:`PreparedReference`
            (its Div is reused).

    Returns:
        The gap, in [-2, 2], as a Python float.

    Raises:
        ValueError: on invalid input or fewer than 2 rows in either set.

    Example:
        >>> diversity_gap([[1.0, 0.0], [2.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])  # 1 - 0
        1.0
    """
    purpose = "the diversity gap"
    g = as_matrix(gen, "gen")
    if isinstance(ref, PreparedReference):
        rows = ref.rows
    else:  # only Div(ref) is needed: no full preparation
        rows = as_matrix(ref, "ref")
    check_same_dim(g, "gen", rows, "ref")
    require_rows(g, "gen", 2, purpose)
    require_rows(rows, "ref", 2, purpose)
    div_ref = ref.diversity if isinstance(ref, PreparedReference) else diversity_unchecked(rows)
    return _gap_terms(g, div_ref)[1]


def dcsf(gen: ArrayLike, ref: ArrayLike | PreparedReference) -> float:
    r"""Diversity-corrected set fidelity (DCSF). Lower is better; 0 for identical sets.

    .. math::
        \mathrm{DCSF} = \max(0, \widehat{\mathrm{MMD}}^2)
        + \tfrac12 \max\big(0, \mathrm{Div}(X_r) - \mathrm{Div}(X_g)\big)

    MMD^2 as in :func:`mmd2` with the median-heuristic gamma; only a LOSS of diversity is
    penalized. To get MMD^2 and the gap as well, call :func:`set_fidelity` (one pass).

    Args:
        gen: generated embeddings, shape (n, d), n >= 2.
        ref: reference embeddings, shape (m, d), m >= 2, or a :class:`PreparedReference`.

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
    return _set_fidelity_unchecked(g, r).dcsf
