"""The output folder of a generation run: panel files and their manifest.

Layout (docs/benchmark.md section 3, Generation), directly readable by the evaluation step::

    OUT/
      {model}/{condition}/{block_id}/{k:02d}.jpg    512x512, Lanczos, JPEG quality 95
      manifest.parquet                              one row per image (the merged manifest)
      manifest.part-{host}-{pid}.jsonl              journals of running (or killed) processes
      generation_summary.json                       the last run's summary

Crash safety. An image is encoded in memory, written to ``.{k:02d}.jpg.tmp`` beside its final
name, flushed, fsynced and renamed with ``os.replace`` (atomic), and only then is its manifest
row appended to the process's journal (one JSON line, flushed and fsynced). A process killed at
any point therefore leaves whole images, whole journal lines (plus at most one torn last line,
which readers skip) and at worst an image without a row, which the next run regenerates
(identically). Each process writes only its own journal and holds an exclusive ``flock`` on it
while it runs.

Merging. :func:`merge_manifest` (run by the main process after every process finished) reads
``manifest.parquet`` and every journal, keeps for each image (model, condition, block_id, k) the
most recent row whose ``sha256`` equals the file on disk, drops rows whose file is gone or
changed, writes ``manifest.parquet`` atomically, then deletes the journals it merged whose
processes are finished (their lock is free). Re-running it is harmless.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..generated_folder import SETTINGS_COLUMNS

try:  # POSIX advisory locks tell a live journal from a dead one; elsewhere journals are kept.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

PANEL_SIZE = 512
JPEG_QUALITY = 95
MANIFEST_FILE = "manifest.parquet"
SUMMARY_FILE = "generation_summary.json"
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

#: Columns that must match for an existing image to be reused instead of regenerated: the unit's seed
#: and prompt, and every generation setting that ``evaluate`` requires one method's images to share
#: (:data:`geofidelity_bench.generated_folder.SETTINGS_COLUMNS`: weights, revision, pipeline, call
#: arguments, steps, guidance, dtype, size, negative prompt). A setting missing here would let
#: ``generate`` keep an image that ``evaluate`` then refuses as made with other settings.
REUSE_COLUMNS = ("seed", "prompt", *SETTINGS_COLUMNS)


def panel_relpath(model: str, condition: str, block_id: str, k: int) -> str:
    """``{model}/{condition}/{block_id}/{k:02d}.jpg`` (always with ``/``)."""
    return f"{model}/{condition}/{block_id}/{int(k):02d}.jpg"


def encode_panel(image) -> bytes:
    """The bytes of a saved panel: RGB, Lanczos to 512x512, JPEG quality 95."""
    from PIL import Image

    img = image.convert("RGB")
    if img.size != (PANEL_SIZE, PANEL_SIZE):
        img = img.resize((PANEL_SIZE, PANEL_SIZE), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


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


# -- journals ---------------------------------------------------------------------------------


class ManifestJournal:
    """Append-only JSON-lines manifest shard of one process (flushed and fsynced per row)."""

    def __init__(self, out_dir: str | os.PathLike, tag: str | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tag = tag or f"{_safe_host()}-{os.getpid()}"
        self.path = self.out_dir / f"{JOURNAL_PREFIX}{tag}{JOURNAL_SUFFIX}"
        while True:
            self._fh = open(self.path, "ab+")
            if fcntl is None:
                break
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX)
            # A merge may have deleted this (dead, same-named) journal while we waited.
            try:
                if os.stat(self.path).st_ino == os.fstat(self._fh.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            self._fh.close()
        # A previous owner killed mid-line left no newline: start on a fresh line.
        self._fh.seek(0, os.SEEK_END)
        if self._fh.tell() > 0:
            self._fh.seek(-1, os.SEEK_END)
            if self._fh.read(1) != b"\n":
                self._fh.write(b"\n")
        self._fh.flush()

    def append(self, row: Mapping[str, Any]) -> None:
        line = json.dumps(dict(row), ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()  # also releases the lock

    def __enter__(self) -> "ManifestJournal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _safe_host() -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())[:64] or "host"


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


@dataclass
class MergeReport:
    rows: int
    dropped_missing: int
    dropped_changed: int
    journals_merged: int
    journals_kept: int
    path: Path


@contextlib.contextmanager
def _try_lock(path: Path) -> Iterator[bool]:
    """Yields True when nobody holds the journal's lock (its writer is finished or dead)."""
    if fcntl is None:
        yield False
        return
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        yield False
        return
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        fh.close()


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


def merge_manifest(out_dir: str | os.PathLike) -> MergeReport:
    """Merges ``manifest.parquet`` and all journals into ``manifest.parquet`` (see module doc)."""
    out_dir = Path(out_dir)
    journals = journal_files(out_dir)
    with contextlib.ExitStack() as stack:
        finished = [p for p in journals if stack.enter_context(_try_lock(p))]
        rows = read_manifest_file(out_dir)
        for path in journals:
            rows.extend(_read_journal(path))
        kept, missing, changed = verified_rows(out_dir, rows)
        path = write_manifest(out_dir, kept)
        for journal in finished:
            with contextlib.suppress(FileNotFoundError):
                journal.unlink()
    return MergeReport(len(kept), missing, changed, len(finished), len(journals) - len(finished), path)


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


def sweep_tmp_files(out_dir: str | os.PathLike, folders: Iterable[str]) -> int:
    """Deletes leftover ``.*.jpg.tmp`` files (from killed writers) in the given panel folders."""
    removed = 0
    for rel in folders:
        for tmp in (Path(out_dir) / rel).glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed += 1
    return removed
