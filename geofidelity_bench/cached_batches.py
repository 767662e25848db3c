"""Running a model over many images through a content-addressed cache.

Both the encoders (embeddings) and the segmenters (group shares) work the same way: hash
every image's content, serve hits from the :class:`~geofidelity_bench.encoders.cache.EmbeddingCache`,
run the model on each distinct miss once, in batches, and write new rows to the cache as they
come, so that a failing or interrupted run keeps what it computed. Bad images raise the
ImageDecodeError that names them, after the rows computed before them are flushed. An image kept in
a benchmark's Parquet file is keyed by its stored ``image_sha256``, and no row cached under that key is
used for it before its bytes were hashed and found to match (:func:`~geofidelity_bench.image_store.verify_images`,
once per process): a photo replaced behind a stale hash raises ImageHashMismatchError naming it, never
gets another photo's row. Images are
prepared (decoded, resized) by a pool of worker threads ahead of the model
(:func:`~geofidelity_bench.prefetch.ordered_map`), in input order, so the rows, the cache writes
and the errors are those of the serial loop. A ``compute`` with an asynchronous twin
(:func:`~geofidelity_bench.prefetch.submits_with`: the encoders' ``embed_arrays``, the segmenters'
``shares_of``) keeps one batch in flight: batch ``k + 1`` is submitted before the rows of batch ``k``
are read and written.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .image_store import StoredImage, verify_images
from .images import ImageDecodeError, ImageSource, content_sha256
from .prefetch import Pending, ordered_map, prefetch_items, resolve_num_workers, submitter_of

#: New rows are written to the cache after a batch once this many rows wait, or once this many seconds
#: passed since the last write (so a batch that takes longer is written as soon as it is done). A killed
#: run loses the batch in progress and at most the last few seconds (or 512 rows) of finished batches.
FLUSH_ROWS = 512
FLUSH_SECONDS = 5.0
#: At the end of a run the shards it wrote are merged into one; if the config's folder then still holds
#: more than this many shards (e.g. left by killed runs), the whole folder is compacted.
COMPACT_ABOVE = 64
_clock = time.monotonic  # the writer's clock (a test may stand in a clock of its own)


@dataclass(frozen=True)
class CachedRun:
    """Rows in input order and where they came from."""

    rows: np.ndarray
    from_cache: int  # images served by the cache
    forward_images: int  # distinct images run through the model
    num_workers: int = 0  # threads that prepared the images (0: the calling thread)


def content_keys(items: Sequence[ImageSource], labels: Sequence[str]) -> list[str]:
    """sha256 content keys; unreadable inputs raise ImageDecodeError naming the image.

    An image kept in a benchmark's Parquet file is keyed by its stored sha256 without reading it:
    whoever uses a row found under that key checks the bytes first (:func:`run_cached` does)."""
    keys = []
    for src, label in zip(items, labels):
        try:
            keys.append(src.stored_sha256 if isinstance(src, StoredImage) else content_sha256(src))
        except FileNotFoundError as err:
            raise ImageDecodeError(f"image file not found: {label}") from err
        except (OSError, ValueError, TypeError, SyntaxError) as err:
            raise ImageDecodeError(f"cannot read image {label}: {err}") from err
    return keys


def _readable(src: Any) -> ImageSource:
    """The bytes of an image kept in a Parquet file (read now, in the preparing thread); else ``src``."""
    return src.read() if isinstance(src, StoredImage) else src


class _Writer:
    """Buffers new rows and writes them as cache shards; :meth:`close` merges the shards it wrote."""

    def __init__(self, owner: Any, cache) -> None:
        self.owner, self.cache = owner, cache
        self.keys: list[str] = []
        self.rows: list[np.ndarray] = []
        self.written: list[Any] = []  # the shards this run wrote
        self.last = _clock()

    def add(self, keys: Sequence[str], rows: np.ndarray) -> None:
        if self.cache is None:
            return
        self.keys.extend(keys)
        self.rows.append(rows)
        if len(self.keys) >= FLUSH_ROWS or _clock() - self.last >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.cache is not None and self.keys:
            path = self.cache.put(self.owner, self.keys, np.concatenate(self.rows, axis=0))
            if path is not None:
                self.written.append(path)
        self.keys, self.rows, self.last = [], [], _clock()

    def close(self) -> None:
        """Writes what waits, then keeps the shard count down: the run's shards are merged into one, and a
        folder left with more than :data:`COMPACT_ABOVE` shards is compacted. A failure to merge costs
        nothing but the merge (the rows are in the shards already written)."""
        self.flush()
        compact = getattr(self.cache, "compact", None)
        if compact is None:
            return
        try:
            if len(self.written) > 1:
                compact(self.owner, self.written)
            count = getattr(self.cache, "shard_count", None)
            if count is not None and self.written and count(self.owner) > COMPACT_ABOVE:
                compact(self.owner)
        except OSError:  # merging shards only saves opens later; every row is already written and verified
            pass


def run_cached(
    owner: Any,
    items: Sequence[ImageSource],
    labels: Sequence[str],
    *,
    width: int,
    prepare: Callable[[ImageSource, str], Any],
    compute: Callable[[list], np.ndarray],
    cache=None,
    batch_size: int,
    progress: bool | None,
    desc: str,
    num_workers: int | None = None,
) -> CachedRun:
    """Rows of ``compute`` for every item, each distinct uncached image computed once.

    Args:
        owner: what the cache keys rows by (an object with ``config_hash``).
        items, labels: the images and how to call them in errors.
        width: row length (cached rows of another length are ignored).
        prepare: ``(item, label) -> model input``; raises ImageDecodeError for bad images.
        compute: a list of prepared inputs -> (len, width) rows (one batch). When it is a method
            marked :func:`~geofidelity_bench.prefetch.submits_with`, its twin submits each batch and
            the batch's rows are read (and written to the cache) after the next batch is submitted;
            otherwise each batch's rows are written before the next batch starts.
        cache: an EmbeddingCache, or None.
        progress: tqdm bar over the images computed (None: only for more than 4 batches).
        num_workers: threads running ``prepare`` ahead of ``compute`` (at most a few batches ahead);
            None: :func:`~geofidelity_bench.prefetch.default_num_workers`; 0: the calling thread.
            It changes no row: inputs reach ``compute`` in the serial order.
    """
    from tqdm.auto import tqdm

    if len(labels) != len(items):
        raise ValueError(f"got {len(labels)} names for {len(items)} images")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    keys = content_keys(items, labels)
    found: dict[str, np.ndarray] = {}
    if cache is not None:
        found = {k: row for k, row in cache.get(owner, set(keys)).items() if row.shape == (width,)}
    from_cache = sum(1 for k in keys if k in found)
    todo: list[int] = []  # first index of every distinct uncached content
    seen: set[str] = set(found)
    for i, k in enumerate(keys):
        if k not in seen:
            seen.add(k)
            todo.append(i)
    # every stored image not read below (served by the cache, or the same stored hash as one computed) is
    # hashed now: a stale image_sha256 fails here, naming every such image, before any row is used
    computed = set(todo)
    verify_images([src for i, src in enumerate(items) if i not in computed and isinstance(src, StoredImage)],
                  progress=bool(progress))
    if progress is None:
        progress = len(todo) > 4 * batch_size
    workers = resolve_num_workers(num_workers)
    writer = _Writer(owner, cache)
    submit = submitter_of(compute)
    one_behind = submit is not None
    if submit is None:
        submit = lambda prepared: Pending.ready(compute(prepared))  # noqa: E731
    prepared_iter = ordered_map(lambda i: prepare(_readable(items[i]), labels[i]), todo, num_workers=workers,
                                ahead=prefetch_items(workers, batch_size))
    in_flight: list = []  # at most one (keys, pending): submitted, rows not read yet

    def read_in_flight() -> None:
        if in_flight:
            done_keys, pending = in_flight.pop()
            rows = pending.result()
            for k, row in zip(done_keys, rows):
                found[k] = row
            writer.add(done_keys, rows)
            bar.update(len(done_keys))

    try:
        with closing(prepared_iter), \
                tqdm(total=len(todo), desc=desc, unit="img", disable=not progress or not todo) as bar:
            for start in range(0, len(todo), batch_size):
                batch = todo[start : start + batch_size]
                prepared, error = [], None
                for _ in batch:
                    try:
                        prepared.append(next(prepared_iter))
                    except ImageDecodeError as err:
                        error = err
                        break
                done = batch[: len(prepared)]
                if prepared:
                    pending = submit(prepared)
                    read_in_flight()
                    in_flight.append(([keys[i] for i in done], pending))
                    if not one_behind:
                        read_in_flight()
                if error is not None:
                    read_in_flight()
                    raise error
            read_in_flight()
    except BaseException:
        try:  # a failure after a batch was submitted (the next batch's, an interrupt): keep that batch's rows
            read_in_flight()
        except Exception:  # noqa: BLE001 - the first error is the one raised
            pass
        raise
    finally:
        writer.close()  # whatever happened, keep what was computed
    out = np.zeros((len(items), width), dtype=np.float32)
    for i, k in enumerate(keys):
        out[i] = found[k]
    return CachedRun(out, from_cache, len(todo), workers)
