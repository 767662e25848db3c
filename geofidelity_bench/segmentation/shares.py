"""Group shares: from label maps to the 12 semantic groups, and the GAAS columns (the ``segment``
command's shares table, which adds the tier-4 gate, is curation's: :mod:`geofidelity_bench.curation.filters`).

A share vector holds, per image, the fraction of its pixels in each of the 12 groups of
:data:`~geofidelity_bench.segmentation.labels.GROUP_NAMES`; pixels of a class in no group are
*unlabeled*, so the 12 shares plus the unlabeled share sum to 1 (docs/benchmark.md section 5, Metrics).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from geofidelity_bench.metrics.composition import GAAS_GROUPS
from geofidelity_bench.segmentation.labels import GROUP_NAMES, VISTAS_CLASS_TO_GROUP

#: Shares may stray this far outside [0, 1] (or their sum above 1) from rounding.
SHARE_TOLERANCE = 1e-6


def shares_from_counts(counts: Sequence[float], class_to_group: np.ndarray) -> np.ndarray:
    """Pixel counts per class -> float64 (12,) shares of the groups (unlabeled = 1 - sum)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape != class_to_group.shape:
        raise ValueError(f"got {counts.shape[0]} class counts for a label set of {class_to_group.shape[0]} classes")
    total = counts.sum()
    if total <= 0:
        raise ValueError("a label map with no pixels has no shares")
    grouped = class_to_group >= 0
    shares = np.bincount(class_to_group[grouped], weights=counts[grouped], minlength=len(GROUP_NAMES))
    return shares / total


def shares_from_label_map(label_map: Any, class_to_group: np.ndarray = VISTAS_CLASS_TO_GROUP) -> np.ndarray:
    """Share of the pixels of each group in a label map of class ids.

    Args:
        label_map: (H, W) integer class ids (numpy array or CPU tensor).
        class_to_group: group index per class id (default: the Vistas table of docs/benchmark.md section 5, Metrics).

    Returns:
        float64 (12,) in :data:`GROUP_NAMES` order; 1 minus their sum is the unlabeled share.

    Raises:
        ValueError: empty map, non-integer values, or a class id outside the label set.

    Example:
        >>> lm = np.array([[13, 13, 27, 7]])  # road, road, sky, bike lane (no group)
        >>> s = shares_from_label_map(lm)
        >>> float(s[GROUP_NAMES.index("road")]), float(s[GROUP_NAMES.index("sky")]), float(1 - s.sum())
        (0.5, 0.25, 0.25)
    """
    arr = np.asarray(label_map)
    if arr.size == 0:
        raise ValueError("a label map with no pixels has no shares")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"label map must hold integer class ids, got {arr.dtype}")
    n = class_to_group.shape[0]
    low, high = int(arr.min()), int(arr.max())
    if low < 0 or high >= n:
        raise ValueError(f"label map has class ids outside 0..{n - 1} (min {low}, max {high})")
    return shares_from_counts(np.bincount(arr.ravel(), minlength=n), class_to_group)


def _as_share_matrix(shares: Any, name: str = "shares") -> np.ndarray:
    arr = np.asarray(shares, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != len(GROUP_NAMES):
        raise ValueError(f"{name} must have {len(GROUP_NAMES)} columns ({', '.join(GROUP_NAMES)}), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has non-finite values")
    return arr


_GAAS_COLUMNS = [GROUP_NAMES.index(g) for g in GAAS_GROUPS]


def gaas_shares(shares_12: Any) -> np.ndarray:
    """The 8 GAAS columns (``metrics.composition.GAAS_GROUPS`` order) of 12-group shares.

    Args:
        shares_12: (n, 12) or (12,) shares in :data:`GROUP_NAMES` order.

    Returns:
        float64 (n, 8), what :func:`geofidelity_bench.metrics.gaas` takes.
    """
    return np.ascontiguousarray(_as_share_matrix(shares_12, "shares_12")[:, _GAAS_COLUMNS])


def unlabeled_share(shares_12: Any) -> np.ndarray:
    """(n,) share of the pixels in no group: ``1 - sum`` of the 12 shares, clipped at 0."""
    return np.maximum(1.0 - _as_share_matrix(shares_12, "shares_12").sum(axis=1), 0.0)


__all__ = [
    "SHARE_TOLERANCE",
    "gaas_shares",
    "shares_from_counts",
    "shares_from_label_map",
    "unlabeled_share",
]
