"""Embedding many images through the cache, on one process or several.

:func:`embed_images` hashes every image's content, serves hits from the
:class:`~geofidelity_bench.encoders.cache.EmbeddingCache`, runs the model on the misses only and
writes new embeddings as it goes, so an interrupted or failing run keeps what it computed.
:func:`embed_distributed` splits the same work across ``accelerate`` processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from geofidelity_bench.cached_batches import run_cached
from geofidelity_bench.encoders.base import Encoder, as_image_list, default_names
from geofidelity_bench.encoders.cache import EmbeddingCache
from geofidelity_bench.images import ImageDecodeError, ImageSource

@dataclass(frozen=True)
class EmbedStats:
    """How a run got its embeddings: ``from_cache + computed == total`` (per image).

    ``forward_images`` counts the images actually run through the model (identical images
    within one run are computed once).
    """

    total: int
    from_cache: int
    computed: int
    forward_images: int
    num_workers: int = 0  # threads that decoded and preprocessed the images (0: the calling thread)

    def __str__(self) -> str:
        return f"{self.from_cache} from cache, {self.computed} computed"


def _embed_with_stats(
    encoder: Encoder,
    images: Iterable[ImageSource] | ImageSource,
    *,
    names: Sequence[str] | None,
    cache: EmbeddingCache | None,
    batch_size: int,
    progress: bool | None,
    num_workers: int | None,
) -> tuple[np.ndarray, EmbedStats]:
    items = as_image_list(images)
    labels = [str(n) for n in names] if names is not None else default_names(items)
    run = run_cached(encoder, items, labels, width=encoder.dim, prepare=encoder.preprocess,
                     compute=encoder.embed_arrays, cache=cache, batch_size=batch_size, progress=progress,
                     desc=f"embedding ({encoder.name})", num_workers=num_workers)
    stats = EmbedStats(total=len(items), from_cache=run.from_cache, computed=len(items) - run.from_cache,
                       forward_images=run.forward_images, num_workers=run.num_workers)
    return run.rows, stats


def embed_images(
    encoder: Encoder,
    images: Iterable[ImageSource] | ImageSource,
    *,
    names: Sequence[str] | None = None,
    cache: EmbeddingCache | None = None,
    batch_size: int = 32,
    progress: bool | None = True,
    num_workers: int | None = None,
) -> np.ndarray:
    """Embeds images, serving repeats from ``cache`` and computing only the misses.

    Args:
        encoder: any :class:`~geofidelity_bench.encoders.Encoder`.
        images: PIL images, paths, encoded bytes or uint8 arrays.
        names: how to call each image in errors (default: the path, or ``image[i]``).
        cache: an :class:`EmbeddingCache`, or None to compute everything and store nothing.
        batch_size: images per forward call.
        progress: tqdm bar over the images computed (``None``: only for more than 4 batches).
        num_workers: threads decoding and preprocessing images ahead of the model (default: the
            cores this process may use, see :func:`~geofidelity_bench.prefetch.default_num_workers`;
            0: in the calling thread). It does not change the embeddings.

    Returns:
        float32 (n, encoder.dim), raw embeddings in input order.

    Raises:
        ImageDecodeError: an image cannot be read or decoded (named in the message); the
            embeddings computed before it are already in the cache.
    """
    return _embed_with_stats(encoder, images, names=names, cache=cache, batch_size=batch_size, progress=progress,
                             num_workers=num_workers)[0]


def embed_named_images(
    encoder: Encoder,
    items: Sequence[tuple[str, ImageSource]],
    cache: EmbeddingCache | None = None,
    batch_size: int = 32,
    progress: bool | None = True,
    num_workers: int | None = None,
) -> tuple[list[str], np.ndarray, EmbedStats]:
    """What the CLI calls: ``(name, image)`` pairs -> (names, (n, dim) embeddings, stats).

    ``str(stats)`` reads "N from cache, M computed".
    """
    names = [str(name) for name, _ in items]
    arr, stats = _embed_with_stats(
        encoder, [src for _, src in items], names=names, cache=cache, batch_size=batch_size, progress=progress,
        num_workers=num_workers,
    )
    return names, arr, stats


def embed_distributed(
    encoder: Encoder,
    images: Sequence[ImageSource],
    *,
    names: Sequence[str] | None = None,
    cache: EmbeddingCache | None = None,
    batch_size: int = 32,
    num_workers: int | None = None,
    dist_timeout_s: float | None = None,
) -> np.ndarray:
    """:func:`embed_images` split across the processes of an ``accelerate`` launch.

    Every process hashes all images and looks them up in the cache, so all get the same list of
    images still to compute (each distinct content once); after a barrier, process ``i`` of ``n``
    computes items ``i, i+n, ...`` of that list (through the cache; concurrent writers are safe).
    Splitting what is *not* cached keeps every process busy on a resumed run. The computed rows
    are gathered, the cached ones read from the cache, and every process returns the full
    (n, dim) array in input order. A benchmark image is keyed by its stored ``image_sha256``, and every
    one whose row it gets without reading it (cached, or computed for another image claiming the same
    hash) has its bytes hashed first (:func:`~geofidelity_bench.image_store.verify_images`), so a stale
    hash raises ImageHashMismatchError. On one process this is exactly :func:`embed_images`. If any
    process fails on an image, every process raises (so none is left waiting in the gather).
    ``num_workers`` is per process (the default divides this machine's cores among the processes
    of the launch). The encoder runs where it was built (see
    :func:`~geofidelity_bench.encoders.devices.pick_device`: under a launcher, by default this
    process's GPU; an explicit ``cpu`` is honoured). ``dist_timeout_s``: the process group's timeout
    when this call creates it (default
    :data:`~geofidelity_bench.encoders.devices.DEFAULT_DIST_TIMEOUT_S`).
    """
    try:
        from accelerate.utils import gather_object
    except ImportError as err:  # accelerate is an optional extra
        raise ImportError("embed_distributed needs accelerate: pip install 'geofidelity-bench[gen]'") from err
    from geofidelity_bench.cached_batches import content_keys
    from geofidelity_bench.encoders.devices import DEFAULT_DIST_TIMEOUT_S, distributed_state
    from geofidelity_bench.image_store import StoredImage, verify_images

    items = as_image_list(images)
    labels = [str(n) for n in names] if names is not None else default_names(items)
    if len(labels) != len(items):
        raise ValueError(f"got {len(labels)} names for {len(items)} images")
    state = distributed_state(dist_timeout_s or DEFAULT_DIST_TIMEOUT_S)
    if state.num_processes == 1 or not items:
        return embed_images(encoder, items, names=labels, cache=cache, batch_size=batch_size, num_workers=num_workers)

    keys = content_keys(items, labels)  # an unreadable file fails here in every process alike
    cached = cache.keys(encoder) if cache is not None else set()
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key not in cached:
            first.setdefault(key, i)
    state.wait_for_everyone()  # every process has its list before any cache write
    mine = list(first.values())[state.process_index :: state.num_processes]
    error: tuple[str, str] | None = None
    local = np.zeros((0, encoder.dim), dtype=np.float32)
    try:
        if mine:
            local = embed_images(encoder, [items[i] for i in mine], names=[labels[i] for i in mine], cache=cache,
                                 batch_size=batch_size, progress=state.is_main_process, num_workers=num_workers)
    except Exception as err:  # noqa: BLE001 - re-raised on every process below
        error = (type(err).__name__, f"process {state.process_index}: {err}")
    parts = gather_object([(state.process_index, mine, local, error)])

    failures = [p[3] for p in parts if p[3] is not None]
    if failures:
        kind, message = failures[0]
        raise (ImageDecodeError if kind == "ImageDecodeError" else RuntimeError)(message)
    computed = {keys[i]: row for _, idx, emb, _ in parts for i, row in zip(idx, emb)}
    # an image that claims the stored hash of one computed elsewhere was not read: its bytes are checked now
    read = {i for _, idx, _, _ in parts for i in idx}
    verify_images([items[i] for i, key in enumerate(keys)
                   if key in computed and i not in read and isinstance(items[i], StoredImage)])
    out = np.zeros((len(items), encoder.dim), dtype=np.float32)
    rest = []
    for i, key in enumerate(keys):
        if key in computed:
            out[i] = computed[key]
        else:
            rest.append(i)
    if rest:  # cached before the run: read here (computed again only if the cache lost them meanwhile)
        out[rest] = embed_images(encoder, [items[i] for i in rest], names=[labels[i] for i in rest], cache=cache,
                                 batch_size=batch_size, progress=False, num_workers=num_workers)
    return out


__all__ = ["EmbedStats", "embed_distributed", "embed_images", "embed_named_images"]
