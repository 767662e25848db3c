"""Reading a dataset repo back: download it (:func:`fetch_dataset`), and turn its ``generations``
config into a panels folder that ``geofidelity-bench evaluate --generated`` reads
(:func:`export_generations`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

from ..benchmark import CONFIGS as BENCHMARK_CONFIGS
from ..benchmark import BenchmarkError
from .card import CARD_FILE, LICENSE_FILE
from .configs import GENERATIONS_DIR, DatasetBuildError
from .requests import describe_error


def fetch_dataset(
    repo_id: str,
    local_dir: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    generations: bool = True,
) -> Path:
    """Downloads a dataset repo's card and Parquet files; returns the local folder.

    The folder is a canonical benchmark folder: :func:`~geofidelity_bench.load_benchmark` and
    ``datasets.load_dataset(folder, config)`` read it, and :func:`export_generations` turns its
    ``generations`` config back into a panels folder for ``geofidelity-bench evaluate``.
    """
    from huggingface_hub import snapshot_download

    patterns = [CARD_FILE, LICENSE_FILE, *(f"{c}/*.parquet" for c in BENCHMARK_CONFIGS)]
    if generations:
        patterns.append(f"{GENERATIONS_DIR}/*/*.parquet")
    try:
        path = snapshot_download(
            repo_id=repo_id,
            repo_type="dataset",
            revision=revision,
            endpoint=endpoint,
            token=token,
            local_dir=str(local_dir) if local_dir is not None else None,
            allow_patterns=patterns,
        )
    except Exception as err:  # noqa: BLE001 - one clear message whatever went wrong
        tok = token if isinstance(token, str) else None
        raise BenchmarkError(f"cannot download dataset {repo_id!r}: {describe_error(err, tok)}") from err
    return Path(path)


def export_generations(
    folder: str | os.PathLike, out_dir: str | os.PathLike, *, models: Sequence[str] | None = None
) -> int:
    """Writes the ``generations`` config of a built/downloaded folder as a panels folder.

    Output: ``{model}/{condition}/{block_id}/{k:02d}.jpg`` plus ``manifest.parquet`` (the rows'
    manifest columns), which ``geofidelity-bench evaluate --generated`` reads. Returns the number
    of images written. Each image's bytes are checked against its recorded sha256.
    """
    import pyarrow.parquet as pq

    from ..manifest_format import MANIFEST_COLUMNS, atomic_write_bytes, panel_relpath, write_manifest

    folder, out_dir = Path(folder), Path(out_dir)
    files = sorted((folder / GENERATIONS_DIR).glob("*/*.parquet"))
    if not files:
        raise DatasetBuildError(f"{folder} has no generations/*/*.parquet files")
    rows = []
    for file in files:
        if models and file.parent.name not in models:
            continue
        for row in pq.read_table(file).to_pylist():
            data = (row.get("image") or {}).get("bytes")
            if not data:
                raise DatasetBuildError(f"{file}: row {row.get('path')!r} has no embedded image bytes")
            if row.get("sha256") and hashlib.sha256(data).hexdigest() != row["sha256"]:
                raise DatasetBuildError(f"{file}: image {row.get('path')!r} does not match its recorded sha256")
            rel = panel_relpath(row["model"], row["condition"], row["block_id"], row["k"])
            atomic_write_bytes(out_dir / rel, data)
            rec = {c: row.get(c) for c in MANIFEST_COLUMNS}
            rec["path"] = rel
            rows.append(rec)
    write_manifest(out_dir, rows)
    return len(rows)


__all__ = ["export_generations", "fetch_dataset"]
