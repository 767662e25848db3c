"""Scene composition: the semantic groups of Mapillary Vistas classes and GAAS (docs/benchmark.md section 5, Metrics).

GAAS compares, group by group, the distribution of per-image pixel shares in the generated
panel with that in the reference gallery. The segmentation itself (Mask2Former on Mapillary
Vistas, 65 classes) lives elsewhere; this module only needs the shares.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_matrix

#: Mapillary Vistas class ids (0-64) of each semantic group, in the order of docs/benchmark.md section 5. The groups are
#: disjoint; ids 7, 10 and 12 belong to none of them, exactly as docs/benchmark.md section 5, Metrics lists them.
#: Read-only.
SEMANTIC_GROUPS = MappingProxyType(
    {
        "road": (13, 14, 23, 24),
        "sidewalk": (15, 11, 2, 8, 9),
        "building": (17, 6, 16, 18, 3, 5),
        "vehicle": tuple(range(52, 65)),
        "person": (19, 20, 21, 22),
        "vegetation": (30, 29, 25),
        "sky": (27,),
        "pole": (45, 47, 44),
        "sign": (48, 49, 50, 46, 35, 32),
        "water": (31,),
        "snow": (28,),
        "other": (0, 1, 4, 26, 33, 34, *range(36, 44), 51),
    }
)

#: The 8 groups GAAS averages over, in the column order ``gaas`` expects.
GAAS_GROUPS = ("road", "sidewalk", "building", "vehicle", "vegetation", "sky", "pole", "sign")

#: Histogram bins on [0, 1] per group, and the mass added to every bin before normalizing.
GAAS_BINS = 10
GAAS_BIN_EPS = 1e-8
#: Shares may stray this far outside [0, 1] from rounding; they are then clipped.
SHARE_TOLERANCE = 1e-6

# The same edges np.histogram(bins=10, range=(0, 1)) uses, so bin membership matches it exactly
# (e.g. 0.3 falls in bin 2, because linspace's third edge is 0.30000000000000004).
_EDGES = np.linspace(0.0, 1.0, GAAS_BINS + 1)
_EDGES.setflags(write=False)


def _checked_shares(x: ArrayLike, name: str) -> np.ndarray:
    arr = as_matrix(x, name)
    k = len(GAAS_GROUPS)
    if arr.shape[1] != k:
        raise ValueError(
            f"{name} has {arr.shape[1]} columns; GAAS needs {k} ({', '.join(GAAS_GROUPS)})"
        )
    low, high = float(arr.min()), float(arr.max())
    if low < -SHARE_TOLERANCE or high > 1.0 + SHARE_TOLERANCE:
        raise ValueError(
            f"{name} has pixel shares outside [0, 1] (min {low:g}, max {high:g})"
        )
    return np.clip(arr, 0.0, 1.0)


def _group_histograms(shares: np.ndarray) -> np.ndarray:
    """Counts of shape (groups, bins): np.histogram(col, 10, range=(0, 1)) for every column."""
    k = shares.shape[1]
    # side="right" puts a value equal to an edge into the bin that starts there; the value 1.0
    # goes to the last bin, as in np.histogram.
    bins = np.minimum(np.searchsorted(_EDGES, shares, side="right") - 1, GAAS_BINS - 1)
    flat = bins + GAAS_BINS * np.arange(k)[None, :]
    return np.bincount(flat.ravel(), minlength=k * GAAS_BINS).reshape(k, GAAS_BINS)


def _js_distance_base2(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Row-wise Jensen-Shannon distance (base 2) of strictly positive distributions."""
    m = 0.5 * (p + q)
    kl_pm = np.sum(p * np.log(p / m), axis=1)
    kl_qm = np.sum(q * np.log(q / m), axis=1)
    js = 0.5 * (kl_pm + kl_qm) / np.log(2.0)
    return np.sqrt(np.maximum(js, 0.0))


def gaas(gen_shares: ArrayLike, ref_shares: ArrayLike) -> float:
    r"""Group-area agreement score (GAAS): mean Jensen-Shannon distance of share histograms.

    For each group g in :data:`GAAS_GROUPS`, let :math:`h^X_g` be the 10-bin histogram on
    [0, 1] of the per-image pixel shares of g in set X (``np.histogram(..., range=(0, 1))``:
    bins are half-open, and 1.0 falls in the last bin), with 1e-8 added to every bin and
    normalized to sum 1. Then

    .. math::
        \mathrm{GAAS} = \frac18 \sum_g \sqrt{\mathrm{JS}_2(h^{gen}_g, h^{ref}_g)},\quad
        \mathrm{JS}_2(p, q) = \tfrac12 \mathrm{KL}_2(p \Vert m) + \tfrac12 \mathrm{KL}_2(q \Vert m),
        \ m = \tfrac12 (p + q)

    Lower is better; the range is [0, 1] and identical share distributions give 0.

    Args:
        gen_shares: per generated image, the pixel share of each GAAS group, shape (n, 8), in
            the column order of :data:`GAAS_GROUPS`.
        ref_shares: the same for the reference gallery, shape (m, 8).

    Returns:
        GAAS as a Python float.

    Raises:
        ValueError: on non-2-D, empty or non-finite input, a column count other than 8, or
            shares outside [0, 1] by more than 1e-6.

    Example:
        >>> same = [[0.4, 0.1, 0.2, 0.05, 0.1, 0.1, 0.02, 0.01]] * 3
        >>> gaas(same, same)
        0.0
        >>> other = [[0.0, 0.1, 0.2, 0.05, 0.1, 0.1, 0.02, 0.01]] * 3
        >>> round(gaas(same, other), 4)  # only road differs, fully: distance 1, mean 1/8
        0.125
    """
    gen = _checked_shares(gen_shares, "gen_shares")
    ref = _checked_shares(ref_shares, "ref_shares")
    p = _group_histograms(gen) + GAAS_BIN_EPS
    q = _group_histograms(ref) + GAAS_BIN_EPS
    p /= p.sum(axis=1, keepdims=True)
    q /= q.sum(axis=1, keepdims=True)
    return float(np.mean(_js_distance_base2(p, q)))
