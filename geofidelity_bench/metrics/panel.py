"""Panel-level similarity (CosSim) and within-set diversity (Div), docs/benchmark.md section 5, Metrics.

Both work on raw embeddings of shape (images, dim); each says where it normalizes.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_matrix, check_same_dim, max_abs, require_rows, rescaled, unit_rows, unsafe_exponent
from .reference import PreparedReference, diversity_of_unit_rows, prepare_reference

#: Added to the CosSim denominator, exactly as docs/benchmark.md section 5, Metrics states.
COS_EPS = 1e-8


def cos_sim(gen: ArrayLike, ref: ArrayLike | PreparedReference) -> float:
    r"""Cosine similarity between the mean generated and the mean reference embedding.

    .. math::
        \mathrm{CosSim} = \frac{\bar g \cdot \bar r}{\lVert \bar g \rVert \, \lVert \bar r \rVert
        + 10^{-8}}, \quad \bar g = \tfrac1n \textstyle\sum_i g_i,\ \bar r = \tfrac1m \sum_j r_j

    The means are taken over RAW embeddings (not per-image normalized). Higher is better;
    the range is [-1, 1], and identical sets give 1 (up to the 1e-8 in the denominator).
    A set too large for its squared norm to be a float64 (entries of 1e144 and beyond) is
    first divided by a power of two, which does not change its direction (the 1e-8 stays in raw
    units, so the value is the formula's on the raw embeddings).

    Args:
        gen: generated-panel embeddings, shape (n, d), n >= 1.
        ref: reference-gallery embeddings, shape (m, d), m >= 1, or a
            :class:`~geofidelity_bench.metrics.reference.PreparedReference` of them.

    Returns:
        The cosine as a Python float.

    Raises:
        ValueError: on non-2-D, empty or non-finite input, or mismatched dimensions.

    Example:
        >>> round(cos_sim([[1.0, 0.0], [0.0, 1.0]], [[2.0, 2.0]]), 6)  # (0.5, 0.5) vs (2, 2)
        1.0
        >>> round(cos_sim([[1.0, 0.0]], [[0.0, 3.0], [1.0, 3.0]]), 4)  # (1,0) vs (0.5,3)
        0.1644
    """
    g = as_matrix(gen, "gen")
    e_g = unsafe_exponent(max_abs(g), small=False)
    g = rescaled(g, e_g)
    if isinstance(ref, PreparedReference):
        e_r = unsafe_exponent(ref.max_abs, small=False)
        if e_r:
            ref = prepare_reference(rescaled(ref.rows, e_r), "ref")
        r, mr, norm_r = ref.rows, ref.mean, ref.mean_norm
    else:
        r = as_matrix(ref, "ref")
        e_r = unsafe_exponent(max_abs(r), small=False)
        r = rescaled(r, e_r)
        mr = r.mean(axis=0)
        norm_r = float(np.linalg.norm(mr))
    check_same_dim(g, "gen", r, "ref")
    mg = g.mean(axis=0)
    # COS_EPS is in raw units: in the units of the rescaled means it is COS_EPS / 2**(e_g + e_r)
    # (math.ldexp gives 0.0, without a floating-point error, where that is below float64)
    denom = float(np.linalg.norm(mg)) * norm_r + math.ldexp(COS_EPS, -(e_g + e_r))
    return float(np.dot(mg, mr) / denom)


def diversity(x: ArrayLike) -> float:
    r"""Mean cosine distance over distinct unordered pairs of rows (Div).

    .. math::
        \mathrm{Div}(X) = \frac{2}{n(n-1)} \sum_{i<j} \left(1 - \frac{x_i \cdot x_j}
        {\lVert x_i \rVert \lVert x_j \rVert}\right)

    Computed in O(n d) from unit rows u_i through
    :math:`\sum_{i \ne j} u_i \cdot u_j = \lVert \sum_i u_i \rVert^2 - \sum_i \lVert u_i \rVert^2`.
    An all-zero row counts as cosine 0 with every other row. The result is clamped to
    [0, 2] to absorb rounding, so a set of identical rows has diversity exactly 0.

    Args:
        x: embeddings, shape (n, d), n >= 2.

    Returns:
        Div in [0, 2] as a Python float (higher means more varied).

    Raises:
        ValueError: on non-2-D, empty or non-finite input, or fewer than 2 rows.

    Example:
        >>> diversity([[1.0, 0.0], [0.0, 1.0]])  # orthogonal: distance 1
        1.0
        >>> diversity([[1.0, 0.0], [5.0, 0.0], [-2.0, 0.0]])  # pairs: 0, 2, 2
        1.3333333333333333
    """
    arr = as_matrix(x, "x")
    require_rows(arr, "x", 2, "diversity")
    return diversity_unchecked(arr)


def diversity_unchecked(x: np.ndarray) -> float:
    """:func:`diversity` on an already validated float64 array with at least 2 rows."""
    return diversity_of_unit_rows(unit_rows(x))
