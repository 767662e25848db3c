"""The :class:`Segmenter` interface: images in, per image the pixel shares of the 12 groups out.

Everything that changes the shares (weights id and revision or file hashes, input size, label
set and group mapping, post-processing) is in ``segmenter.config``, a JSON-serializable dict
written next to every number computed from the shares; ``segmenter.config_hash`` keys the cache.

This module imports no torch at import time; backends import it when they are built.
"""

from __future__ import annotations

import abc
import math
from typing import Any, Iterable, Sequence

import numpy as np

from geofidelity_bench.encoders.base import RecordedConfig, resolve_device
from geofidelity_bench.errors import ModelUnavailableError, offline_hint
from geofidelity_bench.images import ImageSource, load_image
from geofidelity_bench.prefetch import submits_with
from geofidelity_bench.segmentation.labels import GROUP_NAMES
from geofidelity_bench.segmentation.shares import shares_from_counts, shares_from_label_map

#: Label maps are computed at the image's own (decoded, EXIF-rotated) size, unless it has more
#: pixels than this; then at the largest size with the same aspect ratio under this cap. Shares
#: are ratios, so this changes them by boundary rounding only, and it bounds the memory of the
#: full-resolution class-score map (classes x height x width floats).
MAX_LABEL_MAP_PIXELS = 4_194_304  # 2048 x 2048


class SegmenterUnavailableError(ModelUnavailableError):
    """A segmenter's weights (or its package) cannot be had; the message says how to run offline."""


def _offline_hint(weights_id: str) -> str:
    """How to run a segmenter without the Hub (the one wording of :func:`geofidelity_bench.errors.offline_hint`)."""
    return offline_hint(flag="--segmenter-weights", python_arg="weights=", weights_id=weights_id)


def label_map_size(width: int, height: int, max_pixels: int = MAX_LABEL_MAP_PIXELS) -> tuple[int, int]:
    """(height, width) at which an image's label map is computed: its own, or capped in pixels."""
    if width * height <= max_pixels:
        return (height, width)
    scale = math.sqrt(max_pixels / (width * height))
    return (max(1, int(height * scale)), max(1, int(width * scale)))


def class_counts(label_map: Any, num_classes: int):
    """int64 (num_classes,) pixel count of every class id in a label map (a tensor), computed where
    the map is: ``torch.bincount(map, minlength=num_classes)[:num_classes]`` without its wait for the
    device (bincount reads the map's maximum back to size its output); ids past the last class are
    not counted, as there."""
    import torch

    ids = torch.as_tensor(label_map).reshape(-1).long().clamp(max=num_classes)
    counts = torch.zeros(num_classes + 1, dtype=torch.long, device=ids.device)
    counts.scatter_add_(0, ids, torch.ones_like(ids))
    return counts[:num_classes]


class Segmenter(RecordedConfig, abc.ABC):
    """Images in, per image the pixel share of each of the 12 semantic groups out.

    Attributes:
        name: the registry name (``"mask2former-vistas"``).
        class_names: the model's label of every class id.
        class_to_group: (num_classes,) index into :data:`GROUP_NAMES` per class id, -1 = unlabeled.
        unsupported_groups: groups the label set cannot express (their share is always 0).
        model: the ``torch.nn.Module``; ``forward_calls`` counts its calls.
        device: torch device string.
    """

    name: str
    class_names: tuple[str, ...]
    class_to_group: np.ndarray
    unsupported_groups: tuple[str, ...] = ()
    device: str
    model: Any

    def __init__(self) -> None:
        self._config: dict[str, Any] = {}
        self.forward_calls = 0

    # -- identity ---------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, device={self.device!r}, config_hash={self.config_hash[:12]})"

    def to(self, device: Any) -> "Segmenter":
        self.device = resolve_device(device)
        self.model.to(self.device)
        return self

    # -- computation ------------------------------------------------------------------------
    def prepare(self, image: ImageSource, name: str | None = None) -> Any:
        """What is done to one image before the model, in the worker threads of
        :func:`~geofidelity_bench.segmentation.runner.segment_images`: here decoding it (RGB, EXIF
        orientation applied); a backend may also preprocess it. :meth:`label_maps` and
        :meth:`shares_of` take what it returns as well as decoded RGB PIL images."""
        return load_image(image, name=name)

    @abc.abstractmethod
    def label_maps(self, images: Sequence[Any]) -> list[Any]:
        """RGB PIL images (or what :meth:`prepare` returns) -> one (H, W) integer tensor of class ids
        per image, at :func:`label_map_size` of the image."""

    def label_map_shares(self, label_map: Any) -> np.ndarray:
        """float64 (12,) shares of one label map of this segmenter's class ids."""
        return shares_from_label_map(label_map, self.class_to_group)

    @submits_with("submit_shares")
    def shares_of(self, images: Sequence[Any]) -> np.ndarray:
        """RGB PIL images (already decoded, or what :meth:`prepare` returns) -> float32 (n, 12)
        shares; no cache."""
        return self.submit_shares(images).result()

    def submit_shares(self, images: Sequence[Any]):
        """:meth:`shares_of` without the wait: runs the model and counts each label map's classes
        where the map is (no wait for the device), starts copying the counts back, and returns a
        :class:`~geofidelity_bench.prefetch.Pending` whose ``result()`` is the float32 (n, 12) shares."""
        import torch

        from geofidelity_bench.encoders.base import DeviceTransfers
        from geofidelity_bench.prefetch import Pending

        if len(images) == 0:
            return Pending.ready(np.zeros((0, len(GROUP_NAMES)), dtype=np.float32))
        counts = torch.stack([class_counts(lm, self.num_classes) for lm in self.label_maps(images)])

        def shares(hosts: list) -> np.ndarray:
            out = np.zeros((len(images), len(GROUP_NAMES)), dtype=np.float32)
            for i, row in enumerate(hosts[0].numpy()):
                out[i] = shares_from_counts(row, self.class_to_group)
            return out

        return DeviceTransfers(self.device).fetch([counts], keep=images, then=shares)

    def segment(
        self,
        images: Iterable[ImageSource] | ImageSource,
        *,
        batch_size: int = 8,
        progress: bool | None = None,
        names: Sequence[str] | None = None,
    ) -> np.ndarray:
        """float32 (n, 12) shares of images (PIL, paths, bytes, arrays), no cache."""
        from geofidelity_bench.segmentation.runner import segment_images

        return segment_images(self, images, names=names, batch_size=batch_size, progress=progress)



__all__ = ["MAX_LABEL_MAP_PIXELS", "Segmenter", "SegmenterUnavailableError", "class_counts", "label_map_size"]
