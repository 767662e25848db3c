"""Image encoders behind one interface, an on-disk embedding cache, and batch/multi-process runners.

    >>> from geofidelity_bench.encoders import get_encoder, EmbeddingCache, embed_images  # doctest: +SKIP
    >>> enc = get_encoder("efficientnet-lite0")                                            # doctest: +SKIP
    >>> X = embed_images(enc, ["a.jpg", "b.jpg"], cache=EmbeddingCache())                  # doctest: +SKIP
    >>> X.shape, enc.config_hash[:12]                                                      # doctest: +SKIP
    ((2, 1280), '...')

Also here: :mod:`.dino_vit_keys`, the DINO-ViT CLS-and-keys extractor that Map Feature Perception
compares (:mod:`geofidelity_bench.metrics.mfp`); import it by its module path.

Importing this package loads neither torch nor transformers; a backend imports them when built.
"""

from __future__ import annotations

from geofidelity_bench.encoders.base import Encoder, EncoderUnavailableError, Preprocessing, TextImageEncoder
from geofidelity_bench.encoders.base import EncoderOptionError
from geofidelity_bench.encoders.cache import EmbeddingCache, default_cache_dir
from geofidelity_bench.encoders.registry import get_encoder, list_encoders
from geofidelity_bench.encoders.runner import EmbedStats, embed_distributed, embed_images, embed_named_images

#: The benchmark's reference encoder (docs/benchmark.md section 4, Embeddings).
DEFAULT_ENCODER = "dinov2-base"
#: The encoder that works with no network: its weights ship in a pip package.
OFFLINE_ENCODER = "efficientnet-lite0"

__all__ = [
    "DEFAULT_ENCODER",
    "OFFLINE_ENCODER",
    "EmbedStats",
    "EmbeddingCache",
    "Encoder",
    "EncoderOptionError",
    "EncoderUnavailableError",
    "Preprocessing",
    "TextImageEncoder",
    "default_cache_dir",
    "embed_distributed",
    "embed_images",
    "embed_named_images",
    "get_encoder",
    "list_encoders",
]
