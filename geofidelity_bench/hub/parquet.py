"""Writing the configs of the dataset repo as Parquet shards.

Every Parquet file carries its ``datasets`` features in the schema metadata. Benchmark image
configs (``references``, ``world``) are written in row groups of 100 rows (what the dataset
viewer reads well); the ``generations`` shards keep pyarrow's default row groups (they have
always been written so, and changing it would change every published shard's bytes). A file
is named ``train-{i:05d}-of-{n:05d}.parquet``; a shard's bytes only change when its rows do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ..atomic import atomic_write
from .configs import GENERATIONS_DIR, IMAGE_CONFIGS, config_features, generation_features, generation_rows

DEFAULT_MAX_SHARD_ROWS = 500
IMAGE_ROW_GROUP_SIZE = 100


def shard_name(index: int, total: int) -> str:
    return f"train-{index:05d}-of-{total:05d}.parquet"


def shard_path(model: str, index: int, total: int) -> str:
    """Path in the repo of shard ``index`` of ``total`` of a model's generations."""
    return f"{GENERATIONS_DIR}/{model}/{shard_name(index, total)}"


def write_table(rows: list[dict[str, Any]], features, target: Path, *, row_group_size: int | None = None) -> int:
    """Encodes ``rows`` with ``features`` and writes one Parquet file atomically; returns Arrow bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    batch = {name: [row.get(name) for row in rows] for name in features}
    table = pa.Table.from_pydict(features.encode_batch(batch), schema=features.arrow_schema)
    kwargs = {"row_group_size": row_group_size} if row_group_size else {}
    atomic_write(target, lambda tmp: pq.write_table(table, tmp, **kwargs))
    return int(table.nbytes)


def write_config(
    rows: Sequence[dict[str, Any]], config: str, folder: Path, *, max_shard_rows: int = DEFAULT_MAX_SHARD_ROWS
) -> tuple[list[Path], int]:
    """Writes ``folder/{config}/train-*.parquet`` (shards of ``max_shard_rows`` for image configs)."""
    features = config_features(config)
    image_config = config in IMAGE_CONFIGS
    per_shard = max_shard_rows if image_config else max(1, len(rows))
    total = max(1, -(-len(rows) // per_shard))
    files, nbytes = [], 0
    for i in range(total):
        target = folder / config / shard_name(i, total)
        chunk = list(rows[i * per_shard : (i + 1) * per_shard])
        nbytes += write_table(chunk, features, target, row_group_size=IMAGE_ROW_GROUP_SIZE if image_config else None)
        files.append(target)
    return files, nbytes


def build_model_shards(
    out_dir: str | os.PathLike,
    manifest,
    model: str,
    folder: str | os.PathLike,
    *,
    max_shard_rows: int = DEFAULT_MAX_SHARD_ROWS,
    from_scan: bool = False,
) -> list[tuple[str, Path, int]]:
    """Writes the Parquet shards of one model into ``folder``: ``[(path_in_repo, file, n_rows)]``.

    Rows are sorted by (condition, block_id, k) and cut into shards of at most
    ``max_shard_rows`` rows; one shard at a time is held in memory. ``from_scan=True``: ``manifest``
    holds :func:`~geofidelity_bench.hub.configs.folder_manifest` rows (a folder without manifest).
    """
    if max_shard_rows < 1:
        raise ValueError("max_shard_rows must be >= 1")
    n_rows = int((manifest["model"] == model).sum())
    total = max(1, -(-n_rows // max_shard_rows))
    features = generation_features()
    rows = generation_rows(out_dir, manifest, model=model, from_scan=from_scan)
    shards = []
    for i in range(total):
        chunk = [row for _, row in zip(range(max_shard_rows), rows)]
        local = Path(folder) / f"{model}-{i:05d}.parquet"
        write_table(chunk, features, local)
        shards.append((shard_path(model, i, total), local, len(chunk)))
    return shards


def arrow_nbytes(path: Path) -> int:
    """Uncompressed size of a Parquet file's row groups (the ``num_bytes`` of a split)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    return int(sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)))


__all__ = [
    "DEFAULT_MAX_SHARD_ROWS",
    "IMAGE_ROW_GROUP_SIZE",
    "arrow_nbytes",
    "build_model_shards",
    "shard_name",
    "shard_path",
    "write_config",
    "write_table",
]
