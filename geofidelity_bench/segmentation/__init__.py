"""Semantic group shares per image (docs/benchmark.md section 5, Metrics).

A :class:`Segmenter` labels every pixel of an image with a class of its label set and reports,
per image, the share of the pixels that fall in each of the 12 semantic groups of
:data:`~geofidelity_bench.metrics.composition.SEMANTIC_GROUPS` (road, sidewalk, building,
vehicle, person, vegetation, sky, pole, sign, water, snow, other, in that order). Pixels of a
class that belongs to no group are *unlabeled*: the 12 shares plus the unlabeled share sum to 1.
With the reference segmenter (Mask2Former Swin-L on Mapillary Vistas v1.2) these are the classes
7 "Bike Lane", 10 "Parking" and 12 "Rail Track", which docs/benchmark.md section 5, Metrics puts in no group.

Backends (:func:`get_segmenter`):

- ``mask2former-vistas`` (default, the benchmark's segmenter):
  ``facebook/mask2former-swin-large-mapillary-vistas-semantic``, 65 classes, ids 0-64.
- ``segformer-cityscapes``: ``nvidia/segformer-b5-finetuned-cityscapes-1024-1024``, the 19
  Cityscapes train classes, mapped to the groups as documented in :data:`CITYSCAPES_GROUPS`;
  it cannot express water, snow and other (see ``config["unsupported_groups"]``).

Everything that changes the shares (weights id and revision or file hashes, input size, label
set and group mapping, post-processing) is in ``segmenter.config``, a JSON-serializable dict
written next to every number computed from the shares; ``segmenter.config_hash`` keys the cache.
Shares are cached in the :class:`~geofidelity_bench.encoders.EmbeddingCache` (one folder per
segmenter config hash, one 12-float row per image content sha256), like embeddings.

    >>> from geofidelity_bench.segmentation import get_segmenter, segment_images, gaas_shares  # doctest: +SKIP
    >>> seg = get_segmenter("mask2former-vistas")                                                 # doctest: +SKIP
    >>> shares = segment_images(seg, ["a.jpg", "b.jpg"], cache=EmbeddingCache())                  # doctest: +SKIP
    >>> shares.shape, gaas_shares(shares).shape                                                   # doctest: +SKIP
    ((2, 12), (2, 8))

Modules, laid out like :mod:`geofidelity_bench.encoders`:

* :mod:`.labels` - label sets, their group mappings, the label check of a checkpoint;
* :mod:`.shares` - shares from label maps, GAAS columns;
* :mod:`.base` - the :class:`Segmenter` interface and :class:`SegmenterUnavailableError`;
* :mod:`.mask2former`, :mod:`.segformer` - the backends (sharing :mod:`._transformers`);
* :mod:`.registry` - :func:`get_segmenter`, :func:`default_weights_id`;
* :mod:`.runner` - running a segmenter through the cache.

The tier-4 composition gate of docs/benchmark.md section 8, Curation that reads these shares is curation's:
:func:`geofidelity_bench.curation.filters.tier4_gate`, and so is the ``segment`` command's table of a
benchmark's shares with the gate (:func:`geofidelity_bench.curation.filters.shares_table`,
:func:`~geofidelity_bench.curation.filters.write_shares_table`). Segmentation never imports curation.

Importing this package loads neither torch nor transformers; a backend imports them when built.
"""

from __future__ import annotations

from geofidelity_bench.segmentation.base import (
    MAX_LABEL_MAP_PIXELS,
    Segmenter,
    SegmenterUnavailableError,
    label_map_size,
)
from geofidelity_bench.segmentation import labels
from geofidelity_bench.segmentation.labels import *  # noqa: F403  (label sets, group maps, the label check)
from geofidelity_bench.segmentation.mask2former import Mask2FormerVistasSegmenter
from geofidelity_bench.segmentation.registry import (
    DEFAULT_SEGMENTER,
    DEFAULT_WEIGHTS,
    UnknownSegmenterError,
    default_weights_id,
    get_segmenter,
    list_segmenters,
)
from geofidelity_bench.segmentation.runner import SegmentStats, segment_images, segment_named_images
from geofidelity_bench.segmentation.segformer import SegformerCityscapesSegmenter
from geofidelity_bench.segmentation.shares import (
    SHARE_TOLERANCE,
    gaas_shares,
    shares_from_counts,
    shares_from_label_map,
    unlabeled_share,
)

__all__ = [
    *labels.__all__,
    "DEFAULT_SEGMENTER",
    "DEFAULT_WEIGHTS",
    "MAX_LABEL_MAP_PIXELS",
    "Mask2FormerVistasSegmenter",
    "SHARE_TOLERANCE",
    "SegformerCityscapesSegmenter",
    "SegmentStats",
    "Segmenter",
    "SegmenterUnavailableError",
    "default_weights_id",
    "gaas_shares",
    "get_segmenter",
    "label_map_size",
    "list_segmenters",
    "segment_images",
    "segment_named_images",
    "shares_from_counts",
    "shares_from_label_map",
    "unlabeled_share",
]
