"""Running a segmenter over many images through the cache: shares served from the cache when
known, computed otherwise (the :class:`~geofidelity_bench.encoders.EmbeddingCache`, one folder per
segmenter config hash, one 12-float row per image content sha256), with counts of what was done.
A benchmark photo is looked up under its stored ``image_sha256`` and its bytes are hashed before a
cached row is used (:func:`~geofidelity_bench.cached_batches.run_cached`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from geofidelity_bench.cached_batches import run_cached
from geofidelity_bench.encoders.base import as_image_list, default_names
from geofidelity_bench.images import ImageSource
from geofidelity_bench.segmentation.labels import GROUP_NAMES

if TYPE_CHECKING:  # annotations only: base.Segmenter.segment runs this module
    from geofidelity_bench.segmentation.base import Segmenter

@dataclass(frozen=True)
class SegmentStats:
    """How a run got its shares: ``from_cache + computed == total`` (per image).

    ``forward_images`` counts the images run through the model (identical images in one run
    are computed once), ``forward_calls`` the model calls.
    """

    total: int
    from_cache: int
    computed: int
    forward_images: int
    forward_calls: int
    num_workers: int = 0  # threads that decoded and preprocessed the images (0: the calling thread)

    def __str__(self) -> str:
        return f"{self.from_cache} from cache, {self.computed} computed"

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _segment_with_stats(
    segmenter: Segmenter,
    images: Iterable[ImageSource] | ImageSource,
    *,
    names: Sequence[str] | None,
    cache,
    batch_size: int,
    progress: bool | None,
    num_workers: int | None,
) -> tuple[np.ndarray, SegmentStats]:
    items = as_image_list(images)
    labels = [str(n) for n in names] if names is not None else default_names(items)
    calls_before = segmenter.forward_calls
    # decoding and the backend's preprocessing (its image processor) run in the worker threads
    run = run_cached(segmenter, items, labels, width=len(GROUP_NAMES), prepare=segmenter.prepare,
                     compute=segmenter.shares_of, cache=cache, batch_size=batch_size, progress=progress,
                     desc=f"segmenting ({segmenter.name})", num_workers=num_workers)
    stats = SegmentStats(
        total=len(items),
        from_cache=run.from_cache,
        computed=len(items) - run.from_cache,
        forward_images=run.forward_images,
        forward_calls=segmenter.forward_calls - calls_before,
        num_workers=run.num_workers,
    )
    return run.rows, stats


def segment_images(
    segmenter: Segmenter,
    images: Iterable[ImageSource] | ImageSource,
    names: Sequence[str] | None = None,
    cache=None,
    batch_size: int = 8,
    progress: bool | None = True,
    *,
    return_stats: bool = False,
    num_workers: int | None = None,
) -> np.ndarray | tuple[np.ndarray, SegmentStats]:
    """Group shares of images, served from ``cache`` when known, computed otherwise.

    Args:
        segmenter: from :func:`get_segmenter`.
        images: PIL images, paths, encoded bytes or uint8 arrays (decoded with ``load_image``).
        names: how to call each image in errors (default: the path, or ``image[i]``).
        cache: an :class:`~geofidelity_bench.encoders.EmbeddingCache` (rows keyed by
            (segmenter.config_hash, image content sha256)), or None.
        batch_size: images per batch (one forward call per preprocessed size in a batch).
        progress: tqdm bar over the images computed (``None``: only for more than 4 batches).
        return_stats: also return a :class:`SegmentStats`.
        num_workers: threads decoding and preprocessing images (the backend's image processor) ahead
            of the model (default: the cores this process may use; 0: in the calling thread). It does
            not change the shares.

    Returns:
        float32 (n, 12) shares in :data:`GROUP_NAMES` order (``1 - row sum`` is the unlabeled
        share), and the stats if asked. A cached and a freshly computed row are identical.

    Raises:
        ImageDecodeError: an image cannot be read or decoded (named in the message); the shares
            computed before it are already in the cache.
    """
    shares, stats = _segment_with_stats(
        segmenter, images, names=names, cache=cache, batch_size=batch_size, progress=progress,
        num_workers=num_workers,
    )
    return (shares, stats) if return_stats else shares


def segment_named_images(
    segmenter: Segmenter,
    items: Sequence[tuple[str, ImageSource]],
    cache=None,
    batch_size: int = 8,
    progress: bool | None = True,
    num_workers: int | None = None,
) -> tuple[list[str], np.ndarray, SegmentStats]:
    """``(name, image)`` pairs -> (names, float32 (n, 12) shares, stats); ``str(stats)`` reads
    "N from cache, M computed"."""
    names = [str(name) for name, _ in items]
    shares, stats = _segment_with_stats(
        segmenter, [src for _, src in items], names=names, cache=cache, batch_size=batch_size, progress=progress,
        num_workers=num_workers,
    )
    return names, shares, stats



__all__ = ["SegmentStats", "segment_images", "segment_named_images"]
