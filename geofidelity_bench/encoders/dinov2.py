"""DINOv2 ViT encoders (the benchmark's reference is ViT-B/14, ``facebook/dinov2-base``).

Output: the CLS token after the final layer norm, i.e. ``Dinov2Model(...).last_hidden_state[:, 0]``
(768-d for ViT-B/14). Preprocessing (docs/benchmark.md section 4, Embeddings): shorter side to 256
(bicubic), center crop 224 placed as torchvision's ``CenterCrop`` places it (round half to even),
ImageNet mean/std, float32: pixel for pixel torchvision's ``Resize(256, bicubic)`` +
``CenterCrop(224)`` + ``ToTensor`` + ``Normalize`` on a PIL image, the paper's pipeline. It is done
here with PIL + numpy rather than through an ``AutoImageProcessor``, whose defaults may change
between releases.

Position embeddings: the checkpoint's 37x37 grid is resized to the 16x16 patch grid of a 224
input as torch.hub's DINOv2 (``dinov2_vitb14``, the paper's model) does it, not as transformers'
``Dinov2Model`` does: bicubic with ``scale_factor = (grid + 0.1) / 37`` (its ``interpolate_offset``),
no antialias, in float32 (:func:`use_torch_hub_pos_encoding`). The two sample different source
positions, so the same weights give different features.
"""

from __future__ import annotations

import math
import os
import types
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

DINOV2_PREPROCESSING = Preprocessing(
    resize=256, crop=224, interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_rounding="round"
)

#: torch.hub DINOv2's ``interpolate_offset`` (facebookresearch/dinov2, ``DinoVisionTransformer``).
HUB_INTERPOLATE_OFFSET = 0.1

POS_ENCODING_RECORD = (
    "torch.hub DINOv2 interpolate_pos_encoding: patch grid M x M resized with "
    "torch.nn.functional.interpolate(mode='bicubic', align_corners=False, antialias=False, "
    f"scale_factor=((h // patch + {HUB_INTERPOLATE_OFFSET}) / M, (w // patch + {HUB_INTERPOLATE_OFFSET}) / M)) "
    "in float32; unchanged when the grids match"
)


def _torch_hub_interpolate_pos_encoding(self, embeddings, height: int, width: int):
    """``Dinov2Embeddings.interpolate_pos_encoding`` computed as torch.hub's DINOv2 computes it."""
    import torch
    import torch.nn.functional as F

    num_patches = embeddings.shape[1] - 1
    num_positions = self.position_embeddings.shape[1] - 1
    if num_patches == num_positions and height == width:
        return self.position_embeddings
    pos = self.position_embeddings.float()
    dim = embeddings.shape[-1]
    grid = int(math.sqrt(num_positions))
    patch_h, patch_w = self.patch_embeddings.patch_size
    rows, cols = height // patch_h, width // patch_w
    scale = (float(rows + HUB_INTERPOLATE_OFFSET) / grid, float(cols + HUB_INTERPOLATE_OFFSET) / grid)
    patch_pos = F.interpolate(
        pos[:, 1:].reshape(1, grid, grid, dim).permute(0, 3, 1, 2),
        scale_factor=scale, mode="bicubic", align_corners=False, antialias=False,
    )
    if tuple(patch_pos.shape[-2:]) != (rows, cols):
        raise RuntimeError(f"position grid {grid}x{grid} resized to {tuple(patch_pos.shape[-2:])}, not {(rows, cols)}")
    patch_pos = patch_pos.permute(0, 2, 3, 1).reshape(1, rows * cols, dim)
    return torch.cat((pos[:, :1], patch_pos), dim=1).to(self.position_embeddings.dtype)


def use_torch_hub_pos_encoding(model) -> None:
    """Makes a transformers ``Dinov2Model`` interpolate its position embeddings as torch.hub's DINOv2."""
    model.embeddings.interpolate_pos_encoding = types.MethodType(_torch_hub_interpolate_pos_encoding, model.embeddings)


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
        use_torch_hub_pos_encoding(model)
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
            "position_embeddings": POS_ENCODING_RECORD,
        }

    def _forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).last_hidden_state[:, 0]
