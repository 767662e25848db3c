"""Group shares: from label maps to the 12 semantic groups, GAAS columns, and the shares table.

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



def shares_table(bench, segmenter, shares, keys):
    """One row per reference: ids, role, content hash, the 12 shares, unlabeled, the tier-4 gate.

    Args:
        bench: the :class:`~geofidelity_bench.benchmark.Benchmark` whose references were segmented.
        segmenter: the :class:`~geofidelity_bench.segmentation.Segmenter` that did it.
        shares: (n, 12) shares of ``bench.references``, in order.
        keys: the content sha256 of each reference image.

    Returns:
        ``pandas.DataFrame`` with the columns of ``geofidelity-bench segment --out``.
    """
    import pandas as pd

    from geofidelity_bench.curation.filters import tier4_gate

    heldout = {r.reference_id for b in bench.block_ids for r in bench.heldout(b)}
    unlabeled = unlabeled_share(shares)
    rows = []
    for ref, row, key, unl in zip(bench.references, shares, keys, unlabeled):
        passed, measured = tier4_gate(row)
        rows.append(
            {
                "reference_id": ref.reference_id,
                "image_id": ref.image_id,
                "block_id": ref.block_id,
                "role": "heldout" if ref.reference_id in heldout else "gallery",
                "image_sha256": key,
                **{f"share_{g}": float(v) for g, v in zip(GROUP_NAMES, row)},
                "share_unlabeled": float(unl),
                "urbanness": measured["urbanness"],
                "tier4_pass": bool(passed),
                "tier4_failed": ",".join(measured["failed"]),
                "segmenter": segmenter.name,
                "segmenter_config_hash": segmenter.config_hash,
            }
        )
    return pd.DataFrame(rows)


#: The tier-4 bounds as recorded next to a shares table.
TIER4_RECORD = ("docs/benchmark.md section 8, Curation, bounds inclusive: sky 0.01-0.55, building 0.03-0.70, "
                "road 0.01-0.55, vehicle <= 0.40, vegetation <= 0.80, urbanness >= 0.05")


def write_shares_table(table, path, *, bench, segmenter, stats, cache_root=None, command=None):
    """Writes :func:`shares_table`'s ``table`` (``.parquet``, else CSV) and its record beside it
    (``.json``: command, time, benchmark, segmenter config, segment stats, cache, tier-4 bounds).

    Args:
        table: the shares table; path: where it goes (``.parquet`` or ``.csv``).
        bench, segmenter: the benchmark and the segmenter it came from.
        stats: the :class:`~geofidelity_bench.segmentation.SegmentStats` of the run.
        cache_root: the cache folder used (None: no cache); command: the command line to record.

    Returns:
        The record's path (``path`` with the suffix ``.json``).
    """
    import json
    from pathlib import Path

    from geofidelity_bench.atomic import atomic_write
    from geofidelity_bench.provenance import utc_timestamp

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".parquet":
        atomic_write(out, lambda p: table.to_parquet(p, index=False))
    else:
        atomic_write(out, lambda p: table.to_csv(p, index=False))
    meta = {
        "command": command,
        "created_at": utc_timestamp(),
        "benchmark": {"name": bench.name, "source": bench.source, "fingerprint": bench.fingerprint},
        "segmenter": {"name": segmenter.name, "config": segmenter.config, "config_hash": segmenter.config_hash},
        "segment_stats": stats.as_dict(),
        "cache": None if cache_root is None else str(cache_root),
        "table": out.name,
        "tier4": TIER4_RECORD,
    }
    meta_path = out.with_suffix(".json")
    atomic_write(meta_path, lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8"))
    return meta_path


__all__ = [
    "SHARE_TOLERANCE",
    "gaas_shares",
    "shares_from_counts",
    "shares_from_label_map",
    "shares_table",
    "unlabeled_share",
    "write_shares_table",
]
