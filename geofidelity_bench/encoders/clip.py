"""OpenAI CLIP ViT-B/32 (``openai/clip-vit-base-patch32``): image and text embeddings.

Image output: ``CLIPModel.get_image_features(...).pooler_output``, the projected CLS embedding
(512-d for ViT-B/32), raw. Text output: ``get_text_features(...).pooler_output``, the projected
EOS embedding. Preprocessing follows OpenAI's: shorter side to the model's image size (224),
bicubic, center crop, CLIP mean/std. Texts longer than the 77-token context are truncated with a
warning naming the text.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Sequence

import numpy as np

from geofidelity_bench.encoders._hf import load_tokenizer, load_transformers_encoder
from geofidelity_bench.encoders.base import Preprocessing, TextImageEncoder

CLIP_IDS = {"clip-vit-b32": "openai/clip-vit-base-patch32"}
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def clip_preprocessing(size: int) -> Preprocessing:
    """What ``CLIPImageProcessor`` does for a checkpoint of image size ``size`` (shortest_edge =
    crop = size, bicubic, floor-rounded center crop, rescale 1/255, CLIP mean/std): equal to its
    ``pixel_values`` (tests/test_parity.py)."""
    return Preprocessing(resize=size, crop=size, interpolation="bicubic", mean=CLIP_MEAN, std=CLIP_STD)


class CLIPEncoder(TextImageEncoder):
    """CLIP image and text towers sharing one embedding space."""

    def __init__(
        self,
        name: str = "clip-vit-b32",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        dtype: Any = "float32",
    ) -> None:
        super().__init__()
        from transformers import CLIPModel

        model, dtype_name, record, source, local = load_transformers_encoder(
            self, CLIPModel, CLIP_IDS, name, "clip", weights=weights, revision=revision, device=device, dtype=dtype
        )
        self.tokenizer = load_tokenizer(name, source, local, revision)
        self.dim = int(model.config.projection_dim)
        self.max_text_tokens = int(model.config.text_config.max_position_embeddings)
        size = int(model.config.vision_config.image_size)
        self.preprocessing = clip_preprocessing(size)
        self._config = {
            "encoder": name,
            "backend": "transformers.CLIPModel",
            **record,
            "preprocessing": self.preprocessing.to_config(),
            "dtype": dtype_name,
            "output": "get_image_features().pooler_output (projected CLS after post-layernorm)",
            "text_output": f"get_text_features().pooler_output (projected EOS), max {self.max_text_tokens} tokens, truncated",
            "dim": self.dim,
            "normalized": False,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
        }

    def _forward(self, pixel_values):
        return self.model.get_image_features(pixel_values=pixel_values).pooler_output

    def _logit_scale_bias(self) -> tuple[float, float]:
        return float(math.exp(float(self.model.logit_scale.detach().float().cpu()))), 0.0

    def embed_text(self, texts: Sequence[str] | str, *, batch_size: int = 64) -> np.ndarray:
        """Texts -> float32 (n, dim); warns for (and truncates) texts over the context length."""
        import torch

        texts = [texts] if isinstance(texts, str) else list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for text in texts:
            n_tokens = len(self.tokenizer(text, truncation=False)["input_ids"])
            if n_tokens > self.max_text_tokens:
                warnings.warn(
                    f"text {text!r} is {n_tokens} CLIP tokens, more than the {self.max_text_tokens}-token "
                    "context; it is truncated",
                    stacklevel=2,
                )
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            enc = self.tokenizer(
                chunk, padding=True, truncation=True, max_length=self.max_text_tokens, return_tensors="pt"
            )
            float32 = next(self.model.parameters()).dtype == torch.float32
            with torch.inference_mode(), self._forward_context(float32):
                feats = self.model.get_text_features(
                    input_ids=enc["input_ids"].to(self.device), attention_mask=enc["attention_mask"].to(self.device)
                ).pooler_output
            out[start : start + len(chunk)] = feats.float().cpu().numpy()
        return out
