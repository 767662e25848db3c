"""The generation manifest's file format: what ``manifest.parquet`` and its journals hold, and how
they are read, checked and written (docs/benchmark.md section 3, Generation and section 11, File formats).

A generated folder (``{model}/{condition}/{block_id}/{k:02d}.jpg``) made by ``generate`` holds
``manifest.parquet`` (one row per image, :data:`MANIFEST_COLUMNS`) and, while processes run or
after one was killed, ``manifest.part-{host}-{pid}.jsonl`` journals (one JSON row per line; a torn
last line is skipped). This module is the format only, read by several layers: generation writes
it (:mod:`geofidelity_bench.generation.manifest`: journals, merging, the panel JPEG), evaluation
checks panels against it (:mod:`geofidelity_bench.generated_folder`), the Hub publishes and fetches
it (:mod:`geofidelity_bench.hub`), and ``import-release`` writes one. It imports nothing else from
the package, and pyarrow/pandas only inside the functions that read or write Parquet.

* :func:`read_all_rows` (the Parquet file and every journal, unverified), :func:`verified_rows`
  (per image the newest row whose sha256 matches the file), :func:`load_manifest` (a DataFrame);
* :func:`write_manifest` (sorted, atomic), :func:`atomic_write_bytes`, :func:`normalize_row`;
* :func:`panel_relpath`, :func:`file_sha256`, :func:`index_rows`, :func:`matching_row`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

MANIFEST_FILE = "manifest.parquet"
JOURNAL_PREFIX = "manifest.part-"
JOURNAL_SUFFIX = ".jsonl"
TMP_SUFFIX = ".tmp"

KEY_COLUMNS = ("model", "condition", "block_id", "k")

#: Manifest columns and their Arrow types (``pyarrow`` names).
MANIFEST_COLUMNS: dict[str, str] = {
    "model": "string",
    "block_id": "string",
    "condition": "string",
    "k": "int64",
    "seed": "int64",
    "prompt": "string",
    "negative_prompt": "string",
    "steps": "int64",
    "guidance": "float64",
    "dtype": "string",
    "height": "int64",
    "width": "int64",
    "weights": "string",
    "weights_revision": "string",
    "pipeline": "string",
    "call_kwargs": "string",
    "street_donor": "string",
    "neighborhood_donor": "string",
    "benchmark": "string",
    "benchmark_fingerprint": "string",
    "path": "string",
    "sha256": "string",
    "file_size": "int64",
    "duration_s": "float64",
    "created_at": "string",
    "batch_size": "int64",
    "process_index": "int64",
    "num_processes": "int64",
    "device": "string",
    "float32_precision": "string",
    "python_version": "string",
    "torch_version": "string",
    "diffusers_version": "string",
    "transformers_version": "string",
    "accelerate_version": "string",
    "geofidelity_bench_version": "string",
}

#: Columns that depend on when and where an image was made, not on what it is.
VOLATILE_COLUMNS = ("duration_s", "created_at", "process_index", "num_processes", "device", "batch_size",
                    "float32_precision")

#: ``float32_precision``: JSON of torch's float32 precision settings for the generating device, read
#: from torch at the image's ``generate`` call (``{"cuda.matmul": "none", "cuda.conv": "tf32", ...}``,
#: :func:`geofidelity_bench.encoders.devices.float32_settings_in_force`). Generation leaves them as
#: the caller has them (torch's defaults: cuDNN convolutions may use TF32), as the paper's runs with
#: diffusers' defaults did (docs/benchmark.md section 3, Generation); the column says what ran.

#: Manifest columns that make two images "made with the same settings" (the model spec).
SETTINGS_COLUMNS = ("weights", "weights_revision", "pipeline", "call_kwargs", "steps", "guidance", "dtype",
                    "height", "width", "negative_prompt")


def panel_relpath(model: str, condition: str, block_id: str, k: int) -> str:
    """``{model}/{condition}/{block_id}/{k:02d}.jpg`` (always with ``/``)."""
    return f"{model}/{condition}/{block_id}/{int(k):02d}.jpg"


def file_sha256(path: str | os.PathLike) -> str | None:
    """sha256 of a file's bytes, ``None`` when it does not exist."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def tmp_path_for(path: Path) -> Path:
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes ``data`` to ``path`` so that readers see the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path_for(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk leaves no partial temporary file behind
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def row_key(row: Mapping[str, Any]) -> tuple[str, str, str, int]:
    return (str(row["model"]), str(row["condition"]), str(row["block_id"]), int(row["k"]))


# -- reading ------------------------------------------------------------------------------------


def journal_files(out_dir: str | os.PathLike) -> list[Path]:
    return sorted(Path(out_dir).glob(f"{JOURNAL_PREFIX}*{JOURNAL_SUFFIX}"))


def _read_journal(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return rows
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn line from a killed process
        if isinstance(row, dict) and all(c in row for c in KEY_COLUMNS) and row.get("sha256"):
            rows.append(row)
    return rows


def read_manifest_file(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(out_dir) / MANIFEST_FILE
    if not path.is_file():
        return []
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def read_all_rows(out_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of ``manifest.parquet`` then of every journal (unverified, duplicates kept)."""
    rows = read_manifest_file(out_dir)
    for path in journal_files(out_dir):
        rows.extend(_read_journal(path))
    return rows


def index_rows(rows: Iterable[Mapping[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    index: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        index.setdefault(row_key(row), []).append(dict(row))
    return index


def _newest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: str(r.get("created_at") or ""), reverse=True)


def matching_row(candidates: list[dict[str, Any]], sha256: str | None) -> dict[str, Any] | None:
    """The newest row among ``candidates`` describing a file with hash ``sha256``."""
    if sha256 is None:
        return None
    for row in _newest_first(candidates):
        if row.get("sha256") == sha256:
            return row
    return None


def normalize_row(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for col, typ in MANIFEST_COLUMNS.items():
        value = row.get(col)
        if value is not None:
            if typ == "int64":
                value = int(value)
            elif typ == "float64":
                value = float(value)
            else:
                value = str(value)
        out[col] = value
    return out


def _schema():
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    return pa.schema([(c, types[t]) for c, t in MANIFEST_COLUMNS.items()])


def write_manifest(out_dir: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Writes ``manifest.parquet`` (rows sorted by model, condition, block_id, k) atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ordered = sorted((normalize_row(r) for r in rows), key=row_key)
    table = pa.Table.from_pylist(ordered, schema=_schema())
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    path = Path(out_dir) / MANIFEST_FILE
    atomic_write_bytes(path, buf.getvalue().to_pybytes())
    return path


def verified_rows(out_dir: str | os.PathLike, rows: Iterable[Mapping[str, Any]] | None = None):
    """For each image, the newest row whose hash matches its file; plus drop counts."""
    out_dir = Path(out_dir)
    index = index_rows(read_all_rows(out_dir) if rows is None else rows)
    kept, missing, changed = [], 0, 0
    for key, candidates in index.items():
        path = out_dir / panel_relpath(*key)
        sha = file_sha256(path)
        if sha is None:
            missing += 1
            continue
        row = matching_row(candidates, sha)
        if row is None:
            changed += 1
            continue
        kept.append(row)
    return kept, missing, changed


def load_manifest(out_dir: str | os.PathLike, *, verify: bool = True):
    """The manifest of a generation folder as a pandas DataFrame (journals included).

    With ``verify`` (default) only rows whose file exists with the recorded hash are kept,
    one per image; this is what the push to the Hub uses.
    """
    import pandas as pd

    if verify:
        rows, _, _ = verified_rows(out_dir)
    else:
        rows = read_all_rows(out_dir)
    ordered = sorted((normalize_row(r) for r in rows), key=row_key)
    return pd.DataFrame(ordered, columns=list(MANIFEST_COLUMNS))


__all__ = [
    "JOURNAL_PREFIX",
    "JOURNAL_SUFFIX",
    "KEY_COLUMNS",
    "MANIFEST_COLUMNS",
    "MANIFEST_FILE",
    "SETTINGS_COLUMNS",
    "TMP_SUFFIX",
    "VOLATILE_COLUMNS",
    "atomic_write_bytes",
    "file_sha256",
    "index_rows",
    "journal_files",
    "load_manifest",
    "matching_row",
    "normalize_row",
    "panel_relpath",
    "read_all_rows",
    "read_manifest_file",
    "row_key",
    "tmp_path_for",
    "verified_rows",
    "write_manifest",
]
