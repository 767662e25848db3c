"""SigLIP So400m/14 at 384 px (``google/siglip-so400m-patch14-384``): image and text embeddings,
and zero-shot probabilities used for filtering.

Image output: ``SiglipModel.get_image_features(...).pooler_output``, the attention-pooling head
output (1152-d), raw. Text output: ``get_text_features(...).pooler_output``, texts padded to the
model's full context (``padding="max_length"``, 64 tokens) as SigLIP was trained, no attention mask.
Preprocessing follows the model's own: resize to the square image size (384x384, bicubic, aspect
ratio not kept, no crop), mean/std 0.5.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Sequence

import numpy as np

from geofidelity_bench.encoders._hf import load_tokenizer, load_transformers_encoder
from geofidelity_bench.encoders.base import Preprocessing, TextImageEncoder

SIGLIP_IDS = {"siglip-so400m": "google/siglip-so400m-patch14-384"}


def siglip_preprocessing(size: int) -> Preprocessing:
    """What ``SiglipImageProcessor`` does for a checkpoint of image size ``size`` (exact resize to
    size x size, bicubic, rescale 1/255, mean/std 0.5): equal to its ``pixel_values`` (tests/test_parity.py)."""
    return Preprocessing(
        resize=(size, size), resize_mode="exact", crop=None, interpolation="bicubic", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)
    )


class SigLIPEncoder(TextImageEncoder):
    """SigLIP image and text towers; ``zero_shot_probs`` uses the model's logit scale and bias."""

    def __init__(
        self,
        name: str = "siglip-so400m",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        dtype: Any = "float32",
    ) -> None:
        super().__init__()
        from transformers import SiglipModel

        model, dtype_name, record, source, local = load_transformers_encoder(
            self, SiglipModel, SIGLIP_IDS, name, "siglip", weights=weights, revision=revision, device=device, dtype=dtype
        )
        self.tokenizer = load_tokenizer(name, source, local, revision)
        self.dim = int(model.config.vision_config.hidden_size)
        text_dim = int(getattr(model.config.text_config, "projection_size", None) or model.config.text_config.hidden_size)
        if text_dim != self.dim:
            raise ValueError(f"SigLIP weights {source!r}: image dim {self.dim} != text dim {text_dim}")
        self.max_text_tokens = int(model.config.text_config.max_position_embeddings)
        size = int(model.config.vision_config.image_size)
        self.preprocessing = siglip_preprocessing(size)
        self._config = {
            "encoder": name,
            "backend": "transformers.SiglipModel",
            **record,
            "preprocessing": self.preprocessing.to_config(),
            "dtype": dtype_name,
            "output": "get_image_features().pooler_output (attention-pooling head)",
            "text_output": f"get_text_features().pooler_output, padding=max_length ({self.max_text_tokens} tokens), truncated",
            "dim": self.dim,
            "normalized": False,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
        }

    def _forward(self, pixel_values):
        return self.model.get_image_features(pixel_values=pixel_values).pooler_output

    def _logit_scale_bias(self) -> tuple[float, float]:
        scale = float(self.model.logit_scale.detach().float().exp().cpu())
        bias = float(self.model.logit_bias.detach().float().cpu())
        return scale, bias

    def embed_text(self, texts: Sequence[str] | str, *, batch_size: int = 64) -> np.ndarray:
        """Texts -> float32 (n, dim); warns for (and truncates) texts over the context length."""
        import torch

        texts = [texts] if isinstance(texts, str) else list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for text in texts:
            n_tokens = len(self.tokenizer(text, truncation=False)["input_ids"])
            if n_tokens > self.max_text_tokens:
                warnings.warn(
                    f"text {text!r} is {n_tokens} SigLIP tokens, more than the {self.max_text_tokens}-token "
                    "context; it is truncated",
                    stacklevel=2,
                )
        for start in range(0, len(texts), batch_size):
            chunk = texts[start : start + batch_size]
            enc = self.tokenizer(
                chunk, padding="max_length", truncation=True, max_length=self.max_text_tokens, return_tensors="pt"
            )
            float32 = next(self.model.parameters()).dtype == torch.float32
            with torch.inference_mode(), self._forward_context(float32):
                feats = self.model.get_text_features(input_ids=enc["input_ids"].to(self.device)).pooler_output
            out[start : start + len(chunk)] = feats.float().cpu().numpy()
        return out
