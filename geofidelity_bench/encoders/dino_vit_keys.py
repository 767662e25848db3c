r"""The DINO-ViT key extractor of Map Feature Perception (docs/benchmark.md section 10, Map Feature Perception (MFP)): CLS token and last-layer keys.

A self-supervised DINO ViT (``facebook/dino-vitb8`` by default) gives two descriptors per image,
the inputs of the MFP terms in :mod:`geofidelity_bench.metrics.mfp`:

* the **CLS token** of the last transformer block, :math:`z_L^0` in the paper's notation, i.e. the
  output of the last ``ViTLayer`` *before* the model's final layer norm (``cls_source="last_block"``,
  the default). This follows the paper's definition ("the [CLS] token after passing through the
  L layers, :math:`z_L^0`") and the reference implementation it builds on (Splice, Tumanyan et al.
  2022), which hooks the last block's output. ``cls_source="final_layernorm"`` takes
  ``last_hidden_state[:, 0]`` (after the final layer norm) instead; the choice is recorded in the config.
* the **keys** :math:`K^L = \mathrm{LN}(X^L) W_K^L + b_K^L` of the last self-attention layer for all
  :math:`n + 1` tokens (CLS + patches), heads concatenated: exactly the output of that layer's key
  projection (``model.layers[-1].attention.k_proj`` in transformers 5,
  ``model.encoder.layer[-1].attention.attention.key`` in transformers 4), captured with a forward
  hook that is removed after every forward pass, even one that fails.

Preprocessing of image files (recorded in ``extractor.config``): decode to RGB
(:func:`~geofidelity_bench.images.load_image`), resize to ``image_size x image_size`` (bicubic,
PIL, aspect ratio not kept: map tiles are square), scale to [0, 1], ImageNet mean/std. When
``image_size`` differs from the checkpoint's (224 for dino-vitb8) the position embeddings are
interpolated (``interpolate_pos_encoding=True``). The weights load through the encoders' shared
transformers loader (:func:`geofidelity_bench.encoders._hf.load_pretrained`).

Importing this module loads torch (it defines a ``torch.nn.Module``); ``geofidelity_bench.encoders``
does not import it.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from geofidelity_bench.encoders.base import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    EncoderUnavailableError,
    Preprocessing,
    RecordedConfig,
    resolve_device,
)
from geofidelity_bench.encoders.devices import call_in_context
from geofidelity_bench.errors import offline_hint
from geofidelity_bench.images import ImageSource, load_image
from geofidelity_bench.metrics.mfp import DEFAULT_IMAGE_SIZE, INPUT_RANGES, MFPFeatures

DEFAULT_MFP_MODEL = "facebook/dino-vitb8"
CLS_SOURCES = ("last_block", "final_layernorm")


class MFPModelUnavailableError(EncoderUnavailableError):
    """The MFP backbone's weights cannot be had; the message says how to run offline."""


#: How to run MFP without the Hub (the one wording of :func:`geofidelity_bench.errors.offline_hint`).
OFFLINE_HINT = offline_hint(
    flag="--model", python_arg="model=", weights_id=DEFAULT_MFP_MODEL, saved_with="ViTModel.save_pretrained()"
)


# -- the backbone ------------------------------------------------------------------------------


def _last_layer(model: torch.nn.Module) -> torch.nn.Module:
    layers = getattr(model, "layers", None)  # transformers >= 5
    if layers is None:
        layers = model.encoder.layer  # transformers 4.x
    return layers[-1]


