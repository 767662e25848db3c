"""Images that stay in their Parquet file until they are used.

A benchmark's ``references`` and ``world`` tables are read without their ``image`` column
(pyarrow column projection); each row gets a :class:`StoredImage` that knows its file, row group
and row, and the sha256 of its bytes (the ``image_sha256`` column, or, for folders written before
that column existed, hashes computed once and kept in a small sidecar file in the user cache, see
:func:`stored_hashes`). Bytes are read on demand, one row group of the image column at a time;
the last row group read of each file is kept while it is small (:data:`ROW_GROUP_CACHE_BYTES`), so
walking a file in order reads it once, and nothing else is held. Hashing many images streams their
files in batches of :data:`HASH_BATCH_ROWS` rows through a :data:`STREAM_BUFFER_BYTES` buffer
(:meth:`ParquetImages.iter_sha256`): memory stays within the largest page pyarrow decodes.

A stored hash is a claim, not a fact (docs/benchmark.md, image_sha256). The bytes are hashed and
checked against it

* whenever they are read, for any purpose (:meth:`StoredImage.read`: embedding, segmentation, the
  copy audit's decoding, the app's photos, geodiv, ``info --check-images``), and
* before any result cached under the hash is used in their place (:attr:`StoredImage.sha256`, and
  :func:`verify_images` for many at once, which the cached model runs call for every image they
  do not read): a photo replaced behind a stale ``image_sha256`` can never get the old photo's
  cached embedding, shares or perceptual hashes;

once per process and image (a checked image is not read again for its hash). A mismatch raises
:class:`ImageHashMismatchError` naming the config, the reference (and its block) or world image,
the row, the file and what to do. Only the fingerprint and listings take the claim unread
(:attr:`StoredImage.stored_sha256`). ``load_benchmark(..., rekey_mismatched_images=True)`` instead
keys such rows by their real hash (:func:`rekey_mismatched`) and the benchmark records them.

Every read goes through :attr:`ParquetImages.image_reads` (a per-file counter), so that tests can
check that a command read no image at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from bisect import bisect_right
from pathlib import Path
from typing import Any, Mapping, Sequence

from .atomic import atomic_write
from .errors import GeoFidelityError
from .images import ImageDecodeError

IMAGE_COLUMN = "image"
SHA256_COLUMN = "image_sha256"
#: a row group of the image column is kept after a read while it holds at most this many bytes (the
#: files this package writes have 100-row groups); a larger one is read again for each image
ROW_GROUP_CACHE_BYTES = 512 << 20
HASH_CACHE_FORMAT = "geofidelity-image-hashes/1"
#: rows of the image column decoded at a time when a whole file is hashed (:meth:`ParquetImages.iter_values`)
HASH_BATCH_ROWS = 16
#: bytes of a Parquet file read at a time when its image column is streamed: pyarrow then reads a column
#: chunk page by page instead of whole (its default), which bounds memory by the largest page, not the chunk
STREAM_BUFFER_BYTES = 1 << 20
#: how many mismatched or missing images an error of :func:`verify_images` lists before it counts the rest
MAX_LISTED = 50
#: how the option that keys mismatched rows by their real hash is spelled (command line, Python)
REKEY_OPTION = "--rekey-mismatched-images"
REKEY_ARG = "rekey_mismatched_images=True"


class ImageHashMismatchError(GeoFidelityError, ValueError):
    """An image's bytes do not hash to the ``image_sha256`` stored with them; the message names the row."""


def _config_of(path: str) -> str:
    """The benchmark config of a Parquet file (``<folder>/<config>/<file>.parquet``)."""
    return Path(path).parent.name


def mismatch_message(path: str, row: int, name: str, stored: str, actual: str) -> str:
    """One mismatched row in words: config, reference/image id (and block), file, row, both hashes, what to do."""
    return (f"{_config_of(path)} {name}, row {row} of {path}: its image bytes hash to sha256 {actual}, but its "
            f"stored {SHA256_COLUMN} is {stored} (the photo was replaced or damaged after the hash was written, or "
            f"the hashes were edited); a result cached under the stored hash (an embedding, segmentation shares, "
            f"copy-audit hashes) would stand for another photo. Restore the original photo or hash, or re-save the "
            f"benchmark so that its {SHA256_COLUMN} column is recomputed from the bytes "
            f"(save_benchmark(load_benchmark(FOLDER, {REKEY_ARG}), NEW_FOLDER)), or pass {REKEY_OPTION} "
            f"({REKEY_ARG} in load_benchmark) to key each such row by the hash of its bytes (run.json records "
            f"them)")


