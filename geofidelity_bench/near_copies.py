"""Submitted images that are (nearly) copies of the benchmark's own reference photos.

A generated panel made of a block's reference photos scores "better than held-out real": the
score then says nothing about a model. :func:`find_near_copies` flags every submitted image
whose embedding has a cosine similarity of at least :data:`NEAR_COPY_COSINE` with the embedding
of a reference photo that the evaluation embedded anyway (the galleries of the target blocks and
of their negatives), and every image whose bytes are those of any reference photo of the
benchmark (gallery or held-out, any block: an exact sha256 match). ``evaluate_panels`` records
the list in ``df.attrs["near_copies"]``; ``run.json`` keeps it and ``evaluate`` and the app warn.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Mapping, Sequence

import numpy as np

#: Cosine similarity from which a submitted image counts as a copy of a reference photo.
NEAR_COPY_COSINE = 0.999


def _item_bytes(item: Any) -> bytes | None:
    """The encoded bytes of a panel item, when it has them (a PIL image or an embedding has none)."""
    from .benchmark import PoolImage, ReferenceImage

    if isinstance(item, (ReferenceImage, PoolImage)):
        return item.image_bytes
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if isinstance(item, (str, os.PathLike)) and os.path.isfile(item):
        with open(item, "rb") as fh:
            return fh.read()
    return None


#: Rows compared at a time: submitted images x gallery images (the float64 similarities of one
#: step take QUERY_ROWS x GALLERY_ROWS x 8 bytes, 64 MiB), so memory does not grow with the benchmark.
QUERY_ROWS = 1024
GALLERY_ROWS = 8192


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _row_chunks(parts: Sequence[np.ndarray], rows: int):
    """The rows of ``parts``, in order, as arrays of about ``rows`` rows (whole parts joined)."""
    buf, size = [], 0
    for part in parts:
        buf.append(np.asarray(part))
        size += len(part)
        if size >= rows:
            yield np.concatenate(buf)
            buf, size = [], 0
    if buf:
        yield np.concatenate(buf)


def _closest(queries: Sequence[np.ndarray], gallery: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """For every row of ``queries`` (concatenated): the index of the gallery row (of the concatenated
    ``gallery``) with the highest cosine similarity, the first one on ties, and that similarity;
    -1 and NaN without gallery rows. Compared a block of rows at a time."""
    n = sum(len(q) for q in queries)
    best_j, best_cos = np.full(n, -1, dtype=np.int64), np.full(n, -np.inf)
    start = 0
    for q in _row_chunks(queries, QUERY_ROWS):
        q, stop, offset = _unit(q), start + len(q), 0
        for g in _row_chunks(gallery, GALLERY_ROWS):
            sims = q @ _unit(g).T
            j = np.argmax(sims, axis=1)
            cos = sims[np.arange(len(q)), j]
            better = cos > best_cos[start:stop]  # strictly: an earlier chunk keeps its tie
            best_j[start:stop][better], best_cos[start:stop][better] = j[better] + offset, cos[better]
            offset += len(g)
        start = stop
    best_cos[best_j < 0] = np.nan
    return best_j, best_cos


def find_near_copies(
    benchmark,
    panel_items: Mapping[tuple[str, str, str], Sequence[Any]],
    panel_embeddings: Mapping[tuple[str, str, str], np.ndarray],
    galleries: Mapping[str, np.ndarray],
    *,
    names: Mapping[tuple[str, str, str], Sequence[str]] | None = None,
    threshold: float = NEAR_COPY_COSINE,
) -> list[dict]:
    """Every submitted image that copies a reference photo, one record each.

    Args:
        benchmark: the benchmark (its reference photos, for the exact sha256 match).
        panel_items: the submitted panels' items (paths, bytes, ...) or embeddings, by key.
        panel_embeddings: their raw embeddings, by key (same order as the items).
        galleries: block_id -> raw embeddings of ``benchmark.gallery(block_id)``, in order.
        names: what to call each image, by key (default: its path, or its position in the panel).
        threshold: the cosine similarity from which an image is a near copy.

    Returns:
        Records ``{method, condition, block_id, file, reference_id, reference_block_id, cosine,
        exact}`` in panel order; ``exact`` is true for a byte-identical copy, ``cosine`` is the
        similarity to the closest embedded reference photo (None when only the bytes matched).
    """
    from .evaluation import _item_source_and_name

    ref_ids: list[str] = []
    ref_blocks: list[str] = []
    for bid in sorted(galleries):
        refs = benchmark.gallery(bid)
        ref_ids += [r.reference_id for r in refs]
        ref_blocks += [bid] * len(refs)
    # the closest embedded reference photo of every submitted image, all compared at once
    closest_j, closest_cos = _closest([np.asarray(e) for e in panel_embeddings.values()],
                                      [galleries[bid] for bid in sorted(galleries)])
    by_sha: dict[str, Any] = {}  # filled on the first image with bytes (uploads in the app have none)

    found: list[dict] = []
    row = 0
    for key, emb in panel_embeddings.items():
        items = panel_items.get(key)
        items = list(items) if items is not None and not isinstance(items, np.ndarray) else [None] * len(emb)
        panel_j, panel_cos = closest_j[row : row + len(emb)], closest_cos[row : row + len(emb)]
        row += len(emb)
        for i, item in enumerate(items):
            data = _item_bytes(item) if item is not None else None
            if data and not by_sha:  # the stored sha256 of each reference: no reference image is read
                by_sha = {r.sha256: r for r in benchmark.references}
            exact = by_sha.get(hashlib.sha256(data).hexdigest()) if data else None
            j = int(panel_j[i])
            cosine = float(panel_cos[i]) if j >= 0 else None
            if exact is None and (cosine is None or cosine < threshold):
                continue
            if exact is not None:
                ref_id, ref_block = exact.reference_id, exact.block_id
                if not (cosine is not None and ref_ids[j] == ref_id):
                    cosine = None
            else:
                ref_id, ref_block = ref_ids[j], ref_blocks[j]
            if names is not None and key in names:
                name = names[key][i]
            else:
                name = _item_source_and_name(item, "panel", i)[1] if item is not None else f"embedding {i}"
            found.append({"method": key[0], "condition": key[1], "block_id": key[2], "file": name,
                          "reference_id": ref_id, "reference_block_id": ref_block,
                          "cosine": None if cosine is None else round(cosine, 6), "exact": exact is not None})
    return found


def near_copies_warning(records: Sequence[Mapping[str, Any]], *, first: int = 10,
                        recorded_in: str | None = "run.json") -> str | None:
    """One warning naming the first ``first`` copied files and how many there are (None when none)."""
    if not records:
        return None
    listed = "; ".join(f"{r['file']} ({r['method']}/{r['condition']}/{r['block_id']}) = reference "
                       f"{r['reference_id']} of {r['reference_block_id']}" for r in records[:first])
    more = f"; and {len(records) - first} more" if len(records) > first else ""
    return (f"{len(records)} submitted image(s) are copies of the benchmark's reference photos (cosine >= "
            f"{NEAR_COPY_COSINE} or identical bytes): {listed}{more}. Such panels score like real photos of the "
            "block, not like a model's images"
            + (f" (all listed under near_copies in {recorded_in})" if recorded_in else ""))


__all__ = ["NEAR_COPY_COSINE", "find_near_copies", "near_copies_warning"]