def _key_projection(layer: torch.nn.Module) -> torch.nn.Module:
    attention = layer.attention
    if hasattr(attention, "k_proj"):  # transformers >= 5
        return attention.k_proj
    return attention.attention.key  # transformers 4.x


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class DinoViTFeatureExtractor(RecordedConfig, torch.nn.Module):
    """A frozen DINO ViT returning the final CLS token and the last layer's keys.

    The model is frozen (``requires_grad=False``) and always in eval mode: ``train()`` is a no-op,
    so a parent module's ``train()`` cannot turn dropout on. Gradients still flow to the *input*.

    Args:
        model: Hub id or local ``save_pretrained`` folder of a ``ViTModel`` checkpoint
            (default ``facebook/dino-vitb8``).
        revision: Hub revision.
        image_size: side of the square input (default 224); must be a multiple of the patch size.
        mean, std: per-channel normalization after scaling to [0, 1] (default ImageNet).
        interpolation: PIL filter used to resize image files.
        cls_source: ``"last_block"`` (paper, default) or ``"final_layernorm"``.
        device: torch device (default: cuda if available, else cpu).

    Raises:
        MFPModelUnavailableError: the weights cannot be loaded (offline, unknown id, not a ViT).
    """

    def __init__(
        self,
        model: str | os.PathLike | None = None,
        *,
        revision: str | None = None,
        image_size: int = DEFAULT_IMAGE_SIZE,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        interpolation: str = "bicubic",
        cls_source: str = "last_block",
        device: Any | None = None,
    ) -> None:
        super().__init__()
        from transformers import ViTModel

        from geofidelity_bench.encoders._hf import load_pretrained

        if cls_source not in CLS_SOURCES:
            raise ValueError(f"unknown cls_source {cls_source!r}; one of {list(CLS_SOURCES)}")
        target_device = resolve_device(device)  # a device that cannot be had fails before the weights load
        image_size = int(image_size)
        if len(mean) != 3 or len(std) != 3 or any(s <= 0 for s in std):
            raise ValueError(f"mean and std must have 3 values each (std > 0), got {mean} and {std}")
        vit, record, _, _ = load_pretrained(
            _ViTNoPooler(ViTModel),
            encoder="mfp",
            expected_model_type="vit",
            default_id=DEFAULT_MFP_MODEL,
            weights=model,
            revision=revision,
            torch_dtype=torch.float32,
            error=MFPModelUnavailableError,
            hint=OFFLINE_HINT,  # MFP's own advice: the encoder flags do not apply here
        )
        patch = vit.config.patch_size
        patch = int(patch[0] if isinstance(patch, (tuple, list)) else patch)
        if image_size < patch or image_size % patch:
            raise ValueError(f"image_size {image_size} must be a positive multiple of the patch size {patch}")
        native = vit.config.image_size
        native = int(native[0] if isinstance(native, (tuple, list)) else native)
        vit.requires_grad_(False)
        self.model = vit.eval()
        self.cls_source = cls_source
        self.image_size = image_size
        self.patch_size = patch
        self.n_tokens = (image_size // patch) ** 2 + 1
        self.dim = int(vit.config.hidden_size)
        self._interpolate_pos = image_size != native
        self.preprocessing = Preprocessing(
            resize=(image_size, image_size), crop=None, resize_mode="exact", interpolation=interpolation,
            mean=tuple(float(v) for v in mean), std=tuple(float(v) for v in std),
        )
        self.register_buffer("_mean", torch.tensor(self.preprocessing.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("_std", torch.tensor(self.preprocessing.std).view(1, 3, 1, 1), persistent=False)
        self._config = {
            "metric": "mfp",
            "backbone": "transformers.ViTModel",
            **record,
            "image_size": image_size,
            "native_image_size": native,
            "interpolate_pos_encoding": self._interpolate_pos,
            "patch_size": patch,
            "n_tokens": self.n_tokens,
            "hidden_size": self.dim,
            "preprocessing": self.preprocessing.to_config(),
            "dtype": "float32",
            "cls": (
                "CLS token of the last transformer block, before the final layer norm (z_L^0)"
                if cls_source == "last_block"
                else "CLS token after the final layer norm (last_hidden_state[:, 0])"
            ),
            "cls_source": cls_source,
            "keys": "output of the last layer's key projection, all tokens (CLS + patches), heads concatenated",
            "self_similarity": "cosine similarity of key vectors, (n+1)x(n+1) per image",
            "attn_implementation": getattr(vit.config, "_attn_implementation", None),
        }
        self.to(target_device)

    # -- identity ---------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return str(self._mean.device)

    def _recorded(self) -> dict[str, Any]:
        """The config with the dtype the backbone ran in (its parameters' dtype at the last forward,
        or now before any): moving the extractor (or a loss holding it) to bfloat16 is recorded."""
        ran = getattr(self, "_ran_dtype", None) or _dtype_name(next(self.model.parameters()).dtype)
        return {**self._config, "dtype": ran}

    @property
    def last_layer(self) -> torch.nn.Module:
        """The last ``ViTLayer`` (its output is the ``last_block`` CLS source)."""
        return _last_layer(self.model)

    @property
    def key_projection(self) -> torch.nn.Module:
        """The last layer's key ``Linear``, where the keys are captured."""
        return _key_projection(self.last_layer)

    def train(self, mode: bool = True) -> "DinoViTFeatureExtractor":
        """Always eval: the extractor is a fixed measuring instrument (no dropout, ever)."""
        return super().train(False)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(weights={self._config.get('weights')!r}, image_size={self.image_size}, "
            f"cls_source={self.cls_source!r}, device={self.device!r})"
        )

    # -- preprocessing ----------------------------------------------------------------------------
    def preprocess(self, image: ImageSource, name: str | None = None) -> np.ndarray:
        """Decodes one image file/PIL/array into the normalized float32 (3, S, S) array fed to the model."""
        return self.preprocessing(load_image(image, name=name))

    def prepare(self, images: torch.Tensor, input_range: str = "unit") -> torch.Tensor:
        """Differentiable tensor preprocessing: range -> [0, 1], resize to S x S, normalize.

        Args:
            images: (B, 3, H, W) or (3, H, W) float tensor.
            input_range: ``"unit"`` ([0, 1]), ``"symmetric"`` ([-1, 1], e.g. a tanh generator) or
                ``"normalized"`` (already ``(x - mean) / std`` with this extractor's mean/std).
                Resizing (bicubic, antialiased, ``torch.nn.functional.interpolate``) only happens
                when H or W differ from ``image_size``; it is not bit-identical to the PIL resize
                used for image files.
        """
        if input_range not in INPUT_RANGES:
            raise ValueError(f"unknown input_range {input_range!r}; one of {list(INPUT_RANGES)}")
        if not torch.is_tensor(images):
            raise TypeError(f"expected a torch tensor, got {type(images).__name__}")
        x = images.unsqueeze(0) if images.dim() == 3 else images
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"expected a (B, 3, H, W) or (3, H, W) tensor, got shape {tuple(images.shape)}")
        x = x.to(device=self._mean.device, dtype=torch.float32)
        if input_range == "symmetric":
            x = (x + 1.0) / 2.0
        if x.shape[-2:] != (self.image_size, self.image_size):
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bicubic", align_corners=False,
                              antialias=True)
        if input_range != "normalized":
            x = (x - self._mean) / self._std
        return x

    # -- features ---------------------------------------------------------------------------------
    def forward(self, pixel_values: torch.Tensor) -> MFPFeatures:
        """(B, 3, S, S) normalized tensor -> :class:`MFPFeatures` (differentiable w.r.t. the input).

        A float32 backbone runs in IEEE float32 (no caller autocast, TF32 and oneDNN's bf16 off:
        :meth:`_forward_context`), and so does the backward of these features when a loss is
        differentiated through them later (:func:`~geofidelity_bench.encoders.devices.call_in_context`):
        the gradient is computed at the precision the config records, not at whatever the caller has
        turned on by the time it calls ``backward()``."""
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != (3, self.image_size, self.image_size):
            raise ValueError(
                f"expected normalized pixel values of shape (B, 3, {self.image_size}, {self.image_size}), "
                f"got {tuple(pixel_values.shape)}; use prepare() for other sizes or ranges"
            )
        dtype = next(self.model.parameters()).dtype
        self._ran_dtype = _dtype_name(dtype)  # what is recorded is what ran (the loss may be moved to bf16)
        float32 = dtype == torch.float32
        trainable = [p for p in self.parameters() if p.requires_grad]  # none while frozen (the default)
        cls, keys = call_in_context(lambda: self._forward_context(float32), self._features, (pixel_values,),
                                    trainable)
        return MFPFeatures(cls=cls.float(), keys=keys.float())

    def _features(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(CLS, keys) of one forward of the backbone, in its dtype (run inside the forward context)."""
        captured: dict[str, torch.Tensor] = {}

        def keep_keys(module, inputs, output):
            captured["keys"] = output

        def keep_block(module, inputs, output):
            captured["block"] = output[0] if isinstance(output, (tuple, list)) else output

        handles = []
        try:
            handles.append(self.key_projection.register_forward_hook(keep_keys))
            if self.cls_source == "last_block":
                handles.append(self.last_layer.register_forward_hook(keep_block))
            out = self.model(pixel_values=pixel_values, interpolate_pos_encoding=self._interpolate_pos)
        finally:
            for handle in handles:
                handle.remove()
        if "keys" not in captured:
            raise RuntimeError("the key projection of the last attention layer was not called; unsupported ViT variant")
        cls = captured["block"][:, 0] if self.cls_source == "last_block" else out.last_hidden_state[:, 0]
        return cls, captured["keys"]

    def extract(self, images: torch.Tensor, input_range: str = "unit") -> MFPFeatures:
        """:meth:`prepare` then :meth:`forward`."""
        return self(self.prepare(images, input_range))


class _ViTNoPooler:
    """``ViTModel.from_pretrained`` without the pooler (MFP never uses it; DINO ships none)."""

    def __init__(self, cls: Any) -> None:
        self._cls = cls

    def from_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        return self._cls.from_pretrained(*args, add_pooling_layer=False, **kwargs)



__all__ = [
    "CLS_SOURCES",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_MFP_MODEL",
    "DinoViTFeatureExtractor",
    "MFPFeatures",
    "MFPModelUnavailableError",
]
