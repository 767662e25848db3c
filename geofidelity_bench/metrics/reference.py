"""A reference gallery prepared once for many comparisons (:class:`PreparedReference`).

Scoring a benchmark compares thousands of small generated panels with about a hundred
galleries, each used again and again (as the target of every method and condition, and as a
retrieval negative of other blocks). Everything about a gallery that does not depend on the
generated panel is computed here once: its validated float64 rows, its mean and panel vector,
its unit rows and diversity, and the squared distances between its own images (the largest
part of the pooled distance matrix behind the MMD^2 median heuristic).

Every metric that takes a ``ref`` gallery (and :func:`~geofidelity_bench.metrics.retrieval`
for its candidates) accepts either an array or a :class:`PreparedReference` and gives the same
result either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_matrix, max_abs, rescaled, unit_rows, unsafe_exponent

#: Squared distances at or below this fraction of (|x_i|^2 + |x_j|^2), measured after
#: centering, are treated as exactly 0. The Gram-matrix identity
#: |x-y|^2 = |x|^2 + |y|^2 - 2 x.y leaves rounding noise of order 1e-15 of that scale for
#: duplicate rows (the held-out anchor repeats images); without this they would count as
#: "strictly positive" distances in the median heuristic.
DUPLICATE_RTOL = 1e-12


def clamped_sq_dists(
    za: np.ndarray, sqa: np.ndarray, zb: np.ndarray, sqb: np.ndarray
) -> np.ndarray:
    """Squared distances between the rows of ``za`` and ``zb`` from one Gram product.

    ``za`` and ``zb`` must be centered about the SAME point (distances do not change under a
    shift, and centering shrinks the cancellation in |x|^2 + |y|^2 - 2 x.y); ``sqa``/``sqb``
    are their squared row norms. Negatives from rounding are clamped to 0 and pairs within
    :data:`DUPLICATE_RTOL` of zero are zeroed, so duplicate rows are exactly 0 apart. For a
    set against itself, callers use the upper triangle or set the diagonal to exactly 0.
    """
    scale = sqa[:, None] + sqb[None, :]
    d2 = scale - 2.0 * (za @ zb.T)
    d2[d2 <= DUPLICATE_RTOL * scale] = 0.0
    return d2


def diversity_of_unit_rows(u: np.ndarray) -> float:
    r"""Div (mean cosine distance over distinct pairs) from unit rows ``u`` with n >= 2.

    Uses :math:`\sum_{i \ne j} u_i \cdot u_j = \lVert \sum_i u_i \rVert^2 - \sum_i
    \lVert u_i \rVert^2`, clamped to [0, 2] to absorb rounding.
    """
    n = u.shape[0]
    total = u.sum(axis=0)
    off_diagonal = float(np.dot(total, total)) - float(np.einsum("ij,ij->", u, u))
    mean_cos = off_diagonal / (n * (n - 1))
    return float(min(2.0, max(0.0, 1.0 - mean_cos)))


def panel_vector(rows: np.ndarray) -> np.ndarray:
    """The L2-normalized mean of raw embeddings (all-zero if the mean is zero).

    Rows too large to sum safely are first rescaled by a power of two (the direction is the same).
    """
    rows = rescaled(rows, unsafe_exponent(max_abs(rows), small=False))
    return unit_rows(rows.mean(axis=0)[None, :])[0]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False, repr=False)
class PreparedReference:
    """A reference gallery with everything that does not depend on the generated panel.

    Build it with :func:`prepare_reference`; all arrays are read-only float64.

    Attributes:
        rows: the validated raw embeddings, shape (m, d).
        mean: the raw mean embedding, shape (d,).
        mean_norm: ``||mean||`` (the CosSim denominator factor).
        panel_vector: ``mean / ||mean||``, the block's vector in retrieval (zero if the mean is).
        unit_rows: each row L2-normalized (all-zero rows stay zero), shape (m, d).
        centered: ``rows - mean``, shape (m, d).
        sq_norms: squared norms of ``centered``, shape (m,).
        pair_sq_dists: squared distances between distinct rows i < j, in row-major
            upper-triangle order (``np.triu_indices(m, 1)``), shape (m (m - 1) / 2,);
            rounding noise and duplicates clamped to exactly 0 as in :func:`clamped_sq_dists`.
        sorted_positive_pair_sq_dists: the strictly positive ``pair_sq_dists``, ascending
            (what the MMD^2 median heuristic takes from the gallery).
        diversity: Div(rows), NaN when m < 2.
        max_abs: the largest magnitude in ``rows`` (metrics rescale inputs that would
            overflow or underflow).
    """

    rows: np.ndarray
    mean: np.ndarray
    mean_norm: float
    panel_vector: np.ndarray
    unit_rows: np.ndarray
    centered: np.ndarray
    sq_norms: np.ndarray
    pair_sq_dists: np.ndarray
    sorted_positive_pair_sq_dists: np.ndarray
    diversity: float
    max_abs: float

    @property
    def n_rows(self) -> int:
        """m, the number of gallery images."""
        return int(self.rows.shape[0])

    @property
    def dim(self) -> int:
        """d, the embedding dimension."""
        return int(self.rows.shape[1])

    def __repr__(self) -> str:
        return f"PreparedReference(m={self.n_rows}, d={self.dim}, diversity={self.diversity:.6g})"


def prepare_reference(ref: ArrayLike | PreparedReference, name: str = "ref") -> PreparedReference:
    """Validate a reference gallery once and precompute its panel-independent parts.

    Pass the result wherever a metric takes ``ref`` (or as a retrieval candidate) to skip the
    repeated work; results equal those for the plain array (to rounding, ~1e-15).

    Args:
        ref: raw gallery embeddings, shape (m, d), m >= 1 (MMD^2, DCSF and the diversity gap
            need m >= 2 when used); a PreparedReference is returned as is.
        name: how ``ref`` is called in error messages.

    Returns:
        A :class:`PreparedReference` holding its own read-only copy of the rows.

    Raises:
        ValueError: if ``ref`` is not a finite, non-empty 2-D array of real numbers.

    Example:
        >>> prepared = prepare_reference([[3.0, 0.0], [3.0, 8.0], [3.0, 8.0], [3.0, 0.0]])
        >>> prepared.pair_sq_dists.tolist()  # pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
        [64.0, 64.0, 0.0, 0.0, 64.0, 64.0]
        >>> prepared.sorted_positive_pair_sq_dists.tolist()
        [64.0, 64.0, 64.0, 64.0]
        >>> prepared.mean.tolist(), prepared.panel_vector.tolist(), round(prepared.diversity, 4)
        ([3.0, 4.0], [0.6, 0.8], 0.4326)
    """
    if isinstance(ref, PreparedReference):
        return ref
    rows = as_matrix(ref, name)
    if rows is ref or not rows.flags.owndata:  # never freeze (or alias) the caller's array
        rows = rows.copy()
    m = rows.shape[0]
    top = max_abs(rows)
    e = unsafe_exponent(top)  # 0 for ordinary inputs; else computed on rows / 2**e, scaled back
    safe = rescaled(rows, e)
    mean = safe.mean(axis=0)
    centered = safe - mean
    sq_norms = np.einsum("ij,ij->i", centered, centered)
    pairs = clamped_sq_dists(centered, sq_norms, centered, sq_norms)[np.triu_indices(m, k=1)]
    mean_norm = float(np.linalg.norm(mean))
    if e:  # raw-scale values, inf where they do not fit a float64 (metrics then rescale)
        with np.errstate(over="ignore", under="ignore"):
            mean, centered, mean_norm = np.ldexp(mean, e), np.ldexp(centered, e), float(np.ldexp(mean_norm, e))
            sq_norms, pairs = np.ldexp(sq_norms, 2 * e), np.ldexp(pairs, 2 * e)
    positive = np.sort(pairs[pairs > 0.0])
    units = unit_rows(rows)
    return PreparedReference(
        rows=_frozen(rows),
        mean=_frozen(mean),
        mean_norm=mean_norm,
        panel_vector=_frozen(panel_vector(rows)),
        unit_rows=_frozen(units),
        centered=_frozen(centered),
        sq_norms=_frozen(sq_norms),
        pair_sq_dists=_frozen(pairs),
        sorted_positive_pair_sq_dists=_frozen(positive),
        diversity=diversity_of_unit_rows(units) if m >= 2 else float("nan"),
        max_abs=top,
    )
