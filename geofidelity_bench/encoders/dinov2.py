"""DINOv2 ViT encoders (the benchmark's reference is ViT-B/14, ``facebook/dinov2-base``).

Output: the CLS token after the final layer norm, i.e. ``Dinov2Model(...).last_hidden_state[:, 0]``
(768-d for ViT-B/14). Preprocessing (docs/benchmark.md section 4, Embeddings): shorter side to 256 (bicubic), center crop 224,
ImageNet mean/std, float32. It is done here with PIL + numpy rather than through an
``AutoImageProcessor``, whose defaults may change between releases.
"""

from __future__ import annotations

import os
from typing import Any

from geofidelity_bench.encoders._hf import load_transformers_encoder
from geofidelity_bench.encoders.base import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Encoder,
    Preprocessing,
)

DINOV2_IDS = {
    "dinov2-small": "facebook/dinov2-small",
    "dinov2-base": "facebook/dinov2-base",
    "dinov2-large": "facebook/dinov2-large",
    "dinov2-giant": "facebook/dinov2-giant",
}

DINOV2_PREPROCESSING = Preprocessing(resize=256, crop=224, interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD)


class DINOv2Encoder(Encoder):
    """A DINOv2 backbone; see the module docstring for what it outputs."""

    def __init__(
        self,
        name: str = "dinov2-base",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        dtype: Any = "float32",
    ) -> None:
        super().__init__()
        from transformers import Dinov2Model

        model, dtype_name, record, _, _ = load_transformers_encoder(
            self, Dinov2Model, DINOV2_IDS, name, "dinov2", weights=weights, revision=revision, device=device, dtype=dtype
        )
        self.dim = int(model.config.hidden_size)
        self.preprocessing = DINOV2_PREPROCESSING
        self._config = {
            "encoder": name,
            "backend": "transformers.Dinov2Model",
            **record,
            "preprocessing": self.preprocessing.to_config(),
            "dtype": dtype_name,
            "output": "CLS token after the final layer norm (last_hidden_state[:, 0])",
            "dim": self.dim,
            "normalized": False,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
        }

    def _forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).last_hidden_state[:, 0]