def hash_cache_dir() -> Path:
    """``$GEOFIDELITY_HASH_CACHE``, else ``<HF_HOME>/geofidelity_bench/image_hashes``."""
    env = os.environ.get("GEOFIDELITY_HASH_CACHE")
    if env:
        return Path(env).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "geofidelity_bench" / "image_hashes"


class ParquetImages:
    """The image column of one Parquet file, read a row group at a time (thread-safe, picklable)."""

    def __init__(self, path: str | os.PathLike, column: str = IMAGE_COLUMN):
        import pyarrow.parquet as pq

        self.path = str(path)
        self.column = column
        meta = pq.ParquetFile(self.path).metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self._starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self._group_bytes = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
        self.num_rows = sum(sizes)
        self.image_reads = 0  # images handed out (each one read from the file or the kept row group)
        self.row_group_reads = 0
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._kept: tuple[int, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state.pop("_kept", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def root(self) -> Path:
        """The benchmark folder (or Hub snapshot) the file belongs to (``{root}/{config}/file.parquet``):
        where the relative ``path`` of an image cell without bytes is resolved (:func:`cell_bytes`)."""
        return Path(self.path).parent.parent

    def _group_of(self, row: int) -> tuple[int, int]:
        group = bisect_right(self._starts, row) - 1
        return group, row - self._starts[group]

    def _read_group(self, group: int):
        import pyarrow.parquet as pq

        self.row_group_reads += 1
        with pq.ParquetFile(self.path, pre_buffer=False, buffer_size=STREAM_BUFFER_BYTES) as file:
            return file.read_row_group(group, columns=[self.column], use_threads=False).column(0)

    def value(self, row: int) -> Any:
        """The cell of ``row`` (a ``{"bytes", "path"}`` dict or raw bytes), read now."""
        group, index = self._group_of(row)
        with self._lock:
            self.image_reads += 1
            if self._kept is not None and self._kept[0] == group:
                column = self._kept[1]
            else:
                self._kept = None  # release the previous row group before reading the next one
                column = self._read_group(group)
                if self._group_bytes[group] <= ROW_GROUP_CACHE_BYTES:
                    self._kept = (group, column)
                    _keep_only(self)
        return column[index].as_py()

    def release(self) -> None:
        """Drops the kept row group."""
        with self._lock:
            self._kept = None

    def iter_values(self, batch_rows: int | None = None):
        """Every cell in row order, streamed ``batch_rows`` rows at a time (not counted as uses)."""
        for _, value in self.iter_rows(None, batch_rows):
            yield value

    def iter_rows(self, rows: set[int] | None = None, batch_rows: int | None = None):
        """``(row, cell)`` of every row in ``rows`` (None: all), in row order, streamed (not counted as uses)."""
        for row, column, i in self._iter_cells(rows, batch_rows):
            yield row, column[i].as_py()

    def iter_sha256(self, rows: set[int] | None = None, batch_rows: int | None = None):
        """``(row, sha256 hex or the ImageDecodeError of a cell without image data)`` of every row in ``rows``
        (None: all), in row order, streamed like :meth:`iter_rows`; embedded bytes are hashed where pyarrow
        decoded them, without a copy."""
        for row, column, i in self._iter_cells(rows, batch_rows):
            try:
                yield row, _cell_sha256(column, i, f"row {row} of {self.path}", self.root)
            except ImageDecodeError as err:
                yield row, err

    def _iter_cells(self, rows: set[int] | None, batch_rows: int | None):
        """``(row, arrow column, index in it)`` of every wanted row, streamed.

        Only the row groups holding a wanted row are read, and none whole: the file is read through a
        buffer of :data:`STREAM_BUFFER_BYTES` and pyarrow decodes the column page by page into batches of
        ``batch_rows`` cells (default :data:`HASH_BATCH_ROWS`). Memory stays within the largest page
        pyarrow must decode (held compressed and decompressed at once), whatever the number of rows, row
        groups or files; a writer may make that page as large as a row group's image column (a dictionary
        page: pyarrow's default writer puts a row group written in one batch in one), else it is about 1 MB.
        """
        import pyarrow.parquet as pq

        batch_rows = max(1, batch_rows or HASH_BATCH_ROWS)
        groups = list(range(len(self._starts)))
        if rows is not None:
            groups = sorted({self._group_of(r)[0] for r in rows})
        if not groups:
            return
        self.row_group_reads += len(groups)
        try:
            with pq.ParquetFile(self.path, pre_buffer=False, buffer_size=STREAM_BUFFER_BYTES) as file:
                for group in groups:
                    row = self._starts[group]
                    for batch in file.iter_batches(batch_size=batch_rows, row_groups=[group], columns=[self.column],
                                                   use_threads=False):
                        column = batch.column(0)
                        for i in range(len(column)):
                            if rows is None or row + i in rows:
                                yield row + i, column, i
                        row += len(column)
                        del column, batch
        finally:  # hand the page buffers back to the system: the next file (or anything else) starts from there
            import pyarrow as pa

            pa.default_memory_pool().release_unused()


def _cell_sha256(column, i: int, name: str, root: str | os.PathLike | None) -> str:
    """sha256 hex of the image bytes of cell ``i`` of an arrow image column (a ``{"bytes", "path"}`` struct
    or raw binary): embedded bytes are hashed in place; anything else goes through :func:`cell_bytes`."""
    import pyarrow as pa

    cell = column[i]
    if cell.is_valid:
        data = cell["bytes"] if pa.types.is_struct(column.type) and "bytes" in cell else cell
        if (pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type)) and data.is_valid:
            buf = data.as_buffer()
            if buf.size:
                return hashlib.sha256(buf).hexdigest()
    return hashlib.sha256(cell_bytes(cell.as_py(), name, root)).hexdigest()


_KEPT_LOCK = threading.Lock()
_KEPT_BY: list[ParquetImages] = []  # the one reader (of all files) allowed to keep a row group


def _keep_only(reader: ParquetImages) -> None:
    """Makes ``reader`` the only one keeping a row group: memory stays at one row group per process."""
    with _KEPT_LOCK:
        previous = _KEPT_BY[0] if _KEPT_BY else None
        _KEPT_BY[:] = [reader]
    if previous is not None and previous is not reader:
        previous._kept = None  # a plain store: no lock needed to drop a reference


class ImagePathError(ImageDecodeError):
    """An image cell names a file outside its benchmark folder (an absolute path, a ``..`` or a link
    out), or a path with nowhere to resolve it; the file is never read."""


def confined_file(path: str, root: str | os.PathLike) -> tuple[Path | None, str | None]:
    """The file that an image cell's relative ``path`` names inside ``root``, or why it is refused.

    Absolute paths and ``..`` components are refused as written; the rest is resolved with every
    symbolic link followed (:func:`os.path.realpath`) and must stay inside the real ``root``.
    """
    rel = Path(path)
    if rel.is_absolute() or rel.drive or rel.root:
        return None, "an absolute path"
    if ".." in rel.parts:
        return None, "a '..' component"
    try:
        real_root = Path(os.path.realpath(root))
        target = Path(os.path.realpath(Path(root) / rel))
    except (OSError, ValueError) as err:  # a NUL byte, a link loop
        return None, f"a path that cannot be resolved ({err})"
    if not target.is_relative_to(real_root):
        return None, "a link that leads outside the folder"
    return target, None


def cell_bytes(value: Any, name: str, root: str | os.PathLike | None = None) -> bytes:
    """The encoded bytes of an image cell: embedded bytes, or the file its ``path`` names.

    A ``path`` (read only when the cell has no bytes) is relative to ``root``, the benchmark folder
    (or Hub snapshot) the Parquet file belongs to, and must resolve inside it
    (:func:`confined_file`): a benchmark can never make a command read (and ``build-dataset``
    publish) another file of the machine. Without a ``root`` a path is not read at all.
    """
    if isinstance(value, Mapping):
        data = value.get("bytes")
        if data is None and value.get("path"):
            text = str(value["path"])
            if root is None:
                raise ImagePathError(f"{name}: image is not embedded and its path {text!r} has no benchmark "
                                     "folder to resolve it in")
            path, refused = confined_file(text, root)
            if refused is not None:
                raise ImagePathError(
                    f"{name}: image path {text!r} is {refused}, outside the benchmark folder {str(root)!r}; "
                    "the file is not read. An image cell must embed its bytes or name a file inside the benchmark folder"
                )
            if path is not None and path.is_file():
                return path.read_bytes()
            raise ImageDecodeError(f"{name}: image is not embedded and its path {text!r} does not exist "
                                   f"in the benchmark folder {str(root)!r}")
        value = data
    if isinstance(value, (bytes, bytearray)) and value:
        return bytes(value)
    raise ImageDecodeError(f"{name}: no image data")


class StoredImage:
    """One image in a Parquet file: read on demand by :meth:`read`.

    :attr:`stored_sha256` is the hash the file states (no read); :attr:`sha256` is that hash checked
    against the bytes, which are read and hashed the first time it is asked in a process (and on
    every :meth:`read`): a result cached under it can never stand for other bytes.
    """

    __slots__ = ("reader", "row", "name", "_sha256", "block", "_verified")

    def __init__(self, reader: ParquetImages, row: int, name: str, sha256: str | None = None, *,
                 block: str | None = None):
        self.reader, self.row, self.name, self._sha256 = reader, row, name, sha256
        self.block = block  # the reference's block, named in messages (None: a world image, or unknown)
        self._verified = False  # its bytes were hashed in this process and matched

    def __getstate__(self):  # whether it was checked is not carried: another process checks again
        return (self.reader, self.row, self.name, self._sha256, self.block)

    def __setstate__(self, state) -> None:
        self.reader, self.row, self.name, self._sha256 = state[:4]
        self.block = state[4] if len(state) > 4 else None
        self._verified = False

    @property
    def where(self) -> str:
        """How messages call it: ``reference ID (block B)`` or ``world image ID``."""
        return self.name + (f" (block {self.block})" if self.block else "")

    def read(self) -> bytes:
        """The encoded image bytes, read from the file now and checked against the stored hash.

        Raises ImageDecodeError naming a missing image, and :class:`ImageHashMismatchError` naming
        the row when the bytes do not hash to the stored ``image_sha256``.
        """
        data = cell_bytes(self.reader.value(self.row), f"{self.where} ({self.reader.path}, row {self.row})",
                          self.reader.root)
        self._check(hashlib.sha256(data).hexdigest())
        return data

    def _check(self, actual: str) -> None:
        """Compares the hash of the bytes just read with the stored one (adopts it when none is stored)."""
        if self._sha256 is None:
            self._sha256 = actual
        elif actual != self._sha256:
            raise ImageHashMismatchError(mismatch_message(self.reader.path, self.row, self.where, self._sha256,
                                                          actual))
        self._verified = True

    @property
    def stored_sha256(self) -> str:
        """The sha256 the benchmark states for these bytes (``image_sha256``, or the hash computed when
        the folder was first loaded), not checked now: what the fingerprint is made of."""
        if self._sha256 is None:
            self.read()
        return self._sha256

    @property
    def sha256(self) -> str:
        """sha256 hex of the image bytes, checked: the stored hash once the bytes were read and found to
        hash to it (the first call in a process reads and hashes them; :func:`verify_images` checks many
        at once). Raises :class:`ImageHashMismatchError` when they do not."""
        if not self._verified:
            self.read()
        return self._sha256

    def __repr__(self) -> str:
        return f"StoredImage({self.name!r}, {self.reader.path!r}, row {self.row})"


def verify_images(images: Sequence[StoredImage], *, progress: bool = False) -> None:
    """Checks the bytes of every image not yet checked in this process against its stored hash.

    What stands between a cached result and a changed photo: before a result cached under an image's
    stored ``image_sha256`` is used in place of its bytes (an embedding, segmentation shares), the bytes
    are read and hashed (sha256 costs far less than decoding). Each file is streamed once, only the row
    groups holding a wanted row (:meth:`ParquetImages.iter_rows`: memory bounded by one page). Every
    checked image is marked, so :attr:`StoredImage.sha256` does not read it again.

    Raises :class:`ImageHashMismatchError` naming every mismatched image (config, reference or world
    image id, block, file, row, both hashes, what to do; the first :data:`MAX_LISTED` and a count), and
    ImageDecodeError naming every image whose data is missing.
    """
    by_reader: dict[int, tuple[ParquetImages, dict[int, dict[int, StoredImage]]]] = {}
    for img in images:  # each image once, however often it is listed
        if not img._verified:
            by_reader.setdefault(id(img.reader), (img.reader, {}))[1].setdefault(img.row, {})[id(img)] = img
    if not by_reader:
        return
    from tqdm.auto import tqdm

    mismatched: list[str] = []
    missing: list[str] = []
    total = sum(len(rows) for _, rows in by_reader.values())
    with tqdm(total=total, desc="checking image hashes", unit="img", disable=not progress or total < 200) as bar:
        for reader, rows in by_reader.values():
            for row, sha in reader.iter_sha256(set(rows)):
                for img in rows[row].values():
                    if isinstance(sha, ImageDecodeError):
                        missing.append(f"{img.where}: {sha}")
                        continue
                    try:
                        img._check(sha)
                    except ImageHashMismatchError as err:
                        mismatched.append(str(err))
                reader.image_reads += len(rows[row])
                bar.update(1)
    if mismatched:
        listed = mismatched + missing
        head = (f"{len(mismatched)} image(s) whose bytes do not hash to their stored {SHA256_COLUMN}"
                + (f" and {len(missing)} without image data" if missing else "") + ":\n  ")
        raise ImageHashMismatchError(listed[0] if len(listed) == 1 else head + "\n  ".join(_first(listed)))
    if missing:
        raise ImageDecodeError(missing[0] if len(missing) == 1 else f"{len(missing)} image(s) without image data:\n  "
                               + "\n  ".join(_first(missing)))


def _first(lines: Sequence[str]) -> list[str]:
    return list(lines[:MAX_LISTED]) + ([f"... and {len(lines) - MAX_LISTED} more"] if len(lines) > MAX_LISTED else [])


def _sidecar_path(file: str) -> tuple[Path, dict[str, Any]]:
    st = os.stat(file)
    ident = {"format": HASH_CACHE_FORMAT, "file": os.path.realpath(file), "size": st.st_size,
             "mtime_ns": st.st_mtime_ns}
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()
    return hash_cache_dir() / f"{key}.json", ident


def stored_hashes(reader: ParquetImages, *, desc: str = "hashing images") -> list[str | None]:
    """sha256 of every image of a Parquet file without an ``image_sha256`` column.

    Computed once (each image read once, with a progress bar) and kept in a sidecar JSON file in
    :func:`hash_cache_dir`, keyed by the file's real path, size and modification time; the
    benchmark folder is never written. None for a row without image data.
    """
    from tqdm.auto import tqdm

    sidecar, ident = _sidecar_path(reader.path)
    try:
        cached = json.loads(sidecar.read_text(encoding="utf-8"))
        if {k: cached.get(k) for k in ident} == ident and len(cached.get("sha256", [])) == reader.num_rows:
            return list(cached["sha256"])
    except (OSError, ValueError, AttributeError):
        pass
    cells = tqdm(reader.iter_sha256(), total=reader.num_rows, desc=desc, unit="img", disable=reader.num_rows < 200)
    hashes = [None if isinstance(sha, ImageDecodeError) else sha for _, sha in cells]  # no image: named when used
    try:
        text = json.dumps({**ident, "sha256": hashes})
        atomic_write(sidecar, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    except OSError as err:  # a read-only cache only costs the hashing next time
        warnings.warn(f"cannot keep image hashes in {sidecar}: {err}", stacklevel=2)
    return hashes


def rekey_mismatched(images: Sequence[StoredImage]) -> list[dict[str, Any]]:
    """Keys every image whose bytes do not hash to its stored hash by the hash of its bytes.

    Each file is hashed in one streamed pass (:func:`stored_hashes`, so the hashes of a file
    already hashed are taken from the user cache). Returns one record per re-keyed row: ``config``,
    ``file`` (``config/name.parquet``), ``row``, ``image`` (``reference ID`` or ``world image ID``),
    ``stored_sha256`` and ``actual_sha256``.
    """
    by_reader: dict[int, tuple[ParquetImages, list[StoredImage]]] = {}
    for img in images:
        by_reader.setdefault(id(img.reader), (img.reader, []))[1].append(img)
    records = []
    for reader, imgs in by_reader.values():
        if all(img._sha256 is None for img in imgs):
            continue  # no stored hashes: they are computed from the bytes
        actual = stored_hashes(reader, desc=f"verifying image hashes of {_config_of(reader.path)}/"
                                            f"{Path(reader.path).name}")
        for img in imgs:
            real = actual[img.row]
            if real is not None and img._sha256 is not None and real != img._sha256:
                records.append({"config": _config_of(reader.path),
                                "file": f"{_config_of(reader.path)}/{Path(reader.path).name}", "row": img.row,
                                "image": img.name, "stored_sha256": img._sha256, "actual_sha256": real})
                img._sha256 = real
    return records


def check_images(items: Sequence[tuple[str, Any]], *, num_workers: int | None = None,
                 progress: bool = True) -> list[str]:
    """Decodes every ``(name, source)`` in a thread pool; returns one line per bad image.

    ``source`` is bytes or a :class:`StoredImage`. Every image is decoded fully (not only its
    header), so truncated files are found too, and a StoredImage's bytes are checked against its
    stored hash (a mismatch is a bad image, :class:`ImageHashMismatchError`'s message).
    """
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    from .images import load_image
    from .prefetch import resolve_num_workers

    def check(item: tuple[str, Any]) -> str | None:
        name, source = item
        try:
            data = source.read() if isinstance(source, StoredImage) else source
            load_image(data, name=name)
        except (ImageDecodeError, ImageHashMismatchError) as err:
            return str(err)
        return None

    workers = max(1, resolve_num_workers(num_workers))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(tqdm(pool.map(check, items), total=len(items), desc="checking images", unit="img",
                            disable=not progress))
    return [r for r in results if r is not None]
