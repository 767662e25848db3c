"""The output folder of a generation run: panel files and their manifest (generation's writing side).

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

The manifest's file format (columns, reading, verifying, writing the Parquet file) is
:mod:`geofidelity_bench.manifest_format`, which the Hub and evaluation read too; its names are
re-exported here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..manifest_format import (  # noqa: F401  (the format, re-exported: its home is manifest_format.py)
    JOURNAL_PREFIX,
    JOURNAL_SUFFIX,
    KEY_COLUMNS,
    MANIFEST_COLUMNS,
    MANIFEST_FILE,
    SETTINGS_COLUMNS,
    TMP_SUFFIX,
    VOLATILE_COLUMNS,
    atomic_write_bytes,
    file_sha256,
    index_rows,
    journal_files,
    load_manifest,
    matching_row,
    normalize_row,
    panel_relpath,
    read_all_rows,
    _read_journal,
    read_manifest_file,
    row_key,
    tmp_path_for,
    verified_rows,
    write_manifest,
)

try:  # POSIX advisory locks tell a live journal from a dead one; elsewhere journals are kept.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

PANEL_SIZE = 512
JPEG_QUALITY = 95
SUMMARY_FILE = "generation_summary.json"

#: Columns that must match for an existing image to be reused instead of regenerated: the unit's seed
#: and prompt, and every generation setting that ``evaluate`` requires one method's images to share
#: (:data:`geofidelity_bench.manifest_format.SETTINGS_COLUMNS`: weights, revision, pipeline, call
#: arguments, steps, guidance, dtype, size, negative prompt). A setting missing here would let
#: ``generate`` keep an image that ``evaluate`` then refuses as made with other settings.
REUSE_COLUMNS = ("seed", "prompt", *SETTINGS_COLUMNS)


def encode_panel(image) -> bytes:
    """The bytes of a saved panel: RGB, Lanczos to 512x512, JPEG quality 95."""
    from PIL import Image

    img = image.convert("RGB")
    if img.size != (PANEL_SIZE, PANEL_SIZE):
        img = img.resize((PANEL_SIZE, PANEL_SIZE), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


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


# -- merging --------------------------------------------------------------------------------------


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


def sweep_tmp_files(out_dir: str | os.PathLike, folders: Iterable[str]) -> int:
    """Deletes leftover ``.*.jpg.tmp`` files (from killed writers) in the given panel folders."""
    removed = 0
    for rel in folders:
        for tmp in (Path(out_dir) / rel).glob(f".*{TMP_SUFFIX}"):
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
                removed += 1
    return removed


__all__ = [
    "JOURNAL_PREFIX",
    "JOURNAL_SUFFIX",
    "JPEG_QUALITY",
    "KEY_COLUMNS",
    "MANIFEST_COLUMNS",
    "MANIFEST_FILE",
    "ManifestJournal",
    "MergeReport",
    "PANEL_SIZE",
    "REUSE_COLUMNS",
    "SETTINGS_COLUMNS",
    "SUMMARY_FILE",
    "TMP_SUFFIX",
    "VOLATILE_COLUMNS",
    "atomic_write_bytes",
    "encode_panel",
    "file_sha256",
    "index_rows",
    "journal_files",
    "load_manifest",
    "matching_row",
    "merge_manifest",
    "normalize_row",
    "panel_relpath",
    "read_all_rows",
    "read_manifest_file",
    "row_key",
    "sweep_tmp_files",
    "tmp_path_for",
    "verified_rows",
    "write_manifest",
]
