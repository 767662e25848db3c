"""Embeddings as a Parquet file (what ``geofidelity-bench embed --out`` writes).

One row per image: ``kind`` (``reference`` or ``world``), ``id`` (the reference or world image
id) and ``embedding`` (fixed-size float32 list). The schema metadata records the encoder config
(JSON), its hash and the benchmark fingerprint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from geofidelity_bench.errors import GeoFidelityError


class EmbeddingExportError(GeoFidelityError, ValueError):
    """The embeddings cannot be written as asked (e.g. not a ``.parquet`` path)."""


def check_parquet_path(path: str | os.PathLike, flag: str = "--out") -> Path:
    """``path`` as a Path, or an :class:`EmbeddingExportError` naming ``flag`` when it is not a .parquet file."""
    path = Path(path)
    if path.suffix != ".parquet":
        raise EmbeddingExportError(f"{flag} must be a .parquet file, got {str(path)!r}")
    return path


def write_embeddings_parquet(
    path: str | os.PathLike, kinds: Sequence[str], ids: Sequence[str], embeddings: np.ndarray, encoder, bench
) -> Path:
    """Writes one row per image (``kind``, ``id``, ``embedding``) with the encoder config, its
    hash and ``bench``'s fingerprint in the schema metadata; returns the path. A row that is not
    finite is refused (:class:`~geofidelity_bench.encoders.base.NonFiniteEmbeddingError` naming
    the image) and nothing is written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from geofidelity_bench.atomic import atomic_write
    from geofidelity_bench.encoders.base import check_finite_rows

    path = check_parquet_path(path, "path")
    check_finite_rows(embeddings, [f"{kind} {id_}" for kind, id_ in zip(kinds, ids)])  # never a NaN row in the file
    table = pa.table({
        "kind": list(kinds),
        "id": list(ids),
        "embedding": pa.array(list(embeddings.astype("float32")), type=pa.list_(pa.float32(), embeddings.shape[1])),
    })
    meta = {"encoder": json.dumps(encoder.config), "encoder_config_hash": encoder.config_hash,
            "benchmark_fingerprint": bench.fingerprint}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **{k: v.encode() for k, v in meta.items()}})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))
    return path
