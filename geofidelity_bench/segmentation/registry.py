"""The registered segmenters by name, their default weights, and :func:`get_segmenter`."""

from __future__ import annotations

import os
from typing import Any

from geofidelity_bench.errors import GeoFidelityError
from geofidelity_bench.segmentation.base import Segmenter
from geofidelity_bench.segmentation.mask2former import Mask2FormerVistasSegmenter
from geofidelity_bench.segmentation.segformer import SegformerCityscapesSegmenter

#: Registry name of the benchmark's segmenter.
DEFAULT_SEGMENTER = "mask2former-vistas"


_BACKENDS: dict[str, type[Segmenter]] = {
    "mask2former-vistas": Mask2FormerVistasSegmenter,
    "segformer-cityscapes": SegformerCityscapesSegmenter,
}
_ALIASES = {"mask2former": "mask2former-vistas", "segformer": "segformer-cityscapes"}

#: Default weights id of each segmenter.
DEFAULT_WEIGHTS = {
    "mask2former-vistas": Mask2FormerVistasSegmenter.default_id,
    "segformer-cityscapes": SegformerCityscapesSegmenter.default_id,
}


class UnknownSegmenterError(GeoFidelityError, ValueError):
    """A segmenter name that is not registered; the message lists the known ones."""


def default_weights_id(name: str) -> str:
    """The Hub id a segmenter name loads by default (aliases accepted)."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DEFAULT_WEIGHTS:
        raise UnknownSegmenterError(f"unknown segmenter {name!r}; known segmenters: {', '.join(list_segmenters())}")
    return DEFAULT_WEIGHTS[key]


def list_segmenters(*, include_aliases: bool = False) -> list[str]:
    """Registered segmenter names (sorted); with ``include_aliases`` also the short aliases."""
    names = sorted(_BACKENDS)
    return names + sorted(_ALIASES) if include_aliases else names


def get_segmenter(
    name: str = DEFAULT_SEGMENTER,
    weights: str | os.PathLike | None = None,
    device: Any | None = None,
    *,
    revision: str | None = None,
    **kw: Any,
) -> Segmenter:
    """Builds a registered segmenter.

    Args:
        name: ``"mask2former-vistas"`` (default; alias ``mask2former``) or
            ``"segformer-cityscapes"`` (alias ``segformer``).
        weights: a local save_pretrained folder or a Hub id; default the segmenter's own
            weights (:data:`DEFAULT_WEIGHTS`). Honors ``HF_HUB_OFFLINE``.
        device: torch device; default ``cuda`` when available, else ``cpu``.
        revision: Hub revision (branch, tag or commit) of ``weights``.
        **kw: passed to the backend (``input_size``, and ``max_input_size`` for Mask2Former).

    Raises:
        ValueError: unknown name or device.
        SegmenterUnavailableError: the weights cannot be loaded (the message names the id and
            how to pass a local folder).
        LabelMismatchError: the weights' id2label is not the label set the mapping expects.
    """
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _BACKENDS:
        known = ", ".join(list_segmenters() + [f"{a} (= {t})" for a, t in sorted(_ALIASES.items())])
        raise UnknownSegmenterError(f"unknown segmenter {name!r}; known segmenters: {known}")
    return _BACKENDS[key](key, weights=weights, revision=revision, device=device, **kw)



__all__ = ["DEFAULT_SEGMENTER", "DEFAULT_WEIGHTS", "default_weights_id", "get_segmenter", "list_segmenters"]
